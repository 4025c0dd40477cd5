"""The run's costs against this machine's roofline: an SVG of the measured t(n) beside the memory and compute
floors, the sentences that derive each floor from the numbers printed beside it, and the race's "share of
the bandwidth bound". Every figure comes from the engine's one cost model (engine.costmodel: floors, ridge,
bandwidth_share) applied to the machine the run recorded (RunStarted.host). Events -> HTML; no torch.
"""

from __future__ import annotations

import math

from engine import costmodel
from engine.figures import derive, fixed, parse

from .markup import esc

W, H, PAD_L, PAD_B, PAD_T, PAD_R = 420, 220, 44, 34, 10, 10
MAX_N = 64


def _ticks(top: float, count: int = 4) -> list[float]:
    """Round tick values 0..top (about `count` of them)."""
    raw = top / count
    if not (math.isfinite(raw) and raw > 0):
        return [0.0]
    e = math.floor(math.log10(raw))
    step = next(s * 10.0**k for k in (e, e + 1) for s in (1, 2, 5) if s * 10.0**k >= raw * (1 - 1e-12))
    return [i * step for i in range(int(top / step) + 1)]


def measured_points(summary: dict) -> list[tuple[int, float]]:
    """[(n, t(n) seconds)] of this run: t(1) the measured target step, t(n) = v(n)·t(1) for the verify sizes."""
    step = summary.get("target_step_s")
    if not isinstance(step, (int, float)) or isinstance(step, bool) or step <= 0:
        return []
    pts = {1: float(step)}
    for n, v in summary.get("v_points") or []:
        if (
            isinstance(n, int)
            and not isinstance(n, bool)
            and 1 < n <= MAX_N
            and isinstance(v, (int, float))
            and not isinstance(v, bool)
            and 0 <= v < 1e3
        ):
            pts[n] = float(v) * step
    return sorted(pts.items())


def roofline_chart(points: list, host, context: float, run_n: int) -> str:
    """SVG: measured t(n) (ms) as bars, "n separate steps" n·t(1) as a dashed line and, when the run recorded its
    machine, the memory floor, the compute floor and the ridge n*. Axis values on both axes."""
    if not points:
        return ""
    r = costmodel.roof(host)
    t1 = points[0][1]
    n_star = costmodel.ridge(context, r) if r else None
    # no ridge from a zero rate (a hand-made trace)
    n_star = n_star if n_star and math.isfinite(n_star) else None
    top_n = max(max(n for n, _ in points) + 1, 8, min(int(n_star * 1.25) + 1, MAX_N) if n_star else 0)
    top_ms = 1e3 * max(max(t for _, t in points), max(costmodel.floors(top_n, context, r)) if r else 0) * 1.1
    x = lambda n: PAD_L + (W - PAD_L - PAD_R) * n / top_n  # noqa: E731
    y = lambda ms: H - PAD_B - (H - PAD_B - PAD_T) * min(ms, top_ms) / top_ms  # noqa: E731
    parts = []
    for tick in _ticks(top_ms):
        parts.append(
            f'<line class="rf-grid" x1="{PAD_L}" y1="{y(tick):.1f}" x2="{W - PAD_R}" y2="{y(tick):.1f}"/>'
            f'<text class="rf-t" x="{PAD_L - 4}" y="{y(tick) + 3:.1f}" text-anchor="end">{tick:g}</text>'
        )
    for tick in _ticks(top_n, 6):
        if tick >= 1:
            parts.append(
                f'<text class="rf-t" x="{x(tick):.1f}" y="{H - PAD_B + 12}" text-anchor="middle">{tick:g}</text>'
            )
    n_end = min(top_n, top_ms / (t1 * 1e3))  # n·t(1) until it leaves the chart
    parts.append(
        f'<line class="rf-naive" x1="{x(0):.1f}" y1="{y(0):.1f}" x2="{x(n_end):.1f}" y2="{y(n_end * t1 * 1e3):.1f}">'
        "<title>n separate target steps: n·t(1)</title></line>"
    )
    if r:
        for name, i in (("memory", 0), ("compute", 1)):
            xs = [1 + k * (top_n - 1) / 40 for k in range(41)]
            d = " ".join(f"{x(n):.1f},{y(1e3 * costmodel.floors(n, context, r)[i]):.1f}" for n in xs)
            parts.append(f'<polyline class="rf-{name}" points="{d}"><title>{name} floor</title></polyline>')
        if n_star and n_star <= top_n:
            parts.append(
                f'<line class="rf-ridge" x1="{x(n_star):.1f}" y1="{PAD_T}" x2="{x(n_star):.1f}" '
                f'y2="{H - PAD_B}"/><text class="rf-t" x="{x(n_star) + 3:.1f}" y="{PAD_T + 9}">n* ≈ '
                f"{n_star:.0f}</text>"
            )
    _, (t1_text,) = derive(lambda a: a, [(t1 * 1e3, 1)], 1)
    for n, t in points:
        ms = t * 1e3
        gap = f", {costmodel.gap(t, n, context, r):.2f}× the roofline" if r else ""
        run = " rf-run" if n == run_n else ""
        # t(n) = v(n) · t(1): v printed with the digits that make the product the printed t(n)
        shown, (v_text,) = derive(lambda v: v * float(t1_text), [(t / t1, 2)], 1)
        parts.append(
            f'<rect class="rf-bar{run}" x="{x(n) - 4:.1f}" y="{y(ms):.1f}" width="8" height="{y(0) - y(ms):.1f}">'
            f"<title>t({n}) = {shown} ms = v({n}) {v_text} × t(1) {t1_text} ms{gap}</title></rect>"
        )
    parts.append(
        f'<text class="rf-t" x="{(W + PAD_L) / 2}" y="{H - 4}" text-anchor="middle">n tokens in one forward</text>'
        f'<text class="rf-t" x="4" y="{PAD_T + 2}" transform="rotate(90 4 {PAD_T + 2})">ms per forward</text>'
    )
    legend = (
        '<span class="rf-key rf-key-bar">measured t(n)</span>'
        + (
            f'<span class="rf-key rf-key-run">this run\'s verify size, n = {run_n}</span>'
            if any(n == run_n for n, _ in points)
            else ""
        )
        + '<span class="rf-key rf-key-naive">n separate '
        "steps</span>"
        + (
            '<span class="rf-key rf-key-memory">memory floor</span><span class="rf-key '
            'rf-key-compute">compute floor</span>'
            if r
            else ""
        )
    )
    return (
        f'<figure class="sv-roofline"><svg viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
        f'aria-label="measured forward time t(n) against this machine\'s roofline">{"".join(parts)}</svg>'
        f"<figcaption>{legend}</figcaption></figure>"
    )


def floor_terms(r: dict, context: float, n: int) -> dict:
    """The roofline's inputs as printed (weights GB, KV MB per position, GB/s, GFLOP and attention MFLOP per
    token, GFLOP/s, the context) and what they give, each printed so that it reproduces from them: the memory and
    compute floors (ms) at n = 1 and at n, and the ridge n*."""
    ctx = round(context)
    rr = lambda w, kv, bw, f, a, fl: {
        "weight_bytes": w * 1e9,
        "kv_bytes_per_position": kv * 1e6,  # noqa: E731
        "bandwidth": bw * 1e9,
        "flops_per_token": f * 1e9,
        "attn_flops_per_position": a * 1e6,
        "flops": fl * 1e9,
    }

    def figures(*x):
        at = lambda k: [1e3 * t for t in costmodel.floors(k, ctx, rr(*x))]  # noqa: E731
        return (*at(1), *at(n), costmodel.ridge(ctx, rr(*x)))

    inputs = [
        (r["weight_bytes"] / 1e9, 3),
        (r["kv_bytes_per_position"] / 1e6, 3),
        (r["bandwidth"] / 1e9, 1),
        (r["flops_per_token"] / 1e9, 3),
        (r["attn_flops_per_position"] / 1e6, 3),
        (r["flops"] / 1e9, 0),
    ]
    out, printed = derive(figures, inputs, (1, 1, 1, 1, 0))
    return dict(
        zip(("weights", "kv", "bandwidth", "flop", "attn", "flops"), printed),
        context=ctx,
        n=n,
        **dict(zip(("mem1", "comp1", "mem", "comp", "ridge"), out)),
    )


def measured_load(host: dict) -> str:
    """How busy the machine was while its rates were measured ("" when that was not recorded)."""
    cores = host.get("outside_cores")
    if not isinstance(cores, (int, float)):
        return ""
    if cores < costmodel.QUIET_CORES:
        return ", on a quiet machine"
    return f" while other processes kept {cores:.2f} cores busy: the rates may be low"


def best_take(best: float, now) -> str:
    """'that machine's best take: 58.2 GB/s', or, when this run read more (an older trace, whose best take was
    cached under more load), that this run's reading is above it."""
    if isinstance(now, (int, float)) and now > best:
        return f"above that machine's earlier best take, {fixed(best / 1e9, 1)} GB/s"
    return f"that machine's best take: {fixed(best / 1e9, 1)} GB/s"


def roofline_text(summary: dict, host, context: float, run_n: int) -> str:
    """The floors derived from the numbers beside them, per n as computed (the KV and attention terms grow with
    the context and n), this run's t(1) as a share of the bandwidth bound and t(n) of its most frequent verify
    size n against the roofline; the kernels the run used. "" without a recorded machine."""
    r = costmodel.roof(host)
    share = summary.get("bandwidth")
    if r is None or not isinstance(share, dict):
        return ""
    pts = dict(measured_points(summary))
    n = run_n if run_n in pts and run_n > 1 else None
    f = floor_terms(r, share["context"], n or 1)
    if None in (f["mem1"], f["comp1"], f["ridge"]):  # rates that admit no floors (a hand-made trace)
        return ""
    who = esc(host.get("cpu") or host.get("gpu") or "this machine")
    threads = host.get("threads")
    ctx = f["context"]
    where = f"{who}, {esc(threads)} thread{'s' if threads != 1 else ''}"
    when = f"measured {esc(host.get('measured', ''))}{measured_load(host)}"
    best = host.get("bandwidth_best")
    # a trace since the rate is read at each run's start keeps the host's best take beside it
    run_rate = isinstance(best, (int, float)) and not isinstance(best, bool)
    if run_rate:
        rates = (
            f"({where}): at this run's start a read-only pass over its largest weight matrix read "
            f"{f['bandwidth']} GB/s ({best_take(best, host.get('bandwidth'))}), and a large matmul runs "
            f"at {f['flops']} GFLOP/s (the best takes {when}). "
        )
    else:  # an older trace: the cached rate; before the floor used the read rate, a copy's (read + write counted)
        stream = (
            "a read-only stream reads"
            if "copy_bandwidth" in host
            else "a tensor copy moves (read + write counted)"
        )
        rates = f"({where}, {when}): {stream} {f['bandwidth']} GB/s and a large matmul runs at {f['flops']} GFLOP/s. "
    lines = [
        f"<b>The roofline of the machine this run ran on</b> {rates}"
        f"A forward over n new tokens after {ctx} cached ones reads the weights, "
        f"{f['weights']} GB, and the keys and values of {ctx} + n positions, {f['kv']} MB each: its <i>memory "
        f"floor</i> is ({f['weights']} GB + ({ctx} + n) · {f['kv']} MB) ÷ {f['bandwidth']} GB/s. It computes "
        f"{f['flop']} GFLOP per token plus {f['attn']} MFLOP per position it attends to: its <i>compute floor</i> "
        f"is n · ({f['flop']} GFLOP + ({ctx} + n) · {f['attn']} MFLOP) ÷ {f['flops']} GFLOP/s.",
        f"At n = 1 these are {f['mem1']} ms and {f['comp1']} ms"
        + (f"; at n = {n}, {f['mem']} ms and {f['comp']} ms" if n else "")
        + f". They meet at the ridge n* ≈ {f['ridge']}: below it, a forward over n tokens costs about one "
        "weight read.",
    ]
    fmt = format_sentence(r, host, share["context"])
    if fmt:
        lines.append(fmt)
    floor = parse(f["mem1"])
    pct, (step,) = derive(lambda t: 100 * floor / t, [(share["step_s"] * 1e3, 1)], 0)
    if floor > 0 and pct is not None:  # a floor or a step that prints 0 (a hand-made trace) has no share
        lines.append(
            f"This run's target step t(1) = {step} ms is {pct}% of the bandwidth bound (memory floor "
            f"{f['mem1']} ms ÷ step {step} ms; the bound is 1000 ÷ {f['mem1']} = {fixed(1e3 / floor, 1)} "
            "tok/s)."
        )
    if n:
        top = max(parse(f["mem"]), parse(f["comp"]))
        ratio, (tn,) = derive(lambda t: t / top, [(pts[n] * 1e3, 1)])
    if n and ratio is not None:
        lines.append(
            f"Verifying {n} positions in one forward took t({n}) = {tn} ms, {ratio}× the roofline "
            f"max({f['mem']}, {f['comp']}) ms: the rest is per-op overhead and kernels slower than the copy."
        )
    if share["share"] > 1.05:
        lines.append(
            "⚠ The step beat the bound its bandwidth gives: the memory was busier when that rate was read, at the "
            "run's start, than during the run."
            if run_rate
            else "⚠ The step beat the bound measured at load: the machine was busier then than now "
            "(<code>python -m engine roofline --refresh</code> measures it again)."
        )
    kernels = host.get("kernels") or {}
    if kernels:
        lines.append(
            "Kernels measured fastest on that machine and used by this run: "
            + kernel_sentence(kernels, run_n)
        )
    return "".join(f"<p>{line}</p>" for line in lines)


def fp32_roof(r: dict | None, host) -> dict | None:
    """Roofline r (costmodel.roof of a run's host record) of a run on a GGUF's blocks, with the bytes of the same
    weights de-quantized to fp32 in place of the blocks': what a step would read on fp32. None for an fp32 run, or
    without a roofline or the fp32 size."""
    fp32 = host.get("weight_bytes_fp32") if r is not None and host.get("weights") == "gguf" else None
    if not isinstance(fp32, (int, float)) or isinstance(fp32, bool) or not fp32 > 0:
        return None
    return {**r, "weight_bytes": float(fp32)}


def format_sentence(r: dict, host: dict, context: float) -> str:
    """What the weights' format changes (a run on a GGUF's blocks): the bytes a step reads beside the same
    weights de-quantized to fp32, and the memory floor and ridge those would give, each from the inputs printed
    ("" for fp32 weights, or a host record without the two sizes)."""
    fp32 = fp32_roof(r, host)
    if fp32 is None:
        return ""
    mine, other = floor_terms(r, context, 1), floor_terms(fp32, context, 1)
    if None in (mine["mem1"], other["mem1"], mine["ridge"], other["ridge"]):
        return ""
    return (
        f"The weights are the model file's own GGUF blocks (4- and 8-bit numbers with a scale per 32 weights), read "
        f"as they ship: {mine['weights']} GB a step, where the same weights de-quantized to fp32 are "
        f"{other['weights']} GB, whose memory floor at n = 1 would be ({other['weights']} GB + ({mine['context']} + 1) "
        f"· {other['kv']} MB) ÷ {other['bandwidth']} GB/s = {other['mem1']} ms instead of {mine['mem1']} ms, and the "
        f"ridge n* ≈ {other['ridge']} instead of {mine['ridge']}. Fewer bytes move the ridge down: on the blocks "
        "a forward over a few tokens is sooner bound by the CPU's work (each weight rebuilt from its block in "
        "registers before it is multiplied), so verifying n tokens costs more steps than on fp32 and speculation "
        "pays less per accepted token, though every step is faster (the compute floor here is the fp32 matmul "
        "rate's; <code>python -m engine roofline</code> also times the block kernels themselves). Every product is "
        "still the fp32 one (the weight is rebuilt exactly, the activations stay fp32), so speculation on the blocks "
        "is token-identical to AR; llama.cpp's prompt lookup on this same file is not, since its integer kernels "
        "round a batch's activations unlike one token's (<code>make peer</code> counts both: docs/benchmarks.md)."
    )


KERNEL_LABELS = {
    "native": "specviz's native kernel",
    "mkl": "MKL",
    "onednn": "oneDNN",
    "dequant": "de-quantize + matmul",
}


def kernel_sentence(kernels: dict, n: int) -> str:
    """'1 row: MKL for qkv, o, …; 5 rows: oneDNN for qkv, gate_up; MKL for o, down.' from the recorded plan
    (a row count uses the plan of the smallest measured count at or above it)."""
    parts = []
    for rows in sorted({1, max(n, 1)}):
        by_kernel: dict[str, list] = {}
        for name, plan in kernels.items():
            measured = sorted(int(k) for k in plan if k.isdigit())
            at = next((k for k in measured if k >= rows), measured[-1] if measured else None)
            if at is not None:
                by_kernel.setdefault(plan[str(at)], []).append(name)
        said = "; ".join(
            f"{KERNEL_LABELS.get(k, esc(k))} for {', '.join(map(esc, names))}"
            for k, names in sorted(by_kernel.items())
        )
        parts.append(f"{rows} row{'s' if rows != 1 else ''}: {said}")
    return "; ".join(parts) + "."


def bandwidth_line(summary: dict, host) -> str:
    """The race's line: what share of the bandwidth bound the AR lane's step reached ("" without a roofline)."""
    share = summary.get("bandwidth")
    if (
        costmodel.roof(host) is None
        or not isinstance(share, dict)
        or summary.get("step_source") != "the AR lane"
    ):
        return ""
    floor, (gb, bw) = derive(
        lambda g, b: 1e3 * g / b, [(share["read_bytes"] / 1e9, 3), (share["bandwidth"] / 1e9, 1)], 1
    )
    if floor is None or parse(floor) == 0:  # no floor to compare with (a hand-made trace)
        return ""
    pct, (step,) = derive(lambda t: 100 * parse(floor) / t, [(share["step_s"] * 1e3, 1)], 0)
    if pct is None:
        return ""
    return (
        f'<span class="race-roofline" data-share="{share["share"]:.3f}" title="The AR lane\'s median step against '
        f"this machine's memory floor: the bytes one forward reads ÷ the measured read bandwidth (Explain tab)\">"
        f"AR at {pct}% of the bandwidth bound (floor {gb} GB ÷ {bw} GB/s = {floor} ms ÷ step {step} ms)</span>"
    )
