"""HTML renderers on hand-built event lists (specviz.demo_trace builds them from engine.events dataclasses)."""

import re
from dataclasses import dataclass

from engine.events import Committed, RoundTimed, RunStarted, event_to_dict
from specviz import (
    events_upto,
    render_explain,
    render_legend,
    render_race,
    render_stream,
    render_tree,
    replay_frame,
    rounds_of,
    split_runs,
    time_at_round,
)
from specviz.demo_trace import SPEC_ORIGINS, ar_events, sample_events, speculative_events
from specviz.markup import read_tip, tip_text


def classes(html, cls):
    return re.findall(rf'<span class="[^"]*\b{cls}\b[^"]*"', html)


@dataclass(frozen=True)
class Mystery:
    kind = "mystery"
    round: int = 1


def test_split_runs_separates_speculative_and_ar():
    """A comparison trace holds two runs; renderers pick them apart by RunStarted.mode."""
    runs = split_runs(sample_events())
    assert set(runs) == {"speculative", "ar"}
    assert runs["speculative"][0].mode == "speculative" and runs["ar"][0].mode == "ar"
    assert runs["ar"][-1].kind == "finished"


def test_stream_classes_and_counts_follow_origins():
    """Each committed token gets its origin class, in order, with round and position attributes."""
    html = render_stream(sample_events())
    toks = re.findall(r'<span class="tok tok-(\w+)[^"]*" data-round="(\d+)" data-pos="(\d+)"', html)
    committed = [(o, r, p) for o, r, p in toks if o != "rejected"]
    assert [o for o, _, _ in committed] == SPEC_ORIGINS
    assert [int(p) for _, _, p in committed] == list(range(2, 11))
    assert [int(r) for _, r, _ in committed] == [1, 1, 1, 2, 2, 2, 2, 3, 4]


def test_rejected_drafts_are_struck_before_their_correction():
    """Rejected drafts use <del> (not colour alone) and sit right before the corrected token."""
    html = render_stream(sample_events())
    assert len(classes(html, "tok-rejected")) == 1 + 3  # round 1: " sat"; round 3: " a", " b", " c"
    assert len(classes(html, "tok-discarded")) == 2  # round 3's tail after the first rejection
    assert html.count("<del") == 4
    assert re.search(r'<del class="tok-text"> sat</del></span><span class="tok tok-corrected"', html)
    round1 = re.search(r'data-round="1">(.*?)</span><span class="sv-round"', html).group(1)
    kinds = re.findall(r'<span class="tok tok-(\w+)', round1)
    assert kinds == ["accepted", "accepted", "rejected", "corrected"]


def test_token_text_is_escaped_everywhere():
    """A token `<script>` and `&` must appear as text in every renderer, never as markup."""
    events = sample_events()
    for html in (render_stream(events), render_tree(events), render_race(events), render_explain(events)):
        assert "<script>" not in html
    html = render_stream(events)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert " &amp;" in html and " & " not in re.sub(r"<[^>]*>", "", html).replace("&amp;", "")


def test_newline_token_is_visible_and_breaks_the_line():
    """A newline token shows ↵ and a <br>; inside struck drafts it does not break the line."""
    html = render_stream(sample_events())
    assert '<span class="ws">↵</span><br>' in html


def test_tooltip_carries_q_p_acceptance_and_topk():
    """Hover content: round, position, q, p, min(1, p/q) and both models' top-k."""
    html = render_stream(sample_events())
    first = html[html.index('<span class="tok tok-accepted"') :]
    assert 'data-round="1" data-pos="2"' in first[:80]
    tip = tip_text(read_tip(first))
    assert tip.startswith(
        "accepted draft token · draft q 0.900 · target p 0.850 · accept (draft = argmax p) 1.000"
    )
    assert "draft q top-k: The 0.9" in tip and "target p top-k: The 0.85" in tip
    bonus = tip_text(read_tip(html[html.index('<span class="tok tok-bonus"') :]))
    assert "bonus" in bonus and "target p 0.500" in bonus


def test_discarded_tokens_show_no_verdict_and_tokens_are_not_tab_stops():
    """A discarded draft was never judged: its tooltip has q but no p and no acceptance; no token is a tab stop
    (the stream itself is the one focusable element)."""
    html = render_stream(sample_events())
    discarded = [
        tip_text(read_tip(html[m.start() :]))
        for m in re.finditer('class="tok tok-rejected tok-discarded"', html)
    ]
    assert discarded and all(
        "not judged" in t and "target p" not in t and "accept" not in t for t in discarded
    )
    assert html.count('tabindex="0"') == 1 and 'class="specviz specviz-stream"' in html[:60]


def test_upto_round_limits_the_stream():
    """Replay renders only rounds <= upto_round."""
    html = render_stream(sample_events(), upto_round=1)
    assert set(re.findall(r'data-round="(\d+)"', html)) == {"1"}
    assert len(re.findall(r'<span class="tok tok-(?!rejected)', html)) == 3


def test_unknown_kinds_and_dicts_are_handled():
    """Unknown event kinds (objects or trace dicts) are skipped; known trace dicts are read."""
    events = speculative_events()
    noisy = [Mystery(), {"kind": "mystery"}, "junk"] + [event_to_dict(e) for e in events] + [Mystery(2)]
    assert render_stream(noisy) == render_stream(events)
    assert render_tree(noisy) == render_tree(events)
    assert render_race(noisy) == render_race(events)


def test_partial_run_renders_what_is_there():
    """A run still streaming (no Finished, half a round missing) renders without errors."""
    partial = speculative_events(finished=False)[:8]  # RunStarted + round 1 + round 2's Drafted/Verified
    html = render_stream(partial)
    assert 'data-live="1"' in html and "sv-cursor" in html
    round1, round2 = html.split('data-round="2"', 1)
    # round 1: its 3 committed tokens
    assert len(re.findall(r'<span class="tok tok-(?!rejected)', round1)) == 3
    # round 2 caught mid-way: drafts judged,
    assert "tok-accepted" in round2 and "tok-corrected" not in round2
    assert "tok-pending" in render_stream(partial[:7])  # nothing committed yet; before the verdict: pending
    tree = render_tree(partial)
    assert 'data-round="2"' in tree and "node-uncommitted" in tree
    for render in (render_race, render_explain):
        assert "specviz" in render(partial)
    for html in (render_stream([]), render_tree([]), render_race([]), render_explain([])):
        assert "specviz" in html


def test_ar_only_stream_uses_ar_class():
    """With only an AR run, the stream shows its tokens as plain target steps."""
    html = render_stream(ar_events())
    assert len(classes(html, "tok-ar")) == 9 and "tok-rejected" not in html


def test_tree_marks_rounds_branches_and_rejections():
    """Each round is a tree element; the corrected token forks beside the rejected draft."""
    html = render_tree(sample_events())
    assert re.findall(r'class="tree-round" data-round="(\d+)"', html) == ["1", "2", "3", "4"]
    nodes = lambda cls: re.findall(rf'<g class="[^"]*\b{cls}\b[^"]*"', html)  # noqa: E731
    assert len(nodes("node-rejected")) == 4 and html.count('<line class="strike"') == 4
    assert len(nodes("node-bonus")) == 1 and len(nodes("node-corrected")) == 2
    # round 1: the rejected " sat" and the corrected " ran" hang off " cat" (edges start at its right end)
    edges = re.findall(r'<path class="edge[^"]*" d="M([\d.]+) ([\d.]+)H', html.split('data-round="2"')[0])
    assert edges[-1] == edges[-2]  # " sat" and " ran": the same parent point


def test_tree_collapses_old_rounds():
    """Past max_rounds the older rounds collapse into one summary element."""
    html = render_tree(sample_events(), max_rounds=2)
    assert re.findall(r'class="tree-round" data-round="(\d+)"', html) == ["3", "4"]
    assert '<details class="tree-older" data-rounds="2">' in html and "2 earlier rounds" in html


def test_race_verdicts():
    """Greedy: identical or the first differing token; sampling: identical distributions by design."""
    assert "Outputs identical" in render_race(sample_events())
    assert "Outputs differ at token 4." in render_race(sample_events(differ_at=3))
    sampled = render_race(sample_events(temperature=0.8))
    assert "Distributions identical (sampling)" in sampled and "exact samples of the target" in sampled
    assert "AR baseline missing" in render_race(speculative_events())


def test_race_replays_each_run_on_its_own_clock():
    """At wall time t each lane shows only tokens committed by then; speedup is tok/s over tok/s."""
    html = render_race(sample_events(), t=0.1)
    assert 'data-mode="ar" data-tokens="2"' in html  # AR rounds end at 0.06, 0.10, 0.14 s, ...
    assert 'data-mode="speculative" data-tokens="3"' in html  # round 1 by 0.086 s, round 2 at 0.152 s
    assert 'data-speedup="1.462"' in html  # 9 tokens in 0.26 s vs 9 in 0.38 s


def test_explain_uses_this_runs_numbers():
    """The explanation panel states α, γ, c, v, E and both speedups of this run."""
    html = render_explain(sample_events())
    assert (
        "α = 0.714 (5 of 7 tested drafts accepted; 2 more never tested; 2 rejections)" in html
        and "γ = 3" in html
    )
    assert "c = 0.050" in html and "v = 1.50" in html and "2.19 on average over this run's rounds" in html
    assert "predicted 1.47×" in html and "measured: 1.46×" in html
    assert "2 rollbacks, 4 positions dropped" in html


def test_explains_figures_reproduce_from_the_numbers_beside_them():
    """The one-round line at α's exact counts, the run line Σ E ÷ Σ cost, the what-if line and the summary's
    prediction: one α, one E, one ratio, each reproducing from the printed figures (tests/numbers.py; the sweep
    over generated runs is tests/test_numbers_sweep.py); a wrong figure is caught."""
    from tests.numbers import check_page
    from ui.app_views import summary_html

    text = lambda html: re.sub(r"<[^>]+>", "", html)  # noqa: E731
    explain, summary = text(render_explain(sample_events())), text(summary_html(sample_events()))
    assert "at α = 5/7: 2.59 ÷ 1.65 = 1.57× for that round" in explain
    assert (
        "At α = 5/7, γ = 3, c = 0.050: E = 2.59 tokens ÷ (3·0.050 + v(4) 1.50) = 1.65 steps → 1.57×"
        in explain
    )
    assert "(predicted 1.47×)" in summary and check_page(summary, explain) == []
    wrong = re.sub(r"Σ E = ([\d.]+) tokens", lambda m: f"Σ E = {float(m.group(1)) + 1:.2f} tokens", explain)
    assert check_page(summary, wrong)  # the negative control: one wrong displayed figure fails the check


def test_replay_helpers():
    """rounds_of / events_upto / time_at_round cut both runs at the same moment."""
    events = sample_events()
    assert rounds_of(events) == 4 and rounds_of([]) == 0
    assert time_at_round(events, 2) == 0.152
    cut = events_upto(events, 2)
    runs = split_runs(cut)
    assert max(e.round for e in runs["speculative"]) == 2
    assert not any(e.kind == "finished" for e in cut)
    assert [e.round for e in runs["ar"] if e.kind == "committed"] == [1, 2, 3]
    assert len(events_upto(events, None)) == len(events)
    frame = replay_frame(events, 1)
    assert set(frame) == {"stream", "tree", "race"} and 'data-round="2"' not in frame["stream"]


def test_legend_names_every_origin():
    """The legend shows a sample of each origin class."""
    html = render_legend()
    for origin in ("accepted", "corrected", "bonus", "rejected", "ar", "unvisited"):
        assert f"tok-{origin}" in html


def test_headless_events_are_guessed():
    """Events without a RunStarted still render (AR guessed from its origins)."""
    events = [
        Committed(round=1, pos=0, token_ids=[5], tokens=["x"], origins=["ar"], p=[0.5]),
        RoundTimed(round=1, pos=1, draft_s=0.0, verify_s=0.1, total_s=0.1, elapsed_s=0.1, gamma=0),
    ]
    assert set(split_runs(events)) == {"ar"}
    assert len(classes(render_stream(events), "tok-ar")) == 1
    assert set(
        split_runs(
            [
                RunStarted(
                    round=0,
                    run_id="x",
                    mode="speculative",
                    target="t",
                    draft="d",
                    device="cpu",
                    dtype="f",
                    config={},
                    prompt_text="",
                    prompt_ids=[],
                    prompt_tokens=[],
                    pos=0,
                )
            ]
        )
    ) == {"speculative"}


def test_explain_says_why_it_pays_with_this_runs_c_and_v():
    """The Explain panel ties γ·c + v to this run's measured numbers, draws the measured v(n) and says when
    speculation stops paying, all from the cost model."""
    from engine import costmodel
    from specviz import render_explain, spec_summary

    events = sample_events()
    s = spec_summary(events)
    html = render_explain(events)
    assert (
        "memory-bound" in html
        and 'class="sv-roofline"' in html
        and "t(4) = 60.0 ms = v(4) 1.50 × t(1) 40.0 ms" in html
    )
    assert f"{s['predicted_speedup']:.2f}×" in html
    low = costmodel.predicted_speedup(0.2, s["gamma"], s["c"], s["v"])
    assert f"α = 0.2 → {low:.2f}×" in html
    assert 'class="sv-roofline"' not in render_explain([])  # nothing measured yet: no chart


def test_the_roofline_reproduces_from_the_numbers_printed_beside_it():
    """Explain's roofline sentences: the floors per n as computed (context and n included), the share floor ÷ step,
    t(n) over max(floors), the race's share line (tests/numbers.check_roofline, check_race)."""
    from specviz import render_explain, spec_summary
    from specviz.demo_trace import HOST
    from tests.numbers import check_race, check_roofline

    events = sample_events()
    html, s = render_explain(events), spec_summary(events)
    plain = re.sub(r"<[^>]+>", "", html)
    assert "its compute floor is n · (0.150 GFLOP + (6 + n) · 0.001 MFLOP) ÷ 100 GFLOP/s" in plain
    assert "At n = 1 these are 30.0 ms and 1.5 ms; at n = 4, 30.0 ms and 6.0 ms" in plain
    assert check_roofline(plain) == [] and check_roofline(plain.replace("and 6.0 ms", "and 6.1 ms"))
    share = re.search(r"t\(1\) = [\d.]+ ms is (\d+)% of the bandwidth", html).group(1)
    assert "Test CPU &lt;b&gt;" in html and "<b>Test CPU <b>" not in html  # the recorded CPU name is escaped
    assert "1 row: MKL for qkv, o;" in html and "oneDNN for qkv" in html
    race = render_race(events)
    assert (
        f'data-share="{s["bandwidth"]["share"]:.3f}"' in race
        and f"AR at {int(share)}% of the bandwidth bound" in race
    )
    assert check_race(re.sub(r"<[^>]+>", "", race)) == []
    # the chart: one bar per measured n, the floors drawn when the machine was recorded, not without it
    assert html.count('class="rf-bar') == 1 + len(s["v_points"]) and 'class="rf-memory"' in html
    bare = [e if e.kind != "run_started" else type(e)(**{**e.__dict__, "host": {}}) for e in events]
    assert 'class="rf-memory"' not in render_explain(bare) and 'class="rf-bar' in render_explain(bare)
    assert "bandwidth bound" not in render_race(bare) and HOST["bandwidth"] == 10e9


def test_the_numbers_check_passes_the_page_and_catches_a_wrong_figure():
    """tests/numbers.py (the browser test's checker) on the rendered text of the sample run: nothing disagrees;
    a displayed E, a Σ or an α count changed by one digit each is caught (negative controls)."""
    from specviz import render_explain
    from tests.numbers import check_page
    from ui.app_views import summary_html

    text = lambda html: re.sub(r"<[^>]+>", "", html)  # noqa: E731  (what a reader sees, roughly)
    summary, explain = text(summary_html(sample_events())), text(render_explain(sample_events()))
    assert "One round at γ" in explain and "Σ E =" in explain and "tested drafts accepted" in summary
    assert check_page(summary, explain) == []
    wrong_e = re.sub(
        r"= ([\d.]+) tokens on average",
        lambda m: f"= {float(m.group(1)) + 0.05:.2f} tokens on average",
        explain,
    )
    wrong_sum = re.sub(r"Σ E = ([\d.]+)", lambda m: f"Σ E = {float(m.group(1)) + 0.1:.2f}", explain)
    wrong_alpha = re.sub(
        r"\((\d+) of (\d+) tested", lambda m: f"({int(m.group(1)) + 1} of {m.group(2)} tested", summary
    )
    assert (
        check_page(summary, wrong_e) and check_page(summary, wrong_sum) and check_page(wrong_alpha, explain)
    )


def test_mid_race_the_summary_counts_what_the_lanes_show():
    """While racing, the summary's 'speculative N/target · autoregressive M/target' are the lanes' own counts
    at the race panel's moment (it said 28/48 while the lane showed 23/48)."""
    from specviz.demo_trace import ar_events
    from ui.app_views import summary_html

    events = speculative_events() + ar_events()[:9]  # the AR lane part-way
    race = render_race(events)
    spec_n = int(re.search(r'data-mode="speculative" data-tokens="(\d+)"', race).group(1))
    ar_n = int(re.search(r'data-mode="ar" data-tokens="(\d+)"', race).group(1))
    said = re.search(r"racing: speculative (\d+)/\S+ · autoregressive (\d+)/", summary_html(events))
    assert said and (int(said.group(1)), int(said.group(2))) == (spec_n, ar_n)


def test_a_loaded_trace_gives_back_the_prompt_as_typed():
    """controls_of sets the prompt box from the trace: the last user turn of a ChatML or Gemma template, the text
    itself for a raw prompt (a re-uploaded trace showed no prompt)."""
    from ui.app_views import controls_of, prompt_of

    chat = "<|im_start|>system\nbe nice<|im_end|>\n<|im_start|>user\nCopy: a b c<|im_end|>\n<|im_start|>assistant\n"
    assert prompt_of(chat, raw=False) == "Copy: a b c"
    assert prompt_of("<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n", raw=False) == "hi"
    assert prompt_of("Once upon a time", raw=True) == "Once upon a time" and prompt_of(None, raw=False) == ""
    events = sample_events()
    assert controls_of(events)["prompt"] == events[0].prompt_text  # "Hi": no template, kept as it is


def test_why_it_pays_never_claims_far_less_than_it_measured():
    """With v(n) below n steps the text says the run's v; with v(n) at or above n (a slowed run) it says so
    instead of claiming 'far less' over a chart that shows otherwise."""
    from specviz.explain import why_it_pays

    base = {"alpha": 0.5, "c": 0.01, "v_points": [[4, 1.5]], "target_step_s": 0.04}
    assert "This run: v(4) = 1.50 target steps" in why_it_pays({**base, "v": 1.5, "v_n": 4}, 3)
    slow = why_it_pays({**base, "v": 4.6, "v_n": 4, "v_points": [[4, 4.6]]}, 3)
    assert "no less than 4 separate steps" in slow and "This run: v(4)" not in slow


def test_a_token_the_target_never_tested_shows_no_target_top_k():
    """After the first rejection the forward's distribution follows a rejected token: the Verify row says "not
    tested" with no p and no target top-k (it listed "of 1.00"), and the discarded token's tooltip has no target
    column; a tested row keeps both."""
    import dataclasses

    from specviz.markup import token_details
    from specviz.runs import view_run
    from specviz.verify import render_verify

    events = []
    for e in speculative_events():
        if e.kind == "verified" and e.round == 1:  # the 2nd draft rejected: the 3rd is never tested
            e = dataclasses.replace(
                e, accepted=[True, False, False], first_rejected=1, accept_prob=[1.0, 0.0, 0.0]
            )
        events.append(e)
    html = render_verify(events, 1)
    rows = re.findall(r'<tr class="vf-row vf-([\w-]+)".*?</tr>', html)
    assert rows == ["accepted", "rejected", "not-tested"]
    untested = re.search(r'<tr class="vf-row vf-not-tested".*?</tr>', html).group(0)
    target_cell = untested.split("<td>")[-1]
    assert "after the rejection" in target_cell and "vf-topk" not in target_cell
    assert "p –" in re.sub(r"<[^>]+>", "", untested)
    tested = re.search(r'<tr class="vf-row vf-accepted".*?</tr>', html).group(0)
    assert "vf-topk" in tested.split("<td>")[-1]  # a tested row lists the target's top-k
    rv = next(r for r in view_run(events).rounds if r.round == 1)
    _, _, discarded, _ = token_details(rv, 2, "discarded", True)
    _, _, rejected, _ = token_details(rv, 1, "rejected", True)
    assert not any(b and b[0].startswith("target") for b in discarded)
    assert any(b and b[0].startswith("target") for b in rejected)


def test_the_roofline_legend_names_the_runs_own_bar():
    from specviz import render_explain

    html = render_explain(sample_events())
    assert (
        'class="rf-bar rf-run"' in html and "rf-key-run" in html and "this run's verify size, n = 4" in html
    )


def test_a_long_rejected_tail_folds_into_one_span_for_compact_mode():
    """The drafts discarded after a round's rejected one sit in one .sv-tail span with their count (compact mode
    hides them and shows "+N" by CSS); the rejected draft itself stays outside it; no tail, no span."""
    from specviz.tokens import render_stream

    html = render_stream(speculative_events())
    # round 3: " a" rejected, 2 discarded
    assert re.findall(r'class="sv-tail" data-more="(\d+)"', html) == ["2"]
    tail = html[html.index('class="sv-tail"') :]
    tail = tail[: tail.index('class="tok tok-corrected"')]  # up to round 3's corrected token
    assert (
        tail.count("tok-discarded") == 2 == html.count("tok-discarded")
        and "tok-rejected tok-discarded" in tail
    )
    assert html.count('class="tok tok-rejected"') == 2  # round 1's " sat" and round 3's " a" stay visible


def test_the_kernel_sentence_names_the_native_kernel():
    """A run whose plan used specviz's native kernel says so; an unknown recorded name is printed escaped."""
    from specviz.roofline import kernel_sentence

    said = kernel_sentence({"qkv": {"1": "native", "5": "onednn"}, "o": {"1": "mkl", "5": "<b>"}}, 5)
    assert (
        said == "1 row: MKL for o; specviz's native kernel for qkv; 5 rows: &lt;b&gt; for o; oneDNN for qkv."
    )


def test_the_stream_carries_every_rounds_measured_time_for_play():
    """Play paces the replay in the browser from data-round-s: one measured wall time per round of the run, all of
    them even when the stream shows only the first rounds (Play steps towards the rest)."""
    events = sample_events()
    rounds = [e for e in split_runs(events)["speculative"] if e.kind == "round_timed"]
    html = render_stream(events, upto_round=1)
    times = re.search(r'data-round-s="([^"]*)"', html).group(1).split(",")
    assert len(times) == len(rounds) >= 2
    assert [float(t) for t in times] == [round(e.total_s, 3) for e in rounds]
