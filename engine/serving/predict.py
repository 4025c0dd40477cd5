"""The α a report's counts imply and the cost model's prediction for a visitor's γ and costs (typed, or from a
GPU preset's roofline). Plain Python, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from .. import costmodel
from ..config import MAX_GAMMA
from ..figures import Exact
from .checks import drafted_nothing
from .run import MetricsRun, pooled_counts, position_alphas, rate, tau


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


def predictable(run: MetricsRun) -> bool:
    """Whether the counts imply an α: not where the report drafted nothing."""
    return not drafted_nothing(run) and (tau(run) is not None or rate(run) is not None)


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
    if not predictable(run):
        raise ValueError("this report drafted nothing: no α to predict from")
    per_step = Fraction(run.drafted, run.steps) if run.steps and run.drafted else Fraction(gamma)
    if run.accepted is None:  # an older SGLang: its own τ, every output token per verify step
        counts_tau = tau(run)
    else:
        counts_tau = 1 + Fraction(run.accepted, run.steps) if run.steps else 1 + rate(run) * per_step
    a = alpha_for_tokens(float(counts_tau), float(per_step))
    g, t = Exact(per_step).text(), Exact(counts_tau).text()
    how = (
        f"one α at every position, the one at which E(α, {g}) = {t}, SGLang's τ (completion_tokens ÷ "
        f"spec_verify_ct) at your γ = {g}: this meta_info counts no drafts"
        if run.accepted is None
        else f"one α at every position, the one at which E(α, {g}) = {t}, the counts' tokens per step at their "
        "mean drafts per step"
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
