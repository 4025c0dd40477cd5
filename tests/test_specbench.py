"""Spec-Bench's data and arithmetic (engine/specbench.py): the committed questions, the category mapping its
evaluation/speed.py uses, a seeded stratified sample, and the speedup as a ratio of mean per-question speeds,
checked against values computed by hand."""

from __future__ import annotations

import pytest

from engine import specbench as sb


def test_the_committed_questions_are_spec_benchs_480_with_their_licence():
    questions = sb.load_questions()
    assert len(questions) == 480
    counts = {g: sum(q["group"] == g for q in questions) for g in sb.GROUPS}
    assert counts == {
        "mt_bench": 80,
        "translation": 80,
        "summarization": 80,
        "qa": 80,
        "math_reasoning": 80,
        "rag": 80,
    }
    assert all(len(q["turns"]) == 2 for q in questions if q["group"] == "mt_bench")
    assert all(len(q["turns"]) == 1 for q in questions if q["group"] != "mt_bench")
    assert "Apache License" in (sb.QUESTIONS.parent / "LICENSE").read_text()
    assert "hemingkx/Spec-Bench" in (sb.QUESTIONS.parent / "README.md").read_text()


def test_mt_benchs_eight_subcategories_report_as_one_column():
    assert [sb.group_of(c) for c in sb.MT_BENCH] == ["mt_bench"] * 8
    # not confused
    assert sb.group_of("math") == "mt_bench" and sb.group_of("math_reasoning") == "math_reasoning"
    assert sb.group_of("rag") == "rag"


def test_the_sample_is_stratified_seeded_and_fixed():
    questions = sb.load_questions()
    a, b = sb.sample(questions, 10, seed=0), sb.sample(questions, 10, seed=0)
    assert a == b and len(a) == 60
    assert all(sum(q["group"] == g for q in a) == 10 for g in sb.GROUPS)
    assert sb.sample(questions, 10, seed=1) != a
    with pytest.raises(ValueError, match="--per-category must be at least 1"):
        sb.sample(questions, 0)


def test_speedup_is_the_ratio_of_mean_speeds_as_spec_bench_computes_it():
    """By hand: two qa questions at 10 and 30 tok/s against a baseline of 10 and 10 → mean 20 / mean 10 = 2.0×,
    while the median of the per-question ratios (1.0, 3.0) is 2.0 too; a third (mt_bench) question whose two
    turns made 60 tokens in 2 + 1 s (20 tok/s) against 10 tok/s. Overall: mean(10, 30, 20) / mean(10, 10, 10)."""
    assert sb.question_speed([40, 20], [2.0, 1.0]) == 20.0  # Σ tokens over turns / Σ seconds
    method = {1: 10.0, 2: 30.0, 3: sb.question_speed([40, 20], [2.0, 1.0])}
    base = {1: 10.0, 2: 10.0, 3: 10.0}
    groups = {1: "qa", 2: "qa", 3: "mt_bench"}
    out = sb.speedups(method, base, groups)
    assert out["qa"] == {"speedup": 2.0, "median_ratio": 2.0, "questions": 2}
    assert out["mt_bench"]["speedup"] == 2.0 and out["overall"]["speedup"] == pytest.approx(20.0 / 10.0)
    # a ratio of means is not a mean of ratios: 30 and 10 tok/s against 10 and 30 → 1.0×, median ratio 1.67
    skew = sb.speedups({1: 30.0, 2: 10.0}, {1: 10.0, 2: 30.0}, {1: "qa", 2: "qa"})["qa"]
    assert skew["speedup"] == 1.0 and skew["median_ratio"] == pytest.approx((3.0 + 1 / 3) / 2)
    assert "translation" not in out  # no question answered: no column
    assert sb.mean_accepted([1, 2, 3, 2]) == 2.0 and sb.mean_accepted([]) is None
    with pytest.raises(ValueError, match="wall times"):
        sb.question_speed([5], [0.0])


def test_a_tiny_end_to_end_run_writes_the_leaderboard(tiny_dirs, tmp_path):
    """Two questions (an MT-bench one with both turns, a qa one) on a random-weight model: every contestant
    answers every turn, greedy speculation equals our AR, the table has a row per contestant and a column per
    category asked, and results.json holds the per-turn tokens and times Spec-Bench's arithmetic reads."""
    import json

    questions = sb.load_questions()
    two = [
        next(q for q in questions if q["group"] == "mt_bench"),
        next(q for q in questions if q["group"] == "qa"),
    ]
    results = tiny_bench(tiny_dirs, tmp_path, two, ("ngram",), max_new_tokens=6, hf=True)
    rows = {r["config"]: r for r in results["leaderboard"]}
    assert set(rows) == {"ours/ar", "ours/ngram/g3", "hf/greedy", "hf/ngram/g3"}
    assert rows["ours/ngram/g3"]["differ_from_ar"] == 0 and rows["hf/greedy"]["differ_from_ar"] == 0
    assert set(rows["ours/ngram/g3"]["speedups"]) == {"mt_bench", "qa", "overall"}
    assert (
        rows["ours/ar"]["speedups"]["overall"]["speedup"] == 1.0
        and rows["ours/ar"]["tokens_per_forward"] == 1.0
    )
    mt = two[0]["question_id"]
    assert len(results["answers"]["ours/ngram/g3"][mt]["new_tokens"]) == 2  # both turns
    table = (tmp_path / "results.md").read_text()
    assert "| method | mt_bench | translation |" in table and "ours ngram γ=3" in table
    a = results["answers"]["ours/ngram/g3"][mt]
    turns = [f"{t / f:.2f}" for t, f in zip(a["new_tokens"], a["forwards"])]
    assert (
        f"- ours ngram γ=3: MT-bench tokens per forward, first turn {turns[0]}, second turn {turns[1]}"
        in table
    )
    assert json.loads((tmp_path / "results.json").read_text())["settings"]["questions"] == 2
    page = (tmp_path / "report.html").read_text()
    assert 'class="specviz specviz-leaderboard" data-rows="4"' in page and ".lb-table" in page


def test_repeated_passes_take_each_turns_median_time_and_show_every_pass(tiny_dirs, tmp_path):
    """--repeats 3: every pass answers the same tokens, a turn's time is the median of its three passes' times, each
    pass keeps its own leaderboard and the table prints each column's lowest and highest pass; auto is set against
    the best fixed drafter raced beside it and against our AR, per column."""
    questions = sb.load_questions()
    two = [next(q for q in questions if q["group"] == g) for g in ("qa", "translation")]
    results = tiny_bench(tiny_dirs, tmp_path, two, ("ngram", "auto"), max_new_tokens=6, repeats=3)
    assert results["settings"]["repeats"] == 3 and len(results["passes"]) == 3
    for rows in results["answers"].values():
        for a in rows.values():
            assert [len(t) for t in a["wall_times"]] == [3] * len(a["wall_time"])
            assert a["wall_time"] == [sorted(t)[1] for t in a["wall_times"]]
    table = (tmp_path / "results.md").read_text()
    assert "median over 3 passes" in table and "lowest – highest speedup per column" in table
    auto = next(r for r in results["leaderboard"] if r["config"] == "ours/auto/g3")
    ngram = next(r for r in results["leaderboard"] if r["config"] == "ours/ngram/g3")
    qa = auto["speedups"]["qa"]["speedup"], ngram["speedups"]["qa"]["speedup"]
    line = next(x for x in table.splitlines() if x.startswith("| ours auto γ=3 | ") and " · " in x)
    assert f"{qa[0] / qa[1]:.2f} (ngram) · {qa[0]:.2f}" in line


def test_a_pass_that_answers_differently_is_refused():
    from benchmarks.specbench_run import median_pass

    def one(tokens, t):
        return {"ours/ar": {"q1": {"token_ids": [tokens], "wall_time": [t]}}}

    merged = median_pass([one([1, 2], 0.3), one([1, 2], 0.1), one([1, 2], 0.2)])
    assert merged["ours/ar"]["q1"]["wall_time"] == [0.2]
    with pytest.raises(RuntimeError, match="ours/ar answered question q1 differently"):
        median_pass([one([1, 2], 0.3), one([1, 3], 0.1)])


def tiny_bench(tiny_dirs, out, questions, drafts, max_new_tokens: int, hf: bool = False, **options):
    """The contestants against AR on the tiny target, γ 3, quietly."""
    from benchmarks.specbench_run import run_specbench

    return run_specbench(
        target=tiny_dirs["target"],
        drafts=drafts,
        gamma=3,
        per_category=None,
        max_new_tokens=max_new_tokens,
        hf=hf,
        out=out,
        questions=questions,
        progress=False,
        command="test",
        **options,
    )


def suffix_bench(tiny_dirs, out, questions, **options):
    """The suffix contestant against AR on the tiny target: γ 3, 12 tokens a turn, no transformers rows."""
    return tiny_bench(tiny_dirs, out, questions, ("suffix",), max_new_tokens=12, **options)


def test_a_session_run_drafts_from_earlier_answers_and_reports_per_column(tiny_dirs, tmp_path):
    """--session: the suffix contestant keeps one history over the sample (its later questions draft from the
    earlier answers: more tokens per forward than without), outputs stay AR's; the per-column table gives α,
    tokens per forward and v(n) for each speculative contestant, and recomputes from results.json."""
    import re

    questions = sb.load_questions()
    same = next(q for q in questions if q["group"] == "qa")
    twice = [same, {**same, "question_id": same["question_id"] + 100_000}]  # the same question asked again
    runs = {
        session: suffix_bench(tiny_dirs, tmp_path / str(session), twice, session=session)
        for session in (False, True)
    }
    forwards = {
        k: sum(sum(a["forwards"]) for a in r["answers"]["ours/suffix/g3"].values()) for k, r in runs.items()
    }
    assert forwards[True] < forwards[False]  # the second asking drafted from the first answer
    assert all(row["differ_from_ar"] == 0 for r in runs.values() for row in r["leaderboard"])
    table = (tmp_path / "True" / "results.md").read_text()
    assert "one session" in table and "one session" not in (tmp_path / "False" / "results.md").read_text()
    row = [line for line in table.splitlines() if line.startswith("| ours suffix γ=3 |")][-1]  # per column
    alpha, tpf = re.search(r"\| ([\d.]+) · ([\d.]+) · v\(\d+\) [\d.]+ \|$", row).groups()
    answers = runs[True]["answers"]["ours/suffix/g3"].values()
    acc, rej, tok, fwd = (
        sum(sum(a[k]) for a in answers) for k in ("accepted", "rejections", "new_tokens", "forwards")
    )
    assert (alpha, tpf) == (f"{acc / (acc + rej):.2f}", f"{tok / fwd:.2f}")
    assert "MT-bench tokens per forward" not in table  # no MT-bench question was asked


def test_a_contestant_may_draft_trees(tiny_dirs):
    """SPEC+tree=BUDGETxBRANCHING races SPEC's trees beside its chains on one engine setting each; transformers has
    no counterpart row for it; a malformed suffix is refused by the one contestant parser, naming the grammar."""
    from benchmarks.harness import build_configs, run_config
    from engine import Engine, load_model
    from engine.specs import ModelLoadError, parse_contestant

    tree = parse_contestant("eagle+tree=16x4")
    assert (tree.drafter, tree.settings()) == ("eagle", {"tree_budget": 16, "tree_branching": 4})
    assert (parse_contestant("ngram:3").drafter, parse_contestant("ngram:3").settings()) == ("ngram:3", {})
    with pytest.raises(ModelLoadError, match=r"SPEC\[@γ\]\[\+tree=BxW\]"):
        parse_contestant("eagle+tree=16")
    target = load_model(tiny_dirs["target"])
    configs, unsupported = build_configs(["self", "self+tree=8x2"], [3], target, hf=True)
    assert "hf/self+tree=8x2/g3" not in {c.name for c in configs} and unsupported == ["self+tree=8x2"]
    engines = {
        "ar": Engine(target, "self"),
        "self": Engine(target, "self"),
        "self+tree=8x2": Engine(target, "self"),
    }
    ids = target.tokenizer("a b c d a b c d a b c d a b c")["input_ids"]
    by = {c.name: run_config(c, engines, target, ids, 12) for c in configs if c.runner == "ours"}
    assert (
        by["ours/self+tree=8x2/g3"].summary["tree_rounds"] > 0
        and by["ours/self/g3"].summary["tree_rounds"] == 0
    )
    assert by["ours/self+tree=8x2/g3"].token_ids == by["ours/ar"].token_ids == by["ours/self/g3"].token_ids


RESULTS = {
    "date": "2026-12-01",
    "command": "python -m benchmarks specbench --per-category 10",
    "machine": {"cpu": "Test <CPU>", "threads": 2},
    "settings": {
        "questions": 60,
        "per_category": 10,
        "seed": 0,
        "gamma": 4,
        "max_new_tokens": 64,
        "target": "embedded",
    },
    "leaderboard": [
        {
            "config": "ours/ar",
            "label": "ours AR",
            "tokens_per_forward": 1.0,
            "tokens_per_s": 30.0,
            "differ_from_ar": 0,
            "speedups": {g: {"speedup": 1.0, "median_ratio": 1.0} for g in (*sb.GROUPS, "overall")},
        },
        {
            "config": "ours/ngram/g4",
            "label": "ours ngram γ=4",
            "tokens_per_forward": 1.73,
            "tokens_per_s": 36.0,
            "differ_from_ar": 0,
            "speedups": {
                "rag": {"speedup": 1.26, "median_ratio": 1.2},
                "overall": {"speedup": 1.16, "median_ratio": 1.1},
            },
        },
    ],
}


def test_the_leaderboard_view_renders_the_committed_table_and_its_caption():
    """One row per contestant, the speedup and median ratio per column ('–' where none), the command, CPU and
    date in the caption (escaped), a bar per (contestant, column) measured; no file: says how to make one."""
    from specviz import render_leaderboard

    html = render_leaderboard(RESULTS, source="benchmarks/results/specbench-cpu.json")
    assert html.count("<tr data-config=") == 2 and "1.26× <small>(1.20)</small>" in html
    assert "<td>–</td>" in html and "1.73" in html and "Test &lt;CPU&gt;" in html and "2026-12-01" in html
    assert "python -m benchmarks specbench --per-category 10" in html and "60 questions" in html
    assert html.count('class="lb-bar') == 7 + 2  # AR in all 7 columns, n-gram in 2
    assert "No committed Spec-Bench run" in render_leaderboard(None)


def test_a_repeated_run_shows_each_cells_lowest_and_highest_pass():
    """A run of 2 passes: each speedup cell adds the lowest and highest of its passes, the caption says the time is
    a median over the passes; a malformed pass is skipped, not an error."""
    import copy

    from specviz import render_leaderboard

    results = copy.deepcopy(RESULTS)
    low, high = copy.deepcopy(RESULTS["leaderboard"]), copy.deepcopy(RESULTS["leaderboard"])
    low[1]["speedups"]["rag"]["speedup"], high[1]["speedups"]["rag"]["speedup"] = 1.19, 1.31
    results["passes"] = [low, high, "not a pass"]
    html = render_leaderboard(results)
    assert '1.26× <small>(1.20)</small><small class="lb-pass"> 1.19–1.31</small>' in html
    assert "median over 3 passes" in html
    assert "lb-pass" not in render_leaderboard(RESULTS)


def test_choosing_a_question_fills_the_prompt_and_turns_the_race_on():
    from ui import specbench as ui_sb

    label = next(lbl for lbl, q in ui_sb.questions().items() if q["group"] == "mt_bench")
    q = ui_sb.questions()[label]
    prompt, race, note = ui_sb.use_question(label)
    assert prompt["value"] == q["turns"][0] and race["value"] is True
    assert "category <b>mt_bench</b>" in note and "2 turns" in note
    assert len(ui_sb.questions()) == 480 and label.startswith("mt_bench · #")


def test_a_corpus_run_drafts_from_the_datastore_afresh_for_each_question(tiny_dirs, tmp_path, monkeypatch):
    """--corpus: each speculative contestant's history starts with the datastore, a fresh copy per question: with
    the target's own answer in it the suffix drafter needs fewer forwards (control: the run without it), every
    question's history holds the datastore alone when it starts (nothing carried over), outputs stay AR's, and
    the table says so."""
    import torch

    from benchmarks import specbench_run
    from engine.drafters.suffix import load_corpus

    seen, answer = [], specbench_run.answer

    def spy(config, engines, loaded, question, max_new_tokens, history=None):
        seen.append((config.name, None if history is None else history.tokens))
        return answer(config, engines, loaded, question, max_new_tokens, history)

    monkeypatch.setattr(specbench_run, "answer", spy)

    same = next(q for q in sb.load_questions() if q["group"] == "qa")
    twice = [same, {**same, "question_id": same["question_id"] + 100_000}]

    def run(name, corpus=None):
        return suffix_bench(tiny_dirs, tmp_path / name, twice, corpus=corpus)

    plain = run("plain")
    ar = [plain["answers"]["ours/ar"][q["question_id"]]["token_ids"][0] for q in twice]
    torch.save([ar[0]], tmp_path / "store.pt")
    assert load_corpus(tmp_path / "store.pt") == [ar[0]]
    stored = run("stored", tmp_path / "store.pt")
    per_question = {
        name: [sum(a["forwards"]) for a in r["answers"]["ours/suffix/g3"].values()]
        for name, r in (("plain", plain), ("stored", stored))
    }
    assert sum(per_question["stored"]) < sum(per_question["plain"])
    stored_seen = seen[
        len(seen) // 2 :
    ]  # the second run's calls: AR gets no history, suffix a fresh datastore
    assert stored_seen == [("ours/ar", None), ("ours/suffix/g3", len(ar[0]))] * 2
    assert all(row["differ_from_ar"] == 0 for row in stored["leaderboard"])
    assert "drafts from the datastore" in (tmp_path / "stored" / "results.md").read_text()
    torch.save({"not": "a list"}, tmp_path / "bad.pt")
    with pytest.raises(ValueError, match="list of token-id lists"):
        load_corpus(tmp_path / "bad.pt")


def test_a_rounds_host_time_is_shown_beside_t1():
    """A row that timed its rounds' forwards apart shows its host work per round and its share of our AR's t(1),
    from the two numbers the row carries (0.45 ms of 6.0 ms = 7.5%); a row without them shows '–'. The per-round
    figure of the turns weighs each turn by its rounds."""
    from benchmarks.specbench_run import per_round
    from specviz import render_leaderboard
    from specviz.leaderboard import host_text

    row = dict(RESULTS["leaderboard"][1], host_ms_per_round=0.45, ar_forward_ms=6.0)
    assert host_text(row) == "0.45 ms (7.5%)" and host_text(RESULTS["leaderboard"][1]) == "–"
    html = render_leaderboard(dict(RESULTS, leaderboard=[RESULTS["leaderboard"][0], row]))
    assert "<td>0.45 ms (7.5%)</td>" in html and "host / round" in html.lower()
    turns = {
        "q1": {"host_per_round_s": [0.001, 0.004], "host_rounds": [30, 10]},
        "q2": {"host_per_round_s": [None]},
    }
    assert per_round(turns, "host_per_round_s") == pytest.approx((0.001 * 30 + 0.004 * 10) / 40)
    assert per_round({"q": {"host_per_round_s": [None], "host_rounds": [5]}}, "host_per_round_s") is None


@pytest.mark.slow  # a child process that imports torch: make test runs it, the inner loop does not
def test_the_command_line_settles_the_heap_as_the_app_does(monkeypatch):
    """settle_heap (one full collection, its survivors frozen) leaves a later full collection only what was made since,
    as the app's start-up leaves it; `python -m benchmarks specbench` asks for it after loading its contestants, so
    its runs are timed as the app serves them. In a child process: the tests' own collector stays as it is. The
    control: the same objects, unsettled, are still walked."""
    import subprocess
    import sys

    import benchmarks.__main__ as cli
    import benchmarks.specbench_run as sr
    from tests.conftest import ROOT

    for settle in (True, False):
        code = (
            "import gc\n"
            + ("from engine.runtime.models import settle_heap\n" if settle else "")
            + "keep = [[i] for i in range(100000)]\n"
            + ("settle_heap()\n" if settle else "")
            + "print(len(gc.get_objects()), gc.get_freeze_count())\n"
        )
        run = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
        )
        walked, frozen = map(int, run.stdout.split())
        assert (frozen >= 100000 and walked < 10000) if settle else (frozen == 0 and walked >= 100000)
    asked = {}
    monkeypatch.setattr(sr, "run_specbench", lambda **kw: asked.update(kw) or {"seconds": 0.0})
    assert cli._specbench(["--drafts", "ngram", "--out", "unused"]) == 0
    assert asked["settle"] is True
