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
"""

from __future__ import annotations

import ast
import json
import math
import operator
import re
from dataclasses import dataclass, field, replace
from fractions import Fraction

from . import costmodel
from .config import MAX_GAMMA
from .figures import Exact

# a metrics file or pasted text larger than this is refused unread (the app's text box takes as many characters)
MAX_METRICS_BYTES = 512 * 1024
MAX_LINES = 50_000  # lines of Prometheus text (a full vLLM scrape is a few thousand)
MAX_POSITIONS = 64  # draft positions (and histogram buckets) a file may report
MAX_STEPS = 200_000  # entries of vLLM's per-step arrays
MAX_REQUESTS = 10_000  # entries of a TensorRT-LLM /perf_metrics list
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
    accepted: int  # draft tokens the target accepted (bonus tokens not counted)
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


# -- reading numbers: each refusal names its field --------------------------------------------------------------
def shown(value) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN else text[: SHOWN - 1] + "…"


def whole(where: str, name: str, value) -> int:
    """A count: a whole number from 0 to MAX_COUNT (43 or 43.0); else a ValueError naming the field."""
    ok = (
        not isinstance(value, bool)
        and isinstance(value, (int, float))
        and (isinstance(value, int) or (math.isfinite(value) and value.is_integer()))
        and 0 <= value <= MAX_COUNT
    )
    if not ok:
        raise ValueError(f"{where}{name} must be a whole number ≥ 0, got {shown(value)}")
    return int(value)


def number(where: str, name: str, value) -> float:
    """A reported figure: a finite number ≥ 0."""
    ok = (
        not isinstance(value, bool)
        and isinstance(value, (int, float))
        and math.isfinite(value)
        and value >= 0
    )
    if not ok:
        raise ValueError(f"{where}{name} must be a finite number ≥ 0, got {shown(value)}")
    return float(value)


def get(obj: dict, where: str, name: str):
    if name not in obj:
        raise ValueError(f"{where}{name} is missing")
    return obj[name]


def first_count(obj: dict, where: str, names: tuple) -> int | None:
    """The first of `names` present in obj, as a count (an engine that renamed a field keeps the old name a while)."""
    for name in names:
        if name in obj:
            return whole(where, name, obj[name])
    return None


def histogram(where: str, name: str, value) -> tuple:
    """Steps by accepted drafts: a dense list (index j) or a map {"j": steps} (JSON keys are strings)."""
    if isinstance(value, dict):
        dense = {}
        for key, count in value.items():
            j = whole(where, f"{name} key", int(key) if str(key).isdigit() and len(str(key)) <= 6 else key)
            dense[j] = whole(where, f"{name}[{shown(key)}]", count)
        if dense and max(dense) >= MAX_POSITIONS:
            raise ValueError(f"{where}{name} has a bucket {max(dense)}; at most {MAX_POSITIONS - 1} is read")
        return tuple(dense.get(j, 0) for j in range(max(dense) + 1)) if dense else ()
    if not isinstance(value, list):
        raise ValueError(f"{where}{name} must be a list of step counts, got {type(value).__name__}")
    if len(value) > MAX_POSITIONS:
        raise ValueError(f"{where}{name} has {len(value)} buckets; at most {MAX_POSITIONS} are read")
    return tuple(whole(where, f"{name}[{j}]", count) for j, count in enumerate(value))


def tails(hist: tuple, k: int) -> tuple:
    """per_position from a histogram: steps that accepted more than i drafts, i = 0..k−1."""
    return tuple(sum(hist[i + 1 :]) for i in range(k))


def check_counts(where: str, names: dict, run: MetricsRun) -> None:
    """What counts of one run must satisfy, whatever the engine: accepted ≤ drafted; a histogram adds up to the
    steps and the accepted drafts; per-position counts fall with the position and add up to the accepted."""
    name = names.get
    if run.drafted is not None and run.accepted > run.drafted:
        raise ValueError(
            f"{where}{name('accepted')} is {run.accepted}, more than {name('drafted')} = {run.drafted}"
        )
    hist = run.histogram
    if hist and run.steps is not None and sum(hist) != run.steps:
        raise ValueError(
            f"{where}{name('histogram')} adds up to {sum(hist)} steps, {name('steps')} is {run.steps}"
        )
    if hist and sum(j * n for j, n in enumerate(hist)) != run.accepted:
        raise ValueError(
            f"{where}{name('histogram')} holds {sum(j * n for j, n in enumerate(hist))} accepted drafts, "
            f"{name('accepted')} is {run.accepted}"
        )
    pos = run.per_position
    if any(a < b for a, b in zip(pos, pos[1:])) or (pos and run.steps is not None and pos[0] > run.steps):
        raise ValueError(
            f"{where}{name('per_position')} must fall with the position and start at most at "
            f"{name('steps')} = {run.steps}, got {list(pos)[:8]}"
        )
    if pos and sum(pos) != run.accepted:
        raise ValueError(
            f"{where}{name('per_position')} adds up to {sum(pos)}, {name('accepted')} is {run.accepted} "
            "(a scrape caught mid-update? read it again)"
        )


def check_reported(where: str, run: MetricsRun) -> None:
    """A figure the engine reports beside its counts must be the one its own formula gives from them."""
    r = run.reader
    for key, formula, field_name in (("tau", r.tau, r.tau_name), ("rate", r.rate, r.rate_name)):
        given, derived = run.reported.get(key), evaluate(formula, run.counts())
        if given is not None and derived is not None and abs(given - float(derived)) > TOLERANCE:
            raise ValueError(
                f"{where}{field_name} is {given:g}, but {named(formula, r.names)} = "
                f"{substitute(formula, run.counts())} = {float(derived):.4f}: the figure and its counts disagree"
            )


def drafting_note(run: MetricsRun) -> tuple:
    """Said when steps drafted fewer than k on average: a position's rate then counts those steps as misses."""
    k, steps, drafted = run.draft_len, run.steps, run.drafted
    if not (k and steps and drafted is not None) or drafted >= steps * k:
        return ()
    return (
        f"{drafted} drafts over {steps} steps is {drafted / steps:.2f} a step, fewer than k = {k}: some steps "
        "drafted fewer tokens, and the per-position rates count their missing positions as not accepted",
    )


def finish(where: str, run: MetricsRun) -> MetricsRun:
    """A parsed run, checked: its counts cohere and agree with the figures the engine printed beside them."""
    if run.drafted == 0 or run.steps == 0:
        raise ValueError(f"{where}no speculative step in this report: {run.reader.names['drafted']} is 0")
    check_counts(where, run.reader.names, run)
    check_reported(where, run)
    if run.drafted is not None and run.steps and run.draft_len and run.drafted == run.steps * run.draft_len:
        last = run.histogram[run.draft_len] if len(run.histogram) > run.draft_len else None
        full = last if last is not None else (run.per_position[-1] if run.per_position else None)
        if (
            full is not None and run.rejections is None
        ):  # every step drafted k: a step that kept fewer rejected
            run = replace(run, rejections=run.steps - full)
    return replace(run, notes=run.notes + drafting_note(run))


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
    "llamacpp-prometheus": "llamacpp:",
}  # whose counters a scrape holds
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


# -- the α the counts imply, and the cost model's prediction -------------------------------------------------------
@dataclass(frozen=True)
class Alphas:
    """The acceptance probabilities at draft positions 1..γ that the prediction uses, as printed inputs (an Exact
    ratio of counts, or (value, decimals) for a solved α), and how they follow from the counts."""

    inputs: tuple
    how: str

    @property
    def values(self) -> list:
        return [float(x.value) if isinstance(x, Exact) else float(x[0]) for x in self.inputs]


def alpha_for_tokens(tokens: float, gamma: float) -> float:
    """The α at which the cost model's E(α, γ) (costmodel.expected_tokens) equals `tokens` (E rises with α)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if costmodel.expected_tokens(mid, gamma) < tokens else (lo, mid)
    return (lo + hi) / 2


def alphas_for(run: MetricsRun, gamma: int) -> Alphas:
    """Per position where the report counts per position (α_i, then the pooled α, or the last α_i, beyond the
    positions it counted); else the one α at which E(α, g) gives the counts' τ, g their mean drafts per step
    (γ itself where the report counts no steps)."""
    cond, pooled = position_alphas(run), pooled_counts(run)
    if cond:
        fill = Exact.ratio(*pooled) if pooled else Exact(cond[-1])
        inputs = tuple(Exact(a) for a in cond[:gamma]) + (fill,) * max(0, gamma - len(cond))
        beyond = "the pooled α = accepted ÷ (accepted + rejections)" if pooled else "the last position's α"
        how = "α at each position from the per-position counts (accepted at i ÷ accepted at i − 1)" + (
            f"; {beyond} beyond position {len(cond)}" if gamma > len(cond) else ""
        )
        return Alphas(inputs=inputs, how=how)
    per_step = Fraction(run.drafted, run.steps) if run.steps and run.drafted else Fraction(gamma)
    counts_tau = 1 + Fraction(run.accepted, run.steps) if run.steps else 1 + rate(run) * per_step
    a = alpha_for_tokens(float(counts_tau), float(per_step))
    g, t = Exact(per_step).text(), Exact(counts_tau).text()
    how = (
        f"one α at every position, the one at which E(α, {g}) = {t}, the counts' tokens per step at their mean "
        "drafts per step"
        if run.steps
        else f"one α at every position, the one at which E(α, {g}) = 1 + rate × {g} = {t}: the report counts no "
        f"verify steps, so every step is taken to have drafted your γ = {g}"
    )
    return Alphas(inputs=((a, 2),) * gamma, how=how)


@dataclass(frozen=True)
class Gpu:
    """A GPU's datasheet figures: memory bandwidth and dense bf16 tensor throughput."""

    name: str
    bandwidth: float  # bytes/s
    flops: float  # dense bf16 FLOP/s (the datasheets' "with sparsity" figure halved)
    source: str  # where the figures are printed


GPUS = {
    g.name: g
    for g in (
        Gpu(
            "H100 SXM",
            3.35e12,
            989.4e12,
            "NVIDIA H100 Tensor Core GPU datasheet (SXM): 3.35 TB/s HBM3; BF16 Tensor Core 1,979 TFLOPS with "
            "sparsity, 989.4 dense (H100 whitepaper)",
        ),
        Gpu(
            "A100 80GB SXM",
            2.039e12,
            312e12,
            "NVIDIA A100 Tensor Core GPU datasheet (80GB SXM): 2,039 GB/s HBM2e; BF16 Tensor Core 312 TFLOPS "
            "dense (624 with sparsity)",
        ),
        Gpu(
            "L4",
            300e9,
            121e12,
            "NVIDIA L4 Tensor Core GPU datasheet: 300 GB/s GDDR6; BF16 Tensor Core 242 TFLOPS with sparsity, "
            "121 dense",
        ),
        Gpu(
            "RTX 4090",
            1.008e12,
            165.2e12,
            "NVIDIA Ada Lovelace architecture whitepaper (GeForce RTX 4090): 1,008 GB/s GDDR6X; peak BF16 Tensor "
            "TFLOPS with FP32 accumulate 165.2 dense (330.4 with sparsity)",
        ),
    )
}
BYTES_PER_PARAM = 2  # bf16 weights
FLOPS_PER_PARAM = 2  # a multiply and an add per weight per token


def roofline(gpu: Gpu, params: float) -> dict:
    """A dense model of `params` parameters on `gpu` in the cost model's roofline terms (costmodel.floors): its
    weights read once per forward, 2 FLOPs per weight per token; the KV cache and attention left out."""
    return {
        "bandwidth": gpu.bandwidth,
        "flops": gpu.flops,
        "weight_bytes": BYTES_PER_PARAM * params,
        "flops_per_token": FLOPS_PER_PARAM * params,
        "kv_bytes_per_position": 0.0,
        "attn_flops_per_position": 0.0,
    }


def forward_seconds(n: int, gpu: Gpu, params: float) -> float:
    """t(n): a forward over n tokens at the roofline, max(memory floor, compute floor)."""
    return max(costmodel.floors(n, 0.0, roofline(gpu, params)))


@dataclass(frozen=True)
class Costs:
    """c (a draft step ÷ a target step) and the verify curve v(n) = t(n) ÷ t(1), typed or from a GPU preset."""

    c: float
    points: tuple  # ((n, v(n)), ...); between and beyond them costmodel.verify_curve's line
    gpu: Gpu | None = None
    target_params: float | None = None
    draft_params: float | None = None

    def v(self, n: int) -> float:
        return costmodel.verify_curve({1: 1.0, **dict(self.points)})(n)


def preset_costs(gpu: Gpu, target_params: float, draft_params: float) -> Costs:
    """c and v(n) for n = 2..MAX_GAMMA + 1 from the roofline of a target and a draft model on one GPU."""
    t1 = forward_seconds(1, gpu, target_params)
    return Costs(
        c=forward_seconds(1, gpu, draft_params) / t1,
        points=tuple((n, forward_seconds(n, gpu, target_params) / t1) for n in range(2, MAX_GAMMA + 2)),
        gpu=gpu,
        target_params=target_params,
        draft_params=draft_params,
    )


@dataclass(frozen=True)
class Prediction:
    gamma: int
    alphas: Alphas
    tokens: float  # E = 1 + α1 + α1·α2 + … (costmodel.expected_tokens_each)
    c: float
    v: float  # v(γ + 1)
    speedup: float | None  # E ÷ (γ·c + v) (costmodel.predicted_speedup_each)


def predict(run: MetricsRun, gamma: int, costs: Costs) -> Prediction:
    """The cost model's prediction at γ for the α the run's counts imply and the given costs."""
    alphas = alphas_for(run, gamma)
    v = costs.v(gamma + 1)
    return Prediction(
        gamma=gamma,
        alphas=alphas,
        tokens=costmodel.expected_tokens_each(alphas.values),
        c=costs.c,
        v=v,
        speedup=costmodel.predicted_speedup_each(alphas.values, costs.c, v),
    )


def whatif_gamma(run: MetricsRun, costs: Costs, gammas=range(1, MAX_GAMMA + 1)) -> list:
    """[(γ, predicted speedup)]: the prediction at each γ, the run's α kept."""
    return [(g, predict(run, g, costs).speedup) for g in gammas]


def whatif_alpha(gamma: int, costs: Costs, steps: int = 40) -> list:
    """[(α, predicted speedup)] at γ for one α at every position, α = 0..1."""
    v = costs.v(gamma + 1)
    return [(i / steps, costmodel.predicted_speedup(i / steps, gamma, costs.c, v)) for i in range(steps + 1)]
