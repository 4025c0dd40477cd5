"""Broad training material for the draft heads, read offline from what a Debian machine can install.

Two kinds, both labelled by the target itself (self-distillation):
  * texts: real English, German and code read from installed files (SOURCES: Python's documentation sources and
    its standard library, the Debian Reference, English and German manual pages), cut into chunks of whole
    lines. The target reads each chunk once (one batched forward per chunk, teacher forcing) and its argmax at
    every position is the label: no generation loop, so ~10-50× more tokens per CPU-hour than answers.
  * instructions: requests in every Spec-Bench category (translate German to English, summarise a passage,
    answer a factual question, solve a word problem, answer from a given passage, multi-turn writing and
    coding) built from those texts and seeded templates; the target answers them through its chat template, the
    format the demo and the benchmark use (train.py generates the answers).
Everything is deterministic given the seed and the installed package versions (`manifest` records them). Nothing
here may equal, contain or sit inside a Spec-Bench question or a benchmark / example prompt
(tests/test_heads.py checks the instructions; `disjoint` drops any text chunk that holds one).
"""

from __future__ import annotations

import glob
import gzip
import html
import json
import random
import re
import subprocess
from pathlib import Path

from engine.specbench import load_questions

from . import sharegpt

PROMPTS_DIR = Path(__file__).resolve().parents[1] / "prompts"  # the benchmark prompt sets

# source name -> (glob of installed files, reader, the Debian package that installs them)
SOURCES = {
    "python-docs": ("/usr/share/doc/python3.11/html/_sources/library/*.rst.txt", "text", "python3.11-doc"),
    "python-code": ("/usr/lib/python3.11/*.py", "text", "libpython3.11-minimal libpython3.11-stdlib"),
    "debian-reference": ("/usr/share/doc/debian-reference-en/docs/*.en.html", "html", "debian-reference-en"),
    "man-en": ("/usr/share/man/man1/[!g]*.1.gz", "man", "manpages"),  # not g*: ~18k generated gcloud pages
    "man-de": ("/usr/share/man/de/man[1-8]/*.gz", "man", "manpages-de"),
}
# what `make heads-data` installs
PACKAGES = sorted({pkg for _, _, pkgs in SOURCES.values() for pkg in pkgs.split()})
CATEGORIES = ("translation", "summarization", "qa", "math_reasoning", "rag", "mt_bench")


def read_file(path: str, kind: str) -> str:
    """A file's text: reST / code as is, HTML without its tags, a gzipped manual page without its roff macros."""
    if kind == "man":
        raw = gzip.open(path, "rt", encoding="utf-8", errors="replace").read()
        lines = [ln for ln in raw.splitlines() if not ln.startswith((".", "'\\\"", '\\"'))]
        text = "\n".join(lines).replace("\\-", "-")
        text = re.sub(r"\\f[BIRP]|\\f\(..|\\\(..|\\[-e&%|^]|\\s[+-]?\d", "", text)
        return text
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    if kind == "html":
        text = re.sub(r"(?is)<(script|style).*?</\1>", " ", text)
        text = html.unescape(re.sub(r"<[^>]+>", " ", text))
        text = "\n".join(re.sub(r"[ \t]+", " ", ln).strip() for ln in text.splitlines())
    return text


def paragraphs(text: str, min_chars: int = 40) -> list[str]:
    """Blank-line separated blocks with at least min_chars of letters (drops tables of dashes, headers)."""
    out = []
    for block in re.split(r"\n\s*\n", text):
        block = block.strip()
        if sum(ch.isalpha() for ch in block) >= min_chars:
            out.append(block)
    return out


def chunks(source: str, max_chars: int = 2000, seed: int = 0) -> list[str]:
    """A source's files as chunks of whole paragraphs up to max_chars each, files in a seeded order."""
    pattern, kind, _ = SOURCES[source]
    files = sorted(glob.glob(pattern))
    random.Random(f"{seed}:{source}").shuffle(files)
    out = []
    for path in files:
        current = ""
        for para in paragraphs(read_file(path, kind)):
            para = para[:max_chars]
            if current and len(current) + len(para) + 2 > max_chars:
                out.append(current)
                current = ""
            current = f"{current}\n\n{para}" if current else para
        if current:
            out.append(current)
    return out


def budget(texts, chars: int) -> list[str]:
    """The first texts whose characters add up to about `chars` (a token budget × characters per token)."""
    out, total = [], 0
    for text in texts:
        if total >= chars:
            break
        out.append(text)
        total += len(text)
    return out


def disjoint(texts: list[str], forbidden: list[str], probe: int = 60) -> list[str]:
    """texts without any that contains a forbidden text or a `probe`-character piece of one (a benchmark
    question quoted in a manual page is not training material)."""
    pieces = {f[i : i + probe] for f in forbidden for i in range(0, max(len(f) - probe, 0) + 1, probe)} | {
        f for f in forbidden if len(f) <= probe
    }
    pieces = {p for p in pieces if len(p.strip()) >= 20}
    return [t for t in texts if not any(p in t for p in pieces)]


def sentences(text: str) -> list[str]:
    """Sentences of prose (ending in . ! ?), 30 to 300 characters, no code or option lists."""
    flat = re.sub(r"\s+", " ", text)
    out = [s.strip() for s in re.split(r"(?<=[.!?])\s+", flat)]
    return [s for s in out if 30 <= len(s) <= 300 and s[:1].isupper() and not re.search(r"[{}<>=$\\|]|--", s)]


# -- instructions in Spec-Bench's categories ----------------------------------------------------------------------

WORDS = ("apples", "books", "marbles", "tickets", "stamps", "pencils", "cookies", "coins", "shells", "cards")
PEOPLE = ("Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Gus", "Hana", "Ivo", "Jun", "Kira", "Leo")
MT_TASKS = (
    "Write a short blog post about {topic}.",
    "Compose a friendly email to a colleague about {topic}.",
    "Pretend you are a tour guide and describe {topic} to visitors.",
    "Give three arguments for and against {topic}.",
    "Explain {topic} to a high-school student.",
    "Write a limerick about {topic}.",
    "Draft a short speech opening a conference on {topic}.",
    "Describe a day in the life of someone who works on {topic}.",
)
TOPICS = (
    "renewable energy",
    "urban gardening",
    "public libraries",
    "remote work",
    "ocean plastics",
    "space probes",
    "bicycle commuting",
    "volcanoes",
    "ancient trade routes",
    "the history of printing",
    "honeybees",
    "tidal power",
    "sleep hygiene",
    "the metric system",
    "chess openings",
    "rainforests",
    "jazz music",
    "electric trains",
    "glaciers",
    "board games",
    "street food",
    "lighthouses",
    "coral reefs",
    "recycling",
)
QA = (
    "What is {thing} used for?",
    "Briefly, what is {thing} about?",
    "Who cares about {thing}, and why?",
    "In one paragraph, explain {thing}.",
    "Name three facts about {thing}.",
)
RAG_QUESTIONS = (
    "What is the main point of the passage?",
    "Which details does the passage give? List them.",
    "According to the passage, what should a user do first?",
    "What problem does the passage describe?",
)


def word_problem(rng: random.Random) -> str:
    """A seeded grade-school word problem (numbers and names vary)."""
    a, b, c = rng.randint(3, 60), rng.randint(2, 30), rng.randint(2, 9)
    who, other, thing = rng.choice(PEOPLE), rng.choice(PEOPLE), rng.choice(WORDS)
    forms = (
        f"{who} has {a} {thing}. {other} gives {who} {b} more, and then {who} shares them equally among {c} "
        f"friends. How many {thing} does each friend get, and how many are left over?",
        f"A shop sells {thing} in boxes of {c}. {who} buys {a} boxes and gives away {b} {thing}. How many "
        f"{thing} does {who} have now? Show your steps.",
        f"{who} reads {a} pages on Monday and {b} pages more each day after that. How many pages has {who} read "
        f"after {c} days?",
        f"A train travels {a * 5} km in {c} hours. At the same speed, how far does it go in {c + b % 5} hours?",
    )
    return rng.choice(forms)


def man_names(limit: int = 400) -> list[str]:
    """Command names with a one-line description from the English manual pages' NAME sections ("ls")."""
    out = []
    for path in sorted(glob.glob(SOURCES["man-en"][0]))[: limit * 4]:
        name = Path(path).name.split(".")[0]
        if re.fullmatch(r"[a-z][a-z0-9-]{1,20}", name):
            out.append(name)
        if len(out) >= limit:
            break
    return out


def instructions(n_per_category: int, seed: int = 0, texts: dict | None = None) -> list[tuple[str, str]]:
    """(category, instruction) pairs, n per Spec-Bench category, seeded; `texts`: source -> chunks to quote from
    (default: read them)."""
    rng = random.Random(seed)
    texts = texts or {s: chunks(s, seed=seed) for s in ("python-docs", "debian-reference", "man-de")}
    prose = [
        s
        for c in texts["python-docs"] + texts["debian-reference"]
        for s in paragraphs(c, 200)
        if "::" not in s and not s.lstrip().startswith((".", "*", "-", "=", ">>>"))
    ]
    german = [s for c in texts["man-de"] for s in sentences(c)]
    commands = man_names()
    out = []
    for _ in range(n_per_category):
        out.append(
            (
                "translation",
                "Translate the following German text into English:\n\n"
                + " ".join(rng.sample(german, min(len(german), rng.randint(1, 3)))),
            )
        )
        passage = rng.choice(prose)[:1200]
        out.append(
            (
                "summarization",
                rng.choice(
                    (
                        "Summarize the following text in two or three sentences:\n\n",
                        "Give a short summary of this passage:\n\n",
                    )
                )
                + passage,
            )
        )
        thing = rng.choice((f"the `{rng.choice(commands)}` command", rng.choice(TOPICS)))
        out.append(("qa", rng.choice(QA).format(thing=thing)))
        out.append(("math_reasoning", word_problem(rng)))
        out.append(
            (
                "rag",
                f"{rng.choice(prose)[:1200]}\n\nAnswer using only the passage above. "
                f"{rng.choice(RAG_QUESTIONS)}",
            )
        )
        out.append(("mt_bench", rng.choice(MT_TASKS).format(topic=rng.choice(TOPICS))))
    return out


def forbidden() -> list[str]:
    """What no training text may hold: every turn of Spec-Bench's 480 questions and every benchmark prompt."""
    out = [turn for q in load_questions() for turn in q["turns"]]
    for path in sorted(PROMPTS_DIR.glob("*.jsonl")):
        out += [
            json.loads(line)["prompt"]
            for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]
    return out


def manifest() -> dict:
    """The installed version of every source package (the texts are deterministic given these)."""
    out = {}
    for pkg in PACKAGES:
        try:
            out[pkg] = (
                subprocess.run(
                    ["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True, text=True, timeout=10
                ).stdout
                or None
            )
        except (OSError, subprocess.SubprocessError):
            out[pkg] = None
    out[sharegpt.PACKAGE] = sharegpt.version()  # a PyPI package in the venv
    return out
