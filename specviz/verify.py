"""The verify view of one round: for each drafted position, q and p of the drafted token as bars with the
acceptance rule drawn on them (greedy: is it the target's argmax; sampling: min(1, p/q) and the recorded
draw u), the draft's and the target's top-k side by side, and where the round stopped and why.
Events -> HTML; every token text is escaped.
"""

from __future__ import annotations

from .drift import lossy_badge, lossy_rule
from .imported import rollback_line
from .markup import _at, accept_terms, esc, fmt_p, label_text
from .runs import main_run

TOPK_SHOWN = 4
UNTESTED = (
    '<span class="vf-none" title="The forward computed a distribution here, but it follows a rejected draft '
    'token: it is not what the target would say after the committed text, so it is not shown.">– (after the '
    "rejection)</span>"
)


def _num(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _bar(kind: str, value, label: str, marker=None) -> str:
    """A horizontal bar 0..1 (width from the CSS variable --w); an optional marker line at --u."""
    v = _num(value)
    width = f"{min(max(v, 0.0), 1.0):.3f}" if v is not None else "0"
    mark = ""
    if _num(marker) is not None:
        mark = f'<span class="vf-u" style="--u:{min(max(marker, 0.0), 1.0):.3f}" title="u = {marker:.3f}"></span>'
    return (
        f'<span class="vf-bar vf-{kind}" style="--w:{width}"><span class="vf-fill"></span>{mark}'
        f'<span class="vf-num">{esc(label)} {fmt_p(v)}</span></span>'
    )


def _topk(rows, chosen_id) -> str:
    items = []
    for row in (rows or [])[:TOPK_SHOWN]:
        try:
            tid, text, prob = row[0], row[1], row[2]
        except (TypeError, IndexError, KeyError):
            continue
        mark = " vf-chosen" if tid == chosen_id else ""
        items.append(f'<li class="vf-k{mark}"><code>{label_text(text)}</code> {fmt_p(prob, 2)}</li>')
    return f'<ol class="vf-topk">{"".join(items)}</ol>' if items else '<span class="vf-none">–</span>'


def _stop_reason(rv, greedy: bool) -> str:
    """One sentence: where the round stopped and why."""
    v, d = rv.verified, rv.drafted
    nxt = label_text(v.next_token)
    if v.first_rejected is not None:
        k = v.first_rejected
        tok = label_text(_at(d.tokens, k) or "")
        p, q, u, acc = _at(v.p, k), _at(d.q, k), _at(v.u, k) if v.u else None, _at(v.accept_prob, k)
        pt, qt, at = accept_terms(p, q, acc)  # printed so that min(1, p/q) of them is the printed test
        why = (
            f"it is not the target's argmax (p = {fmt_p(p)})"
            if greedy
            else f"u = {fmt_p(u)} ≥ min(1, p/q) = min(1, {pt}/{qt}) = {at}"
            if _num(u) is not None
            else f"its test min(1, p/q) = min(1, {pt}/{qt}) = {at} failed"
        )
        rest = len(d.tokens) - k - 1
        tail = f"; the {rest} drafted after it were discarded unseen" if rest > 0 else ""
        how = "argmax p" if greedy else "sampled from norm(max(0, p − q))"
        return (
            f"Stopped at draft position {k + 1}: <code>{tok}</code> was rejected because {esc(why)}{tail}. "
            f"The target's <code>{nxt}</code> ({how}) was committed in its place."
        )
    if rv.committed is not None and len(rv.committed.tokens) <= rv.n_accepted:
        return "The draft was accepted up to an end-of-text token: the run ended there."
    return (
        f"{'The draft was' if len(d.tokens) == 1 else f'All {len(d.tokens)} drafts were'} accepted, so the same target forward gave one more token for free: "
        f"the bonus <code>{nxt}</code> (p = {fmt_p(v.next_p)})."
    )


def tree_facts(tree) -> dict:
    """Node counts of a DraftTree by status, its depth, and the children of the last accepted node (tried there)."""
    parents, status, path = list(tree.parents or []), list(tree.status or []), list(tree.path or [])
    depth = []
    for p in parents:
        depth.append(1 if not isinstance(p, int) or p < 0 or p >= len(depth) else depth[p] + 1)
    last = path[-1] if path else -1
    return {
        "nodes": len(parents),
        "depth": max(depth, default=0),
        "path": len(path),
        "accepted": status.count("accepted"),
        "rejected": status.count("rejected"),
        "unvisited": status.count("unvisited"),
        "children": sum(1 for p in parents if p == last),
    }


def _tree_line(rv, greedy: bool) -> str:
    """What the tree's one forward judged: every node, the path kept, the rest rejected or never reached."""
    f = tree_facts(rv.tree)
    nxt = label_text(rv.tree.next_token)
    if rv.tree.next_kind == "bonus":
        end = f"the path ended in a leaf at depth {f['path']}, so the same forward gave the bonus <code>{nxt}</code>"
    else:
        test = "matched the target's argmax" if greedy else "passed its test"
        end = (
            f"at depth {f['path'] + 1} none of the {f['children']} children tried {test}: the target's "
            f"<code>{nxt}</code> was committed in their place"
        )
    return (
        f"A tree of {f['nodes']} draft nodes (depth {f['depth']}), judged in one target forward over "
        f"{f['nodes'] + 1} positions (a tree mask lets each node see only its ancestors): {f['accepted']} nodes "
        f"kept on the accepted path, {f['rejected']} rejected, {f['unvisited']} never reached (a parent was "
        f"rejected); {end}. The table shows the path, then the first node rejected below it."
    )


def _row(i: int, text, d, v, greedy: bool) -> str:
    """One drafted token's row of the verify table: q, p and the test, the verdict, both top-k lists."""
    q, p, acc = _at(d.q, i), _at(v.p, i), _at(v.accept_prob, i)
    u = _at(v.u, i) if v.u else None
    chosen = _at(d.token_ids, i)
    tested = v.first_rejected is None or i <= v.first_rejected
    ok = bool(_at(v.accepted, i))
    verdict = "accepted" if ok else ("rejected" if tested and i == v.first_rejected else "not tested")
    target_rows = _at(v.target_topk, i)
    if greedy:
        top = _at(target_rows, 0) if target_rows else None
        argmax = label_text(top[1]) if top else "–"
        test = f'<span class="vf-rule">argmax p = <code>{argmax}</code> {"=" if ok else "≠"} draft</span>'
        if not tested:
            test = '<span class="vf-rule">not tested: after the rejection</span>'
    else:
        test = _bar("acc", acc, "min(1, p/q)", u) if tested else '<span class="vf-rule">not tested</span>'
    return (
        f'<tr class="vf-row vf-{verdict.replace(" ", "-")}" data-i="{i}">'
        f'<td class="vf-pos">{i + 1}<small>pos {esc(d.pos + i if isinstance(d.pos, int) else "")}</small></td>'
        f'<td class="vf-tok"><code>{label_text(text)}</code></td>'
        f'<td class="vf-bars">{_bar("q", q, "q")}{_bar("p", p if tested else None, "p")}{test}</td>'
        f'<td class="vf-verdict">{esc(verdict)}</td>'
        f"<td>{_topk(_at(d.draft_topk, i), chosen)}</td><td>{_topk(target_rows, chosen) if tested else UNTESTED}"
        "</td></tr>"
    )


def _undrafted(run, round_: int, rounds: list) -> str:
    """The verify view of a round that drafted nothing (a plain target step) or is not in the run (yet): it says
    so, with a button to the nearest drafted round (the earlier one on a tie)."""
    near = min(rounds, key=lambda r: (abs(r.round - round_), r.round)).round
    plain = any(r.round == round_ for r in run.rounds)
    what = (
        f"Round {esc(round_)} was a plain target step: nothing was drafted, so there is nothing to verify "
        "(the target made one token, as plain decoding does)."
        if plain
        else f"Round {esc(round_)} is not in this run{' yet' if not run.done else ''}."
    )
    return (
        f'<div class="specviz specviz-verify vf-plain" data-round="{esc(round_)}" data-positions="0">'
        f'<p class="vf-why">{what} <button class="vf-nav vf-nearest" data-select-round="{near}">'
        f"Show round {near}, the nearest drafted round</button></p></div>"
    )


def render_verify(events, round_: int | None = None) -> str:
    """HTML of the verify view of round `round_` (None: the last verified round) of the speculative run."""
    run = main_run(events)
    rounds = [rv for rv in (run.rounds if run else []) if rv.drafted is not None and rv.verified is not None]
    if not rounds:
        return (
            '<div class="specviz specviz-verify sv-empty">Select a round (click a token in the output, a round '
            "in the tree, or move the replay slider) to see how the target judged each drafted token.</div>"
        )
    if round_ is None:
        rv = rounds[-1]
    else:
        rv = next((r for r in rounds if r.round == round_), None)
        # never another round than the one asked for: say what it was, link the nearest drafted
        if rv is None:
            return _undrafted(run, round_, rounds)
    d, v, greedy = rv.drafted, rv.verified, run.greedy
    rule = (
        "greedy: a draft is accepted iff it is the target's argmax"
        if greedy
        else "sampling: accepted iff u < min(1, p/q), u ~ U(0, 1)"
    )
    if lossy_rule(run):  # the lossy shortcut's test instead (engine/sampling/typical.py)
        rule = "LOSSY typical acceptance: a draft is accepted iff p > min(ε, δ·exp(−H(p)))"
    idx = [r.round for r in rounds]
    k = idx.index(rv.round)
    nav = "".join(
        f'<button class="vf-nav" data-select-round="{r}" aria-label="{label} round">{sym}</button>'
        for r, sym, label in (
            (idx[k - 1] if k else None, "◀", "previous"),
            (idx[k + 1] if k + 1 < len(idx) else None, "▶", "next"),
        )
        if r is not None
    )
    rows = [_row(i, text, d, v, greedy) for i, text in enumerate(d.tokens)]
    rb = rv.rolled_back
    rollback = rollback_line(run, rb) if rb is not None else ""  # in the run's own engine's terms
    if rv.tree is not None:
        f = tree_facts(rv.tree)
        size = f"tree of {f['nodes']} nodes, depth {f['depth']}"
        facts = (
            f' data-nodes="{f["nodes"]}" data-tree-accepted="{f["accepted"]}" data-tree-rejected="{f["rejected"]}"'
            f' data-tree-unvisited="{f["unvisited"]}"'
        )
        why = _tree_line(rv, greedy) + rollback
    else:
        size, facts, why = f"γ = {len(d.tokens)}", "", _stop_reason(rv, greedy) + rollback
    head = (
        f'<div class="vf-head">{lossy_badge(run)}{nav}<b>Round {rv.round}</b><span>drafter {esc(d.drafter)} · {size} · '
        f"{esc(rule)}</span></div>"
    )
    table = (
        '<table class="vf-table"><thead><tr><th>#</th><th>draft</th><th>q (draft) · p (target) · the test</th>'
        "<th>verdict</th><th>draft top-k</th><th>target top-k</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
    return (
        f'<div class="specviz specviz-verify" data-round="{rv.round}" data-positions="{len(d.tokens)}"{facts}>'
        f'{head}<div class="vf-scroll">{table}</div><p class="vf-why">{why}</p></div>'
    )
