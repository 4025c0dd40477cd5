"""Every format the serving engines really write (engine/serving/): each sample written from the engine's documented
shape or source, quoted beside it, and read to the counts it holds, or refused with its real reason; models kept
apart; a window between two scrapes; `python -m engine metrics`."""

from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from engine import serving as em
from engine.serving import cli
from specviz import engine_metrics as ev
from tests.test_engine_metrics import FIXTURES, text_of

ROOT = Path(__file__).resolve().parent.parent


def cpp_double(value: int) -> str:
    """A count as llama-server prints it: `prometheus << ... << item.value` with item.value a double and the
    stream's default precision (6 significant digits, %g): 1234567 -> 1.23457e+06."""
    return f"{float(value):.6g}"


def llamacpp_metrics(steps: int, drafted: int, per_pos: list, accepted: int | None = None) -> str:
    """llama-server /metrics, as tools/server/server-task.cpp server_task_result_metrics::to_metrics writes it:
    counters through a std::stringstream as doubles (`(double) metrics.n_draft_tokens`), then
    `llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="i"} ` << an exact uint64."""
    accepted = sum(per_pos) if accepted is None else accepted
    lines = []
    for name, value in (
        ("spec_decode_num_draft_tokens_total", drafted),
        ("spec_decode_num_accepted_tokens_total", accepted),
        ("spec_decode_num_drafts_total", steps),
    ):
        lines += [f"# TYPE llamacpp:{name} counter", f"llamacpp:{name} {cpp_double(value)}"]
    lines.append("# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter")
    lines += [
        f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} {n}'
        for i, n in enumerate(per_pos)
    ]
    return "\n".join(lines) + "\n"


# -- llama.cpp's 6 significant digits ------------------------------------------------------------------------------
def test_llamacpp_totals_rounded_to_6_digits_are_read_with_the_exact_per_position_sum():
    """A long-running llama-server prints 1,234,567 accepted as 1.23457e+06 beside exact per-position counters:
    read, accepted the exact sum, and a note says why; steps printed just below what position 1 needs is taken
    within its rounding."""
    per_pos = [600_004, 400_003, 234_560]  # 1,234,567
    text = llamacpp_metrics(steps=700_001 + 300_000 + 600_000, drafted=3_300_003, per_pos=per_pos)
    assert "1.23457e+06" in text and "3.3e+06" in text
    run = em.read_metrics(text)
    assert run.accepted == 1_234_567 and run.per_position == tuple(per_pos)
    assert run.drafted == 3_300_000 and run.steps == 1_600_000  # as printed: 3.3e+06, 1.6e+06
    assert any("6 significant digits" in n for n in run.notes)
    first = [1_000_004, 200_003, 34_560]  # every step accepted a draft: steps = position 1's count
    tight = llamacpp_metrics(steps=1_000_004, drafted=3_000_012, per_pos=first)
    assert "spec_decode_num_drafts_total 1e+06" in tight
    assert (
        em.read_metrics(tight).steps == 1_000_004
    )  # 1e+06 is 999,995 to 1,000,005: the least position 1 allows


def test_a_total_off_by_more_than_its_rounding_is_still_refused():
    """Negative control: printed accepted 1.23467e+06 against an exact sum of 1,234,567 is 100 off, more than the
    ±5 of 6 significant digits: refused naming both."""
    text = llamacpp_metrics(1_600_000, 3_300_003, [600_004, 400_003, 234_560], accepted=1_234_667)
    with pytest.raises(
        ValueError, match="adds up to 1234567, .* is 1234670, more than its 6 significant digits"
    ):
        em.read_metrics(text)
    vllm = text_of("vllm-metrics.prom").replace("} 636.0", "} 637.0")  # vLLM prints exact counts: no slack
    with pytest.raises(ValueError, match="adds up to 636"):
        em.read_metrics(vllm)


def test_openmetrics_float_timestamps_and_exemplars_are_read():
    """OpenMetrics (prometheus.io/docs/specs/om/open_metrics_spec): `name{labels} value timestamp` with the
    timestamp in float seconds, and an exemplar ` # {trace_id="…"} 1.0` after a counter's value."""
    text = text_of("vllm-metrics.prom")
    stamped = "\n".join(
        line + " 1767225600.123" if line.startswith("vllm:spec_decode") and "_created" not in line else line
        for line in text.splitlines()
    )
    stamped = stamped.replace("} 636.0 1767225600.123", '} 636.0 # {trace_id="abc"} 1.0 1767225600.1')
    assert em.read_metrics(stamped + "\n# EOF\n") == em.read_metrics(text)


# -- drafted nothing -----------------------------------------------------------------------------------------------
def test_a_vllm_request_that_drafted_nothing_is_read_not_refused():
    """vLLM's acceptance_metrics.md: a request with no speculative step reports zeros and an all-zero
    acceptance_histogram. Read, with a note; τ and the rate are 0 ÷ 0, shown as unknown; the page draws it."""
    spec = {
        "num_spec_steps": 0,
        "num_draft_tokens": 0,
        "num_accepted_draft_tokens": 0,
        "num_spec_tokens": 3,
        "acceptance_histogram": [0, 0, 0, 0],
    }
    run = em.read_metrics(json.dumps({"metrics": {"speculative_decoding": spec}}))
    assert (
        (run.accepted, run.drafted, run.steps) == (0, 0, 0) and em.tau(run) is None and em.rate(run) is None
    )
    assert any(n.startswith("drafted nothing") for n in run.notes) and not em.predictable(run)
    views = ev.render(run, 4, em.Costs(c=0.05, points=((5, 1.1),)))
    assert "drafted nothing" in views["summary"] and 'data-known="0"' in views["summary"]
    spec.update(num_draft_tokens=6)  # steps 0 beside drafts: contradictory, refused
    with pytest.raises(ValueError, match="num_spec_steps is 0, but num_draft_tokens is 6"):
        em.read_metrics(json.dumps({"metrics": {"speculative_decoding": spec}}))


def test_a_llamacpp_response_without_draft_n_drafted_nothing():
    """tools/server/server-common.cpp: `if (n_draft_tokens > 0) { base["draft_n"] = …; base["draft_n_accepted"] =
    … }`: a response without them drafted nothing (a live server answering an end of text at once writes such
    a one): read, τ its tokens per forward (1), no prediction, a note naming both causes."""
    run = em.read_metrics(json.dumps({"content": "", "timings": {"predicted_n": 1, "predicted_ms": 9.0}}))
    assert (run.accepted, run.drafted, run.tokens) == (0, 0, 1) and em.tau(run) == 1 and em.rate(run) is None
    assert run.notes == (em.readers.LLAMACPP_NO_DRAFT,) and not em.predictable(run)


def test_a_trtllm_request_without_speculative_decoding_counts_as_drafting_nothing():
    """TensorRT-LLM writes request_perf_metrics.speculative_decoding only for a request that drafted; trtllm-serve's
    /perf_metrics lists every request: the one without it is counted as drafting nothing, the list still read."""
    one = json.loads(text_of("trtllm-request-perf.json"))
    idle = {"request_id": 7, "perf_metrics": {"timing_metrics": {"arrival_time": 1.0}}}
    run = em.read_metrics(json.dumps([one, idle]))
    assert (run.accepted, run.drafted) == (132, 192) and any("1 of them had no" in n for n in run.notes)
    alone = em.read_metrics(json.dumps(idle))
    assert (alone.accepted, alone.drafted) == (0, 0) and any(
        "counted as drafting nothing" in n for n in alone.notes
    )


# -- wrappers ------------------------------------------------------------------------------------------------------
def test_a_server_sent_events_stream_is_read_from_its_last_report():
    """llama.cpp tools/server/README.md: with `stream`, responses are Server-sent events, `content`, `tokens` and
    `stop` until the end of the completion, whose last message carries the rest (timings among it)."""
    final = json.loads(text_of("llamacpp-server-timings.json"))
    final["stop"] = True
    stream = "".join(
        f"data: {json.dumps(c)}\n\n"
        for c in ({"content": "Hi", "stop": False}, {"content": "!", "stop": False}, final)
    )
    run = em.read_metrics(stream)
    assert run == em.read_metrics(text_of("llamacpp-server-timings.json")).__class__(
        **{**em.read_metrics(text_of("llamacpp-server-timings.json")).__dict__, "notes": run.notes}
    )
    assert run.notes[0] == em.formats.SSE_NOTE
    with pytest.raises(ValueError, match="metrics not recognised"):
        em.read_metrics('data: {"content": "Hi"}\n\ndata: [DONE]\n\n')


def test_a_vllm_stream_is_read_from_its_usage_chunk():
    """An OpenAI-style stream from vLLM (`stream_options: {"include_usage": true}`): content chunks, then a chunk
    with empty choices and the usage (here carrying the response's metrics.speculative_decoding, the field vLLM's
    acceptance_metrics.md names), then `data: [DONE]`: the report is the usage chunk's."""
    spec = json.loads(text_of("vllm-request-detailed.json"))["metrics"]
    chunks = [
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": "Hi"}}],
        },
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "choices": [],
            "usage": {"completion_tokens": 53},
        }
        | {"metrics": spec},
    ]
    stream = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    run = em.read_metrics(stream)
    assert (run.accepted, run.drafted, run.steps) == (33, 58, 20) and run.notes[0] == em.formats.SSE_NOTE


def test_an_envelope_is_opened():
    """llama-swap's captures wrap a response as {"data": {...}}: opened, said in a note; vLLM's fixture inside one
    reads to the same counts."""
    inner = json.loads(text_of("vllm-request-detailed.json"))
    run = em.read_metrics(json.dumps({"data": inner}))
    assert (run.accepted, run.drafted, run.steps) == (33, 58, 20) and em.formats.ENVELOPE_NOTE in run.notes
    with pytest.raises(ValueError, match="metrics not recognised"):
        em.read_metrics('{"data": {"choices": []}}')


GET_METRICS = """[Counter(name='vllm:spec_decode_num_drafts', labels={'engine': '0', 'model_name': 'Qwen/Qwen2.5-7B-Instruct'}, value=400),
Counter(name='vllm:spec_decode_num_draft_tokens', labels={'engine': '0', 'model_name': 'Qwen/Qwen2.5-7B-Instruct'}, value=1200),
Counter(name='vllm:spec_decode_num_accepted_tokens', labels={'engine': '0', 'model_name': 'Qwen/Qwen2.5-7B-Instruct'}, value=636),
Gauge(name='vllm:num_requests_running', labels={'engine': '0', 'model_name': 'Qwen/Qwen2.5-7B-Instruct'}, value=0.0),
Vector(name='vllm:spec_decode_num_accepted_tokens_per_pos', labels={'engine': '0', 'model_name': 'Qwen/Qwen2.5-7B-Instruct'}, values=[290, 205, 141])]
"""


def test_get_metrics_printed_objects_are_read():
    """vllm/v1/metrics/reader.py: LLM.get_metrics() returns dataclasses, Counter(name, labels, value) and, for
    vllm:spec_decode_num_accepted_tokens_per_pos only, Vector(name, labels, values); printed, they read to the
    same counts as the /metrics fixture they describe."""
    run, scrape = em.read_metrics(GET_METRICS), em.read_metrics(text_of("vllm-metrics.prom"))
    assert (run.accepted, run.drafted, run.steps, run.per_position) == (636, 1200, 400, (290, 205, 141))
    assert run.per_position == scrape.per_position and em.formats.OBJECTS_NOTE in run.notes
    one_a_line = "\n".join(
        f"{line.strip('[],')} = 0" for line in GET_METRICS.splitlines()
    )  # print(f"{m} = …")
    assert em.read_metrics(one_a_line).per_position == (290, 205, 141)
    with pytest.raises(ValueError, match="no Counter or Vector object"):
        em.read_metrics("[Gauge(name='vllm:x', labels={}, value=1.0)]")
    with pytest.raises(ValueError, match="not one of get_metrics"):
        em.read_metrics("[Counter(name='vllm:x', labels={}, value=__import__('os'))]")


# -- older engines -------------------------------------------------------------------------------------------------
def test_sglang_older_meta_info_is_read_with_sglangs_own_tau():
    """SGLang's older tokenizer_manager.py wrote spec_verify_ct beside completion_tokens only; SGLang's τ is
    completion_tokens ÷ spec_verify_ct. Read: τ = 128/50, no rate, a note says why; the prediction uses that τ."""
    meta = {"completion_tokens": 128, "spec_verify_ct": 50, "prompt_tokens": 20}
    run = em.read_metrics(json.dumps({"text": "", "meta_info": meta}))
    assert em.tau(run) == Fraction(128, 50) and em.rate(run) is None and run.accepted is None
    assert run.notes[0] == em.SGLANG_OLDER
    alphas = em.alphas_for(run, 4)
    assert "SGLang's τ" in alphas.how and 0 < alphas.values[0] < 1
    assert "τ" in ev.render(run, 4, em.Costs(c=0.05, points=((5, 1.1),)))["summary"]


def test_vllm_v0_and_early_v1_scrapes_are_named_with_what_can_be_shown():
    """vLLM V0 (vllm/engine/metrics.py: spec_decode_num_accepted_tokens_total, _num_draft_tokens_total,
    _num_emitted_tokens_total, the draft_acceptance_rate gauge) and early V1 (the first two only) export no
    vllm:spec_decode_num_drafts: the rate is shown, τ is named as unknown, the version said."""
    labels = '{model_name="m"}'
    early = (
        f"vllm:spec_decode_num_draft_tokens_total{labels} 1200.0\n"
        f"vllm:spec_decode_num_accepted_tokens_total{labels} 636.0\n"
    )
    v0 = (
        early
        + f"vllm:spec_decode_num_emitted_tokens_total{labels} 1036.0\nvllm:spec_decode_draft_acceptance_rate{labels} 0.53\n"
    )
    for text, words in ((v0, "vLLM V0 metrics: accepted counts are per token"), (early, "an early vLLM V1")):
        run = em.read_metrics(text)
        assert run.kind == "vllm-older" and em.rate(run) == Fraction(636, 1200) and em.tau(run) is None
        assert run.notes[0].startswith(words)
        assert "vllm:spec_decode_num_drafts" in ev.tau_html(run)


def test_llamacpp_timings_overcount_at_a_stop_is_clamped_with_the_reason():
    """llama.cpp's server adds a round's accepted drafts (n_draft_accepted += n_accepted) before its per-token stop
    loop: a real MLX-server capture reported predicted_n 2 with draft_n_accepted 6. Taken as predicted_n − 1 = 1,
    with a note naming why; accepted beyond draft_n is still refused."""
    timings = {"predicted_n": 2, "draft_n": 8, "draft_n_accepted": 6, "predicted_ms": 40.0}
    run = em.read_metrics(json.dumps({"content": "ok", "timings": timings}))
    assert (run.accepted, run.drafted, run.steps) == (1, 8, 1)
    assert "n_draft_accepted += n_accepted" in run.notes[0] and "taken as 1" in run.notes[0]
    timings.update(draft_n_accepted=9)
    with pytest.raises(ValueError, match="draft_n_accepted is 9, more than draft_n = 8"):
        em.read_metrics(json.dumps({"timings": timings}))


# -- models apart, windows -----------------------------------------------------------------------------------------
def two_models() -> str:
    """One vLLM server serving two models, k = 3 and k = 5 (vLLM labels every series with model_name)."""
    a = text_of("vllm-metrics.prom")
    b = [
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="small"} 100.0',
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="small"} 500.0',
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="small"} 150.0',
    ] + [
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="small",position="{i}"}} {n}.0'
        for i, n in enumerate([60, 40, 25, 15, 10])
    ]
    return a + "\n".join(b) + "\n"


def test_two_models_are_listed_apart_never_pooled():
    """Two model_name values, k = 3 and k = 5: two runs, each its own α per position (the k = 3 model has no
    position 4), listed; the first shown with the others named; --model picks; an unknown model is refused."""
    runs = em.read_runs(two_models())
    assert [r.model for r in runs] == ['model_name="Qwen/Qwen2.5-7B-Instruct"', 'model_name="small"']
    assert [len(r.per_position) for r in runs] == [3, 5] and [r.accepted for r in runs] == [636, 150]
    small = em.read_metrics(two_models(), model="small")
    assert em.position_alphas(small)[3] == Fraction(15, 25) and small.models == tuple(r.model for r in runs)
    first = em.read_metrics(two_models())
    assert first.accepted == 636 and "holds 2 models, read apart" in first.notes[0]
    with pytest.raises(ValueError, match="no model 'tiny' in this report"):
        em.read_metrics(two_models(), model="tiny")
    assert "model model_name=&quot;small&quot;" in ev.summary_html(
        small
    )  # escaped: a label is the report's text


def scrape(steps, drafted, accepted, per_pos, engine="0") -> str:
    labels = f'engine="{engine}",model_name="m"'
    lines = [
        f"vllm:spec_decode_num_drafts_total{{{labels}}} {steps}.0",
        f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} {drafted}.0",
        f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {accepted}.0",
    ] + [
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{i}"}} {n}.0'
        for i, n in enumerate(per_pos)
    ]
    return "\n".join(lines) + "\n"


def test_two_scrapes_pasted_give_the_windows_figures():
    """Counters are totals since the server started; two scrapes pasted one after the other give the window
    between them (each counter's increase): 100 steps, 300 drafts, 120 accepted, per position 60/40/20."""
    before, after = scrape(400, 1200, 636, [290, 205, 141]), scrape(500, 1500, 756, [350, 245, 161])
    run = em.read_metrics(before + after)
    assert (run.steps, run.drafted, run.accepted, run.per_position) == (100, 300, 120, (60, 40, 20))
    assert run.window == {"scrapes": 2, "resets": 0} and em.tau(run) == 1 + Fraction(120, 100)
    assert "a window over 2 scrapes" in ev.summary_html(run)


def test_a_counter_reset_between_scrapes_is_a_restart_from_zero():
    """Prometheus' increase(): a counter that fell restarted; its value after the restart is the increase. A server
    restarted between the scrapes: the window is what the second scrape counted, 1 reset per series said."""
    before, after = scrape(400, 1200, 636, [290, 205, 141]), scrape(10, 30, 12, [6, 4, 2])
    run = em.read_metrics(before + after)
    assert (run.steps, run.drafted, run.accepted, run.per_position) == (10, 30, 12, (6, 4, 2))
    assert run.window["resets"] == 6 and any("counter reset" in n for n in run.notes)
    quiet = em.read_metrics(before + before)  # nothing served between: drafted nothing, read
    assert quiet.drafted == 0 and any(n.startswith("drafted nothing") for n in quiet.notes)


def test_a_series_that_appears_between_scrapes_counts_from_zero():
    """llama-server writes its per-position counters only once a step drafted (`if
    (!metrics.n_accepted_per_pos.empty())` in to_metrics): a fresh server's scrape has none, the next has them;
    the window counts them from 0."""
    fresh = llamacpp_metrics(0, 0, [])
    run = em.read_metrics(fresh)
    assert run.drafted == 0 and any(n.startswith("drafted nothing") for n in run.notes)
    window = em.read_metrics(fresh + llamacpp_metrics(12, 48, [10, 7, 4, 2]))
    assert (window.steps, window.drafted, window.accepted, window.per_position) == (12, 48, 23, (10, 7, 4, 2))


def test_a_window_of_llamacpp_scrapes_keeps_exact_positions():
    """Two llama.cpp scrapes of a long-running server: accepted is the exact per-position increase."""
    before = llamacpp_metrics(1_600_000, 3_300_003, [600_004, 400_003, 234_560])
    after = llamacpp_metrics(1_600_010, 3_300_033, [600_014, 400_010, 234_562])
    run = em.read_metrics(before + after)
    assert run.accepted == 19 and run.per_position == (10, 7, 2)


# -- the command ---------------------------------------------------------------------------------------------------
def engine_cli(*args, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "engine", "metrics", *args],
        cwd=ROOT,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_command_prints_json_figures_and_writes_what_the_page_reads(tmp_path):
    """`python -m engine metrics FILE --json --model NAME --out FILE`: τ, the rate, per position, model, engine;
    the file written reads to the same figures; stdin (`-`) reads the same."""
    src = tmp_path / "scrape.prom"
    src.write_text(two_models(), encoding="utf-8")
    out = tmp_path / "page.prom"
    done = engine_cli(str(src), "--json", "--model", "small", "--out", str(out))
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["model"] == 'model_name="small"' and got["engine"] == "vLLM" and got["window"] is None
    assert got["tau"] == 1 + 150 / 100 and got["rate"] == 150 / 500 and got["per_position"][3] == 15 / 100
    assert em.read_metrics(out.read_text(encoding="utf-8"), model="small").accepted == 150
    piped = engine_cli("-", stdin=text_of("sglang-meta-info.json"))
    assert piped.returncode == 0 and "τ 2.560" in piped.stdout, piped.stderr
    refused = engine_cli(str(tmp_path / "missing.prom"))
    assert refused.returncode == 2 and refused.stderr.startswith("error:")


def test_watch_prints_each_windows_figures(tmp_path, monkeypatch, capsys):
    """--watch: scrape, wait, scrape; each window's τ, rate and per position from the two scrapes around it."""
    scrapes = iter([scrape(400, 1200, 636, [290, 205, 141]), scrape(500, 1500, 756, [350, 245, 161])])
    monkeypatch.setattr(cli, "fetch", lambda source: next(scrapes))
    monkeypatch.setattr(cli, "pause", lambda seconds: None)
    out = tmp_path / "window.prom"
    args = cli_args("http://127.0.0.1:9/metrics", watch=1.0, windows=1, out=str(out))
    assert cli.metrics_cli(args) == 0
    printed = capsys.readouterr()
    assert "[window 1" in printed.out and "τ 2.200 · rate 0.400 · per position 0.60 0.40 0.20" in printed.out
    assert em.read_metrics(out.read_text(encoding="utf-8")).window == {"scrapes": 2, "resets": 0}


def cli_args(source: str, **kw):
    import argparse

    defaults = dict(kind="auto", model=None, watch=None, windows=None, json=False, out=None)
    return argparse.Namespace(source=source, **{**defaults, **kw})


def test_fetch_takes_files_and_http_urls_only():
    """A file, - or http(s): another scheme is refused by name (the page itself never fetches)."""
    with pytest.raises(ValueError, match="a file, - or an http"):
        cli.fetch("file:///etc/passwd")
    assert "vllm:" in cli.fetch(str(FIXTURES / "vllm-metrics.prom"))


def test_the_command_reads_an_http_url(tmp_path):
    """SOURCE an http URL (a server the user runs): fetched, read, refused past the size limit by name."""
    import http.server
    import threading

    bodies = {"/metrics": text_of("vllm-metrics.prom").encode(), "/big": b"x" * (em.MAX_METRICS_BYTES + 1)}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = bodies[self.path]
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        done = engine_cli(url + "/metrics", "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["rate"] == 636 / 1200
        with pytest.raises(ValueError, match="more than 512 KiB"):
            cli.fetch(url + "/big")
    finally:
        server.shutdown()
