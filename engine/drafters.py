"""Drafters propose tokens; the target judges them. Two methods: `propose` and `learn`.

A drafter is built fresh for each run (it owns per-run state such as its KV cache) from a spec
string; the models behind it are loaded once and shared. Specs in this module:
  self              the target drafts for itself (100% greedy acceptance: a sanity check)
  model:<id|path>   a separate causal LM that shares the target's vocabulary
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .cache import KVCache
from .config import GenerationConfig
from .models import LoadedModel, ModelLoadError, load_model
from .sampling import pick, shape_probs


@dataclass
class Draft:
    """What a drafter proposes for one round."""
    token_ids: torch.Tensor  # (γ,) int64 on the target's device
    q: torch.Tensor | None  # (γ, V) draft probabilities, shaped like p; None = one-hot (no distribution)


class Drafter:
    """Interface: propose γ tokens after `ids`; learn how many the target accepted."""
    name = "drafter"

    def propose(self, ids: list[int], gamma: int) -> Draft:
        raise NotImplementedError

    def learn(self, n_accepted: int, ids: list[int]) -> None:
        """`ids` is the committed sequence after this round (prompt + generated)."""


class ModelDrafter(Drafter):
    """A causal LM drafting token by token with its own pointer KV cache."""

    def __init__(self, draft: LoadedModel, name: str, cfg: GenerationConfig,
                 generator: torch.Generator | None, max_len: int, out_device: torch.device, vocab: int):
        self.draft, self.name, self.cfg, self.generator = draft, name, cfg, generator
        self.cache = KVCache.for_model(draft.model, max_len)
        self.out_device, self.vocab = out_device, vocab

    def propose(self, ids: list[int], gamma: int) -> Draft:
        # Feed every committed token the draft cache lacks: one normally, two after an
        # all-accepted round (the last draft token was sampled but never fed).
        x = torch.tensor([ids[self.cache.length:]], device=self.draft.device)
        tokens, qs = [], []
        for _ in range(gamma):
            logits = self.draft.model(x, past_key_values=self.cache, logits_to_keep=1).logits[0, -1]  # (V,)
            q = shape_probs(logits, self.cfg.temperature, self.cfg.top_k, self.cfg.top_p)
            tok = pick(q, self.cfg.greedy, self.generator)  # stays on device: no host sync
            tokens.append(tok)
            qs.append(q)
            x = tok.view(1, 1)
        q = torch.stack(qs).to(self.out_device)  # (γ, V_draft)
        if q.shape[-1] != self.vocab:  # padded LM heads of different sizes
            q = torch.nn.functional.pad(q, (0, self.vocab - q.shape[-1])) if q.shape[-1] < self.vocab else q[:, :self.vocab]
        return Draft(torch.stack(tokens).to(self.out_device), q)

    def learn(self, n_accepted: int, ids: list[int]) -> None:
        # Keep the draft cache's prefix that is still committed: positions < len(ids) - 1,
        # and never more than it holds (after an all-accepted round it is one token behind).
        self.cache.truncate(min(self.cache.length, len(ids) - 1))


def check_same_vocab(target: LoadedModel, draft: LoadedModel) -> None:
    """Speculation needs one vocabulary: same token -> id map in both tokenizers."""
    tv, dv = target.tokenizer.get_vocab(), draft.tokenizer.get_vocab()
    if tv != dv:
        differ = sum(1 for t, i in tv.items() if dv.get(t) != i)
        raise ModelLoadError(
            f"draft {draft.name!r} does not share the target's vocabulary: target {target.name!r} has "
            f"{len(tv)} tokens ({type(target.tokenizer).__name__}), draft has {len(dv)} tokens "
            f"({type(draft.tokenizer).__name__}); {differ} target tokens map to other ids")


def resolve_draft_model(spec: str, target: LoadedModel, trust_remote_code: bool = False) -> LoadedModel | None:
    """Load (once) and validate the model behind a drafter spec; None for drafters without one."""
    spec = (spec or "").strip()
    if spec == "self":
        return target
    if spec.startswith("model:"):
        name = spec[len("model:"):].strip()
        if not name:
            raise ModelLoadError("draft spec 'model:' needs a hub id or a path, e.g. model:embedded")
        draft = load_model(name, device=str(target.device), dtype=str(target.dtype).replace("torch.", ""),
                           trust_remote_code=trust_remote_code)
        check_same_vocab(target, draft)
        return draft
    raise ModelLoadError(f"unknown draft spec {spec!r}: use 'self' or 'model:<hub id or path>'")


def build_drafter(spec: str, target: LoadedModel, draft_model: LoadedModel | None, cfg: GenerationConfig,
                  generator: torch.Generator | None, max_len: int) -> Drafter:
    """A fresh per-run drafter for `spec` (validated earlier by resolve_draft_model)."""
    return ModelDrafter(draft_model, spec.strip(), cfg, generator, max_len, target.device, target.vocab_size)
