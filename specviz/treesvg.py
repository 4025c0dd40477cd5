"""One round's tree as an SVG laid out by position: x = depth in the round (one column per drafted position,
as wide as its widest token), y = rows: the accepted path along the first row, each other branch packed below as
close as it fits (see `layout`). Knows nodes with parents, not events.

Each node is a <g> carrying the tooltip attributes the caller made (class, data-round / data-pos / data-tip):
a box, its text (with the origin's glyph: ✗ rejected, ↺ corrected, + bonus) and a strike line through struck
tokens. Colours, dashes and the accepted path's weight live in assets/specviz.css; sizes are fixed pixels here
so the text never shrinks (the panel scrolls instead).
"""

from __future__ import annotations

import unicodedata

from .markup import GLYPHS, esc

FONT_PX = 13  # node text; assets/specviz.css sets the same size on .tree-svg text
CHAR_PX = 8.2  # width of one monospace character at FONT_PX (DejaVu Sans Mono: 7.8), with a margin
PAD_X, BOX_H, ROW_H, GAP_X = 5, 22, 28, 22  # box padding, box height, row pitch, gap between columns (edges)
MAX_CHARS = 18  # longer tokens are cut with "…" (the tooltip holds the whole token)
STRUCK = ("rejected", "discarded")
SHOWN_WS = {"\n": "↵", "\t": "⇥", "\r": "␍"}  # a space stays a space (white-space: pre)


def node_text(text: str, origin: str) -> str:
    """What a node box shows: the origin's glyph, then the token cut to MAX_CHARS (∅ for an empty token)."""
    shown = "".join(SHOWN_WS.get(ch, ch) for ch in str(text)) or "∅"
    if len(shown) > MAX_CHARS:
        shown = shown[: MAX_CHARS - 1] + "…"
    glyph = GLYPHS.get(origin, "")
    return glyph + shown


def text_px(text: str) -> float:
    """Estimated width of `text` in the node font: wide (CJK, emoji) characters count twice."""
    return CHAR_PX * sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def layout(nodes, first=frozenset()) -> dict[str, tuple[int, int]]:
    """(depth, row) of every node; nodes come parents first, the first one the root. A node shares its first
    child's row (children in `first`, the accepted path, go first: the committed text reads along row 0); each
    later child's subtree moves down just far enough not to touch what its elder siblings drew, column by
    column (boxes and the vertical connectors in the gaps between them), so a wide tree stays a few rows tall.
    Iterative: a hand-made trace may hold a chain of thousands of tokens."""
    children: dict[str, list] = {}
    for node in nodes[1:]:
        children.setdefault(node.parent, []).append(node)
    for kids in children.values():
        kids.sort(key=lambda n: n.id not in first)  # stable: otherwise in drafted order
    root = nodes[0]
    depth, pre, stack = {root.id: 0}, [], [root]
    while stack:  # preorder: parents before children
        node = stack.pop()
        pre.append(node)
        for kid in children.get(node.id, []):
            depth[kid.id] = depth[node.id] + 1
        stack.extend(reversed(children.get(node.id, [])))
    # contour[id]: column -> [top, bottom] rows used by the subtree, relative to its root's row; column 2d holds
    # the boxes of depth d, column 2d + 1 the connector from depth d to its children
    contour: dict[str, dict[int, list[int]]] = {}
    offset: dict[str, int] = {}
    for node in reversed(pre):
        kids, col = children.get(node.id, []), 2 * depth[node.id]
        if not kids:
            contour[node.id] = {col: [0, 0]}
            continue
        shape, last = contour.pop(kids[0].id), 0  # the first child shares this row; its contour is reused
        offset[kids[0].id] = 0
        for kid in kids[1:]:
            other = contour.pop(kid.id)
            shift = max([last + 1] + [shape[c][1] - top + 1 for c, (top, _) in other.items() if c in shape])
            offset[kid.id] = last = shift
            for c, (top, bottom) in other.items():
                if c in shape:
                    shape[c][0], shape[c][1] = min(shape[c][0], top + shift), max(shape[c][1], bottom + shift)
                else:
                    shape[c] = [top + shift, bottom + shift]
        shape[col], shape[col + 1] = [0, 0], [0, last]
        contour[node.id] = shape
    place = {}
    for node in pre:
        row = 0 if node is root else place[node.parent][1] + offset[node.id]
        place[node.id] = (depth[node.id], row)
    return place


def round_svg(nodes, attrs: dict[str, str], on_path: set[str], label: str) -> str:
    """The SVG of one round: edges first (under the boxes), then one <g> per node with attrs[node.id]."""
    place = layout(nodes, on_path)
    nodes = [n for n in nodes if n.id in place]  # a node whose parent is missing is not drawn
    texts = {
        n.id: ("⟲" if getattr(n, "hist", False) else "")
        + (node_text(n.text, n.origin) if n.origin != "context" else "…" + node_text(n.text, ""))
        for n in nodes
    }
    widths = {n.id: text_px(texts[n.id]) + 2 * PAD_X for n in nodes}
    columns: dict[int, float] = {}
    for n in nodes:
        d = place[n.id][0]
        columns[d] = max(columns.get(d, 0.0), widths[n.id])
    x_of, x = {}, 1.0
    for d in range(len(columns)):
        x_of[d] = x
        x += columns.get(d, 0.0) + GAP_X
    width = int(x - GAP_X + 2)
    height = (max(row for _, row in place.values()) + 1) * ROW_H
    edges, boxes = [], []
    for n in nodes:
        d, row = place[n.id]
        left, top = x_of[d], row * ROW_H + (ROW_H - BOX_H) / 2
        mid = top + BOX_H / 2
        if n.parent is not None:
            pd, prow = place[n.parent]
            start, turn = x_of[pd] + widths[n.parent], left - GAP_X / 2
            path = " on-path" if n.id in on_path else ""
            edges.append(
                f'<path class="edge{path}" d="M{start:.1f} {prow * ROW_H + ROW_H / 2:.1f}H{turn:.1f}'
                f'V{mid:.1f}H{left:.1f}"/>'
            )
        w = widths[n.id]
        strike = (
            f'<line class="strike" x1="{PAD_X - 1}" y1="{BOX_H / 2:.1f}" x2="{w - PAD_X + 1:.1f}" '
            f'y2="{BOX_H / 2:.1f}"/>'
            if n.origin in STRUCK
            else ""
        )
        node_attrs = attrs.get(n.id) or f'class="node node-{esc(n.origin)}"'
        if n.id in on_path:  # the class attribute comes first: add on-path at its end
            end = node_attrs.index('"', len('class="'))
            node_attrs = node_attrs[:end] + " on-path" + node_attrs[end:]
        boxes.append(
            f'<g {node_attrs} data-node="{esc(n.id)}" transform="translate({left:.1f} {top:.1f})">'
            f'<rect width="{w:.1f}" height="{BOX_H}" rx="4"/>'
            f'<text x="{PAD_X}" y="{BOX_H / 2 + FONT_PX * 0.36:.1f}">{esc(texts[n.id])}</text>{strike}</g>'
        )
    return (
        f'<svg class="tree-svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{esc(label)}"><g class="edges">{"".join(edges)}</g>{"".join(boxes)}</svg>'
    )
