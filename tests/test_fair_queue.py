"""The fair queue (ui/fair_queue.py) in front of a real Gradio 6 queue: a tiny Blocks app whose compute handler
records every call, served in-process with the app's middleware, driven over raw HTTP as a browser and a flooder
would. No model: seconds."""

from __future__ import annotations

import json
import threading
import time

import gradio as gr
import httpx
import pytest
from starlette.middleware import Middleware

from tests.app_server import OpenPage, free_port
from ui import fair_queue as fq

CALLS: list[str] = []  # the compute handler's inputs, in the order it ran them
GATE = threading.Event()  # holds a running job until a test opens it


def work(text: str):
    """The stand-in compute job: records its input, then holds its slot until GATE opens (at most 20 s)."""
    CALLS.append(text)
    GATE.wait(20)
    yield text.upper()


# the server's bounds; a test may hold the sweep off while it counts (the object the fair queue reads)
LIMITS = fq.QueueLimits(
    {"SPECVIZ_QUEUE_SIZE": "5", "SPECVIZ_UNREAD_PER_CLIENT": "4", "SPECVIZ_CONFIRM_S": "2"}
)


@pytest.fixture(scope="module")
def server():
    with gr.Blocks() as demo:
        box, out = gr.Textbox(), gr.Textbox()
        gr.Button().click(work, box, out, api_name="work", concurrency_id=fq.COMPUTE_ID, concurrency_limit=1)
        gr.Button().click(lambda s: s, box, out, api_name="light")
    limits = LIMITS
    demo.queue(max_size=100, api_open=False)
    port = free_port()
    demo.launch(
        server_port=port,
        prevent_thread_lock=True,
        quiet=True,
        app_kwargs={"middleware": [Middleware(fq.FairQueue, blocks=demo, limits=limits)]},
    )
    ids = {d["api_name"]: d["id"] for d in demo.config["dependencies"]}
    yield f"http://127.0.0.1:{port}/gradio_api/", ids, demo
    GATE.set()
    demo.close()


@pytest.fixture(autouse=True)
def fresh():
    CALLS.clear()
    GATE.clear()
    yield
    GATE.set()
    time.sleep(0.3)


def join(api, fn: int, session: str, text: str) -> httpx.Response:
    body = {"data": [text], "fn_index": fn, "session_hash": session, "event_data": None, "trigger_id": None}
    return httpx.post(
        f"{api}queue/join", content=json.dumps(body), headers={"content-type": "application/json"}, timeout=10
    )


class Reader:
    """A browser's result stream for one session, read on a thread: the messages, and whether it completed."""

    def __init__(self, api, session: str):
        self.messages: list[dict] = []
        self.connected = threading.Event()  # the first message arrived: the stream is open
        self.thread = threading.Thread(target=self.read, args=(api, session), daemon=True)
        self.thread.start()

    def read(self, api, session):
        with httpx.stream("GET", f"{api}queue/data", params={"session_hash": session}, timeout=30) as r:
            for line in r.iter_lines():
                self.connected.set()
                if line.startswith("data:"):
                    self.messages.append(json.loads(line[5:]))
                    if self.messages[-1].get("msg") == "close_stream":
                        return

    def completed(self, timeout: float = 15) -> bool:
        self.thread.join(timeout)
        return any(m.get("msg") == "process_completed" and m.get("success") for m in self.messages)


def test_a_flood_that_never_reads_is_refused_alone_and_never_runs(server):
    """50 joins with fresh session hashes from one address, never reading and holding no page open: at most
    SPECVIZ_UNREAD_PER_CLIENT (4) wait, the rest are refused naming the setting (before: 48 accepted, then 'Queue is
    full' for everyone); none of them runs; a visitor behind the same address whose page is open is admitted all the
    same (the oldest unread job makes room) and served at once; the unread ones go after SPECVIZ_CONFIRM_S."""
    api, ids, demo = server
    GATE.set()
    LIMITS.confirm_s = 600  # no sweep while the joins are counted (on a busy machine 50 joins take over 2 s)
    try:
        codes = [join(api, ids["work"], f"flood-{i}", f"flood {i}") for i in range(50)]
        assert [c.status_code for c in codes[:4]] == [200] * 4 and {c.status_code for c in codes[4:]} == {429}
        assert "SPECVIZ_UNREAD_PER_CLIENT" in codes[-1].json()["detail"]
        queue = fq.GradioQueue(demo)
        assert len(queue.waiting()) == 4 and not queue.running()
        assert fq.place_of(demo) == ""  # unread jobs hold no place: a visitor is told no line (not "5th")
        with OpenPage(api, "visitor") as page:
            assert page.ready.is_set()
            assert join(api, ids["work"], "visitor", "mine").status_code == 200
            reader = Reader(api, "visitor")
            assert reader.completed()
        assert CALLS == ["mine"]  # the flood's jobs waited unread and never started
    finally:
        LIMITS.confirm_s = 2
    deadline = time.monotonic() + 30  # SPECVIZ_CONFIRM_S (2 s) and the sweep, on however busy a machine
    while queue.waiting() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert CALLS == ["mine"] and not queue.waiting()  # the unread jobs were dropped, never run


def test_one_compute_job_per_session_runs_at_a_time(server):
    """A second compute job from a session whose first is still running waits (it does not run beside it, nor take
    a second slot), while a light request of the same session goes through; after the first ends the second runs.
    Past 4 waiting requests a session is refused with the rule in words."""
    api, ids, _ = server
    assert join(api, ids["work"], "s1", "first").status_code == 200
    reader = Reader(api, "s1")
    deadline = time.monotonic() + 10
    while CALLS != ["first"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert join(api, ids["work"], "s1", "second").status_code == 200
    assert join(api, ids["light"], "s1", "light").status_code == 200
    time.sleep(1.0)
    assert CALLS == ["first"]  # the second waits: the slot is the session's first run's
    codes = [join(api, ids["work"], "s1", f"more {i}").status_code for i in range(4)]
    assert codes == [200, 200, 200, 429]  # 4 of the session's runs wait; a fifth is refused

    GATE.set()
    assert reader.completed(20)  # the stream closes once every job of the session has ended
    assert CALLS == ["first", "second", "more 0", "more 1", "more 2"]  # one at a time, in turn


def test_a_job_whose_visitor_left_before_its_start_never_runs(server):
    """A visitor who joins behind a busy slot and closes the page (its stream ends) before the job starts: the job
    is dropped (Gradio ends a closed stream's jobs), never run."""
    api, ids, demo = server
    assert join(api, ids["work"], "busy", "busy").status_code == 200
    busy = Reader(api, "busy")
    deadline = time.monotonic() + 10
    while CALLS != ["busy"] and time.monotonic() < deadline:  # the slot is taken
        time.sleep(0.05)
    assert join(api, ids["work"], "leaver", "left").status_code == 200
    queue = fq.GradioQueue(demo)
    assert [e.session_hash for e in queue.waiting()] == ["leaver"]
    with httpx.stream("GET", f"{api}queue/data", params={"session_hash": "leaver"}, timeout=10) as r:
        next(r.iter_lines())  # the stream is open: the job is confirmed, then the visitor goes
    deadline = time.monotonic() + 30  # the server sees the stream end, on however busy a machine
    while queue.waiting() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not queue.waiting()  # dropped before the slot frees
    GATE.set()
    assert busy.completed()
    time.sleep(1.0)
    assert CALLS == ["busy"]


def test_a_full_line_is_refused_in_words(server):
    """Past SPECVIZ_QUEUE_SIZE compute jobs waiting, a join is refused with the line's length, the setting's name
    and the visitor's place, not Gradio's 'Queue is full'."""
    api, ids, _ = server
    codes, readers = [], []
    for i in range(6):  # 1 running, 5 waiting: each visitor joins, then reads (as a browser does)
        codes.append(join(api, ids["work"], f"r{i}", f"r{i}").status_code)
        readers.append(Reader(api, f"r{i}"))
    assert codes == [200] * 6
    assert all(r.connected.wait(10) for r in readers)  # every job confirmed: each holds its place
    refusal = join(api, ids["work"], "late", "late")
    assert refusal.status_code == 429
    detail = refusal.json()["detail"]
    assert "SPECVIZ_QUEUE_SIZE" in detail and "6th in line" in detail and "Queue is full" not in detail
    assert fq.place_of(server[2]).startswith("6th in line")  # what a visitor pressing Generate now is told
    GATE.set()
    assert all(r.completed() for r in readers)


def test_direct_routes_are_closed(server):
    """POST /gradio_api/run/<name> answers 404 for a queued handler (it ran past the queue's limits and left a
    suspended generator behind)."""
    api, ids, _ = server
    r = httpx.post(f"{api}run/work", json={"data": ["x"]}, timeout=10)
    assert r.status_code == 404
    assert CALLS == []


@pytest.mark.parametrize(
    "ahead,running,slots,job,said",
    [
        (0, 0, 2, 10.0, "1st in line"),
        (0, 2, 2, 10.0, "1st in line, about 5 s"),
        (2, 2, 2, 10.0, "3rd in line, about 15 s"),
        (10, 2, 2, None, "11th in line"),
        (20, 1, 1, 3.0, "21st in line, about 62 s"),
    ],
)
def test_the_wait_is_said_from_the_measured_job_time(ahead, running, slots, job, said):
    """The place and estimate: the jobs ahead and half of the running ones', over the slots."""
    assert fq.wait_text(ahead, running, slots, job) == said


def test_settings_out_of_range_stop_the_server_by_name():
    """A bad SPECVIZ_QUEUE_SIZE stops the server at start-up with its name and range."""
    with pytest.raises(ValueError, match="SPECVIZ_QUEUE_SIZE must be a number from 1 to 10000"):
        fq.QueueLimits({"SPECVIZ_QUEUE_SIZE": "0"})
