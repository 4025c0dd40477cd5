"""The one cost model of speculative decoding: α, E(α, γ), the measured costs c and v(n), the
predicted speedup, and the guards that say when a timing cannot be trusted. The run summary
(metrics.py), every chart, the Explain tab, auto's choices and the bench report call this module;
none of them computes these numbers on its own. Pure Python floats: no torch, no clocks.

α is the **per-token acceptance probability**, accepted / (accepted + rejections): it counts only
the draft positions the target actually tested. A position after a round's first rejection (or
after an accepted end-of-text) was never tested, so it is neither a success nor a failure. That is
the maximum-likelihood estimate of the i.i.d. acceptance probability of Leviathan et al. (2023),
which is exactly what E assumes. accepted / drafted (the "acceptance rate" vLLM reports) counts
untested positions as failures and shrinks as γ grows: we show it as a count ("30 of 129 drafts
accepted"), never as α.

Costs are in units of one plain target step t(1), the time AR decoding pays per token:
    c     = draft seconds per drafted token / t(1)
    v(n)  = seconds of a round that verifies n tokens (forward + acceptance + commit, drafting
            excluded) / t(1); v(1) = 1 by definition
    predicted speedup = Σ_rounds E(α, γ_r) / Σ_rounds (γ_r·c + v(γ_r + 1))
which for a fixed γ is the textbook E / (γc + v(γ+1)).
"""

from __future__ import annotations

import collections
import math
import statistics

BUSY = "machine was busy: timing unreliable"
DRIFT_LIMIT = 0.30  # a step time that moved more than this during a run is not one cost
# round times whose interquartile range exceeds this share of their median are not one cost
SPREAD_LIMIT = 0.35
# share of a race lane's compute under CPU contention above which its timing is flagged
CONTENTION_LIMIT = 0.10
# other processes' average cores during a host measurement (roofline, kernel plan) below which it was quiet
QUIET_CORES = 0.25
MIN_SAMPLES = 3  # fewer timed rounds than this give no spread and no drift check
# bins of a drafter's confidence, max q at a position (auto, heads' calibration)
CONFIDENCE_EDGES = (0.2, 0.4, 0.6, 0.8)
PRIOR_SLOPE = 0.1  # extra verify cost per token, in target steps, before two multi-token sizes are seen


def alpha(accepted: float, rejections: float) -> float | None:
    """Per-token acceptance probability: successes over tested positions (None when nothing was tested)."""
    tested = accepted + rejections
    return float(accepted) / tested if tested > 0 else None


def priced_alpha(alpha_: float, tested: float) -> float:
    """α as a decision prices a draft at: the estimate less one standard error of it over `tested` positions,
    √(α(1 − α) / tested). A drafter is chosen where its estimate is highest, which is where it is most likely over
    its true acceptance (the winner's curse: on Spec-Bench's qa, one-token lookups priced at α 0.36-0.53 were
    accepted at 0.2). The margin shrinks as the positions tested grow."""
    return max(0.0, alpha_ - math.sqrt(alpha_ * (1.0 - alpha_) / tested)) if tested > 0 else 0.0


def tested_counts(accepted: int, rejections: int, drafted: int) -> str:
    """α's counts in words: "15 of 19 tested drafts accepted; 8 more never tested" (tested = accepted +
    rejections; a draft after a round's first rejection is never tested)."""
    tested = accepted + rejections
    untested = max(drafted - tested, 0)
    return f"{accepted} of {tested} tested draft{'s' if tested != 1 else ''} accepted" + (
        f"; {untested} more never tested" if untested else ""
    )


def expected_tokens(alpha: float, gamma: float) -> float:
    """E: expected tokens per target forward with per-token acceptance α and γ drafts (floats only)."""
    a, g = min(max(float(alpha), 0.0), 1.0), max(float(gamma), 0.0)
    if a >= 1.0:
        return g + 1.0
    return (1.0 - a ** (g + 1.0)) / (1.0 - a)


def expected_tokens_each(alphas) -> float:
    """E for a chain whose i-th draft is accepted with probability alphas[i] once the ones before it were:
    1 + a1 + a1·a2 + …  (expected_tokens(α, γ) is the case of γ equal α)."""
    total, reach = 1.0, 1.0
    for a in alphas:
        reach *= min(max(float(a), 0.0), 1.0)
        total += reach
    return total


def predicted_speedup(alpha: float, gamma: float, c: float, v: float) -> float | None:
    """E / (γc + v): speedup over AR when a draft step costs c and verifying γ+1 tokens costs v target steps."""
    return predicted_speedup_asked(alpha, gamma, c, v, 1.0)


def predicted_speedup_each(alphas, c: float, v: float) -> float | None:
    """predicted_speedup for a chain whose i-th draft is accepted with probability alphas[i] once the ones before it
    were: expected_tokens_each(alphas) / (γc + v), γ = len(alphas) (equal alphas give predicted_speedup)."""
    cost = len(alphas) * float(c) + float(v)
    return expected_tokens_each(alphas) / cost if cost > 0 else None


def predicted_speedup_asked(alpha: float, gamma: float, c: float, v: float, used: float) -> float | None:
    """predicted_speedup for a drafter asked before it is known whether its draft is worth verifying: with
    probability `used` it is (E tokens for γc + v), else the round decodes plainly after paying the drafting
    (1 token for γc + 1). used = 1 is predicted_speedup, E / (γc + v), exactly."""
    u = min(max(float(used), 0.0), 1.0)
    cost = float(gamma) * float(c) + u * float(v) + (1.0 - u)
    return (u * expected_tokens(alpha, gamma) + 1.0 - u) / cost if cost > 0 else None


def round_rate(tokens: float, draft_s: float, verify_s: float) -> float | None:
    """Tokens per second of a round that commits `tokens` (accepted + the one the target adds) for its drafting and
    its verify forward: how auto prices a tree, whose E has no closed form (its mean accepted per round, measured)."""
    cost = float(draft_s) + float(verify_s)
    return float(tokens) / cost if cost > 0 else None


def verify_curve(points: dict, fitted: bool = False) -> "callable":
    """n -> verify cost (any unit, t(1) = points[1]) from measured points: measured where seen, else a
    least-squares line through the multi-token points (n >= 2), never below t(1).

    One token and several run different kernels on a CPU (a 1-row matmul vs a packed multi-row one),
    so t(1) -> t(2) is a jump and t(2..n) a gentle slope: a line through t(1) as well would overestimate
    long verifies. With a single multi-token point the slope is PRIOR_SLOPE·t(1) per token.
    fitted: the line at every n ≥ 2, measured sizes included (a smooth curve through noisy points).
    """
    pts = sorted((int(n), float(t)) for n, t in points.items() if n >= 2)
    t1 = points.get(1)

    def at(n: int) -> float | None:
        if n in points and not (fitted and n >= 2 and len(pts) > 1):
            return float(points[n])
        if t1 is None and not pts:
            return None
        floor = t1 if t1 is not None else 0.0
        if not pts:
            return t1 * (1 + PRIOR_SLOPE * (n - 1))
        if len(pts) == 1:
            k0, v0 = pts[0]
            return max(floor, v0 + PRIOR_SLOPE * (t1 if t1 is not None else v0 / k0) * (n - k0))
        mean_n = sum(k for k, _ in pts) / len(pts)
        mean_t = sum(t for _, t in pts) / len(pts)
        slope = sum((k - mean_n) * (t - mean_t) for k, t in pts) / sum((k - mean_n) ** 2 for k, _ in pts)
        return max(floor, mean_t + max(slope, 0.0) * (n - mean_n))

    return at


class VerifyTimes:
    """The verify forward's measured times by size (positions n), as one tree drafter saw them: the last 32 per
    size, and t(n) ÷ t(cheapest) from their medians (verify_curve's line between sizes; PRIOR_SLOPE before any)."""

    KEEP = 32

    def __init__(self):
        self.times: dict[int, list[float]] = {}

    def observe(self, rows: int, verify_s: float) -> None:
        if verify_s and verify_s > 0 and rows:
            kept = self.times.setdefault(rows, [])
            kept.append(verify_s)
            del kept[: -self.KEEP]

    def measured(self) -> list[int]:
        return sorted(k for k, v in self.times.items() if v)

    def curve(self) -> "callable":
        """n -> t(n) ÷ t(1). Before a plain step is timed, t(1) is the smallest size's time less the prior's slope
        (never the smallest size's own: sizes below it would look free). Build it once per proposal."""
        points = {k: statistics.median(v) for k, v in self.times.items() if v}
        if not points:
            return lambda n: 1.0 + PRIOR_SLOPE * (n - 1)
        if 1 not in points:
            k0 = min(points)
            points[1] = points[k0] / (1 + PRIOR_SLOPE * (k0 - 1))
        base = points[1]
        return verify_curve({k: v / base for k, v in points.items()})


def grow_tree(parents: list, scores: list, t, chain: bool = False, budget: int = 10**9) -> list[int]:
    """The nodes of a candidate tree worth verifying on this host, parents first: best first by score (the chance
    a node's path is accepted) among the children of nodes taken, while the next node still pays: with
    E = 1 + Σ scores taken (tokens expected per forward), a node of score s is added when
    (E + s) ÷ t(k + 2) > E ÷ t(k + 1), t(n) the verify forward over n positions (VerifyTimes.curve). Where
    t(9) ≈ t(1) a 9-node tree is free; where t(9) ≈ 1.8·t(1) only likely nodes pay. chain: one child per depth."""
    children: dict[int, list[int]] = {}
    for i, par in enumerate(parents):
        children.setdefault(par, []).append(i)
    frontier, taken, expected = list(children.get(-1, [])), [], 1.0
    while frontier and len(taken) < budget:
        best = max(frontier, key=lambda i: (scores[i], -i))
        n = len(taken) + 1  # rows of the forward now (root + nodes)
        if (expected + scores[best]) * t(n) <= expected * t(n + 1):
            break
        taken.append(best)
        expected += scores[best]
        frontier = [] if chain else [i for i in frontier if i != best]
        frontier += children.get(best, [])
    return sorted(taken)


def batch_forward_curve(points: dict) -> "callable":
    """(rows B, tokens per row T) -> seconds of a batched verify forward, from measured {(B, T): seconds}: measured
    where seen, else verify_curve's least-squares line over the forward's total rows n = B·T (what its matmuls
    cost; one row alone runs another kernel, so n = 1 is a point of its own). None before any measurement."""
    by_n: dict[int, list] = {}
    for (b, t), s in points.items():
        if s is not None:
            by_n.setdefault(int(b) * int(t), []).append(float(s))
    line = verify_curve({n: median(v) for n, v in by_n.items()})

    def at(b: int, t: int) -> float | None:
        if (b, t) in points and points[(b, t)] is not None:
            return float(points[(b, t)])
        return line(int(b) * int(t)) if by_n else None

    return at


def batch_drain(alphas: list, found: list, remaining: list, gamma: int, forward_s, draft_s: float | None):
    """Seconds a batch needs to commit every row's remaining tokens at γ from now on, or None before the forward's
    cost is known: row r commits E_r = (1 − found_r) + found_r·E(α_r, γ) tokens per round (found_r: how often its
    drafter has a draft at all), so it needs remaining_r / E_r rounds; rows drop out as they finish, and each
    round costs the forward of the rows still running, B' × (1 + γ) tokens (+ drafting when γ > 0). The γ that
    drains the batch soonest commits the most tokens per second over the rest of the run (its goodput): a row
    that is ahead finishing sooner saves nothing while a slower row keeps the batch going."""
    per_round = [(1.0 - f) + f * expected_tokens(a, gamma) for a, f in zip(alphas, found)]
    rounds = sorted(max(float(n), 0.0) / e for n, e in zip(remaining, per_round))
    total, before, rows = 0.0, 0.0, len(rounds)
    for k, until in enumerate(rounds):
        t = forward_s(rows - k, 1 + int(gamma))
        if t is None:
            return None
        total += (until - before) * (t + (float(draft_s or 0.0) if gamma else 0.0))
        before = until
    return total


def shrunk_alpha(accepted: float, rejections: float, prior: float, weight: float) -> float:
    """A row's α pulled toward `prior` (the batch's pooled α) by `weight` pseudo-tests: its own counts dominate once
    it has many more tested drafts than that (empirical Bayes; a row with none is the prior)."""
    return (float(accepted) + weight * prior) / (float(accepted) + float(rejections) + weight)


def median(values) -> float | None:
    """Median of the values that are not None; None when there are none."""
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def spread(values) -> float | None:
    """Relative interquartile range (p75 − p25) / median of a sample; None below MIN_SAMPLES."""
    values = sorted(float(v) for v in values)
    if len(values) < MIN_SAMPLES:
        return None
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    mid = statistics.median(values)
    return (q3 - q1) / mid if mid > 0 else None


def drift(values) -> float | None:
    """How far the median of the second half of a time series moved from the first half's (relative)."""
    values = [float(v) for v in values]
    if len(values) < 2 * MIN_SAMPLES:
        return None
    half = len(values) // 2
    a, b = statistics.median(values[:half]), statistics.median(values[half:])
    return abs(b - a) / min(a, b) if min(a, b) > 0 else None


def costs(rounds: list, step_s: float | None, step_source: str, ar_step_times: list | None = None) -> dict:
    """c, v(n) and their spreads from a run's timed rounds [(γ, draft_s, round_s), ...] in units of step_s.

    round_s is the whole round; the verify cost of a round is round_s − draft_s. Returns the fields of
    the summary that belong to the cost model, with `timing_flags` naming anything that cannot be right.
    """
    out = {
        "target_step_s": step_s,
        "step_source": step_source,
        "c": None,
        "v": None,
        "v_n": None,
        "v_points": {},
        "c_spread": None,
        "v_spread": None,
        "step_spread": spread(ar_step_times or []),
        "timing_flags": [],
    }
    flags = out["timing_flags"]
    if not step_s or step_s <= 0 or not math.isfinite(step_s):
        return out
    drafted = sum(g for g, _, _ in rounds)
    if drafted:
        per_token = [d / g / step_s for g, d, _ in rounds if g]
        out["c"] = sum(d for g, d, _ in rounds if g) / drafted / step_s
        out["c_spread"] = spread(per_token)
    by_n: dict[int, list] = {}
    for g, d, total in rounds:
        by_n.setdefault(g + 1, []).append(max(total - d, 0.0) / step_s)
    out["v_points"] = {n: median(vs) for n, vs in sorted(by_n.items()) if n >= 2}
    gammas = [g for g, _, _ in rounds if g]
    common = statistics.mode(gammas) + 1 if gammas else 0  # the v the summary quotes: the most frequent size
    if gammas:
        curve = verify_curve({1: 1.0, **out["v_points"]})
        out["v"] = curve(common)
        out["v_n"] = common  # the verify size v is quoted at
        out["v_spread"] = spread(by_n.get(common, []))
    if out["c"] is not None and out["c"] < 0:
        flags.append(f"draft cost c = {out['c']:.3f} < 0 is impossible")
    for n, v in out["v_points"].items():
        if v < 0.9:
            flags.append(
                f"verifying {n} tokens measured at v = {v:.2f} target steps: less than one step is impossible"
            )
        elif v > 1.5 * n + 1:
            flags.append(f"verifying {n} tokens measured at v = {v:.1f} target steps: far above {n}")
    for name, value in (("target step", out["step_spread"]), (f"verify of {common} tokens", out["v_spread"])):
        if value is not None and value > SPREAD_LIMIT:
            flags.append(f"{name} times varied by {value:.0%} of their median (interquartile range)")
    moved = drift(ar_step_times or [])
    if moved is not None and moved > DRIFT_LIMIT:
        flags.append(f"the target step time moved {moved:.0%} during the run")
    for n, vs in sorted(by_n.items()):
        moved = drift(vs) if n >= 2 else None
        if moved is not None and moved > DRIFT_LIMIT:
            flags.append(f"the verify time of {n} tokens moved {moved:.0%} during the run")
            break
    return out


def prediction(alpha_: float | None, gammas: list, c: float | None, v_points: dict) -> dict:
    """Model tokens per target forward and predicted speedup for rounds that drafted gammas[r] tokens:
    Σ_r E(α, γ_r) tokens over Σ_r (γ_r·c + v(γ_r + 1)) target steps (a plain round, γ = 0, is 1 token for 1
    step). round_gammas: [[γ, rounds], ...], the histogram the sums run over (what the page prints)."""
    hist = [[g, n] for g, n in sorted(collections.Counter(gammas).items())]
    if alpha_ is None or c is None or not gammas:
        return {
            "expected_tokens": None,
            "predicted_speedup": None,
            "model_tokens": None,
            "model_steps": None,
            "round_gammas": hist,
        }
    curve = verify_curve({1: 1.0, **v_points})
    tokens = sum(expected_tokens(alpha_, g) for g in gammas)
    cost = sum(g * c + curve(g + 1) for g in gammas)
    # pooled over runs: Σ tokens / Σ steps
    return {
        "expected_tokens": tokens / len(gammas),
        "predicted_speedup": tokens / cost if cost > 0 else None,
        "model_tokens": tokens,
        "model_steps": cost,
        "round_gammas": hist,
    }


def curve(alpha_: float, c: float, v_points: dict, max_gamma: int) -> list:
    """[(γ, E, predicted speedup)] for a fixed γ = 1..max_gamma, v(γ+1) from the measured points."""
    at = verify_curve({1: 1.0, **v_points})
    return [
        (g, expected_tokens(alpha_, g), predicted_speedup(alpha_, g, c, at(g + 1)))
        for g in range(1, max_gamma + 1)
    ]


def contention(*finished_summaries) -> list:
    """Flags a race whose lanes computed while other processes wanted more CPU than the race left free,
    for more than CONTENTION_LIMIT of a lane's compute (measured from the OS: engine/runtime/loadwatch.py)."""
    shares = [s.get("contended_share") for s in finished_summaries if isinstance(s, dict)]
    shares = [x for x in shares if isinstance(x, (int, float)) and not isinstance(x, bool)]
    if shares and max(shares) > CONTENTION_LIMIT:
        return [
            f"other processes wanted more CPU than the race left free for {max(shares):.0%} of a lane's compute"
        ]
    return []


def compare_lanes(spec_step_s: float | None, ar_step_s: float | None) -> list:
    """Flags when the speculative lane's own step estimate and the AR lane's measured step disagree."""
    if not spec_step_s or not ar_step_s:
        return []
    ratio = spec_step_s / ar_step_s
    if not 1 - DRIFT_LIMIT <= ratio <= 1 + DRIFT_LIMIT:
        return [f"the two lanes measured target steps {ratio:.2f}× apart: one was slowed by an outside load"]
    return []


# The roofline: the least a forward can cost on this machine. engine/runtime/roofline.py measures the machine
# (read bandwidth, matmul throughput) and counts the forward's bytes and FLOPs; a run records both in
# RunStarted.host, and everything below works on that plain dict:
#     memory floor(n)  = (weight bytes + (context + n) · KV bytes per position) / bandwidth
#     compute floor(n) = n · (FLOPs per token + (context + n) · attention FLOPs per position) / throughput
#     ridge n*         = the n where they meet; bandwidth share of a step = memory floor(1) / measured t(1)
ROOF_FIELDS = (
    "bandwidth",
    "flops",
    "weight_bytes",
    "flops_per_token",
    "kv_bytes_per_position",
    "attn_flops_per_position",
)


def roof(host) -> dict | None:
    """The roofline numbers of a host record (RunStarted.host) when every one is a positive finite number."""
    if not isinstance(host, dict):
        return None
    values = {k: host.get(k) for k in ROOF_FIELDS}
    ok = all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
        for k, v in values.items()
        if k != "attn_flops_per_position"
    )
    attn = values["attn_flops_per_position"]
    if not ok or not (isinstance(attn, (int, float)) and not isinstance(attn, bool) and attn >= 0):
        return None
    return {k: float(v) for k, v in values.items()}


def floors(n: float, context: float, r: dict) -> tuple[float, float]:
    """(memory floor, compute floor) in seconds of a forward over n new tokens after `context` cached ones."""
    memory = (r["weight_bytes"] + (context + n) * r["kv_bytes_per_position"]) / r["bandwidth"]
    compute = n * (r["flops_per_token"] + (context + n) * r["attn_flops_per_position"]) / r["flops"]
    return memory, compute


def ridge(context: float, r: dict) -> float:
    """n* where the compute floor reaches the memory floor (the KV terms at this context included)."""
    lo, hi = 0.0, 1.0
    while floors(hi, context, r)[1] < floors(hi, context, r)[0]:
        lo, hi = hi, hi * 2
        if hi > 1e7:
            return float("inf")
    for _ in range(60):  # the compute floor grows with n faster than the memory floor: bisect the crossing
        mid = (lo + hi) / 2
        memory, compute = floors(mid, context, r)
        lo, hi = (mid, hi) if compute < memory else (lo, mid)
    return (lo + hi) / 2


def gap(measured_s: float, n: float, context: float, r: dict) -> float:
    """Measured time over the roofline, max(memory, compute floor): 1 is the roofline itself."""
    return measured_s / max(floors(n, context, r))


def bandwidth_share(step_s: float | None, context: float, host) -> dict | None:
    """How close a one-token step came to this machine's bandwidth bound: the bytes it must read, the bound
    (bandwidth ÷ bytes, in tokens/s) and the share memory floor(1) / step_s. None without a step or a roofline."""
    r = roof(host)
    if r is None or not step_s or step_s <= 0:
        return None
    read = r["weight_bytes"] + (context + 1) * r["kv_bytes_per_position"]
    floor = read / r["bandwidth"]
    return {
        "read_bytes": read,
        "bandwidth": r["bandwidth"],
        "floor_s": floor,
        "bound_tokens_per_s": 1 / floor,
        "step_s": float(step_s),
        "share": floor / step_s,
        "context": float(context),
    }
