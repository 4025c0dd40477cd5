"""The metrics readers (engine/serving/) and their views (specviz/engine_metrics.py): each engine's report
read into counts, τ and the acceptance rate as that engine defines them, every printed figure recomputed from the
counts printed beside it, malformed reports refused naming the field, and the prediction the cost model's."""

from __future__ import annotations

import ast
import copy
import json
import math
import re
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import costmodel
from engine import serving as em
from specviz import engine_metrics as ev

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "engines"
# each fixture: its kind, and its counts as written in the file (accepted, drafted, steps)
EXPECTED = {
    "vllm-metrics.prom": ("vllm-prometheus", 636, 1200, 400),
    "vllm-request-detailed.json": ("vllm-request", 33, 58, 20),
    "sglang-meta-info.json": ("sglang", 77, 150, 50),
    "llamacpp-server-timings.json": ("llamacpp-timings", 130, 240, 70),
    "llamacpp-metrics.prom": ("llamacpp-prometheus", 130, 240, 64),
    "trtllm-request-perf.json": ("trtllm", 132, 192, None),
}


def text_of(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def json_of(name: str):
    return json.loads(text_of(name))


def calc(expr: str) -> Fraction:
    """A printed formula ("1 + 13/24 × 240 ÷ 64") recomputed exactly, independently of the code under test."""
    py = expr.replace("÷", "/").replace("×", "*").replace("−", "-")
    assert re.fullmatch(r"[\d\s()+\-*/]+", py), expr
    return eval(re.sub(r"\d+", lambda m: f"F({m[0]})", py), {"F": Fraction})  # noqa: S307 (digits and operators only)


def printed_formulas(html: str) -> list[tuple[str, str]]:
    return re.findall(r'data-expr="([^"]+)" data-value="([^"]+)"', html)


# -- each reader on its fixture -------------------------------------------------------------------------------------
def test_every_fixture_is_read_and_names_the_version_and_document_it_follows():
    """Each fixture says in the file which engine document it was written from; each reader names its own."""
    assert sorted(p.name for p in FIXTURES.glob("*") if not p.name.endswith(".trace.json")) == sorted(
        EXPECTED
    )
    for name in EXPECTED:
        text = text_of(name)
        assert "written from" in text and "fixture" in text.lower(), name
    for reader in em.READERS.values():
        assert reader.follows and "/" in reader.follows, (
            reader.kind
        )  # a path in the engine's repository or docs


@pytest.mark.parametrize("name", list(EXPECTED))
def test_each_reader_reads_its_fixture_detected_and_by_name(name):
    """Auto-detection picks the fixture's engine; choosing the kind by name reads the same counts."""
    kind, accepted, drafted, steps = EXPECTED[name]
    run = em.read_metrics(text_of(name))
    assert run.kind == kind and (run.accepted, run.drafted, run.steps) == (accepted, drafted, steps)
    assert em.read_metrics(text_of(name), kind) == run


@pytest.mark.parametrize("name", list(EXPECTED))
def test_tau_rate_and_their_link_reproduce_from_the_printed_counts(name):
    """Every formula the summary prints (τ, the rate, the link between them) gives its printed value from the
    counts printed in it, and the counts printed are the report's."""
    run = em.read_metrics(text_of(name))
    html = ev.summary_html(run)
    formulas = printed_formulas(html)
    assert len(formulas) >= (3 if em.tau(run) is not None else 1)
    for expr, value in formulas:
        assert f"{float(calc(expr)):.3f}" == value, (expr, value)
    for count in (run.accepted, run.drafted, run.steps):
        if count is not None:
            assert f"<td>{count:,}</td>" in html


def test_vllm_prometheus_counts_per_position_and_definitions():
    """vLLM's counters: per position 290/205/141 of 400 steps; τ = 1 + 636/400, rate = 636/1200, as vLLM's PromQL."""
    run = em.read_metrics(text_of("vllm-metrics.prom"))
    assert run.per_position == (290, 205, 141) and run.draft_len == 3
    assert em.tau(run) == 1 + Fraction(636, 400) and em.rate(run) == Fraction(636, 1200)
    assert em.position_rates(run) == [Fraction(290, 400), Fraction(205, 400), Fraction(141, 400)]
    assert em.position_alphas(run) == [Fraction(290, 400), Fraction(205, 290), Fraction(141, 205)]
    assert run.rejections == 400 - 141  # every step drafted 3: a step that kept fewer saw a rejection


def test_vllm_request_detailed_uses_its_per_step_arrays():
    """vLLM `detailed`: rejections counted from per_step_accepted < per_step_drafted; per position from the histogram."""
    data = json_of("vllm-request-detailed.json")
    spec = data["metrics"]["speculative_decoding"]
    run = em.read_metrics(text_of("vllm-request-detailed.json"))
    acc, dra = spec["per_step_accepted"], spec["per_step_drafted"]
    assert run.rejections == sum(a < d for a, d in zip(acc, dra))
    assert run.per_position == tuple(sum(a > i for a in acc) for i in range(3))
    assert run.histogram == tuple(spec["acceptance_histogram"])
    assert any("fewer than k = 3" in n for n in run.notes)  # two steps drafted 2


def test_sglang_tau_counts_every_output_token_per_verify_step():
    """SGLang's spec_accept_length is completion_tokens ÷ spec_verify_ct; the link adds the tokens no verify step
    committed (here the prompt's one) to 1 + rate × proposed ÷ steps."""
    run = em.read_metrics(text_of("sglang-meta-info.json"))
    assert em.tau(run) == Fraction(128, 50) and em.rate(run) == Fraction(77, 150)
    assert 1 + sum(em.position_rates(run)) + Fraction(128 - 77 - 50, 50) == em.tau(run)


def test_llamacpp_timings_tau_is_tokens_per_target_forward():
    """llama.cpp's timings carry no step count: τ is predicted_n ÷ (predicted_n − draft_n_accepted), said as derived."""
    run = em.read_metrics(text_of("llamacpp-server-timings.json"))
    assert em.tau(run) == Fraction(200, 70) and em.rate(run) == Fraction(130, 240)
    assert "derived" in run.reader.tau_name


def test_trtllm_without_steps_has_a_rate_and_no_tau():
    """TensorRT-LLM's perf metrics count no verify steps: the rate reproduces, τ is said to be unknown."""
    run = em.read_metrics(text_of("trtllm-request-perf.json"))
    assert em.rate(run) == Fraction(132, 192) and em.tau(run) is None
    assert 'data-known="0"' in ev.tau_html(run) and "num_spec_steps" in ev.tau_html(run)


def test_a_trtllm_perf_metrics_list_is_pooled_and_steps_are_read_where_given():
    """trtllm-serve's /perf_metrics is a list of requests: their counts add up; num_spec_steps gives τ."""
    one = json_of("trtllm-request-perf.json")
    two = copy.deepcopy(one)
    two["perf_metrics"]["speculative_decoding"].update(
        acceptance_rate=0.5, total_accepted_draft_tokens=45, total_draft_tokens=90
    )
    run = em.read_metrics(json.dumps([one, two]))
    assert (run.accepted, run.drafted) == (177, 282) and "2 requests pooled" in run.notes[0]
    spec = one["perf_metrics"]["speculative_decoding"]
    spec.update(num_spec_steps=64, acceptance_histogram=[7, 12, 15, 30], num_spec_tokens=3)
    run = em.read_metrics(json.dumps(one))
    assert em.tau(run) == 1 + Fraction(132, 64) and run.per_position == (57, 45, 30)


def test_vllm_prometheus_series_of_several_engines_are_summed_with_a_note():
    """Data-parallel vLLM writes one series per engine: summed, and the page says so."""
    text = text_of("vllm-metrics.prom")
    doubled = text + "\n".join(
        line.replace('engine="0"', 'engine="1"') for line in text.splitlines() if line.startswith("vllm:")
    )
    run = em.read_metrics(doubled)
    assert (run.accepted, run.drafted, run.steps) == (1272, 2400, 800) and run.per_position == (580, 410, 282)
    assert any("summed over 2 series (engine differ)" in n for n in run.notes)


def test_counter_names_without_total_are_read_too():
    """LLM.get_metrics() and some exporters name the counters without _total: the same counts."""
    text = re.sub(r"_total(\{)", r"\1", text_of("vllm-metrics.prom"))
    assert "_total{" not in text
    assert em.read_metrics(text) == em.read_metrics(text_of("vllm-metrics.prom"))


# -- malformed reports: refused naming the field -----------------------------------------------------------------
def vllm_prom(old: str, new: str) -> str:
    text = text_of("vllm-metrics.prom")
    assert old in text
    return text.replace(old, new)


def json_with(name: str, path: tuple, value) -> str:
    data = json_of(name)
    obj = data
    for key in path[:-1]:
        obj = obj[key]
    if value is KeyError:
        del obj[path[-1]]
    else:
        obj[path[-1]] = value
    return json.dumps(data)


VLLM_SPEC = ("metrics", "speculative_decoding")
MALFORMED = [
    (
        vllm_prom("vllm:spec_decode_num_drafts_total{", "vllm:spec_decode_num_dra_total{"),
        "vllm:spec_decode_num_drafts is missing",
    ),
    (vllm_prom("} 400.0", "} 4.5"), "vllm:spec_decode_num_drafts must be a whole number ≥ 0, got 4.5"),
    (vllm_prom("} 636.0", "} NaN"), "vllm:spec_decode_num_accepted_tokens must be a whole number"),
    (
        vllm_prom('position="2"} 141.0', 'position="x"} 141.0'),
        "position must be a whole number from 0 to 63, got 'x'",
    ),
    (
        vllm_prom('position="2"} 141.0', 'position="2"} 100.0'),
        "spec_decode_num_accepted_tokens_per_pos adds up to 595",
    ),
    (vllm_prom('position="0"} 290.0', 'position="0"} 190.0'), "must fall with the position"),
    (vllm_prom("} 1200.0", "} 600.0"), "vllm:spec_decode_num_accepted_tokens is 636, more than"),
    (
        vllm_prom('model_name="Qwen/Qwen2.5-7B-Instruct"} 1200.0', 'model_name="Qwen} 1200.0'),
        "line 21 is not a Prometheus sample",  # an unclosed quote: the labels never end
    ),
    (
        vllm_prom('model_name="Qwen/Qwen2.5-7B-Instruct"} 1200.0', "model_name=Qwen} 1200.0"),
        "labels not of the form",
    ),
    (
        json_with("vllm-request-detailed.json", (*VLLM_SPEC, "num_spec_steps"), "x"),
        "num_spec_steps must be a whole number ≥ 0, got 'x'",
    ),
    (
        json_with("vllm-request-detailed.json", (*VLLM_SPEC, "num_draft_tokens"), KeyError),
        "num_draft_tokens is missing",
    ),
    (
        json_with("vllm-request-detailed.json", (*VLLM_SPEC, "mean_acceptance_length"), 1.9),
        "mean_acceptance_length is 1.9, but",
    ),
    (
        json_with("vllm-request-detailed.json", (*VLLM_SPEC, "acceptance_histogram"), [5, 4, 4, 6]),
        "acceptance_histogram adds up to 19 steps",
    ),
    (
        json_with("vllm-request-detailed.json", (*VLLM_SPEC, "per_step_accepted"), [1] * 20),
        "per_step_accepted and per_step_drafted must add up",
    ),
    (
        json_with("vllm-request-detailed.json", (*VLLM_SPEC, "acceptance_histogram"), {"0": 5, "x": 4}),
        "acceptance_histogram key must be a whole number ≥ 0, got 'x'",
    ),
    (
        json_with("vllm-request-detailed.json", ("metrics", "speculative_decoding"), None),
        "--per-request-spec-decode-metrics",
    ),
    (
        json_with("sglang-meta-info.json", ("meta_info", "spec_verify_ct"), "x"),
        "sglang meta_info.spec_verify_ct must be a whole number ≥ 0, got 'x'",
    ),
    (
        json_with("sglang-meta-info.json", ("meta_info", "spec_verify_ct"), -3),
        "spec_verify_ct must be a whole number ≥ 0, got -3",
    ),
    (
        json_with("sglang-meta-info.json", ("meta_info", "completion_tokens"), KeyError),
        "sglang meta_info.completion_tokens is missing",
    ),
    (
        json_with("sglang-meta-info.json", ("meta_info", "spec_accept_length"), 3.5),
        "spec_accept_length is 3.5, but completion_tokens ÷ spec_verify_ct",
    ),
    (
        json_with("sglang-meta-info.json", ("meta_info", "spec_accept_histogram"), [12, 13, 12, 13]),
        "differs from spec_correct_drafts_histogram",
    ),
    (
        json_with("sglang-meta-info.json", ("meta_info", "spec_num_correct_drafts"), 76),
        "holds 77 accepted drafts, spec_num_correct_drafts is 76",
    ),
    (
        json_with("llamacpp-server-timings.json", ("timings", "draft_n_accepted"), 300),
        "draft_n_accepted is 300, more than draft_n = 240",
    ),
    (
        json_with("llamacpp-server-timings.json", ("timings", "predicted_n"), True),
        "predicted_n must be a whole number ≥ 0, got True",
    ),
    (
        json_with(
            "trtllm-request-perf.json", ("perf_metrics", "speculative_decoding", "acceptance_rate"), 0.9
        ),
        "acceptance_rate is 0.9, but",
    ),
    (
        json_with(
            "trtllm-request-perf.json", ("perf_metrics", "speculative_decoding", "total_draft_tokens"), 1e300
        ),
        "total_draft_tokens must be a whole number",
    ),
]


@pytest.mark.parametrize("text,words", MALFORMED, ids=[w[:40] for _, w in MALFORMED])
def test_a_malformed_report_is_refused_in_one_line_naming_the_field(text, words):
    """Each refusal names the field (and the engine) in one line of a few words."""
    with pytest.raises(ValueError) as e:
        em.read_metrics(text)
    message = str(e.value)
    assert words in message and "\n" not in message and len(message) <= 400, message


@pytest.mark.parametrize(
    "text,words",
    [
        ("hello", "metrics not recognised"),
        ('{"choices": []}', "metrics not recognised"),
        ("{not json", "not valid JSON"),
        ("[" * 100_000 + "]" * 100_000, "not valid JSON"),
        (
            "# HELP vllm:num_requests_running x\nvllm:num_requests_running 0\n",
            "no vllm:spec_decode_num_drafts counters",
        ),
        ("x" * (em.MAX_METRICS_BYTES + 1), "the limit is 512 KiB"),
        ("vllm:x 1\n" * (em.MAX_LINES + 1), f"at most {em.MAX_LINES:,} are read"),
    ],
)
def test_what_is_no_report_or_too_large_is_refused_by_name(text, words):
    """Unknown text, bad JSON, JSON nested past the parser, no spec-decode counters, too many bytes or lines."""
    with pytest.raises(ValueError, match=re.escape(words)):
        em.read_metrics(text)


def test_a_kind_chosen_against_the_file_names_what_is_missing():
    """Reading SGLang's JSON as vLLM's /metrics text finds none of vLLM's counters; an unknown kind is refused."""
    with pytest.raises(ValueError, match="vLLM metrics: no vllm:spec_decode_num_drafts counters"):
        em.read_metrics(text_of("sglang-meta-info.json"), "vllm-prometheus")
    with pytest.raises(ValueError, match="vLLM: not valid JSON"):
        em.read_metrics(text_of("vllm-metrics.prom"), "vllm-request")
    with pytest.raises(ValueError, match="metrics kind must be auto or one of"):
        em.read_metrics(text_of("vllm-metrics.prom"), "tgi")


def test_positions_are_bounded():
    """A position label past MAX_POSITIONS − 1 is refused by name, not read into a 10⁹-entry list."""
    text = vllm_prom('position="2"} 141.0', 'position="1000000000"} 141.0')
    with pytest.raises(ValueError, match="position must be a whole number from 0 to 63"):
        em.read_metrics(text)


# -- the definitions agree: a property test, with a negative control -------------------------------------------
def vllm_text(steps: list, engine: str = "0") -> str:
    k = max(d for d, _ in steps)
    per_pos = [sum(a > i for _, a in steps) for i in range(k)]
    labels = f'engine="{engine}",model_name="m"'
    lines = [
        f"vllm:spec_decode_num_drafts_total{{{labels}}} {len(steps)}.0",
        f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} {sum(d for d, _ in steps)}.0",
        f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {sum(a for _, a in steps)}.0",
    ] + [
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{i}"}} {n}.0'
        for i, n in enumerate(per_pos)
    ]
    return "\n".join(lines)


def vllm_request(steps: list) -> str:
    k = max(d for d, _ in steps)
    acc = [a for _, a in steps]
    spec = {
        "num_spec_steps": len(steps),
        "num_accepted_draft_tokens": sum(acc),
        "num_draft_tokens": sum(d for d, _ in steps),
        "num_spec_tokens": k,
        "acceptance_histogram": {str(j): acc.count(j) for j in range(k + 1) if acc.count(j)},
        "per_step_accepted": acc,
        "per_step_drafted": [d for d, _ in steps],
    }
    return json.dumps({"metrics": {"speculative_decoding": spec}})


def sglang_meta(steps: list) -> str:
    k = max(d for d, _ in steps)
    acc = [a for _, a in steps]
    meta = {
        "completion_tokens": sum(acc) + len(steps) + 1,  # each step's accepted + 1, and the prompt's token
        "spec_verify_ct": len(steps),
        "spec_num_correct_drafts": sum(acc),
        "spec_num_proposed_drafts": sum(d for d, _ in steps),
        "spec_correct_drafts_histogram": [acc.count(j) for j in range(k + 1)],
    }
    return json.dumps({"text": "", "meta_info": meta})


BUILDERS = {"vllm-prometheus": vllm_text, "vllm-request": vllm_request, "sglang": sglang_meta}


def tau_as_defined(run) -> Fraction:
    """τ from the per-position rates, as the engine defines both: 1 + Σ rate_i, plus (SGLang) the tokens no verify
    step committed, per step."""
    extra = Fraction(run.tokens - run.accepted - run.steps, run.steps) if run.kind == "sglang" else 0
    return 1 + sum(em.position_rates(run)) + extra


def wrong_tau(run) -> Fraction:
    """A wrong definition (the confusion the field warns of): τ as accepted drafts per step, no bonus token."""
    return sum(em.position_rates(run))


def definitions_agree(run, tau_of) -> bool:
    """τ as read, τ from its per-position rates and τ from its rate through the engine's link all agree."""
    linked = em.evaluate(run.reader.link, {**run.counts(), "rate": em.rate(run)})
    return em.tau(run) == tau_of(run) == linked


STEPS = st.integers(1, 8).flatmap(
    lambda k: st.lists(st.tuples(st.just(k), st.integers(0, k)), min_size=1, max_size=60)
)


@settings(max_examples=60, deadline=None)
@given(steps=STEPS, kind=st.sampled_from(sorted(BUILDERS)))
def test_tau_and_the_per_position_rates_agree_as_each_engine_defines_them(steps, kind):
    """For any run, τ as the reader reads it equals 1 + the sum of the per-position rates (SGLang: plus the tokens
    no verify step committed) and τ through the rate and the engine's link; the per-position counts are the steps
    that accepted more than i drafts. A wrong definition of τ (no bonus token) fails the same check."""
    run = em.read_metrics(BUILDERS[kind](steps))
    assert run.per_position == tuple(sum(a > i for _, a in steps) for i in range(steps[0][0]))
    assert em.rate(run) == Fraction(sum(a for _, a in steps), sum(d for d, _ in steps))
    assert definitions_agree(run, tau_as_defined)
    assert not definitions_agree(run, wrong_tau)  # the negative control


def test_the_negative_control_sees_a_per_position_rate_over_drafts():
    """Another wrong definition, per-position rates over drafted tokens instead of steps, breaks the agreement."""
    run = em.read_metrics(text_of("vllm-metrics.prom"))
    over_drafts = 1 + sum(Fraction(n, run.drafted) for n in run.per_position)
    assert tau_as_defined(run) == em.tau(run) != over_drafts


# -- the prediction is the cost model's ----------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(a=st.floats(0, 1), gamma=st.integers(1, 16), c=st.floats(0, 2), v=st.floats(1, 20))
def test_equal_alphas_give_the_cost_models_predicted_speedup(a, gamma, c, v):
    """costmodel.predicted_speedup_each with γ equal α is predicted_speedup(α, γ, c, v) (one formula)."""
    each = costmodel.predicted_speedup_each([a] * gamma, c, v)
    assert math.isclose(each, costmodel.predicted_speedup(a, gamma, c, v), rel_tol=1e-9)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_the_prediction_equals_the_cost_models_for_the_same_inputs(name):
    """predict() is E(α…) ÷ (γc + v(γ + 1)) from costmodel for the α the counts imply; the α solved from τ gives
    the cost model's own E at that α."""
    run = em.read_metrics(text_of(name))
    costs = em.Costs(c=0.05, points=((5, 1.1), (9, 1.3)))
    for gamma in (1, 4, 8):
        p = em.predict(run, gamma, costs)
        alphas = em.alphas_for(run, gamma).values
        assert len(alphas) == gamma
        v = costmodel.verify_curve({1: 1.0, 5: 1.1, 9: 1.3})(gamma + 1)
        assert p.speedup == costmodel.predicted_speedup_each(alphas, 0.05, v)
        if len(set(alphas)) == 1:
            assert math.isclose(
                p.speedup, costmodel.predicted_speedup(alphas[0], gamma, 0.05, v), rel_tol=1e-9
            )


def test_alphas_from_per_position_counts_then_the_pooled_alpha():
    """Per-position α_i where counted; beyond them the cost model's pooled α (accepted ÷ tested)."""
    run = em.read_metrics(text_of("vllm-metrics.prom"))
    values = em.alphas_for(run, 5).values
    assert values[:3] == [290 / 400, 205 / 290, 141 / 205]
    assert values[3:] == [costmodel.alpha(636, 259)] * 2


def test_the_solved_alpha_gives_the_counts_tau():
    """Without per-position counts, the one α whose E(α, drafts per step) is the counts' τ."""
    run = em.read_metrics(text_of("llamacpp-server-timings.json"))
    a = em.alphas_for(run, 3).values[0]
    assert math.isclose(costmodel.expected_tokens(a, 240 / 70), 200 / 70, rel_tol=1e-9)


def test_a_gpu_preset_costs_follow_the_roofline():
    """c and v(n) from costmodel.floors on the datasheet figures: memory-bound, c is draft ÷ target parameters and
    v(n) = 1 below the ridge; past it the compute floor takes over."""
    h100 = em.GPUS["H100 SXM"]
    costs = em.preset_costs(h100, 8e9, 1e9)
    assert math.isclose(costs.c, 1 / 8) and costs.v(5) == 1.0
    ridge = h100.flops / h100.bandwidth  # FLOPs per byte at which the two floors meet (2 FLOPs per 2 bytes)
    assert em.forward_seconds(int(ridge * 2), h100, 8e9) > em.forward_seconds(1, h100, 8e9)
    for gpu in em.GPUS.values():
        assert gpu.source and gpu.bandwidth > 1e11 and gpu.flops > 1e13


@pytest.mark.parametrize("gpu", list(em.GPUS))
def test_the_printed_prediction_reproduces_from_its_printed_inputs(gpu):
    """The prediction's E from its printed α, the cost from its printed c and v, the speedup from E and the cost,
    and the preset's c and v from its printed times."""
    run = em.read_metrics(text_of("vllm-metrics.prom"))
    for costs in (em.preset_costs(em.GPUS[gpu], 7e9, 0.5e9), em.Costs(c=0.07, points=((5, 1.12),))):
        html = ev.prediction_html(run, costs, 4)
        alphas = [
            Fraction(*map(int, t.split("/"))) if "/" in t else Fraction(t)
            for t in re.findall(r"α\S = (\d+(?:/\d+)?(?:\.\d+)?)", html)
        ]
        e = re.search(r"E = 1 \+ α₁ \+ α₁α₂ \+ … = <b>([\d.]+)</b>", html)[1]
        assert f"{costmodel.expected_tokens_each(alphas):.2f}" == e
        g, c, v, cost = re.search(r"= (\d+)·([\d.]+) \+ ([\d.]+) = <b>([\d.]+)</b>", html).groups()
        assert f"{int(g) * float(c) + float(v):.2f}" == cost
        speedup = re.search(r'data-e="([\d.]+)" data-cost="([\d.]+)">([\d.]+)×', html)
        assert f"{float(speedup[1]) / float(speedup[2]):.2f}" == speedup[3]
        for num, den, q in re.findall(r"([\d.]+) ÷ ([\d.]+) = <b>([\d.]+)</b>", html):
            assert f"{float(num) / float(den):.{len(q.split('.')[1])}f}" == q


def test_the_views_render_for_every_fixture_with_the_engine_named():
    """render() gives every view; the summary names the engine; figures say when a report has no per-position
    counts or histogram rather than drawing nothing."""
    costs = em.Costs(c=0.05, points=((5, 1.1),))
    for name in EXPECTED:
        run = em.read_metrics(text_of(name))
        views = ev.render(run, 4, costs)
        assert set(views) == set(ev.VIEWS)
        assert run.reader.engine in views["summary"]
        if not run.per_position:
            assert "no per-position counts" in views["positions"].layout.annotations[0].text
        gammas = views["whatif_gamma"].data[0].x
        assert list(gammas) == list(range(1, 17))


def test_text_from_a_report_is_escaped():
    """A label or field a report carries never reaches the page as markup."""
    text = vllm_prom('model_name="Qwen/Qwen2.5-7B-Instruct"', 'model_name="<b>x</b>"').replace(
        'engine="0",model_name="<b>x</b>"', 'engine="0",model_name="<img src=x>"', 1
    )
    run = em.read_metrics(text)
    html = ev.summary_html(run)
    assert "<img" not in html


def test_evaluate_takes_only_arithmetic():
    """The formula evaluator reads + − × ÷, parentheses, whole numbers and names; nothing else."""
    assert em.evaluate("({a} − 1) × 2 ÷ {b}", {"a": 5, "b": 4}) == 2
    assert em.evaluate("{a} ÷ {b}", {"a": 1, "b": 0}) is None and em.evaluate("{a} + 1", {"a": None}) is None
    with pytest.raises(ValueError, match="term"):
        em.evaluate("__import__('os')", {})
    assert isinstance(ast.parse("1"), ast.Module)
