"""The drafter registry (engine/specs.py): one parser for every spec, one table the engine, beam search, the
app's choices and the trace loader all read; adding a drafter is one file plus one registry line."""

from __future__ import annotations

import dataclasses
import importlib

import pytest

from engine import Engine, GenerationConfig, load_model
from engine.specs import FAMILIES, Arg, Family, ModelLoadError, check_beams, parse_draft, register
from specviz.demo_trace import sample_events
from ui import app_views as av


@pytest.fixture
def toy():
    """The toy family registered for one test, then removed."""
    family = register(
        Family(
            "repeat",
            "repeat[:K]",
            "the last committed token, K times",
            "tests.toy_drafter",
            (Arg("K", "int", 1, 4, default=2),),
            beams=True,
            choice=True,
            param="K",
        )
    )
    yield family
    FAMILIES.pop("repeat")


def test_every_family_names_a_module_with_a_builder():
    """Each registry line points to a drafter module that exists and has build(spec, target, ctx)."""
    for family in FAMILIES.values():
        assert callable(importlib.import_module(family.builder).build), family.name


def test_a_toy_drafter_is_one_file_and_one_registry_line(toy, tiny_dirs):
    """Registered, the toy family runs through the engine (greedy output = AR's), is offered by the app with its
    parameter, drafts for beam search (same beams as plain), and a trace of it sets the controls back."""
    engine = Engine(load_model(tiny_dirs["target"]), "repeat:3")
    cfg = GenerationConfig(gamma=4, max_new_tokens=12)
    spec = list(engine.generate("a b a b a b", cfg))
    ar = list(engine.generate("a b a b a b", cfg, mode="ar"))
    assert spec[-1].token_ids == ar[-1].token_ids
    drafted = [e for e in spec if e.kind == "drafted"]
    assert drafted and all(e.drafter == "repeat:3" and len(e.token_ids) <= 3 for e in drafted)
    kinds = [(e.kind, e.round) for e in spec if e.kind in ("decided", "drafted")]
    assert kinds == [k for r in sorted({e.round for e in drafted}) for k in (("decided", r), ("drafted", r))]
    assert all(e.reason.startswith("repeats ") for e in spec if e.kind == "decided")  # its Note, in its file
    assert "repeat" in av.drafter_choices() and av.model_specs(av.EMBEDDED_PAIR, "repeat", 2) == (
        "embedded",
        "repeat:2",
    )
    assert av.drafter_of("repeat:3") == {"drafter": "repeat", "param": 3}
    beams = GenerationConfig(gamma=3, max_new_tokens=8, num_beams=2)
    best = [list(engine.generate("a b a b", beams, mode=m))[-1].token_ids for m in ("speculative", "ar")]
    assert best[0] == best[1]
    assert check_beams("repeat").name == "repeat"


def test_a_drafter_gets_what_its_factory_declares_and_nothing_else(toy, tiny_dirs):
    """The toy declares no Needs: a run with a session history settles it with no features, and its constructor is
    never handed the history (it takes none). Declaring Needs(features=True) and Needs(history=True) gets both:
    the prompt's features at round 0, each round's kept positions' after, and the session's History."""
    from engine.drafters.base import Factory, Needs
    from engine.drafters.suffix import History

    engine = Engine(load_model(tiny_dirs["target"]), "repeat:3", measure_step=False)
    plain, made = engine.make_drafter, []
    engine.make_drafter = Factory(lambda *args: made.append(plain.build(*args)) or made[-1], plain.needs)
    cfg = GenerationConfig(gamma=3, max_new_tokens=8)
    list(engine.generate("a b a b a b", cfg, history=History()))
    (toy_drafter,) = made
    assert toy_drafter.settled and all(r.features is None for r in toy_drafter.settled)
    assert [r.round for r in toy_drafter.settled] == list(
        range(1, len(toy_drafter.settled) + 1)
    )  # no prefill call
    history, handed = History(), []

    def wants(cfg_, gen, max_len, cache, session):
        handed.append(session)
        return made.append(plain.build(cfg_, gen, max_len, cache)) or made[-1]

    engine.make_drafter = Factory(wants, Needs(features=True, history=True))
    events = list(engine.generate("a b a b a b", cfg, history=history))
    settled = made[-1].settled
    prompt_len = next(e for e in events if e.kind == "run_started").pos
    assert handed == [history] and settled[0].round == 0
    assert settled[0].features.shape[0] == prompt_len - 1  # the prompt's positions but its last
    assert all(r.features is not None and r.features.shape[0] >= 1 for r in settled[1:])
    hidden = engine.target.model.config.hidden_size
    assert all(r.features.shape[1] == hidden for r in settled)


def test_the_toy_is_unknown_once_removed(tiny_dirs):
    """Negative control for the test above: without its registry line the toy spec is refused everywhere."""
    with pytest.raises(ModelLoadError, match="unknown draft spec 'repeat:3'"):
        parse_draft("repeat:3")
    assert "repeat" not in av.drafter_choices()
    with pytest.raises(ValueError, match="unknown drafter 'repeat'"):
        av.model_specs(av.EMBEDDED_PAIR, "repeat", 0)


@pytest.mark.parametrize(
    "text,message",
    [
        ("ngram:0", r"ngram\[:N\] needs 1 <= N <= 8, got 'ngram:0'"),
        ("ngram:x", "'x' is not a whole number"),
        ("ngram:3:4", "'3:4' is not a whole number"),
        ("self:x", "self takes no argument"),
        ("quant:int3", "quant kind must be int8, bf16 or fp16, got 'int3'"),
        ("auto:heads", r"use auto .*auto:ngram .*auto:eagle / auto:medusa"),
        ("model:", "needs a hub id or a path"),
        ("oracle", "use oracle:A"),
        ("oracle:2", r"needs 0 <= A <= 1 and 0 <= C <= 10"),
        ("oracle:0.5:nan", r"needs 0 <= A <= 1"),
        ("", "unknown draft spec ''"),
        ("warp:9", "unknown draft spec 'warp:9'"),
    ],
)
def test_bad_specs_are_refused_by_the_one_parser(text, message):
    """A bad spec is refused before any model loads, naming the family, the argument and its range."""
    with pytest.raises(ModelLoadError, match=message):
        parse_draft(text)


def test_specs_parse_to_typed_values():
    """Defaults where an argument is left out; numbers typed; the text kept as given (the drafter's name)."""
    assert parse_draft("ngram")["N"] == 3 and parse_draft(" ngram:5 ")["N"] == 5
    assert parse_draft("ngram:5").text == "ngram:5"
    oracle = parse_draft("oracle:0.8:0.1")
    assert (oracle["A"], oracle["C"]) == (0.8, 0.1) and parse_draft("oracle:0.8")["C"] == 0.0
    assert (
        parse_draft("model:HuggingFaceTB/SmolLM2-135M-Instruct").model
        == "HuggingFaceTB/SmolLM2-135M-Instruct"
    )
    assert parse_draft("layerskip")["L"] is None  # the builder picks a quarter of the target's layers


def test_beam_search_refuses_what_the_registry_does_not_allow():
    """Only families marked `beams` draft for beams; the message lists them from the registry."""
    with pytest.raises(ModelLoadError, match=r"drafts with 'ngram\[:N\]' or 'self', got draft 'auto'"):
        check_beams("auto")


def test_the_app_offers_the_registry_choices_and_a_trace_sets_them_back():
    """The drafter dropdown is the registry's app choices (in order) plus the preset draft; a loaded trace's draft
    spec is parsed by the same parser."""
    assert av.drafter_choices() == [
        "ngram",
        "self",
        "layerskip",
        "quant",
        "medusa",
        "eagle",
        "auto",
        "lookahead",
        "recycle",
        "suffix",
        av.PRESET_DRAFT,
    ]
    assert av.drafter_of("ngram:2") == {"drafter": "ngram", "param": 2}
    assert av.drafter_of("model:x/y") == {"drafter": av.PRESET_DRAFT}
    assert av.drafter_of("oracle:0.5") == {} and av.drafter_of("nonsense::") == {}
    events = sample_events()
    assert "drafter" not in av.controls_of(events)  # its draft "draft-test" is no spec: the dropdown stays
    events[0] = dataclasses.replace(events[0], draft="self")
    assert av.controls_of(events)["drafter"] == "self"


def test_family_reads_any_spec_or_recorded_name_back_to_its_family():
    """family() is the one reader of a name's family: specs in any case, with arguments out of today's ranges (a
    trace's), and nothing for a name the registry does not know."""
    from engine.specs import family

    assert family("ngram:3") == family(" NGRAM ") == family("ngram:999") == "ngram"
    assert family("auto") == "auto" and family("model:HuggingFaceTB/SmolLM2-135M-Instruct") == "model"
    assert family("bogus:3") == family("") == family(None) == ""


def test_no_module_reads_a_family_by_splitting_the_name():
    """Downstream code asks family(), never `name.split(":")[0]` or `startswith("auto")` (negative control: the
    pattern is seen in a line that has it)."""
    import re
    from pathlib import Path

    pattern = re.compile(r"""split\(":"\)\[0\]|partition\(":"\)\[0\]|startswith\("auto""")
    assert pattern.search('who = drafter.split(":")[0]') and pattern.search('n.startswith("auto")')
    root = Path(__file__).resolve().parent.parent
    found = [
        f"{p.relative_to(root)}:{i}"
        for room in ("engine", "specviz", "ui", "benchmarks")
        for p in sorted((root / room).rglob("*.py"))
        if p.name != "specs.py"
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line) and "not a drafter" not in line
    ]
    assert not found, found


@pytest.mark.parametrize(
    "text, drafter, settings",
    [
        ("ar", "ar", {}),
        ("NGRAM @ 4", "ngram", {"gamma": 4}),
        ("eagle+tree=16x4", "eagle", {"tree_budget": 16, "tree_branching": 4}),
        ("ngram:3@4+tree=12x3", "ngram:3", {"gamma": 4, "tree_budget": 12, "tree_branching": 3}),
    ],
)
def test_one_contestant_grammar(text, drafter, settings):
    """Every benchmark names a contestant one way (ar, SPEC[@γ][+tree=BxW]), parsed once; the normal form parses
    back to itself."""
    from engine.specs import parse_contestant

    c = parse_contestant(text)
    assert (c.drafter, c.settings()) == (drafter, settings) and parse_contestant(c.text) == c


@pytest.mark.parametrize(
    "text, message",
    [
        ("ngram@0", "γ must be a whole number between 1 and 16, got '0'"),
        ("ngram@2.5", "γ must be a whole number between 1 and 16, got '2.5'"),
        ("eagle+tree=16x9", "the tree's W must be a whole number between 1 and 8, got '9'"),
        ("eagle+tree=0x2", "the tree's B must be at least 1"),
        ("eagle+tree=16", "write ar, or SPEC[@γ][+tree=BxW]"),
        ("bogus@3", "unknown draft spec 'bogus'"),
    ],
)
def test_a_bad_contestant_is_refused_naming_the_part(text, message):
    from engine.specs import parse_contestant

    with pytest.raises(ModelLoadError) as refused:
        parse_contestant(text)
    assert message in str(refused.value)
