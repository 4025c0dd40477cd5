"""Drafters on trained heads (engine/heads/modules.py): `medusa` and `eagle`, chains or trees, through the Drafter interface.

Both read the target's features (final-norm hidden states) from the forwards the engine already runs:
their factory declares Needs(features=True), so each `settle` brings the feature of every position the target's cache
keeps (the prompt's after the prefill, then each round's kept rows), so between rounds it holds the
feature f_j of the last cached position j = len(ids) − 2, whose next token ids[-1] is known.

  medusa  head k proposes the token k after ids[-1] from f_j alone: one small matmul for every head at once.
          Tree: Medusa's cartesian top-k, grown best first by the product of the heads' probabilities.
  eagle   its layer extends its own KV cache with the true [f_t ; emb(x_{t+1})] pairs it has not seen, then
          runs autoregressively on its own predicted features (the draft entries are dropped afterwards).
          Tree: EAGLE-2's dynamic tree: each depth expands the `tree_branching` most likely nodes by
          cumulative draft probability, and the `tree_budget` most likely nodes of all make the tree.

Chains sample each token from q (its shaped draft distribution over the draft vocabulary, zero elsewhere),
so the target's min(1, p/q) test keeps the output lossless; tree nodes are chosen deterministically and
tested one-hot. Verification always uses the target's full distribution.
"""

from __future__ import annotations

import heapq
from pathlib import Path

import torch

from ..heads import modules as heads_mod
from ..runtime.models import LoadedModel
from ..runtime.permodel import PerModel
from ..sampling import pick, shape_probs
from ..specs import DraftSpec, ModelLoadError
from .base import Draft, Drafter, Factory, Needs, Settled, empty_draft


class HeadDrafter(Drafter):
    """Shared plumbing: features in, draft-vocabulary logits out as full-vocabulary drafts."""

    def __init__(self, heads, parts, name: str, cfg, generator, vocab: int, device):
        self.heads, self.parts, self.name, self.cfg, self.generator = heads, parts, name, cfg, generator
        self.vocab, self.device = vocab, device
        self.calibration = heads.record.get(f"{name.split(':', 1)[0]}_calibration")  # auto's per-bin priors
        self.pending: list[torch.Tensor] = []  # observed features not yet consumed, each (n, H)
        self.latest: torch.Tensor | None = None  # the last features settled, (n, H)

    @property
    def feature(self) -> torch.Tensor | None:
        """f_j, the last cached position's feature (H,), fp32."""
        return None if self.latest is None else self.latest[-1].float()

    def settle(self, r: Settled) -> None:
        """Features (n, H) of the next n positions the target's cache now keeps, in order: kept as they come (a
        round the head is not asked costs it nothing more), turned to fp32 when read."""
        if r.features is not None and len(r.features):
            self.pending.append(r.features)
            self.latest = r.features

    def _full(self, q: torch.Tensor) -> torch.Tensor:
        """(γ, V_draft) draft probabilities -> (γ, V) over the target's vocabulary (zero outside the draft's)."""
        full = q.new_zeros(q.shape[0], self.vocab)
        return full.index_copy_(1, self.parts.vocab_ids, q)

    def _chain(self, logits: torch.Tensor) -> Draft:
        """A chain from per-step logits (γ, V_draft): each token picked from its own shaped q."""
        q = shape_probs(logits, self.cfg.temperature, self.cfg.top_k, self.cfg.top_p)
        rows = pick(q, self.cfg.greedy, self.generator)
        return Draft(self.parts.vocab_ids[rows].to(self.device), self._full(q).to(self.device), self.name)


class MedusaDrafter(HeadDrafter):
    def settle(self, r: Settled) -> None:
        if r.features is not None and len(r.features):
            self.latest = r.features  # Medusa needs only the last feature

    def propose(self, ids: list[int], gamma: int) -> Draft:
        feature = self.feature
        if feature is None or gamma < 1:
            return empty_draft(self.device, self.name)
        k = min(gamma, self.heads.cfg.medusa_heads)
        logits = self.heads.medusa(feature, self.parts.lm_head)[:k]  # (k, V_draft)
        if self.cfg.tree_budget:
            return self._tree(logits.float().softmax(-1))
        return self._chain(logits)

    def _tree(self, probs: torch.Tensor) -> Draft:
        """Cartesian top-w tree: a node at depth d holds one of head d's top-w tokens; the tree_budget nodes
        with the highest product of head probabilities (a parent always scores above its children)."""
        width, budget = self.cfg.tree_branching, self.cfg.tree_budget
        top = torch.topk(probs, min(width, probs.shape[-1]), dim=-1)
        p_top, i_top = top.values.tolist(), top.indices.tolist()  # (k, w)
        frontier = [(-p_top[0][r], -1, 0, r) for r in range(len(p_top[0]))]  # (−score, parent, depth, rank)
        heapq.heapify(frontier)
        tokens, parents = [], []
        while frontier and len(tokens) < budget:
            neg, parent, depth, rank = heapq.heappop(frontier)
            node = len(tokens)
            tokens.append(int(self.parts.vocab_ids[i_top[depth][rank]]))
            parents.append(parent)
            if depth + 1 < len(p_top):
                for r, p in enumerate(p_top[depth + 1]):
                    heapq.heappush(frontier, (neg * p, node, depth + 1, r))
        return Draft(
            torch.tensor(tokens, device=self.device),
            None,
            self.name,
            parents=parents,
            node_q=[None] * len(tokens),
        )


class EagleDrafter(HeadDrafter):
    def __init__(self, *args):
        super().__init__(*args)
        self.kv: list = []  # the EAGLE layer's keys and values, (1, KV, n, D) each, true pairs only between rounds
        self.n_true = 0  # positions in kv: [f_t ; emb(x_{t+1})] for t < n_true

    def _feed_true(self, ids: list[int]) -> torch.Tensor | None:
        """Extend the cache with every observed position; return the predicted feature after the last one."""
        if not self.pending:
            return None
        feats = torch.cat(self.pending).float()  # (n, H) for positions n_true .. n_true + n − 1
        self.pending.clear()
        start, n = self.n_true, len(feats)
        pos = torch.arange(start, start + n)
        nxt = torch.tensor(ids[start + 1 : start + 1 + n])  # x_{t+1} for each t
        cos, sin = self.parts.rope(pos, feats)
        out = self.heads.eagle(feats[None], self.parts.embed[nxt][None], cos, sin, kv=self.kv)  # (1, n, H)
        self.n_true = start + n
        return out[0, -1]

    def _truncate(self) -> None:
        if self.kv:
            self.kv[:] = [t[:, :, : self.n_true] for t in self.kv]

    def propose(self, ids: list[int], gamma: int) -> Draft:
        self._truncate()  # drop last round's draft entries
        if self.pending and self.n_true + sum(map(len, self.pending)) != len(ids) - 1:
            return empty_draft(self.device, self.name)  # features out of step with ids: never expected
        feature = self._feed_true(ids)
        if feature is None or gamma < 1:
            return empty_draft(self.device, self.name)
        if self.cfg.tree_budget:
            return self._tree(feature, gamma)
        rows, qs, pos = [], [], self.n_true  # pos: where the next input [f̂ ; emb(draft)] sits
        for step in range(gamma):
            q = shape_probs(
                feature @ self.parts.lm_head.T, self.cfg.temperature, self.cfg.top_k, self.cfg.top_p
            )
            rows.append(pick(q, self.cfg.greedy, self.generator))
            qs.append(q)
            if step < gamma - 1:
                feature = self._step(
                    feature[None], self.parts.vocab_ids[rows[-1]][None], torch.tensor([pos])
                )[0]
                pos += 1
        tokens = self.parts.vocab_ids[torch.stack(rows)]
        return Draft(tokens.to(self.device), self._full(torch.stack(qs)).to(self.device), self.name)

    def _step(
        self, features: torch.Tensor, tokens: torch.Tensor, pos: torch.Tensor, mask=None
    ) -> torch.Tensor:
        """The layer on m new draft positions (one sequence): features (m, H), tokens (m,) -> (m, H)."""
        cos, sin = self.parts.rope(pos, features)
        return self.heads.eagle(
            features[None], self.parts.embed[tokens][None], cos, sin, kv=self.kv, mask=mask
        )[0]

    def _tree(self, feature: torch.Tensor, gamma: int) -> Draft:
        """EAGLE-2: expand the `width` best nodes per depth (cumulative probability), keep the best `budget`."""
        width, budget = self.cfg.tree_branching, self.cfg.tree_budget
        nodes = []  # (cumulative draft probability, parent node, draft row, depth)
        frontier = [(1.0, -1, feature)]  # (score, node index, predicted feature after that node)
        anc: dict[int, list[int]] = {-1: []}  # node -> the draft kv entries of its ancestors and itself
        entries = 0
        for depth in range(gamma):
            grown = []
            for score, node, feat in frontier:
                probs = (feat @ self.parts.lm_head.T).float().softmax(-1)
                top = torch.topk(probs, min(width, probs.shape[-1]))
                for p, row in zip(top.values.tolist(), top.indices.tolist()):
                    nodes.append((score * p, node, row, depth))
                    grown.append(len(nodes) - 1)
            if depth == gamma - 1:
                break
            best = sorted(grown, key=lambda i: -nodes[i][0])[:width]  # expand these
            feats = torch.stack([next(f for s, n, f in frontier if n == nodes[i][1]) for i in best])
            rows = torch.tensor([nodes[i][2] for i in best])
            n_kv = self.n_true + entries
            mask = torch.zeros(len(best), n_kv + len(best), dtype=torch.bool)
            mask[:, : self.n_true] = True
            for r, i in enumerate(best):
                anc[i] = anc[nodes[i][1]] + [entries + r]
                mask[r, [self.n_true + e for e in anc[i]]] = True
            out = self._step(
                feats,
                self.parts.vocab_ids[rows],
                torch.full((len(best),), self.n_true + depth),
                mask=mask[None, None],
            )
            entries += len(best)
            frontier = [(nodes[i][0], i, out[r]) for r, i in enumerate(best)]
        keep = sorted(sorted(range(len(nodes)), key=lambda i: -nodes[i][0])[:budget])  # parents come first
        index = {old: new for new, old in enumerate(keep)}
        tokens = [int(self.parts.vocab_ids[nodes[i][2]]) for i in keep]
        parents = [index.get(nodes[i][1], -1) if nodes[i][1] >= 0 else -1 for i in keep]
        return Draft(
            torch.tensor(tokens, device=self.device),
            None,
            self.name,
            parents=parents,
            node_q=[None] * len(tokens),
        )


_HEADS = PerModel()  # target module -> {path: (Heads, the frozen target parts they use)}


def load_heads(target: LoadedModel, path: str | None):
    """Trained heads (heads/modules.py) for this target, loaded once: (Heads, the frozen target parts they use)."""
    path = path or str(heads_mod.WEIGHTS)
    return _HEADS.get(target.model, path, lambda: _load_heads(target, path))


def _load_heads(target: LoadedModel, path: str):
    try:
        heads, _ = heads_mod.load(path, target.model.config)
    except FileNotFoundError:
        raise ModelLoadError(
            f"no trained heads at {path}: train them with python -m training.train"
        ) from None
    except (RuntimeError, KeyError, TypeError) as e:  # shapes of another target
        raise ModelLoadError(
            f"the heads at {path} do not fit {target.name} (they were trained for another "
            f"target; the shipped ones are for the embedded SmolLM2-135M): {str(e)[:120]}"
        ) from None
    if int(heads.vocab_ids.max()) >= target.vocab_size:
        raise ModelLoadError(f"the heads at {path} name tokens outside {target.name}'s vocabulary")
    return heads.to(target.device), heads_mod.frozen_parts(target.model, heads.vocab_ids)


def heads_pending(spec: DraftSpec, target: LoadedModel) -> Path | None:
    """The heads file a run of `spec` on `target` reads first (medusa, eagle, and auto unless auto:ngram), or None
    when it reads none or they are loaded already: the app says so before the load (seconds on a busy CPU)."""
    if spec.name in ("medusa", "eagle"):
        path = spec.path
    elif spec.name == "auto" and spec["offer"] != "ngram":
        path = None  # auto offers the shipped heads
    else:
        return None
    path = str(path or heads_mod.WEIGHTS)
    return None if _HEADS.has(target.model, path) else Path(path)


def heads_fit(target: LoadedModel) -> bool:
    """The shipped heads load for this target (the embedded SmolLM2-135M): auto then offers them."""
    try:
        load_heads(target, None)
    except ModelLoadError:
        return False
    return True


def build(spec: DraftSpec, target: LoadedModel, ctx):
    """The per-run constructor of medusa[:PATH] or eagle[:PATH] (registry.py calls it)."""
    heads, parts = load_heads(target, spec["PATH"])
    kind = MedusaDrafter if spec.name == "medusa" else EagleDrafter
    return Factory(
        lambda cfg, gen, max_len, cache: kind(
            heads, parts, spec.text, cfg, gen, target.vocab_size, target.device
        ),
        Needs(features=True),
    )
