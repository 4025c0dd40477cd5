"""Drafters that are causal LMs: `self`, `model:<id or path>`, `layerskip:L` and `quant[:int8|bf16]`.

A drafter is built fresh for each run (it owns per-run state such as its KV cache) by a factory made
once per (target, spec) (registry.py); the models behind it are loaded once and shared. A layer-skip
view is made once per target and kept only while it lives (runtime/permodel.py); a quantized copy is
kept in the models' LRU, which SPECVIZ_MAX_MODELS bounds.
A `model:` draft with another tokenizer drafts through text (crossvocab.py).
"""

from __future__ import annotations

import copy
import warnings
import weakref

import torch

from ..config import GenerationConfig
from ..runtime.cache import KVCache
from ..runtime.lean import forward_fn
from ..runtime.models import LoadedModel, load_derived, load_model, materialize, own_copy
from ..runtime.permodel import PerModel
from ..sampling import pick, shape_probs
from ..specs import DraftSpec, ModelLoadError
from .base import Draft, Drafter, Factory, Settled, empty_draft
from .crossvocab import CrossVocabDrafter, same_vocab


class ModelDrafter(Drafter):
    """A causal LM drafting token by token with its own pointer KV cache, or with the target's.

    A draft that *is* the target's first L layers (`self`, `layerskip:L`) computes the same keys and
    values as the target does in those layers, so it drafts straight on the target's cache (LayerSkip's
    shared-cache self-speculation): it never re-feeds committed tokens, and after drafting it moves the
    pointer back, so the verify forward overwrites its slots with the target's own.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        device: torch.device,
        name: str,
        cfg: GenerationConfig,
        generator: torch.Generator | None,
        max_len: int,
        out_device: torch.device,
        vocab: int,
        shared_cache: KVCache | None = None,
    ):
        self.model, self.device, self.name, self.cfg, self.generator = model, device, name, cfg, generator
        self.forward = forward_fn(model)
        self.shared = shared_cache is not None
        self.cache = shared_cache if self.shared else KVCache.for_model(model, max_len)
        self.fed: list[int] = []  # the tokens in an own draft cache, in order (unused on a shared one)
        self.out_device, self.vocab = out_device, vocab

    def propose(self, ids: list[int], gamma: int) -> Draft:
        # Feed every committed token the draft cache lacks: one normally (always so on a shared
        # cache), two after an all-accepted round (the last draft token was sampled but never fed).
        start = self.cache.length
        x = torch.tensor([ids[start:]], device=self.device)
        tokens, qs = [], []
        for _ in range(gamma):
            logits = self.forward(x, self.cache, logits_to_keep=1)[0, -1]  # (V,)
            q = shape_probs(logits, self.cfg.temperature, self.cfg.top_k, self.cfg.top_p)
            tok = pick(q, self.cfg.greedy, self.generator)  # stays on device: no host sync
            tokens.append(tok)
            qs.append(q)
            x = tok.view(1, 1)
            # confidence threshold (llama.cpp's p_min): stop after a token the draft is unsure of. That token
            # is kept: its forward is paid for, and it was sampled from q, so the target tests it losslessly.
            if self.cfg.p_min > 0 and float(q.max()) < self.cfg.p_min:  # (a host sync)
                break
        if self.shared:
            # the target's cache as it was: the verify forward rewrites these slots
            self.cache.truncate(start)
        if not tokens:
            if not self.shared:
                self.fed = ids[:]
            return empty_draft(self.out_device, self.name)
        q = self.fit_vocab(torch.stack(qs))  # (γ, V)
        chain = torch.stack(tokens).to(self.out_device)
        if not self.shared:  # an own cache: remember what it holds (the last sampled token is not fed)
            self.fed = ids + chain.tolist()[:-1]
        if self.cfg.tree_budget:
            return self._tree(chain, q)
        return Draft(chain, q, self.name)

    def fit_vocab(self, q: torch.Tensor) -> torch.Tensor:
        """(γ, V_draft) draft probabilities on the target's device, as (γ, V): padded LM heads differ in size."""
        q = q.to(self.out_device)
        if q.shape[-1] < self.vocab:
            return torch.nn.functional.pad(q, (0, self.vocab - q.shape[-1]))
        return q[:, : self.vocab] if q.shape[-1] > self.vocab else q

    def _tree(self, chain: torch.Tensor, q: torch.Tensor) -> Draft:
        """The drafted chain plus, at each depth, the next most likely tokens of q as sibling leaves."""
        budget, width = self.cfg.tree_budget, self.cfg.tree_branching
        alts = torch.topk(q, min(width, q.shape[-1]), dim=-1).indices.tolist()  # (γ, width)
        tokens, parents, node_q, main = [], [], [], -1
        for depth, tok in enumerate(chain.tolist()):
            if len(tokens) >= budget:
                break
            parent = main
            main = len(tokens)
            tokens.append(tok)
            parents.append(parent)
            node_q.append(None if self.cfg.greedy else q[depth])  # sampled from q: tested with min(1, p/q)
            for alt in alts[depth]:
                if alt != tok and len(tokens) < budget and sum(1 for x in parents if x == parent) < width:
                    tokens.append(alt)
                    parents.append(parent)
                    node_q.append(None)  # chosen deterministically: tested as one-hot
        return Draft(
            torch.tensor(tokens, device=self.out_device), None, self.name, parents=parents, node_q=node_q
        )

    def propose_beams(self, beams: list[list[int]], gamma: int) -> list[list[int]]:
        """Every beam's greedy continuation, drafted in batched (B, 1) steps on the target's B-row cache, whose
        pointer then moves back (the verify forward rewrites those slots). 100% of greedy paths verify."""
        if not self.shared:
            raise NotImplementedError(f"{self.name} keeps its own cache: it cannot draft for beams")
        start = self.cache.length
        x = torch.tensor([[ids[-1]] for ids in beams], device=self.device)  # (B, 1)
        out = []
        for _ in range(gamma):
            x = self.forward(x, self.cache)[:, -1].argmax(-1, keepdim=True)  # (B, 1)
            out.append(x)
        self.cache.truncate(start)
        return torch.cat(out, dim=1).tolist() if out else [[] for _ in beams]

    def settle(self, r: Settled) -> None:
        if self.shared:
            return  # the target's cache: the engine has already rolled it back
        # Keep the longest prefix of the draft cache that is still committed (a tree may have
        # accepted a sibling the draft never fed), and leave the last committed token to feed.
        ids, keep = r.ids, 0
        limit = min(len(self.fed), self.cache.length, len(ids) - 1)
        while keep < limit and self.fed[keep] == ids[keep]:
            keep += 1
        self.cache.truncate(keep)
        del self.fed[keep:]


_VIEWS = PerModel()  # target module -> {("skip", L): its layer-skip view}


def layer_skip_model(model: torch.nn.Module, layers: int) -> torch.nn.Module:
    """A view of `model` that runs only its first `layers` decoder layers (weights shared, not copied).

    Made once per (model, layers), so per-run engines reuse it (and its lean forward).
    """
    return _VIEWS.get(model, ("skip", layers), lambda: _layer_skip_view(model, layers))


def _layer_skip_view(model: torch.nn.Module, layers: int) -> torch.nn.Module:
    inner_name = next(n for n in ("model", "transformer") if hasattr(model, n))
    inner = getattr(model, inner_name)
    total = model.config.get_text_config().num_hidden_layers
    if not 1 <= layers < total:
        raise ModelLoadError(f"layerskip needs 1 <= L < {total} (the target's layers), got {layers}")
    if not hasattr(inner, "layers"):
        raise ModelLoadError(f"layerskip does not support {type(model).__name__}")
    config = copy.copy(model.config)
    config.num_hidden_layers = layers
    if getattr(config, "layer_types", None):
        config.layer_types = config.layer_types[:layers]
    shallow_inner = copy.copy(inner)
    shallow_inner._modules = dict(inner._modules)
    shallow_inner.layers = torch.nn.ModuleList(list(inner.layers[:layers]))
    shallow_inner.config = config
    shallow = copy.copy(model)
    shallow._modules = dict(model._modules)
    setattr(shallow, inner_name, shallow_inner)
    shallow.config = config
    # lets the lean forward reuse the target's fused weights; weak, so the view never keeps its target alive
    shallow.skip_of = (weakref.ref(model), layers)
    return shallow


def quantized_model(target: LoadedModel, kind: str) -> torch.nn.Module:
    """A lower-precision copy of the target, made once and kept in the models' LRU (SPECVIZ_MAX_MODELS counts it):
    int8 dynamic (CPU) or bf16 / fp16 weights."""
    if kind == "int8" and target.device.type != "cpu":
        raise ModelLoadError("quant:int8 (dynamic int8) runs on CPU only; use quant:bf16 on GPU")
    return load_derived(f"{target.name}#quant:{kind}", target, lambda: _quantize(target.model, kind)).model


def _quantize(model: torch.nn.Module, kind: str) -> torch.nn.Module:
    model = materialize(model)  # a skeleton on the GGUF's blocks gets its fp32 weights first
    if kind == "int8":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.ao.quantization.quantize_dynamic(
                own_copy(model), {torch.nn.Linear}, dtype=torch.qint8
            ).eval()
    dt = torch.bfloat16 if kind == "bf16" else torch.float16
    return own_copy(model).to(dt).eval()


def build(spec: DraftSpec, target: LoadedModel, ctx):
    """The per-run constructor for self, model:<id>, layerskip:L or quant[:kind] (registry.py calls it)."""
    dev, vocab = target.device, target.vocab_size

    def on(model: torch.nn.Module, device, share_cache: bool = False):
        return Factory(
            lambda cfg, gen, max_len, cache: ModelDrafter(
                model, device, spec.text, cfg, gen, max_len, dev, vocab, cache if share_cache else None
            )
        )

    if spec.name == "self":
        return on(target.model, dev, share_cache=True)
    if spec.name == "layerskip":
        layers = spec["L"] or max(1, target.model.config.get_text_config().num_hidden_layers // 4)
        return on(layer_skip_model(target.model, layers), dev, share_cache=True)
    if spec.name == "quant":
        return on(quantized_model(target, spec["kind"] or ("int8" if dev.type == "cpu" else "bf16")), dev)
    draft = load_model(
        spec.model,
        device=str(dev),
        dtype=str(target.dtype).replace("torch.", ""),
        trust_remote_code=ctx.trust_remote_code,
    )
    if not same_vocab(target, draft):  # another tokenizer: draft through text, judged one-hot (lossless)
        return Factory(
            lambda cfg, gen, max_len, cache: CrossVocabDrafter(draft, target, spec.text, cfg, gen, max_len)
        )
    return on(draft.model, draft.device)
