"""benchmarks/common.py: the one host line, median and Markdown table every benchmark prints."""

from __future__ import annotations

import math

from benchmarks.common import host, host_line, md_table, median
from engine.runtime.kernels import cpu_name


def test_the_host_line_names_the_cpu_its_flags_threads_and_load():
    h = host()
    line = host_line(h)
    assert line.startswith(cpu_name()) and f"of {h['cpu_count']} CPUs" in line
    assert all(f in line for f in h["flags"]) and ("load " in line) == (h["load_1min"] is not None)
    made = dict(h, cpu="Test CPU", flags=["avx2"], threads=1, cpu_count=2, load_1min=1.5, torch="9")
    assert host_line(made) == "Test CPU (avx2), 1 thread of 2 CPUs, load 1.50, torch 9"


def test_median_skips_what_is_not_a_number_and_md_table_escapes():
    assert median([3, None, float("nan"), 1, 2]) == 2 and math.isnan(median([None]))
    assert md_table(["a", "b"], [[1, None], ["x|y", 2]]).splitlines() == [
        "| a | b |",
        "|---|---|",
        "| 1 | — |",
        "| x\\|y | 2 |",
    ]
