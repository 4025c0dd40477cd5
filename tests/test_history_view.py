"""The session's history on the page (specviz/history.py): the accepted drafts a run took from the session's
earlier runs, counted in the summary line, named in Explain and marked ⟲ in the output and the tree, from a real
engine run on a tiny random model; a run without that history shows none, and a tampered origin (the negative
control) moves the count."""

import dataclasses
import re

import pytest

from engine import Engine, GenerationConfig, load_model
from engine.drafters.suffix import History
from specviz.explain import render_explain
from specviz.history import credit, from_history
from specviz.runs import RunSet, view_run
from specviz.tokens import render_stream
from specviz.tree import render_tree
from ui import app_views as av

PROMPT = "x y z"


@pytest.fixture(scope="module")
def runs(tiny_dirs):
    """(first run, second run with the first in its history, a control run with a fresh history) of one prompt."""
    engine = Engine(load_model(tiny_dirs["target"]), "suffix", measure_step=False)
    cfg = GenerationConfig(gamma=4, max_new_tokens=32, raw=True)
    history = History()
    first = list(engine.generate(PROMPT, cfg, history=history))
    second = list(engine.generate(PROMPT, cfg, history=history))
    control = list(engine.generate(PROMPT, cfg, history=History()))
    return first, second, control


def marks(events) -> tuple[int, int]:
    """(⟲ tokens in the output, ⟲ nodes in the tree)."""
    return render_stream(events).count("tok-hist"), render_tree(events).count("node-hist")


def test_the_second_run_says_and_marks_what_it_drew_from_the_first(runs):
    first, second, control = runs
    c = credit(view_run(second))
    assert c.reads_history and 0 < c.from_history <= c.accepted and c.by_run == {1: c.from_history}
    summary = av.summary_html(second)
    m = re.search(r"⟲ (\d+) of (\d+) accepted drafts? came from your previous run in this session", summary)
    assert m and (int(m.group(1)), int(m.group(2))) == (c.from_history, c.accepted)
    # the summary's count is the α line's accepted count
    assert re.search(rf"\({c.accepted} of \d+ tested drafts? accepted\)", summary)
    explain = re.sub("<[^>]+>", "", render_explain(second))
    assert f"{c.from_history} of this run's {c.accepted} accepted draft" in explain
    assert "your previous run: " in explain and "Forget my history" in explain
    tokens, nodes = marks(second)
    assert tokens == c.from_history and nodes >= c.from_history  # every ⟲ node, on the path or not
    # the tooltip of a marked token names the run and position it came from
    assert re.search(r"drafted from.{0,20}your previous run, position \d+", render_stream(second))


@pytest.mark.parametrize("which", [0, 2])
def test_a_run_without_an_earlier_one_shows_none(runs, which):
    """The session's first run and a control run in a fresh session: no ⟲ count, no mark; Explain says how to
    see the effect."""
    events = runs[which]
    assert credit(view_run(events)).from_history == 0
    assert "came from your" not in av.summary_html(events) and marks(events) == (0, 0)
    assert "Run the same prompt again" in render_explain(events)


def test_a_tampered_origin_moves_the_count(runs):
    """Negative control: a round whose match says its nodes came from this run's own text loses its ⟲ tokens,
    and the count drops by exactly those."""
    view = view_run(runs[1])
    rv = next(r for r in view.rounds if from_history(r))
    before, taken = credit(view).from_history, len(from_history(rv))
    rv.suffix = dataclasses.replace(rv.suffix, origins=[[0, at] for _, at in rv.suffix.origins])
    assert from_history(rv) == {} and credit(view).from_history == before - taken


def test_other_drafters_say_nothing_of_history(tiny_dirs):
    engine = Engine(load_model(tiny_dirs["target"]), "ngram", measure_step=False)
    events = list(engine.generate(PROMPT, GenerationConfig(gamma=4, max_new_tokens=16, raw=True)))
    assert "history" not in render_explain(events).lower() and "⟲" not in av.summary_html(events)


def test_explain_short_version_and_sum_terms_add_up(tiny_dirs):
    """Explain's three sentences and the terms of its Σ (γ·c + v(γ + 1)) reproduce from the figures printed beside
    them (tests/numbers.check_short); a figure one digit off (the negative control) is caught."""
    from tests.numbers import check_short

    engine = Engine(load_model(tiny_dirs["target"]), "ngram")
    events = RunSet()
    for lane, event in engine.race(
        "1 2 3 4 1 2 3 4 1 2", GenerationConfig(gamma=3, max_new_tokens=24, raw=True)
    ):
        events.add(event, lane)
    text = re.sub("<[^>]+>", "", render_explain(events))
    assert "What happened." in text and "Its terms:" in text, text[:3000]
    assert check_short(text) == []
    per = re.search(r"target forwards?: (\d+\.\d\d) tokens per forward", text).group(1)
    wrong = text.replace(f": {per} tokens per forward", f": {float(per) + 0.01:.2f} tokens per forward")
    assert check_short(wrong)
    # a busy machine's run is summed on the host's quiet calibration (engine.costrule): the terms add up either way
    curve, steps = re.search(
        r"\((this run's verify curve|its host's quiet calibration)\) = ([\d.]+)\.", text
    ).groups()
    assert check_short(text.replace(f"{curve}) = {steps}.", f"{curve}) = {float(steps) + 1:.2f}."))
