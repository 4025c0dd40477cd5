"""Every event type of a speculative (or autoregressive) run, and EVENT_TYPES, the table of them by kind.

Every event is a frozen, keyword-only dataclass of plain data (ints, floats, strings, lists, dicts; never
tensors) carrying its `round` and absolute token positions (`pos`), so a renderer needs no engine
state and a whole run can be written to JSON and read back into equal objects (engine/events.py).
Top-k alternatives are lists of `[token_id, token_text, prob]`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar


@dataclass(frozen=True, kw_only=True)
class RunStarted:
    """A run begins: its configuration and the prompt as the target sees it."""

    kind: ClassVar[str] = "run_started"
    row: int = 0  # the sequence of a batched run (engine/decode/batch.py) it belongs to; -1: the whole batch
    round: int  # always 0
    run_id: str  # unique per run
    mode: str  # "speculative" or "ar"
    target: str  # target model spec
    draft: str  # drafter spec ("" for ar)
    device: str  # e.g. "cpu", "cuda:0"
    dtype: str  # e.g. "float32"
    config: dict  # the GenerationConfig as a dict
    prompt_text: str  # the prompt after the chat template
    prompt_ids: list  # token ids of the prompt
    prompt_tokens: list  # text of each prompt token
    pos: int  # position of the first generated token (= prompt length)
    threads: int = 0  # CPU torch threads the run computed with (0: not recorded, or not a CPU)
    # the machine and forward measured (engine/runtime/roofline.py); {} if not
    host: dict = field(default_factory=dict)
    # another engine's run recorded into these events (engine/recorders): {"name", "version", "method", "hook",
    # "missing"}; {} for specviz's own engine
    engine: dict = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Decided:
    """An adaptive drafter (auto) chose this round's drafter and γ; the numbers behind the choice."""

    kind: ClassVar[str] = "decided"
    row: int = 0  # the sequence of a batched run (engine/decode/batch.py) it belongs to; -1: the whole batch
    round: int
    pos: int  # absolute position of the first token this round
    drafter: str  # chosen drafter ("" = plain target step)
    gamma: int  # chosen γ (0 = plain step)
    reason: str  # one sentence: why
    plain_tokens_per_s: float | None  # predicted rate of plain decoding (1 / t(1))
    # [{"drafter", "variant", "gamma", "alpha", "c", "v", "predicted_tokens_per_s"}, ...]; a lookup's also its α's
    # measure and tested positions and "expected_tokens_per_s" (the rate at the measure, which ranks the candidates
    # that pay as priced)
    candidates: list


@dataclass(frozen=True, kw_only=True)
class Drafted:
    """The drafter proposed tokens for positions pos .. pos+len-1."""

    kind: ClassVar[str] = "drafted"
    row: int = 0  # the sequence of a batched run (engine/decode/batch.py) it belongs to; -1: the whole batch
    round: int
    pos: int  # absolute position of the first drafted token
    token_ids: list  # drafted ids
    tokens: list  # their text
    q: list  # draft probability of each drafted token (1.0 for a one-hot drafter)
    draft_topk: list  # per drafted position, the draft's top-k [id, text, q] ([] when not recorded)
    drafter: str  # which drafter proposed this round


@dataclass(frozen=True, kw_only=True)
class Verified:
    """One target forward over [last token, drafts] judged the draft."""

    kind: ClassVar[str] = "verified"
    row: int = 0  # the sequence of a batched run (engine/decode/batch.py) it belongs to; -1: the whole batch
    round: int
    pos: int  # absolute position of the first drafted token
    p: list  # target probability of each drafted token
    accept_prob: list  # min(1, p/q) per drafted token (greedy: 1.0 if it is argmax p else 0.0)
    accepted: (
        list  # bool per drafted token; False from the first rejection on, and after an accepted end-of-text
    )
    first_rejected: int | None  # index into the draft of the first rejection, None if all accepted
    next_id: int  # corrected token (after a rejection) or bonus token (all accepted)
    next_token: str  # its text
    next_p: float  # its target probability
    next_kind: str  # "corrected" or "bonus"
    target_topk: list  # per verified position (len(draft)+1), the target's top-k [id, text, p]
    greedy: bool  # greedy acceptance rule (argmax) rather than min(1, p/q)
    # sampling: the uniform draw u each drafted token was tested with (accepted iff u < accept_prob)
    u: list | None = None
    # sampling, corrected: top-k [id, text, prob] of norm(max(0, p − q))
    residual_topk: list = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class Retokenized:
    """A draft model with another vocabulary: its own tokens this round and their text in the target's tokens.

    The `drafted` event of the round holds the target tokens (what the target verifies); this one shows
    how they came about, so a reader sees where the two tokenisations differ.
    """

    kind: ClassVar[str] = "retokenized"
    row: int = 0  # the sequence of a batched run (engine/decode/batch.py) it belongs to; -1: the whole batch
    round: int
    pos: int  # absolute position of the first proposed target token
    draft_token_ids: list  # the draft model's own token ids this round (its vocabulary)
    draft_tokens: list  # their text
    target_token_ids: list  # that text re-tokenised for the target: the proposal (= drafted.token_ids)
    target_tokens: list  # their text
    spans: list  # per target token, [first, last] index of the draft tokens its characters come from
    held_back: str  # draft text not proposed: a last word that may be partial, or tokens beyond γ


@dataclass(frozen=True, kw_only=True)
class DraftTree:
    """Tree speculation: every drafted node, how the target judged it, and the accepted path."""

    kind: ClassVar[str] = "draft_tree"
    row: int = 0  # the sequence of a batched run (engine/decode/batch.py) it belongs to; -1: the whole batch
    round: int
    pos: int  # absolute position of depth-1 nodes
    token_ids: list  # node tokens, parents before children
    tokens: list  # their text
    parents: list  # parent node index per node (-1 = the last committed token)
    q: list  # draft probability of each node's token (1.0 when chosen deterministically)
    p: list  # target probability of each node's token given its ancestors
    accept_prob: list  # probability each node was tested with (None = never reached)
    status: list  # per node: "accepted", "rejected" or "unvisited"
    path: list  # accepted node indices, root to leaf
    next_id: int  # corrected or bonus token after the path
    next_token: str
    next_kind: str  # "corrected" or "bonus"


@dataclass(frozen=True, kw_only=True)
class LookaheadWindow:
    """Lookahead decoding's Jacobi window in a round (engine/drafters/lookahead.py): N − 1 levels × W columns of
    guesses computed in the verify forward beside the verification branch (its `draft_tree`)."""

    kind: ClassVar[str] = "lookahead_window"
    row: int = 0  # the sequence of a batched run (engine/decode/batch.py) it belongs to; -1: the whole batch
    round: int
    pos: int  # absolute position of guess (level 0, column 0); guess (l, i) is for position pos + i + l
    token_ids: list  # (N − 1) lists of W ids: the guesses, level 0 (oldest) first
    tokens: list  # their text, the same shape
    fixed: list  # the same shape: the target, given the guesses before it in its column, predicts exactly it
    # (a Jacobi fixed point); null where unknown
    next_ids: list  # W: what the target predicted from the top level (the next round's top level)
    next_tokens: list
    candidates: int  # n-grams of the pool that started with the last committed token: the verified branches
    added: int  # new n-grams this round
    pool: int  # n-grams in the pool after this round


@dataclass(frozen=True, kw_only=True)
class TreeSized:
    """How a tree drafter sized this round's tree on the measured verify curve (token recycling,
    engine/drafters/recycle.py; suffix speculation records the same in its suffix_match event): the nodes drafted
    with their scores, the curve, and the best node left out."""

    kind: ClassVar[str] = "tree_sized"
    row: int = 0  # the sequence of a batched run (engine/decode/batch.py) it belongs to; -1: the whole batch
    round: int
    pos: int  # absolute position of depth-1 nodes
    drafter: str  # whose tree
    pool: int  # candidate nodes the drafter had (its filled template)
    token_ids: list  # the drafted nodes, in the draft_tree's order
    parents: list  # per node: its parent's index (-1: the root)
    scores: list  # per node: the chance its path is accepted (the product of the learned rates along it)
    verify: list  # t(R + n) ÷ t(R + 1) for n = 1 .. nodes + 2: the curve the tree was sized on
    measured: list  # the forward sizes n the drafter had timed (the rest of the curve: the cost model's line)
    next_score: float | None  # the best node left out (it did not pay); None: none was
    extra_rows: int = (
        0  # R: rows every forward of this drafter carries besides root and nodes (lookahead's window)
    )


@dataclass(frozen=True, kw_only=True)
class SuffixMatched:
    """Suffix speculation's round (engine/drafters/suffix.py): the match its tree came from, how often and where
    each node was seen after it, and the measured verify curve the tree was sized on."""

    kind: ClassVar[str] = "suffix_match"
    row: int = 0  # the sequence of a batched run (engine/decode/batch.py) it belongs to; -1: the whole batch
    round: int
    pos: int  # absolute position of depth-1 nodes
    match: int  # n: the context's last n tokens occurred earlier (the longest such n)
    match_tokens: list  # their text
    occurrences: int  # continuations counted after the match (this run's first, then the session's)
    token_ids: list  # the drafted nodes, in the draft_tree's order
    counts: list  # per node: occurrences whose continuation passed through it
    parents: list  # per node: its parent's index (-1: the root), as in the draft_tree
    scores: (
        list  # per node: the chance its path is accepted, Π c ÷ (c_parent + 1) along it (suffix.path_scores)
    )
    # per node: [runs_ago, at], its latest occurrence: runs_ago 0 = this run, k = the session's k-th most recent
    # earlier run; at = that token's position in its sequence (this run: absolute)
    origins: list
    # t(n) ÷ t(1) for n = 1 .. nodes + 2: the curve the tree was sized on (expected tokens E = 1 + Σ scores)
    verify: list
    measured: list  # the forward sizes n the drafter had timed (the rest of the curve: the cost model's line)
    next_score: (
        float | None
    )  # the best node left out (it did not pay, or the budget was full); None: none was


@dataclass(frozen=True, kw_only=True)
class RolledBack:
    """Rejected draft positions were dropped by moving the target cache pointer back."""

    kind: ClassVar[str] = "rolled_back"
    row: int = 0  # the sequence of a batched run (engine/decode/batch.py) it belongs to; -1: the whole batch
    round: int
    positions: list  # absolute positions discarded
    cache_before: int  # cache length (tokens) before the rollback
    cache_after: int  # cache length after


@dataclass(frozen=True, kw_only=True)
class Committed:
    """Tokens appended to the output for good."""

    kind: ClassVar[str] = "committed"
    row: int = 0  # the sequence of a batched run (engine/decode/batch.py) it belongs to; -1: the whole batch
    round: int
    pos: int  # absolute position of the first committed token
    token_ids: list
    tokens: list  # text of each token
    origins: list  # per token: "accepted", "corrected", "bonus" or "ar"
    p: list  # target probability of each token


@dataclass(frozen=True, kw_only=True)
class RoundTimed:
    """Wall-clock cost of one round (seconds)."""

    kind: ClassVar[str] = "round_timed"
    row: int = 0  # the sequence of a batched run (engine/decode/batch.py) it belongs to; -1: the whole batch
    round: int
    pos: int  # position after this round's commit (= tokens so far incl. prompt)
    draft_s: float  # drafting
    verify_s: float  # target forward + accept/resample
    total_s: float  # whole round incl. bookkeeping
    elapsed_s: float  # since the run started (prefill included)
    gamma: int  # tokens drafted this round (0 = a plain target step); a tree round: its chain view's
    # rows the verify forward computed: γ + 1 (a chain), the tree's nodes + 1, plus a drafter's
    verified: int = 0
    # own rows (lookahead's window); 0: not recorded
    # inside verify_s, the verify forward alone (the rest of verify_s: the acceptance rule, the rollback and the
    # commit's bookkeeping); 0: not recorded (an imported run, a batch)
    forward_s: float = 0.0
    # the drafter learning the settled round (its settle), inside total_s; 0: not recorded or nothing to learn
    feedback_s: float = 0.0


@dataclass(frozen=True, kw_only=True)
class Prefilling:
    """The target is reading a long prompt, chunk by chunk, before round 1: how far it has got. A progress note
    (the page shows it; a consumer may stop the run here); nothing is decided or timed by it."""

    kind: ClassVar[str] = "prefilling"
    row: int = 0  # the sequence of a batched run; -1: every row of the batch at once
    round: int  # always 0
    pos: int  # prompt positions in the target's cache so far (a batch: per row, every row together)
    total: int  # prompt positions to read before round 1 (all but the last prompt token; a batch: its longest row)


@dataclass(frozen=True, kw_only=True)
class Finished:
    """The run ended; `summary` holds the metrics computed from this run's events."""

    kind: ClassVar[str] = "finished"
    row: int = 0  # the sequence of a batched run (engine/decode/batch.py) it belongs to; -1: the whole batch
    round: int  # number of rounds run
    pos: int  # final length (prompt + generated)
    stop_reason: (
        str  # "eos", "max_new_tokens", "time_limit" (the engine), or "cancelled" (Stop, an error: the app)
    )
    text: str  # generated text (special tokens skipped)
    token_ids: list  # generated ids
    summary: dict = field(default_factory=dict)


# -- beam search (engine/decode/beam.py) -------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class BeamDrafted:
    """Speculative beam search: each running beam's drafter proposed tokens after that beam."""

    kind: ClassVar[str] = "beam_drafted"
    round: int
    pos: int  # absolute position of the first drafted token (every beam has the same length)
    token_ids: list  # per beam (index at the round's start): its drafted ids (may be empty)
    tokens: list  # per beam: their text
    drafter: str


@dataclass(frozen=True, kw_only=True)
class BeamStep:
    """One beam-search step: the B beams that survive it, each one token longer than its parent."""

    kind: ClassVar[str] = "beam_step"
    round: int
    pos: int  # absolute position of the token this step adds
    parents: list  # per surviving beam: index of the beam (before this step) it extends
    token_ids: list  # per surviving beam: the token it added
    tokens: list  # their text
    scores: list  # per surviving beam: cumulative log-probability (sum of log p of its tokens)
    drafted: list  # per surviving beam: True if its token was its path's drafted token (read from the round's forward)
    finished: (
        list  # hypotheses entering the finished set here: {"parent", "token_id", "token", "score" (÷ length)}
    )


@dataclass(frozen=True, kw_only=True)
class BeamVerified:
    """The round's one target forward, and how far the replayed beam search stayed on the drafted paths."""

    kind: ClassVar[str] = "beam_verified"
    round: int
    pos: int  # absolute position of the first token this round added
    steps: int  # beam-search steps replayed from this one forward (1 = a plain step)
    verified: list  # per beam (index at the round's start): how many of its drafted tokens a surviving beam stands on
    origins: list  # per beam after the round: the beam (at the round's start) whose cache row it kept
    positions: int  # tokens in the forward: B × (γ + 1)
    cache_before: int  # cache length per row after the forward
    cache_after: int  # after the rollback (= every beam's length − 1)


@dataclass(frozen=True, kw_only=True)
class BeamResult:
    """The finished hypotheses of a beam search, best first (transformers' returned sequence is the first)."""

    kind: ClassVar[str] = "beam_result"
    round: int
    pos: int  # prompt + the best hypothesis's length
    num_beams: int
    token_ids: list  # per hypothesis: generated ids
    texts: list  # per hypothesis: decoded text
    scores: list  # per hypothesis: log-probability ÷ length ** length_penalty


# -- batched speculation (engine/decode/batch.py) -----------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class BatchRound:
    """One round of a batched run: ONE target forward over every running row's [last token, drafts]."""

    kind: ClassVar[str] = "batch_round"
    round: int
    row: int = -1  # the whole batch
    rows: list  # the rows this forward computed (the others had finished)
    gamma: int  # the batch's speculation length this round (0 = every row a plain step)
    drafted: list  # per row in `rows`: tokens it drafted (≤ γ; n-gram finds none sometimes)
    accepted: list  # per row in `rows`: drafts the target kept
    committed: list  # per row in `rows`: tokens it committed this round
    forward_shape: list  # [rows, tokens per row] of the verify forward (shorter drafts are padded)
    draft_s: float  # drafting every row
    verify_s: float  # the one forward + every row's accept / rollback / commit
    total_s: float  # the whole round
    elapsed_s: float  # since the batch started (prefill included)


@dataclass(frozen=True, kw_only=True)
class BatchFinished:
    """The batched run ended (each row has its own `finished` event); the batch's throughput."""

    kind: ClassVar[str] = "batch_finished"
    round: int  # rounds run
    row: int = -1
    rows: int  # B
    mode: str  # "speculative" or "ar"
    draft: str  # drafter spec ("" for ar)
    # tokens, wall_s, tokens_per_s, per-row acceptance, γ histogram
    summary: dict = field(default_factory=dict)


# every event type by its kind: the trace format's one table (event_from_dict and the renderers read it)
EVENT_TYPES = {
    cls.kind: cls
    for cls in (
        RunStarted,
        Prefilling,
        Decided,
        Drafted,
        Retokenized,
        Verified,
        DraftTree,
        LookaheadWindow,
        SuffixMatched,
        TreeSized,
        RolledBack,
        Committed,
        RoundTimed,
        Finished,
        BeamDrafted,
        BeamStep,
        BeamVerified,
        BeamResult,
        BatchRound,
        BatchFinished,
    )
}
