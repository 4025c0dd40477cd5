"""Events -> per-run, per-round views. This module knows nothing about HTML or plotly.

A list of events may hold several runs (a speculative run, then its AR baseline); each begins
with a RunStarted. `split_runs` cuts the list into runs by mode, `view_run` groups one run's
events by round. Unknown event kinds (and anything that is not an event) are skipped, and a
run still streaming (no Finished yet) yields a view of what is there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine import costrule
from engine.config import MAX_GAMMA
from engine.events import EVENT_TYPES, event_from_dict
from engine.figures import quotient_terms
from engine.metrics import summarize
from engine.validate import real_number

ROUND_KINDS = {
    "decided",
    "drafted",
    "verified",
    "draft_tree",
    "lookahead_window",
    "suffix_match",
    "tree_sized",
    "rolled_back",
    "committed",
    "round_timed",
}
# RoundView attribute of each round event kind
ATTR = {
    "round_timed": "timed",
    "draft_tree": "tree",
    "lookahead_window": "window",
    "suffix_match": "suffix",
    "tree_sized": "sized",
}


def positive(x) -> float | None:
    """x as a float when it is a real number > 0 (a time or a rate), else None: events built by hand, not
    read through trace_from_json, may hold a string, 0 or a negative number there."""
    return float(x) if real_number(x) and x > 0 else None


def as_event(item):
    """The event itself, an event rebuilt from a trace dict, or None for anything unknown."""
    if isinstance(item, dict):
        try:
            return event_from_dict(item)
        except ValueError:
            return None
    return item if getattr(item, "kind", None) in EVENT_TYPES else None


def split_runs(events) -> dict[str, list]:
    """mode ("speculative" / "ar") -> that run's events; a later run of the same mode replaces an earlier one."""
    if isinstance(events, RunSet):
        return events.segments
    segments: list[tuple[str | None, list]] = []
    for item in events or []:
        event = as_event(item)
        if event is None:
            continue
        if event.kind == "run_started":
            segments.append((event.mode, [event]))
        elif segments:
            segments[-1][1].append(event)
        else:  # a headless list (no RunStarted): guess its mode below
            segments.append((None, [event]))
    runs = {}
    for mode, evs in segments:
        if mode is None:
            drafted = any(e.kind == "drafted" for e in evs)
            origins = [o for e in evs if e.kind == "committed" for o in e.origins]
            mode = "ar" if not drafted and origins and all(o == "ar" for o in origins) else "speculative"
        runs[mode] = evs
    return runs


@dataclass
class RoundView:
    """Everything one round produced; any part may be missing in a partial or odd trace.
    `memo` keeps what renderers built from it (its HTML); adding an event to the round clears it."""

    round: int
    decided: object = None  # auto's choice for this round and why
    drafted: object = None
    verified: object = None
    rolled_back: object = None
    committed: object = None
    timed: object = None
    tree: object = None  # DraftTree of a tree-speculation round (drafted / verified then hold its chain view)
    window: object = None  # LookaheadWindow: lookahead decoding's Jacobi window this round
    suffix: object = None  # SuffixMatched: where suffix speculation's tree came from, and its sizing
    sized: object = None  # TreeSized: how another tree drafter (token recycling) sized its tree
    memo: dict = field(default_factory=dict, repr=False, compare=False)

    def cached(self, key, build):
        """build() once per key while the round is unchanged (a renderer's markup of this round)."""
        if key not in self.memo:
            self.memo[key] = build()
        return self.memo[key]

    def attach(self, event) -> None:
        setattr(self, ATTR.get(event.kind, event.kind), event)
        self.memo.clear()

    @property
    def gamma(self) -> int:
        """Tokens drafted this round (0 = a plain target step)."""
        return len(self.drafted.token_ids) if self.drafted is not None else 0

    @property
    def n_accepted(self) -> int:
        if self.verified is None:
            return 0
        return sum(1 for ok in self.verified.accepted if ok)

    @property
    def first_rejected(self) -> int | None:
        return self.verified.first_rejected if self.verified is not None else None

    @property
    def tokens(self) -> list:
        return list(self.committed.tokens) if self.committed is not None else []

    @property
    def origins(self) -> list:
        return list(self.committed.origins) if self.committed is not None else []


@dataclass
class RunView:
    """One run: its start, its rounds in order and its end (None while streaming)."""

    mode: str
    started: object = None
    rounds: list = field(default_factory=list)
    finished: object = None

    @property
    def config(self) -> dict:
        return dict(self.started.config) if self.started is not None else {}

    @property
    def gamma(self) -> int:
        gamma = self.config.get("gamma")
        if isinstance(gamma, int) and not isinstance(gamma, bool) and 0 <= gamma <= MAX_GAMMA:
            return gamma
        return max((r.gamma for r in self.rounds), default=0)

    @property
    def greedy(self) -> bool:
        """Temperature 0 (from the config; else from the Verified events)."""
        if real_number(self.config.get("temperature")):
            return self.config["temperature"] == 0
        return any(r.verified is not None and r.verified.greedy for r in self.rounds)

    @property
    def done(self) -> bool:
        return self.finished is not None

    def upto(self, upto_round: int | None) -> list:
        """Rounds numbered <= upto_round (all when None)."""
        return [r for r in self.rounds if upto_round is None or r.round <= upto_round]

    def token_ids(self) -> list:
        return [t for r in self.rounds if r.committed is not None for t in r.committed.token_ids]

    def n_tokens(self) -> int:
        return sum(len(r.tokens) for r in self.rounds)

    def forwards(self) -> int:
        """Target forwards that committed (one per round; a round caught mid-way, in a replay or a tour frame, has
        committed nothing yet): what "tokens per target forward" divides by."""
        return sum(1 for r in self.rounds if r.committed is not None)

    def elapsed_s(self) -> float | None:
        """Wall time so far: the last round's elapsed_s, or the Finished summary's wall_s when it is a
        plausible number (not before the last round: a trace's stored numbers are not trusted blindly)."""
        times = [r.timed.elapsed_s for r in self.rounds if r.timed is not None]
        last = times[-1] if times else None
        wall = positive(self.finished.summary.get("wall_s")) if self.finished is not None else None
        return wall if wall and wall >= (last or 0) else last

    def tokens_per_s(self) -> float | None:
        wall = self.elapsed_s()
        return self.n_tokens() / wall if wall else None

    @property
    def target_tokens(self) -> int:
        """The token target of the run (max_new_tokens), for progress bars; 0 when unknown."""
        value = self.config.get("max_new_tokens")
        return int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

    def timeline(self) -> list[tuple[float, int]]:
        """(elapsed_s, tokens committed so far) after each timed round."""
        out, total = [], 0
        for r in self.rounds:
            total += len(r.tokens)
            if r.timed is not None:
                out.append((r.timed.elapsed_s, total))
        return out

    def prompt_tail(self) -> str:
        """Text of the last prompt token (the context round 1 starts from)."""
        tokens = self.started.prompt_tokens if self.started is not None else []
        return tokens[-1] if tokens else ""


def view_run(events, mode: str | None = None) -> RunView:
    """Group one run's events by round (unknown kinds skipped)."""
    view = RunView(mode or "speculative")
    by_round: dict[int, RoundView] = {}
    for item in events or []:
        event = as_event(item)
        if event is None:
            continue
        if event.kind == "run_started":
            view.started, view.mode = event, mode or event.mode
        elif event.kind == "finished":
            view.finished = event
        elif event.kind in ROUND_KINDS:
            by_round.setdefault(event.round, RoundView(event.round)).attach(event)
    view.rounds = [by_round[k] for k in sorted(by_round)]
    return view


def view_runs(events) -> dict[str, RunView]:
    """mode -> RunView for every run in the list."""
    if isinstance(events, RunSet):
        return events.runs
    return {mode: view_run(evs, mode) for mode, evs in split_runs(events).items()}


class RunSet:
    """Events folded once into runs and rounds: what every renderer reads, built in O(1) per event.

    The app keeps one per streaming run and `add`s each event as it arrives; renderers accept it
    wherever they accept a list of events (split_runs, view_runs and spec_summary read it directly),
    so a round's HTML is built once (RoundView.memo) and the summary once per update, not once per panel.
    """

    def __init__(self, events=()):
        self.segments: dict[str, list] = {}  # mode -> that run's events (the trace's order)
        self.runs: dict[str, RunView] = {}
        self._rounds: dict[str, dict[int, RoundView]] = {}
        self._mode: str | None = None  # the run being folded
        self.version = 0  # bumped by every event: the summary's cache key
        # a draft with another vocabulary: the two-tokenisation panel has something to show
        self.retokenized = False
        self._summary: tuple[int, dict] | None = None
        events = list(events or [])
        if events and getattr(as_event(events[0]), "kind", None) != "run_started":
            for mode, evs in split_runs(events).items():  # a headless list: split_runs guesses its mode
                self._start(mode)
                for e in evs:
                    self._fold(e)
            return
        for e in events:
            self.add(e)

    def __iter__(self):
        """The events in trace order (so a RunSet can stand for its list, e.g. for write_trace)."""
        for evs in self.segments.values():
            yield from evs

    def __len__(self) -> int:
        return sum(len(evs) for evs in self.segments.values())

    def _start(self, mode: str) -> None:
        self._mode = mode
        self.segments[mode], self._rounds[mode] = [], {}
        self.runs[mode] = RunView(mode)

    def add(self, item, lane: str | None = None) -> None:
        """Fold one event in (unknown kinds are skipped). `lane` names the run it belongs to when two runs
        stream interleaved (the race); without it, the event belongs to the run started last."""
        event = as_event(item)
        if event is None:
            return
        if event.kind == "run_started":
            self._start(lane or (event.mode if event.mode in ("speculative", "ar") else "speculative"))
        elif lane is not None and lane in self.runs:
            self._mode = lane
        elif self._mode is None:
            self._start(lane or "speculative")
        self._fold(event)

    def _fold(self, event) -> None:
        mode = self._mode
        self.segments[mode].append(event)
        self.version += 1
        self.retokenized = self.retokenized or event.kind == "retokenized"
        run = self.runs[mode]
        if event.kind == "run_started":
            run.started = event
        elif event.kind == "finished":
            run.finished = event
        elif event.kind in ROUND_KINDS:
            by_round = self._rounds[mode]
            rv = by_round.get(event.round)
            if rv is None:
                rv = by_round[event.round] = RoundView(event.round)
                if run.rounds and run.rounds[-1].round > event.round:  # out of order (a hand-made trace)
                    run.rounds = [by_round[k] for k in sorted(by_round)]
                else:
                    run.rounds.append(rv)
            rv.attach(event)

    def summary(self) -> dict:
        """spec_summary of these events, computed once per version."""
        if self._summary is None or self._summary[0] != self.version:
            spec = self.segments.get("speculative", [])
            self._summary = (self.version, summarize(spec, self.segments.get("ar")))
        return self._summary[1]

    def cut(self, r: int, t: float | None) -> "RunSet":
        """The runs as they stood after round r of the main run (mode `main`), the other run at wall time t:
        new RunViews over the same RoundView objects, so their cached markup is reused."""
        out = RunSet()
        main = self.runs.get("speculative") or self.runs.get("ar")
        for mode, run in self.runs.items():
            total = max((rv.round for rv in run.rounds), default=0)
            if run is main:
                rounds = [rv for rv in run.rounds if rv.round <= r]
                ended = r >= total
            else:
                rounds = [
                    rv for rv in run.rounds if rv.timed is not None and rv.timed.elapsed_s <= (t or 0.0)
                ]
                ended = len(rounds) == len(run.rounds)
            keep = {rv.round for rv in rounds}
            out.segments[mode] = [
                e
                for e in self.segments[mode]
                if not (
                    (e.kind in ROUND_KINDS and e.round not in keep) or (e.kind == "finished" and not ended)
                )
            ]
            out.runs[mode] = RunView(mode, run.started, rounds, run.finished if ended else None)
        out.version = self.version
        return out


def run_set(events) -> RunSet:
    """events as a RunSet (itself when it already is one)."""
    return events if isinstance(events, RunSet) else RunSet(events)


def main_run(events, mode: str | None = None) -> RunView | None:
    """The run a single-run renderer shows: `mode` if given, else the speculative run, else the AR one."""
    runs = view_runs(events)
    if mode is not None:
        return runs.get(mode)
    return runs.get("speculative") or runs.get("ar")


def spec_summary(events) -> dict:
    """The speculative run's metrics, recomputed from its events by the engine's one cost model (with the
    AR lane's when raced): never a trace's stored numbers, so a panel cannot disagree with another."""
    if isinstance(events, RunSet):
        return events.summary()
    runs = split_runs(events)
    return summarize(runs.get("speculative", []), runs.get("ar"))


def usable_summary(events) -> dict:
    """spec_summary under the one rule for measured costs (engine.costrule.usable): the summary every derived
    figure reads, with the host's quiet calibration in place of costs no quiet machine could have given, and
    "costs" saying which it used and why."""
    return costrule.usable(spec_summary(events))


def predicted_terms(s: dict) -> tuple[str, str, str] | None:
    """(predicted speedup, Σ E tokens, Σ cost steps) as printed: the run's prediction Σ E ÷ Σ (γc + v) with its
    two sums, printed so that they divide to it; the summary line, Explain, the race and the charts all print
    this one text. None before the cost model has a prediction."""
    tokens, steps = s.get("model_tokens"), s.get("model_steps")
    if tokens is None or not steps or s.get("predicted_speedup") is None:
        return None
    return quotient_terms(tokens, steps, least=2)


def measured_speedup(events) -> float | None:
    """Speculative tokens/s ÷ AR tokens/s, once both lanes have finished (never a provisional ratio)."""
    runs = split_runs(events)
    if "speculative" not in runs or "ar" not in runs:
        return None
    return spec_summary(events).get("speedup")
