"""The one rule for a run's own measured costs: its c, v(n) and t(1) feed a sentence, a chart or the what-if only
when they are physically possible and were taken on a quiet enough machine; otherwise the figures rest on this
host's quiet calibration (its kernel plan's matmul times, else its roofline), and the page says which it used and
why in the same sentence. Explain's opening, the what-if, Charts' best γ, the summary line, the race's predicted
figure and the tour all read `usable(summary)`; none judges a timing on its own. The race's measured speedup is an
observation, not a derived figure: it stays, with the load it ran under. Plain floats, no torch, no clocks.

Physically possible, within NOISE: v(n) ≥ 1 (a forward over n positions costs at least one over 1), v(n) does not
fall as n grows (a forward over more rows is not cheaper), c ≥ 0. Quiet: the load watch (runtime/loadwatch.py)
saw no lane contended past costmodel.CONTENTION_LIMIT, and no other timing guard fired (costmodel.costs).
"""

from __future__ import annotations

from . import costmodel

NOISE = (
    0.10  # a measured v(n) may sit this share below 1, or below a smaller forward's, before it is impossible
)
CALIBRATION_N = 17  # calibrated v(n) for n = 2..CALIBRATION_N: every verify size of γ ≤ 16
KERNEL_PLAN = "its kernel plan's matmul times at n rows ÷ at 1 row"
BLOCK_KERNELS = "its block kernels' times at n rows (cache-hot: their own work) or its memory floor, the larger, ÷ the same at 1 row"
ROOFLINE = (
    "its roofline's floor at n rows ÷ at 1 row, the least a forward can cost: an upper bound on the speedup"
)


def impossible(s: dict) -> list[str]:
    """What in a summary's measured costs no machine could have given (each in words; [] when all are possible)."""
    out = []
    c = s.get("c")
    if isinstance(c, (int, float)) and c < 0:
        out.append(f"c = {c:.3f} < 0")
    top_n, top_v = 1, 1.0  # v(1) = 1 by definition
    for n, v in sorted(dict(s.get("v_points") or []).items()):
        if v < 1 - NOISE:
            out.append(f"v({n}) = {v:.2f}: {n} positions verified in less than one target step")
        elif v < top_v * (1 - NOISE):
            out.append(
                f"v({n}) = {v:.2f} < v({top_n}) = {top_v:.2f}: a forward over more positions cost less"
            )
        if v > top_v:
            top_n, top_v = n, v
    return out


def busy(s: dict) -> list[str]:
    """Why a summary's costs were not taken on a quiet machine: the load watch's contention, the other timing
    guards (spread, drift, lanes apart); [] when nothing says so (a run without a load watch counts as quiet)."""
    share, cores = s.get("contended_share"), s.get("outside_cores")
    out = []
    if isinstance(share, (int, float)) and share > costmodel.CONTENTION_LIMIT:
        kept = f", {cores:.1f} cores busy besides it on average" if isinstance(cores, (int, float)) else ""
        out.append(
            f"it was measured while other processes wanted more CPU than the race left free for {share:.0%} of "
            f"a lane's compute{kept}"
        )
    # the impossible-v flags say the same as impossible(); contention is said above
    said = ("less than one step", "other processes wanted")
    out += [f for f in s.get("timing_flags") or [] if not any(x in f for x in said)]
    return out


def calibration(host, context: float) -> dict | None:
    """This host's quiet v(n), n = 2..CALIBRATION_N, from what the run recorded of its machine (RunStarted.host):
    the kernel plan's times (host["calibration"], best over its takes) when recorded, else the roofline's floors
    at the run's mean context. {"v_points": [[n, v], ...], "from": words, "measured": when}; None without either."""
    if not isinstance(host, dict):
        return None
    plan = host.get("calibration")
    rows = _plan_rows(plan.get("v") if isinstance(plan, dict) else None)
    if rows:
        at = lambda n: rows[min((k for k in rows if k >= n), default=max(rows))]  # noqa: E731  the kernels' bucket
        return {
            "v_points": [[n, at(n)] for n in range(2, CALIBRATION_N + 1)],
            "from": BLOCK_KERNELS if plan.get("of") == "blocks" else KERNEL_PLAN,
            "measured": str(plan.get("measured") or ""),
        }
    r = costmodel.roof(host)
    if r is None:
        return None
    one = max(costmodel.floors(1, context, r))
    return {
        "v_points": [[n, max(costmodel.floors(n, context, r)) / one] for n in range(2, CALIBRATION_N + 1)],
        "from": ROOFLINE,
        "measured": str(host.get("measured") or ""),
    }


def _plan_rows(v) -> dict[int, float]:
    """{rows: v} of a recorded kernel-plan calibration when every value is a finite number ≥ 1 ({} otherwise)."""
    if not isinstance(v, dict):
        return {}
    try:
        rows = {int(k): float(x) for k, x in v.items()}
    except (TypeError, ValueError):
        return {}
    ok = rows and all(1 <= x < 1e3 for x in rows.values())
    return rows if ok else {}


def usable(s: dict) -> dict:
    """The summary every derived figure reads: `s` itself when its own costs pass the rule, else `s` with c, v(n)
    and the prediction taken from the host's quiet calibration (s["calibration"], metrics.summary) and the run's
    own c kept when it is ≥ 0 (a ratio of two times under one load). "costs" says which and why:
    {"source": "run" | "calibration" | "none", "why": [reasons], "from": words, "measured": when}."""
    if not s or s.get("c") is None or not s.get("v_points"):
        return {**s, "costs": {"source": "run", "why": []}} if s else s
    why = impossible(s) + busy(s)
    if not why:
        return {**s, "costs": {"source": "run", "why": []}}
    cal = s.get("calibration")
    c = s["c"] if s["c"] >= 0 else None
    if not cal or c is None:
        empty = {"c": None, "v": None, "predicted_speedup": None, "model_tokens": None, "model_steps": None}
        return {**s, **empty, "timing_flags": [], "costs": {"source": "none", "why": why}}
    points = dict(cal["v_points"])
    gammas = [g for g, n in s.get("round_gammas") or [] for _ in range(n)]
    alpha = None if s.get("tree_rounds") else s.get("alpha")
    model = costmodel.prediction(alpha, gammas, c, points)
    n = s.get("v_n")
    return {
        **s,
        **model,
        "c": c,
        "v": costmodel.verify_curve({1: 1.0, **points})(n) if n else None,
        "v_points": [[k, v] for k, v in sorted(points.items())],
        "v_spread": None,
        "timing_flags": [],
        "costs": {
            "source": "calibration",
            "why": why,
            "from": cal["from"],
            "measured": cal.get("measured", ""),
        },
    }


def sentence(u: dict) -> str:
    """Which costs the figures beside it rest on and why, in one sentence ("" when they are the run's own): "This
    run's own costs are not used (v(3) = 0.34: …); using the quiet calibration of the host it ran on (…): v(3) = 1.08." u: the
    summary usable() returned."""
    costs = u.get("costs") or {}
    if costs.get("source") in (None, "run"):
        return ""
    why = "; ".join(costs["why"])
    if costs["source"] == "none":
        return (
            f"This run's own costs are not used ({why}), and it recorded no quiet calibration of its host: no "
            "figure is derived from its timings."
        )
    n = u.get("v_n")
    v = f": v({n}) = {u['v']:.2f}" if n and isinstance(u.get("v"), float) else ""
    when = f", measured {costs['measured']}" if costs.get("measured") else ""
    return (
        f"This run's own costs are not used ({why}); using the quiet calibration of the host it ran on ({costs['from']}{when})"
        f"{v}, and this run's own c (draft time ÷ target step: two times under one load)."
    )


def short(u: dict) -> str:
    """Why the run's own costs were not used, in a few words (a chart title's): "measured under load",
    "v(3) = 0.34 is impossible" or "its timings were disturbed"."""
    why = (u.get("costs") or {}).get("why") or []
    if any("other processes wanted" in w for w in why):
        return "measured under load"
    # the figure before its reason ("v(3) = 0.34: ..."), not a drafter's name
    bad = next((w.split(":", 1)[0].split(" < ")[0] for w in why if w.startswith(("v(", "c ="))), None)
    return f"{bad} is impossible" if bad else "its timings were disturbed"
