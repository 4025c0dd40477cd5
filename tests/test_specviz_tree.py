"""The speculation tree on hand-built tree-speculation rounds (DraftTree events): branches, verdicts, tooltips."""

import re

from engine.events import (
    Committed,
    Drafted,
    DraftTree,
    Finished,
    RolledBack,
    RoundTimed,
    RunStarted,
    Verified,
    event_to_dict,
    trace_from_json,
    trace_to_json,
)
from specviz import events_upto, render_stream, render_tree, rounds_of
from specviz.markup import read_tip, tip_text
from specviz.runs import view_run
from specviz.tree import round_nodes
from specviz.treesvg import layout

# round 1 (greedy), drafted at pos 2; the walk: " A" rejected, "The" accepted, " cat" accepted,
# " sat" and " &" rejected -> corrected " ran". Node 4 `<script>` and the children of rejected nodes are unvisited.
#   root ─┬─ 0 " A" ✗ ── 2 " dog" (unvisited)
#         └─ 1 "The" ✓ ─┬─ 3 " cat" ✓ ─┬─ 5 " sat" ✗ ── 7 " on" (unvisited)
#                       │              ├─ 6 " &" ✗
#                       │              └─ " ran" (corrected)
#                       └─ 4 "<script>" (unvisited)
TOKENS = [" A", "The", " dog", " cat", "<script>alert(1)</script>", " sat", " &", " on"]
PARENTS = [-1, -1, 0, 1, 1, 3, 3, 5]
STATUS = ["rejected", "accepted", "unvisited", "accepted", "unvisited", "rejected", "rejected", "unvisited"]
ACCEPT = [0.0, 1.0, None, 1.0, None, 0.0, 0.0, None]
Q = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
P = [0.125, 0.75, 0.03, 0.625, 0.0625, 0.1, 0.05, 0.2]


def tree_events(finished: bool = True) -> list:
    """A greedy run: round 1 a branching tree (corrected), round 2 a small tree (bonus), round 3 a plain chain."""
    config = {"gamma": 3, "max_new_tokens": 7, "temperature": 0.0, "tree_budget": 8, "tree_branching": 3}
    ev = [
        RunStarted(
            round=0,
            run_id="tree01",
            mode="speculative",
            target="target-test",
            draft="ngram",
            device="cpu",
            dtype="float32",
            config=config,
            prompt_text="Hi",
            prompt_ids=[1, 2],
            prompt_tokens=["<|im_start|>", "Hi"],
            pos=2,
        )
    ]
    ev += [
        DraftTree(
            round=1,
            pos=2,
            token_ids=list(range(20, 28)),
            tokens=TOKENS,
            parents=PARENTS,
            q=Q,
            p=P,
            accept_prob=ACCEPT,
            status=STATUS,
            path=[1, 3],
            next_id=12,
            next_token=" ran",
            next_kind="corrected",
        ),
        RolledBack(round=1, positions=[4, 5, 6, 7, 8, 9], cache_before=11, cache_after=4),
        Drafted(
            round=1,
            pos=2,
            token_ids=[21, 23, 25],
            tokens=["The", " cat", " sat"],
            q=[1.0, 1.0, 1.0],
            draft_topk=[],
            drafter="ngram",
        ),
        Verified(
            round=1,
            pos=2,
            p=[0.75, 0.625, 0.1],
            accept_prob=[1.0, 1.0, 0.0],
            accepted=[True, True, False],
            first_rejected=2,
            next_id=12,
            next_token=" ran",
            next_p=0.5,
            next_kind="corrected",
            target_topk=[[[21, "The", 0.75]], [[23, " cat", 0.625]], [[12, " ran", 0.5], [25, " sat", 0.1]]],
            greedy=True,
        ),
        Committed(
            round=1,
            pos=2,
            token_ids=[21, 23, 12],
            tokens=["The", " cat", " ran"],
            origins=["accepted", "accepted", "corrected"],
            p=[0.75, 0.625, 0.5],
        ),
        RoundTimed(round=1, pos=5, draft_s=0.01, verify_s=0.05, total_s=0.07, elapsed_s=0.2, gamma=3),
    ]
    ev += [
        DraftTree(
            round=2,
            pos=5,
            token_ids=[30, 31],
            tokens=["!", "?"],
            parents=[-1, -1],
            q=[1.0, 1.0],
            p=[0.9, 0.05],
            accept_prob=[1.0, None],
            status=["accepted", "unvisited"],
            path=[0],
            next_id=16,
            next_token="\n",
            next_kind="bonus",
        ),
        Drafted(round=2, pos=5, token_ids=[30], tokens=["!"], q=[1.0], draft_topk=[], drafter="ngram"),
        Verified(
            round=2,
            pos=5,
            p=[0.9],
            accept_prob=[1.0],
            accepted=[True],
            first_rejected=None,
            next_id=16,
            next_token="\n",
            next_p=0.5,
            next_kind="bonus",
            target_topk=[],
            greedy=True,
        ),
        Committed(
            round=2,
            pos=5,
            token_ids=[30, 16],
            tokens=["!", "\n"],
            origins=["accepted", "bonus"],
            p=[0.9, 0.5],
        ),
        RoundTimed(round=2, pos=7, draft_s=0.01, verify_s=0.05, total_s=0.07, elapsed_s=0.3, gamma=1),
    ]
    ev += [
        Drafted(round=3, pos=7, token_ids=[40], tokens=[" Z"], q=[1.0], draft_topk=[], drafter="ngram"),
        Verified(
            round=3,
            pos=7,
            p=[0.2],
            accept_prob=[0.0],
            accepted=[False],
            first_rejected=0,
            next_id=41,
            next_token=" Y",
            next_p=0.6,
            next_kind="corrected",
            target_topk=[],
            greedy=True,
        ),
        Committed(round=3, pos=7, token_ids=[41], tokens=[" Y"], origins=["corrected"], p=[0.6]),
        RoundTimed(round=3, pos=8, draft_s=0.01, verify_s=0.05, total_s=0.07, elapsed_s=0.4, gamma=1),
    ]
    if finished:
        ev.append(
            Finished(
                round=3,
                pos=8,
                stop_reason="max_new_tokens",
                text="The cat ran!\n Y",
                token_ids=[21, 23, 12, 30, 16, 41],
            )
        )
    return ev


def node(html: str, round_: int, i) -> str:
    """The <g class="node ..."> opening tag of node i of a round."""
    m = re.search(rf'(<g class="node [^>]*data-node="{round_}\.{i}"[^>]*>)', html)
    assert m, f"node {round_}.{i} not drawn"
    return m.group(1)


def node_svg(html: str, round_: int, i) -> str:
    """The whole <g> of node i of a round (box, text, strike line)."""
    return re.search(rf'<g class="node [^>]*data-node="{round_}\.{i}"[^>]*>.*?</g>', html).group(0)


def tip(html: str, round_: int, i) -> str:
    """The tooltip of node i of a round, as the box shows it (one line of text)."""
    return tip_text(read_tip(node(html, round_, i)))


def test_every_node_of_a_tree_round_is_drawn_with_its_verdict():
    """All 8 nodes plus the corrected token are drawn; classes follow accepted / rejected / unvisited."""
    html = render_tree(tree_events())
    assert re.findall(r'class="tree-round[^"]*" data-round="(\d+)"', html) == ["1", "2", "3"]
    for i, status in enumerate(STATUS):
        assert f"node-{status}" in node(html, 1, i), (i, status)
    assert "node-corrected" in node(html, 1, "next") and "node-bonus" in node(html, 2, "next")
    assert "node-unvisited" in node(html, 2, 1)
    round1 = re.search(r'data-round="1".*?</svg>', html).group(0)
    assert len(re.findall(r'<g class="node [^>]*data-tip=', round1)) == 8 + 1  # 8 nodes + the corrected token


def test_tree_layout_places_nodes_by_depth_and_packs_branches():
    """x is the depth in the round; the accepted path runs along row 0 and every other branch packs below as
    close as it fits without touching an elder sibling's boxes or connectors; the corrected token forks off the
    path's end beside the rejected ones."""
    rv = view_run(tree_events()).rounds[0]
    path = {"1.root", "1.1", "1.3", "1.next"}
    place = layout(round_nodes(rv, "Hi"), path)
    assert place == {
        "1.root": (0, 0),
        "1.1": (1, 0),
        "1.3": (2, 0),
        "1.next": (3, 0),
        "1.5": (3, 1),
        "1.7": (4, 1),
        "1.6": (3, 2),
        "1.4": (2, 1),
        "1.0": (1, 2),
        "1.2": (2, 2),
    }
    cells = list(place.values())
    assert len(set(cells)) == len(cells)  # no two boxes in one cell
    html = render_tree(tree_events())
    x = lambda i: float(re.search(r"translate\(([\d.]+) ", node(html, 1, i)).group(1))  # noqa: E731
    assert x("root") < x(0) == x(1) < x(2) == x(3) < x(5) == x(6) == x("next") < x(7)


def test_layout_of_a_wide_tree_stays_a_few_rows_tall():
    """A model drafter's tree at the sliders' maxima (a path of 8 with 7 sibling leaves at each depth: 64 nodes)
    packs into 8 rows, not one row per leaf (57)."""
    from specviz.tree import Node

    nodes, parent = [Node("r", None, -1, "x", "context", True)], "r"
    for d in range(8):
        nodes.append(Node(f"p{d}", parent, d, "tok", "accepted", True))
        nodes += [Node(f"l{d}.{j}", parent, j, "tok", "unvisited", False) for j in range(7)]
        parent = f"p{d}"
    place = layout(nodes, {"r"} | {f"p{d}" for d in range(8)})
    assert max(row for _, row in place.values()) + 1 == 8 and len(set(place.values())) == len(nodes)
    assert [place[f"p{d}"] for d in range(8)] == [(d + 1, 0) for d in range(8)]
    assert layout(nodes)["p0"] == (1, 0)  # without a path: drafted order, still packed


def test_the_accepted_path_is_marked_on_nodes_and_edges():
    """The round's committed path (context, accepted nodes, corrected token) carries on-path, edges included."""
    html = render_tree(tree_events())
    on_path = re.findall(r'<g class="node [^"]*\bon-path\b[^"]*"[^>]*data-node="1\.(\w+)"', html)
    assert on_path == ["root", "1", "3", "next"]
    round1 = re.search(r'data-round="1".*?</svg>', html).group(0)
    assert round1.count('class="edge on-path"') == 3 and round1.count('class="edge"') == 6


def test_the_point_of_rejection_is_marked_and_struck():
    """Rejected nodes are struck (<del>); those where the walk stopped are node-stop; unvisited ones are not struck."""
    html = render_tree(tree_events())
    assert "node-stop" in node(html, 1, 5) and "node-stop" in node(html, 1, 6)
    assert "node-stop" not in node(html, 1, 0)  # rejected, but the walk went on to its sibling
    assert '<line class="strike"' in node_svg(html, 1, 5) and "✗ sat" in node_svg(html, 1, 5)
    assert "strike" not in node_svg(html, 1, 7) and "✗" not in node_svg(html, 1, 7)
    assert "↺ ran" in node_svg(html, 1, "next") and "+↵" in node_svg(html, 2, "next")


def test_tree_node_tooltips_carry_p_q_and_accept_prob():
    """Hovering a node shows its q, p and acceptance (or 'not tested'); path children get the target's top-k."""
    html = render_tree(tree_events())
    t3 = tip(html, 1, 3)
    assert "draft q" in t3 and "1.000" in t3 and "target p" in t3 and "0.625" in t3 and "depth 2" in t3
    assert 'data-pos="3"' in node(html, 1, 3) and 'data-pos="5"' in node(html, 1, 7)
    assert "not tested" in tip(html, 1, 7) and "unvisited" in tip(html, 1, 7)
    t5 = tip(html, 1, 5)
    assert "not tested" not in t5  # the tooltip ends before its child's
    assert "rejected" in t5 and "0.100" in t5 and "target p top-k" in t5
    assert read_tip(node(html, 1, 5))["k"][0][1] >= 0  # the drafted token is marked in the target's top-k
    tn = tip(html, 1, "next")
    assert "corrected" in tn and "␣sat, ␣&" in tn and "0.500" in tn
    assert "0.062" in tip(html, 1, 4)


def test_tree_node_text_is_escaped():
    """A `<script>` node and a ` &` node appear as text, never as markup."""
    html = render_tree(tree_events())
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;…" in html  # cut to 18 characters in the box
    # whole in the tooltip (built with textContent)
    assert "token <script>alert(1)</script>" in tip(html, 1, 4)
    assert " &amp;" in html and not re.search(r"&(?![a-z]+;|#\d+;|#x[0-9a-f]+;)", html)


def test_tree_round_label_counts_nodes():
    """The round label says how much of the tree was accepted; its title gives the verdict."""
    html = render_tree(tree_events())
    assert 'data-nodes="8"' in html and "tree 2/8 nodes accepted · +3" in html
    assert "path of 2 accepted, rejected at depth 3; 3 rejected, 3 unvisited" in html
    assert "leaf reached" in html and "0/1 accepted · +1" in html  # round 2 a tree, round 3 a chain


def test_chain_view_still_feeds_the_stream_and_replay():
    """The stream shows the chain view; a trace round-trips; replay cuts the DraftTree with its round."""
    events = tree_events()
    stream = render_stream(events)
    assert re.findall(r'<span class="tok tok-(\w+)', stream) == [
        "accepted",
        "accepted",
        "rejected",
        "corrected",
        "accepted",
        "bonus",
        "rejected",
        "corrected",
    ]
    assert render_tree(trace_from_json(trace_to_json(events))) == render_tree(events)
    assert render_tree([event_to_dict(e) for e in events]) == render_tree(events)
    assert rounds_of(events) == 3 and view_run(events).rounds[0].tree is not None
    cut = events_upto(events, 1)
    assert [e.round for e in cut if e.kind == "draft_tree"] == [1]
    assert 'data-round="2"' not in render_tree(events, upto_round=1)


def test_partial_tree_round_renders_uncommitted():
    """A DraftTree without its Committed (a cut trace) still draws, with the path marked uncommitted."""
    events = [
        e for e in tree_events(finished=False) if not (e.round == 1 and e.kind in ("committed", "verified"))
    ]
    html = render_tree(events)
    assert "node-uncommitted" in node(html, 1, 1) and "node-uncommitted" in node(html, 1, "next")


def test_hostile_tree_shapes_render():
    """Bad parents (forward, out of range), odd statuses and huge trees render bounded, without errors."""
    n = 300
    odd = DraftTree(
        round=1,
        pos=2,
        token_ids=[5] * n,
        tokens=["x"] * n,
        parents=[7] + [i - 1 for i in range(1, n)],
        q=[],
        p=[],
        accept_prob=[],
        status=["weird"] * n,
        path=[99, 0],
        next_id=6,
        next_token="<b>",
        next_kind="??",
    )
    html = render_tree([tree_events()[0], odd])
    assert "+172 nodes not drawn" in html and "&lt;b&gt;" in html and "node-unvisited" in html


def test_big_trees_collapse_older_rounds_by_node_count():
    """Past max_nodes drawn nodes the oldest rounds fold into the summary, as past max_rounds."""
    events = tree_events()
    html = render_tree(events, max_nodes=12)
    assert re.findall(r'class="tree-round[^"]*" data-round="(\d+)"', html) == ["2", "3"]
    assert '<details class="tree-older" data-rounds="1">' in html
    assert render_tree(events, max_nodes=0).count('class="tree-round') == 1  # the newest round always shows


def test_auto_decision_reason_is_shown_and_escaped():
    """An auto round shows why it chose (reason + options on hover), escaped like any other text."""
    from engine.events import Committed, Decided, RoundTimed, RunStarted
    from specviz import render_tree

    events = [
        RunStarted(
            round=0,
            run_id="r",
            mode="speculative",
            target="t",
            draft="auto",
            device="cpu",
            dtype="float32",
            config={"gamma": 4},
            prompt_text="p",
            prompt_ids=[1],
            prompt_tokens=["p"],
            pos=1,
        ),
        Decided(
            round=1,
            pos=1,
            drafter="",
            gamma=0,
            reason="measuring <b>one</b> plain step",
            plain_tokens_per_s=20.0,
            candidates=[
                {
                    "drafter": "ngram",
                    "variant": "n=2",
                    "gamma": 2,
                    "alpha": 0.5,
                    "c": 0.01,
                    "v": 1.2,
                    "predicted_tokens_per_s": 25.0,
                }
            ],
        ),
        Committed(round=1, pos=1, token_ids=[5], tokens=["x"], origins=["ar"], p=[0.9]),
        RoundTimed(round=1, pos=2, draft_s=0.0, verify_s=0.05, total_s=0.05, elapsed_s=0.05, gamma=0),
    ]
    html = render_tree(events)
    assert "auto: measuring &lt;b&gt;one&lt;/b&gt; plain step" in html and "<b>one</b>" not in html
    assert (
        "ngram (n=2) γ=2: α 0.5, c 0.01, v 1.2 -&gt; 25.0 tok/s" in html
        and "plain decoding -&gt; 20.0 tok/s" in html
    )


def test_medusa_tree_nodes_name_the_head_that_proposed_them():
    """In a Medusa tree the node at depth d was proposed by head d: its tooltip says so; other drafters' do not."""
    import dataclasses

    ev = [dataclasses.replace(e, drafter="medusa") if e.kind == "drafted" else e for e in tree_events()]
    assert "Medusa head 2" in tip(render_tree(ev), 1, 3) and "Medusa head 1" in tip(render_tree(ev), 1, 1)
    assert "Medusa head" not in tip(render_tree(tree_events()), 1, 3)


def test_the_verify_view_accounts_a_tree_round_as_a_tree():
    """Round 1's verify view names the tree (8 nodes, depth 4, one forward over 9 positions) and its node counts
    agree with the tree's statuses (2 kept, 3 rejected, 3 never reached), not with the 3-token chain view."""
    from specviz.verify import render_verify

    html = render_verify(tree_events(), 1)
    assert 'data-nodes="8" data-tree-accepted="2" data-tree-rejected="3" data-tree-unvisited="3"' in html
    assert "tree of 8 nodes, depth 4" in html and "one target forward over 9 positions" in html
    assert "at depth 3 none of the 2 children tried matched" in html and "All 3 drafts" not in html
    # a chain
    assert "γ = 3" not in render_verify(tree_events(), 1) and "γ = 1" in render_verify(tree_events(), 3)


def test_tree_rounds_are_costed_at_the_trees_forward_size_and_not_predicted():
    """A tree round that verified 9 positions counts 8 drafted nodes for c and v(9), never v(γ + 1); the chain
    formula E(α, γ) predicts nothing for it, and the chart and Explain say so."""
    from engine import metrics
    from specviz import render_explain, speedup_model_fig

    ev = [
        e if e.kind != "round_timed" or e.round != 1 else type(e)(**{**e.__dict__, "verified": 9})
        for e in tree_events()
    ]
    s = metrics.summarize(ev)
    assert s["tree_rounds"] == 1 and s["predicted_speedup"] is None
    stats = metrics.stats_of(ev)
    assert stats.rounds[0][0] == 8  # round 1: 8 drafted nodes, judged in a forward over 9 positions
    assert "not modelled" in speedup_model_fig(ev).layout.annotations[0].text
    assert "does not model it" in render_explain(ev)
    old = metrics.summarize(tree_events())  # a trace without `verified`: costed as its chain view, as before
    assert old["tree_rounds"] == 0
