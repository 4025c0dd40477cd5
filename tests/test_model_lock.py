"""engine.models.load_model's locking, with a slow fake loader: no model is read from disk."""

from __future__ import annotations

import threading

from engine.runtime import models


def test_loaded_model_returns_while_another_spec_is_loading(monkeypatch):
    """A loaded model, and a second spec, load at once while a slow load of a third spec holds its lock."""
    entered, release = threading.Event(), threading.Event()
    calls = []

    def fake_load(spec, dev, dt, trust_remote_code):
        calls.append(spec)
        if spec == "slow/model":
            entered.set()
            assert release.wait(60), "the test never released the slow load"
        return f"loaded {spec}"

    monkeypatch.setattr(models, "_LOADED", {})
    monkeypatch.setattr(models, "_load", fake_load)
    assert models.load_model("embedded") == "loaded embedded"
    results = {}

    def call(spec):
        results.setdefault(spec, []).append(models.load_model(spec))

    slow = [threading.Thread(target=call, args=("slow/model",)) for _ in range(2)]
    slow[0].start()
    assert entered.wait(60)
    slow[1].start()  # waits on slow/model's own lock
    others = [threading.Thread(target=call, args=(spec,)) for spec in ("embedded", "other/model")]
    for t in others:
        t.start()
    for t in others:
        t.join(30)
    finished_while_slow_loads = not any(t.is_alive() for t in others) and not release.is_set()
    release.set()
    for t in slow:
        t.join(30)
    assert finished_while_slow_loads, "a loaded model or another spec waited for the slow load"
    assert results == {
        "embedded": ["loaded embedded"],
        "other/model": ["loaded other/model"],
        "slow/model": ["loaded slow/model"] * 2,
    }
    assert sorted(calls) == ["embedded", "other/model", "slow/model"]  # each spec loaded once
