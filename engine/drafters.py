"""Drafters propose tokens; the target judges them. Two methods: `propose` and `learn`.

A drafter is built fresh for each run (it owns per-run state such as its KV cache) by a factory
made once per (target, spec); the models behind it are loaded once and shared. Specs:
  self              the target drafts for itself (100% greedy acceptance: a sanity check, an upper bound)
  model:<id|path>   a separate causal LM that shares the target's vocabulary
  ngram[:N]         prompt lookup: continue the latest match of the last n <= N tokens (no model)
  layerskip:L       the target's first L layers + final norm + LM head (shared weights, no copy)
  quant[:int8|bf16] a lower-precision copy of the target
  medusa[:PATH]     trained Medusa-1 heads on the target's last hidden state (headdraft.py; default: the shipped
                    heads for the embedded SmolLM2-135M, assets/heads/)
  eagle[:PATH]      a trained EAGLE-style one-layer head drafting autoregressively on the target's features
  auto[:ngram]      picks drafter and γ each round from measured costs (see adaptive.py): n-gram lookup and, where
                    the shipped heads fit the target, eagle and medusa; auto:ngram offers n-gram lookup only
  oracle:A[:C]      the target's own greedy continuation, each token corrupted with probability 1 − A,
                    at a cost of C target steps per drafted token (busy compute; default 0): a drafter of
                    known acceptance, to check the cost model against measurement
"""
from __future__ import annotations

import copy
import random
import time
from collections.abc import Callable

import torch

from .adaptive import AutoDrafter
from .cache import KVCache
from .config import GenerationConfig
from .draft import Draft, Drafter, empty_draft  # noqa: F401  (Draft and Drafter: the interface, re-exported)
from .fastllama import forward_fn
from .headdraft import EagleDrafter, MedusaDrafter, heads_fit, load_heads
from .crossvocab import CrossVocabDrafter, same_vocab
from .models import LoadedModel, ModelLoadError, load_model, on_unload
from .ngram import NgramDrafter
from .sampling import pick, shape_probs


class ModelDrafter(Drafter):
    """A causal LM drafting token by token with its own pointer KV cache, or with the target's.

    A draft that *is* the target's first L layers (`self`, `layerskip:L`) computes the same keys and
    values as the target does in those layers, so it drafts straight on the target's cache (LayerSkip's
    shared-cache self-speculation): it never re-feeds committed tokens, and after drafting it moves the
    pointer back, so the verify forward overwrites its slots with the target's own.
    """

    def __init__(self, model: torch.nn.Module, device: torch.device, name: str, cfg: GenerationConfig,
                 generator: torch.Generator | None, max_len: int, out_device: torch.device, vocab: int,
                 shared_cache: KVCache | None = None):
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
            self.cache.truncate(start)  # the target's cache as it was: the verify forward rewrites these slots
        if not tokens:
            if not self.shared:
                self.fed = ids[:]
            return empty_draft(self.out_device, self.name)
        q = torch.stack(qs).to(self.out_device)  # (γ, V_draft)
        if q.shape[-1] != self.vocab:  # padded LM heads of different sizes
            q = torch.nn.functional.pad(q, (0, self.vocab - q.shape[-1])) if q.shape[-1] < self.vocab else q[:, :self.vocab]
        chain = torch.stack(tokens).to(self.out_device)
        if not self.shared:  # an own cache: remember what it holds (the last sampled token is not fed)
            self.fed = ids + chain.tolist()[:-1]
        if self.cfg.tree_budget:
            return self._tree(chain, q)
        return Draft(chain, q, self.name)

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
        return Draft(torch.tensor(tokens, device=self.out_device), None, self.name, parents=parents, node_q=node_q)

    def learn(self, n_accepted: int, ids: list[int], verify_s: float = 0.0) -> None:
        if self.shared:
            return  # the target's cache: the engine has already rolled it back
        # Keep the longest prefix of the draft cache that is still committed (a tree may have
        # accepted a sibling the draft never fed), and leave the last committed token to feed.
        keep = 0
        limit = min(len(self.fed), self.cache.length, len(ids) - 1)
        while keep < limit and self.fed[keep] == ids[keep]:
            keep += 1
        self.cache.truncate(keep)
        del self.fed[keep:]


class OracleDrafter(Drafter):
    """Proposes the target's own greedy continuation (from a reference pass made before the timed run),
    each token replaced by another with probability 1 − alpha, so greedy verification accepts each
    drafted token with probability exactly alpha (Leviathan et al.'s i.i.d. model, made true). Lossless
    like any drafter: the target still verifies. Under sampling its tokens are one-hot proposals whose
    acceptance is p(x), not alpha. Each drafted token costs `cost` target steps of busy compute."""

    def __init__(self, alpha: float, cost: float, reference: Callable, device: torch.device, vocab: int, name: str):
        self.alpha, self.cost, self.reference, self.device, self.vocab, self.name = (alpha, cost, reference, device,
                                                                                     vocab, name)
        self.ref: list[int] = []
        self.prompt_len, self.step_s, self.seed = 0, 0.0, 0

    def prepare(self, prompt_ids: list[int], cfg: GenerationConfig) -> None:
        self.ref, self.step_s = self.reference(prompt_ids, cfg.max_new_tokens)
        self.prompt_len, self.seed = len(prompt_ids), cfg.seed or 0

    def propose(self, ids: list[int], gamma: int) -> Draft:
        t_end = time.perf_counter() + self.cost * self.step_s * gamma
        start = len(ids) - self.prompt_len
        tokens = []
        for k, tok in enumerate(self.ref[start:start + gamma]):
            draw = random.Random(self.seed * 1_000_003 + start + k)  # keyed by position: independent of γ
            if draw.random() >= self.alpha:
                tok = (tok + 1 + draw.randrange(self.vocab - 1)) % self.vocab  # any other token
            tokens.append(tok)
        while time.perf_counter() < t_end:  # the drafting cost, spent as compute
            pass
        if not tokens:
            return empty_draft(self.device, self.name)
        return Draft(torch.tensor(tokens, device=self.device), None, self.name)


def greedy_reference(target: LoadedModel) -> Callable:
    """(prompt ids, n) -> (the target's greedy continuation, seconds of one target step), memoised."""
    forward, memo = forward_fn(target.model), {}

    @torch.inference_mode()
    def reference(prompt_ids: list[int], n: int):
        key = (tuple(prompt_ids), n)
        if key not in memo:
            cache = KVCache.for_model(target.model, len(prompt_ids) + n + 1)
            x, out, steps = torch.tensor([prompt_ids], device=target.device), [], []
            for _ in range(n):
                t = time.perf_counter()
                tok = int(forward(x, cache, logits_to_keep=1)[0, -1].argmax())
                steps.append(time.perf_counter() - t)
                out.append(tok)
                if tok in target.eos_ids:
                    break
                x = torch.tensor([[tok]], device=target.device)
            while len(memo) >= 16:
                memo.pop(next(iter(memo)))
            memo[key] = (out, sorted(steps[1:] or steps)[len(steps[1:] or steps) // 2])
        return memo[key]

    return reference


_SKIP: dict = {}


def layer_skip_model(model: torch.nn.Module, layers: int) -> torch.nn.Module:
    """A view of `model` that runs only its first `layers` decoder layers (weights shared, not copied).

    Made once per (model, layers), so per-run engines reuse it (and its lean forward).
    """
    key = (id(model), layers)
    if key not in _SKIP:
        _SKIP[key] = _layer_skip_view(model, layers)
    return _SKIP[key]


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
    shallow.skip_of = (model, layers)  # lets the lean forward reuse the target's fused weights
    return shallow


_QUANT: dict = {}
on_unload(lambda model: [cache.pop(k) for cache in (_SKIP, _QUANT) for k in list(cache) if k[0] == id(model)])


def quantized_model(target: LoadedModel, kind: str) -> torch.nn.Module:
    """A lower-precision copy of the target, made once: int8 dynamic (CPU) or bf16 weights."""
    key = (id(target.model), kind)
    if key not in _QUANT:
        if kind == "int8":
            if target.device.type != "cpu":
                raise ModelLoadError("quant:int8 (dynamic int8) runs on CPU only; use quant:bf16 on GPU")
            import warnings
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                _QUANT[key] = torch.ao.quantization.quantize_dynamic(
                    copy.deepcopy(target.model), {torch.nn.Linear}, dtype=torch.qint8).eval()
        elif kind in ("bf16", "fp16"):
            dt = torch.bfloat16 if kind == "bf16" else torch.float16
            _QUANT[key] = copy.deepcopy(target.model).to(dt).eval()
        else:
            raise ModelLoadError(f"quant kind must be int8, bf16 or fp16, got {kind!r}")
    return _QUANT[key]


# (cfg, generator, max_len, the target's KV cache) -> a drafter for one run
DrafterFactory = Callable[[GenerationConfig, "torch.Generator | None", int, KVCache], Drafter]


def drafter_factory(spec: str, target: LoadedModel, trust_remote_code: bool = False) -> DrafterFactory:
    """Validate `spec` now (loading any model once) and return a per-run drafter constructor."""
    spec = (spec or "").strip()
    name, _, arg = spec.partition(":")
    dev, vocab = target.device, target.vocab_size

    def model_based(model: torch.nn.Module, device, share_cache: bool = False) -> DrafterFactory:
        return lambda cfg, gen, max_len, cache: ModelDrafter(model, device, spec, cfg, gen, max_len, dev, vocab,
                                                             cache if share_cache else None)

    if spec == "self":
        return model_based(target.model, dev, share_cache=True)
    if name == "model":
        if not arg.strip():
            raise ModelLoadError("draft spec 'model:' needs a hub id or a path, e.g. model:HuggingFaceTB/SmolLM2-135M")
        draft = load_model(arg.strip(), device=str(dev), dtype=str(target.dtype).replace("torch.", ""),
                           trust_remote_code=trust_remote_code)
        if not same_vocab(target, draft):  # another tokenizer: draft through text, judged one-hot (lossless)
            return lambda cfg, gen, max_len, cache: CrossVocabDrafter(draft, target, spec, cfg, gen, max_len)
        return model_based(draft.model, draft.device)
    if name == "ngram":
        n = _int_arg(spec, arg, 3)
        if not 1 <= n <= 8:
            raise ModelLoadError(f"ngram:N needs 1 <= N <= 8, got {n}")
        tok = target.tokenizer
        special = frozenset(getattr(tok, "all_special_ids", None) or [])
        text_of = tok.decode if hasattr(tok, "decode") else str
        return lambda cfg, gen, max_len, cache: NgramDrafter(n, dev, spec, cfg.tree_budget, special, text_of)
    if name == "layerskip":
        layers = _int_arg(spec, arg, max(1, target.model.config.get_text_config().num_hidden_layers // 4))
        return model_based(layer_skip_model(target.model, layers), dev, share_cache=True)
    if name == "quant":
        model = quantized_model(target, arg or ("int8" if dev.type == "cpu" else "bf16"))
        return model_based(model, dev)
    if name in ("medusa", "eagle"):
        heads, parts = load_heads(target, arg.strip() or None)
        kind = MedusaDrafter if name == "medusa" else EagleDrafter
        return lambda cfg, gen, max_len, cache: kind(heads, parts, spec, cfg, gen, vocab, dev)
    if name == "auto":
        if arg not in ("", "ngram"):
            raise ModelLoadError(f"draft spec {spec!r}: use auto (n-gram and, where they fit the target, the trained "
                                 f"heads) or auto:ngram (n-gram only)")
        ngram = drafter_factory("ngram", target)
        fit = arg != "ngram" and heads_fit(target)
        heads = [drafter_factory(h, target) for h in ("eagle", "medusa")] if fit else []
        return lambda cfg, gen, max_len, cache: AutoDrafter(ngram(cfg, gen, max_len, cache), dev, costly=tuple(
            make(cfg, gen, max_len, cache) for make in heads))
    if name == "oracle":
        alpha_s, _, cost_s = arg.partition(":")
        try:
            alpha, cost = float(alpha_s), float(cost_s or 0)
        except ValueError:
            raise ModelLoadError(f"draft spec {spec!r}: use oracle:A[:C] with A the acceptance in [0, 1] and C the "
                                 f"draft cost in target steps, e.g. oracle:0.8 or oracle:0.8:0.1") from None
        if not 0 <= alpha <= 1 or not 0 <= cost <= 10:
            raise ModelLoadError(f"oracle:A[:C] needs 0 <= A <= 1 and 0 <= C <= 10, got {spec!r}")
        reference = greedy_reference(target)
        return lambda cfg, gen, max_len, cache: OracleDrafter(alpha, cost, reference, dev, vocab, spec)
    raise ModelLoadError(f"unknown draft spec {spec!r}: use self, model:<id or path>, ngram[:N], layerskip:L, "
                         f"quant[:int8|bf16], medusa[:PATH], eagle[:PATH], auto or oracle:A[:C]")


def _int_arg(spec: str, arg: str, default: int) -> int:
    if not arg:
        return default
    try:
        return int(arg)
    except ValueError:
        raise ModelLoadError(f"draft spec {spec!r}: {arg!r} is not a whole number") from None
