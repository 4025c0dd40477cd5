"""The record every serving engine's report is read into (`MetricsRun`), the readers' table (`READERS`: each
names the engine, the version and the document it follows, and τ and the rate as formula templates) and the
formulas printed and evaluated from one template. Plain Python, no torch; the readers themselves are in
readers.py, the prediction in predict.py, the entry point engine/serving/__init__.py.
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass, field
from fractions import Fraction

from ..figures import Exact

# a metrics file or pasted text larger than this is refused unread (the app's text box takes as many characters)
MAX_METRICS_BYTES = 512 * 1024
MAX_LINES = 50_000  # lines of Prometheus text (a full vLLM scrape is a few thousand)
MAX_POSITIONS = 64  # draft positions (and histogram buckets) a file may report
MAX_STEPS = 200_000  # entries of vLLM's per-step arrays
MAX_REQUESTS = 10_000  # entries of a TensorRT-LLM /perf_metrics list
MAX_SCRAPES = 100  # scrapes of one server pasted one after another (a window over them)
MAX_MODELS = 64  # models (label sets) one scrape may hold
MAX_COUNT = 10**15  # the largest count taken
TOLERANCE = 0.005  # a reported τ or rate may be rounded by this much and still agree with its counts
SHOWN = 40  # characters of a refused value a message quotes


@dataclass(frozen=True)
class Reader:
    """One kind of report: who writes it, what the reader follows, the engine's names for its counts and the
    engine's own definitions of τ and the rate, as formula templates over the counts."""

    kind: str
    engine: str  # "vLLM"
    source: str  # what is read ("Prometheus /metrics text")
    follows: str  # the version and the document the reader follows
    names: dict  # count (accepted, drafted, steps, tokens, per_position) -> the engine's field name
    tau_name: str  # the engine's name for τ
    tau: str  # τ's formula over the counts
    rate_name: str
    link: str  # τ written with the rate (its {rate}): how the two figures tie together for this engine
    rate: str = "{accepted} ÷ {drafted}"
    notes: tuple = ()  # what the engine's numbers leave uncertain, said on the page


@dataclass(frozen=True, kw_only=True)
class MetricsRun:
    """What one report says, in counts. per_position[i]: verify steps that accepted more than i drafts (vLLM's
    num_accepted_tokens_per_pos); histogram[j]: steps that accepted exactly j drafts."""

    kind: str  # a READERS key
    accepted: int | None  # draft tokens the target accepted (bonus tokens not counted); None: not reported
    drafted: int | None  # draft tokens proposed; None where the report has no count of them
    steps: int | None  # verify steps; None where the report has none
    tokens: int | None = (
        None  # output tokens the engine counted (SGLang completion_tokens, llama.cpp predicted_n)
    )
    per_position: tuple = ()
    histogram: tuple = ()
    draft_len: int | None = None  # drafts a step may hold (k), where reported
    rejections: int | None = None  # steps in which a draft was rejected, where the counts tell
    reported: dict = field(default_factory=dict)  # the engine's own figures: {"tau": x, "rate": y}
    notes: tuple = ()  # what this file's numbers say beyond the counts (series summed, steps drafting less)
    model: str | None = None  # the labels that set this run apart from the report's others ('model_name="…"')
    models: tuple = ()  # every model the report holds, this one among them, where it holds several
    window: dict | None = None  # {"scrapes": n, "resets": r} where the counts are a window between scrapes

    @property
    def reader(self) -> Reader:
        return READERS[self.kind]

    def counts(self) -> dict:
        return {
            "accepted": self.accepted,
            "drafted": self.drafted,
            "steps": self.steps,
            "tokens": self.tokens,
        }


# -- formulas: printed and evaluated from one template ------------------------------------------------------------
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_NAME = re.compile(r"\{(\w+)\}")


class _Unknown(Exception):
    pass


def evaluate(template: str, values: dict) -> Fraction | None:
    """A formula as printed ("1 + {accepted} ÷ {steps}"), evaluated exactly; None when a value it names is unknown
    or a divisor is 0."""
    expr = _NAME.sub(r"\1", template.replace("÷", "/").replace("×", "*").replace("−", "-"))

    def walk(node):
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return Fraction(node.value)
        if isinstance(node, ast.Name):
            if values.get(node.id) is None:
                raise _Unknown
            return Fraction(values[node.id])
        raise ValueError(f"formula {template!r} has a term this evaluator does not take")

    try:
        return walk(ast.parse(expr, mode="eval").body)
    except (_Unknown, ZeroDivisionError):
        return None


def substitute(template: str, values: dict) -> str:
    """The formula with each name replaced by its value ("1 + 10 ÷ 43")."""
    return _NAME.sub(lambda m: _plain(values.get(m[1])), template)


def named(template: str, names: dict) -> str:
    """The formula in the engine's own field names ("1 + num_accepted_tokens ÷ num_drafts")."""
    return _NAME.sub(lambda m: names.get(m[1], m[1]), template)


def _plain(value) -> str:
    if isinstance(value, Fraction):
        return Exact(value).text()
    return "?" if value is None else str(value)


def tau(run: MetricsRun) -> Fraction | None:
    """τ as the run's engine defines it, from its counts."""
    return evaluate(run.reader.tau, run.counts())


def rate(run: MetricsRun) -> Fraction | None:
    """The acceptance rate as the run's engine defines it (accepted ÷ drafted), from its counts."""
    return evaluate(run.reader.rate, run.counts())


def position_rates(run: MetricsRun) -> list:
    """The engine's per-position acceptance rates (vLLM's definition): steps that accepted more than i drafts ÷
    steps; they add up to accepted ÷ steps."""
    return [Fraction(n, run.steps) for n in run.per_position] if run.steps else []


def position_alphas(run: MetricsRun) -> list:
    """α_i: how often draft i was accepted once drafts 1..i−1 were: accepted at position i ÷ accepted at position
    i − 1 (÷ steps for the first). Stops at a position no step reached."""
    out, before = [], run.steps
    for n in run.per_position:
        if not before:
            break
        out.append(Fraction(n, before))
        before = n
    return out


def pooled_counts(run: MetricsRun) -> tuple[int, int] | None:
    """(accepted, tested): the cost model's α = accepted ÷ (accepted + rejections) (costmodel.alpha), where the
    report tells how many steps saw a rejection."""
    if run.rejections is None:
        return None
    return run.accepted, run.accepted + run.rejections


# -- the readers -------------------------------------------------------------------------------------------------
VLLM_TAU = "1 + {accepted} ÷ {steps}"
VLLM_LINK = "1 + {rate} × {drafted} ÷ {steps}"
VLLM_DOCS = (
    "vllm/v1/spec_decode/metrics.py (SpecDecodingProm: its docstring's PromQL defines the acceptance rate, the "
    "mean acceptance length and the per-position rate) and docs/features/speculative_decoding/acceptance_metrics.md "
    "(docs.vllm.ai, stable and v0.32.0)"
)
PROM_PREFIX = {
    "vllm-prometheus": "vllm:",
    "vllm-older": "vllm:",
    "llamacpp-prometheus": "llamacpp:",
}  # whose counters a scrape holds
SIX_DIGITS = ("llamacpp-prometheus",)  # totals printed through a std::stringstream: 6 significant digits
READERS = {
    "vllm-prometheus": Reader(
        kind="vllm-prometheus",
        engine="vLLM",
        source="Prometheus /metrics text",
        follows="vLLM's V1 engine: " + VLLM_DOCS,
        names={
            "accepted": "vllm:spec_decode_num_accepted_tokens",
            "drafted": "vllm:spec_decode_num_draft_tokens",
            "steps": "vllm:spec_decode_num_drafts",
            "per_position": "vllm:spec_decode_num_accepted_tokens_per_pos",
        },
        tau_name="mean acceptance length",
        tau=VLLM_TAU,
        rate_name="draft acceptance rate",
        link=VLLM_LINK,
        notes=(
            "server-wide counters since the server started: scrape before and after a workload and subtract",
        ),
    ),
    "vllm-older": Reader(
        kind="vllm-older",
        engine="vLLM (V0 or early V1)",
        source="Prometheus /metrics text without vllm:spec_decode_num_drafts",
        follows=(
            "vLLM V0: vllm/engine/metrics.py (spec_decode_num_accepted_tokens_total, _num_draft_tokens_total, "
            "_num_emitted_tokens_total, the draft_acceptance_rate and efficiency gauges; docs/source/design/v1/"
            "metrics.md lists them); early V1 releases exported the first two before vllm:spec_decode_num_drafts"
        ),
        names={
            "accepted": "vllm:spec_decode_num_accepted_tokens",
            "drafted": "vllm:spec_decode_num_draft_tokens",
            "steps": "vllm:spec_decode_num_drafts (not exported by this version)",
        },
        tau_name="mean acceptance length (needs vllm:spec_decode_num_drafts)",
        tau=VLLM_TAU,
        rate_name="draft acceptance rate",
        link=VLLM_LINK,
        notes=(
            "this vLLM counts no verify steps: the rate is shown, τ and the per-position figures cannot be",
        ),
    ),
    "vllm-request": Reader(
        kind="vllm-request",
        engine="vLLM",
        source="a response's metrics.speculative_decoding (--per-request-spec-decode-metrics)",
        follows="vLLM: " + VLLM_DOCS + "; the response field is marked experimental there",
        names={
            "accepted": "num_accepted_draft_tokens",
            "drafted": "num_draft_tokens",
            "steps": "num_spec_steps",
            "histogram": "acceptance_histogram",
            "per_position": "acceptance_histogram (steps that accepted more than i drafts)",
        },
        tau_name="mean_acceptance_length",
        tau=VLLM_TAU,
        rate_name="draft_acceptance_rate",
        link=VLLM_LINK,
        notes=(
            "num_draft_tokens excludes drafts a grammar invalidated; steps that drafted nothing are not counted",
        ),
    ),
    "sglang": Reader(
        kind="sglang",
        engine="SGLang",
        source="a /generate response's meta_info",
        follows=(
            "SGLang's source (sgl-project/sglang python/sglang/srt/managers: fill_spec_decoding_meta; older "
            "releases' tokenizer_manager.py): no documented schema"
        ),
        names={
            "accepted": "spec_num_correct_drafts",
            "drafted": "spec_num_proposed_drafts",
            "steps": "spec_verify_ct",
            "tokens": "completion_tokens",
            "histogram": "spec_accept_histogram",
            "per_position": "spec_accept_histogram (steps that accepted more than i drafts)",
        },
        tau_name="spec_accept_length",
        tau="{tokens} ÷ {steps}",
        rate_name="spec_accept_rate",
        link="1 + {rate} × {drafted} ÷ {steps} + ({tokens} − {accepted} − {steps}) ÷ {steps}",
        notes=(
            "spec_accept_length divides every output token by the verify steps, the token the prompt's forward "
            "produced included: the link's last term counts the tokens no verify step committed",
            "SGLang counts proposed drafts as spec_verify_ct × (speculative_num_draft_tokens − 1); for an EAGLE "
            "tree (topk > 1) that counts tree nodes, not a chain's drafts",
        ),
    ),
    "llamacpp-timings": Reader(
        kind="llamacpp-timings",
        engine="llama.cpp server",
        source="a response's timings",
        follows=(
            "llama.cpp (ggml-org/llama.cpp): tools/server/server-task.cpp result_timings::to_json (draft_n and "
            "draft_n_accepted written when draft_n > 0) and tools/server/README.md 'Timings and context usage'"
        ),
        names={
            "accepted": "draft_n_accepted",
            "drafted": "draft_n",
            "steps": "predicted_n − draft_n_accepted",
            "tokens": "predicted_n",
        },
        tau_name="tokens per target forward (derived: llama.cpp reports no τ)",
        tau="{tokens} ÷ ({tokens} − {accepted})",
        rate_name="acceptance rate (derived: llama.cpp reports none)",
        link="{tokens} ÷ ({tokens} − {rate} × {drafted})",
        notes=(
            "timings count no verify steps: τ here is predicted_n ÷ its target forwards, every forward that "
            "committed tokens (plain steps and the prompt's included), so it sits below a verify-only τ",
        ),
    ),
    "llamacpp-prometheus": Reader(
        kind="llamacpp-prometheus",
        engine="llama.cpp server",
        source="Prometheus /metrics text (llama-server --metrics)",
        follows=(
            "llama.cpp (ggml-org/llama.cpp): tools/server/README.md GET /metrics 'Available metrics' "
            "(llamacpp:spec_decode_*; recent builds: older ones export none)"
        ),
        names={
            "accepted": "llamacpp:spec_decode_num_accepted_tokens",
            "drafted": "llamacpp:spec_decode_num_draft_tokens",
            "steps": "llamacpp:spec_decode_num_drafts",
            "per_position": "llamacpp:spec_decode_num_accepted_tokens_per_pos",
        },
        tau_name="mean acceptance length (vLLM's definition)",
        tau=VLLM_TAU,
        rate_name="draft acceptance rate (vLLM's definition)",
        link=VLLM_LINK,
        notes=(
            "llama.cpp documents the counters (named after vLLM's), not formulas: τ and the rates here use vLLM's",
        ),
    ),
    "trtllm": Reader(
        kind="trtllm",
        engine="TensorRT-LLM",
        source="request_perf_metrics.speculative_decoding (or trtllm-serve's /perf_metrics list)",
        follows=(
            "TensorRT-LLM (NVIDIA/TensorRT-LLM): the executor's RequestPerfMetrics.SpeculativeDecodingMetrics "
            "(acceptanceRate, totalAcceptedDraftTokens, totalDraftTokens) and tensorrt_llm/serve/openai_server.py "
            "/perf_metrics (return_perf_metrics); num_spec_steps and acceptance_histogram read where present"
        ),
        names={
            "accepted": "total_accepted_draft_tokens",
            "drafted": "total_draft_tokens",
            "steps": "num_spec_steps",
            "histogram": "acceptance_histogram",
            "per_position": "acceptance_histogram (steps that accepted more than i drafts)",
        },
        tau_name="mean tokens per verify step (derived: TensorRT-LLM reports no τ)",
        tau=VLLM_TAU,
        rate_name="acceptance_rate",
        link=VLLM_LINK,
        notes=(
            "TensorRT-LLM's documents name acceptance_rate without its formula; it is checked against "
            "total_accepted_draft_tokens ÷ total_draft_tokens",
            "num_spec_steps and acceptance_histogram are not in TensorRT-LLM's RequestPerfMetrics: they are read "
            "where a response carries them (as AIPerf's TensorRT-LLM adapter describes), else τ is not known",
        ),
    ),
}
