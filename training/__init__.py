"""Training the draft heads (Medusa, EAGLE) by self-distillation, apart from the engine that runs them.

train.py (`python -m training.train`): the training runs and their held-out accuracy; corpus.py: the material, the
target's own answers and the texts it reads, cached; broad.py, sharegpt.py: the broad sources; prompts.py
(`python -m training.prompts`): the training prompts' generator; heads_probe.py, heads_heldout.py: the probes
behind docs/heads.md. The engine keeps only engine/heads/modules.py (what runs a head) and never imports this
package (tests/test_imports.py).
"""
