"""The llama.cpp recorder (engine/recorders/llama_cpp.py): rounds read back from llama-cpp-python's draft calls.

The unit tests need no llama_cpp: hand-made call sequences, and a stand-in `ToyLlama` that runs Llama.generate's
speculative loop (transcribed from llama-cpp-python 0.3.36) on a toy greedy target whose continuation is known, so
every round's kept count is known before the recorder reads it. The integration tests run the real llama.cpp on the
embedded SmolLM2 GGUF with prompt lookup (skipped when llama-cpp-python is not installed: `make peer` builds it).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from engine.config import GenerationConfig
from engine.events import trace_from_json, trace_to_json
from engine.recorders import llama_cpp as rec
from engine.recorders.trace import Recording, Round
from tests.recorded_prompts import PROMPTS

HAVE_LLAMA = importlib.util.find_spec("llama_cpp") is not None
FIXTURE = Path(__file__).parent / "fixtures" / "engines" / "llama-cpp-prompt-lookup.trace.json"

# -- hand-made calls -------------------------------------------------------------------------------------------


def test_rounds_from_calls_read_kept_counts_from_the_next_calls_input():
    """Partial, full and empty proposals: kept = len(next input) - len(input) - 1, next_id its last id."""
    prompt = [1, 2, 3]
    output = prompt + [10, 11, 99, 7, 8, 9, 4, 5]
    calls = [
        (prompt + [10], [11, 12, 13]),  # kept 1 (11), corrected to 99
        (prompt + [10, 11, 99], []),  # nothing proposed: a plain step adds 7
        (prompt + [10, 11, 99, 7], [8, 9]),  # both kept, bonus 4
        (
            prompt + [10, 11, 99, 7, 8, 9, 4],
            [5, 6],
        ),  # last: the run stopped after the first draft (max tokens)
    ]
    got = rec.rounds_from_calls(len(prompt), calls, output)
    K = rec.Kept
    assert got == [
        K(start=3, proposal=[], kept=0, next_id=10),
        K(start=4, proposal=[11, 12, 13], kept=1, next_id=99),
        K(start=6, proposal=[], kept=0, next_id=7),
        K(start=7, proposal=[8, 9], kept=2, next_id=4),
        K(start=10, proposal=[], kept=0, next_id=5, cut=True),  # a plain step: the drafts left out
    ]
    assert sum(r.kept + 1 for r in got) == len(output) - len(prompt)


def test_the_last_round_cut_by_max_tokens_keeps_what_the_run_yielded():
    """A run that stops inside a round: the drafts past its last token are left out, that token is the target's."""
    prompt = [1, 2]
    calls = [([1, 2, 5], [6, 7, 8, 9])]
    for n, expect in [
        (1, rec.Kept(start=3, proposal=[], kept=0, next_id=6, cut=True)),
        (3, rec.Kept(start=3, proposal=[6, 7], kept=2, next_id=8, cut=True)),
        (4, rec.Kept(start=3, proposal=[6, 7, 8], kept=3, next_id=9, cut=True)),
    ]:
        assert rec.rounds_from_calls(2, calls, prompt + [5] + [6, 7, 8, 9][:n])[-1] == expect
    # the round ended where the run stopped (bonus after all 4, or a correction): nothing cut
    assert rec.rounds_from_calls(2, calls, [1, 2, 5, 6, 7, 8, 9, 3])[-1].cut is False
    assert rec.rounds_from_calls(2, calls, [1, 2, 5, 6, 0])[-1] == rec.Kept(
        start=3, proposal=[6, 7, 8, 9], kept=1, next_id=0
    )


def test_the_last_round_cut_by_an_accepted_end_of_text():
    """An end-of-text that was itself a kept draft ends the run inside the round; a corrected one does not cut it."""
    eos = 0
    calls = [([1, 5], [6, eos, 8])]
    assert rec.rounds_from_calls(1, calls, [1, 5, 6, eos])[-1] == rec.Kept(
        start=2, proposal=[6], kept=1, next_id=eos, cut=True
    )
    assert rec.rounds_from_calls(1, calls, [1, 5, 6, 7])[-1] == rec.Kept(  # the drafted end-of-text rejected
        start=2, proposal=[6, eos, 8], kept=1, next_id=7
    )


def test_a_run_of_one_token_is_the_prefill_alone():
    """max_tokens 1: no draft call, one plain round."""
    assert rec.rounds_from_calls(2, [], [1, 2, 9]) == [rec.Kept(start=2, proposal=[], kept=0, next_id=9)]


@pytest.mark.parametrize(
    "calls, output, message",
    [
        ([([1, 5], [6, 7])], [1, 5, 9, 7, 3], "added 3 tokens in a round that kept 0"),  # tokens after a miss
        ([([1, 5], [6]), ([1, 5, 6], [])], [1, 5, 6, 2], "did not add the target's own token"),
        ([([1, 5], [6]), ([1, 5], [])], [1, 5, 2], "twice without a new token"),
        ([([1, 4], [6])], [1, 5, 6], "was not given the committed ids"),
        ([([1, 5, 6], [7])], [1, 5, 6, 7], "first draft call did not follow the first token"),
    ],
)
def test_ids_that_cannot_come_from_generates_loop_are_refused(calls, output, message):
    """The recorder fails loudly, naming Llama.generate, when the calls do not fit its loop."""
    with pytest.raises(RuntimeError, match=message):
        rec.rounds_from_calls(1, calls, output)


def commits(prompt: list, rounds: list, output: list) -> bool:
    """Whether rounds, built into a trace, commit exactly `output` (the check the recorder makes)."""
    r = Recording(engine={"name": "toy"}, target="t", draft="d", tokenizer=Text(), prompt_ids=prompt, cfg=CFG)
    for k in rounds:
        g = len(k.proposal)
        r.add(
            Round(
                proposal=k.proposal,
                kept=k.kept,
                next_id=k.next_id,
                p=[1.0] * g,
                next_p=1.0,
                accept_prob=[1.0] * g,
            )
        )
    return r.ids == output


def test_an_off_by_one_kept_count_fails_the_check():
    """Negative control: reading kept as len(next) - len(input) (one too many) breaks the committed ids."""
    prompt = [1, 2, 3]
    calls = [([1, 2, 3, 10], [11, 12, 13]), ([1, 2, 3, 10, 11, 99], [5, 6])]
    output = [1, 2, 3, 10, 11, 99, 5, 4]
    right = rec.rounds_from_calls(3, calls, output)
    assert commits(prompt, right, output)
    wrong = [
        rec.Kept(start=r.start, proposal=r.proposal, kept=min(r.kept + 1, len(r.proposal)), next_id=r.next_id)
        for r in right
    ]
    assert not commits(prompt, wrong, output)


def test_target_view_reads_p_and_refuses_scores_that_disagree():
    """p, next_p, accept_prob and top-k from the rows; rows whose argmax is not the kept token are refused."""
    rows = np.full((3, 8), -5.0, dtype=np.float32)
    rows[0, 4], rows[1, 5], rows[2, 1] = 3.0, 2.0, 4.0  # argmax per row: 4, 5, 1
    r = rec.Kept(start=2, proposal=[4, 6], kept=1, next_id=5)
    view = rec.target_view(rows, r, topk=2)
    assert view["accept_prob"] == [1.0, 0.0] and view["p"][0] > 0.9 and view["next_p"] > 0.9
    assert [t for t, _ in view["target_topk"][1]][0] == 5 and len(view["target_topk"]) == 3
    assert rec.target_view(rows, r, topk=0)["target_topk"] == []
    with pytest.raises(RuntimeError, match="Llama.scores"):
        rec.target_view(rows, rec.Kept(start=2, proposal=[4, 6], kept=2, next_id=1), topk=0)


def test_versions_outside_the_range_are_refused_naming_what_moves():
    """0.3.1 (speculative decoding fixed) to 0.4 is accepted; others are refused naming what the recorder uses."""
    rec.check_version("0.3.36")
    rec.check_version("0.3.1")
    for v in ("0.2.90", "0.3.0", "0.4.0", "dev"):
        with pytest.raises(RuntimeError, match="Llama.generate"):
            rec.check_version(v)


# -- a stand-in Llama that runs generate's loop ----------------------------------------------------------------

VOCAB, EOS = 64, 0
CHAIN = [int(t) for t in np.random.default_rng(0).permutation(np.arange(1, VOCAB))]
NEXT = {a: b for a, b in zip(CHAIN, CHAIN[1:] + CHAIN[:1])}  # the toy target's greedy next token
CFG = GenerationConfig()


class Text:
    def decode(self, ids):
        return "".join("</s>" if i == EOS else f"t{i} " for i in ids)


class ToyLlama:
    """Llama's surface, with Llama.generate's loop transcribed from llama-cpp-python 0.3.36 (the speculative
    part: eval the last token and the drafts in one call, sample and compare position by position, cut the
    cache at the first miss, call the draft model with the committed ids), on a toy greedy target."""

    def __init__(self, draft_model=None, next_of=None, n_ctx=256):
        self.draft_model, self.next_of, self._n_ctx = draft_model, dict(next_of or NEXT), n_ctx
        self.input_ids = np.zeros(n_ctx, dtype=np.intc)
        self.scores = np.zeros((n_ctx, VOCAB), dtype=np.single)
        self.n_tokens, self.model_path, self.evals = 0, "/toy/toy.gguf", []

    def n_ctx(self):
        return self._n_ctx

    def reset(self):
        self.n_tokens = 0

    def detokenize(self, ids, prev_tokens=None, special=False):
        return "".join("</s>" if i == EOS and special else "" if i == EOS else f"t{i} " for i in ids).encode()

    def eval(self, tokens):
        self.evals.append((self.n_tokens, [int(t) for t in tokens]))
        for t in tokens:
            row = np.random.default_rng(self.n_tokens * VOCAB + int(t)).normal(size=VOCAB)
            row[self.next_of[int(t)]] += 6.0  # (V,) the target's logits after t
            self.input_ids[self.n_tokens], self.scores[self.n_tokens] = t, row
            self.n_tokens += 1

    def generate(self, tokens, temp=0.0, repeat_penalty=1.0, reset=True):
        if reset:
            self.reset()
        tokens = list(tokens)
        sample_idx = self.n_tokens + len(tokens) - 1
        while True:
            self.eval(tokens)
            while sample_idx < self.n_tokens:
                token = int(np.argmax(self.scores[sample_idx]))
                sample_idx += 1
                yield token
                tokens.clear()
                tokens.append(token)
                if sample_idx < self.n_tokens and token != self.input_ids[sample_idx]:
                    self.n_tokens = sample_idx
                    break
            if self.draft_model is not None:
                self.input_ids[self.n_tokens : self.n_tokens + len(tokens)] = tokens
                draft = self.draft_model(self.input_ids[: self.n_tokens + len(tokens)])
                tokens.extend(draft.astype(int)[: self._n_ctx - self.n_tokens - len(tokens)])


class PlanDraft:
    """Proposes the toy target's own continuation, wrong from a planned place on: call i proposes plan[i] =
    (length, kept) tokens of which the first `kept` are right (the plan repeats its last entry)."""

    num_pred_tokens = 4

    def __init__(self, plan, next_of=None):
        self.plan, self.calls, self.next_of = plan, 0, dict(next_of or NEXT)

    def __call__(self, input_ids):
        length, kept = self.plan[min(self.calls, len(self.plan) - 1)]
        self.calls += 1
        out, t = [], int(input_ids[-1])
        for i in range(length):
            t = self.next_of[t]
            out.append(t if i < kept else (t % (VOCAB - 1)) + 1)  # a wrong token, never EOS
        return np.array(out, dtype=np.intc)


def plain(next_of, prompt, n):
    """The toy target's own greedy output without a draft model (the same loop, no draft)."""
    out = []
    for t in ToyLlama(next_of=next_of).generate(prompt):
        out.append(t)
        if t == EOS or len(out) >= n:
            return out


PLAN = [(4, 2), (4, 4), (0, 0), (3, 0), (2, 1)]


def test_a_toy_run_records_the_planned_rounds_and_a_valid_trace():
    """Through generate's own loop: kept counts equal the plan, the trace validates, the output is the target's."""
    prompt = [CHAIN[0], CHAIN[1]]
    draft = PlanDraft(PLAN)
    llm = ToyLlama(draft)
    events = rec.run(llm, prompt, 24, lambda t: t == EOS, record_topk=3, version="toy")
    assert llm.draft_model is draft  # put back
    events = trace_from_json(trace_to_json(events))  # the validator
    verified = [e for e in events if e.kind == "verified"]
    assert [sum(e.accepted) for e in verified[:4]] == [
        2,
        4,
        0,
        1,
    ]  # the plan (the empty call is a plain round)
    committed = [t for e in events if e.kind == "committed" for t in e.token_ids]
    assert committed == events[-1].token_ids == plain(NEXT, prompt, 24)
    rounds = [e for e in events if e.kind == "committed"]
    assert sum(len(e.token_ids) for e in rounds) == sum(sum(v.accepted) for v in verified) + len(rounds)
    assert events[-1].summary["rounds"] == len(rounds) == len(llm.evals)  # one target forward per round
    assert events[0].engine["name"] == rec.ENGINE_NAME and events[0].draft == "PlanDraft"
    timed = [e for e in events if e.kind == "round_timed"]
    assert all(e.total_s >= e.draft_s >= 0 for e in timed) and timed[0].draft_s == 0.0


def test_the_toy_kept_counts_match_what_the_target_evaluated():
    """Independently of the draft calls: eval i holds [last, drafts]; the cache kept n_before(i+1) - n_before(i) - 1."""
    prompt = [CHAIN[5], CHAIN[6], CHAIN[7]]
    llm = ToyLlama(PlanDraft(PLAN))
    events = rec.run(llm, prompt, 30, lambda t: t == EOS, version="toy")
    spec = llm.evals[1:]  # evals[0] is the prompt
    drafted = [e.token_ids for e in events if e.kind == "drafted"]
    verified = [sum(e.accepted) for e in events if e.kind == "verified"]
    rounds = [e for e in events if e.kind == "round_timed"][1:-1]  # the last one is cut by max tokens
    assert [r.gamma for r in rounds] == [len(tokens) - 1 for _, tokens in spec[:-1]]
    assert drafted == [tokens[1:] for _, tokens in spec[:-1] if len(tokens) > 1]
    kept = [b - a - 1 for (a, ta), (b, _) in zip(spec, spec[1:]) if len(ta) > 1]
    assert verified[: len(kept)] == kept


@pytest.mark.parametrize("n, eos_at", [(7, None), (11, None), (40, 9), (40, 5)])
def test_a_toy_run_cut_by_max_tokens_or_eos(n, eos_at):
    """The last round cut by the token budget or by an end-of-text (kept draft or target token): the trace
    commits exactly the target's own output, stops for the right reason, and says what it left out."""
    prompt = [CHAIN[0], CHAIN[1]]
    next_of = dict(NEXT)
    if eos_at is not None:
        next_of[CHAIN[1 + eos_at]] = EOS  # the eos_at-th new token is an end-of-text
    next_of[EOS] = CHAIN[3]
    llm = ToyLlama(PlanDraft([(4, 4)], next_of), next_of=next_of)
    events = trace_from_json(trace_to_json(rec.run(llm, prompt, n, lambda t: t == EOS, version="toy")))
    reference = plain(next_of, prompt, n)
    assert events[-1].token_ids == reference
    assert events[-1].stop_reason == ("eos" if reference[-1] == EOS else "max_new_tokens")
    cut = any(m.startswith("the last round") for m in events[0].engine["missing"])
    # prefill then rounds of 5 (4 kept + bonus): the run stops inside a round unless its length is 1 mod 5
    assert cut == ((len(reference) - 1) % 5 != 0)


def test_a_draft_model_proposing_more_than_specviz_draws_is_refused():
    """γ above 16 cannot be drawn: refused before the run, by name."""
    draft = PlanDraft(PLAN)
    draft.num_pred_tokens = 20
    with pytest.raises(ValueError, match="proposes up to 20"):
        rec.run(ToyLlama(draft), [1, 2], 8, lambda t: False)


# -- the real llama.cpp ----------------------------------------------------------------------------------------

needs_llama = pytest.mark.skipif(
    not HAVE_LLAMA, reason="llama-cpp-python is not installed (an extra: `make peer` builds it)"
)

MAX_NEW = 32
NEAR_TIE = 0.2  # logits: a top-2 gap this small can flip between llama.cpp's 1-token and multi-token forwards


def llama_pair(path):
    """A GGUF twice, one thread each (the tests share the machine): with prompt lookup (γ = 4), and without a draft
    model (logits_all on, as a draft model switches it on, so its margins can be read)."""
    from llama_cpp import Llama

    spec = rec.load(path, gamma=4, n_ctx=512, threads=1)
    alone = Llama(
        model_path=str(path), n_ctx=512, n_threads=1, n_threads_batch=1, logits_all=True, verbose=False
    )
    return spec, alone


@pytest.fixture(scope="module")
def shipped():
    """The embedded SmolLM2's GGUF as shipped (Q4_1)."""
    return llama_pair(rec.target_path("embedded"))


@pytest.fixture(scope="module")
def f32():
    """The same weights de-quantized to F32 (the copy `make peer` uses, written once into the cache folder)."""
    from benchmarks.llama_cpp_peer import f32_gguf
    from engine.config import CACHE_DIR

    q41 = rec.target_path("embedded")
    return llama_pair(f32_gguf(q41, CACHE_DIR / "gguf" / (q41.stem + ".F32.gguf")))


def own_tokens(llm, ids, n):
    """llama.cpp's own greedy tokens from a fresh cache (Llama.generate, unrecorded), stopped as record() stops."""
    eog, out = rec._eog(llm), []
    llm.reset()
    for t in llm.generate(ids, temp=0.0, repeat_penalty=1.0):
        out.append(int(t))
        if eog(t) or len(out) >= n:
            return out


def recorded(spec, ids, n) -> tuple[list, list]:
    """record()'s events, and what the target evaluated meanwhile: (cache length before, tokens) per Llama.eval."""
    evals, inner = [], spec.eval

    def eval_(tokens):
        evals.append((spec.n_tokens, [int(t) for t in tokens]))
        inner(tokens)

    spec.eval = eval_
    try:
        return rec.record(spec, ids, n), evals
    finally:
        del spec.eval


def checked(events, evals, ids) -> list:
    """Every recorded run: it passes the validator; one target forward per round (the first the prompt's); each
    round's drafts are what the target evaluated after the last token; its kept count is how far the target's
    cache grew by the next forward; accepted + rounds = the output."""
    events = trace_from_json(trace_to_json(events))
    assert evals[0] == (0, ids) and len(evals) == events[-1].summary["rounds"]
    drafted = {e.round: e.token_ids for e in events if e.kind == "drafted"}
    kept = {e.round: sum(e.accepted) for e in events if e.kind == "verified"}
    for i in range(1, len(evals) - 1):  # evals[i]: round i + 1's forward, [last token] + drafts
        assert drafted.get(i + 1, []) == evals[i][1][1:]
        assert kept.get(i + 1, 0) == evals[i + 1][0] - evals[i][0] - 1
    last = drafted.get(len(evals), [])  # the last round: its drafts cut where the run stopped
    assert last == evals[-1][1][1 : 1 + len(last)]
    committed = [t for e in events if e.kind == "committed" for t in e.token_ids]
    assert committed == events[-1].token_ids and len(committed) == sum(kept.values()) + len(evals)
    return events


@needs_llama
@pytest.mark.slow
def test_llama_cpp_traces_equal_its_own_output_without_a_draft_model(f32):
    """12 prompts, greedy, prompt lookup, on the embedded weights in F32: each trace commits exactly llama.cpp's
    output without a draft model (Llama.generate's ids; create_completion's text) and reads the kept counts the
    target's cache shows; prompt lookup proposed on these prompts."""
    spec, alone = f32
    drafted = 0
    for i, prompt in enumerate(PROMPTS):
        ids = rec.chat_prompt_ids(spec, prompt)
        events = checked(*recorded(spec, ids, MAX_NEW), ids)
        own = own_tokens(alone, ids, MAX_NEW)
        assert events[-1].token_ids == own, prompt
        if i % 3 == 0:  # llama.cpp's public call too, on every third prompt (time)
            alone.reset()
            done = alone.create_completion(ids, max_tokens=MAX_NEW, temperature=0.0)
            assert events[-1].text == done["choices"][0]["text"], prompt
        drafted += sum(1 for e in events if e.kind == "drafted")
    assert drafted >= len(PROMPTS)


@needs_llama
@pytest.mark.slow
def test_on_the_shipped_q4_1_gguf_traces_equal_llama_cpps_speculative_output(shipped):
    """On the Q4_1 GGUF each trace commits exactly llama.cpp's unrecorded speculative output (the recorder changes
    nothing); that output leaves llama.cpp's plain output only at a near-tie of the plain run's logits (its
    multi-token forwards round differently from its 1-token ones: docs/engines.md)."""
    spec, alone = shipped
    same = 0
    for prompt in PROMPTS:
        ids = rec.chat_prompt_ids(spec, prompt)
        events = checked(*recorded(spec, ids, MAX_NEW), ids)
        assert events[-1].token_ids == own_tokens(spec, ids, MAX_NEW), prompt
        plain = own_tokens(alone, ids, MAX_NEW)
        ours = events[-1].token_ids
        d = next((i for i, (a, b) in enumerate(zip(ours, plain)) if a != b), None)
        if d is None:
            assert ours == plain, prompt
            same += 1
            continue
        gap = np.diff(np.sort(alone.scores[len(ids) - 1 + d].astype(np.float64))[-2:])[0]
        assert gap < NEAR_TIE, (prompt, d, gap)
    assert same >= len(PROMPTS) // 2


@needs_llama
@pytest.mark.slow
def test_a_llama_cpp_trace_renders_every_view(shipped):
    """The page's views (ui.app_views.views: stream, tree, verify, charts) all render a recorded trace."""
    from ui import app_views as av

    spec, _ = shipped
    events = rec.record(spec, rec.chat_prompt_ids(spec, PROMPTS[9]), 32)
    views = av.views(trace_from_json(trace_to_json(events)))
    assert len(views) == len(av.VIEWS) and all(isinstance(v, str) and v for v in views[:6])
    assert all(f is not None for f in views[6:])
    assert "tok-rejected" in views[0] and "tok-accepted" in views[0]


def test_the_fixture_is_a_recorded_trace_that_loads_and_renders():
    """tests/fixtures/engines/llama-cpp-prompt-lookup.trace.json (the browser test loads it) is small, valid, names
    llama.cpp and renders every view."""
    from ui import app_views as av

    assert FIXTURE.stat().st_size < 100_000
    events = av.load_trace(FIXTURE)
    assert events[0].engine["name"] == rec.ENGINE_NAME and events[-1].token_ids
    assert sum(sum(e.accepted) for e in events if e.kind == "verified") > 0
    views = av.views(events)
    assert all(isinstance(v, str) and v for v in views[:6]) and all(f is not None for f in views[6:])


@needs_llama
@pytest.mark.slow
def test_the_fixture_is_what_the_recorder_writes_today(shipped):
    """The fixture's tokens are what the recorder commits now (FIXTURE_COMMAND in docs/engines.md rewrites it)."""
    events = trace_from_json(FIXTURE.read_bytes())
    spec, _ = shipped
    ids = events[0].prompt_ids
    again = rec.record(spec, ids, events[0].config["max_new_tokens"])
    assert again[-1].token_ids == events[-1].token_ids
    assert [e.token_ids for e in again if e.kind == "drafted"] == [
        e.token_ids for e in events if e.kind == "drafted"
    ]
