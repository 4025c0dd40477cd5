"""The app's pure glue (ui.app_views) on hand-built events: no model, no server, milliseconds."""

from __future__ import annotations

import json

import pytest

from engine.config import GenerationConfig
from engine.events import trace_to_json
from specviz.demo_trace import long_events, sample_events, speculative_events
from ui import app_guard as guard
from ui import app_views as av


def test_model_specs_map_controls_to_engine_specs(monkeypatch):
    """Drafter choice + parameter become the engine's draft spec; hub pairs bring their preset draft model."""
    # a machine that holds every preset (tests/test_sizing.py)
    monkeypatch.setenv("SPECVIZ_DEVICE_MEMORY_GB", "64")
    assert av.model_specs(av.EMBEDDED_PAIR, "ngram", 0) == ("embedded", "ngram")
    assert av.model_specs(av.EMBEDDED_PAIR, "ngram", 2) == ("embedded", "ngram:2")
    assert av.model_specs(av.EMBEDDED_PAIR, "layerskip", 8.0) == ("embedded", "layerskip:8")
    assert av.model_specs(av.EMBEDDED_PAIR, "quant", 5) == ("embedded", "quant")
    qwen = next(p for p in av.PAIRS if "0.5B → 7B" in p)
    assert av.model_specs(qwen, av.PRESET_DRAFT, 0) == (
        "Qwen/Qwen2.5-7B-Instruct",
        "model:Qwen/Qwen2.5-0.5B-Instruct",
    )
    assert all(av.HUB in p for p in av.PAIRS if p not in (av.EMBEDDED_PAIR, av.GEMMA_PAIR))
    assert av.model_specs(av.GEMMA_PAIR, av.PRESET_DRAFT, 0) == ("embedded-gemma", "model:embedded")
    with pytest.raises(ValueError, match="no separate draft model"):
        av.model_specs(av.EMBEDDED_PAIR, av.PRESET_DRAFT, 0)


def test_config_kwargs_build_valid_configs_and_surface_engine_errors():
    """Slider floats become ints; confidence mode sets p_min; out-of-range values raise the engine's message."""
    cfg = GenerationConfig(**av.config_kwargs(4.0, "confidence (p_min)", 0.4, 0, 0.0, 1, 0.0, 48.0))
    assert (cfg.gamma, cfg.max_new_tokens, cfg.adaptive, cfg.p_min, cfg.seed) == (4, 48, "fixed", 0.4, 0)
    assert GenerationConfig(**av.config_kwargs(4, "heuristic", 0.4, 0, 0, 1, None, 8)).p_min == 0.0
    with pytest.raises(ValueError, match="gamma must be between 1 and 16"):
        GenerationConfig(**av.config_kwargs(17, "fixed", 0, 0, 0, 1, 0, 8))
    with pytest.raises(ValueError, match="capped at 512"):
        av.config_kwargs(4, "fixed", 0, 0, 0, 1, 0, 513)


def test_config_kwargs_pass_tree_settings():
    """Node budget and branching reach GenerationConfig (0 = chain by default); the engine's range errors surface."""
    chain = GenerationConfig(**av.config_kwargs(4, "fixed", 0, 0, 0, 1, 0, 8))
    assert (chain.tree_budget, chain.tree_branching) == (0, 2)
    cfg = GenerationConfig(
        **av.config_kwargs(4, "fixed", 0, 0, 0, 1, 0, 8, tree_budget=16.0, tree_branching=3.0)
    )
    assert (cfg.tree_budget, cfg.tree_branching) == (16, 3) and isinstance(cfg.tree_budget, int)
    assert GenerationConfig(**av.config_kwargs(4, "fixed", 0, 0, 0, 1, 0, 8, None, None)).tree_budget == 0
    with pytest.raises(ValueError, match="tree_budget must be between 0"):
        GenerationConfig(**av.config_kwargs(4, "fixed", 0, 0, 0, 1, 0, 8, tree_budget=65))
    with pytest.raises(ValueError, match="tree_branching must be between 1 and 8"):
        GenerationConfig(**av.config_kwargs(4, "fixed", 0, 0, 0, 1, 0, 8, tree_budget=8, tree_branching=9))


def test_views_cut_at_a_round_and_full():
    """views() returns 6 HTML strings + 5 figures; at round r the stream shows r rounds; figures can be skipped."""
    events = sample_events()
    full = av.views(events)
    assert len(full) == len(av.VIEWS) == 11 and all(isinstance(v, str) for v in full[:6])
    assert 'data-rounds="4"' in full[0] and 'data-rounds="4"' in full[4]
    at1 = av.views(events, 1)
    assert 'data-rounds="1"' in at1[0] and at1[1].count('class="tree-round"') == 1
    assert av.views(events, 99)[0] == full[0]
    assert av.views(events, figures=False)[6:] == (None,) * 5
    assert 'data-round="4"' not in full[5] and 'data-round="3"' in full[5]  # verify: the last verified round
    assert 'class="specviz specviz-verify" data-round="1"' in at1[5]
    assert 'class="specviz specviz-verify" data-round="2"' in av.views(events, selected=2)[5]
    assert "sv-empty" in av.summary_html([]) and "vs autoregressive" in full[4]


def test_load_trace_accepts_traces_and_rejects_bad_files(tmp_path):
    """A written trace loads back; too-large, non-JSON, non-trace and empty traces are ValueErrors."""
    good = tmp_path / "t.json"
    good.write_text(trace_to_json(sample_events()), encoding="utf-8")
    assert len(av.load_trace(good)) == len(sample_events())
    cases = {
        "big.json": "x" * (av.MAX_TRACE_BYTES + 1),
        "nojson.json": "{oops",
        "other.json": json.dumps({"format": "nope"}),
        "empty.json": json.dumps({"format": "specviz-trace", "version": 1, "events": []}),
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
        with pytest.raises(ValueError):
            av.load_trace(tmp_path / name)
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ValueError, match="not valid JSON"):
        av.load_trace(tmp_path / "bin.json")


def test_api_result_gives_text_and_summary_json():
    """The API's (text, summary JSON) carries the speculative run's text, stop reason and measured speedup."""
    text, summary = av.api_result(sample_events())
    data = json.loads(summary)
    assert text and data["stop_reason"] and data["speedup"] > 0


def test_model_allowlist_refuses_paths_and_unknown_ids():
    """Only preset models load from the UI/API; an env var widens the list; paths never pass."""
    from ui.app_views import check_allowed

    check_allowed("embedded", "model:HuggingFaceTB/SmolLM2-135M-Instruct", env="")
    check_allowed("embedded", "ngram", env="")
    for target, draft in [("/etc", "ngram"), ("evil/model", "self"), ("embedded", "model:/tmp/x")]:
        with pytest.raises(ValueError, match="is not allowed here"):
            check_allowed(target, draft, env="")
    check_allowed("my-org/private", "self", env="my-org/private, other/x")


# --- ui.app_guard: what the public app checks and bounds ---------------------------------------

API_OK = dict(
    prompt="hi", draft="ngram", gamma=4, max_new_tokens=8, temperature=0.0, seed=0, target="embedded"
)


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("prompt", "bad \ud800 text", "prompt is not valid text: a lone surrogate"),
        ("prompt", 42, "prompt must be text, got int"),
        ("prompt", "x" * 2048 * guard.CHARS_PER_TOKEN + "x", "this server reads at most 32,768 characters"),
        ("max_new_tokens", "10", "max_new_tokens must be a whole number, got str"),
        ("max_new_tokens", [10], "max_new_tokens must be a whole number, got list"),
        ("max_new_tokens", 513, "max_new_tokens must be between 1 and 512"),
        ("target", None, "target must be a model name"),
        ("target", 7, "target must be a model name"),
        ("draft", None, "draft must be a model name"),
        ("draft", 3, "draft must be a model name"),
        ("gamma", float("inf"), "gamma must be a whole number, got inf"),
        ("gamma", float("nan"), "gamma must be a whole number, got nan"),
        ("gamma", 1e300, "gamma must be between 1 and 16"),
        ("gamma", True, "gamma must be a whole number, got bool"),
        ("seed", float("inf"), "seed must be a whole number, got inf"),
        ("seed", float("nan"), "seed must be a whole number, got nan"),
        ("seed", 2**64, "seed must be between 0 and 9223372036854775807"),
        ("seed", -1, "seed must be between 0 and"),
        ("temperature", float("nan"), "temperature must be a finite number"),
        ("temperature", "0", "temperature must be a finite number"),
    ],
)
def test_api_arguments_name_the_setting_and_its_range(name, value, message):
    """Every bad /generate argument a JSON client can send is refused with a message naming the setting."""
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        guard.api_arguments(
            **dict(API_OK, **{name: value}), max_new_cap=av.MAX_NEW_TOKENS, max_prompt_tokens=2048
        )
    assert guard.api_arguments(**API_OK, max_new_cap=512, max_prompt_tokens=2048)["gamma"] == 4


def test_prompt_token_cap_names_the_limit():
    """A prompt over the app's token cap is refused with its length and the cap (in characters when the
    prompt's length is known: tests/test_app_messages.py), never the environment variable."""
    guard.check_prompt_tokens(2048, 2048)
    with pytest.raises(ValueError, match=r"prompt is 2,049 tokens; this server reads at most 2,048$"):
        guard.check_prompt_tokens(2049, 2048)


def test_trace_files_get_fresh_names_and_the_folder_stays_bounded(tmp_path):
    """A run_id with '/', NUL or 300 characters never reaches a file name; the folder keeps at most `keep` files."""
    import dataclasses
    import os

    written = []
    for run_id in ["../../etc/passwd", "a/b", "nul\x00id", "x" * 300, "same", "same"]:
        events = sample_events()
        events[0] = dataclasses.replace(events[0], run_id=run_id)
        path = guard.write_trace_file(tmp_path / "traces", events, keep=3, max_age_s=3600)
        assert path.parent == tmp_path / "traces" and run_id not in path.name and path.exists()
        if run_id == "same":
            assert av.load_trace(path)[0].run_id == run_id  # the trace itself is intact
        else:  # written as the run had it, refused when uploaded back (engine/validate.py)
            with pytest.raises(ValueError, match="run_id must be 1 to 64 characters"):
                av.load_trace(path)
        written.append(path)
        assert len(list((tmp_path / "traces").iterdir())) <= 3
    assert len(set(written)) == len(written)  # the same run_id twice: two files, none overwritten
    old = written[-1]
    os.utime(old, (0, 0))  # as if written in 1970
    guard.write_trace_file(tmp_path / "traces", sample_events(), keep=3, max_age_s=3600)
    assert not old.exists()


def test_pack_keeps_a_run_compact_and_exact():
    """A session's settled run packs to far fewer bytes than its JSON trace and unpacks to equal events."""
    events = long_events(200)
    blob = guard.pack(events)
    assert isinstance(blob, bytes) and len(blob) < len(trace_to_json(events)) / 5
    assert guard.unpack(blob) == events and guard.unpack(events) == events and guard.unpack(None) == []


def test_a_cut_run_ends_with_its_committed_text_and_reason():
    """A run cut before the engine's Finished (time limit, Stop) still yields its text and says why it stopped."""
    cut = [e for e in speculative_events() if e.kind != "finished"][:-2]  # rounds 1-3 committed, round 4 not
    text, summary = av.api_result(cut, cut_reason="time_limit")
    assert text == "The cat ran<script>alert(1)</script> & dog\n Z"
    assert json.loads(summary)["stop_reason"] == "time_limit" and json.loads(summary)["new_tokens"] == 8
    done = guard.ended(cut, "cancelled")
    assert done[-1].kind == "finished" and done[-1].stop_reason == "cancelled" and done[-1].round == 3
    assert "stopped (Stop pressed)" in av.summary_html(done)
    assert guard.ended(sample_events(), "cancelled") == sample_events()  # a finished run is left alone


def test_replay_length_is_bounded_by_the_rounds_present():
    """A trace numbering its last round 1e12 gets a replay slider of its real length, not 1e12 steps."""
    import dataclasses

    events = [
        dataclasses.replace(e, round=10**12) if e.kind != "run_started" and e.round == 4 else e
        for e in speculative_events(finished=False)
    ]
    assert guard.replay_rounds(events) == 4 and guard.replay_rounds(sample_events()) == 4
    assert guard.replay_rounds([]) == 0


def test_views_per_round_do_work_linear_in_the_events(monkeypatch):
    """A streamed run folded into one RunSet, with views() after every round, folds each event once, builds each
    round's stream and tree markup once and the summary once per update: O(R) per round, not O(R²) in all."""
    from specviz import runs, tokens, tree

    counts = {"as_event": 0, "round_html": 0, "round_tree_html": 0, "summarize": 0}

    def counted(module, name):
        real = getattr(module, name)

        def wrapper(*a, **k):
            counts[name] += 1
            return real(*a, **k)

        monkeypatch.setattr(module, name, wrapper)

    counted(runs, "as_event")
    counted(tokens, "round_html")
    counted(tree, "round_tree_html")
    counted(runs, "summarize")
    events = long_events(120)
    rs, updates = runs.RunSet(), 0
    for e in events:
        rs.add(e)
        if e.kind == "round_timed":
            av.views(rs, figures=False)
            updates += 1
    n_rounds = sum(1 for e in events if e.kind == "round_timed")
    assert updates == n_rounds >= 100
    assert counts["as_event"] == len(events)  # each event folded once (quadratic: ~len(events) * updates / 2)
    assert counts["round_html"] == n_rounds and counts["round_tree_html"] == n_rounds
    assert counts["summarize"] == updates  # once per update, shared by the summary, explain and race panels
    final = av.views(rs, figures=False)
    assert final[:6] == av.views(list(events), figures=False)[:6]  # the same views as from the plain list


def test_a_token_carries_its_tooltip_once_in_a_few_hundred_bytes():
    """Bytes per token of the stream stay bounded (a top-5 of both models, no duplicated tooltip payload)."""
    from specviz import render_stream
    from specviz.markup import read_tip

    events = long_events(200)
    html = render_stream(events)
    n = html.count('class="tok ')
    assert n >= 200 and len(html.encode("utf-8")) / n < 450
    tip = read_tip(html[html.index('class="tok tok-accepted') :])
    assert (
        tip["h"] == "accepted draft token"
        and tip["k"]
        and "tabindex" not in html.replace('class="specviz specviz-stream"', "")[200:]
    )


def test_a_replayed_round_still_carries_every_rounds_time_for_play():
    """At replay round 1 the stream shows round 1 only, but carries every round's measured time: Play, stepping
    from there in the browser, paces the rounds still to come by their own times (it fell back to 0.1 s)."""
    import re

    events = sample_events()
    full = re.search(r'data-round-s="([^"]*)"', av.views(events, figures=False).stream).group(1)
    at_one = av.views(events, 1, figures=False).stream
    assert re.search(r'data-round-s="([^"]*)"', at_one).group(1) == full and len(full.split(",")) >= 2
    assert 'data-rounds="1"' in at_one
