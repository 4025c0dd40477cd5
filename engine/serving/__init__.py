"""What serving engines report about speculative decoding, read without a recorder: one `MetricsRun` per file,
its τ (mean tokens per verify step) and acceptance rate each as that engine defines them, the α its counts imply,
and the cost model's prediction for a visitor's γ and costs. Plain Python, no torch and no HTML.

Readers (`READERS`: each names the version and the document it follows; `read_metrics` detects the kind):
- `vllm-prometheus`: vLLM's /metrics text, the counters of vllm/v1/spec_decode/metrics.py `SpecDecodingProm`:
  vllm:spec_decode_num_drafts, _num_draft_tokens, _num_accepted_tokens, _num_accepted_tokens_per_pos{position}.
  A scrape writes them with `_total` (and `_created` samples, skipped); `LLM.get_metrics()` names them without.
  Every series of a counter (labels model_name, engine: one per data-parallel engine) is summed.
- `vllm-request`: a response's `metrics.speculative_decoding` (`--per-request-spec-decode-metrics summary` or
  `detailed`; docs/features/speculative_decoding/acceptance_metrics.md, marked experimental by vLLM).
- `sglang`: a /generate response's `meta_info` (python/sglang/srt/managers: spec_verify_ct, spec_accept_length =
  completion_tokens ÷ spec_verify_ct, spec_accept_rate = correct ÷ proposed drafts, the histogram; the count
  fields under their current and their older names). SGLang documents no schema: its source is the reference.
- `llamacpp-timings`: a llama-server response's `timings` (draft_n, draft_n_accepted, written only when the
  request drafted; predicted_n), tools/server/server-task.cpp `result_timings::to_json`.
- `llamacpp-prometheus`: llama-server's /metrics (`--metrics`), tools/server/README.md "Available metrics":
  llamacpp:spec_decode_num_drafts_total, _num_draft_tokens_total, _num_accepted_tokens_total,
  _num_accepted_tokens_per_pos_total{position}; named after vLLM's and read with vLLM's definitions.
- `trtllm`: TensorRT-LLM's `request_perf_metrics.speculative_decoding` (Python: RequestOutput.outputs[0]; trtllm-serve
  /perf_metrics: a list of {request_id, perf_metrics}, pooled): acceptance_rate, total_accepted_draft_tokens,
  total_draft_tokens. It counts no verify steps, so τ needs num_spec_steps, read where present.

Every formula is one template (`Reader.tau`, `.rate`, `.link`) that is both printed and evaluated (`evaluate`),
exactly, on the counts: what the page prints is what was computed. A file that does not parse, or whose figures
contradict its own counts, is refused with a one-line ValueError naming the field.

The entry point others import (`from engine import serving as em`): the record and the readers' table are in
run.py, the number parsing and the checks in checks.py, the readers in readers.py, the α and the prediction in
predict.py.
"""

from __future__ import annotations

from .checks import (
    check_counts,
    check_reported,
    drafting_note,
    finish,
    first_count,
    get,
    histogram,
    number,
    shown,
    tails,
    whole,
)
from .predict import (
    BYTES_PER_PARAM,
    FLOPS_PER_PARAM,
    GPUS,
    Alphas,
    Costs,
    Gpu,
    Prediction,
    alpha_for_tokens,
    alphas_for,
    forward_seconds,
    predict,
    preset_costs,
    roofline,
    whatif_alpha,
    whatif_gamma,
)
from .readers import (
    JSON_KINDS,
    PARSERS,
    SGLANG_ACCEPTED,
    SGLANG_HISTOGRAM,
    SGLANG_NO_PROPOSED,
    SGLANG_PROPOSED,
    UNRECOGNISED,
    an_object,
    by_position,
    json_kind,
    labels_of,
    load_json,
    prometheus_samples,
    read_llamacpp_timings,
    read_metrics,
    read_prometheus,
    read_sglang,
    read_trtllm,
    read_trtllm_one,
    read_vllm_request,
    rejections_of_steps,
    reported,
    summed,
    text_kind,
    trt_spec,
)
from .run import (
    MAX_COUNT,
    MAX_LINES,
    MAX_METRICS_BYTES,
    MAX_POSITIONS,
    MAX_REQUESTS,
    MAX_STEPS,
    PROM_PREFIX,
    READERS,
    SHOWN,
    TOLERANCE,
    VLLM_DOCS,
    VLLM_LINK,
    VLLM_TAU,
    MetricsRun,
    Reader,
    evaluate,
    named,
    pooled_counts,
    position_alphas,
    position_rates,
    rate,
    substitute,
    tau,
)

__all__ = [
    "MAX_METRICS_BYTES",
    "MAX_LINES",
    "MAX_POSITIONS",
    "MAX_STEPS",
    "MAX_REQUESTS",
    "MAX_COUNT",
    "TOLERANCE",
    "SHOWN",
    "Reader",
    "MetricsRun",
    "evaluate",
    "substitute",
    "named",
    "tau",
    "rate",
    "position_rates",
    "position_alphas",
    "pooled_counts",
    "shown",
    "whole",
    "number",
    "get",
    "first_count",
    "histogram",
    "tails",
    "check_counts",
    "check_reported",
    "drafting_note",
    "finish",
    "labels_of",
    "prometheus_samples",
    "summed",
    "by_position",
    "read_prometheus",
    "an_object",
    "reported",
    "rejections_of_steps",
    "read_vllm_request",
    "SGLANG_ACCEPTED",
    "SGLANG_PROPOSED",
    "SGLANG_HISTOGRAM",
    "read_sglang",
    "SGLANG_NO_PROPOSED",
    "read_llamacpp_timings",
    "trt_spec",
    "read_trtllm_one",
    "read_trtllm",
    "VLLM_TAU",
    "VLLM_LINK",
    "VLLM_DOCS",
    "PROM_PREFIX",
    "READERS",
    "PARSERS",
    "JSON_KINDS",
    "UNRECOGNISED",
    "json_kind",
    "text_kind",
    "load_json",
    "read_metrics",
    "Alphas",
    "alpha_for_tokens",
    "alphas_for",
    "Gpu",
    "GPUS",
    "BYTES_PER_PARAM",
    "FLOPS_PER_PARAM",
    "roofline",
    "forward_seconds",
    "Costs",
    "preset_costs",
    "Prediction",
    "predict",
    "whatif_gamma",
    "whatif_alpha",
]
