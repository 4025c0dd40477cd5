"""The live speculation tree: events -> HTML (nested lists laid out left to right by the CSS).

Each round hangs off the committed trunk (the context token it started from). Its drafted chain
shows the accepted part, the rejected token (struck, the rejection point marked) and the
discarded tail; the corrected token forks off the last accepted node as the rejected token's
sibling, the bonus token follows the last accepted one. The model is a list of nodes with parents,
so several branches per round (tree drafting) render with no change here.
"""
from __future__ import annotations

from dataclasses import dataclass

from .markup import esc, stream_text, token_span
from .runs import main_run


@dataclass(frozen=True)
class Node:
    """One token in a round's tree; `parent` is None for the round's root (the trunk context)."""
    id: str
    parent: str | None
    index: int  # index into the round's draft / commit (-1 for the root)
    text: str
    origin: str  # context, accepted, rejected, discarded, corrected, bonus, ar, pending
    committed: bool


def round_nodes(rv, context: str) -> list[Node]:
    """The nodes of one round, parents before children. Today a chain plus the corrected fork."""
    root = Node(f"{rv.round}.root", None, -1, context, "context", True)
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


def _subtree(node: Node, children: dict, rv, greedy: bool) -> str:
    if node.origin == "context":
        label = f'<span class="node node-context" title="committed context">…{stream_text(node.text, False)}</span>'
    else:
        label = token_span(rv, node.index, node.origin, greedy, node.text, breaks=False, cls="node")
        if not node.committed and node.origin not in ("rejected", "discarded"):
            label = label.replace('class="node ', 'class="node node-uncommitted ', 1)
    kids = children.get(node.id, [])
    inner = "".join(_subtree(k, children, rv, greedy) for k in kids)
    return f'<li data-node="{esc(node.id)}">{label}{f"<ul>{inner}</ul>" if kids else ""}</li>'


def round_tree_html(rv, context: str, greedy: bool) -> str:
    nodes = round_nodes(rv, context)
    children: dict[str, list[Node]] = {}
    for node in nodes:
        if node.parent is not None:
            children.setdefault(node.parent, []).append(node)
    drafted = rv.gamma
    stats = f"{rv.n_accepted}/{drafted} accepted · +{len(rv.tokens)}" if drafted else f"+{len(rv.tokens)} (no draft)"
    pos = rv.committed.pos if rv.committed is not None else (rv.drafted.pos if rv.drafted is not None else "")
    verdict = "all accepted" if drafted and rv.first_rejected is None and rv.verified is not None else (
        f"rejected at {rv.first_rejected + 1}" if rv.first_rejected is not None else "")
    return (f'<div class="tree-round" data-round="{rv.round}">'
            f'<span class="tree-label" title="{esc(verdict)}">R{rv.round}<small> pos {esc(pos)} · {esc(stats)}</small></span>'
            f'<ul class="tree">{_subtree(nodes[0], children, rv, greedy)}</ul></div>')


def render_tree(events, upto_round: int | None = None, max_rounds: int = 60) -> str:
    """HTML of the speculation tree for rounds <= upto_round; older rounds beyond max_rounds collapse
    into a summary that still shows their committed text."""
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
    parts = []
    if hidden:
        old = rounds[:hidden]
        drafted = sum(r.gamma for r in old)
        accepted = sum(r.n_accepted for r in old)
        committed = sum(len(r.tokens) for r in old)
        text = "".join(stream_text(t, breaks=False) for r in old for t in r.tokens)
        parts.append(f'<details class="tree-older" data-rounds="{hidden}"><summary>{hidden} earlier rounds · '
                     f'{committed} tokens committed · {accepted}/{drafted} drafts accepted</summary>'
                     f'<div class="tree-older-text">{text}</div></details>')
    for rv, context in list(zip(rounds, contexts))[hidden:]:
        parts.append(round_tree_html(rv, context, run.greedy))
    return (f'<div class="specviz specviz-tree" data-rounds="{len(rounds)}">'
            f'<div class="tree-trunk">{"".join(parts)}</div></div>')
