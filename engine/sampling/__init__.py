"""The rules of speculative decoding on tensors: shaping p and q, drawing, the accept / resample tests of a
chain (chain.py, re-exported here) and of a token tree (tree.py). No models and no caches in this room.
"""

from .chain import Verdict, accept_greedy, accept_sample, pick, residual, shape_probs, topk_list

__all__ = ["Verdict", "accept_greedy", "accept_sample", "pick", "residual", "shape_probs", "topk_list"]
