"""A lean forward pass for Llama-architecture models (Llama; Qwen2, which adds q/k/v biases), on weights it owns.

Same math as transformers' LlamaForCausalLM (RMSNorm in fp32, RoPE, GQA attention, SwiGLU) in one
forward with fewer ops: q/k/v and gate/up are fused into one matmul each, q and k are rotated
together, K/V are written straight into the pointer cache's buffers, residuals are added in place,
and no mask is built for single-token steps. On a CPU a decode step pays a fixed cost per op as well
as the weight reads, and transformers' generic forward spends a large share of a step on the former.

The fused, pre-transposed matrices are copies the lean forward owns: the transformers module is read
once and never changed, so it stays usable as is (transformers' generate(), the reference in tests).
The copy is made only when it fits in a quarter of RAM (else the transformers module runs); measured,
it did not raise the process's RSS (docs/benchmarks.md). The embedding and the norm weights are read in place, never written.

Each projection is one `Weight` that runs the kernel measured fastest on this host per row count
(kernels.py): specviz's own few-row kernel (native.py, compiled here; at 1-8 rows it streams the weights up
to twice as fast as MKL's and oneDNN's: benchmarks/results/native-forward.md), the oneDNN linear on a packed
copy (prefill and long verifications: benchmarks/forward/onednn_cost.py), or MKL's matmul where there is no
native kernel. For one sequence of a few new fp32 tokens, a layer's norms, RoPE, attention and SiLU gate run
fused in native.c too (`_native_layer`). PyTorch has no public API for a pre-packed oneDNN linear, so the
adapter calls the two private ops torch.compile's CPU freezing pass uses; a build without them falls back to
the plain matmul. SPECVIZ_NATIVE=0 turns native.c off, SPECVIZ_ONEDNN=0 packing, SPECVIZ_FAST_FORWARD=0 the
lean forward.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F

from . import blocks as gguf_blocks
from . import kernels, native
from .cache import KVCache, room
from .permodel import PerModel
from .sliding import layer_masks

# native.c's fused layer steps for up to FUSED_ROWS new tokens and FUSED_WORK query-key pairs; beyond, SDPA's
# blocked attention is faster (AMD EPYC, 2 threads: n = 8 after 2,000 cached tokens 96 ms fused vs 83 ms)
FUSED_ROWS, FUSED_WORK = 17, 8192
NATIVE_ROWS = native.NATIVE_ROWS  # the native kernel's rows (native.py)
ARCHITECTURES = ("llama", "qwen2")  # Qwen2 is Llama plus q/k/v biases (and optional sliding layers, refused)


def supports(model) -> bool:
    """Llama-family causal LMs (Llama; Qwen2 with its q/k/v biases and no sliding-window layers) whose other
    projections have no bias, on a plain (non-quantized) CPU/CUDA model."""
    cfg = model.config
    if getattr(cfg, "model_type", None) not in ARCHITECTURES or getattr(model, "hf_device_map", None):
        return False
    if "sliding_attention" in (getattr(cfg, "layer_types", None) or ()):
        return False
    if getattr(cfg, "hidden_act", "silu") != "silu" or getattr(cfg, "pretraining_tp", 1) != 1:
        return False
    layer = model.model.layers[0]
    att, mlp = layer.self_attn, layer.mlp
    linears = (att.q_proj, att.k_proj, att.v_proj, att.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj)
    if not all(type(m) is torch.nn.Linear for m in linears):
        return False
    qkv_bias = {m.bias is not None for m in linears[:3]}
    return len(qkv_bias) == 1 and all(m.bias is None for m in linears[3:])


def _fits(model, copies: int) -> bool:
    """`copies` more copies of the model's weights fit in a quarter of RAM (always true off the CPU)."""
    p = next(model.parameters())
    if p.device.type != "cpu":
        return True
    weight_bytes = sum(t.numel() * t.element_size() for t in model.parameters())
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return False
    return copies * weight_bytes <= ram // 4


def _pack_default(model) -> bool:
    """Pack for oneDNN on a CPU with fp32/bf16 weights, when a further copy of them fits easily in RAM."""
    p = next(model.parameters())
    if os.environ.get("SPECVIZ_ONEDNN", "1") == "0" or p.device.type != "cpu":
        return False
    if p.dtype not in (torch.float32, torch.bfloat16) or not torch.backends.mkldnn.is_available():
        return False
    return _fits(model, 2)  # the owned copy and the packed one


class Weight(kernels.Planned):
    """One projection y = x @ W.T (+ b) on an owned matrix, through the kernel measured fastest here per row count.

    The kernels (kernels.py measures them): "native", specviz's own few-row kernel (native.py) on the weight
    in its panels, where it could be built (fp32 on a CPU, beside a oneDNN copy); "onednn", the oneDNN linear on
    a packed copy (prefill and longer verifications); "mkl", torch's matmul on an (in, out) copy, where there is
    no native kernel. The one place the private oneDNN ops are called (benchmarks/forward/onednn_cost.py)."""

    def __init__(self, w: torch.Tensor, pack: bool, bias: torch.Tensor | None = None):  # w (out, in)
        self.bias = bias  # (out,) or None
        self.out_features, self.in_features = w.shape
        self.nbytes = w.numel() * w.element_size()  # what a pass over it reads
        self.packed = None
        if pack:
            try:
                self.packed = torch.ops.mkldnn._reorder_linear_weight(w.contiguous(), 4)
            except (RuntimeError, AttributeError):  # a build without oneDNN: the plain matmul it is
                self.packed = None
        # the native kernel beside oneDNN (which takes the many-row calls: prefill), fp32 on a CPU that built it:
        # the build's id (kernel plans are per build), else None
        fits = self.packed is not None and w.device.type == "cpu" and w.dtype == torch.float32
        self.native = native.build_id() if fits else None
        # owned: the native kernel's panels (native.pack), or MKL's (in, out) matrix
        self.w = native.pack(w) if self.native else w.t().contiguous()
        # threads -> the kernel per row count 0..ROWS[-1] (measured here)
        self.plan: dict[int, list[str]] = {}

    def kernels(self, rows: int = 1) -> dict:
        """{name: fn(x) -> y} of the kernels this Weight can run `rows` rows on (the native kernel beyond
        NATIVE_ROWS only where nothing else can: it is correct at any row count, fast at few)."""
        out = {}
        if self.native and rows <= NATIVE_ROWS:
            out["native"] = self._native
        if self.packed is not None:
            out["onednn"] = self._onednn
        if not self.native:
            out["mkl"] = self._mkl
        return out or {"native": self._native}

    def fallback(self, rows: int) -> str:
        """Before a plan: the native kernel up to NATIVE_ROWS rows and oneDNN beyond; without it, MKL for fp32
        single rows and oneDNN for the rest."""
        if self.native:
            return "native" if rows <= NATIVE_ROWS else "onednn"
        single = rows == 1 and self.w.dtype == torch.float32
        return "onednn" if self.packed is not None and not single else "mkl"

    def _native(self, x: torch.Tensor) -> torch.Tensor:
        return native.gemv(x, self.w, self.out_features, self.bias)

    def _onednn(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")

    def _mkl(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mm(x, self.w) if self.bias is None else torch.addmm(self.bias, x, self.w)


def _fuse(linears: list, pack: bool) -> Weight:
    """A new (in, out) matrix holding these projections side by side (and their biases, when they have them);
    the Linears are only read."""
    bias = None if linears[0].bias is None else torch.cat([lin.bias.detach() for lin in linears]).contiguous()
    return Weight(torch.cat([lin.weight.detach() for lin in linears]), pack, bias)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm as transformers' LlamaRMSNorm computes it: in fp32, then scaled by w in the input dtype."""
    if x.dtype == torch.float32:
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))
    h = x.float()
    return w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


class LeanForward:
    """Llama or Qwen2 (supports()), callable like the HF model for what the engine needs: (input_ids, cache, ...) -> logits (B, T, V).

    On the model's own weights (fp32 copies it owns), or on a GGUF file's blocks (`blocks`: the weights as the
    file ships them, read by native.c's block kernels; the transformers module is then a skeleton without
    weights, models.py)."""

    def __init__(self, model, blocks: gguf_blocks.Blocks | None = None):
        cfg = model.config
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.eps = cfg.rms_norm_eps
        self.config = cfg
        self.weight_format = "fp32" if blocks is None else "gguf"
        if blocks is not None:
            self._from_blocks(model, blocks)
        else:
            self._from_module(model)
        # native.c's fused norm/RoPE/attention/SiLU steps for fp32 CPU weights (SPECVIZ_NATIVE=0: torch's ops)
        self.fused = bool(self.head.native)
        if os.environ.get("SPECVIZ_KERNELS", "measure") != "fixed":
            self.measure_kernels()

    def _from_blocks(self, model, blocks: gguf_blocks.Blocks) -> None:
        """Every projection on the file's blocks (q, k, v and gate, up stacked as _fuse stacks them), the norms
        as the file's F32 vectors, the embedding read from the (tied) LM head's blocks."""
        names = [gguf_blocks.layer_names(i) for i in range(model.config.num_hidden_layers)]
        self.head = blocks.weight(
            "output.weight" if "output.weight" in blocks.tensors else "token_embd.weight"
        )
        self.embed = (
            self.head if "output.weight" not in blocks.tensors else blocks.weight("token_embd.weight")
        )
        self.layers = [
            (
                blocks.vector(*n["norm_in"]),
                blocks.weight(*n["qkv"]),
                blocks.weight(*n["o"]),
                blocks.vector(*n["norm_post"]),
                blocks.weight(*n["gate_up"]),
                blocks.weight(*n["down"]),
            )
            for n in names
        ]
        self.norm = blocks.vector("output_norm.weight")
        self.rotary = type(model.model.rotary_emb)(
            config=model.config
        )  # its own buffers (the module's are meta)
        self.weight_bytes = blocks.bytes

    def _from_module(self, model) -> None:
        inner = model.model
        pack = _pack_default(model)
        with torch.no_grad():
            self.head = _fuse([model.lm_head], pack)  # (H, V)
            self.layers = [
                (
                    layer.input_layernorm.weight.detach(),
                    _fuse([layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj], pack),
                    _fuse([layer.self_attn.o_proj], pack),
                    layer.post_attention_layernorm.weight.detach(),
                    _fuse([layer.mlp.gate_proj, layer.mlp.up_proj], pack),  # (H, 2I)
                    _fuse([layer.mlp.down_proj], pack),
                )
                for layer in inner.layers
            ]
        self.embed, self.norm = inner.embed_tokens.weight.detach(), inner.norm.weight.detach()
        self.rotary = inner.rotary_emb
        self.weight_bytes = sum(w.nbytes for ws in self.weights().values() for w in ws)

    SLOTS = {"qkv": 1, "o": 2, "gate_up": 4, "down": 5}  # a projection's place in a layer's tuple

    def weights(self) -> dict[str, list[Weight]]:
        """Every Weight by projection kind (all layers' of one kind share a shape: one plan each)."""
        out = {name: [layer[slot] for layer in self.layers] for name, slot in self.SLOTS.items()}
        return {**out, "lm_head": [self.head]}

    def measure_kernels(self, refresh: bool = False) -> dict:
        """Measure (or read this host's cached) kernel plan at 1 thread and torch's default, and use it in every
        Weight; returns {threads: {projection: {rows: timings and kernel}}}."""
        groups = {
            n: ws for n, ws in self.weights().items() if any(len(ws[0].kernels(r)) > 1 for r in kernels.ROWS)
        }
        plans = (
            self.plans
        ) = {}  # kept: the host record's quiet calibration of v(n) (roofline.plan_calibration)
        for threads in sorted({1, torch.get_num_threads()}):
            plans[threads] = plan = kernels.plan_for(groups, threads, refresh)
            for name, ws in groups.items():
                for weight in ws:
                    weight.use_plan(threads, plan[name])
        return plans

    def _torch_layer(self, x, layer, weights, cos, sin, mask, b: int, t: int) -> None:
        """One decoder layer on x (BT, H) in place, in torch ops (any batch, dtype and device)."""
        w_in, w_qkv, w_o, w_post, w_gu, w_down = weights
        nh, nkv, hd, eps = self.heads, self.kv_heads, self.head_dim, self.eps
        qk_size, half = (nh + nkv) * hd, hd // 2
        qkv = w_qkv(rms_norm(x, w_in, eps))  # (BT, q+2kv)
        qk = (
            qkv[:, :qk_size].view(b, t, nh + nkv, hd).transpose(1, 2)
        )  # q heads then k heads, (B, NH+KV, T, D)
        qk = qk * cos + torch.cat((-qk[..., half:], qk[..., :half]), dim=-1) * sin  # RoPE; cos (B|1, 1, T, D)
        v = qkv[:, qk_size:].view(b, t, nkv, hd).transpose(1, 2)  # (B, KV, T, D)
        keys, values = layer.update(qk[:, nh:], v)  # into slots start..end-1; the live (B, KV, end, D) views
        att = F.scaled_dot_product_attention(qk[:, :nh], keys, values, attn_mask=mask, enable_gqa=True)
        x.add_(w_o(att.transpose(1, 2).reshape(b * t, nh * hd)))  # (B, NH, T, D) -> (BT, H)
        gate, up = w_gu(rms_norm(x, w_post, eps)).chunk(2, dim=-1)
        x.add_(w_down(F.silu(gate).mul_(up)))

    def _native_stack(self, x, cache, cos, sin, mask, start: int) -> None:
        """Every layer on x (T, H) in place in one native call (native.layers), the new keys and values written
        into the pointer cache's buffers by native.c: the same math as _native_layer's two calls a layer."""
        t, depth = x.shape[0], len(self.layers)
        # built once (~120 us) and kept while the layers hold the same tensors (~15 us to check): a Weight whose
        # matrix or bias was replaced since gets a new stack, never a stale pointer
        stack = self.__dict__.get("_stack")
        if stack is None or stack.layers is not self.layers or not stack.current(self.layers):
            stack = self._stack = native.Stack(self.layers, self.heads, self.head_dim, self.eps)
        buffers = cache.claim(t, depth, x.new_empty(1, self.kv_heads, 0, self.head_dim))
        native.layers(x, stack, buffers, start, cos, sin, mask)
        cache.advance(t, depth)

    def _native_layer(self, x, layer, weights, cos, sin, mask, start: int, whole: bool) -> None:
        """One decoder layer on x (T, H) in place, of one sequence, through native.c: the same math as
        _torch_layer (tests/test_native.py pins them together). whole: every projection runs the native kernel
        at this row count (the plan's choice), so the layer is two native calls with the cache's own update
        between them (a pointer cache takes _native_stack instead: every layer in one call); else one native
        call per step, each projection on its planned kernel."""
        w_in, w_qkv, w_o, w_post, w_gu, w_down = weights
        nh, nkv, hd = self.heads, self.kv_heads, self.head_dim
        t = x.shape[0]
        if whole:
            qkv = native.layer_qkv(x, w_in, self.eps, w_qkv, nh + nkv, hd, cos, sin)
        else:
            qkv = w_qkv(native.rms_norm(x, w_in, self.eps))  # (T, q+2kv)
            native.rope_(qkv, nh + nkv, hd, cos, sin)  # q and k heads, in place
        k = qkv[:, nh * hd : (nh + nkv) * hd].view(1, t, nkv, hd).transpose(1, 2)  # (1, KV, T, D)
        v = qkv[:, (nh + nkv) * hd :].view(1, t, nkv, hd).transpose(1, 2)
        keys, values = layer.update(k, v)  # the live (1, KV, L, D) views
        if whole:
            native.layer_rest(x, qkv, keys, values, mask, start, nh, w_o, w_post, self.eps, w_gu, w_down)
            return
        x.add_(w_o(native.attention(qkv, keys, values, mask, start, nh)))  # (T, NH*D) -> (T, H)
        x.add_(w_down(native.silu_mul(w_gu(native.rms_norm(x, w_post, self.eps)))))

    def matrix(self, which: str) -> torch.Tensor:
        """The embedding ("embed") or, on blocks, the LM head ("head") as an fp32 (V, H) matrix: the tensor itself,
        or its blocks de-quantized (a new tensor, the same values the kernels build)."""
        w = self.embed if which == "embed" else self.head
        if isinstance(w, gguf_blocks.BlockWeight):
            return gguf_blocks.dequant_panels(w, 0, w.panels)[: w.out_features]
        if which != "embed":
            raise ValueError("the fp32 LM head is held in the kernels' layout: read the module's weight")
        return w

    def truncated(self, layers: int) -> "LeanForward":
        """The first `layers` layers + final norm + LM head, sharing every tensor (layer-skip drafts)."""
        view = object.__new__(type(self))  # a subclass's view runs its own layers (gemma.GemmaForward)
        view.__dict__.update(self.__dict__)
        view.layers = self.layers[:layers]
        return view

    def __call__(
        self,
        input_ids: torch.Tensor,
        past_key_values: KVCache,
        attention_mask=None,
        position_ids=None,
        logits_to_keep: int = 0,
        hidden_out: list | None = None,
    ) -> torch.Tensor:
        """input_ids (B, T) after the cache's tokens -> logits (B, T or logits_to_keep, V).

        attention_mask: None (causal over the cache and the new tokens) or a bool (B|1, 1, T, L+T) mask
        (a token tree); position_ids: None (the next T positions) or (B|1, T). hidden_out: a list that gets
        the final-norm hidden states of all T positions, (B, T, H) (the features trained draft heads read)."""
        cache = past_key_values
        b, t = input_ids.shape
        start = cache.length
        end = room(start, t, cache.max_len)
        if isinstance(self.embed, gguf_blocks.BlockWeight):
            x = self.embed.rows(input_ids).view(b * t, -1)  # (BT, H), the blocks' rows de-quantized
        else:
            x = F.embedding(input_ids, self.embed).view(b * t, -1)  # (BT, H)
        if position_ids is None:
            position_ids = torch.arange(start, end, device=x.device)[None]
        cos, sin = self.rotary(x[None], position_ids)  # (B|1, T, D)
        small = t <= FUSED_ROWS and t * end <= FUSED_WORK
        fused = self.fused and small and b == 1 and x.dtype == torch.float32 and x.device.type == "cpu"
        if fused:  # one native call each for the norms, RoPE, attention and the SiLU gate (native.c)
            cos, sin = cos[0].contiguous(), sin[0].contiguous()  # (T, D)
            mask = None if attention_mask is None else attention_mask[0, 0].to(torch.uint8).contiguous()
            whole = all(self.layers[0][slot].kernel(t) == "native" for slot in self.SLOTS.values())
            if whole and isinstance(cache, KVCache):
                self._native_stack(x, cache, cos, sin, mask, start)
            else:
                for layer, weights in zip(cache.layers, self.layers):
                    self._native_layer(x, layer, weights, cos, sin, mask, start, whole)
        else:
            mask = (
                attention_mask if attention_mask is not None or t == 1 else causal_mask(start, end, x.device)
            )
            for layer, weights in zip(cache.layers, self.layers):
                self._torch_layer(x, layer, weights, cos[:, None], sin[:, None], mask, b, t)
        x = x.view(b, t, -1)
        if hidden_out is not None:
            x = rms_norm(x, self.norm, self.eps)
            hidden_out.append(x)
        if logits_to_keep:
            x = x[:, -logits_to_keep:]
        if hidden_out is None:
            x = rms_norm(x, self.norm, self.eps)
        return self.head(x.reshape(-1, x.shape[-1])).view(b, x.shape[1], -1)  # (B, T, V)


def causal_mask(start: int, end: int, device) -> torch.Tensor:
    """(1, 1, T, end) bool for T = end − start new tokens after `start` cached ones: query i sees keys <= start + i."""
    keys = torch.arange(end, device=device)
    return (keys[None, :] <= torch.arange(start, end, device=device)[:, None])[None, None]


_FAST = PerModel()  # model -> its lean forward, released with the model (never keyed by id(model))


def forward_fn(model):
    """logits = f(input_ids, cache, attention_mask=None, position_ids=None, logits_to_keep=0) for `model`.

    LeanForward where the architecture fits and its copy of the weights fits in RAM (built once per model),
    else the transformers module. A layer-skip view reuses its target's lean forward, cut after L layers.
    """
    if hasattr(model, "skip_of"):  # a layer-skip view: the target's lean forward, cut after L layers
        base, layers = model.skip_of
        full = forward_fn(base()) if base() is not None else None
        if isinstance(full, LeanForward):
            return full.truncated(layers)
    gguf = getattr(model, "specviz_gguf", None)  # a skeleton on a GGUF's blocks (models.py)
    if gguf is not None:  # the skeleton names its forward's class (models.py: gemma.GemmaForward for Gemma-3)
        kind = getattr(model, "specviz_forward", LeanForward)
        return _FAST.get(model, "fast", lambda: kind(model, gguf()))
    if os.environ.get("SPECVIZ_FAST_FORWARD", "1") != "0" and supports(model) and _fits(model, 1):
        return _FAST.get(model, "fast", lambda: LeanForward(model))

    def hf(
        input_ids, past_key_values, attention_mask=None, position_ids=None, logits_to_keep=0, hidden_out=None
    ):
        if attention_mask is not None and position_ids is not None:  # a tree mask: keep sliding windows
            attention_mask = layer_masks(model, attention_mask, position_ids, past_key_values.length)
        out = model(
            input_ids,
            past_key_values=past_key_values,
            attention_mask=attention_mask,
            position_ids=position_ids,
            logits_to_keep=logits_to_keep,
            output_hidden_states=hidden_out is not None,
        )
        if hidden_out is not None:
            hidden_out.append(out.hidden_states[-1])
        return out.logits

    return hf
