"""The readers of vLLM's, SGLang's, llama.cpp server's and TensorRT-LLM's reports (Prometheus text and JSON
responses), each into one MetricsRun, and `read_metrics`, which detects the kind. Plain Python, no torch.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

from . import formats
from .checks import finish, first_count, get, histogram, number, shown, tails, whole
from .prometheus import read_prometheus_runs
from .run import MAX_METRICS_BYTES, MAX_REQUESTS, MAX_STEPS, PROM_PREFIX, READERS, MetricsRun


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
    drafted = first_count(meta, where, SGLANG_PROPOSED)
    older = accepted is None and not hist
    if older and drafted is not None:
        raise ValueError(f"{where}{SGLANG_ACCEPTED[0]} is missing beside {SGLANG_PROPOSED[0]}")
    run = MetricsRun(
        kind="sglang",
        accepted=accepted if accepted is not None or older else sum(j * n for j, n in enumerate(hist)),
        drafted=drafted,
        steps=steps,
        tokens=tokens,
        histogram=hist,
        per_position=tails(hist, len(hist) - 1) if hist else (),
        draft_len=len(hist) - 1 if hist else None,
        reported=reported(where, meta, {"tau": "spec_accept_length", "rate": "spec_accept_rate"}),
        notes=(SGLANG_OLDER,) if older else () if drafted is not None else (SGLANG_NO_PROPOSED,),
    )
    return finish(where, run)


SGLANG_OLDER = (
    "an older SGLang meta_info: spec_verify_ct and completion_tokens only, so τ is SGLang's own, completion_tokens "
    "÷ spec_verify_ct; it counts no accepted or proposed drafts, so no rate and no per-position figures"
)
SGLANG_NO_PROPOSED = (
    "this meta_info has no proposed-draft count (spec_num_proposed_drafts or an older name): the rate is shown "
    "as SGLang reported it, not from counts"
)


def read_llamacpp_timings(data) -> MetricsRun:
    """A llama-server response (or its timings alone)."""
    where = "llama.cpp timings."
    data = an_object("llama.cpp response", data)
    timings = an_object(where, data["timings"]) if "timings" in data else data
    tokens = whole(where, "predicted_n", get(timings, where, "predicted_n"))
    if "draft_n" not in timings:  # a request that drafted nothing
        run = MetricsRun(kind="llamacpp-timings", accepted=0, drafted=0, steps=tokens, tokens=tokens)
        return replace(finish(where, run), notes=(LLAMACPP_NO_DRAFT,))
    accepted = whole(where, "draft_n_accepted", get(timings, where, "draft_n_accepted"))
    drafted = whole(where, "draft_n", timings["draft_n"])
    if accepted > drafted:
        raise ValueError(f"{where}draft_n_accepted is {accepted}, more than draft_n = {drafted}")
    if tokens == 0:
        raise ValueError(f"{where}predicted_n is 0 beside draft_n = {drafted}: no token was emitted")
    notes = ()
    if accepted >= tokens:
        notes = (LLAMACPP_OVERCOUNT.format(accepted=accepted, tokens=tokens, kept=tokens - 1),)
        accepted = tokens - 1
    run = MetricsRun(
        kind="llamacpp-timings",
        accepted=accepted,
        drafted=drafted,
        steps=tokens - accepted,
        tokens=tokens,
        notes=notes,
    )
    return finish(where, run)


LLAMACPP_NO_DRAFT = (
    "no draft_n: llama-server writes draft_n and draft_n_accepted only for a request that drafted, so this one "
    "drafted nothing (or the server had no draft model or speculative type: --spec-type names it)"
)
LLAMACPP_OVERCOUNT = (
    "draft_n_accepted = {accepted} is more than the {tokens} tokens emitted: llama-server adds a round's accepted "
    "drafts (n_draft_accepted += n_accepted) before its per-token stop check, so drafts accepted past a stop are "
    "counted; taken as {kept}, predicted_n − 1 (the first token is the prompt's forward's, never a draft)"
)


def trt_spec(entry, where: str) -> dict | None:
    """The speculative_decoding object of one TensorRT-LLM request, wherever the response put it; None where the
    request's perf metrics have none (TensorRT-LLM writes it only for a request that drafted)."""
    entry = an_object(where, entry)
    for outer in ("request_perf_metrics", "perf_metrics"):
        if outer in entry:
            metrics = an_object(f"{where}{outer}", entry[outer])
            if metrics.get("speculative_decoding") is None:
                return None
            return an_object(f"{where}{outer}.speculative_decoding", metrics["speculative_decoding"])
    return an_object(f"{where}speculative_decoding", entry.get("speculative_decoding", entry))


TRT_NOTHING = (
    "no speculative_decoding block: TensorRT-LLM writes it only for a request that drafted, so this one is "
    "counted as drafting nothing"
)


def trt_nothing() -> MetricsRun:
    return MetricsRun(kind="trtllm", accepted=0, drafted=0, steps=None, notes=(TRT_NOTHING,))


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
        spec = trt_spec(data, "TensorRT-LLM ")
        return (
            read_trtllm_one(spec, "TensorRT-LLM speculative_decoding.") if spec is not None else trt_nothing()
        )
    if not data or len(data) > MAX_REQUESTS:
        raise ValueError(
            f"TensorRT-LLM /perf_metrics must list 1 to {MAX_REQUESTS:,} requests, got {len(data):,}"
        )
    specs = [trt_spec(e, f"TensorRT-LLM [{i}].") for i, e in enumerate(data)]
    runs = [read_trtllm_one(s, f"TensorRT-LLM [{i}].") for i, s in enumerate(specs) if s is not None]
    idle = len(specs) - len(runs)
    steps = [r.steps for r in runs]
    notes = (f"{len(specs)} requests pooled: their counts summed",)
    if idle:
        notes += (
            f"{idle} of them had no speculative_decoding block (TensorRT-LLM writes it only for a request "
            "that drafted): counted as drafting nothing",
        )
    run = MetricsRun(
        kind="trtllm",
        accepted=sum(r.accepted for r in runs),
        drafted=sum(r.drafted for r in runs),
        steps=sum(steps) if None not in steps and runs else None,
        notes=notes,
    )
    return finish("TensorRT-LLM /perf_metrics: ", run)


PARSERS = {
    "vllm-request": read_vllm_request,
    "sglang": read_sglang,
    "llamacpp-timings": read_llamacpp_timings,
    "trtllm": read_trtllm,
}
JSON_KINDS = tuple(PARSERS)
PROMETHEUS_KINDS = tuple(PROM_PREFIX)  # vllm-prometheus, vllm-older, llamacpp-prometheus
UNRECOGNISED = (
    "metrics not recognised: paste vLLM's or llama.cpp's /metrics text (vllm:spec_decode_*, llamacpp:spec_decode_*), "
    "vLLM's LLM.get_metrics() printed, or a JSON response (or its data: stream) with metrics.speculative_decoding "
    "(vLLM), meta_info (SGLang), timings (llama.cpp server) or request_perf_metrics.speculative_decoding "
    "(TensorRT-LLM); or choose the kind"
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


def recognised(data) -> bool:
    try:
        json_kind(data)
    except ValueError:
        return False
    return True


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


def json_payload(text: str, kind: str, where: str) -> tuple:
    """A JSON report, out of its stream (the last data: chunk that carries one) and its envelopes: (payload,
    notes)."""
    fits = recognised if kind == "auto" else lambda d: recognised(d) and json_kind(d) == kind
    if formats.is_sse(text):
        chunks = [formats.unwrap(c, fits) for c in formats.sse_chunks(text, f"{where}: ")]
        carrying = [(c, notes) for c, notes in chunks if fits(c)]
        payload, notes = carrying[-1] if carrying else chunks[-1]
        return payload, (formats.SSE_NOTE, *notes)
    return formats.unwrap(load_json(text, where), fits)


def read_runs(text: str, kind: str = "auto") -> list:
    """A report as its runs: one per model a /metrics text holds (each a window where several scrapes are pasted),
    one for a JSON response. kind: a READERS key, or "auto" to detect it. A ValueError names what does not parse."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_METRICS_BYTES:
        raise ValueError(
            f"metrics are {size / 2**10:,.0f} KiB; the limit is {MAX_METRICS_BYTES / 2**10:,.0f} KiB"
        )
    if kind != "auto" and kind not in READERS:
        raise ValueError(f"metrics kind must be auto or one of {', '.join(READERS)}, got {shown(kind)}")
    notes = ()
    if kind in ("auto", "vllm-prometheus", "vllm-older") and formats.is_objects(text):
        text, notes = formats.objects_text(text, "vLLM get_metrics(): "), (formats.OBJECTS_NOTE,)
        kind = "vllm-prometheus" if kind == "auto" else kind
    is_json = formats.is_sse(text) or (text.lstrip()[:1] in ("{", "[") and text.strip() != "")
    if kind in PROMETHEUS_KINDS or (kind == "auto" and not is_json):
        runs = read_prometheus_runs(text_kind(text) if kind == "auto" else kind, text)
    else:
        payload, wrapped = json_payload(text, kind, READERS[kind].engine if kind != "auto" else "metrics")
        runs = [PARSERS[json_kind(payload) if kind == "auto" else kind](payload)]
        notes += wrapped
    return [replace(r, notes=notes + r.notes) for r in runs] if notes else runs


def pick(runs: list, model: str | None = None) -> MetricsRun:
    """The run of the model named (its label value, or its labels as listed); the first where none is named, the
    others listed in a note."""
    if model:
        found = [r for r in runs if r.model and (r.model == model or f'="{model}"' in r.model)]
        if not found:
            listed = "; ".join(r.model or "(no labels)" for r in runs)
            raise ValueError(f"no model {shown(model)} in this report; it holds: {shown(listed)[:300]}")
        return found[0]
    run = runs[0]
    if len(runs) == 1:
        return run
    listed = "; ".join(r.model or "(no labels)" for r in runs)
    note = (
        f"this report holds {len(runs)} models, read apart (never pooled): {listed}; shown: the first "
        "(choose another with --model, or Model on the page)"
    )
    return replace(run, notes=(note, *run.notes))


def read_metrics(text: str, kind: str = "auto", model: str | None = None) -> MetricsRun:
    """A report (Prometheus text, get_metrics() printed, or a JSON response) as one MetricsRun: the model named,
    or the first of several (the others listed in a note); kind: a READERS key, or "auto" to detect it."""
    return pick(read_runs(text, kind), model)
