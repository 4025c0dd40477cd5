"""The benchmark harness, `python -m benchmarks` and its subcommands (specbench, batch, soak, forward).

Modules: harness.py (runs the contestants interleaved, writes results.json), timing.py (contestants, clocks, the
event-stream overhead), hf_equiv.py (one timed transformers generate(); the specs as its kwargs: engine/recorders/hf.py), bench_stats.py
(medians, totals, head-to-head), report.py (Markdown and the plotly report), specbench_run.py, batch_bench.py,
beam_bench.py, training_free.py, soak.py and load_app.py (the app under load), llama_cpp_peer.py (`make peer`),
gpu_check.py (the GPU path's smoke test). forward/: where a forward's time goes (`python -m benchmarks forward`);
probes/: the one-off measurements behind decisions in docs/benchmarks.md; results/: every result file the docs
cite. This package imports engine; engine never imports it.
"""
