"""Lookahead decoding's Jacobi window as a grid (a `lookahead_window` event -> HTML). Plain Python.

Rows are the window's levels (level 0, the oldest guesses, at the top), columns its positions; a cell is one
guess, marked when it is a Jacobi fixed point (the target, given the guesses before it in its column, predicts
exactly it: the trajectory has converged there). The last row is what the target predicted from the top level:
the next round's top level. The verification branch of the same forward is the round's token tree beside it.
"""

from __future__ import annotations

from .markup import _at, esc, visible

MAX_CELLS = 16 * 8  # columns × rows drawn at most (the engine's window is <= 16 × 7; a trace may hold more)


def window_grid(w) -> str:
    """The grid of one round's window, with a caption that counts its fixed points and the pool."""
    levels = [row for row in (w.tokens if isinstance(w.tokens, list) else []) if isinstance(row, list)][:7]
    width = min(max((len(r) for r in levels), default=0), 16)
    fixed = w.fixed if isinstance(w.fixed, list) else []
    rows, n_fixed, n_known = [], 0, 0
    for lv, row in enumerate(levels):
        cells = []
        for i in range(width):
            flag = _at(_at(fixed, lv) or [], i)
            n_known += flag is not None
            n_fixed += flag is True
            cls = "la-fixed" if flag is True else ("la-moving" if flag is False else "la-unknown")
            pos = (w.pos + i + lv) if isinstance(w.pos, int) else ""
            what = (
                "a fixed point: the target predicts this guess"
                if flag is True
                else ("still moving: the target predicts another token here" if flag is False else "")
            )
            cells.append(
                f'<td class="la-cell {cls}" data-level="{lv}" data-col="{i}" title="level {lv}, position '
                f'{esc(pos)}{": " + what if what else ""}">{esc(visible(str(_at(row, i) or "")))}</td>'
            )
        rows.append(f'<tr><th scope="row">level {lv}</th>{"".join(cells)}</tr>')
    nxt = w.next_tokens if isinstance(w.next_tokens, list) else []
    rows.append(
        '<tr class="la-next"><th scope="row">target →</th>'
        + "".join(f'<td class="la-cell">{esc(visible(str(_at(nxt, i) or "")))}</td>' for i in range(width))
        + "</tr>"
    )
    caption = (
        f"Jacobi window {len(levels)} × {width}: {n_fixed} of {n_known} guesses are fixed points · pool "
        f"{esc(w.pool)} n-grams (+{esc(w.added)}) · {esc(w.candidates)} verified as the tree"
    )
    return (
        f'<figure class="la-window" data-round="{esc(w.round)}" data-fixed="{n_fixed}">'
        f'<figcaption>{caption}</figcaption><div class="la-scroll"><table class="la-grid">{"".join(rows)}'
        f"</table></div></figure>"
    )
