"""What the public app checks and bounds: the API's argument types, the prompt, the compact form a
session keeps its run in, the end of a run that was cut short, and the folder of trace files.

Pure: no gradio, no torch. Every refusal is a ValueError whose message names the setting and its range.
"""

from __future__ import annotations

import dataclasses
import functools
import hmac
import json
import math
import re
import secrets
import time
import zlib
from pathlib import Path

from engine.events import EVENT_TYPES, MAX_TRACE_BYTES, Finished, write_trace
from engine.figures import plural
from engine.metrics import summarize
from engine.specs import FAMILIES, Family, ModelLoadError, check_beams, parse_draft
from specviz.replay import rounds_of
from specviz.runs import ROUND_KINDS, RunSet, as_event, main_run

SEED_MAX = 2**63 - 1
CHARS_PER_TOKEN = 16  # a prompt longer than this many characters per allowed token is refused untokenized


def whole(name: str, value, low: int | None = None, high: int | None = None) -> int:
    """value as an int when it is a whole number (an integral float counts) in low..high; else a ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a whole number, got {type(value).__name__} {str(value)[:40]!r}")
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        span = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise ValueError(f"{name} must be {span}, got {value}")
    return value


def number(name: str, value) -> float:
    """value as a float when it is a finite number; else a ValueError naming the setting."""
    try:  # an int too large for a float (10**400) is refused too, by name
        finite = (
            not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(float(value))
        )
    except OverflowError:
        finite = False
    if not finite:
        raise ValueError(f"{name} must be a finite number, got {str(value)[:40]!r}")
    return float(value)


# what an endpoint's input may hold
INPUT_KINDS = ("number", "bool", "text", "choice", "file", "index", "any")
SHOWN = 40  # characters of a refused value a message quotes


def shown(value) -> str:
    """A refused value as a message may quote it: its repr (surrogates escaped) cut to SHOWN characters."""
    text = repr(value)
    return text if len(text) <= SHOWN else text[: SHOWN - 1] + "…"


def valid_text(label: str, value: str, max_text: int) -> None:
    """Text a client sent: at most max_text characters, valid Unicode (no lone surrogate); else a ValueError."""
    if len(value) > max_text:
        raise ValueError(f"{label} is {len(value):,} characters; the app takes at most {max_text:,}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{label} is not valid text: a lone surrogate at character {e.start}") from None


def check_inputs(endpoint: str, wanted: list[tuple[str, str, dict]], values: list, max_text: int) -> None:
    """The inputs one of the app's endpoints got from a client (the browser, or any raw HTTP caller): as many as it
    takes, each of its kind (INPUT_KINDS, with the setting's label and its bounds: `spec`); else a ValueError naming
    the endpoint, the setting and what it takes. max_text: characters a text input may hold."""
    if len(values) != len(wanted):
        takes = ", ".join(label for _, label, _ in wanted) or "nothing"
        raise ValueError(
            f"/{endpoint} takes {plural(len(wanted), 'input')} ({takes}), got {len(values)}"[:600]
        )
    for (kind, label, spec), value in zip(wanted, values):
        check_input(kind, label, value, max_text, spec)


def check_input(kind: str, label: str, value, max_text: int, spec: dict | None = None) -> None:
    """One input against its kind and its component's bounds (`spec`: "null" whether the page itself may send
    None, "low"/"high" a number's range, "choices" and "custom" a dropdown's, "count" an index's); a ValueError
    naming the setting, quoting at most SHOWN characters of the value."""
    spec = spec or {}
    if value is None:
        if kind == "any" or spec.get("null", kind in ("number", "file")):
            return  # a cleared number box (the handler's default), no file, a state the server holds
        raise ValueError(f"{label} must be set, got null")
    if kind == "number":
        x = number(label, value)
        low, high = spec.get("low"), spec.get("high")
        if (low is not None and x < low) or (high is not None and x > high):
            span = f"from {low:g} to {high:g}" if high is not None else f"at least {low:g}"
            if low is None:
                span = f"at most {high:g}"
            raise ValueError(f"{label} must be {span}, got {shown(value)}")
    elif kind == "bool" and not isinstance(value, bool):
        raise ValueError(f"{label} must be true or false, got {shown(value)}")
    elif kind == "text":
        if not isinstance(value, str):
            raise ValueError(f"{label} must be text, got {type(value).__name__}")
        valid_text(label, value, max_text)
    elif kind == "choice":
        check_choice(label, value, spec, max_text)
    elif kind == "file":
        check_file(label, value, spec.get("folder"))
    elif kind == "index":
        whole(label, value, 0, spec["count"] - 1 if spec.get("count") else None)


def check_choice(label: str, value, spec: dict, max_text: int) -> None:
    """A dropdown's value: text or a finite number, one of its choices unless it takes custom values."""
    if isinstance(value, str):
        valid_text(label, value, max_text)
    elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(
            f"{label} must be one of its choices (text or a finite number), got {type(value).__name__} "
            f"{shown(value)}"
        )
    choices = spec.get("choices")
    if choices is not None and not spec.get("custom") and value not in choices:
        some = ", ".join(shown(c) for c in list(choices)[:6]) + (", …" if len(choices) > 6 else "")
        raise ValueError(f"{label} must be one of its choices ({some}), got {shown(value)}")


def check_file(label: str, value, folder: str | None = None) -> None:
    """A file input: what the page sends for an upload (Gradio's FileData: a dict naming a file it received, inside
    `folder` when given: the server's upload folder), never a server path nor an address for the server to fetch."""
    if not isinstance(value, dict):
        raise ValueError(f"{label} must be an uploaded file, got {type(value).__name__}")
    path = value.get("path")  # (its "url" is where the page fetches the file back from: not read here)
    if isinstance(path, str) and path.lower().startswith(("http://", "https://")):  # Gradio would download it
        raise ValueError(f"{label}: upload the file itself; this server does not fetch addresses")
    if not isinstance(value.get("path"), str):
        raise ValueError(f"{label} must be an uploaded file (a dict with its path), got {shown(value)}")
    if folder is not None and not inside(path, folder):
        raise ValueError(
            f"{label}: upload the file itself; this server opens only files uploaded to it, got {shown(path)}"
        )


def inside(path: str, folder: str) -> bool:
    """Whether `path`, its links and '..' resolved, names something inside `folder`."""
    try:
        return Path(path).resolve().is_relative_to(Path(folder).resolve())
    except (OSError, ValueError):  # a NUL byte, a loop of links
        return False


def model_name(role: str, value) -> str:
    """A target / draft spec must be non-empty text."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(
            f"{role} must be a model name (text such as 'embedded' or 'ngram'), got {value!r}"[:200]
        )
    return value


def check_prompt(prompt, max_tokens: int) -> str:
    """The prompt as text: a str of valid Unicode (no lone surrogates), not absurdly long before tokenizing."""
    if not isinstance(prompt, str):
        raise ValueError(f"prompt must be text, got {type(prompt).__name__}")
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(
            f"prompt is not valid text: a lone surrogate {prompt[e.start]!r} at character {e.start}; "
            f"send UTF-8 text"
        ) from None
    if len(prompt) > max_tokens * CHARS_PER_TOKEN:
        raise ValueError(
            f"prompt is {len(prompt):,} characters, too long: this server reads at most "
            f"{max_tokens * CHARS_PER_TOKEN:,} characters"
        )
    return prompt


def check_prompt_tokens(n_tokens: int, max_tokens: int, chars: int | None = None) -> None:
    """A prompt over the token cap, refused in the characters the visitor sees: the cap in characters of text
    like theirs (their own characters per token), and how much to cut. Without `chars`, in tokens."""
    if n_tokens <= max_tokens:
        return
    if not chars:
        raise ValueError(f"prompt is {n_tokens:,} tokens; this server reads at most {max_tokens:,}")
    fits = max_tokens * chars // n_tokens  # characters of text like this prompt that fit
    raise ValueError(
        f"prompt is {chars:,} characters, too long: this server reads at most about {fits:,} "
        f"characters of text like it. Shorten it by about {chars - fits:,} characters."
    )


def check_gamma(value, high: int) -> int:
    """γ as the page sends it: a whole number from 1 to high (a slider's box takes 2.5 as typed); else a
    ValueError in the page's own words."""
    try:
        return whole("γ", value, 1, high)
    except ValueError:
        raise ValueError(f"γ must be a whole number from 1 to {high}, got {str(value)[:40]}") from None


PARAM_LABEL = "n / L / W / k (0 = default)"  # the drafter's number box, beside Drafter (app.py)


def drafter_param(value, family: Family) -> int:
    """The drafter's number as the page sends it: 0 (the drafter's default) or a whole number in the range of the
    argument it sets (family.param: ngram's N 1 to 8, layerskip's L from 1); a family without one ignores any
    number from 0 up. Else a ValueError naming the box and the range for this drafter."""
    arg = next((a for a in family.args if a.name == family.param), None) if family.param else None
    if arg is None:
        return whole(PARAM_LABEL, value or 0, 0)
    low, high = int(arg.low or 1), None if arg.high is None else int(arg.high)
    try:
        n = whole(PARAM_LABEL, value or 0)
    except ValueError:
        n = None
    if n is None or (n != 0 and (n < low or (high is not None and n > high))):
        span = f"from {low} to {high}" if high is not None else f"at least {low}"
        raise ValueError(
            f"{PARAM_LABEL} must be 0 ({family.name}'s default) or a whole number {span} ({family.name}'s "
            f"{arg.name}), got {shown(value)}"
        )
    return n


def beam_drafter(draft: str) -> None:
    """A drafter beam search can draft with; else the engine's refusal and where the page sets it (the Drafter
    control sits beside Generate, far from the Beam search tab). A spec that does not parse keeps its own words."""
    parse_draft(draft)
    try:
        check_beams(draft)
    except ModelLoadError as e:
        names = " or ".join(f.name for f in FAMILIES.values() if f.beams and f.choice)
        raise ValueError(f"{e}: choose {names} in Drafter, beside Generate") from None


def api_arguments(
    prompt,
    draft,
    gamma,
    max_new_tokens,
    temperature,
    seed,
    target,
    max_new_cap: int,
    max_prompt_tokens: int,
    num_beams=1,
) -> dict:
    """The /generate API's arguments, type-checked one by one (JSON clients can send anything)."""
    return dict(
        prompt=check_prompt(prompt, max_prompt_tokens),
        draft=model_name("draft", draft),
        target=model_name("target", target),
        gamma=whole("gamma", gamma, 1, 16),
        max_new_tokens=whole("max_new_tokens", max_new_tokens, 1, max_new_cap),
        temperature=number("temperature", temperature),
        seed=whole("seed", seed, 0, SEED_MAX),
        num_beams=whole("num_beams", num_beams, 1, 8),
    )


# --- the session's run: a live list while streaming, compact bytes once settled -------------------


def pack(events) -> bytes:
    """A settled run as zlib-compressed compact JSON: what a session keeps in its gr.State (a 5 MB trace
    packs to ~0.3 MB, against tens of MB as a list of dataclasses)."""
    # shallow: asdict() deep-copies, 10x slower
    plain = [
        {"kind": e.kind, **{f.name: getattr(e, f.name) for f in dataclasses.fields(e)}}
        for e in map(as_event, events or [])
        if e is not None
    ]
    return zlib.compress(json.dumps(plain, separators=(",", ":"), ensure_ascii=False).encode("utf-8"), 1)


def unpack(state) -> list:
    """The events of a session's state: the live list during a run, decoded from pack()'s bytes after."""
    if not state:
        return []
    return list(_decoded(state) if isinstance(state, bytes) else state)


def runs(state) -> RunSet:
    """The session's run folded into a RunSet: the live one while streaming; for a settled run one RunSet per
    packed blob, kept for the next replay step, so stepping reuses every round's markup."""
    if isinstance(state, RunSet):
        return state
    if isinstance(state, bytes) and state:
        return _folded(state)
    return RunSet(unpack(state))


@functools.lru_cache(maxsize=4)
def _folded(blob: bytes) -> RunSet:
    return RunSet(_decoded(blob))


@functools.lru_cache(maxsize=2)  # scrubbing the replay slider decodes the same run again and again
def _decoded(blob: bytes) -> tuple:
    out = []
    for d in json.loads(zlib.decompress(blob)):
        kind = d.pop("kind")
        out.append(EVENT_TYPES[kind](**d))  # written by pack() from validated events: no second validation
    return tuple(out)


def ended(events, reason: str) -> list:
    """events plus, for every run cut before the engine finished it (time limit, Stop, an error; both lanes
    of a race), a Finished(stop_reason=reason) with its committed text; finished runs are unchanged."""
    events = [e for e in map(as_event, events or []) if e is not None]
    starts = [i for i, e in enumerate(events) if e.kind == "run_started"]
    out = events[: starts[0]] if starts else list(events)
    for start, end in zip(starts, starts[1:] + [len(events)]):
        run = events[start:end]
        out += run
        if any(e.kind == "finished" for e in run):
            continue
        committed = [e for e in run if e.kind == "committed"]
        ids = [t for e in committed for t in e.token_ids]
        last = max((e.round for e in run if e.kind in ROUND_KINDS), default=0)
        pos = committed[-1].pos + len(committed[-1].token_ids) if committed else run[0].pos
        text = "".join(t for e in committed for t in e.tokens)
        out.append(
            Finished(
                round=last, pos=pos, stop_reason=reason, text=text, token_ids=ids, summary=summarize(run)
            )
        )
    return out


def replay_rounds(events) -> int:
    """The replay slider's maximum: the last round, but never more than the rounds actually present
    (a hostile trace numbering its last round 1e12 gets a slider of its real length)."""
    run = main_run(events)
    return min(rounds_of(events), len(run.rounds)) if run is not None else 0


# --- the folder of trace files behind the download button -----------------------------------------

# A trace file's name is signed with this process's key, so a file that merely looks like one (an upload named
# specviz-trace-….json) never counts among the app's own copies (prune_cache). A restart makes a new key: older
# copies are then left to their age, and to Gradio's delete_cache.
NAME_KEY = secrets.token_bytes(16)
TRACE_NAME = re.compile(r"specviz-trace-([0-9a-f]{16})-([0-9a-f]{16})\.json")


def trace_file_name() -> str:
    """A fresh, signed trace file name: specviz-trace-<16 hex nonce>-<16 hex tag>.json."""
    nonce = secrets.token_hex(8)
    return f"specviz-trace-{nonce}-{_tag(nonce)}.json"


def is_trace_file_name(name: str) -> bool:
    """Whether `name` is one trace_file_name() gave in this process."""
    m = TRACE_NAME.fullmatch(name)
    return m is not None and hmac.compare_digest(m[2], _tag(m[1]))


def _tag(nonce: str) -> str:
    return hmac.new(NAME_KEY, nonce.encode("ascii"), "sha256").hexdigest()[:16]


def write_trace_file(folder: Path, events, keep: int, max_age_s: float) -> Path:
    """Write the run's trace under a fresh signed name (never the trace's own run_id), then drop the
    folder's files older than max_age_s and all but the newest `keep`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / trace_file_name()
    write_trace(path, events)
    size = path.stat().st_size
    if size > MAX_TRACE_BYTES:  # it could not be loaded back: not offered
        path.unlink(missing_ok=True)
        raise ValueError(
            f"this run's trace is {size / 2**20:.1f} MiB, over the {MAX_TRACE_BYTES / 2**20:.0f} MiB a "
            f"trace can be loaded back; it is not offered for download"
        )
    prune(folder, keep, max_age_s, spare=path)
    return path


def prune_cache(folder: Path, keep: int, max_age_s: float) -> int:
    """Bound the copies Gradio's file cache keeps of the trace files this app wrote (<folder>/<hash>/<name>, what
    it serves downloads from): delete those past their age or beyond the newest `keep`; returns how many.
    Only a signed name (trace_file_name) counts toward `keep`, and of each name only its oldest file (the app's
    copy: an upload of a downloaded file comes later), so uploads named like trace files can never push a
    visitor's download out; those are ui/uploads.py's to bound, and go here only past their age. Nothing else in
    the folder (shared by every Gradio app) is touched; Gradio's own delete_cache (1 h) covers the rest."""
    now, gone, copies = time.time(), 0, {}  # name -> (mtime, path) of its oldest file
    for f in folder.glob("*/specviz-trace-*.json"):
        try:
            mtime = f.stat().st_mtime
        except OSError:
            continue
        if now - mtime > max_age_s:
            gone += _unlink(f)
        elif is_trace_file_name(f.name) and mtime < copies.get(f.name, (math.inf,))[0]:
            copies[f.name] = (mtime, f)
    for _, f in sorted(copies.values(), reverse=True)[keep:]:
        gone += _unlink(f)
    return gone


def _unlink(f: Path) -> int:
    """Delete a cached copy and its hash folder once empty; 1 if it went."""
    try:
        f.unlink(missing_ok=True)
    except OSError:  # not ours to delete after all
        return 0
    try:
        f.parent.rmdir()
    except OSError:  # the folder holds more
        pass
    return 1


def prune(folder: Path, keep: int, max_age_s: float, spare: Path | None = None) -> None:
    """Delete trace files past their age or beyond the newest `keep` (the spared one always stays)."""
    now = time.time()
    files = []
    for f in folder.glob("specviz-trace-*.json"):
        try:
            files.append((f.stat().st_mtime, f))
        except OSError:  # removed by another worker meanwhile
            continue
    files.sort(reverse=True)
    others = [(t, f) for t, f in files if f != spare]
    for rank, (mtime, f) in enumerate(others):
        if rank >= keep - 1 or now - mtime > max_age_s:
            f.unlink(missing_ok=True)


# --- what a visitor may read of an error ----------------------------------------------------------

# an absolute POSIX path inside a message: '/a/b c.json' quoted, or /a/b unquoted (not part of a URL or a word)
QUOTED_PATH = re.compile(r"(['\"])(/[^'\"\n]+)\1")
BARE_PATH = re.compile(r"(?<![\w.:/~-])(/[\w.@+-]+)+/?")


def public_error(e: BaseException) -> str:
    """An exception's message as a visitor may read it: no server path, only a file's base name. An OSError is
    its reason and base name ("No such file or directory: 'trace.json'"); any other message has each absolute
    path cut to its base name. Call it wherever str(e) would reach a page or an API client."""
    if isinstance(e, OSError) and e.strerror:
        name = Path(str(e.filename)).name if e.filename is not None else ""
        return f"{e.strerror}: {name!r}" if name else e.strerror
    text = QUOTED_PATH.sub(lambda m: f"{m[1]}{Path(m[2]).name or m[2]}{m[1]}", str(e))
    return BARE_PATH.sub(lambda m: Path(m[0]).name or m[0], text)
