"""Recorders: other engines' speculative runs as specviz traces (trace.py builds the events; hf.py records
transformers' assisted generation, llama_cpp.py llama-cpp-python's draft model)."""
