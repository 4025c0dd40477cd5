"""Traces are checked for meaning (probabilities, γ, rounds, positions, costs, config and summary types),
and the size limits the README promises hold: 50,000 events, nesting depth (issue 12, items 1, 10, 15)."""

import json
import types
from dataclasses import asdict

import pytest

from engine import Engine, GenerationConfig, load_model
from engine.events import (
    MAX_DEPTH,
    MAX_EVENTS,
    MAX_TRACE_BYTES,
    TRACE_FORMAT,
    TRACE_VERSION,
    trace_from_json,
    trace_to_json,
)
from engine.validate import check_verified
from specviz.demo_trace import sample_events

N_EVENTS = len(sample_events())


def wrap(events: list) -> str:
    return json.dumps({"format": TRACE_FORMAT, "version": TRACE_VERSION, "events": events})


def sample_dicts() -> list:
    return json.loads(trace_to_json(sample_events()))["events"]


def edit(kind: str, path: str, value, nth: int = 0):
    """A change to the nth event of `kind`: set the dotted `path` (list indices as numbers) to `value`."""

    def change(events):
        event = [e for e in events if e["kind"] == kind][nth]
        *inner, last = path.split(".")
        for key in inner:
            event = event[int(key)] if isinstance(event, list) else event[key]
        event[int(last) if isinstance(event, list) else last] = value

    return change


def insert(event: dict, at: int = 2):
    return lambda events: events.insert(at, event)


DECIDED = {
    "kind": "decided",
    "round": 1,
    "pos": 2,
    "drafter": "ngram",
    "gamma": 3,
    "reason": "best rate",
    "plain_tokens_per_s": 25.0,
    "candidates": [
        {
            "drafter": "ngram",
            "variant": "",
            "gamma": 3,
            "alpha": 0.5,
            "c": 0.0,
            "v": 1.3,
            "predicted_tokens_per_s": 30.0,
        }
    ],
}
TREE = {
    "kind": "draft_tree",
    "round": 1,
    "pos": 2,
    "token_ids": [10, 11, 20],
    "tokens": ["The", " cat", " sat"],
    "parents": [-1, 0, 0],
    "q": [1.0, 1.0, 1.0],
    "p": [0.9, 0.7, 0.1],
    "accept_prob": [1.0, 1.0, None],
    "status": ["accepted", "accepted", "unvisited"],
    "path": [0, 1],
    "next_id": 12,
    "next_token": " ran",
    "next_kind": "bonus",
}


def bad_decided(**change):
    return insert({**DECIDED, **change})


def bad_candidate(**change):
    return insert({**DECIDED, "candidates": [{**DECIDED["candidates"][0], **change}]})


def bad_tree(**change):
    return insert({**TREE, **change})


BAD = [  # (what, change to the sample trace, the start of the message)
    (
        "alpha -3",
        edit("finished", "summary.acceptance_rate", -3),
        "finished.summary.acceptance_rate must be a probability in [0, 1]",
    ),
    (
        "alpha string",
        edit("finished", "summary.acceptance_rate", "a"),
        "finished.summary.acceptance_rate must be a probability",
    ),
    ("alpha 2", edit("finished", "summary.alpha", 2.0), "finished.summary.alpha must be a probability"),
    (
        "per position",
        edit("finished", "summary.per_position_acceptance", [0.5, 1.5]),
        "finished.summary.per_position_acceptance[1] must be a probability",
    ),
    (
        "summary gamma 3e7",
        edit("finished", "summary.gamma", 3e7),
        "finished.summary.gamma must be a whole number in 1..16",
    ),
    (
        "summary gamma int",
        edit("finished", "summary.gamma", 30_000_000),
        "finished.summary.gamma must be a whole number in 1..16",
    ),
    (
        "summary gamma string",
        edit("finished", "summary.gamma", "3"),
        "finished.summary.gamma must be a whole number in 1..16",
    ),
    (
        "summary gamma 0 spec",
        edit("finished", "summary.gamma", 0),
        "finished.summary.gamma must be a whole number in 1..16",
    ),
    (
        "ar summary gamma 17",
        edit("finished", "summary.gamma", 17, nth=1),
        "finished.summary.gamma must be a whole number in 0..16",
    ),
    ("c zero", edit("finished", "summary.c", 0), "finished.summary.c must be a number > 0"),
    ("v zero", edit("finished", "summary.v", 0.0), "finished.summary.v must be a number > 0"),
    ("c negative", edit("finished", "summary.c", -1.5), "finished.summary.c must be a number > 0"),
    (
        "step zero",
        edit("finished", "summary.target_step_s", 0),
        "finished.summary.target_step_s must be a number > 0",
    ),
    ("wall string", edit("finished", "summary.wall_s", "x"), "finished.summary.wall_s must be a number > 0"),
    ("wall zero", edit("finished", "summary.wall_s", 0), "finished.summary.wall_s must be a number > 0"),
    (
        "rate negative",
        edit("finished", "summary.tokens_per_s", -1),
        "finished.summary.tokens_per_s must be a number >= 0",
    ),
    (
        "speedup string",
        edit("finished", "summary.speedup", "fast"),
        "finished.summary.speedup must be a number >= 0",
    ),
    (
        "rounds 1e9",
        edit("finished", "summary.rounds", 10**9),
        f"finished.summary.rounds must be a whole number in 0..{N_EVENTS}",
    ),
    (
        "drafted negative",
        edit("finished", "summary.drafted", -1),
        "finished.summary.drafted must be a whole number >= 0",
    ),
    (
        "identical string",
        edit("finished", "summary.identical_to_ar", "yes"),
        "finished.summary.identical_to_ar must be true or false",
    ),
    (
        "config temperature",
        edit("run_started", "config.temperature", "hot"),
        "run_started.config.temperature must be a number",
    ),
    (
        "config gamma",
        edit("run_started", "config.gamma", 3e7),
        "run_started.config.gamma must be between 1 and 16",
    ),
    (
        "config seed",
        edit("run_started", "config.seed", 2**64),
        "run_started.config.seed must be a whole number in 0..2**63-1",
    ),
    (
        "config seed digits",
        edit("run_started", "config.seed", 10**4000),
        "run_started.config.seed must be a whole number in 0..2**63-1",
    ),
    (
        "huge token id",
        edit("committed", "token_ids.0", 10**13),
        "committed.token_ids[0]: number 10000000000000 out of range",
    ),
    (
        "run_id slash",
        edit("run_started", "run_id", "../../etc/x"),
        "run_started.run_id must be 1 to 64 characters of A-Z a-z 0-9 _ -",
    ),
    ("run_id NUL", edit("run_started", "run_id", "a\x00b"), "run_started.run_id must be 1 to 64 characters"),
    ("run_id long", edit("run_started", "run_id", "a" * 65), "run_started.run_id must be 1 to 64 characters"),
    ("run_id empty", edit("run_started", "run_id", ""), "run_started.run_id must be 1 to 64 characters"),
    ("mode", edit("run_started", "mode", "turbo"), "run_started.mode must be one of speculative, ar"),
    ("prompt pos", edit("run_started", "pos", 7), "run_started.pos must be the prompt length (2)"),
    (
        "prompt lengths",
        edit("run_started", "prompt_tokens", ["x"]),
        "run_started.prompt_tokens must have one entry per token",
    ),
    (
        "round 1e6",
        edit("committed", "round", 10**6),
        f"committed.round must be a whole number in 0..{N_EVENTS}",
    ),
    (
        "round negative",
        edit("drafted", "round", -1),
        f"drafted.round must be a whole number in 0..{N_EVENTS}",
    ),
    (
        "finished round",
        edit("finished", "round", 10**12),
        f"finished.round must be a whole number in 0..{N_EVENTS}",
    ),
    ("pos 1e9", edit("committed", "pos", 10**9), "committed.pos must be a whole number in 0.."),
    ("pos negative", edit("verified", "pos", -1), "verified.pos must be a whole number in 0.."),
    ("finished pos", edit("finished", "pos", 10**6), "finished.pos must be a whole number in 0.."),
    (
        "rollback position",
        edit("rolled_back", "positions.0", 5000),
        "rolled_back.positions[0] must be a whole number in 0..",
    ),
    (
        "rollback grows",
        edit("rolled_back", "cache_after", 6),
        "rolled_back.cache_after must be at most cache_before (5)",
    ),
    ("q above 1", edit("drafted", "q.0", 2.0), "drafted.q[0] must be a probability in [0, 1]"),
    (
        "q short",
        edit("drafted", "q", [0.5]),
        "drafted.q must have one entry per token (3, like drafted.token_ids), got 1",
    ),
    (
        "draft too long",
        edit("drafted", "token_ids", list(range(17))),
        "drafted.tokens must have one entry per token (17",
    ),
    (
        "token id negative",
        edit("drafted", "token_ids.0", -4),
        "drafted.token_ids[0] must be a whole number >= 0",
    ),
    ("p negative", edit("verified", "p.0", -0.1), "verified.p[0] must be a probability in [0, 1]"),
    (
        "accept_prob 1.5",
        edit("verified", "accept_prob.1", 1.5),
        "verified.accept_prob[1] must be a probability",
    ),
    ("accepted ints", edit("verified", "accepted", [1, 1, 0]), "verified.accepted[0] must be true or false"),
    ("accepted short", edit("verified", "accepted", [True]), "verified.p must have one entry per token"),
    (
        "first_rejected",
        edit("verified", "first_rejected", 5),
        "verified.first_rejected must be a whole number in 0..2",
    ),
    ("next_p", edit("verified", "next_p", 3.0), "verified.next_p must be a probability"),
    (
        "next_kind",
        edit("verified", "next_kind", "magic"),
        "verified.next_kind must be one of corrected, bonus",
    ),
    ("committed p", edit("committed", "p.0", 1.2), "committed.p[0] must be a probability"),
    (
        "committed lengths",
        edit("committed", "origins", ["ar"]),
        "committed.origins must have one entry per token",
    ),
    ("timed negative", edit("round_timed", "draft_s", -1.0), "round_timed.draft_s must be a number >= 0"),
    ("timed gamma", edit("round_timed", "gamma", 17), "round_timed.gamma must be a whole number in 0..16"),
    ("decided gamma", bad_decided(gamma=40), "decided.gamma must be a whole number in 0..16"),
    (
        "decided rate",
        bad_decided(plain_tokens_per_s=-2.0),
        "decided.plain_tokens_per_s must be a number >= 0",
    ),
    ("candidate alpha", bad_candidate(alpha=-3), "decided.candidates[0].alpha must be a probability"),
    (
        "candidate gamma",
        bad_candidate(gamma=3e7),
        "decided.candidates[0].gamma must be a whole number in 0..16",
    ),
    ("candidate cost", bad_candidate(v=-1), "decided.candidates[0].v must be a number >= 0"),
    ("candidate string", bad_decided(candidates=["x"]), "decided.candidates[0] must be an object"),
    ("tree parent", bad_tree(parents=[-1, 2, 0]), "draft_tree.parents[1] must be a whole number in -1..0"),
    (
        "tree status",
        bad_tree(status=["accepted", "maybe", "unvisited"]),
        "draft_tree.status[1] must be one of",
    ),
    ("tree p", bad_tree(p=[0.9, 7.0, 0.1]), "draft_tree.p[1] must be a probability"),
    ("tree path", bad_tree(path=[0, 9]), "draft_tree.path[1] must be a whole number in 0..2"),
    ("tree lengths", bad_tree(q=[1.0]), "draft_tree.q must have one entry per token"),
    ("engine not an object", edit("run_started", "engine", "vllm"), "run_started.engine must be dict"),
    (
        "engine unknown key",
        edit("run_started", "engine", {"name": "x", "speed": 3}),
        "run_started.engine has unknown key 'speed'",
    ),
    (
        "engine long name",
        edit("run_started", "engine", {"name": "x" * 500}),
        "run_started.engine.name must be text of at most 120 characters",
    ),
    (
        "engine missing not a list",
        edit("run_started", "engine", {"name": "x", "missing": "p"}),
        "run_started.engine.missing must be a list",
    ),
    (
        "tree too big",
        bad_tree(**{k: [v[0]] * 65 for k, v in TREE.items() if isinstance(v, list) and k != "path"}),
        "draft_tree.token_ids must hold at most 64 tokens",
    ),
]


@pytest.mark.parametrize("change,message", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_meaningless_traces_are_refused_naming_the_field(change, message):
    """Each number that cannot belong to a real run is refused with one line naming the field and its range."""
    events = sample_dicts()
    change(events)
    with pytest.raises(ValueError) as caught:
        trace_from_json(wrap(events))
    text = str(caught.value)
    assert text.startswith(message) and "\n" not in text and len(text) < 200


def test_the_sample_and_its_edge_values_are_accepted():
    """The checks are not stricter than a run: α = 0 and 1, an AR summary's γ = 0, null costs, the largest seed,
    unknown keys kept as data, a decision, a tree."""
    events = sample_dicts()
    for change in (
        edit("finished", "summary.acceptance_rate", 0),
        edit("finished", "summary.alpha", 1.0),
        edit("finished", "summary.gamma", 0, nth=1),
        edit("finished", "summary.c", None),
        edit("finished", "summary.v", None),
        edit("finished", "summary.extra_note", "kept as data"),
        edit("run_started", "config.future_setting", [1, 2]),
        edit("run_started", "config.seed", 2**63 - 1),
        insert(dict(DECIDED)),
        insert(dict(TREE)),
    ):
        change(events)
    assert len(trace_from_json(wrap(events))) == len(events)


def test_the_issues_crafted_trace_is_refused():
    """Issue 12's 44 KB trace (α = -3, γ = 3e7, with c and v) is refused, so no chart ever computes α ** γ."""
    events = sample_dicts()
    while len(wrap(events)) < 44 * 1024:  # pad with real-looking rounds, as the probe's trace had
        events[-1:-1] = [dict(e) for e in sample_dicts()[1:21]]
    summary = [e for e in events if e["kind"] == "finished"][0]["summary"]
    summary.update(acceptance_rate=-3, gamma=3e7, c=0.5, v=1.2, alpha=-3)
    with pytest.raises(ValueError, match=r"finished\.summary\.(gamma|acceptance_rate|alpha) must be"):
        trace_from_json(wrap(events))
    summary["gamma"] = 3
    with pytest.raises(
        ValueError, match=r"finished\.summary\.(acceptance_rate|alpha) must be a probability in \[0, 1\]"
    ):
        trace_from_json(wrap(events))


def test_uniform_draws_of_a_verified_event_are_checked():
    """Sampling mode's uniform draws u (a field the engine may record) must lie in [0, 1); None is allowed."""
    verified = next(e for e in sample_events(temperature=0.7) if e.kind == "verified")
    for u in (None, [0.0, 0.5, 0.999]):
        check_verified(types.SimpleNamespace(**{**asdict(verified), "u": u}))
    with pytest.raises(ValueError, match=r"verified\.u\[1\] must be a probability in \[0, 1\)"):
        check_verified(types.SimpleNamespace(**{**asdict(verified), "u": [0.1, 1.0]}))


def test_event_count_limit_is_exact():
    """50,000 events pass the count check (then each is read); 50,001 are refused before any is read."""
    assert MAX_EVENTS == 50_000
    with pytest.raises(ValueError, match="unknown event kind"):
        trace_from_json(wrap([0] * MAX_EVENTS))
    with pytest.raises(ValueError, match="trace has 50001 events; the limit is 50000"):
        trace_from_json(wrap([0] * (MAX_EVENTS + 1)))


def test_nesting_depth_is_limited():
    """A field nested past MAX_DEPTH is refused; JSON nested past Python's recursion limit is not valid JSON."""
    assert MAX_DEPTH == 6
    events = sample_dicts()
    edit("finished", "summary.note", [[[[[1]]]]])(events)  # the number sits MAX_DEPTH (6) below the field
    assert trace_from_json(wrap(events))
    edit("finished", "summary.note", [[[[[[1]]]]]])(events)
    with pytest.raises(
        ValueError, match=r"finished\.summary\.note\[0\]\[0\]\[0\]\[0\]\[0\]\[0\]: nested too deeply"
    ):
        trace_from_json(wrap(events))
    deep = '{"format": "specviz-trace", "version": 1, "events": ' + "[" * 100_000 + "]" * 100_000 + "}"
    assert len(deep) < MAX_TRACE_BYTES
    with pytest.raises(ValueError, match="trace is not valid JSON"):
        trace_from_json(deep)


DRAFTS = ["self", "ngram", "layerskip:1", "quant", "auto", "model:sharp"]


@pytest.mark.parametrize("spec", DRAFTS)
@pytest.mark.parametrize(
    "cfg",
    [
        dict(gamma=4),
        dict(gamma=3, temperature=0.8, top_k=20, seed=3),
        dict(gamma=3, tree_budget=12, tree_branching=3),
    ],
    ids=["greedy", "sampled", "tree"],
)
def test_real_engine_traces_still_load(tiny_dirs, spec, cfg):
    """Traces the engine writes (every drafter; greedy, sampled and tree rounds; with the AR run) pass."""
    engine = Engine(
        load_model(tiny_dirs["target"]), spec.replace("model:sharp", f"model:{tiny_dirs['sharp']}")
    )
    result = engine.run("a b a b a b c", GenerationConfig(max_new_tokens=20, **cfg), compare_ar=True)
    events = list(result.events)
    # + speedup, ar_*: checked too
    events[-1] = type(events[-1])(**{**asdict(events[-1]), "summary": result.summary})
    assert trace_from_json(trace_to_json(events)) == events


def test_real_embedded_trace_still_loads(embedded):
    """A run of the real embedded model, compared with AR, round-trips through the validator."""
    engine = Engine(embedded, "ngram")
    result = engine.run(
        "Copy this exactly: the cat sat on the mat, the cat sat on the mat.",
        GenerationConfig(gamma=4, max_new_tokens=32),
        compare_ar=True,
    )
    assert trace_from_json(trace_to_json(result.events)) == result.events


def test_a_refusal_naming_a_hostile_key_stays_one_line():
    """A config key holding a newline (found by the fuzz) is quoted in the message, which stays one line."""
    trace = json.loads(trace_to_json(sample_events()))
    trace["events"][0]["config"]["gamma\n"] = 1e13
    with pytest.raises(ValueError) as e:
        trace_from_json(json.dumps(trace))
    assert "\n" not in str(e.value) and "'gamma\\n'" in str(e.value)


# -- issue 40's small items: meaning checks on beam and progress events, text that is not text -----------------


def test_beam_verified_cannot_widen_the_position_limit():
    """A beam_verified claiming 10**12 steps (it widened every position's limit) is refused by name; the real run's
    events pass; a cache that grows in a rollback is refused too."""
    import dataclasses

    from engine.validate import validate_events
    from tests.test_beam_view import run

    events = run()
    validate_events(events)
    for i, e in enumerate(events):
        if e.kind == "beam_verified":
            for bad, field in (
                ({"steps": 10**12}, "steps"),
                ({"cache_after": e.cache_before + 1}, "cache_after"),
            ):
                with pytest.raises(ValueError, match=f"beam_verified.{field}"):
                    validate_events(events[:i] + [dataclasses.replace(e, **bad)] + events[i + 1 :])


def test_prefilling_progress_is_checked():
    """A prefilling event past its own total, or after round 0, is refused; one inside it passes."""
    from engine.events import Prefilling
    from engine.validate import validate_events
    from specviz.demo_trace import long_events

    events = long_events(2)
    validate_events(events[:1] + [Prefilling(round=0, pos=1, total=1)] + events[1:])
    for bad in (Prefilling(round=0, pos=5, total=1), Prefilling(round=1, pos=0, total=1)):
        with pytest.raises(ValueError, match="prefilling"):
            validate_events(events[:1] + [bad] + events[1:])


def test_a_lone_surrogate_in_a_trace_is_refused_by_field():
    """JSON's "\\ud800" escape decodes to text no page or writer takes: refused naming the field (it raised a raw
    codec error later)."""
    from engine.events import trace_from_json, trace_to_json
    from specviz.demo_trace import long_events

    text = trace_to_json(long_events(2))
    bad = text.replace('"prompt_text":"Hi"', '"prompt_text":"H\\ud800i"', 1)
    assert bad != text
    with pytest.raises(ValueError, match=r"run_started.prompt_text: not valid text \(a lone surrogate"):
        trace_from_json(bad)
