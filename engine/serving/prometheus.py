"""Prometheus /metrics text (vLLM's, llama.cpp server's): its spec-decode samples read scrape by scrape, the series
grouped by model (every label but `engine` and `position` sets a run apart), a window over several scrapes as
Prometheus' increase() takes it (counter resets handled), and llama.cpp's totals held to the 6 significant digits
they are printed with. Plain Python, no torch.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace

from .checks import finish, shown, whole
from .run import (
    MAX_LINES,
    MAX_MODELS,
    MAX_POSITIONS,
    MAX_SCRAPES,
    PROM_PREFIX,
    READERS,
    SIX_DIGITS,
    MetricsRun,
)

# a sample: name, {labels}, value, then a timestamp (Prometheus: integer ms; OpenMetrics: float seconds) and an
# OpenMetrics exemplar (` # {labels} value [timestamp]`), both skipped
_SAMPLE = re.compile(
    r'^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{((?:[^"}]|"(?:[^"\\]|\\.)*")*)\})?\s+(\S+)'
    r"(?:\s+-?[0-9][0-9.eE+-]*)?(?:\s+#\s+\{.*)?\s*$"
)
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')
POOLED = (
    "engine",
    "position",
)  # labels of one model's series that are summed (data-parallel engines, positions)
V0_ONLY = ("spec_decode_num_emitted_tokens", "spec_decode_draft_acceptance_rate", "spec_decode_efficiency")
V0_NOTE = "vLLM V0 metrics: accepted counts are per token, not per prefix; the rate is shown, τ cannot be"
EARLY_V1_NOTE = (
    "an early vLLM V1 (before vllm:spec_decode_num_drafts): it counts no verify steps, so the rate is shown and "
    "τ cannot be"
)


def labels_of(text: str, where: str, line: int) -> tuple:
    """A sample's labels as a sorted tuple of (name, value)."""
    out, at = [], 0
    while at < len(text.strip()):
        m = _LABEL.match(text, at)
        if not m:
            raise ValueError(f'{where}line {line}: labels not of the form name="value": {shown(text)}')
        out.append((m[1], m[2]))
        at = m.end()
    return tuple(sorted(out))


def prometheus_scrapes(text: str, prefix: str, where: str) -> list:
    """The spec-decode samples of one or more scrapes pasted one after another: per scrape {family (no _total):
    {labels: value}}; a series seen again starts the next scrape. Other lines (other metrics, # HELP, # TYPE,
    # EOF, _created samples) are skipped."""
    lines = text.splitlines()
    if len(lines) > MAX_LINES:
        raise ValueError(f"{where}the text has {len(lines):,} lines; at most {MAX_LINES:,} are read")
    scrapes: list = [{}]
    for number_, line in enumerate(lines, 1):
        line = line.strip()
        if not line.startswith(prefix + "spec_decode_"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise ValueError(f"{where}line {number_} is not a Prometheus sample: {shown(line)}")
        name, labels, value = m[1], labels_of(m[2] or "", where, number_), m[3]
        if name.endswith("_created"):
            continue
        family = name.removesuffix("_total")
        if labels in scrapes[-1].get(family, {}):
            if len(scrapes) == MAX_SCRAPES:
                raise ValueError(
                    f"{where}more than {MAX_SCRAPES} scrapes pasted; at most {MAX_SCRAPES} are read"
                )
            scrapes.append({})
        try:
            scrapes[-1].setdefault(family, {})[labels] = float(value)
        except ValueError:
            raise ValueError(f"{where}{name} must be a number, got {shown(value)}") from None
    return scrapes if scrapes[0] else []


def prometheus_samples(text: str, prefix: str, where: str) -> dict:
    """One scrape's spec-decode samples ({} when none); a second scrape in the text is refused here."""
    scrapes = prometheus_scrapes(text, prefix, where)
    if len(scrapes) > 1:
        raise ValueError(f"{where}the text holds {len(scrapes)} scrapes; read them with read_runs")
    return scrapes[0] if scrapes else {}


def model_of(labels: tuple) -> tuple:
    """The labels that set a series' run apart: all but the pooled ones."""
    return tuple((k, v) for k, v in labels if k not in POOLED)


def model_name(key: tuple) -> str:
    return ", ".join(f'{k}="{v}"' for k, v in key) or "(no labels)"


def models_in(scrapes: list, families: tuple) -> list:
    """Every model the scrapes hold, in the order first seen."""
    seen: dict = {}
    for scrape in scrapes:
        for family in families:
            for labels in scrape.get(family, {}):
                seen.setdefault(model_of(labels), None)
    return list(seen)


def half_digit(value: float) -> float:
    """How far a count printed with 6 significant digits may be from the count: half its last printed digit."""
    return 0.0 if value < 1e6 else 0.5 * 10 ** (math.floor(math.log10(value)) - 5)


def increase(values: list) -> tuple[float, int]:
    """Prometheus' increase() over one series' values by scrape (None where the series is absent: 0 before it
    appears): the sum of rises, a fall taken as a restart from 0. (increase, resets). One scrape: its value."""
    if len(values) == 1:
        return values[0] or 0.0, 0
    total, resets = 0.0, 0
    before = None if values[0] is not None else 0.0  # a series first seen later counted from 0
    for v in values:
        if v is None:
            continue
        if before is not None and v < before:
            total, resets = total + v, resets + 1
        elif before is not None:
            total += v - before
        before = v
    return total, resets


class Model:
    """One model's series across the scrapes: each counter's window (or its one value), summed over engines."""

    def __init__(self, kind: str, scrapes: list, key: tuple, where: str):
        self.kind, self.scrapes, self.key, self.where = kind, scrapes, key, where
        self.resets, self.notes, self.slack = 0, [], {}

    def series(self, family: str) -> dict:
        """{labels: [value per scrape, None where absent]} of this model's series of a family."""
        out: dict = {}
        for i, scrape in enumerate(self.scrapes):
            for labels, value in scrape.get(family, {}).items():
                if model_of(labels) == self.key:
                    out.setdefault(labels, [None] * len(self.scrapes))[i] = value
        return out

    def total(self, family: str, count: str) -> int | None:
        """The family's count over the window, summed over its series; None when absent."""
        series = self.series(family)
        if not series:
            return None
        total = 0
        for values in series.values():
            for v in values:
                if v is not None:
                    whole(self.where, family, v)
            inc, resets = increase(values)
            total += whole(self.where, family, inc)
            self.resets += resets
            if self.kind in SIX_DIGITS:
                ends = [v for v in values if v is not None]
                slack = half_digit(ends[-1]) + (half_digit(ends[0]) if len(ends) > 1 else 0.0)
                self.slack[count] = self.slack.get(count, 0.0) + slack
        if len(series) > 1:
            differ = sorted({k for s in series for k, _ in s if len({dict(t).get(k) for t in series}) > 1})
            self.notes.append(
                f"{family}: summed over {len(series)} series ({', '.join(differ) or 'labels'} differ)"
            )
        return total

    def positions(self, family: str) -> tuple:
        """Per-position counts 0..k−1 over the window, summed over engines; () when the counter is absent."""
        counts: dict = {}
        for labels, values in self.series(family).items():
            pos = dict(labels).get("position")
            if pos is None:
                raise ValueError(f"{self.where}{family} has a series without a position label")
            if not pos.isdigit() or int(pos) >= MAX_POSITIONS:
                raise ValueError(
                    f"{self.where}{family} position must be a whole number from 0 to {MAX_POSITIONS - 1}, "
                    f"got {shown(pos)}"
                )
            for v in values:
                if v is not None:
                    whole(self.where, f'{family}{{position="{pos}"}}', v)
            inc, resets = increase(values)
            counts[int(pos)] = counts.get(int(pos), 0) + int(inc)
            self.resets += resets
        missing = [i for i in range(len(counts)) if i not in counts]
        if missing:
            raise ValueError(
                f"{self.where}{family} has no position {missing[0]} (positions 0..{max(counts)} expected)"
            )
        return tuple(counts[i] for i in range(len(counts)))

    def six_digits(self, names: dict, accepted: int | None, per_position: tuple) -> tuple:
        """llama.cpp prints its totals with 6 significant digits and its per-position counters exactly: the
        accepted total must be the per-position sum so rounded, in every scrape; the exact sum is taken, and steps
        and drafted are taken within their rounding where the exact counts need it. (accepted, notes)."""
        if self.kind not in SIX_DIGITS or not per_position or accepted is None:
            return accepted, ()
        for i, scrape in enumerate(self.scrapes, 1):
            printed = [
                v for labels, v in scrape.get(names["accepted"], {}).items() if model_of(labels) == self.key
            ]
            exact = sum(
                v
                for labels, v in scrape.get(names["per_position"], {}).items()
                if model_of(labels) == self.key
            )
            if printed and abs(sum(printed) - exact) > sum(half_digit(v) for v in printed):
                at = f" in scrape {i}" if len(self.scrapes) > 1 else ""
                raise ValueError(
                    f"{self.where}{names['per_position']} adds up to {exact:.0f}, {names['accepted']} is "
                    f"{sum(printed):.0f}{at}, more than its 6 significant digits allow"
                )
        exact = sum(per_position)
        if exact == accepted and not any(self.slack.values()):
            return accepted, ()
        return exact, (
            "llama.cpp prints its totals with 6 significant digits (1234567 as 1.23457e+06) and its per-position "
            f"counters exactly: accepted is the exact per-position sum, {exact:,}; drafted and steps are known "
            f"within ±{max(self.slack.values(), default=0):g}",
        )


def within_rounding(model: Model, run: MetricsRun) -> MetricsRun:
    """Steps and drafted printed rounded may sit just below what the exact per-position counts need: taken as the
    least those allow, where that is within the rounding."""
    steps, drafted = run.steps, run.drafted
    first = run.per_position[0] if run.per_position else 0
    if steps is not None and first > steps and first - steps <= model.slack.get("steps", 0):
        steps = first
    if drafted is not None and run.accepted is not None and run.accepted > drafted:
        if run.accepted - drafted <= model.slack.get("drafted", 0):
            drafted = run.accepted
    return replace(run, steps=steps, drafted=drafted)


def model_run(kind: str, scrapes: list, key: tuple, where: str) -> MetricsRun:
    """One model's run from the scrapes: vLLM's V1 counters (or a V0 / early-V1 scrape's, named as such) or
    llama.cpp's."""
    names = READERS[kind].names
    model = Model(kind, scrapes, key, where)
    steps = model.total(names["steps"], "steps")
    older = not model.series(names["per_position"]) and model.series(names["drafted"])
    if steps is None and kind == "vllm-prometheus" and older:  # V0 and early V1 exported neither
        kind, names = "vllm-older", READERS["vllm-older"].names
        v0 = any(model.series("vllm:" + family) for family in V0_ONLY)
        model.notes.append(V0_NOTE if v0 else EARLY_V1_NOTE)
    elif steps is None:
        raise ValueError(f"{where}{names['steps']} is missing")
    drafted = model.total(names["drafted"], "drafted")
    accepted = model.total(names["accepted"], "accepted")
    for count, value in (("drafted", drafted), ("accepted", accepted)):
        if value is None:
            raise ValueError(f"{where}{names[count]} is missing")
    per_position = model.positions(names["per_position"]) if "per_position" in names else ()
    accepted, rounding = model.six_digits(names, accepted, per_position)
    window = {"scrapes": len(scrapes), "resets": model.resets} if len(scrapes) > 1 else None
    if window:
        model.notes.append(
            f"a window: each counter's increase over {len(scrapes)} scrapes, as Prometheus' increase() takes it"
            + (
                f"; {model.resets} counter reset(s): a count that fell was taken as a restart from 0"
                if model.resets
                else ""
            )
        )
    run = MetricsRun(
        kind=kind,
        accepted=accepted,
        drafted=drafted,
        steps=steps,
        per_position=per_position,
        draft_len=len(per_position) or None,
        notes=tuple(model.notes) + rounding,
        model=model_name(key) if key else None,
        window=window,
    )
    return finish(where, within_rounding(model, run))


def read_prometheus_runs(kind: str, text: str) -> list:
    """vLLM's or llama.cpp's /metrics (one scrape, or several pasted one after another: a window): one run per
    model, each model's counters summed over its engines, per position where exported."""
    reader = READERS[kind]
    where, names = (
        f"{reader.engine} metrics: ",
        READERS["vllm-prometheus" if kind == "vllm-older" else kind].names,
    )
    scrapes = prometheus_scrapes(text, PROM_PREFIX[kind], where)
    if not scrapes:
        raise ValueError(f"{where}no {names['steps']} counters: was speculative decoding on?")
    families = (names["steps"], names["drafted"], names["accepted"], names["per_position"])
    keys = models_in(scrapes, families)
    if len(keys) > MAX_MODELS:
        raise ValueError(f"{where}{len(keys)} models in one report; at most {MAX_MODELS} are read")
    if not keys:
        raise ValueError(f"{where}{names['steps']} is missing")
    base = "vllm-prometheus" if kind == "vllm-older" else kind
    runs = [
        model_run(base, scrapes, key, where + (f"{model_name(key)}: " if len(keys) > 1 else ""))
        for key in keys
    ]
    listed = tuple(r.model for r in runs) if len(runs) > 1 else ()
    return [replace(r, models=listed) for r in runs]
