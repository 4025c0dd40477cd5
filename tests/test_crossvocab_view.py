"""The two-tokenisation panel (specviz/crossvocab.py) on hand-built events: splits, merges, escaping."""

from engine.events import Retokenized, Verified
from specviz.crossvocab import render_tokenisations


def retok(round_=1, **kw):
    base = dict(
        round=round_,
        pos=10,
        draft_token_ids=[5, 6],
        draft_tokens=[" hello", "\n\n"],
        target_token_ids=[7, 8, 9, 10],
        target_tokens=[" hel", "lo", "\n", "\n"],
        spans=[[0, 0], [0, 0], [1, 1], [1, 1]],
        held_back="",
    )
    base.update(kw)
    return Retokenized(**base)


def verified(round_=1, accepted=(True, True, False, False)):
    return Verified(
        round=round_,
        pos=10,
        p=[0.5] * 4,
        accept_prob=[1.0] * 4,
        accepted=list(accepted),
        first_rejected=2,
        next_id=1,
        next_token="x",
        next_p=0.5,
        next_kind="corrected",
        target_topk=[],
        greedy=True,
    )


def test_panel_is_empty_without_cross_vocabulary_rounds():
    """Runs whose draft shares the target's vocabulary show no panel at all."""
    assert render_tokenisations([verified()]) == ""


def test_panel_marks_split_tokens_and_verdicts():
    """A draft token split into several target tokens is marked 1:n; rejected target tokens are struck."""
    html = render_tokenisations([retok(), verified()])
    assert "2 draft tokens became 4 target tokens" in html and "4 split or merged" in html
    assert html.count("xv-1n") == 4 and html.count("xv-ok") == 2 and html.count("xv-no") == 2
    assert 'data-from="0-0"' in html and 'data-from="1-1"' in html


def test_panel_marks_merged_tokens_and_held_back_text():
    """Several draft tokens read as one target token are marked n:1; held-back text is shown apart."""
    e = retok(
        draft_token_ids=[1, 2],
        draft_tokens=["\n", "\n"],
        target_token_ids=[3],
        target_tokens=["\n\n"],
        spans=[[0, 1]],
        held_back=" wor",
    )
    html = render_tokenisations([e])
    assert "xv-n1" in html and "xv-held" in html and "␣wor" in html


def test_token_text_is_escaped():
    """Model text with markup is rendered as text, never as HTML."""
    e = retok(draft_tokens=["<script>", "x"], target_tokens=["<b>", "&", '"', "'"], held_back="<i>")
    html = render_tokenisations([e])
    assert "<script>" not in html and "&lt;script&gt;" in html and "<b>" not in html and "&lt;i&gt;" in html


def test_hostile_retokenized_events_are_refused_or_bounded():
    """A trace cannot make the panel loop: spans outside the draft are refused on load, and bounded when hand-built."""
    import pytest

    from engine.events import trace_from_json, trace_to_json
    from specviz.demo_trace import speculative_events

    evil = retok(spans=[[0, 10**12]] * 4)
    # hand-built: rendered, range clamped to the 2 draft tokens
    assert "xv-n1" in render_tokenisations([evil])
    events = speculative_events()
    with pytest.raises(
        ValueError, match=r"retokenized.spans\[0\] must be \[first, last\] draft token indices"
    ):
        trace_from_json(trace_to_json(events[:2] + [dataclass_round(evil, events[1].round)] + events[2:]))


def dataclass_round(e, round_):
    import dataclasses

    return dataclasses.replace(e, round=round_)
