"""Median per-prompt speedup over our AR for each config of a bench results.json.

.venv/bin/python tools/medians.py benchmarks/results/grounded.json
"""

import json
import statistics
import sys

results = json.load(open(sys.argv[1]))
configs = [k for k in results["prompts"][0]["results"] if k != "ours/ar"]
for name in configs:
    ratios = [p["results"][name]["speedup_vs_ar"] for p in results["prompts"] if name in p["results"]]
    print(
        f"{name:28s} median {statistics.median(ratios):.2f}x  per prompt: "
        + " ".join(f"{r:.2f}" for r in ratios)
    )
best = [
    max(v["speedup_vs_ar"] for k, v in p["results"].items() if k != "ours/ar") for p in results["prompts"]
]
print(f"{'best drafter per prompt':28s} median {statistics.median(best):.2f}x")
