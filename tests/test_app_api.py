"""The app's named API endpoint, called through gradio_client against a real `python app.py` server."""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.app_server import serve_app

gradio_client = pytest.importorskip("gradio_client")

COPY_PROMPT = "Copy this sentence exactly: the quick brown fox jumps over the lazy dog."


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


@pytest.mark.parametrize("args, message", [
    (("", "ngram", 4, 8, 0.0, 0), "prompt is empty"),
    (("hi", "ngram", 40, 8, 0.0, 0), "gamma must be between 1 and 16"),
    (("hi", "bogus", 4, 8, 0.0, 0), "unknown draft spec"),
    (("hi", "ngram", 4, 8, 0.0, 0, "no-such-org/no-such-model"), "is not allowed here"),
    (("hi", "model:/etc", 4, 8, 0.0, 0), "is not allowed here"),
    (("hi", "ngram", 4, 8, -1.0, 0), "temperature must be 0"),
])
def test_generate_endpoint_rejects_bad_input(client, args, message):
    """Bad input comes back as an error carrying the engine's message, and the server keeps working."""
    with pytest.raises(gradio_client.exceptions.AppError, match=message):
        client.predict(*args, api_name="/generate")


def test_four_concurrent_clients_each_get_their_own_correct_output(server):
    """4 clients stream at once (queue concurrency 2): all finish and each equals its solo greedy output."""
    prompts = [COPY_PROMPT, "Name three colours.", "Count from one to five.", "Say hello in French."]
    solo = [gradio_client.Client(server, verbose=False).predict(p, "ngram", 3, 12, 0.0, 0, api_name="/generate")[0]
            for p in prompts]
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(gradio_client.Client(server, verbose=False).predict, p, "ngram", 3, 12, 0.0, 0,
                               api_name="/generate") for p in prompts]
        together = [f.result(timeout=300)[0] for f in futures]
    assert together == solo


def test_memory_stays_flat_over_30_runs(server, client):
    """30 consecutive runs: the server's RSS grows by less than 64 MiB after warm-up (caches are freed)."""
    client.predict(COPY_PROMPT, "ngram", 4, 8, 0.0, 0, api_name="/generate")
    before = rss_mib(server.pid)
    for i in range(30):
        client.predict(f"{COPY_PROMPT} ({i})", "ngram", 4, 8, 0.0, 0, api_name="/generate")
    assert rss_mib(server.pid) - before < 64


def test_cancelled_clients_free_their_slots(server):
    """Cancelling (as a disconnect does) two long runs that hold both queue slots lets a new run through at once.

    Each long run needs 256 tokens (tens of seconds here); the new short run must finish within 60 s of
    the cancel, which only happens if the cancelled runs stopped and released their slots.
    """
    import time

    long_prompt = "Write a long story about a lighthouse keeper and a storm."
    jobs = [gradio_client.Client(server, verbose=False).submit(long_prompt, "ngram", 4, 256, 0.0, 0,
                                                               api_name="/generate") for _ in range(2)]
    deadline = time.monotonic() + 60
    while not all(len(job.outputs()) >= 1 for job in jobs):  # both are streaming: they hold the slots
        assert time.monotonic() < deadline, "long runs did not start"
        time.sleep(0.2)
    for job in jobs:
        job.cancel()
    started = time.monotonic()
    short = gradio_client.Client(server, verbose=False).submit(COPY_PROMPT, "ngram", 3, 8, 0.0, 0,
                                                               api_name="/generate")
    text, _ = short.result(timeout=60)
    assert text.strip() and time.monotonic() - started < 60
    assert all(job.outputs()[-1][1] == "" for job in jobs)  # stopped mid-run: no final summary was sent
