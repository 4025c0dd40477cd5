"""The benchmark harness on tiny random-weight models: it runs, writes its three outputs, flags mismatches."""

from __future__ import annotations

import json

import pytest

from benchmarks import harness as bench
from benchmarks.__main__ import main
from engine.recorders.hf import hf_equivalent
from engine.runtime.models import load_model
from engine.specs import FAMILIES

PROMPTS = [{"category": "chat", "prompt": "Say hello."}, {"category": "code", "prompt": "Write a loop."}]


def test_hf_equivalent_maps_specs(tiny_dirs):
    """Each drafter spec maps to its transformers counterpart, or to None when there is none."""
    target = load_model(tiny_dirs["target"])
    kw, safe = hf_equivalent("self", 3, target)
    assert kw["assistant_model"] is target.model and safe["num_assistant_tokens"] == 3
    assert (
        safe["assistant_confidence_threshold"] == 0.0 and safe["num_assistant_tokens_schedule"] == "constant"
    )
    kw, safe = hf_equivalent(f"model:{tiny_dirs['sharp']}", 2, target)
    assert kw["assistant_model"] is load_model(tiny_dirs["sharp"]).model
    assert hf_equivalent("ngram", 4, target)[1] == {
        "prompt_lookup_num_tokens": 4,
        "max_matching_ngram_size": FAMILIES["ngram"].args[0].default,
    }
    assert hf_equivalent("ngram:2", 4, target)[1]["max_matching_ngram_size"] == 2
    assert hf_equivalent("layerskip:1", 2, target)[1]["assistant_early_exit"] == 1
    assert hf_equivalent("quant:int8", 2, target) is None
    assert hf_equivalent("auto", 2, target) is None


def test_cli_bench_writes_outputs(tiny_dirs, tmp_path):
    """`python -m benchmarks` on tiny models writes results.json/.md/report.html, all outputs identical."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps(p) for p in PROMPTS) + "\n")
    out = tmp_path / "out"
    rc = main(
        [
            "--target",
            tiny_dirs["target"],
            "--drafts",
            f"self,model:{tiny_dirs['sharp']}",
            "--gammas",
            "2",
            "--prompts",
            str(prompts),
            "--max-new-tokens",
            "6",
            "--repeats",
            "1",
            "--overhead-pairs",
            "1",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    results = json.loads((out / "results.json").read_text())
    names = {c["name"] for c in results["configs"]}
    assert {
        "ours/ar",
        "ours/self/g2",
        "hf/greedy",
        "hf/self/g2",
        f"hf/model:{tiny_dirs['sharp']}/g2",
    } <= names
    assert results["mismatches"] == 0 and not results["errors"]
    assert results["machine"]["torch"] and "python -m benchmarks --target" in results["command"]
    assert results["overall"]["ours/self/g2"]["acceptance_rate"] == 1.0  # self-drafting accepts every draft
    assert results["overhead"]["ratio"] is not None
    md = (out / "results.md").read_text()
    assert "## Overall" in md and "MISMATCH" not in md
    pairs = {(r["ours"], r["hf"]) for r in results["head_to_head"]}
    assert {
        ("ours/ar", "hf/greedy"),
        ("ours/self/g2", "hf/self/g2"),
    } <= pairs  # each paired with its counterpart
    row = next(r for r in results["head_to_head"] if r["ours"] == "ours/self/g2")
    assert row["ratio"] == pytest.approx(
        results["overall"]["ours/self/g2"]["tokens_per_s"] / results["overall"]["hf/self/g2"]["tokens_per_s"]
    )
    assert {r["ours"]: r["kind"] for r in results["head_to_head"]}["ours/ar"] == "greedy" and row[
        "kind"
    ] == "assisted"
    assert "## Ours vs transformers" in md
    page = (out / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "Speedup vs γ" in page
    assert "cdn.plot.ly" not in page.split("<script", 2)[1][:200]  # plotly.js is inlined, not fetched


def test_mismatch_is_flagged(tiny_dirs, tmp_path, monkeypatch):
    """A transformers output that differs from our AR output is counted and flagged, not fatal."""
    real = bench.time_hf

    def corrupt(target, ids, max_new_tokens, config):
        sample = real(target, ids, max_new_tokens, config)
        if config.name == "hf/greedy":
            sample.token_ids[-1] = (sample.token_ids[-1] + 1) % 49152
        return sample

    monkeypatch.setattr(bench, "time_hf", corrupt)
    results = bench.run_bench(
        target=tiny_dirs["target"],
        drafts=["self"],
        gammas=[2],
        prompts=PROMPTS,
        max_new_tokens=5,
        repeats=1,
        out=tmp_path,
        overhead_pairs=0,
        progress=False,
    )
    assert results["mismatches"] == 2  # hf/greedy on both prompts
    assert {m["config"] for m in results["mismatch_details"]} == {"hf/greedy"}
    assert results["mismatch_details"][0]["first_diff"] == 4
    assert results["overall"]["hf/greedy"]["identical"] is False
    from benchmarks.report import markdown

    assert "MISMATCH" in markdown(results)


def test_unknown_drafter_is_a_clear_error(tiny_dirs, tmp_path):
    """A drafter spec the engine does not know stops the bench before any timing, with a readable error."""
    with pytest.raises(ValueError, match="draft spec"):
        bench.run_bench(
            target=tiny_dirs["target"],
            drafts=["nonsense"],
            gammas=[2],
            prompts=PROMPTS,
            max_new_tokens=3,
            repeats=1,
            out=tmp_path,
            progress=False,
        )


def test_transformers_runs_on_the_engines_own_model_unchanged(tiny_dirs, tmp_path, monkeypatch):
    """transformers is timed on the very model the engine loaded, with its weights as loaded: the lean
    forward owns its fused copies, so no stock copy is needed and `self` assists with that same model."""
    seen = []
    real = bench.time_hf

    def spy(target, ids, max_new_tokens, config):
        seen.append((target.model, config.hf_kwargs.get("assistant_model")))
        return real(target, ids, max_new_tokens, config)

    monkeypatch.setattr(bench, "time_hf", spy)
    ours = load_model(tiny_dirs["target"]).model
    before = {name: p.data_ptr() for name, p in ours.named_parameters()}
    bench.run_bench(
        target=tiny_dirs["target"],
        drafts=["self"],
        gammas=[2],
        prompts=PROMPTS[:1],
        max_new_tokens=3,
        repeats=1,
        out=tmp_path,
        overhead_pairs=0,
        progress=False,
    )
    assert {id(m) for pair in seen for m in pair if m is not None} == {id(ours)}
    assert {name: p.data_ptr() for name, p in ours.named_parameters()} == before
    assert all(p.is_contiguous() for p in ours.parameters())


def test_cli_bench_beams_counts_forwards_saved(tiny_dirs, tmp_path, capsys):
    """`python -m benchmarks --num-beams 2` races speculative vs plain beam search per drafter and γ: every
    row has the same beams in both lanes and forwards saved = plain forwards − speculative forwards; a bad
    width or a drafter beam search cannot use is refused before any run, naming the setting."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps(p) for p in PROMPTS) + "\n")
    out = tmp_path / "out"
    rc = main(
        [
            "--target",
            tiny_dirs["target"],
            "--drafts",
            "self",
            "--gammas",
            "2",
            "--num-beams",
            "2",
            "--prompts",
            str(prompts),
            "--max-new-tokens",
            "6",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    rows = json.loads((out / "beams-self-g2.json").read_text())["rows"]
    assert len(rows) == len(PROMPTS) and all(r["same_beams"] for r in rows)
    # self accepts all
    assert all(r["forwards_saved"] == r["plain_forwards"] - r["spec_forwards"] > 0 for r in rows)
    assert "forwards saved" in (out / "beams-self-g2.md").read_text()
    assert main(["--target", tiny_dirs["target"], "--num-beams", "9", "--out", str(out)]) == 2
    assert "num_beams must be 1 (off) or between 2 and 8" in capsys.readouterr().err
    assert (
        main(
            [
                "--target",
                tiny_dirs["target"],
                "--drafts",
                "layerskip:1",
                "--num-beams",
                "2",
                "--out",
                str(out),
            ]
        )
        == 2
    )
    assert "drafts with 'ngram[:N]' or 'self'" in capsys.readouterr().err


def test_the_report_table_ratios_divide_its_own_cells():
    """The report's "× our AR" and "× HF greedy" cells are the printed tok/s cells divided, over many rates (the
    pooled ratio printed at two decimals beside one-decimal rates could disagree with them)."""
    import random

    from benchmarks.report import COLUMNS, config_table

    rng = random.Random(0)
    configs = [{"name": n, "label": n} for n in ("ours/ar", "hf/greedy", "ours/ngram:4")]
    for _ in range(300):
        rows = {n["name"]: {"tokens_per_s": rng.uniform(1, 300)} for n in configs}
        for row in rows.values():
            row["speedup_vs_ar"] = row["tokens_per_s"] / rows["ours/ar"]["tokens_per_s"]
            row["speedup_vs_hf"] = row["tokens_per_s"] / rows["hf/greedy"]["tokens_per_s"]
        _, table = config_table({"configs": configs}, rows)
        ar, hf = float(table[0][1]), float(table[1][1])
        for cells in table:
            for col, den in (("× our AR", ar), ("× HF greedy", hf)):
                assert (
                    abs(float(cells[COLUMNS.index(col)].rstrip("×")) - float(cells[1]) / den) <= 0.005 + 1e-9
                )
