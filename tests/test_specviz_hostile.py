"""Renderers on hand-built events that never went through trace_from_json: long chains and odd numbers
render instead of crashing (issue 12, item 10). No torch here."""

import dataclasses
import sys

import pytest

from engine.events import Committed, Drafted, RunStarted, Verified
from specviz import events_upto, measured_speedup, render_stream, render_tree, rounds_of
from specviz.demo_trace import sample_events
from specviz.runs import main_run

CHAIN = 2000  # the probe's RecursionError started at ~600 tokens


def long_chain_events(drafted: bool) -> list:
    """One round holding a chain of CHAIN tokens: committed by a plain step, or drafted and all accepted."""
    ids, tokens = list(range(CHAIN)), [f"t{i}" for i in range(CHAIN)]
    events = [
        RunStarted(
            round=0,
            run_id="long",
            mode="speculative",
            target="t",
            draft="d",
            device="cpu",
            dtype="float32",
            config={"gamma": 4, "temperature": 0.0},
            prompt_text="Hi",
            prompt_ids=[1],
            prompt_tokens=["Hi"],
            pos=1,
        )
    ]
    if drafted:
        events += [
            Drafted(
                round=1, pos=1, token_ids=ids, tokens=tokens, q=[1.0] * CHAIN, draft_topk=[], drafter="d"
            ),
            Verified(
                round=1,
                pos=1,
                p=[0.9] * CHAIN,
                accept_prob=[1.0] * CHAIN,
                accepted=[True] * CHAIN,
                first_rejected=None,
                next_id=7,
                next_token="!",
                next_p=0.5,
                next_kind="bonus",
                target_topk=[],
                greedy=True,
            ),
        ]
        ids, tokens = ids + [7], tokens + ["!"]
    origins = ["accepted"] * CHAIN + ["bonus"] if drafted else ["ar"] * CHAIN
    events.append(
        Committed(round=1, pos=1, token_ids=ids, tokens=tokens, origins=origins, p=[0.9] * len(ids))
    )
    return events


@pytest.mark.parametrize("drafted", [False, True], ids=["committed", "drafted"])
def test_a_2000_token_chain_renders_without_recursion(drafted):
    """The tree of a round with a 2,000-token chain is built iteratively: every node drawn, well nested."""
    assert CHAIN > sys.getrecursionlimit() // 2
    html = render_tree(long_chain_events(drafted))
    assert html.count("data-node=") == CHAIN + 1 + drafted  # the context, the chain, the bonus token
    assert html.count("<li") == html.count("</li>") and html.count("<ul") == html.count("</ul>")
    assert 'data-node="1.1999"' in html and "t1999" in html
    assert render_stream(long_chain_events(drafted)).count('class="tok tok-') == CHAIN + drafted


def test_long_chain_rounds_count_toward_the_tree_budget():
    """A round's weight counts its committed tokens, so a huge plain step collapses the rounds before it."""
    short = sample_events(with_ar=False)[:-1]
    events = short + [dataclasses.replace(e, round=e.round + 4) for e in long_chain_events(False)[1:]]
    html = render_tree(events, max_nodes=1200)
    assert 'class="tree-older" data-rounds="4"' in html


def odd(summary=None, config=None) -> list:
    """The sample run with some Finished.summary / RunStarted.config values replaced."""
    out = []
    for e in sample_events():
        if e.kind == "finished" and summary:
            e = dataclasses.replace(e, summary={**e.summary, **summary})
        if e.kind == "run_started" and config:
            e = dataclasses.replace(e, config={**e.config, **config})
        out.append(e)
    return out


ODD = {
    "c=v=0": odd(summary=dict(c=0, v=0, target_step_s=0)),
    "wall_s strings": odd(summary=dict(wall_s="x", tokens_per_s="y")),
    "wall_s zero": odd(summary=dict(wall_s=0, tokens_per_s=0)),
    "wall_s negative": odd(summary=dict(wall_s=-1.0, tokens_per_s=-5.0)),
    "alpha and gamma strings": odd(summary=dict(acceptance_rate="a", gamma="3")),
    "config strings": odd(config=dict(temperature="hot", gamma="3")),
    "config gamma huge": odd(config=dict(gamma=3 * 10**7)),
}


@pytest.mark.parametrize("events", ODD.values(), ids=ODD.keys())
def test_odd_numbers_in_hand_built_events_do_not_crash_the_renderers(events):
    """Strings, zeros and negatives where times, rates or settings belong: stream, tree, replay and speedup cope."""
    assert render_stream(events).count('class="tok tok-') > 0
    assert 'class="tree-round"' in render_tree(events)
    assert render_tree(events_upto(events, 2), upto_round=2) and rounds_of(events) == 4
    speedup = measured_speedup(events)
    assert speedup is None or speedup > 0
    run = main_run(events)
    assert run.tokens_per_s() is None or run.tokens_per_s() > 0
    assert 0 <= run.gamma <= 16 and run.greedy in (True, False)
