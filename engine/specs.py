"""Drafter specs: the one registry of drafter families and the one parser of a spec string. Plain Python.

A spec is what a user types (`ngram:3`, `oracle:0.8:0.1`, `model:HuggingFaceTB/SmolLM2-135M-Instruct`). It is
parsed once, here, into a typed `DraftSpec`; everything downstream reads that: the drafter builders
(engine/drafters/registry.py), beam search's check, the app's drafter choices and the trace loader's
controls, sizing and the model allowlist, and every error message about a spec.

Each `Family` names the module that builds it (`builder`, a dotted path resolved only when a drafter is
built, as transformers' auto mappings name their classes), so this table stays torch-free for the renderers.
Adding a drafter is one file in engine/drafters/ with a `build(spec, target, ctx)` and one line in
`FAMILIES` (or a `register(Family(...))` call: tests/test_registry.py registers a toy one).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .config import WHOLE_SETTINGS, plain_number


class ModelLoadError(ValueError):
    """A model or drafter spec that cannot be loaded, with a message meant for the user."""


@dataclass(frozen=True)
class Arg:
    """One argument of a family's spec, after its name and a colon; `kind`: "int", "float", "choice", "text" or
    "path" (a file the builder reads: the public app allows none but its own)."""

    name: str  # as the usage line writes it ("N", "A")
    kind: str
    low: float | None = None  # int / float: the smallest value allowed (None: no bound)
    high: float | None = None  # int / float: the largest value allowed (None: no bound)
    default: object = None  # when left out; None: the builder picks (from the target, the device)
    choices: tuple = ()  # choice: the values allowed ("" = left out)
    required: bool = False  # the spec is refused without it
    hint: str = ""  # what to write instead, for a refused value


@dataclass(frozen=True)
class Family:
    """A kind of drafter: its spec grammar, where its builder lives and what it can do."""

    name: str  # the spec's name, before any colon
    usage: str  # the grammar as a user writes it: "ngram[:N]"
    what: str  # one line: what drafts
    builder: str  # dotted module path of its `build(spec, target, ctx)` (imported when a drafter is built)
    args: tuple = ()  # Arg, in spec order
    beams: bool = False  # drafts for beam search (propose_beams: per beam, or batched on the B-row cache)
    choice: bool = False  # offered in the app's drafter dropdown
    param: str = ""  # the Arg the app's numeric "n / L" control sets ("" = none)
    model_arg: bool = False  # its one argument names a model to load (checked by the allowlist and sizing)


@dataclass(frozen=True)
class DraftSpec:
    """A parsed spec: the family, the text as given (the drafter's name in events) and its typed arguments."""

    family: Family
    text: str
    values: tuple  # one per Family.args; None where left out and the builder picks

    @property
    def name(self) -> str:
        return self.family.name

    def __getitem__(self, arg: str):
        return self.values[[a.name for a in self.family.args].index(arg)]

    @property
    def path(self) -> str | None:
        """The file a "path" argument names (medusa:PATH, eagle:PATH), None when left out or there is none."""
        return next((v for a, v in zip(self.family.args, self.values) if a.kind == "path"), None)

    @property
    def model(self) -> str | None:
        """The model this spec loads besides the target (model:<id>, in parse_model's normal form), else None."""
        return parse_model(self.values[0], "draft") if self.family.model_arg else None


_MODEL = "engine.drafters.model"
FAMILIES: dict[str, Family] = {}  # name -> Family, in the order the app offers them


def register(family: Family) -> Family:
    """Add (or replace) a family; returns it."""
    FAMILIES[family.name] = family
    return family


for _family in (
    Family(
        "ngram",
        "ngram[:N]",
        "prompt lookup: the continuation of the latest match of the last n <= N tokens",
        "engine.drafters.ngram",
        (Arg("N", "int", 1, 8, default=3),),
        beams=True,
        choice=True,
        param="N",
    ),
    Family(
        "self",
        "self",
        "the target itself, on the target's KV cache (100% greedy acceptance)",
        _MODEL,
        beams=True,
        choice=True,
    ),
    Family(
        "layerskip",
        "layerskip[:L]",
        "the target's first L layers + final norm + LM head (shared weights)",
        _MODEL,
        (Arg("L", "int", 1),),
        choice=True,
        param="L",
    ),
    Family(
        "quant",
        "quant[:int8|bf16|fp16]",
        "a lower-precision copy of the target (int8 dynamic on CPU)",
        _MODEL,
        (Arg("kind", "choice", choices=("", "int8", "bf16", "fp16")),),
        choice=True,
    ),
    Family(
        "medusa",
        "medusa[:PATH]",
        "trained Medusa-1 heads on the target's last hidden state",
        "engine.drafters.heads",
        (Arg("PATH", "path"),),
        choice=True,
    ),
    Family(
        "eagle",
        "eagle[:PATH]",
        "a trained EAGLE-style head drafting on the target's features",
        "engine.drafters.heads",
        (Arg("PATH", "path"),),
        choice=True,
    ),
    Family(
        "auto",
        "auto[:ngram|free|eagle|medusa]",
        "picks drafter and γ each round from measured costs",
        "engine.drafters.auto",
        (
            Arg(
                "offer",
                "choice",
                choices=("", "ngram", "free", "eagle", "medusa"),
                hint="use auto (n-gram, recycling, suffix and, where they fit the target, the trained heads), "
                "auto:ngram (n-gram only), auto:free (n-gram, recycling and suffix: no trained heads), or "
                "auto:eagle / auto:medusa (that head "
                "alone, its chain cut by its confidence, plain rounds where it does not pay)",
            ),
        ),
        choice=True,
    ),
    Family(
        "model",
        "model:<id or path>",
        "a separate causal LM (another vocabulary: drafted through text)",
        _MODEL,
        (
            Arg(
                "id",
                "text",
                required=True,
                hint="needs a hub id or a path, e.g. model:HuggingFaceTB/SmolLM2-135M",
            ),
        ),
        model_arg=True,
    ),
    Family(
        "lookahead",
        "lookahead[:W,N,G,SIZING]",
        "lookahead decoding: the target's own Jacobi window fills an n-gram "
        "pool; its n-grams after the last token are verified as a tree in the same forward, sized to this "
        "host's verify costs (static: every candidate)",
        "engine.drafters.lookahead",
        (
            Arg("W", "int", 1, 16, default=4),
            Arg("N", "int", 2, 8, default=4),
            Arg("G", "int", 1, 16, default=4),
            Arg("sizing", "choice", choices=("", "sized", "static")),
        ),
        choice=True,
        param="W",
    ),
    Family(
        "recycle",
        "recycle[:k,TEMPLATE,SIZING]",
        "token recycling: the target's top-k next tokens of every earlier "
        "forward fill a tree template, sized to this host's verify costs (static: the whole template)",
        "engine.drafters.recycle",
        (
            Arg("k", "int", 1, 16, default=8),
            Arg("template", "choice", choices=("", "small", "wide")),
            Arg("sizing", "choice", choices=("", "sized", "static")),
        ),
        choice=True,
        param="k",
    ),
    Family(
        "suffix",
        "suffix[:N,SHAPE]",
        "suffix speculation: the most frequent continuations after the longest "
        "match of the context's suffix (this run and the session's earlier ones), a tree sized to this host's "
        "verify costs",
        "engine.drafters.suffix",
        (Arg("N", "int", 1, 16, default=8), Arg("shape", "choice", choices=("", "tree", "chain"))),
        choice=True,
        param="N",
    ),
    Family(
        "union",
        "union[:N,k]",
        "suffix speculation's and token recycling's candidates merged into one tree (N: the longest suffix "
        "matched, k: the target's top-k kept per token), sized to this host's verify costs",
        "engine.drafters.union",
        (Arg("N", "int", 1, 16, default=8), Arg("k", "int", 1, 16, default=8)),
    ),
    Family(
        "oracle",
        "oracle:A[:C]",
        "the target's greedy continuation, each token kept with probability A",
        "engine.drafters.oracle",
        (
            Arg(
                "A",
                "float",
                0,
                1,
                required=True,
                hint="use oracle:A[:C] with A the "
                "acceptance in [0, 1] and C the draft cost in target steps, e.g. oracle:0.8 "
                "or oracle:0.8:0.1",
            ),
            Arg("C", "float", 0, 10, default=0.0),
        ),
    ),
):
    register(_family)


def usages() -> str:
    """Every family's grammar, for an error message: "ngram[:N], self, ..."."""
    return ", ".join(f.usage for f in FAMILIES.values())


def parse_draft(text: str | DraftSpec) -> DraftSpec:
    """The one parser of a drafter spec; ModelLoadError naming the family, the argument and its range. A DraftSpec
    passes through unchanged, so every reader may take either."""
    if isinstance(text, DraftSpec):
        return text
    if not isinstance(text, str):
        raise ModelLoadError(f"a draft spec is text such as 'ngram', got {type(text).__name__}")
    text = text.strip()
    name, colon, rest = text.partition(":")
    family = FAMILIES.get(name.strip().lower())  # "NGRAM", " ngram " and "ngram" are one family
    if family is None:
        raise ModelLoadError(f"unknown draft spec {text[:80]!r}: use {usages()}")
    if colon and not family.args:
        raise ModelLoadError(f"draft spec {text[:80]!r}: {family.name} takes no argument")
    # the normal form: what every reader sees
    text = family.name + (":" + rest.strip() if rest.strip() else "")
    if all(a.kind in ("int", "float", "choice") for a in family.args):
        rest = rest.replace(",", ":")  # numbers and choices may be written lookahead:5,4,5 as well as 5:4:5
    parts = rest.split(":", len(family.args) - 1) if colon else []
    values = tuple(
        _value(text, family, arg, parts[i] if i < len(parts) else "") for i, arg in enumerate(family.args)
    )
    return DraftSpec(family, text, values)


def family(text) -> str:
    """The family name of a spec or of a drafter name an event recorded ("ngram:3" -> "ngram", "auto" -> "auto"),
    "" when it names none: the one place a name is read back to its family (a trace may hold a spec whose
    arguments today's ranges refuse; its family is still its name)."""
    try:
        return parse_draft(text).name
    except ModelLoadError:
        name = str(text or "").strip().partition(":")[0].strip().lower()
        return name if name in FAMILIES else ""


CONTESTANT_USAGE = "ar, or SPEC[@γ][+tree=BxW] (ngram@4, eagle+tree=16x4, ngram@4+tree=12x3)"
_CONTESTANT = re.compile(
    r"(?P<spec>.*?)(?:@(?P<gamma>[^+]*))?(?:\+tree=(?P<budget>[^x]*)x(?P<branching>.*))?"
)


@dataclass(frozen=True)
class Contestant:
    """One contestant of a benchmark, as every harness writes it: plain AR ("ar"), or a drafter spec with, after
    `@`, a fixed γ and, after `+tree=`, a tree of at most B nodes with W children tried per node."""

    text: str  # the normal form: what tables and result files name it
    spec: DraftSpec | None  # None: plain AR
    gamma: int | None = None  # a fixed γ; None: the run's (auto picks its own each round)
    tree_budget: int = 0  # 0: a chain
    tree_branching: int = 0

    @property
    def drafter(self) -> str:
        """The drafter spec an Engine is built with ("ar": the AR contestant's own engine)."""
        return self.spec.text if self.spec is not None else "ar"

    def settings(self) -> dict:
        """The GenerationConfig fields this contestant fixes (γ when fixed, the tree's shape when a tree)."""
        out = {} if self.gamma is None else {"gamma": self.gamma}
        if self.tree_budget:
            out.update(tree_budget=self.tree_budget, tree_branching=self.tree_branching)
        return out


def parse_contestant(text: str | Contestant) -> Contestant:
    """The one parser of a benchmark contestant (CONTESTANT_USAGE); ModelLoadError naming the part refused."""
    if isinstance(text, Contestant):
        return text
    raw = "".join(str(text).split())
    if raw.lower() == "ar":
        return Contestant("ar", None)
    m = _CONTESTANT.fullmatch(raw)
    if "+tree" in m["spec"] or "@" in m["spec"]:
        raise ModelLoadError(f"contestant {raw[:80]!r}: write {CONTESTANT_USAGE}")
    spec = parse_draft(m["spec"])
    gamma = _whole(raw, "γ", m["gamma"], "gamma") if m["gamma"] is not None else None
    budget = _whole(raw, "the tree's B", m["budget"], "tree_budget") if m["budget"] is not None else 0
    branching = (
        _whole(raw, "the tree's W", m["branching"], "tree_branching") if m["budget"] is not None else 0
    )
    if m["budget"] is not None and budget == 0:
        raise ModelLoadError(f"contestant {raw[:80]!r}: the tree's B must be at least 1, got 0")
    text = (
        spec.text
        + (f"@{gamma}" if gamma is not None else "")
        + (f"+tree={budget}x{branching}" if budget else "")
    )
    return Contestant(text, spec, gamma, budget, branching)


def _whole(raw: str, what: str, value: str, setting: str) -> int:
    """A contestant's whole number in its setting's range (config.WHOLE_SETTINGS)."""
    low, high, said = WHOLE_SETTINGS[setting]
    try:
        n = plain_number(value, whole=True)
    except ValueError:
        n = None
    if n is None or n < low or (high is not None and n > high):
        raise ModelLoadError(f"contestant {raw[:80]!r}: {what} must be a whole number {said}, got {value!r}")
    return n


EMBEDDED = "embedded"  # SmolLM2-135M-Instruct (the default target)
EMBEDDED_GEMMA = "embedded-gemma"  # Gemma-3-270M, the pretrained base model (raw-text continuation)
KEYWORDS = (EMBEDDED, EMBEDDED_GEMMA)  # the embedded models' names (any case)


def parse_model(text, role: str = "target") -> str:
    """The one parser of a model spec ("embedded", "embedded-gemma", a hub id or a local directory): the text
    stripped, the keywords in lower case; ModelLoadError for an empty or non-text spec or a control character."""
    if not isinstance(text, str) or not text.strip():
        raise ModelLoadError(f"{role} model spec is empty: use 'embedded', a hub id or a local directory")
    text = text.strip()
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in text):
        raise ModelLoadError(f"{role} model spec {text[:80]!r} holds a control character")
    return text.lower() if text.lower() in KEYWORDS else text


def _value(text: str, family: Family, arg: Arg, raw: str):
    """One argument's typed value (its default when left out)."""
    raw = raw.strip()
    where = f"draft spec {text[:80]!r}"
    if not raw:
        if arg.required:
            raise ModelLoadError(f"{where}: {arg.hint or f'{family.usage} needs {arg.name}'}")
        return arg.default
    if arg.kind in ("text", "path"):
        return raw
    if arg.kind == "choice":
        raw = raw.lower()
        if raw not in arg.choices:
            named = [c for c in arg.choices if c]
            allowed = ", ".join(named[:-1]) + f" or {named[-1]}" if len(named) > 1 else named[0]
            raise ModelLoadError(
                f"{where}: {arg.hint}"
                if arg.hint
                else f"{family.name} {arg.name} must be {allowed}, got {raw[:40]!r}"
            )
        return raw
    try:
        value = plain_number(raw, arg.kind == "int")
    except ValueError:
        raise ModelLoadError(
            f"{where}: {arg.hint}"
            if arg.hint
            else f"{where}: {raw[:40]!r} is not a {'whole number' if arg.kind == 'int' else 'number'}"
        ) from None
    if (
        value != value
        or (arg.low is not None and value < arg.low)
        or (arg.high is not None and value > arg.high)
    ):
        # NaN included (value != value); inf fails the bounds
        raise ModelLoadError(f"{family.usage} needs {_range(family)}, got {text[:80]!r}")
    return value


def _range(family: Family) -> str:
    """'1 <= N <= 8' (each bounded argument's range, joined with 'and')."""

    def one(a: Arg) -> str:
        if a.high is None:
            return f"{a.name} >= {a.low:g}"
        return ("" if a.low is None else f"{a.low:g} <= ") + f"{a.name} <= {a.high:g}"

    return " and ".join(one(a) for a in family.args if a.kind in ("int", "float"))


def beam_usages() -> str:
    """The families beam search can draft with, as a user writes them: "'ngram[:N]' or 'self'"."""
    return " or ".join(f"'{f.usage}'" for f in FAMILIES.values() if f.beams)


def check_beams(text: str) -> DraftSpec:
    """A spec beam search can draft with (Family.beams), parsed; ValueError otherwise."""
    spec = parse_draft(text)
    if not spec.family.beams:
        raise ModelLoadError(f"beam search (num_beams > 1) drafts with {beam_usages()}, got draft {text!r}")
    return spec


def drafter_choices() -> list[str]:
    """The families the app offers in its drafter dropdown, in registry order."""
    return [f.name for f in FAMILIES.values() if f.choice]
