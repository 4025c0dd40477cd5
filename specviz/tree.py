"""The live speculation tree: events -> HTML, one row per round, each round an SVG laid out by position
(specviz/treesvg.py draws it).

Each round hangs off the committed trunk (the context token it started from). Its drafted chain
shows the accepted part, the rejected token (struck, ✗) and the discarded tail; the corrected token
forks off the last accepted node as the rejected token's sibling, the bonus token follows the last
accepted one. The accepted path (what the round committed) is drawn bold.

A tree-speculation round (one with a DraftTree event) shows every drafted branch instead: the
accepted path, the rejected nodes (struck, ✗; the ones where the walk stopped also outlined), the
unvisited nodes (faded, dashed) and the corrected / bonus token after the path. Both kinds of round
are lists of nodes with parents, drawn by the same SVG code; every node carries its p / q tooltip.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.figures import plural
from engine.specs import family

from .drift import lossy_badge
from .history import node_runs_ago, where
from .lookahead import window_grid
from .markup import _at, esc, fmt_p, stream_text, tip_attrs, token_details, topk_block, visible
from .runs import main_run
from .treesvg import MAX_CHARS, round_svg

TREE_STATUS = ("accepted", "rejected", "unvisited")
ZOOM = (
    '<div class="tree-tools">'  # zoom in / back (specviz.js; never below 1: the text stays >= 12 px)
    '<button type="button" class="tree-zoom" data-tree-zoom="out" aria-label="tree smaller">−</button>'
    '<button type="button" class="tree-zoom" data-tree-zoom="in" aria-label="tree larger">+</button></div>'
)
MAX_TREE_NODES = 128  # nodes drawn per tree round (the engine drafts <= 64; a hostile trace may hold more)


@dataclass(frozen=True)
class Node:
    """One token in a round's tree; `parent` is None for the round's root (the trunk context)."""

    id: str
    parent: str | None
    index: int  # index into the round's draft / commit, or its DraftTree node (-1 for the root)
    text: str
    origin: str  # context, accepted, rejected, discarded, unvisited, corrected, bonus, ar, pending
    committed: bool
    depth: int = 0  # tree rounds: depth below the context (1 = a child of the root)
    hist: bool = False  # drafted from the session's earlier runs (suffix speculation): marked ⟲


def tree_shape(t) -> tuple[list[int], list[int], list[int]]:
    """(parents, depths, path) of a DraftTree, repaired so any trace renders: a parent comes before its
    child (else the node hangs off the root), at most MAX_TREE_NODES nodes, path entries are node indices."""
    n = min(len(t.tokens), MAX_TREE_NODES)
    parents, depths = [], []
    for i in range(n):
        par = _at(t.parents, i)
        par = par if isinstance(par, int) and not isinstance(par, bool) and -1 <= par < i else -1
        parents.append(par)
        depths.append(1 if par < 0 else depths[par] + 1)
    path = [i for i in t.path if isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n]
    return parents, depths, path


def tree_nodes(rv, root: Node) -> list[Node]:
    """Every node of a DraftTree round, then the corrected / bonus token as a child of the path's end."""
    t, n_committed = rv.tree, len(rv.tokens)
    parents, depths, path = tree_shape(t)
    runs_ago = node_runs_ago(rv)
    nodes = [root]
    for i, par in enumerate(parents):
        status = _at(t.status, i)
        origin = status if status in TREE_STATUS else "unvisited"
        committed = origin == "accepted" and i in path and path.index(i) < n_committed
        nodes.append(
            Node(
                f"{rv.round}.{i}",
                root.id if par < 0 else f"{rv.round}.{par}",
                i,
                str(t.tokens[i]),
                origin,
                committed,
                depths[i],
                hist=bool(_at(runs_ago, i)),
            )
        )
    kind = t.next_kind if t.next_kind in ("corrected", "bonus") else "corrected"
    end = f"{rv.round}.{path[-1]}" if path else root.id
    nodes.append(
        Node(
            f"{rv.round}.next",
            end,
            len(path),
            str(t.next_token),
            kind,
            len(path) < n_committed,
            len(path) + 1,
        )
    )
    return nodes


def round_nodes(rv, context: str) -> list[Node]:
    """The nodes of one round, parents before children: a chain plus the corrected fork, or a whole tree."""
    root = Node(f"{rv.round}.root", None, -1, context, "context", True)
    if getattr(rv, "tree", None) is not None:
        return tree_nodes(rv, root)
    nodes = [root]
    n_committed = len(rv.tokens)
    if rv.drafted is None:  # a plain target step: committed tokens only
        parent = root.id
        for i, (text, origin) in enumerate(zip(rv.tokens, rv.origins)):
            nodes.append(Node(f"{rv.round}.{i}", parent, i, text, origin, True))
            parent = nodes[-1].id
        return nodes
    v, cut = rv.verified, rv.first_rejected
    parent, last_accepted = root.id, root.id
    for i, text in enumerate(rv.drafted.tokens):
        if v is None:
            origin = "pending"
        elif cut is None or i < cut:
            origin = "accepted"
        else:
            origin = "rejected" if i == cut else "discarded"
        node = Node(f"{rv.round}.{i}", parent, i, text, origin, origin == "accepted" and i < n_committed)
        nodes.append(node)
        parent = node.id
        if origin == "accepted":
            last_accepted = node.id
    if v is not None:
        n = rv.n_accepted if cut is None else cut
        nodes.append(Node(f"{rv.round}.next", last_accepted, n, v.next_token, v.next_kind, n < n_committed))
    return nodes


def _tree_target_rows(rv, parent: int, depth: int, path: list[int]):
    """The target's top-k at a node's position: recorded (chain view) only below the root or a path node."""
    v = rv.verified
    if v is None or not (parent < 0 or parent in path):
        return None
    return _at(v.target_topk, depth - 1)


def tree_node_attrs(rv, node: Node, greedy: bool, parents: list[int], path: list[int]) -> str:
    """The attributes of a tree node (or the corrected / bonus token after the path): its p / q / accept tooltip."""
    t, i = rv.tree, node.index
    pos = (t.pos if isinstance(t.pos, int) else 0) + node.depth - 1
    rows = [("round", str(rv.round)), ("position", str(pos))]
    if node.origin in TREE_STATUS:
        head = {
            "accepted": "accepted: on the tree's accepted path",
            "rejected": "rejected: failed the acceptance test",
            "unvisited": "unvisited: never tested (the walk did not reach it)",
        }[node.origin]
        rule = "draft = argmax p" if greedy else "min(1, p/q) on what is left of p"
        tested = _at(t.accept_prob, i)
        who = family(getattr(rv.drafted, "drafter", ""))
        # Medusa: head d proposes depth d
        proposer = f" · Medusa head {node.depth}" if who == "medusa" else ""
        rows += [
            ("node", f"{i} · depth {node.depth}{proposer}"),
            *_suffix_rows(rv.suffix, t, i),
            *_sized_rows(getattr(rv, "sized", None), t, i),
            ("draft q", fmt_p(_at(t.q, i))),
            ("target p", fmt_p(_at(t.p, i))),
            (f"accept ({rule})", "not tested" if tested is None else fmt_p(tested)),
        ]
        chosen, target_rows = _at(t.token_ids, i), _tree_target_rows(rv, parents[i], node.depth, path)
        stop = node.origin == "rejected" and parents[i] == (path[-1] if path else -1)
        extra = (
            "node-stop"
            if stop
            else ("node-uncommitted" if node.origin == "accepted" and not node.committed else "")
        )
        extra = f"{extra} node-hist".strip() if node.hist else extra
    else:
        end = path[-1] if path else -1
        if node.origin == "corrected":
            how = "argmax p" if greedy else "sampled from what is left of p"
            head = f"corrected: {how} after the rejected children"
            rejected = [
                visible(t.tokens[k])
                for k, par in enumerate(parents)
                if par == end and _at(t.status, k) == "rejected"
            ]
            rows.append(("replaces", ", ".join(rejected) or "–"))
        else:
            head = "bonus: the path reached a leaf, one more token from p"
        c = rv.committed
        p = (
            _at(c.p, len(path))
            if c is not None
            else (rv.verified.next_p if rv.verified is not None else None)
        )
        rows.append(("target p", fmt_p(p)))
        chosen, target_rows = t.next_id, _tree_target_rows(rv, end, node.depth, path)
        extra = "" if node.committed else "node-uncommitted"
    return tip_attrs(
        rv.round,
        pos,
        node.origin,
        head,
        rows + _whole(node),
        [topk_block("target p top-k", target_rows, chosen)],
        cls="node",
        extra=extra,
    )


def _suffix_rows(m, t, i: int) -> list:
    """Suffix speculation's tooltip rows for node i: how often it followed the match, and where it was last seen
    (this run's text or the session's k-th most recent earlier run). None when the round has no match record or
    its nodes are not the tree's (a hand-made trace)."""
    if m is None or list(getattr(m, "token_ids", [])) != list(t.token_ids) or i >= len(m.scores):
        return []
    runs_ago, at = m.origins[i]
    seen_in = "this run" if runs_ago == 0 else where(runs_ago)
    return [
        (
            "seen",
            f"after {m.counts[i]} of the {m.occurrences} occurrences of the {m.match}-token match «{visible(''.join(m.match_tokens))}»",
        ),
        ("latest", f"{seen_in}, position {at}"),
        ("score", f"{m.scores[i]:.3f} (chance its path is accepted: Π c ÷ (c_parent + 1))"),
    ]


def _sized_rows(m, t, i: int) -> list:
    """Token recycling's tooltip row for node i: its score on the curve the tree was sized on. None when the round
    has no sizing record or its nodes are not the tree's (a hand-made trace)."""
    if m is None or list(getattr(m, "token_ids", [])) != list(t.token_ids) or i >= len(m.scores):
        return []
    how = (
        "Π c ÷ (c_parent + 1) over the candidates"
        if m.extra_rows
        else "the larger of its suffix and recycling scores"
        if family(m.drafter) == "union"
        else "the learned rates along it"
    )
    return [("score", f"{m.scores[i]:.3f} (chance its path is accepted: {how})")]


def _whole(node: Node) -> list:
    """A tooltip row with the whole token when its box shows it cut."""
    return [("token", visible(node.text))] if len(node.text) > MAX_CHARS else []


def _chain_attrs(rv, node: Node, greedy: bool) -> str:
    """The attributes of a chain round's node: the stream token's tooltip; a drafted token the round did not
    commit (pending, or cut before its commit) is marked uncommitted."""
    head, rows, blocks, pos = token_details(rv, node.index, node.origin, greedy)
    extra = "node-uncommitted" if not node.committed and node.origin not in ("rejected", "discarded") else ""
    return tip_attrs(rv.round, pos, node.origin, head, rows + _whole(node), blocks, cls="node", extra=extra)


def _svg(nodes: list[Node], attrs, on_path: set[str], label: str) -> str:
    """The round's SVG in its horizontal scroller (the page never gets wider than the screen)."""
    return f'<div class="tree-scroll">{round_svg(nodes, attrs, on_path, label)}</div>'


def _tree_round_html(rv, nodes: list[Node], greedy: bool) -> str:
    """A tree round: every node, the label counting the tree and giving its verdict as a title."""
    t = rv.tree
    parents, depths, path = tree_shape(t)
    status = [_at(t.status, i) for i in range(len(parents))]
    n_rej, n_unv = status.count("rejected"), sum(1 for s in status if s not in ("accepted", "rejected"))
    stats = f"tree {len(path)}/{len(t.tokens)} nodes accepted · +{len(rv.tokens)}"
    end = f"rejected at depth {len(path) + 1}" if t.next_kind == "corrected" else "leaf reached"
    verdict = (
        f"{len(t.tokens)} nodes, depth {max(depths, default=0)}: path of {len(path)} accepted, {end}; "
        f"{n_rej} rejected, {n_unv} unvisited"
    )
    on_path = {nodes[0].id, f"{rv.round}.next"} | {f"{rv.round}.{i}" for i in path}
    attrs = {n.id: tree_node_attrs(rv, n, greedy, parents, path) for n in nodes[1:]}
    body = _svg(nodes, attrs, on_path, f"round {rv.round}: {verdict}")
    if len(t.tokens) > len(parents):
        body += f'<span class="tree-more">+{plural(len(t.tokens) - len(parents), "node")} not drawn</span>'
    return (
        f'<div class="tree-round tree-branches" data-round="{rv.round}" data-nodes="{len(t.tokens)}">'
        f'<span class="tree-label" title="{esc(verdict)}">R{rv.round}<small> pos {esc(t.pos)} · '
        f"{esc(stats)}</small></span>{body}</div>"
    )


def _candidates(decided) -> str:
    """One line per option auto weighed: drafter, γ, α, c, v and the predicted tokens/s (a lookup's: at the low end
    of its α, and at the measure, which ranks those that pay)."""
    lines = [
        f"{c.get('drafter')}{' (' + str(c['variant']) + ')' if c.get('variant') else ''} γ={c.get('gamma')}: "
        + (
            f"tree of {c.get('nodes')} nodes, {c.get('tokens_per_round')} tokens per round"
            if "nodes" in c
            else f"α {c.get('alpha')}"
            + (
                f" (measured {c['measured_alpha']} over {c.get('tested')} positions, priced one standard error "
                "lower)"
                if "measured_alpha" in c
                else ""
            )
            + (f", drafts {c['drafted']} (its confidence cuts them to γ)" if "drafted" in c else "")
        )
        + f", c {c.get('c')}, v {c.get('v')} -> "
        f"{c.get('predicted_tokens_per_s')} tok/s"
        + (f" ({c['expected_tokens_per_s']} at the measure)" if "expected_tokens_per_s" in c else "")
        + (" (forecast: not asked, it could not win)" if c.get("asked") is False else "")
        for c in (decided.candidates or [])[:16]
    ]
    if decided.plain_tokens_per_s is not None:
        lines.append(f"plain decoding -> {decided.plain_tokens_per_s} tok/s")
    return "\n".join(lines)


def round_tree_html(rv, context: str, greedy: bool) -> str:
    """One round: its tree (or chain), and a lookahead round's Jacobi window beside it."""
    html = _round_html(rv, context, greedy)
    if rv.window is None:
        return html
    # inside the round's row, after its tree
    return html[: -len("</div>")] + window_grid(rv.window) + "</div>"


def _round_html(rv, context: str, greedy: bool) -> str:
    nodes = round_nodes(rv, context)
    if rv.tree is not None:
        return _tree_round_html(rv, nodes, greedy)
    pos = rv.committed.pos if rv.committed is not None else (rv.drafted.pos if rv.drafted is not None else "")
    drafted = rv.gamma
    stats = (
        f"{rv.n_accepted}/{drafted} accepted · +{len(rv.tokens)}"
        if drafted
        else f"+{len(rv.tokens)} (no draft)"
    )
    verdict = (
        "all accepted"
        if drafted and rv.first_rejected is None and rv.verified is not None
        else (f"rejected at {rv.first_rejected + 1}" if rv.first_rejected is not None else "")
    )
    why = (
        f'<small class="tree-why" title="{esc(_candidates(rv.decided))}">auto: {esc(rv.decided.reason)}</small>'
        if rv.decided is not None
        else ""
    )
    # the context, the accepted drafts, the corrected / bonus token
    on_path = {n.id for n in nodes if n.committed}
    attrs = {n.id: _chain_attrs(rv, n, greedy) for n in nodes[1:]}
    body = _svg(nodes, attrs, on_path, f"round {rv.round}: {stats}{', ' + verdict if verdict else ''}")
    return (
        f'<div class="tree-round" data-round="{rv.round}">'
        f'<span class="tree-label" title="{esc(verdict)}">R{rv.round}<small> pos {esc(pos)} · {esc(stats)}</small>'
        f"{why}</span>{body}</div>"
    )


def _weight(rv) -> int:
    """Nodes a round draws (for the page-size budget)."""
    return (
        min(len(rv.tree.tokens), MAX_TREE_NODES) + 2
        if rv.tree is not None
        else max(rv.gamma, len(rv.tokens)) + 2
    )


def render_tree(events, upto_round: int | None = None, max_rounds: int = 60, max_nodes: int = 1200) -> str:
    """HTML of the speculation tree for rounds <= upto_round; older rounds beyond max_rounds (or beyond
    max_nodes drawn nodes: big trees) collapse into a summary that still shows their committed text."""
    run = main_run(events, "speculative") or main_run(events)
    if run is None or not run.rounds:
        return '<div class="specviz specviz-tree sv-empty">No rounds yet.</div>'
    rounds = run.upto(upto_round)
    contexts, last = [], run.prompt_tail()
    for rv in rounds:
        contexts.append(last)
        if rv.tokens:
            last = rv.tokens[-1]
    hidden = max(0, len(rounds) - max(1, max_rounds))
    drawn = sum(_weight(rv) for rv in rounds[hidden:])
    while drawn > max_nodes and hidden < len(rounds) - 1:
        drawn -= _weight(rounds[hidden])
        hidden += 1
    parts = []
    if hidden:
        old = rounds[:hidden]
        drafted = sum(r.gamma for r in old)
        accepted = sum(r.n_accepted for r in old)
        committed = sum(len(r.tokens) for r in old)
        text = "".join(stream_text(t, breaks=False) for r in old for t in r.tokens)
        parts.append(
            f'<details class="tree-older" data-rounds="{hidden}"><summary>{plural(hidden, "earlier round")} · '
            f"{plural(committed, 'token')} committed · {accepted}/{drafted} drafts accepted</summary>"
            f'<div class="tree-older-text">{text}</div></details>'
        )
    greedy = run.greedy
    for rv, context in list(zip(rounds, contexts))[
        hidden:
    ]:  # each round's markup built once (RoundView.cached)
        parts.append(
            rv.cached(("tree", context, greedy), lambda rv=rv, c=context: round_tree_html(rv, c, greedy))
        )
    return (
        f'<div class="specviz specviz-tree" data-rounds="{len(rounds)}" tabindex="0" role="group" '
        f'aria-label="speculation tree: arrow keys move between nodes, Enter opens a round in the verify view">'
        f'{ZOOM}{lossy_badge(run)}<div class="tree-trunk">{"".join(parts)}</div></div>'
    )
