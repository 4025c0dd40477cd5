"""The rules of speculative decoding on tensors: shaping p and q, drawing (draws.py: one keyed uniform per
position), the accept / resample tests of a chain (chain.py, re-exported here) and of a token tree (tree.py). No
models and no caches in this room.
"""

from .chain import Verdict, accept_greedy, accept_sample, pick, residual, shape_probs, topk_list
from .draws import Draws, draw_token

__all__ = [
    "Draws",
    "Verdict",
    "accept_greedy",
    "accept_sample",
    "draw_token",
    "pick",
    "residual",
    "shape_probs",
    "topk_list",
]
