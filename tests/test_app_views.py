"""The app's pure glue (specviz.app_views) on hand-built events: no model, no server, milliseconds."""
from __future__ import annotations

import json

import pytest

from engine.config import GenerationConfig
from engine.events import trace_to_json
from specviz import app_views as av
from specviz.sample import sample_events


def test_model_specs_map_controls_to_engine_specs():
    """Drafter choice + parameter become the engine's draft spec; hub pairs bring their preset draft model."""
    assert av.model_specs(av.EMBEDDED_PAIR, "ngram", 0) == ("embedded", "ngram")
    assert av.model_specs(av.EMBEDDED_PAIR, "ngram", 2) == ("embedded", "ngram:2")
    assert av.model_specs(av.EMBEDDED_PAIR, "layerskip", 8.0) == ("embedded", "layerskip:8")
    assert av.model_specs(av.EMBEDDED_PAIR, "quant", 5) == ("embedded", "quant")
    qwen = next(p for p in av.PAIRS if "0.5B → 7B" in p)
    assert av.model_specs(qwen, av.PRESET_DRAFT, 0) == ("Qwen/Qwen2.5-7B-Instruct", "model:Qwen/Qwen2.5-0.5B-Instruct")
    assert all(av.HUB in p for p in av.PAIRS if p != av.EMBEDDED_PAIR)
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
    cfg = GenerationConfig(**av.config_kwargs(4, "fixed", 0, 0, 0, 1, 0, 8, tree_budget=16.0, tree_branching=3.0))
    assert (cfg.tree_budget, cfg.tree_branching) == (16, 3) and isinstance(cfg.tree_budget, int)
    assert GenerationConfig(**av.config_kwargs(4, "fixed", 0, 0, 0, 1, 0, 8, None, None)).tree_budget == 0
    with pytest.raises(ValueError, match="tree_budget must be between 0"):
        GenerationConfig(**av.config_kwargs(4, "fixed", 0, 0, 0, 1, 0, 8, tree_budget=65))
    with pytest.raises(ValueError, match="tree_branching must be between 1 and 8"):
        GenerationConfig(**av.config_kwargs(4, "fixed", 0, 0, 0, 1, 0, 8, tree_budget=8, tree_branching=9))


def test_views_cut_at_a_round_and_full():
    """views() returns 5 HTML strings + 5 figures; at round r the stream shows r rounds; figures can be skipped."""
    events = sample_events()
    full = av.views(events)
    assert len(full) == 10 and all(isinstance(v, str) for v in full[:5])
    assert 'data-rounds="4"' in full[0] and 'data-rounds="4"' in full[4]
    at1 = av.views(events, 1)
    assert 'data-rounds="1"' in at1[0] and at1[1].count('class="tree-round"') == 1
    assert av.views(events, 99)[0] == full[0]
    assert av.views(events, figures=False)[5:] == (None,) * 5
    assert "sv-empty" in av.summary_html([]) and "vs autoregressive" in full[4]


def test_round_delays_follow_measured_times_and_speed():
    """Replay waits each round's measured time ÷ speed, clamped to 0.05..2 s."""
    delays = av.round_delays(sample_events(), 1.0)
    assert sorted(delays) == [1, 2, 3, 4] and delays[1] == pytest.approx(0.066)
    assert av.round_delays(sample_events(), 100.0)[1] == 0.05


def test_load_trace_accepts_traces_and_rejects_bad_files(tmp_path):
    """A written trace loads back; too-large, non-JSON, non-trace and empty traces are ValueErrors."""
    good = tmp_path / "t.json"
    good.write_text(trace_to_json(sample_events()), encoding="utf-8")
    assert len(av.load_trace(good)) == len(sample_events())
    cases = {"big.json": "x" * (av.MAX_TRACE_BYTES + 1), "nojson.json": "{oops",
             "other.json": json.dumps({"format": "nope"}),
             "empty.json": json.dumps({"format": "specviz-trace", "version": 1, "events": []})}
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
    from specviz.app_views import check_allowed

    check_allowed("embedded", "model:HuggingFaceTB/SmolLM2-135M-Instruct", env="")
    check_allowed("embedded", "ngram", env="")
    for target, draft in [("/etc", "ngram"), ("evil/model", "self"), ("embedded", "model:/tmp/x")]:
        with pytest.raises(ValueError, match="is not allowed here"):
            check_allowed(target, draft, env="")
    check_allowed("my-org/private", "self", env="my-org/private, other/x")
