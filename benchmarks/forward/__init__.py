"""Where a forward's time goes: `python -m benchmarks forward PROBE [ARGS]` runs one of these probes
(ops: forward_ops, gemm: small_gemm, step: step_cost, dtype: dtype_cost, onednn: onednn_cost, layouts, native:
native_cost, levels, prefetch, compile: compile_cost, prefill: prefill_blocks)."""
