"""The readers of vLLM's, SGLang's, llama.cpp server's and TensorRT-LLM's reports (Prometheus text and JSON
responses), each into one MetricsRun, and `read_metrics`, which detects the kind. Plain Python, no torch.
"""

from __future__ import annotations

import json
import re

from .checks import finish, first_count, get, histogram, number, shown, tails, whole
from .run import (
    MAX_LINES,
    MAX_METRICS_BYTES,
    MAX_POSITIONS,
    MAX_REQUESTS,
    MAX_STEPS,
    PROM_PREFIX,
    READERS,
    MetricsRun,
)

# -- Prometheus text (vLLM's and llama.cpp's /metrics) ------------------------------------------------------------
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?\s*$")
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')


def labels_of(text: str, where: str, line: int) -> tuple:
    """A sample's labels as a sorted tuple of (name, value)."""
    out, at = [], 0
    while at < len(text.strip()):
        m = _LABEL.match(text, at)
        if not m:
            raise ValueError(f'{where}line {line}: labels not of the form name="value": {shown(text)}')
        out.append((m[1], m[2]))
        at = m.end()
    return tuple(sorted(out))


def prometheus_samples(text: str, prefix: str, where: str) -> dict:
    """The spec-decode samples of a Prometheus text exposition: {family (no _total): {labels: value}}; every other
    line (other metrics, # HELP and # TYPE, _created samples) is skipped."""
    lines = text.splitlines()
    if len(lines) > MAX_LINES:
        raise ValueError(f"{where}the text has {len(lines):,} lines; at most {MAX_LINES:,} are read")
    out: dict = {}
    for number_, line in enumerate(lines, 1):
        line = line.strip()
        if not line.startswith(prefix + "spec_decode_"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise ValueError(f"{where}line {number_} is not a Prometheus sample: {shown(line)}")
        name, labels, value = m[1], labels_of(m[2] or "", where, number_), m[3]
        if name.endswith("_created"):
            continue
        series = out.setdefault(name.removesuffix("_total"), {})
        if labels in series:
            raise ValueError(f"{where}line {number_} repeats a series of {name}")
        try:
            series[labels] = float(value)
        except ValueError:
            raise ValueError(f"{where}{name} must be a number, got {shown(value)}") from None
    return out


def summed(samples: dict, name: str, where: str) -> tuple[int, tuple]:
    """A counter summed over its series (one per engine and model), and a note when there was more than one."""
    series = samples.get(name)
    if not series:
        raise ValueError(f"{where}{name} is missing")
    total = sum(whole(where, name, v) for v in series.values())
    if len(series) == 1:
        return total, ()
    differ = sorted({k for labels in series for k, _ in labels if len({dict(s).get(k) for s in series}) > 1})
    return total, (f"{name}: summed over {len(series)} series ({', '.join(differ) or 'labels'} differ)",)


def by_position(samples: dict, name: str, where: str) -> tuple:
    """Per-position counts 0..k−1 summed over series; () when the counter is absent (an older engine)."""
    counts: dict = {}
    for labels, value in samples.get(name, {}).items():
        pos = dict(labels).get("position")
        if pos is None:
            raise ValueError(f"{where}{name} has a series without a position label")
        if not pos.isdigit() or int(pos) >= MAX_POSITIONS:
            raise ValueError(
                f"{where}{name} position must be a whole number from 0 to {MAX_POSITIONS - 1}, got {shown(pos)}"
            )
        counts[int(pos)] = counts.get(int(pos), 0) + whole(where, f'{name}{{position="{pos}"}}', value)
    missing = [i for i in range(len(counts)) if i not in counts]
    if missing:
        raise ValueError(f"{where}{name} has no position {missing[0]} (positions 0..{max(counts)} expected)")
    return tuple(counts[i] for i in range(len(counts)))


def read_prometheus(kind: str, text: str) -> MetricsRun:
    """vLLM's or llama.cpp's /metrics: the counters summed over their series, per position where exported."""
    reader = READERS[kind]
    where, names = f"{reader.engine} metrics: ", reader.names
    samples = prometheus_samples(text, PROM_PREFIX[kind], where)
    if not samples:
        raise ValueError(f"{where}no {names['steps']} counters: was speculative decoding on?")
    steps, n1 = summed(samples, names["steps"], where)
    drafted, n2 = summed(samples, names["drafted"], where)
    accepted, n3 = summed(samples, names["accepted"], where)
    per_position = by_position(samples, names["per_position"], where)
    run = MetricsRun(
        kind=kind,
        accepted=accepted,
        drafted=drafted,
        steps=steps,
        per_position=per_position,
        draft_len=len(per_position) or None,
        notes=n1 + n2 + n3,
    )
    return finish(where, run)


# -- JSON responses ------------------------------------------------------------------------------------------------
def an_object(where: str, value) -> dict:
    if not isinstance(value, dict):
        raise ValueError(f"{where.rstrip('.: ')} must be a JSON object, got {type(value).__name__}")
    return value


def reported(where: str, obj: dict, fields: dict) -> dict:
    """The engine's own figures, where present: {"tau": …, "rate": …} from the fields that hold them."""
    return {key: number(where, name, obj[name]) for key, name in fields.items() if obj.get(name) is not None}


def rejections_of_steps(where: str, spec: dict, steps: int, accepted: int, drafted: int) -> int | None:
    """vLLM `detailed`: per_step_accepted / per_step_drafted, one entry per step; a step that accepted fewer than
    it drafted saw a rejection. None without them."""
    if "per_step_accepted" not in spec or "per_step_drafted" not in spec:
        return None
    arrays = []
    for name in ("per_step_accepted", "per_step_drafted"):
        values = spec[name]
        if not isinstance(values, list) or len(values) > MAX_STEPS:
            raise ValueError(f"{where}{name} must be a list of at most {MAX_STEPS:,} counts")
        if len(values) != steps:
            raise ValueError(f"{where}{name} has {len(values)} entries, num_spec_steps is {steps}")
        arrays.append([whole(where, f"{name}[{i}]", v) for i, v in enumerate(values)])
    acc, dra = arrays
    if sum(acc) != accepted or sum(dra) != drafted or any(a > d for a, d in zip(acc, dra)):
        raise ValueError(
            f"{where}per_step_accepted and per_step_drafted must add up to num_accepted_draft_tokens and "
            "num_draft_tokens, with no step accepting more than it drafted"
        )
    return sum(a < d for a, d in zip(acc, dra))


def read_vllm_request(data) -> MetricsRun:
    """A vLLM response (or its metrics.speculative_decoding object alone)."""
    where = "vLLM metrics.speculative_decoding."
    data = an_object("vLLM response", data)
    if "metrics" in data:
        metrics = data["metrics"]
        spec = an_object("vLLM response.metrics", metrics).get("speculative_decoding") if metrics else None
    else:
        spec = data if "num_spec_steps" in data else None
    if spec is None:
        raise ValueError(
            "vLLM response: metrics.speculative_decoding is missing or null: start vllm serve with "
            "--per-request-spec-decode-metrics summary (or detailed); it is null for n > 1"
        )
    spec = an_object(where, spec)
    steps = whole(where, "num_spec_steps", get(spec, where, "num_spec_steps"))
    accepted = whole(where, "num_accepted_draft_tokens", get(spec, where, "num_accepted_draft_tokens"))
    drafted = whole(where, "num_draft_tokens", get(spec, where, "num_draft_tokens"))
    k = whole(where, "num_spec_tokens", spec["num_spec_tokens"]) if "num_spec_tokens" in spec else None
    hist = histogram(where, "acceptance_histogram", spec.get("acceptance_histogram", []))
    if k is not None and len(hist) > k + 1:
        raise ValueError(
            f"{where}acceptance_histogram has {len(hist)} buckets, num_spec_tokens + 1 = {k + 1}"
        )
    run = MetricsRun(
        kind="vllm-request",
        accepted=accepted,
        drafted=drafted,
        steps=steps,
        histogram=hist,
        per_position=tails(hist, k if k is not None else max(len(hist) - 1, 0)) if hist else (),
        draft_len=k,
        rejections=rejections_of_steps(where, spec, steps, accepted, drafted),
        reported=reported(where, spec, {"tau": "mean_acceptance_length", "rate": "draft_acceptance_rate"}),
    )
    return finish(where, run)


SGLANG_ACCEPTED = ("spec_num_correct_drafts", "spec_accepted_drafts", "spec_accept_token_num")
SGLANG_PROPOSED = ("spec_num_proposed_drafts", "spec_proposed_drafts", "spec_draft_token_num")
SGLANG_HISTOGRAM = ("spec_correct_drafts_histogram", "spec_accept_histogram")


def read_sglang(data) -> MetricsRun:
    """An SGLang /generate response (or its meta_info alone)."""
    where = "sglang meta_info."
    data = an_object("sglang response", data)
    meta = an_object(where, data["meta_info"]) if "meta_info" in data else data
    steps = whole(where, "spec_verify_ct", get(meta, where, "spec_verify_ct"))
    tokens = whole(where, "completion_tokens", get(meta, where, "completion_tokens"))
    hists = [histogram(where, name, meta[name]) for name in SGLANG_HISTOGRAM if name in meta]
    if len(hists) == 2 and hists[0] != hists[1]:
        raise ValueError(
            f"{where}spec_accept_histogram differs from spec_correct_drafts_histogram (its alias)"
        )
    hist = hists[0] if hists else ()
    accepted = first_count(meta, where, SGLANG_ACCEPTED)
    if accepted is None and not hist:
        raise ValueError(
            f"{where}{SGLANG_ACCEPTED[0]} is missing (and no {SGLANG_HISTOGRAM[1]} to count it from)"
        )
    run = MetricsRun(
        kind="sglang",
        accepted=accepted if accepted is not None else sum(j * n for j, n in enumerate(hist)),
        drafted=first_count(meta, where, SGLANG_PROPOSED),
        steps=steps,
        tokens=tokens,
        histogram=hist,
        per_position=tails(hist, len(hist) - 1) if hist else (),
        draft_len=len(hist) - 1 if hist else None,
        reported=reported(where, meta, {"tau": "spec_accept_length", "rate": "spec_accept_rate"}),
        notes=() if first_count(meta, where, SGLANG_PROPOSED) is not None else (SGLANG_NO_PROPOSED,),
    )
    return finish(where, run)


SGLANG_NO_PROPOSED = (
    "this meta_info has no proposed-draft count (spec_num_proposed_drafts or an older name): the rate is shown "
    "as SGLang reported it, not from counts"
)


def read_llamacpp_timings(data) -> MetricsRun:
    """A llama-server response (or its timings alone)."""
    where = "llama.cpp timings."
    data = an_object("llama.cpp response", data)
    timings = an_object(where, data["timings"]) if "timings" in data else data
    if "draft_n" not in timings:
        raise ValueError(
            f"{where}draft_n is missing: llama-server writes draft_n and draft_n_accepted only for a request that "
            "drafted (start it with a draft model, or another speculative type)"
        )
    accepted = whole(where, "draft_n_accepted", get(timings, where, "draft_n_accepted"))
    tokens = whole(where, "predicted_n", get(timings, where, "predicted_n"))
    if accepted >= tokens:
        raise ValueError(f"{where}draft_n_accepted = {accepted} must be less than predicted_n = {tokens}")
    run = MetricsRun(
        kind="llamacpp-timings",
        accepted=accepted,
        drafted=whole(where, "draft_n", timings["draft_n"]),
        steps=tokens - accepted,
        tokens=tokens,
    )
    return finish(where, run)


def trt_spec(entry, where: str) -> dict:
    """The speculative_decoding object of one TensorRT-LLM request, wherever the response put it."""
    entry = an_object(where, entry)
    for outer in ("request_perf_metrics", "perf_metrics"):
        if outer in entry:
            metrics = an_object(f"{where}{outer}", entry[outer])
            if "speculative_decoding" not in metrics:
                raise ValueError(
                    f"{where}{outer}.speculative_decoding is missing: TensorRT-LLM writes it only for a request "
                    "that drafted (total_draft_tokens > 0)"
                )
            return an_object(f"{where}{outer}.speculative_decoding", metrics["speculative_decoding"])
    return an_object(f"{where}speculative_decoding", entry.get("speculative_decoding", entry))


def read_trtllm_one(spec: dict, where: str) -> MetricsRun:
    steps = whole(where, "num_spec_steps", spec["num_spec_steps"]) if "num_spec_steps" in spec else None
    k = whole(where, "num_spec_tokens", spec["num_spec_tokens"]) if "num_spec_tokens" in spec else None
    hist = (
        histogram(where, "acceptance_histogram", spec["acceptance_histogram"])
        if "acceptance_histogram" in spec
        else ()
    )
    run = MetricsRun(
        kind="trtllm",
        accepted=whole(where, "total_accepted_draft_tokens", get(spec, where, "total_accepted_draft_tokens")),
        drafted=whole(where, "total_draft_tokens", get(spec, where, "total_draft_tokens")),
        steps=steps,
        histogram=hist,
        per_position=tails(hist, k if k is not None else len(hist) - 1) if hist and steps else (),
        draft_len=k,
        reported=reported(where, spec, {"rate": "acceptance_rate"}),
    )
    return finish(where, run)


def read_trtllm(data) -> MetricsRun:
    """TensorRT-LLM: one request's metrics, or trtllm-serve's /perf_metrics list (its requests pooled)."""
    if not isinstance(data, list):
        return read_trtllm_one(trt_spec(data, "TensorRT-LLM "), "TensorRT-LLM speculative_decoding.")
    if not data or len(data) > MAX_REQUESTS:
        raise ValueError(
            f"TensorRT-LLM /perf_metrics must list 1 to {MAX_REQUESTS:,} requests, got {len(data):,}"
        )
    runs = [
        read_trtllm_one(trt_spec(e, f"TensorRT-LLM [{i}]."), f"TensorRT-LLM [{i}].")
        for i, e in enumerate(data)
    ]
    steps = [r.steps for r in runs]
    return MetricsRun(
        kind="trtllm",
        accepted=sum(r.accepted for r in runs),
        drafted=sum(r.drafted for r in runs),
        steps=sum(steps) if None not in steps else None,
        notes=(f"{len(runs)} requests pooled: their counts summed",),
    )


PARSERS = {
    "vllm-prometheus": lambda payload: read_prometheus("vllm-prometheus", payload),
    "llamacpp-prometheus": lambda payload: read_prometheus("llamacpp-prometheus", payload),
    "vllm-request": read_vllm_request,
    "sglang": read_sglang,
    "llamacpp-timings": read_llamacpp_timings,
    "trtllm": read_trtllm,
}
JSON_KINDS = ("vllm-request", "sglang", "llamacpp-timings", "trtllm")
UNRECOGNISED = (
    "metrics not recognised: paste vLLM's or llama.cpp's /metrics text (vllm:spec_decode_*, llamacpp:spec_decode_*) "
    "or a JSON response with metrics.speculative_decoding (vLLM), meta_info (SGLang), timings (llama.cpp server) or "
    "request_perf_metrics.speculative_decoding (TensorRT-LLM); or choose the kind"
)


def json_kind(data) -> str:
    """Which engine wrote a JSON response, by the fields only it writes."""
    if isinstance(data, list):
        return "trtllm"
    if not isinstance(data, dict):
        raise ValueError(UNRECOGNISED)
    keys = set(data)
    if "metrics" in keys or {"num_spec_steps", "num_accepted_draft_tokens"} <= keys:
        return "vllm-request"
    if keys & {"meta_info", "spec_verify_ct"}:
        return "sglang"
    if keys & {"timings", "draft_n"}:
        return "llamacpp-timings"
    if keys & {"request_perf_metrics", "perf_metrics", "speculative_decoding", "total_draft_tokens"}:
        return "trtllm"
    raise ValueError(UNRECOGNISED)


def text_kind(text: str) -> str:
    """Prometheus text: whose counters it holds."""
    for kind in ("vllm-prometheus", "llamacpp-prometheus"):
        prefix = PROM_PREFIX[kind]
        if re.search(rf"^\s*{re.escape(prefix)}", text, re.M):
            return kind
    raise ValueError(UNRECOGNISED)


def load_json(text: str, where: str):
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:  # bad JSON, an int of over 4300 digits, nesting too deep
        raise ValueError(f"{where}: not valid JSON ({str(e)[:80]})") from None


def read_metrics(text: str, kind: str = "auto") -> MetricsRun:
    """A report (Prometheus text or a JSON response) as one MetricsRun; kind: a READERS key, or "auto" to detect
    it. A ValueError names what does not parse."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_METRICS_BYTES:
        raise ValueError(
            f"metrics are {size / 2**10:,.0f} KiB; the limit is {MAX_METRICS_BYTES / 2**10:,.0f} KiB"
        )
    if kind != "auto" and kind not in READERS:
        raise ValueError(f"metrics kind must be auto or one of {', '.join(READERS)}, got {shown(kind)}")
    is_json = text.lstrip()[:1] in ("{", "[") and text.strip() != ""
    if kind == "auto":
        payload = load_json(text, "metrics") if is_json else text
        kind = json_kind(payload) if is_json else text_kind(text)
    elif kind in JSON_KINDS:
        payload = load_json(text, READERS[kind].engine)
    else:
        payload = text
    return PARSERS[kind](payload)
