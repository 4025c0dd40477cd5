"""The committed training prompts of the draft heads (assets/heads/train_prompts.txt), and how they grew.

    python -m training.prompts --add 2700 --seed 1     # appends new prompts to the committed set

Prompts are templates × topics: everyday assistant requests (explanations, stories, poems, letters, lists,
advice, comparisons, how-tos), the kinds of request the app is asked. None equals, contains or is contained in a
benchmark prompt (nor an app example: tests/test_heads.py checks both), so held-out and benchmark numbers stay
honest.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from engine.heads.modules import ASSETS

PROMPTS = ASSETS / "train_prompts.txt"
ROOT = Path(__file__).resolve().parents[2]

CHARACTERS = [
    "a shy robot",
    "an old fisherman",
    "a curious cat",
    "a young wizard",
    "a retired astronaut",
    "a lonely giant",
    "a clever fox",
    "a baker",
    "a lost puppy",
    "a night-shift nurse",
    "a street musician",
    "a girl who collects stones",
    "a talking tree",
    "a grumpy mailman",
    "twin sisters",
    "a village doctor",
    "a penguin",
    "a forgetful inventor",
    "a beekeeper",
    "a knight afraid of horses",
    "a ghost in a library",
    "a school teacher",
    "a small boat",
    "a desert traveller",
    "a chess champion",
    "a snow leopard",
    "a gardener",
    "a pirate who hates the sea",
    "an owl",
    "a train conductor",
    "a tiny mouse",
    "a famous painter",
    "a farmer",
    "a time traveller",
    "a mermaid",
    "a firefighter",
    "an old clockmaker",
]
EVENTS = [
    "finds a map",
    "loses their voice",
    "moves to a new city",
    "meets a stranger",
    "wins a contest",
    "builds a bridge",
    "plants a seed",
    "gets lost in a forest",
    "opens a shop",
    "learns to swim",
    "writes a letter",
    "discovers a secret door",
    "makes a new friend",
    "climbs a mountain",
    "saves a village",
    "misses a train",
    "finds a lost ring",
    "waits for the rain",
    "starts a band",
    "visits the ocean",
]
TOPICS = [
    "volcanoes",
    "the moon",
    "rainforests",
    "honey",
    "electric cars",
    "the printing press",
    "sleep",
    "friendship",
    "the internet",
    "photosynthesis",
    "earthquakes",
    "chocolate",
    "the Olympic games",
    "recycling",
    "dinosaurs",
    "coffee",
    "the human heart",
    "black holes",
    "bread",
    "music",
    "libraries",
    "rivers",
    "clouds",
    "bicycles",
    "vaccines",
    "the Great Wall of China",
    "electricity",
    "maps",
    "whales",
    "deserts",
    "gravity",
    "money",
    "the seasons",
    "rainbows",
    "bees",
    "glaciers",
    "the ancient Greeks",
    "computers",
    "kindness",
    "public transport",
    "spiders",
    "the stock market",
    "memory",
    "forests",
    "tides",
    "the solar system",
    "salt",
    "the alphabet",
    "trains",
    "birds",
    "wind",
    "cheese",
    "islands",
    "robots",
    "mushrooms",
    "castles",
    "the telephone",
    "lightning",
    "snow",
    "cities",
    "paper",
    "stars",
    "tea",
    "soap",
    "plastic",
    "magnets",
    "the compass",
    "frogs",
    "lakes",
    "batteries",
    "ants",
    "clocks",
]
SCENES = [
    "a quiet morning",
    "the first snow",
    "a rainy city street",
    "a summer garden",
    "an empty beach",
    "a mountain lake",
    "a busy market",
    "the last day of school",
    "a candle in the dark",
    "falling leaves",
    "a starry sky",
    "an old house",
    "a river in spring",
    "the smell of bread",
    "a thunderstorm",
    "a long train ride",
    "a grandmother's kitchen",
    "the desert at dawn",
    "a lighthouse",
    "the city at night",
]
TEMPLATES = [
    ("story", "Write a short story about {c} who {e}."),
    ("story", "Tell me a story about {c} who {e}."),
    ("story", "Write a bedtime story about {c}."),
    ("story", "Tell a short story in which {c} {e}."),
    ("poem", "Write a poem about {s}."),
    ("poem", "Write a short poem about {s}."),
    ("poem", "Write a four-line poem about {t}."),
    ("poem", "Write a rhyming poem about {t}."),
    ("explain", "Explain {t} to a ten-year-old."),
    ("explain", "Explain {t} in simple words."),
    ("explain", "Why should we care about {t}? Answer in a short paragraph."),
    ("explain", "Tell me five facts about {t}."),
    ("explain", "What would a child find surprising about {t}?"),
    ("describe", "Describe {s} in a few sentences."),
    ("describe", "Describe {c} in one paragraph."),
    ("letter", "Write a short letter from {c} to a friend."),
    ("letter", "Write a thank-you note to a neighbour about {t}."),
    ("list", "List three ideas for a school project about {t}."),
    ("list", "Give me five questions a student might ask about {t}."),
    ("advice", "What advice would you give to someone who wants to learn about {t}?"),
    ("compare", "Compare {t} and {u} in a few sentences."),
    ("howto", "How can a family learn more about {t} together?"),
    ("dialogue", "Write a short conversation between {c} and {d}."),
    ("opinion", "Write a paragraph arguing that people should learn more about {t}."),
    ("summary", "Summarise what everyone should know about {t}."),
    ("riddle", "Write a riddle whose answer is {t}."),
    ("diary", "Write a diary entry by {c} about a strange day."),
]


def measured_prompts() -> list[str]:
    """Every benchmark prompt: a training prompt may not equal, contain or sit inside one. (The app's examples
    live above engine/, which imports nothing from there; tests/test_heads.py checks the file against them too.)"""
    return [
        json.loads(line)["prompt"]
        for f in sorted((ROOT / "engine" / "prompts").glob("*.jsonl"))
        for line in f.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]


def clashes(prompt: str, measured: list[str]) -> bool:
    p = prompt.lower()
    return any(p in m.lower() or m.lower() in p for m in measured)


def new_prompts(count: int, seed: int, existing: list[str]) -> list[str]:
    """`count` distinct template × topic prompts, none already in `existing` nor clashing with a measured one."""
    rng, measured, seen, out = random.Random(seed), measured_prompts(), set(existing), []
    while len(out) < count:
        _, template = rng.choice(TEMPLATES)
        t, u = rng.sample(TOPICS, 2)
        c, d = rng.sample(CHARACTERS, 2)
        prompt = template.format(c=c, d=d, e=rng.choice(EVENTS), s=rng.choice(SCENES), t=t, u=u)
        if prompt not in seen and not clashes(prompt, measured):
            seen.add(prompt)
            out.append(prompt)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m training.prompts", description=__doc__.split("\n\n")[0])
    ap.add_argument("--add", type=int, required=True, help="how many new prompts to append")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--file", default=str(PROMPTS))
    args = ap.parse_args(argv)
    path = Path(args.file)
    existing = (
        [p for p in path.read_text(encoding="utf-8").splitlines() if p.strip()] if path.exists() else []
    )
    added = new_prompts(args.add, args.seed, existing)
    path.write_text("\n".join(existing + added) + "\n", encoding="utf-8")
    print(f"{path}: {len(existing)} + {len(added)} prompts")


if __name__ == "__main__":
    main()
