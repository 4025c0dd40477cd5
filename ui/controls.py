"""The page's run controls by name: one `Controls` record instead of positional arguments in list order.

app.py builds one component per field and wires them in `FIELDS` order (the only order there is); a
handler receives a `Controls` and reads its fields by name. Plain Python: no gradio, no torch.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass, fields

from engine.config import MAX_GAMMA, GenerationConfig

from .app_guard import check_gamma
from .app_views import EMBEDDED_PAIR, config_kwargs, model_specs


@dataclass(frozen=True)
class Controls:
    """What the controls hold when Generate is pressed (values as Gradio sends them: numbers may be floats)."""

    pair: str = EMBEDDED_PAIR  # model pair label (app_views.PAIRS)
    drafter: str = "ngram"  # a drafter choice (app_views.drafter_choices)
    param: float = 0  # the drafter's number (ngram n, layerskip L); 0 = its default
    gamma: float = 4  # draft tokens per round, 1..16
    adaptive: str = "fixed"  # app_views.ADAPTIVE
    p_min: float = 0.4  # confidence threshold, used with adaptive "confidence (p_min)"
    temperature: float = 0.0  # 0 = greedy
    top_k: float = 0  # 0 = off
    top_p: float = 1.0
    seed: float | None = 0
    max_new: float = 48  # max new tokens, 1..app_views.MAX_NEW_TOKENS
    tree_budget: float = 0  # draft nodes per round, 0 = a chain
    tree_branching: float = 2  # children tried per tree node
    race: bool = False  # race the AR baseline, interleaved
    prompt: str = ""
    # the acceptance rule: "exact", or a LOSSY "typical:EPS,DELTA" (app_views.ACCEPT_CHOICES)
    accept: str = "exact"

    @classmethod
    def of(cls, values) -> "Controls":
        """From the components' values in FIELDS order (how Gradio calls a handler)."""
        return cls(*values)

    def values(self) -> list:
        """The values in FIELDS order (what Gradio's queue takes for the run endpoint)."""
        return list(astuple(self))

    def settings(self, time_limit_s: float | None) -> tuple[str, str, GenerationConfig]:
        """(target spec, draft spec, GenerationConfig); ValueError naming a setting out of range."""
        target, draft = model_specs(self.pair, self.drafter, self.param)
        gamma = check_gamma(self.gamma, MAX_GAMMA)  # the page's words: a slider's box takes 2.5 as typed
        kwargs = config_kwargs(
            gamma,
            self.adaptive,
            self.p_min,
            self.temperature,
            self.top_k,
            self.top_p,
            self.seed,
            self.max_new,
            self.tree_budget,
            self.tree_branching,
            self.accept,
        )
        return target, draft, GenerationConfig(**kwargs, time_limit_s=time_limit_s)


FIELDS = tuple(f.name for f in fields(Controls))  # the wiring order of the components
# the controls a loaded trace sets (controls_of)
TRACE_SETS = (
    "pair",
    "drafter",
    "param",
    "gamma",
    "adaptive",
    "p_min",
    "temperature",
    "top_k",
    "top_p",
    "seed",
    "max_new",
    "tree_budget",
    "tree_branching",
    "prompt",
    "accept",
)
