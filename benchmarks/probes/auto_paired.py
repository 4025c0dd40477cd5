"""`auto` against our AR and against an earlier commit's auto.py, paired per question: each question's wall time (as
Spec-Bench times a turn: engine.generate around the whole generation) of every contestant in the same pass, the
order rotating per question and pass, on Spec-Bench's first turns of the chosen categories (4 per category, seed 0).

    .venv/bin/python -m benchmarks.probes.auto_paired --category qa --passes 16 --against 4eb9b6b

The earlier auto.py is read with `git show REV:engine/drafters/auto.py` and swapped in for its contestant's runs
(the rest of the engine is this tree's; each contestant is its own Engine, so its own Memory). One warm-up pass over
every category first. Prints per contestant the median of its per-question speed ratios to our AR (AR's wall ÷ its
wall), their mean, the ratio of the summed walls and the interquartile range: a change of a fraction of a percent
shows only over many passes (the spread between questions is a few percent).
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import host_line
from benchmarks.specbench_run import encode_turns
from benchmarks.timing import time_ours
from engine import Engine, GenerationConfig, load_model
from engine import specbench as sb
from engine.drafters import auto

ROOT = Path(__file__).resolve().parents[2]


def earlier_auto(rev: str):
    """The AutoDrafter class of auto.py at commit `rev`, its package-relative imports read from this tree's engine."""
    source = subprocess.run(
        ["git", "show", f"{rev}:engine/drafters/auto.py"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    source = source.replace("from .. import", "from engine import").replace("from ..", "from engine.")
    source = source.replace("from .", "from engine.drafters.")
    path = Path(tempfile.mkdtemp()) / f"auto_{rev}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module.AutoDrafter


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--category", default="qa", help="comma-separated Spec-Bench categories")
    p.add_argument("--passes", type=int, default=8)
    p.add_argument("--against", default="HEAD", help="the commit whose auto.py runs beside this tree's")
    p.add_argument("--spec", default="auto")
    p.add_argument("--also", default="", help="comma-separated fixed drafters to pair as well (e.g. ngram)")
    p.add_argument(
        "--whole",
        action="store_true",
        help="every pass runs the whole sample in Spec-Bench's order (what auto learns carries across categories, "
        "as in the benchmark); only --category's questions are counted",
    )
    args = p.parse_args()
    cats = args.category.split(",")
    target = load_model("embedded")
    classes = {"new": auto.AutoDrafter, "old": earlier_auto(args.against)}
    engines = {
        "ar": Engine(target, "self"),
        "new": Engine(target, args.spec),
        "old": Engine(target, args.spec),
        **{name: Engine(target, name) for name in filter(None, args.also.split(","))},
    }
    questions = sb.sample(sb.load_questions(), 4, 0)
    ratios, walls, names = collections.defaultdict(list), collections.defaultdict(float), list(engines)
    per = collections.defaultdict(list)
    cfg = GenerationConfig(gamma=4, max_new_tokens=64)
    for n in range(args.passes + 1):  # pass 0: the warm-up over every category
        for i, q in enumerate(questions):
            if n and q["group"] not in cats and not args.whole:
                continue
            ids = encode_turns(target.tokenizer, q["turns"], [])
            k = (n + i) % len(names)
            wall = {}
            for name in names[k:] + names[:k]:
                auto.AutoDrafter = classes.get(name, classes["new"])  # what auto's factory builds this run
                mode = "ar" if name == "ar" else "speculative"
                wall[name] = time_ours(engines[name], ids, cfg, mode).wall_s
            auto.AutoDrafter = classes["new"]
            if n and q["group"] in cats:
                for name in names:
                    per[name, q["group"]].append(wall["ar"] / wall[name])
                    ratios[name].append(wall["ar"] / wall[name])
                    walls[name] += wall[name]
    print(
        host_line(),
        f"categories {args.category}, {args.passes} passes, {args.spec}: this tree (new), {args.against} (old)",
    )
    for name in names:
        r = sorted(ratios[name])
        print(
            f"{name:4s} speed ÷ AR: median {statistics.median(r):.3f}  mean {statistics.fmean(r):.3f}  summed walls "
            f"{walls['ar'] / walls[name]:.3f}  (interquartile {r[len(r) // 4]:.3f}-{r[3 * len(r) // 4]:.3f}, n={len(r)})"
        )
    if len(cats) > 1:
        for cat in cats:
            medians = "  ".join(f"{name} {statistics.median(per[name, cat]):.3f}" for name in names[1:])
            print(f"  {cat}: median speed ÷ AR  {medians}")


if __name__ == "__main__":
    main()
