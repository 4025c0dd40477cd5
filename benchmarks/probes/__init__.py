"""One-off measurements behind decisions in docs/benchmarks.md (the kernel plan, the race under load, auto's rounds,
the cost model against an oracle drafter, trees against chains, the Gemma pair), each run as a script."""
