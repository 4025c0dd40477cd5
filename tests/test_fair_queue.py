"""The fair queue (ui/fair_queue.py) in front of a real Gradio 6 queue: a tiny Blocks app whose compute handler
records every call, served in-process with the app's middleware (and uvicorn's forwarded-address trust set as the
app sets it), driven over raw HTTP as a browser, a flooder and a cheap reader would. No model: seconds."""

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
from ui import server as ui_server

CALLS: list[str] = []  # the compute handler's inputs, in the order it ran them
GATE = threading.Event()  # holds a running job until a test opens it


def work(text: str):
    """The stand-in compute job: records its input, then holds its slot until GATE opens (at most 20 s)."""
    CALLS.append(text)
    GATE.wait(20)
    yield text.upper()


# the server's bounds; a test may hold the sweep off while it counts (the object the fair queue reads)
LIMITS = fq.QueueLimits(
    {
        "SPECVIZ_QUEUE_SIZE": "5",
        "SPECVIZ_ADDRESS_JOBS": "4",
        "SPECVIZ_CLIENT_JOBS": "4",
        "SPECVIZ_CONFIRM_S": "2",
        "SPECVIZ_CLIENT_SESSIONS": "3",
    }
)
SESSIONS = 8  # the server's SPECVIZ_MAX_SESSIONS (Gradio's state_session_capacity)


def bump(n: int):
    """A queue=False handler with a session state (a visitor's history): its count, one more each call."""
    return n + 1, str(n + 1)


@pytest.fixture(scope="module")
def server(monkeypatch_module):
    with gr.Blocks() as demo:
        box, out, count = gr.Textbox(), gr.Textbox(), gr.State(0)
        gr.Button().click(work, box, out, api_name="work", concurrency_id=fq.COMPUTE_ID, concurrency_limit=1)
        gr.Button().click(lambda s: s, box, out, api_name="light")
        gr.Button().click(bump, count, [count, out], api_name="bump", queue=False)
    limits = LIMITS
    demo.queue(max_size=100, api_open=False)
    port = free_port()
    # as app.py: uvicorn believes X-Forwarded-For from SPECVIZ_TRUSTED_PROXIES only (here empty: nobody)
    monkeypatch_module.setenv("FORWARDED_ALLOW_IPS", "127.0.0.1")  # uvicorn's own default, restored after
    assert ui_server.trust_forwarded(()) == ""
    demo.launch(
        server_port=port,
        prevent_thread_lock=True,
        quiet=True,
        state_session_capacity=SESSIONS,
        app_kwargs={"middleware": [Middleware(fq.FairQueue, blocks=demo, limits=limits)]},
    )
    ids = {d["api_name"]: d["id"] for d in demo.config["dependencies"]}
    yield f"http://127.0.0.1:{port}/gradio_api/", ids, demo
    GATE.set()
    demo.close()


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.fixture(autouse=True)
def fresh():
    CALLS.clear()
    GATE.clear()
    yield
    GATE.set()
    time.sleep(0.3)


def join(
    api, fn: int, session: str, text: str, http=httpx, headers=None, route="queue/join"
) -> httpx.Response:
    """A join as the page sends it (`http`: a Page's client, carrying its token; else none)."""
    body = {"data": [text], "fn_index": fn, "session_hash": session, "event_data": None, "trigger_id": None}
    return http.post(
        f"{api}{route}",
        content=json.dumps(body),
        headers={"content-type": "application/json", **(headers or {})},
        timeout=10,
    )


class Page:
    """A loaded page: an HTTP client holding the token the page came with (its cookie), joining as the page does."""

    def __init__(self, api):
        self.api, self.http = api, httpx.Client(timeout=30)
        self.http.get(api.removesuffix("gradio_api/")).raise_for_status()
        self.token = self.http.cookies.get(fq.COOKIE)

    def join(self, fn: int, session: str, text: str) -> httpx.Response:
        return join(self.api, fn, session, text, http=self.http)


class Reader:
    """A browser's result stream for one session, read on a thread: the messages, and whether it completed."""

    def __init__(self, api, session: str):
        self.messages: list[dict] = []
        self.connected = threading.Event()  # the first message arrived: the stream is open
        self.thread = threading.Thread(target=self.read, args=(api, session), daemon=True)
        self.thread.start()

    def read(self, api, session):
        try:
            with httpx.stream("GET", f"{api}queue/data", params={"session_hash": session}, timeout=30) as r:
                for line in r.iter_lines():
                    self.connected.set()
                    if line.startswith("data:"):
                        self.messages.append(json.loads(line[5:]))
                        if self.messages[-1].get("msg") == "close_stream":
                            return
        except httpx.HTTPError:  # the server closed it (its session's jobs dropped, or the server stopping)
            return

    def completed(self, timeout: float = 15) -> bool:
        self.thread.join(timeout)
        return any(m.get("msg") == "process_completed" and m.get("success") for m in self.messages)


def test_a_flood_that_never_reads_is_refused_alone_and_never_runs(server):
    """50 joins with fresh session hashes from one address, never reading, no page loaded: at most
    SPECVIZ_ADDRESS_JOBS (4) wait, the rest are refused naming the setting (before issue 52: 48 accepted, then
    'Queue is full' for everyone); none of them runs; a visitor behind the same address who loaded the page is
    admitted all the same and served at once; the unread ones go after SPECVIZ_CONFIRM_S."""
    api, ids, demo = server
    GATE.set()
    LIMITS.confirm_s = 600  # no sweep while the joins are counted (on a busy machine 50 joins take over 2 s)
    try:
        codes = [join(api, ids["work"], f"flood-{i}", f"flood {i}") for i in range(50)]
        assert [c.status_code for c in codes[:4]] == [200] * 4 and {c.status_code for c in codes[4:]} == {429}
        assert "SPECVIZ_ADDRESS_JOBS" in codes[-1].json()["detail"]
        queue = fq.GradioQueue(demo)
        assert len(queue.waiting()) == 4 and not queue.running()
        assert fq.place_of(demo) == ""  # unread jobs are not ahead of anyone: a visitor is told no line
        page = Page(api)
        assert page.token and page.join(ids["work"], "visitor", "mine").status_code == 200
        reader = Reader(api, "visitor")
        assert reader.completed()
        assert CALLS == ["mine"]  # the flood's jobs waited unread and never started
    finally:
        LIMITS.confirm_s = 2
    deadline = time.monotonic() + 30  # SPECVIZ_CONFIRM_S (2 s) and the sweep, on however busy a machine
    while queue.waiting() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert CALLS == ["mine"] and not queue.waiting()  # the unread jobs were dropped, never run


def test_fake_heartbeats_and_forwarded_addresses_give_nothing(server):
    """Sessions whose heartbeat streams are held open (any hash makes one) and joins naming a fresh
    X-Forwarded-For each from loopback (a local proxy's address; SPECVIZ_TRUSTED_PROXIES empty, as app.py sets
    uvicorn's trust): still one address without a page, refused past SPECVIZ_ADDRESS_JOBS. Before issue 65 a
    heartbeat made a session "present" and never counted, and uvicorn believed loopback's X-Forwarded-For."""
    api, ids, demo = server
    LIMITS.confirm_s = 600
    pages = [OpenPage(api, f"fake-{i}").__enter__() for i in range(6)]
    try:
        assert all(p.ready.is_set() for p in pages)
        codes = [
            join(api, ids["work"], f"fake-{i}", "x", headers={"x-forwarded-for": f"10.0.0.{i}"}).status_code
            for i in range(6)
        ]
        assert codes == [200] * 4 + [429] * 2
        events = fq.GradioQueue(demo).waiting()
        assert {e.request.scope["client"][0] for e in events} == {"127.0.0.1"}  # uvicorn did not rewrite it
    finally:
        for p in pages:
            p.__exit__(None, None, None)
        LIMITS.confirm_s = 2
    deadline = time.monotonic() + 30
    while fq.GradioQueue(demo).waiting() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert CALLS == []


def test_a_cheap_reader_with_many_sessions_holds_one_share(server):
    """One page (one token) joining from 6 sessions, reading every stream: 4 jobs wait at most
    (SPECVIZ_CLIENT_JOBS), the rest are refused by name; one runs at a time; a visitor who joins while the reader's
    first job runs starts next, ahead of the reader's 3 waiting ones (round robin between clients: before issue 65
    the line was first come, first served, and the visitor went last)."""
    api, ids, _ = server
    cheap = Page(api)
    codes = []
    for i in range(6):
        codes.append(cheap.join(ids["work"], f"cheap-{i}", f"cheap {i}").status_code)
        Reader(api, f"cheap-{i}").connected.wait(10)
        if i == 0:
            deadline = time.monotonic() + 10
            while CALLS != ["cheap 0"] and time.monotonic() < deadline:
                time.sleep(0.05)
    assert codes == [200] * 5 + [429]  # 1 running, 4 waiting: the 6th is refused
    visitor = Page(api)
    assert (
        visitor.token != cheap.token and visitor.join(ids["work"], "visitor-2", "visitor").status_code == 200
    )
    reader = Reader(api, "visitor-2")
    assert reader.connected.wait(10)
    time.sleep(0.5)
    GATE.set()
    assert reader.completed(20)
    deadline = time.monotonic() + 20
    while len(CALLS) < 6 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert CALLS == ["cheap 0", "visitor", "cheap 1", "cheap 2", "cheap 3", "cheap 4"]


def test_a_full_line_pushes_out_the_newest_place_of_the_client_holding_most(server):
    """SPECVIZ_QUEUE_SIZE (5) counts every joined job, read or not: a page holding 4 unread places and another
    holding 1 fill the line; a third page's join is admitted and the first page's newest job gives its place,
    its session told why by name."""
    api, ids, demo = server
    LIMITS.confirm_s = 600
    try:
        busy = Page(api)
        assert busy.join(ids["work"], "holder", "running").status_code == 200
        running = Reader(api, "holder")
        deadline = time.monotonic() + 10
        while CALLS != ["running"] and time.monotonic() < deadline:
            time.sleep(0.05)
        hog, other = Page(api), Page(api)
        assert [hog.join(ids["work"], f"hog-{i}", f"hog {i}").status_code for i in range(4)] == [200] * 4
        assert other.join(ids["work"], "other", "other").status_code == 200
        queue = fq.GradioQueue(demo)
        assert len(queue.waiting()) == 5
        late = Page(api)
        assert late.join(ids["work"], "late", "late").status_code == 200
        sessions = sorted(e.session_hash for e in queue.waiting())
        assert sessions == ["hog-0", "hog-1", "hog-2", "late", "other"]
        told = Reader(api, "hog-3")
        assert not told.completed(10)
        assert any("SPECVIZ_QUEUE_SIZE" in str((m.get("output") or {}).get("error")) for m in told.messages)
        again = Page(api).join(
            ids["work"], "later", "later"
        )  # the hog still holds the most (3): it gives again
        assert again.status_code == 200 and "hog-2" not in {e.session_hash for e in queue.waiting()}
    finally:
        LIMITS.confirm_s = 2
        GATE.set()
    assert running.completed()


def test_a_session_flood_leaves_a_visitors_history(server):
    """60 calls of a queue=False handler (POST /gradio_api/run/predict) with a fresh session hash each, from an
    address without a page, on a server keeping 8 sessions: the visitor's session (its page loaded) keeps its state
    (its count goes on from 2 to 3); the flood loses its own older sessions (its first starts again from 1).
    Gradio's own rule, least recently used first, dropped the visitor's (issue 65: a suffix run lost its history)."""
    api, ids, _ = server
    visitor = Page(api)

    def bump_in(session: str, http=httpx) -> str:
        r = join(api, ids["bump"], session, 0, http=http, route="run/predict")
        r.raise_for_status()
        return r.json()["data"][1]

    assert [bump_in("history", visitor.http) for _ in range(2)] == ["1", "2"]
    flood = [bump_in(f"flood-session-{i}") for i in range(60)]
    assert set(flood) == {"1"}
    assert bump_in("history", visitor.http) == "3"  # the visitor's history survived
    assert bump_in("flood-session-0") == "1"  # the flood's first session was its own to lose


def test_sessions_go_by_client_own_first_then_the_largest_holder():
    """evictions: a client past SPECVIZ_CLIENT_SESSIONS loses its own oldest; past the capacity, the client
    holding the most loses its oldest; the session in use is never one."""
    fair = fq.FairQueue(None, limits=LIMITS)  # 3 sessions per page, 12 per address without one
    fair.owners.update({"a1": "page:a", "a2": "page:a", "a3": "page:a", "v": "page:v", "x1": "address:x"})
    fair.owners.update({f"x{i}": "address:x" for i in range(2, 6)})
    assert fair.evictions(["a1", "v", "a2", "a3"], "a3", capacity=10) == []
    fair.owners["a4"] = "page:a"
    assert fair.evictions(["a1", "v", "a2", "a3", "a4"], "a4", capacity=10) == ["a1"]  # its own oldest
    held = ["v", "a2", "x1", "x2", "a3", "x3", "x4", "x5"]
    assert fair.evictions(held, "v", capacity=6) == ["x1", "x2"]  # the largest holder, never the visitor
    assert fair.evictions(held, "x5", capacity=6) == ["x1", "x2"]


def test_round_robin_shares_turns_by_cost():
    """Two clients always waiting, one with jobs 8 times as costly: the cheap one starts 8 jobs for each of the
    costly one's. Negative control: equal costs alternate."""
    for heavy, expect in ((8.0, 8.0), (1.0, 1.0)):
        rounds, started = fq.Rounds(), {"cheap": 0, "costly": 0}
        for _ in range(90):
            pick = rounds.pick(
                {"costly": "costly", "cheap": "cheap"},
                {"costly", "cheap"},
                lambda job, heavy=heavy: heavy if job == "costly" else 1.0,
            )
            started[pick] += 1
        assert started["cheap"] / started["costly"] == pytest.approx(expect, rel=0.15)


def test_a_jobs_cost_reads_its_inputs():
    """job_cost: a 64-token run is 1; a B = 16 batch of 64 tokens raced against AR is 32; beams multiply; the cap
    holds."""
    box = lambda elem_id: gr.Textbox(elem_id=elem_id, render=False)  # noqa: E731
    run = type("Fn", (), {"inputs": [box("max-new"), box("race-on")], "api_name": "run"})()
    batch = type(
        "Fn", (), {"inputs": [box("max-new"), box("batch-prompts"), box("batch-race")], "api_name": "b"}
    )()
    beam = type("Fn", (), {"inputs": [box("max-new"), box("num-beams")], "api_name": "beam"})()
    assert fq.job_cost(run, [64, False]) == 1 and fq.job_cost(run, [64, True]) == 2
    assert fq.job_cost(batch, [64, "\n".join(["p"] * 16), True]) == 32
    assert fq.job_cost(beam, [512, 8]) == fq.MAX_COST and fq.job_cost(run, [1, False]) == fq.MIN_COST


def test_page_tokens_are_signed_and_limited_per_address():
    """A token this process issued checks, an edited one does not; an address gets SPECVIZ_NEW_CLIENTS a minute
    (a classroom of 60 arriving within a minute stays under 100), and more as the minute passes."""
    tokens = fq.Tokens(100)
    issued = [tokens.issue("1.2.3.4", now=0.0) for _ in range(101)]
    assert all(issued[:100]) and issued[100] is None
    assert tokens.issue("5.6.7.8", now=0.0)  # another address has its own
    assert tokens.issue("1.2.3.4", now=1.0)  # refilled: 100 a minute
    assert tokens.check(issued[0]) and tokens.check(issued[0][:-1] + "0") in (None, issued[0][:16])
    assert tokens.check("0" * 16 + "." + "0" * 16) is None and tokens.check(None) is None


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
    """Past SPECVIZ_QUEUE_SIZE compute jobs waiting, each page holding one, a join is refused with the line's
    length, the setting's name and the visitor's place, not Gradio's 'Queue is full'."""
    api, ids, _ = server
    codes, readers = [], []
    for i in range(6):  # 1 running, 5 waiting: each visitor loads the page, joins, then reads
        codes.append(Page(api).join(ids["work"], f"r{i}", f"r{i}").status_code)
        readers.append(Reader(api, f"r{i}"))
    assert codes == [200] * 6
    assert all(r.connected.wait(10) for r in readers)  # every job confirmed
    refusal = Page(api).join(ids["work"], "late", "late")
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


def test_the_page_and_its_config_issue_a_token_once(server):
    """GET / and GET /config (gradio_client's first request) set the token cookie; a request carrying a valid one
    gets no other; a forged one is replaced."""
    api = server[0]
    root = api.removesuffix("gradio_api/")
    with httpx.Client(timeout=10) as http:
        first = http.get(f"{root}config").cookies.get(fq.COOKIE)
        assert first and http.get(root).cookies.get(fq.COOKIE) is None  # it has one: none issued
    forged = "0" * 16 + "." + "0" * 16
    with httpx.Client(timeout=10, cookies={fq.COOKIE: forged}) as http:
        assert http.get(root).cookies.get(fq.COOKIE) not in (None, forged)


class Job:
    """A stand-in for Gradio's Event as pick reads it: its session, client (cookie), cost and enqueue time."""

    def __init__(self, session: str, token: str, max_new: int):
        self.session_hash, self.enqueue_time, self.concurrency_id = session, 0.0, fq.COMPUTE_ID
        self.specviz_client, self.specviz_cost = token, max_new / 64  # in 64-token runs, as job_cost


class Line:
    """A stand-in for GradioQueue: `slots` compute slots, the jobs running."""

    def __init__(self, slots: int, running: list):
        self.slots, self.jobs = slots, running

    def running(self) -> list:
        return self.jobs

    def compute_slots(self) -> int:
        return self.slots


def test_heavy_jobs_leave_one_slot_to_light_ones():
    """Two slots, one held by a heavy job (a 512-token run) of one client: another client's heavy job waits while a
    light one (64 tokens) behind it starts; with no heavy job running the heavy one starts (negative control)."""
    fair = fq.FairQueue(None, limits=LIMITS)
    fair.streams.update({"h2": 1, "light": 1})  # both read: confirmed
    heavy, light = Job("h2", "page:b", 512), Job("light", "page:c", 64)
    fair.gradio = Line(2, [Job("h1", "page:a", 512)])
    assert fair.pick(fq.COMPUTE_ID, [heavy, light]) is light
    fair.gradio = Line(2, [Job("l1", "page:a", 64)])
    assert fair.pick(fq.COMPUTE_ID, [heavy]) is heavy
    fair.gradio = Line(1, [])  # one slot: nothing is kept back
    assert fair.pick(fq.COMPUTE_ID, [heavy]) is heavy
