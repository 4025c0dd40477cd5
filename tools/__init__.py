"""Developer tools: a checkout against another (engine_ab), the llama.cpp build flags (peer_cmake_args), the
page's update cost (ui_update), the first token's latency (first_token), medians of a
results file (medians)."""
