"""The start-up recording's trace (ui/run.py served_recording): written whole before any visitor is given it, and
once however many visitors are served it at the same moment (a room pressing Generate on the default example)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from engine.events import trace_from_json
from ui import run
from ui.outputs import RUN_OUTPUTS, RunOutputs
from ui.tour import tour_runs


def test_a_room_served_the_recording_at_once_gets_one_whole_trace(tmp_path, monkeypatch):
    """Eight visitors at the same moment: one trace written, whole, the same file for all; gone, it is written again.
    The control: without the lock, a slow write is made more than once."""
    monkeypatch.setattr(run, "RECORDING_DIR", tmp_path / "recording")
    monkeypatch.setitem(
        run.RECORDED, "outputs", RunOutputs(*[None] * RUN_OUTPUTS)._replace(state=tour_runs())
    )
    monkeypatch.delitem(run.RECORDED, "trace", raising=False)
    writes = []
    real = run.write_trace

    def slow(path, events):
        writes.append(path)
        time.sleep(0.2)  # long enough for every other visitor to arrive meanwhile
        real(path, events)

    monkeypatch.setattr(run, "write_trace", slow)

    def room() -> list:
        got, together = [], threading.Barrier(8)

        def visitor():
            together.wait()  # all eight at the same moment
            try:
                got.append(run.served_recording().download)
            except OSError as e:  # the control's visitors rename one another's half-written file
                got.append(e)

        threads = [threading.Thread(target=visitor) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return got

    got = room()
    assert all(isinstance(u, dict) for u in got), got
    paths = {u["value"] for u in got}
    assert len(writes) == 1 and len(paths) == 1
    assert trace_from_json(Path(paths.pop()).read_text(encoding="utf-8"))  # whole: it loads back
    Path(run.RECORDED["trace"]).unlink()
    run.served_recording()
    assert len(writes) == 2 and Path(run.RECORDED["trace"]).exists()
    # the control
    Path(run.RECORDED["trace"]).unlink()
    monkeypatch.setattr(run, "_RECORDING_LOCK", _NoLock())
    room()
    assert len(writes) > 3


class _NoLock:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
