"""A run recorded from another engine is described as that engine ran it (specviz/imported.py): the recorder's
measured plain-vs-speculative comparison on the Race and Explain tabs, labelled with the engine; no race asked for
that cannot run; each engine's own cache mechanics, never specviz's pointer rollback."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from engine.events import trace_from_json, trace_to_json
from engine.recorders import hf
from engine.recorders.trace import with_plain
from specviz.explain import render_explain
from specviz.race import render_race
from specviz.verify import render_verify

FIXTURES = Path(__file__).parent / "fixtures" / "engines"
TRACES = {
    "transformers": FIXTURES / "hf-prompt-lookup.trace.json",
    "llama.cpp": FIXTURES / "llama-cpp-prompt-lookup.trace.json",
}


def text(html: str) -> str:
    return re.sub(r"<[^>]+>", " ", html)


def load(engine: str) -> list:
    return trace_from_json(TRACES[engine].read_text(encoding="utf-8"))


def everything(events) -> str:
    """Explain, the Race tab and every drafted round's verify view, as text."""
    rounds = sorted({e.round for e in events if e.kind == "verified"})
    return text(
        render_explain(events) + render_race(events) + "".join(render_verify(events, r) for r in rounds)
    )


@pytest.mark.parametrize("engine", list(TRACES))
def test_an_imported_run_is_told_in_its_own_engines_terms(engine):
    """transformers crops its DynamicCache, llama.cpp removes KV cells; the recorder's inference is said as such;
    nothing names a cache pointer or an O(1) rollback, and nothing asks for a race (the control: specviz's own run
    says "pointer")."""
    events = load(engine)
    assert any(e.kind == "rolled_back" for e in events)
    page = everything(events)
    mechanics = {"transformers": "crops its DynamicCache", "llama.cpp": "removes the sequence's KV cells"}[
        engine
    ]
    assert mechanics in page and "it does not observe the cache" in page
    assert "pointer" not in page and "O(1)" not in page
    assert "turn on the race" not in page and "Run both to compare" not in page
    assert "cannot be raced here" in page  # these fixtures were recorded without the plain run
    own = [dataclasses.replace(events[0], engine={})] + events[1:]
    assert "pointer moved back" in everything(own)


def test_the_recorders_plain_run_is_shown_on_race_and_explain(tiny_dirs):
    """hf.run keeps the plain run it measured in the trace (Finished.summary["plain"], validated); Race and Explain
    print it labelled with the engine, the ratio reproducing from the printed seconds."""
    prompt = "1 2 3 4 1 2 3 4 1 2 3 4 1 2"
    out = hf.run(tiny_dirs["target"], "prompt-lookup", prompt, gamma=3, max_new_tokens=12, raw=True)
    events = trace_from_json(trace_to_json(out["events"]))  # the validator's checks
    plain = events[-1].summary["plain"]
    assert plain["plain_s"] == out["plain_s"] and plain["assisted_s"] == out["assisted_s"]
    assert plain["identical"] is True and plain["plain_tokens"] == len(out["reference"])
    for page in (text(render_race(events)), text(render_explain(events))):
        m = re.search(
            r"transformers measured by its recorder, on the same prompt: plain decoding ([\d.]+) s, "
            r"this speculative run ([\d.]+) s, so \1 ÷ \2 = ([\d.]+)× \(identical output\)",
            page,
        )
        assert m, page[:2000]
        assert abs(float(m.group(3)) - float(m.group(1)) / float(m.group(2))) <= 0.005 + 1e-9
        assert "cannot be raced" not in page and "turn on the race" not in page


def test_a_bad_plain_record_is_refused_by_name():
    """finished.summary.plain is checked like every stored figure: a negative time is refused, naming the key."""
    events = load("transformers")
    bad = with_plain(events, plain_s=-1.0, assisted_s=1.0, plain_ids=[])
    with pytest.raises(ValueError, match="finished.summary.plain"):
        trace_from_json(trace_to_json(bad))
    good = with_plain(events, plain_s=2.0, assisted_s=1.0, plain_ids=events[-1].token_ids)
    assert trace_from_json(trace_to_json(good))[-1].summary["plain"]["identical"] is True
