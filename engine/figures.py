"""The one rule for printing a derived figure beside its inputs: a reader who recomputes the figure from the
inputs as printed gets the figure as printed. Plain text, no torch; the renderers (specviz/) and the benchmark
reports (benchmarks/) both print through it.

`derive(f, inputs, decimals)` prints f(inputs) at `decimals` and gives each input the fewest extra decimals for
which f of the *printed* inputs rounds to the same text: "1.04× (16.4 ÷ 15.8 tokens/s)", where "16 ÷ 16" would
have read 1.00. An input that is an exact count prints exactly (`Exact`: "α = 29/30"), so a steep function of it
(E = (1 − α¹⁷)/(1 − α) at γ = 16 moves 1.0 between α = 0.965 and 0.975) needs no digits at all. When no number
of digits up to `most` reproduces the true figure (it sits on a rounding edge), the figure printed is the one
the printed inputs give: it then differs from the true one by less than its own last digit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction


@dataclass(frozen=True)
class Exact:
    """An input printed exactly: a ratio of counts ("29/30", "30/30", "7") or a whole number."""

    value: Fraction

    @classmethod
    def ratio(cls, num: int, den: int) -> "Exact":
        return cls(Fraction(int(num), int(den)))

    def text(self) -> str:
        v = self.value
        return str(v.numerator) if v.denominator == 1 else f"{v.numerator}/{v.denominator}"


def fixed(x: float, decimals: int) -> str:
    """x at `decimals` decimals, a tie rounded half up as a calculator rounds the decimal the reader sees
    (2,110 ÷ 4,000 = 0.5275 prints 0.528 and 1000 ÷ 32.0 = 31.25 prints 31.3, where Python's float formatting
    gave 0.527 and 31.2); '-0.00' printed '0.00'."""
    x, places = float(x), max(decimals, 0)
    if not math.isfinite(x):
        return f"{x:.{places}f}"
    # repr: the shortest decimal that reads back as x, i.e. the number a reader's arithmetic lands on
    text = str(Decimal(repr(x)).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP))
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def parse(text: str) -> float:
    """A printed input back to the number a reader types into a calculator ("29/30" → 0.9666…)."""
    if "/" in text:
        num, den = text.split("/")
        return float(Fraction(int(num), int(den)))
    return float(text)


def derive(f, inputs, decimals=2, most: int = 6):
    """(figure, [input texts]): f(*inputs) printed at `decimals`, each input (a float printed with at least its
    own decimals, given as (value, least decimals), or an Exact) with the fewest further decimals, added to all
    floats together, for which f of the printed inputs prints the same figure. f may return a tuple of figures
    (`decimals` then a tuple too): inputs printed once for several figures must reproduce all of them."""
    many = isinstance(decimals, tuple)

    def at(values):  # a figure a zero makes undefined (a step or a floor printed 0) is nan: shown as None
        try:
            return f(*values)
        except ZeroDivisionError:
            return tuple(math.nan for _ in decimals) if many else math.nan

    def show(values):
        values, places = (values, decimals) if many else ((values,), (decimals,))
        shown = tuple(fixed(v, d) if math.isfinite(v) else None for v, d in zip(values, places))
        return shown if many else shown[0]

    def texts(extra):
        return [x.text() if isinstance(x, Exact) else fixed(x[0], x[1] + extra) for x in inputs]

    def clear(
        values,
    ):  # not near a rounding tie, where float error could round it the other way than a calculator
        values, places = (values, decimals) if many else ((values,), (decimals,))
        return all(
            not math.isfinite(v) or abs(abs(v) * 10**d % 1 - 0.5) > 1e-6 or tie(v, d)
            for v, d in zip(values, places)
        )

    values = [float(x.value) if isinstance(x, Exact) else float(x[0]) for x in inputs]
    want = show(at(values))
    for extra in range(most + 1):
        printed = texts(extra)
        got = at(list(map(parse, printed)))
        if show(got) == want and clear(got):
            return want, printed
    printed = texts(most)
    return show(at(list(map(parse, printed)))), printed


def tie(x: float, decimals: int) -> bool:
    """x is exactly a decimal tie at `decimals` (2110 ÷ 4000 = 0.5275 at 3): fixed() rounds it half up, as a
    calculator does, so printing it is safe (a float a hair off a tie, 1.00499…, is not one: it may round down)."""
    return abs(Decimal(repr(float(x))).scaleb(decimals)) % 1 == Decimal("0.5")


def decimals_of(text: str) -> int:
    """How many decimals a printed number carries ("0.012" → 3, "7" → 0)."""
    return len(text.split(".")[1]) if "." in text else 0


def quotient_terms(num: float, den: float, decimals: int = 2, least: int = 0) -> tuple[str, str, str]:
    """(quotient, numerator, denominator) as printed: "1.04", "16.4", "15.8". den must be > 0."""
    q, (a, b) = derive(lambda x, y: x / y if y else math.inf, [(num, least), (den, least)], decimals)
    return q, a, b


def plural(n: int, word: str, many: str | None = None) -> str:
    """'1 token', '2 tokens' (`many` for an irregular plural)."""
    return f"{n} {word if n == 1 else (many or word + 's')}"
