"""How a tree drafter sized its trees on the measured verify curve (suffix speculation, token recycling, lookahead,
the union), with one round's numbers beside the rule: the Explain tab's sizing paragraphs. Events -> HTML.
"""

from __future__ import annotations

from engine.figures import decimals_of, derive, fixed, parse, plural
from engine.specs import family

from .markup import esc


def sizing_line(m, lead: str) -> str:
    """One round of a tree sized on the measured verify curve (a SuffixMatched or TreeSized: scores, verify,
    next_score, round), its figures derived from the printed inputs: "Round r: {lead}k nodes scored …: E = …,
    E ÷ t(k + 1) = …; the next node … would give … : the verdict"."""
    k, t = len(m.scores), m.verify
    has_next = m.next_score is not None
    inputs = (
        [(x, 2) for x in m.scores] + [(t[k], 2)] + ([(m.next_score, 2), (t[k + 1], 2)] if has_next else [])
    )

    def rates(*x):
        e = 1 + sum(x[:k])
        return (e / x[k], (e + x[k + 1]) / x[k + 2]) if has_next else e / x[k]

    figures, printed = derive(rates, inputs, (2, 2) if has_next else 2)
    now, then = figures if has_next else (figures, None)
    places = decimals_of(printed[0])
    e_text = fixed(1 + sum(map(parse, printed[:k])), places)  # exact: the printed scores' own decimals
    line = (
        f"Round {m.round}: {lead}{plural(k, 'node')} scored {', '.join(printed[:k])}: E = {e_text} tokens "
        f"expected, E ÷ t({k + 1}) = {e_text} ÷ {printed[k]} = {now}"
    )
    if has_next:
        line += (
            f"; the next node (score {printed[k + 1]}) would give (E + {printed[k + 1]}) ÷ t({k + 2}) = "
            f"({e_text} + {printed[k + 1]}) ÷ {printed[k + 2]} = {then}: "
            + (
                "it would have paid, but the tree was at its node budget."
                if parse(then) > parse(now)
                else "it did not pay."
            )
        )
    else:
        line += "; no node was left out."
    return line


RULE = (
    "Nodes are taken best first while (E + score) ÷ t(k + 2) > E ÷ t(k + 1), where E = 1 + the scores taken "
    "(tokens expected per forward) and t(n) is the verify forward over n positions ÷ t(1), timed on this host in "
    "this run"
)


def _sizing(rounds: list, attr: str, what: str, how, lead) -> str:
    """The sizing paragraphs of one drafter's rounds (their `attr` record, a SuffixMatched or TreeSized): how its
    scores come about (`how(m)`), the rule, the last round a node was left out (else the last) with its numbers
    (`lead(m)` opens its line), the run's tree sizes, and the rounds where no node paid. "" without a sized tree."""
    sized = [r for r in rounds if getattr(r, attr).scores]
    if not sized:
        return ""
    records = [getattr(r, attr) for r in sized]
    m = next((x for x in reversed(records) if x.next_score is not None), records[-1])
    measured = ", ".join(map(str, m.measured)) or "none yet"
    intro = (
        f"{how(m)}{RULE} (sizes timed when round {m.round} was drafted: {measured}; between them the cost "
        "model's line)."
    )
    sizes = sorted(len(x.scores) for x in records)
    line = (
        sizing_line(m, lead(m))
        + f" Over the run: {plural(len(sized), what)}, trees of {sizes[0]}–{sizes[-1]} nodes "
        f"(median {sizes[len(sizes) // 2]})."
    )
    if len(rounds) > len(sized):
        line += f" In {plural(len(rounds) - len(sized), 'more round')} no node paid: a plain step."
    return f"<p>{intro}</p><p>{line}</p>"


def suffix_sizing(run) -> str:
    """How suffix speculation sized its trees on this host's verify curve, with one round's numbers beside the
    rule (the last round a node was left out), and the run's sizes. "" for a run without suffix rounds."""
    how = (
        "<b>How suffix sized its trees.</b> Each round it counts what followed the latest occurrences of the "
        "context's longest repeated suffix into a tree. A node's score is the chance its path is accepted: the "
        "product along the path of c ÷ (c<sub>parent</sub> + 1), c the occurrences through a node (the +1 keeps a "
        "path seen once from counting as certain). "
    )
    rounds = [r for r in (run.rounds if run else []) if r.suffix is not None]
    return _sizing(
        rounds,
        "suffix",
        "suffix round",
        lambda m: how,
        lambda m: f"a match of {m.match} tokens, {plural(m.occurrences, 'occurrence')}, ",
    )


def _tree_sized_how(m) -> str:
    """How token recycling's, lookahead's or the union's scores come about (a TreeSized record; lookahead's has
    window rows)."""
    head = f"<b>How {esc(m.drafter)} sized its trees.</b> "
    if m.extra_rows:  # lookahead: the candidates' tree beside the Jacobi window's rows
        return head + (
            "Each round it merges the pool's n-grams that start with the last token into a tree of candidates. "
            "A node's score is the chance its path is accepted: the product along the path of c ÷ "
            "(c<sub>parent</sub> + 1), c the candidates through a node. The window's "
            f"{plural(m.extra_rows, 'row')} ride in every forward, so t(n) below is the forward over "
            f"{m.extra_rows} + n positions ÷ the one over {m.extra_rows} + 1. "
        )
    if family(m.drafter) == "union":  # suffix speculation's trie and token recycling's template, by path
        return head + (
            "Each round it merges two pools by path: the continuations after the longest match of the context's "
            "suffix (a node's score: the product along its path of c ÷ (c<sub>parent</sub> + 1), c the "
            "occurrences through it) and its tree template filled from the target's top-k guesses (a node's "
            "score: the product of each template position's rate learned in this run); a path in both keeps the "
            "larger score. "
        )
    return head + (
        "Each round it fills its tree template from the target's top-k guesses seen in earlier forwards. A "
        "node's score is the chance its path is accepted: the product along the path of each template "
        "position's rate, learned in this run (how often its token was the one the target committed when its "
        "parent's was, with a prior of 1 ÷ (rank + 2) worth two rounds). "
    )


def tree_sizing(run) -> str:
    """How token recycling or lookahead decoding sized its trees (tree_sized events), as suffix_sizing. "" without
    such rounds."""
    rounds = [r for r in (run.rounds if run else []) if r.sized is not None]
    return _sizing(
        rounds,
        "sized",
        "sized round",
        _tree_sized_how,
        lambda m: (
            f"{plural(m.pool, 'candidate node')}, "
            if m.extra_rows
            else f"a pool of {plural(m.pool, 'filled node')}, "
        ),
    )
