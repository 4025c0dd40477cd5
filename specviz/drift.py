"""The lossy mode's marks: the badge every view carries for a run under a lossy acceptance rule, and the drift
meter (how far the output left the target's). Plain Python: events -> HTML.

A lossy rule (GenerationConfig.accept = "typical:ε,δ", Medusa-2's typical acceptance) is off by default; it exists
to be measured against the exact rule. Greedy: the meter compares the run with its race's AR lane, the target's
own greedy output (engine.metrics.greedy_drift). Sampled: a law drifts, not a text: the meter shows the
total variation of the first two tokens' law measured by engine/decode/drift.py (`drift_report`), when there is one.
"""

from __future__ import annotations

from engine.config import typical_params
from engine.figures import plural
from engine.metrics import greedy_drift

from .markup import esc, fmt_p


def lossy_rule(run) -> str:
    """The run's lossy acceptance rule ("typical:0.09,0.3"), "" under the exact rule or with no run."""
    accept = run.config.get("accept") if run is not None else None
    return accept if isinstance(accept, str) and accept not in ("", "exact") else ""


def lossy_badge(run) -> str:
    """The badge: on every view of a lossy run, nothing otherwise."""
    rule = lossy_rule(run)
    if not rule:
        return ""
    try:
        eps, delta = typical_params(rule)
    except ValueError:  # a hand-edited trace: the badge still shows the rule as written
        eps = delta = "?"
    return (
        f'<span class="sv-lossy" data-lossy="{esc(rule)}" title="typical acceptance (Medusa-2): a draft is kept '
        f"when p(x) &gt; min(ε, δ·exp(−H(p))), ε = {esc(eps)}, δ = {esc(delta)}. Faster, and NOT the target's "
        f'output: greedy runs leave its greedy text, sampled runs leave its law.">LOSSY · {esc(rule)}</span>'
    )


def drift_meter(spec, ar, speedup: float | None = None, sampled: dict | None = None) -> str:
    """The meter for a lossy run: greedy, its first difference from the AR lane and how many tokens differ;
    sampled, the measured TV of the 2-token law beside the exact rule's (`sampled`, a drift_report), else how to
    measure it. The speedup beside it. "" for an exact run."""
    if not lossy_rule(spec):
        return ""
    fast = f" · speedup {speedup:.2f}×" if speedup is not None else ""
    if not spec.greedy:
        if sampled:
            lossy, exact = sampled["lossy"], sampled["exact"]
            text = (
                f"drift in law: TV of the first two tokens' law from the target's = {lossy['tv']:.3f} "
                f"(the exact rule at the same n = {exact['n']}: {exact['tv']:.3f}, sampling noise){fast}"
            )
            return f'<span class="sv-drift" data-tv="{lossy["tv"]}" data-tv-exact="{exact["tv"]}">{esc(text)}</span>'
        return (
            f'<span class="sv-drift" data-drift="law">drift: a sampled run drifts in law, not in text: measure it '
            f"in Explain (the first two tokens' law against the target's){esc(fast)}</span>"
        )
    if ar is None or not (spec.done and ar.done):
        return (
            '<span class="sv-drift" data-drift="pending">drift: race it against AR to see where the output '
            "leaves the target's greedy output</span>"
        )
    d = greedy_drift(spec.token_ids(), ar.token_ids())
    if d["first"] is None:
        said = "its one token is" if d["tokens"] == 1 else f"all {d['tokens']} tokens are"
        text = f"drift: none on this run, {said} the target's greedy output{fast}"
    else:
        text = (
            f"drift: leaves the target's greedy output at token {d['first'] + 1}; {d['differ']} of "
            f"{plural(d['tokens'], 'token')} {'differs' if d['differ'] == 1 else 'differ'}{fast}"
        )
    first = "" if d["first"] is None else d["first"] + 1
    return (
        f'<span class="sv-drift" data-drift="greedy" data-first="{first}" data-differ="{d["differ"]}">'
        f"{esc(text)}</span>"
    )


def lossy_note(run) -> str:
    """Explain's paragraph on a lossy run: what the rule does, why the exact rule is the rule, how drift is measured."""
    rule = lossy_rule(run)
    if not rule:
        return ""
    return (
        '<p class="sv-note sv-lossy-note"><b>This run is lossy.</b> Typical acceptance keeps a drafted token '
        "whenever the target finds it likely enough, p(x) &gt; min(ε, δ·exp(−H(p))), instead of testing it: "
        "greedy, argmax p = x; sampling, u &lt; min(1, p/q) with the residual norm(max(0, p − q)) after a "
        "rejection. More drafts survive, so rounds commit more; but a kept token the target would not have "
        "chosen changes every token after it (greedy), and the tokens it keeps are not distributed as p "
        "(sampling). The exact rule is the one rule that keeps the output the target's own for any draft: "
        "that is why it is the default. The drift meter measures the cost: the first token where a greedy run "
        "leaves the AR lane, and for sampled runs the total variation of the first two tokens' law from the "
        "target's, measured from seeded runs next to the exact rule's (the noise floor).</p>"
    )


def drift_progress_html(report: dict, limit_s: float) -> str:
    """The meter while it runs (a drift_job report): seeded runs done per rule, both TVs so far, an estimate of the
    time left (from the runs so far; the job stops at limit_s in any case)."""
    done, of, elapsed = report["done"], report["of"], report["elapsed_s"]
    if not done:
        text = f"drift meter: reading the prompt … ({elapsed:.0f} s)"
    else:
        left = min(elapsed / done * (of - done), max(0.0, limit_s - elapsed))
        text = (
            f"drift meter: {done} of {of} seeded runs per rule · TV so far {fmt_p(report['lossy']['tv'])} "
            f"(exact rule {fmt_p(report['exact']['tv'])}) · about {left:.0f} s left"
        )
    return f'<div class="specviz sv-drift-progress sv-status" data-done="{done}" data-of="{of}">{esc(text)}</div>'


def sampled_drift_html(report: dict) -> str:
    """A drift_job's last report (engine/decode/drift.py) as the Explain tab's result line: both rules' TV at the same n
    and seeds, and, when the time limit cut it, that it did and at which n."""
    lossy, exact = report["lossy"], report["exact"]
    rule = lossy.get("accept", "exact")
    same = rule == "exact"
    head = "the exact rule (choose a typical rule to compare)" if same else f"LOSSY {rule}"
    cut = (
        f" Stopped at the time limit after {lossy['n']} of {report['of']} runs per rule: the estimate is from "
        f"those {lossy['n']}."
        if report.get("stopped") == "time_limit"
        else ""
    )
    if not lossy["n"]:
        text = f"{head}: no seeded run finished before the time limit, so there is no estimate.{cut}"
    else:
        text = (
            f"{head}: TV of the first two tokens' law from the target's = {fmt_p(lossy['tv'])} over {lossy['n']} "
            f"seeded runs ({lossy['pairs']} distinct pairs); the exact rule at the same n and seeds: "
            f"{fmt_p(exact['tv'])} (what sampling noise alone gives).{cut} Prompt: {report['prompt'][:60]!r}, "
            f"draft {report['draft']}."
        )
    return (
        f'<div class="specviz sv-drift-result" data-tv="{lossy["tv"]}" data-tv-exact="{exact["tv"]}" '
        f'data-accept="{esc(rule)}" data-n="{lossy["n"]}" data-stopped="{esc(report.get("stopped") or "")}">'
        f"{esc(text)}</div>"
    )
