"""llama-cpp-python's speculation -> specviz events: a run of `Llama(draft_model=...)` recorded round by round.

llama-cpp-python has no acceptance callback. What `Llama.generate` (0.3.x) does with a draft model, read from its
source: it evaluates the prompt and samples the first token (no draft: round 1 here is a plain target step); then,
for every round, it calls `draft_model(input_ids[: n_tokens + 1])` with the committed ids (the prompt, every token
it yielded so far, the last one not yet evaluated), evaluates that last token and the proposal in one
`Llama.eval` (cut to the context: `[: n_ctx - len(input_ids)]`), and samples position by position, yielding each
token, until a sampled token differs from the draft at its place (the correction) or every draft matched (the
bonus); the KV cache is cut after the kept ones. So the next call's input is this call's input + the kept drafts +
the token the target added:

    kept = len(next_input) - len(input) - 1        next_id = next_input[-1]

and the recorder checks that the kept tokens are the proposal's first `kept` and that the next one differs from
the draft at its place (or every draft was kept). The run's last round has no next call: its tokens are those
the run yielded after the last call's input. When the run stopped inside a round (max tokens, or an end-of-text
that was itself an accepted draft), the drafts past the last yielded token were verified but never used: the round
is recorded with the proposal cut to the yielded tokens, the last one as the target's token, and the trace says so.

The target's probabilities come from `Llama.scores`, the logits of every evaluated position (`logits_all`, which
a draft model switches on): the round that starts at position s reads rows s - 1 .. s - 1 + γ, before the next
`Llama.eval` overwrites them. Greedy only (temperature 0): a proposed token's accept_prob is 1.0 where it is the
row's argmax, else 0.0, and the argmax must be the token the run yielded (checked: a mismatch fails loudly).

`record(llm, prompt_ids, max_tokens)` is the whole API a script needs; `record_cli` is `python -m engine record
llama-cpp`. Nothing else in the engine imports llama_cpp; this module imports it only inside functions.
"""

from __future__ import annotations

import importlib.metadata
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..config import MAX_GAMMA, GenerationConfig
from ..events import write_trace
from .trace import Recording, Round

ENGINE_NAME = "llama.cpp (llama-cpp-python)"
SUPPORTED = ((0, 3, 1), (0, 4, 0))  # llama-cpp-python >= 0.3.1 (its speculative decoding fix), < 0.4
TESTED = "0.3.36"
HOOK = "Llama.draft_model wrapped; kept from the next call's input ids; p from Llama.scores"
MISSING = [
    "the draft's probabilities q: a LlamaDraftModel returns ids only (q = 1)",
    "the draft's top-k alternatives",
    "verify_s is the rest of the round: Llama.eval, the sampling and generate's Python, not split",
    "round 1 is the prompt's prefill: Llama.generate asks the draft model only after the first token",
]
CUT_NOTE = "the last round: drafts past the last token the run kept were verified but are left out"


# -- the rounds, from the calls (pure: no llama_cpp) ------------------------------------------------------------


@dataclass(frozen=True)
class Kept:
    """One round as the ids say it went: the drafts the target verified, how many it kept, the token it added."""

    start: int  # the position of the round's first new token (the length of the draft call's input)
    proposal: list  # the drafts the target verified (cut to the run's last token when `cut`)
    kept: int  # how many of them the target kept
    next_id: int  # the target's token after the kept ones: the correction, or the bonus
    cut: bool = False  # the run stopped inside this round: drafts past its last token are left out


def settle_call(start: int, proposal: list, emitted: list, last: bool) -> Kept | None:
    """One draft call's round from the ids the run added after the call's input (`emitted`: the next call's input
    past `start`, or for the last call the run's output past `start`). None: the run stopped before this round
    added a token (its forward ran, nothing of it was kept). RuntimeError when the ids cannot come from
    Llama.generate's loop."""
    proposal, emitted = [int(i) for i in proposal], [int(i) for i in emitted]
    g, n = len(proposal), len(emitted)
    if not n:
        if last:
            return None
        raise RuntimeError(
            "Llama.generate called the draft model twice without a new token in between: its loop has changed"
        )
    kept = next((i for i in range(min(n, g)) if emitted[i] != proposal[i]), min(n, g))
    if kept == n:  # every token the run added matched a draft: the run stopped inside the round
        if not last:
            raise RuntimeError(
                "Llama.generate's next draft call did not add the target's own token after the kept drafts: "
                "its loop has changed"
            )
        return Kept(start=start, proposal=proposal[: n - 1], kept=n - 1, next_id=emitted[-1], cut=True)
    if n != kept + 1:
        raise RuntimeError(
            f"Llama.generate added {n} tokens in a round that kept {kept} of {g} drafts (expected {kept + 1}): "
            "its loop has changed"
        )
    return Kept(start=start, proposal=proposal, kept=kept, next_id=emitted[kept])


def rounds_from_calls(prompt_len: int, calls: list, output: list) -> list:
    """Every round of a run: the prefill's plain step, then one per draft call. `calls`: (input ids, proposal as
    the target verified it) per draft call, in order; `output`: the prompt and every token the run kept."""
    output = [int(i) for i in output]
    if len(output) <= prompt_len:
        return []
    rounds = [Kept(start=prompt_len, proposal=[], kept=0, next_id=output[prompt_len])]
    for i, (ids, proposal) in enumerate(calls):
        ids = [int(x) for x in ids]
        if output[: len(ids)] != ids or len(ids) <= prompt_len:
            raise RuntimeError(
                f"Llama.generate's draft call {i + 1} was not given the committed ids (the prompt and the tokens "
                "so far): its loop has changed"
            )
        last = i == len(calls) - 1
        if i == 0 and len(ids) != prompt_len + 1:
            raise RuntimeError("Llama.generate's first draft call did not follow the first token")
        after = output[len(ids) :] if last else [int(x) for x in calls[i + 1][0][len(ids) :]]
        if not last and [int(x) for x in calls[i + 1][0][: len(ids)]] != ids:
            raise RuntimeError(f"Llama.generate's draft call {i + 2} does not extend call {i + 1}'s ids")
        r = settle_call(len(ids), proposal, after, last)
        if r is not None:
            rounds.append(r)
    return rounds


def target_view(rows: np.ndarray, r: Kept, topk: int) -> dict:
    """Round's p, next_p, accept_prob and target_topk from the target's logits at its positions (rows (γ + 1, V):
    row i predicts the token after the round's i-th input). RuntimeError when the rows' argmax is not what the run
    kept (greedy)."""
    g = len(r.proposal)
    logits = np.asarray(rows[: g + 1], dtype=np.float64)  # (g + 1, V)
    if logits.shape[0] != g + 1:
        raise RuntimeError(f"Llama.scores holds {logits.shape[0]} rows for a round that verified {g + 1}")
    logits = logits - logits.max(axis=1, keepdims=True)
    probs = np.exp(logits)
    probs /= probs.sum(axis=1, keepdims=True)  # (g + 1, V)
    best = probs.argmax(axis=1).tolist()
    if best[: r.kept] != r.proposal[: r.kept] or best[r.kept] != r.next_id:
        raise RuntimeError(
            "Llama.scores (logits_all) disagrees with the tokens Llama.generate sampled: the scores' layout "
            "(Llama.eval) has changed, or the run was not greedy"
        )
    p = [float(probs[i, t]) for i, t in enumerate(r.proposal)]
    rows_topk = []
    if topk:
        top = np.argpartition(-probs, topk - 1, axis=1)[:, :topk]  # (g + 1, k), unordered
        rows_topk = [
            sorted(((int(t), float(probs[i, t])) for t in top[i]), key=lambda x: -x[1]) for i in range(g + 1)
        ]
    return {
        "p": p,
        "next_p": float(probs[r.kept, r.next_id]),
        "accept_prob": [1.0 if best[i] == t else 0.0 for i, t in enumerate(r.proposal)],
        "target_topk": rows_topk,
    }


# -- the live run ---------------------------------------------------------------------------------------------


class Detokenizer:
    """`.decode(ids) -> str` over `Llama.detokenize` (special tokens shown, bad UTF-8 replaced): Recording's
    tokenizer."""

    def __init__(self, llm):
        self.llm = llm

    def decode(self, ids) -> str:
        return self.llm.detokenize([int(i) for i in ids], special=True).decode("utf-8", errors="replace")


class _Recorder:
    """Sees each draft call (before and after the inner draft model runs) and settles the round before it: the
    previous round's scores rows are read before the next Llama.eval overwrites them."""

    def __init__(self, llm, prompt_len: int, topk: int):
        self.llm, self.prompt_len, self.topk = llm, prompt_len, topk
        self.calls: list = []  # (input ids, proposal as verified, draft_s)
        self.views: list = []  # per settled round: target_view's dict and its times
        self.t0 = self.t_last = time.perf_counter()  # the run's start; the end of the last draft call

    def before(self, ids: list, t: float) -> None:
        """A draft call at time t: the round before it ended then."""
        if not self.calls:  # the prefill's round: the prompt's last row
            r = Kept(start=self.prompt_len, proposal=[], kept=0, next_id=ids[self.prompt_len])
            self._settle(r, draft_s=0.0, verify_s=t - self.t0)
        else:
            start, proposal, draft_s = self.calls[-1]
            r = settle_call(len(start), proposal, ids[len(start) :], last=False)
            self._settle(r, draft_s=draft_s, verify_s=t - self.t_last)

    def after(self, ids: list, proposal: list, draft_s: float) -> None:
        self.calls.append((ids, proposal, draft_s))
        self.t_last = time.perf_counter()

    def end(self, output: list, t: float) -> None:
        """The run stopped at time t with `output` (prompt + the tokens it kept): settle its last round."""
        if not self.calls:
            if len(output) > self.prompt_len:  # one token: the prefill only
                r = Kept(start=self.prompt_len, proposal=[], kept=0, next_id=output[self.prompt_len])
                self._settle(r, draft_s=0.0, verify_s=t - self.t0)
            return
        start, proposal, draft_s = self.calls[-1]
        r = settle_call(len(start), proposal, output[len(start) :], last=True)
        if r is not None:
            self._settle(r, draft_s=draft_s, verify_s=t - self.t_last)

    def _settle(self, r: Kept, draft_s: float, verify_s: float) -> None:
        rows = self.llm.scores[r.start - 1 : r.start + len(r.proposal)]  # (γ + 1, V)
        self.views.append((r, target_view(rows, r, self.topk), draft_s, verify_s))


class RecordingDraft:
    """The user's draft model, wrapped: each call's input ids and proposal recorded, the proposal returned
    unchanged (Llama.generate cuts it to the context itself: the recorder keeps the part it verifies)."""

    def __init__(self, inner, recorder: _Recorder, n_ctx: int):
        self.inner, self.recorder, self.n_ctx = inner, recorder, n_ctx

    def __call__(self, input_ids, /, **kwargs):
        t = time.perf_counter()
        ids = [int(i) for i in input_ids]
        self.recorder.before(ids, t)
        t_draft = time.perf_counter()
        proposal = self.inner(input_ids, **kwargs)
        draft_s = time.perf_counter() - t_draft
        verified = [int(i) for i in proposal[: max(self.n_ctx - len(ids), 0)]]
        self.recorder.after(ids, verified, draft_s)
        return proposal


def check_version(version: str) -> None:
    """Refuse a llama-cpp-python outside the supported range, naming what the recorder relies on."""
    try:
        parts = tuple(int(x) for x in version.split(".")[:3])
    except ValueError:
        parts = ()
    low, high = SUPPORTED
    if not (len(parts) == 3 and low <= parts < high):
        raise RuntimeError(
            f"llama-cpp-python {version} is outside the recorder's range (>= 0.3.1, < 0.4; tested {TESTED}): it "
            "relies on Llama.generate's draft_model call, Llama.eval's scores rows and Llama.n_ctx"
        )


def _eog(llm):
    """Is a token an end of generation, as Llama._create_completion decides it (llama_vocab_is_eog)."""
    import llama_cpp

    try:
        vocab = llm._model.vocab
        return lambda token: bool(llama_cpp.llama_vocab_is_eog(vocab, token))
    except AttributeError as e:
        raise RuntimeError(f"Llama._model.vocab is gone (llama_vocab_is_eog needs it): {e}") from None


def _draft_name(draft) -> str:
    return "prompt-lookup" if type(draft).__name__ == "LlamaPromptLookupDecoding" else type(draft).__name__


def record(llm, prompt_ids: list, max_tokens: int = 64, *, record_topk: int = 5, raw: bool = False) -> list:
    """Run `llm` (a `Llama(draft_model=..., ...)`) greedily on `prompt_ids` for at most `max_tokens` new tokens
    (stopping at an end-of-generation token as create_completion does; the trace keeps it) and return the run as
    specviz events (`engine.events.write_trace(path, events)` writes the file the page loads). The draft model
    is wrapped for the run and put back after; the prompt is evaluated afresh (`llm.reset()`). `raw`: the prompt
    ids carry no chat template (written into the trace's config)."""
    version = importlib.metadata.version("llama-cpp-python")
    check_version(version)
    return run(llm, prompt_ids, max_tokens, _eog(llm), record_topk=record_topk, raw=raw, version=version)


def run(llm, prompt_ids, max_tokens, is_eog, *, record_topk=5, raw=False, version="") -> list:
    """record() on anything with Llama's surface (draft_model, reset, generate, scores, n_ctx, detokenize,
    model_path): the tests drive it with a stand-in that runs Llama.generate's loop on a toy target."""
    inner = llm.draft_model
    if inner is None:
        raise ValueError(
            "llm has no draft model: build it as Llama(..., draft_model=LlamaPromptLookupDecoding())"
        )
    gamma = getattr(inner, "num_pred_tokens", MAX_GAMMA)
    if not (isinstance(gamma, int) and 1 <= gamma <= MAX_GAMMA):
        raise ValueError(f"the draft model proposes up to {gamma} tokens; specviz draws 1 to {MAX_GAMMA}")
    prompt_ids, n_ctx = [int(i) for i in prompt_ids], llm.n_ctx()
    if not prompt_ids or len(prompt_ids) + max_tokens >= n_ctx:
        raise ValueError(
            f"the prompt ({len(prompt_ids)} tokens) + max_tokens ({max_tokens}) must fit in n_ctx ({n_ctx})"
        )
    cfg = GenerationConfig(gamma=gamma, max_new_tokens=max_tokens, raw=raw, record_topk=record_topk)
    recorder = _Recorder(llm, len(prompt_ids), record_topk)
    llm.draft_model = RecordingDraft(inner, recorder, n_ctx)
    out, stop = list(prompt_ids), "max_new_tokens"
    try:
        llm.reset()
        recorder.t0 = time.perf_counter()
        tokens = llm.generate(prompt_ids, temp=0.0, repeat_penalty=1.0, reset=True)
        for token in tokens:
            out.append(int(token))
            if is_eog(token):
                stop = "eos"
                break
            if len(out) - len(prompt_ids) >= max_tokens:
                break
        recorder.end(out, time.perf_counter())
        tokens.close()  # no further draft call
    finally:
        llm.draft_model = inner
    return _events(llm, recorder, prompt_ids, out, stop, cfg, version, _draft_name(inner))


def _events(llm, recorder: _Recorder, prompt_ids: list, out: list, stop: str, cfg, version: str, draft: str):
    """The recorded rounds as events, after checking them against the pure reconstruction from the calls."""
    expect = rounds_from_calls(len(prompt_ids), [(ids, prop) for ids, prop, _ in recorder.calls], out)
    seen = [r for r, *_ in recorder.views]
    if seen != expect:
        raise RuntimeError("the recorded rounds disagree with the reconstruction from Llama.generate's calls")
    cut = any(r.cut for r in seen)
    engine = {
        "name": ENGINE_NAME,
        "version": version,
        "method": f"{draft} through Llama(draft_model=...), greedy",
        "hook": HOOK,
        "missing": MISSING + ([CUT_NOTE] if cut else []),
    }
    rec = Recording(
        engine=engine,
        target=Path(llm.model_path).name,
        draft=draft,
        tokenizer=Detokenizer(llm),
        prompt_ids=prompt_ids,
        cfg=cfg,
        threads=int(getattr(llm, "n_threads", 0) or 0),
    )
    for r, view, draft_s, verify_s in recorder.views:
        rec.add(
            Round(
                proposal=r.proposal,
                kept=r.kept,
                next_id=r.next_id,
                draft_s=draft_s,
                verify_s=verify_s,
                **view,
            )
        )
    if rec.ids != out:
        raise RuntimeError("the recorded rounds do not commit the tokens Llama.generate yielded")
    text = llm.detokenize(rec.new_ids, prev_tokens=prompt_ids).decode("utf-8", errors="replace")
    rec.finish(stop, text)
    return rec.events


# -- the command ----------------------------------------------------------------------------------------------


def chat_prompt_ids(llm, message: str) -> list:
    """A user message in the GGUF's own chat template (metadata tokenizer.chat_template) through llama-cpp-python's
    Jinja2ChatFormatter, tokenized as its chat handler tokenizes the formatted prompt."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    template = llm.metadata.get("tokenizer.chat_template")
    if not template:
        raise ValueError(f"{Path(llm.model_path).name} has no chat template: use --raw")

    def text(token: int) -> str:
        return llm.detokenize([token], special=True).decode("utf-8", errors="replace") if token >= 0 else ""

    formatter = Jinja2ChatFormatter(
        template=template, eos_token=text(llm.token_eos()), bos_token=text(llm.token_bos())
    )
    result = formatter(messages=[{"role": "user", "content": message}])
    return llm.tokenize(result.prompt.encode("utf-8"), add_bos=not result.added_special, special=True)


def load(path, gamma: int, n_ctx: int = 1024, threads: int | None = None):
    """A `Llama` on a GGUF file with prompt lookup proposing `gamma` tokens (llama-cpp-python's
    LlamaPromptLookupDecoding, its default 2-gram), quiet."""
    try:
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
    except ImportError:
        raise RuntimeError(
            "llama-cpp-python is not installed: `make .venv/.peer-installed-stamp` builds it (requirements-peer.txt)"
        ) from None
    check_version(importlib.metadata.version("llama-cpp-python"))
    extra = {"n_threads": threads, "n_threads_batch": threads} if threads else {}
    draft = LlamaPromptLookupDecoding(num_pred_tokens=gamma)
    return Llama(model_path=str(path), n_ctx=n_ctx, verbose=False, draft_model=draft, **extra)


def target_path(target: str) -> Path:
    """--target: "embedded" (the embedded SmolLM2's GGUF) or a GGUF file."""
    if target == "embedded":
        from ..runtime.models import EMBEDDED_FILE, embedded_gguf_dir

        return embedded_gguf_dir() / EMBEDDED_FILE
    path = Path(target)
    if not path.is_file():
        raise ValueError(f"--target for llama-cpp must be 'embedded' or a GGUF file, got {target!r}")
    return path


def record_cli(args) -> int:
    """`python -m engine record llama-cpp`: one prompt, greedy, prompt lookup, written as a trace."""
    if args.draft != "prompt-lookup":
        raise ValueError(f"--draft for llama-cpp must be prompt-lookup, got {args.draft!r}")
    cfg = GenerationConfig(gamma=args.gamma, max_new_tokens=args.max_new_tokens)  # checks both, by name
    # logits_all keeps n_ctx rows of scores: size it to the run (a token is at least one byte; the template's
    # own text well under 512 tokens), not to the model's context
    n_ctx = 256 * -(-(len(args.prompt.encode("utf-8")) + 512 + cfg.max_new_tokens + MAX_GAMMA) // 256)
    # threads: torch's count (OMP_NUM_THREADS sets it), as benchmarks/llama_cpp_peer.py gives llama.cpp
    llm = load(target_path(args.target), cfg.gamma, n_ctx=n_ctx, threads=torch.get_num_threads())
    ids = llm.tokenize(args.prompt.encode("utf-8")) if args.raw else chat_prompt_ids(llm, args.prompt)
    events = record(llm, ids, cfg.max_new_tokens, raw=args.raw)
    write_trace(args.trace, events)
    s = events[-1].summary
    print(
        f"{args.trace}: {len(events[-1].token_ids)} tokens in {s.get('rounds')} rounds "
        f"({s.get('accepted')}/{s.get('drafted')} drafts kept), stop: {events[-1].stop_reason}"
    )
    return 0
