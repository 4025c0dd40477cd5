"""The app's named API endpoint, called through gradio_client against a real `python app.py` server,
and the server's limits (run time, uploads, session state, one compute queue) through the UI's own protocol."""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from engine.events import trace_to_json
from specviz.demo_trace import long_events
from tests.app_server import call_event, fn_index, serve_app, upload
from ui import app_guard as guard
from ui import tour
from ui.app_views import EMBEDDED_PAIR
from ui.controls import Controls

gradio_client = pytest.importorskip("gradio_client")

COPY_PROMPT = "Copy this sentence exactly: the quick brown fox jumps over the lazy dog."
LONG_PROMPT = "Write a long story about a lighthouse keeper and a storm."  # runs to max_new_tokens


@pytest.fixture(scope="module")
def server():
    """One app server (embedded model) for the module, stopped in teardown."""
    with serve_app() as url:
        yield url


@pytest.fixture(scope="module")
def client(server):
    return gradio_client.Client(server, verbose=False)


def rss_mib(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def test_generate_endpoint_returns_text_and_summary(client):
    """/generate returns the final text and a summary JSON whose counts are consistent."""
    text, summary_json = client.predict(COPY_PROMPT, "ngram", 4, 16, 0.0, 0, api_name="/generate")
    summary = json.loads(summary_json)
    assert text.strip()
    assert summary["mode"] == "speculative" and summary["gamma"] == 4
    assert 1 <= summary["new_tokens"] <= 16
    assert summary["rounds"] >= 1 and summary["accepted"] <= summary["drafted"]
    assert summary["stop_reason"] in ("eos", "max_new_tokens")


def test_generate_endpoint_is_deterministic_and_isolated(client):
    """Two concurrent greedy calls with different drafters give the same text (lossless) and do not mix state."""
    with ThreadPoolExecutor(2) as pool:
        a = pool.submit(client.predict, COPY_PROMPT, "ngram", 3, 12, 0.0, 0, api_name="/generate")
        b = pool.submit(client.predict, COPY_PROMPT, "layerskip:8", 2, 12, 0.0, 0, api_name="/generate")
        (text_a, sum_a), (text_b, sum_b) = a.result(), b.result()
    assert text_a == text_b
    assert json.loads(sum_a)["gamma"] == 3 and json.loads(sum_b)["gamma"] == 2


@pytest.mark.parametrize(
    "args, message",
    [
        (("", "ngram", 4, 8, 0.0, 0), "prompt is empty"),
        (("bad \ud800 text", "ngram", 4, 8, 0.0, 0), "prompt is not valid text: a lone surrogate"),
        (("hi", "ngram", 4, "10", 0.0, 0), "max_new_tokens must be a whole number, got str"),
        (("hi", "ngram", 4, [10], 0.0, 0), "max_new_tokens must be a whole number, got list"),
        (("hi", None, 4, 8, 0.0, 0), "draft must be a model name"),
        (("hi", "ngram", 4, 8, 0.0, 0, 7), "target must be a model name"),
        (("hi", "ngram", 4, 8, 0.0, 0, None), "target must be a model name"),
        (("word " * 2100, "ngram", 4, 8, 0.0, 0), "too long: this server reads at most about"),
        (("hi", "ngram", float("inf"), 8, 0.0, 0), "gamma must be a whole number, got inf"),
        (("hi", "ngram", 4, 8, 0.0, float("nan")), "seed must be a whole number, got nan"),
        (("hi", "ngram", 4, 8, 0.0, 2**64), "seed must be between 0 and"),
        (("hi", "ngram", 40, 8, 0.0, 0), "gamma must be between 1 and 16"),
        (("hi", "bogus", 4, 8, 0.0, 0), "unknown draft spec"),
        (("hi", "ngram", 4, 8, 0.0, 0, "no-such-org/no-such-model"), "is not allowed here"),
        (("hi", "model:/etc", 4, 8, 0.0, 0), "is not allowed here"),
        (("hi", "ngram", 4, 8, -1.0, 0), "temperature must be 0"),
        (("hi", "ngram", 4, 8, 0.0, 0, "embedded", 9), "num_beams must be between 1 and 8"),
        (("hi", "ngram", 4, 8, 0.0, 0, "embedded", 2.5), "num_beams must be a whole number"),
        (("hi", "ngram", 4, 8, 0.7, 0, "embedded", 2), "needs temperature 0"),
        (("hi", "layerskip:8", 4, 8, 0.0, 0, "embedded", 2), "beam search .* drafts with 'ngram"),
    ],
)
def test_generate_endpoint_rejects_bad_input(server, client, args, message):
    """Bad input (sent as raw JSON: NaN, Infinity and lone surrogates too) comes back as an error naming the
    setting and its range, and the server keeps working."""
    reply = call_event(server, "generate", list(args) + ["embedded", 1][len(args) - 6 :], uuid.uuid4().hex)
    assert reply["error"] is not None and re.search(message, reply["error"]), reply
    assert client.predict("Say hi.", "ngram", 2, 2, 0.0, 0, api_name="/generate")[0]


def test_generate_endpoint_runs_beam_search(client):
    """num_beams = 2 runs speculative beam search: the text is the best hypothesis, the summary lists every
    hypothesis and counts forwards; n-gram and self drafts give the same beams (tests/test_beam.py: both equal
    plain beam search)."""
    replies = [
        client.predict(COPY_PROMPT, draft, 4, 12, 0.0, 0, "embedded", 2, api_name="/generate")
        for draft in ("ngram", "self")
    ]
    (text, summary_json), (text_self, summary_self_json) = replies
    summary = json.loads(summary_json)
    assert summary["mode"] == "beam_speculative" and summary["num_beams"] == 2
    assert text.strip() and text == summary["hypotheses"][0]["text"] == text_self
    # scores agree to float rounding (README: beam search)
    other = json.loads(summary_self_json)["hypotheses"]
    assert [h["text"] for h in summary["hypotheses"]] == [h["text"] for h in other]
    assert [h["score"] for h in summary["hypotheses"]] == pytest.approx([h["score"] for h in other], abs=1e-4)
    assert summary["target_forwards"] + summary["forwards_saved"] == summary["steps"]
    assert summary["stop_reason"] in ("eos", "max_new_tokens")


def test_four_concurrent_clients_each_get_their_own_correct_output(server):
    """4 clients stream at once (queue concurrency 2): all finish and each equals its solo greedy output."""
    prompts = [COPY_PROMPT, "Name three colours.", "Count from one to five.", "Say hello in French."]
    solo = [
        gradio_client.Client(server, verbose=False).predict(p, "ngram", 3, 12, 0.0, 0, api_name="/generate")[
            0
        ]
        for p in prompts
    ]
    with ThreadPoolExecutor(4) as pool:
        futures = [
            pool.submit(
                gradio_client.Client(server, verbose=False).predict,
                p,
                "ngram",
                3,
                12,
                0.0,
                0,
                api_name="/generate",
            )
            for p in prompts
        ]
        together = [f.result(timeout=300)[0] for f in futures]
    assert together == solo


def test_memory_does_not_grow_over_30_runs(server, client):
    """30 more runs after 10: the server's RSS stays within 5% of its own RSS after the first 10 (caches are freed)."""
    for i in range(10):
        client.predict(f"{COPY_PROMPT} [{i}]", "ngram", 4, 8, 0.0, 0, api_name="/generate")
    baseline = rss_mib(server.pid)
    for i in range(30):
        client.predict(f"{COPY_PROMPT} ({i})", "ngram", 4, 8, 0.0, 0, api_name="/generate")
    assert rss_mib(server.pid) <= baseline * 1.05


def test_cancelled_clients_free_their_slots(server):
    """Cancelling (as a disconnect does) two long runs that hold both compute slots lets a new run through.

    Each long run needs 256 tokens; if the cancelled runs kept their slots the new run would wait for one of
    them to finish, and that run would have sent its final summary.
    """
    jobs = [
        gradio_client.Client(server, verbose=False).submit(
            LONG_PROMPT, "ngram", 4, 256, 0.0, 0, api_name="/generate"
        )
        for _ in range(2)
    ]
    while not all(len(job.outputs()) >= 1 for job in jobs):  # both are streaming: they hold the slots
        assert not any(job.done() for job in jobs), "a long run ended before streaming"
        time.sleep(0.2)
    for job in jobs:
        job.cancel()
    short = gradio_client.Client(server, verbose=False).submit(
        COPY_PROMPT, "ngram", 3, 8, 0.0, 0, api_name="/generate"
    )
    text, summary = short.result(timeout=600)
    assert text.strip() and json.loads(summary)["stop_reason"] in ("eos", "max_new_tokens")
    assert all(job.outputs()[-1][1] == "" for job in jobs)  # stopped mid-run: no final summary was sent


def test_a_third_concurrent_run_waits_for_a_slot(server):
    """With 2 compute slots, the third of three concurrent /generate calls starts only after one of the first two ends."""
    jobs = [
        gradio_client.Client(server, verbose=False).submit(
            LONG_PROMPT, "ngram", 3, 128, 0.0, 0, api_name="/generate"
        )
        for _ in range(2)
    ]
    while not all(job.outputs() for job in jobs):  # both hold a slot
        time.sleep(0.05)
    third = gradio_client.Client(server, verbose=False).submit(
        "Name three colours.", "ngram", 3, 8, 0.0, 0, api_name="/generate"
    )
    order = []
    while not third.done():
        for name, job in (("first", jobs[0]), ("second", jobs[1])):
            if job.done() and name not in order:
                order.append(name)
        if third.outputs() and "third started" not in order:
            order.append("third started")
        time.sleep(0.02)
    assert "third started" in order and order.index("third started") >= 1, order
    assert third.result()[0].strip() and all(job.result()[0].strip() for job in jobs)


def test_a_trace_load_waits_for_the_slots_runs_hold(server, tmp_path):
    """UI trace loads share the compute slots with /generate: with both held by API runs, a load ends after one of them."""
    file = upload(server, trace_of(tmp_path, 5))  # the upload itself is not queued; the load is
    jobs = [
        gradio_client.Client(server, verbose=False).submit(
            LONG_PROMPT, "ngram", 3, 128, 0.0, 0, api_name="/generate"
        )
        for _ in range(2)
    ]
    while not all(job.outputs() for job in jobs):  # both hold a slot
        time.sleep(0.05)
    order = []
    with ThreadPoolExecutor(1) as pool:
        load = pool.submit(call_event, server, "load_trace", [file], uuid.uuid4().hex)
        load.add_done_callback(lambda _: order.append("load"))
        while not load.done():
            if any(job.done() for job in jobs) and "run" not in order:
                order.append("run")
            time.sleep(0.02)
    assert load.result()["error"] is None and order[0] == "run", order


# --- limits, on servers started with small settings --------------------------------------------------


@pytest.fixture(scope="module")
def limited():
    """A server with a 3 s run limit, 3 s session state, a 1 MiB upload limit, 4 uploads per client, 3 files kept."""
    with serve_app(
        SPECVIZ_MAX_RUN_S="3",
        SPECVIZ_STATE_TTL_S="3",
        SPECVIZ_MAX_UPLOAD_MB="1",
        SPECVIZ_CLIENT_UPLOADS="4",
        SPECVIZ_UPLOAD_FILES="3",
    ) as url:
        yield url


@pytest.fixture(scope="module")
def few_sessions():
    """A server that keeps the state of 2 sessions at most (it runs no model: no warm-up run)."""
    with serve_app(SPECVIZ_MAX_SESSIONS="2", SPECVIZ_WARM_UP="0") as url:
        yield url


def trace_of(tmp_path, rounds: int):
    path = tmp_path / f"trace-{rounds}-{uuid.uuid4().hex[:6]}.json"
    path.write_text(trace_to_json(long_events(rounds)), encoding="utf-8")
    return path


def load_in_session(url, path, session: str) -> dict:
    return call_event(url, "load_trace", [upload(url, path)], session)


def replay_rounds_in(url, session: str) -> int:
    """The rounds of the run a session holds, as its replay shows them: press Next ▶ and count the rounds whose
    times the stream carries (data-round-s). A new or expired session holds the page's opening run (OPENING)."""
    stream = call_event(url, "next", [None, 0], session)["outputs"][1]
    return len(re.search(r'data-round-s="([^"]*)"', stream).group(1).split(","))


OPENING = guard.replay_rounds(guard.runs(tour.tour_runs()))  # the page opens on the tour's recorded run


def test_time_limit_stop_returns_the_text_and_says_so(limited):
    """A run cut by SPECVIZ_MAX_RUN_S returns the text committed so far with stop_reason "time_limit"."""
    client = gradio_client.Client(limited, verbose=False)
    text, summary = client.predict(LONG_PROMPT, "ngram", 4, 512, 0.0, 0, api_name="/generate")
    summary = json.loads(summary)
    assert summary["stop_reason"] == "time_limit"
    assert text.strip() and 0 < summary["new_tokens"] < 512


def test_an_upload_over_the_limit_is_refused_naming_it(limited, tmp_path):
    """A 1.4 MB upload against a 1 MiB limit is refused by the server with the limit in its message."""
    import httpx

    with pytest.raises(httpx.HTTPStatusError) as refused:
        upload(limited, trace_of(tmp_path, 900))
    assert refused.value.response.status_code == 413 and "1048576 bytes" in refused.value.response.text


def test_session_state_is_dropped_after_its_time_to_live(limited, tmp_path):
    """A loaded trace replays in its session, and is gone from it once SPECVIZ_STATE_TTL_S has passed."""
    session = uuid.uuid4().hex
    loaded = load_in_session(limited, trace_of(tmp_path, 5), session)
    assert loaded["error"] is None and not loaded["warnings"]
    assert replay_rounds_in(limited, session) == 5  # the trace's
    time.sleep(3 + 2.5)  # the TTL, plus the server's once-a-second sweep
    assert replay_rounds_in(limited, session) == OPENING != 5


def test_sessions_beyond_the_capacity_lose_their_state_oldest_first(few_sessions, tmp_path):
    """With SPECVIZ_MAX_SESSIONS=2 a third session evicts the first one's run; the two newest keep theirs."""
    path = trace_of(tmp_path, 5)
    sessions = [uuid.uuid4().hex for _ in range(3)]
    for session in sessions:
        assert load_in_session(few_sessions, path, session)["error"] is None
    assert [replay_rounds_in(few_sessions, s) for s in sessions[1:]] == [5, 5]
    assert replay_rounds_in(few_sessions, sessions[0]) == OPENING != 5


def test_memory_does_not_grow_with_sessions_past_the_capacity(few_sessions, tmp_path):
    """Past SPECVIZ_MAX_SESSIONS=2 old sessions are freed: 12 more sessions loading a 2.5 MB trace leave RSS within
    25% of its level once the capacity was reached (kept per session, each added ~35 MB here: +55%)."""
    path = trace_of(tmp_path, 1600)
    for _ in range(2):  # the capacity is reached
        assert load_in_session(few_sessions, path, uuid.uuid4().hex)["error"] is None
    baseline = rss_mib(few_sessions.pid)
    rss = []
    for _ in range(12):
        assert load_in_session(few_sessions, path, uuid.uuid4().hex)["error"] is None
        rss.append(round(rss_mib(few_sessions.pid)))
    assert rss[-1] < 1.25 * baseline, (baseline, rss)


def test_uploads_past_a_clients_count_are_refused_and_the_folder_keeps_its_bound(limited, tmp_path):
    """One client uploading small traces is refused (429, naming SPECVIZ_CLIENT_UPLOADS) by its fifth upload at the
    latest, and the server's upload folder never holds more than SPECVIZ_UPLOAD_FILES files (the oldest pruned)."""
    import httpx

    path = trace_of(tmp_path, 2)
    for _ in range(5):
        try:
            upload(limited, path)
        except httpx.HTTPStatusError as e:
            assert e.response.status_code == 429 and "SPECVIZ_CLIENT_UPLOADS" in e.response.text
            break
        # the uploads (the app's own download copies, specviz-trace-*, have their own bound: SPECVIZ_TRACE_FILES)
        kept = [
            p for p in limited.uploads.rglob("*") if p.is_file() and not p.name.startswith("specviz-trace-")
        ]
        assert len(kept) <= 3
    else:
        raise AssertionError("five uploads from one client all passed a limit of 4")


@pytest.mark.parametrize(
    "api_name,data,named",
    [
        ("run", [], "/run takes 18 inputs"),
        ("batch", [], "/batch takes 7 inputs"),
        ("measure_drift", [], "/measure_drift takes 16 inputs"),
        ("load_trace", [], "/load_trace takes 1 input"),
        (
            "batch",
            ["SmolLM2-135M-Instruct (embedded)", "ngram", float("nan"), 4, 8, "hi", False],
            "n / L / W / k",
        ),
        ("next", [None, float("nan")], "Replay round"),
        (
            "next",
            [None, 1e9],
            "Replay round must be from 0 to",
        ),  # Gradio's words had no name, and a traceback
        ("show_round", [None, 1e9], "Replay round must be from 0 to"),
        (
            "load_trace",
            [{"path": "/etc/hosts", "meta": {"_type": "gradio.FileData"}}],
            "upload the file itself",
        ),
        (
            "load_engine_trace",
            [{"path": str(Path(__file__)), "orig_name": "t.json"}],
            "upload the file itself",
        ),
    ],
)
def test_private_endpoints_over_raw_http_answer_with_a_named_message(server, api_name, data, named):
    """A raw client calling a private endpoint with missing or non-finite arguments gets a message naming the
    endpoint or the setting, not `error: null`."""
    result = call_event(server, api_name, data, uuid.uuid4().hex)
    assert result["error"] is not None and named in result["error"], result


# -- a visitor who leaves frees the slot: a server with one compute slot ----------------------------------------


@pytest.fixture(scope="module")
def one_slot():
    """A server with one compute slot: a request that kept it after its client left would block every other."""
    with serve_app(SPECVIZ_CONCURRENCY="1") as url:
        yield url


# ~1,400 tokens
LONG_LINE = " ".join(["the lighthouse keeper climbed the stairs and watched the storm"] * 130)


def join_then_leave(url: str, api_name: str, data: list) -> None:
    """Start an event as the browser does, wait for its first streamed output, then drop the connection."""
    import httpx

    session = uuid.uuid4().hex
    body = {
        "data": data,
        "fn_index": fn_index(url, api_name),
        "session_hash": session,
        "event_data": None,
        "trigger_id": None,
    }
    with httpx.Client(timeout=300) as http:
        http.post(
            f"{url}gradio_api/queue/join",
            content=json.dumps(body),
            headers={"content-type": "application/json"},
        ).raise_for_status()
        with http.stream("GET", f"{url}gradio_api/queue/data", params={"session_hash": session}) as stream:
            for line in stream.iter_lines():
                if line.startswith("data:") and json.loads(line[5:]).get("msg") == "process_generating":
                    return  # leaving the block closes the stream: the client has gone


def cpu_s(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize(
    "api_name,data",
    [
        ("batch", [EMBEDDED_PAIR, "self", 0, 16, 512, "\n".join([LONG_LINE] * 16), True]),
        # Measure on this host: B = 1..16 raced, each B one list() that never yielded (26.6 s on after a leave)
        ("batch_host", [EMBEDDED_PAIR, "ngram", 0, 4, 256, "Write a long story about a storm."]),
        (
            "measure_drift",
            [
                *Controls(
                    drafter="lookahead",
                    param=16,
                    gamma=16,
                    temperature=1.0,
                    tree_budget=64,
                    max_new=48,
                    prompt=LONG_LINE,
                    accept="typical:0.3,0.55",
                ).values()
            ],
        ),
    ],
)
def test_a_request_whose_client_leaves_frees_its_slot_and_stops(one_slot, api_name, data):
    """A 16-row batch of 1,400-token prompts (its prefill alone took minutes; it kept its slot and ran 274 s), the
    drift meter on a long prompt with a 64-node tree (still running after 1,264 s) and Measure on this host (it ran
    on to its 180 s limit): their client leaves at the first progress line; a short request then gets the one slot within a minute, and the server stops computing."""
    start = time.monotonic()  # from the hog's start: its first output came only after its prefill before
    join_then_leave(one_slot, api_name, data)
    result = call_event(
        one_slot, "batch", [EMBEDDED_PAIR, "ngram", 0, 4, 4, "Name three colours.", False], uuid.uuid4().hex
    )
    assert result["error"] is None and time.monotonic() - start < 60
    before = cpu_s(one_slot.pid)
    time.sleep(3)
    assert cpu_s(one_slot.pid) - before < 1.5  # nothing left running (a live lane takes ~1 core)


def test_the_v2_route_and_a_stream_of_no_session_end_cleanly(server):
    """POST /gradio_api/call/v2/<name> answers a clean 404 naming the route to use (a positional `data` was a 500
    with a traceback), and a result stream for a session the server does not hold ends without an "Exception in
    ASGI application" traceback in the log (Gradio raises its 404 inside the stream, after the response started)."""
    import httpx

    port = server.rstrip("/").rsplit(":", 1)[1]
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"specviz-app-{port}.log"
    for name in ("generate", "no_such_api"):
        r = httpx.post(f"{server}gradio_api/call/v2/{name}", json={"data": ["hi"]}, timeout=30)
        assert r.status_code == 404 and "/gradio_api/call/<api_name>" in r.json()["detail"]
    for _ in range(3):
        with httpx.stream("GET", f"{server}gradio_api/queue/data", params={"session_hash": "gone"}) as r:
            assert "session_not_found" in r.read().decode()
    time.sleep(0.5)
    text = log.read_text(errors="replace")
    assert "Exception in ASGI application" not in text and "specviz: a result stream ended" in text


@pytest.mark.parametrize(
    "route", ["gradio_api/run/generate", "gradio_api/api/generate", "gradio_api/run/run"]
)
def test_direct_routes_past_the_queue_are_closed(server, route):
    """POST /gradio_api/run/<name> and /api/<name> for a queued handler answer 404 (off Spaces Gradio left them open:
    6 concurrent calls ran past SPECVIZ_CONCURRENCY and each left a suspended generator behind); the public
    /generate goes through the queue (gradio_client, the tests above)."""
    import httpx

    r = httpx.post(f"{server}{route}", json={"data": ["hi"]}, timeout=30)
    assert r.status_code == 404, (r.status_code, r.text[:200])
