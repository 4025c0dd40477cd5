"""The benchmark harness (`python -m benchmarks`) and the measurement scripts beside it.

Modules: harness.py (runs the contestants interleaved, writes results.json), timing.py (contestants,
clocks, the event-stream overhead), hf_equiv.py (our drafter specs as transformers generate() kwargs),
bench_stats.py (medians, totals, head-to-head), report.py (Markdown and the plotly report).
This package imports engine; engine never imports it. The *.py scripts here run on their own
(`.venv/bin/python benchmarks/step_cost.py`); the *.json / *.md files are results the README quotes.
"""
