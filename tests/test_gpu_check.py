"""benchmarks/gpu_check.py as a CPU smoke test, and device -> host reads per round that do not grow with γ."""

import pytest

from benchmarks.gpu_check import HostReads, main, reads_per_round
from engine import Engine, GenerationConfig
from engine.runtime.models import load_model


@pytest.mark.slow  # the whole GPU check script on CPU
def test_gpu_check_runs_on_cpu_with_tiny_shapes():
    """The prepared GPU check runs end to end (tiny shapes, fp32 CPU) and reports every number it promises."""
    r = main(
        [
            "--tiny",
            "--device",
            "cpu",
            "--dtype",
            "fp32",
            "--alphas",
            "0.8",
            "--gammas",
            "2,4",
            "--max-new-tokens",
            "12",
            "--prompts",
            "1",
            "--prompt-tokens",
            "24",
            "--context",
            "16",
            "--trees",
            "suffix,recycle",
        ]
    )
    assert r["draft_c"] > 0 and len(r["oracle"]) == 2
    v = r["verify_curve"]
    assert sorted(v["t"]) == [1, 2, 3, 4, 5, 9, 17] and all(t > 0 for t in v["t"].values())
    assert 1e8 < v["read_rate"] < 1e13 and v["forward"] == "LeanForward"
    assert v["weight_bytes"] > 64 * 128 * 4  # the tiny target's matrices, at least its LM head
    assert [t["spec"] for t in r["trees"]] == ["suffix", "recycle"]
    assert all(t["identical_to_ar"] == t["runs"] == 1 and t["tokens_per_forward"] >= 1 for t in r["trees"])
    for row in r["oracle"]:
        assert row["speedup"] > 0 and row["predicted_speedup"] > 0
        assert row["identical_to_ar"] == row["runs"]  # fp32: greedy speculation is token-identical to AR
    assert r["host_reads"][2]["draft_loop"] == r["host_reads"][4]["draft_loop"]


@pytest.mark.slow  # races at three γ
@pytest.mark.parametrize("spec", ["model", "self"])
def test_host_reads_per_round_do_not_grow_with_gamma(tiny_dirs, spec):
    """A model drafter's loop never reads a tensor on the host per drafted token: γ = 2 and γ = 8 cost the same
    number of reads per round, in the draft loop and in the whole round (one sync per round is the design)."""
    draft = f"model:{tiny_dirs['other']}" if spec == "model" else "self"
    engine = Engine(load_model(tiny_dirs["target"]), draft, measure_step=False)
    ids = engine.encode("The sea at night", True)
    reads = {
        g: reads_per_round(engine, ids, GenerationConfig(gamma=g, max_new_tokens=40, record_topk=0))
        for g in (2, 8)
    }
    assert reads[2] == reads[8], reads
    assert reads[2]["draft_loop"] <= 1


def test_host_read_counter_sees_item_int_and_tolist():
    """Negative control for the counter: each kind of host read is counted (a counter that saw none would pass)."""
    import torch

    t = torch.arange(4)
    with HostReads() as c:
        t.sum().item(), int(t[0]), t.tolist()
    assert c.reads == 3
