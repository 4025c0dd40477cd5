"""The public app reads only what its operator allowed (issue: hardening): every spec goes through the one parser,
so no whitespace or case variant slips past the allowlist; head files only from the shipped assets or
SPECVIZ_HEADS_DIR; the sizing refusal on every entry point; bounded, honest errors; trace files round-trip and
Gradio's copies are bounded."""

from __future__ import annotations

import os
import time

import gradio as gr
import pytest

from engine.events import MAX_TRACE_BYTES, trace_to_json
from engine.runtime import models
from specviz.demo_trace import long_events
from ui import app_guard as guard
from ui import app_views as av
from ui import endpoints, outputs


@pytest.fixture
def no_loads(monkeypatch):
    """Any model load fails the test: a refusal must come before anything is read."""

    def refuse(*args):
        raise AssertionError(f"a model load was attempted: {args[:1]}")

    monkeypatch.setattr(models, "_load", refuse)
    monkeypatch.setattr(models, "_LOADED", {})


@pytest.mark.parametrize(
    "draft", [" model:/some/dir", "\tmodel:/etc", "MODEL:/etc", " Model:gpt2", "model: /tmp ", "\nmodel:x/y"]
)
def test_no_spelling_of_a_draft_model_passes_the_allowlist(draft, no_loads):
    """The allowlist reads the parsed spec: leading whitespace, tabs and capitals name the same family."""
    with pytest.raises(ValueError, match="is not allowed here"):
        outputs.prepare("embedded", draft, "hello", False)


@pytest.mark.parametrize("target", [" /etc", "\t./", "Qwen/Qwen2.5-7B-Instruct\u0000", "gpt2 "])
def test_no_spelling_of_a_target_passes_the_allowlist(target, no_loads):
    """Targets go through the one model-spec parser too (stripped; control characters refused)."""
    with pytest.raises(ValueError, match="not allowed here|control character"):
        outputs.prepare(target, "ngram", "hello", False)


def test_spellings_of_allowed_specs_are_normalised():
    """' NGRAM:3 ' and ' Embedded ' are the same run as 'ngram:3' on 'embedded'."""
    assert av.check_allowed(" Embedded ", " NGRAM:3 ", env="") == ("embedded", "ngram:3")


def heads_paths(tmp_path):
    fifo = tmp_path / "fifo.pt"
    os.mkfifo(fifo)
    (tmp_path / "folder.pt").mkdir()
    return [
        "/etc/shadow",
        "/proc/self/environ",
        "/dev/zero",
        str(fifo),
        str(tmp_path / "folder.pt"),
        str(tmp_path / "missing.pt"),
        "../../etc/passwd",
    ]


@pytest.mark.parametrize("family", ["eagle", "medusa"])
def test_head_paths_are_refused_at_once_without_saying_whether_they_exist(family, tmp_path, no_loads):
    """eagle:PATH / medusa:PATH: one message for every path (existing, missing, a FIFO, a device, a folder), and
    nothing is opened (a FIFO would block the call)."""
    messages = set()
    for path in heads_paths(tmp_path):
        with pytest.raises(ValueError) as e:
            av.check_allowed("embedded", f"{family}:{path}", env="", heads_env="")
        messages.add(str(e.value))
    assert len(messages) == 1 and "loads only the shipped heads" in messages.pop()
    av.check_allowed("embedded", family, env="", heads_env="")  # the shipped heads: allowed


def test_an_operator_folder_allows_its_regular_files_only(tmp_path):
    """With SPECVIZ_HEADS_DIR a regular file inside it is allowed; a FIFO inside it, or a file outside, is not."""
    good = tmp_path / "heads.pt"
    good.write_bytes(b"x")
    os.mkfifo(tmp_path / "pipe.pt")
    assert av.heads_file_allowed(str(good), str(tmp_path))
    assert not av.heads_file_allowed(str(tmp_path / "pipe.pt"), str(tmp_path))
    assert not av.heads_file_allowed(str(tmp_path / ".." / "x.pt"), str(tmp_path))
    assert not av.heads_file_allowed(str(good), "")


def test_the_api_refuses_a_pair_this_machine_cannot_hold(monkeypatch, no_loads):
    """The sizing refusal covers /generate too (it reached the hub before): a 7B target on an 8 GiB machine."""
    monkeypatch.setenv("SPECVIZ_DEVICE_MEMORY_GB", "8")
    with pytest.raises(gr.Error, match=r"needs about \d+ GiB here"):
        next(endpoints.api_generate("hi", draft="ngram", target="Qwen/Qwen2.5-7B-Instruct"))


@pytest.mark.parametrize("value", [10**400, -(10**400)])
def test_an_overflowing_number_is_refused_by_name(value):
    """temperature=10**400 was an OverflowError; now it is the setting's own message."""
    with pytest.raises(ValueError, match="temperature must be a finite number"):
        guard.api_arguments("hi", "ngram", 4, 8, value, 0, "embedded", 512, 2048)


def test_gradio_cache_copies_are_bounded(tmp_path):
    """Trace copies in Gradio's cache beyond the newest `keep`, or older than the age limit, are deleted."""
    now = time.time()
    for i in range(10):
        f = tmp_path / f"h{i}" / guard.trace_file_name()
        f.parent.mkdir()
        f.write_text("{}")
        os.utime(f, (now - i, now - i))
    old = tmp_path / "old" / "specviz-trace-0000000000000000.json"
    old.parent.mkdir()
    old.write_text("{}")
    os.utime(old, (now - 7200, now - 7200))
    other = tmp_path / "another-app" / "upload.json"  # Gradio's folder is shared: what is not ours stays
    other.parent.mkdir()
    other.write_text("{}")
    os.utime(other, (now - 7200, now - 7200))
    assert guard.prune_cache(tmp_path, keep=4, max_age_s=3600) == 7
    assert sorted(p.parent.name for p in tmp_path.glob("*/specviz-trace-*.json")) == ["h0", "h1", "h2", "h3"]
    # the emptied hash folder goes; the other app's file stays
    assert not (tmp_path / "h9").exists() and other.exists()


@pytest.mark.slow  # a 4.7 MiB trace: parsing and rendering it takes a few seconds
def test_a_large_loaded_trace_round_trips(tmp_path):
    """A 4.7 MiB trace loads, and the file the app then offers for download is within the upload limit and
    loads back the same run."""
    events = long_events(1400, topk=20)
    src = tmp_path / "big.json"
    src.write_text(trace_to_json(events), encoding="utf-8")
    assert 4.4 * 2**20 < src.stat().st_size < MAX_TRACE_BYTES
    loaded = av.load_trace(src)
    out = outputs.settled(loaded, cut_reason=None)
    path = out.download["value"]
    assert os.path.getsize(path) <= MAX_TRACE_BYTES
    assert av.load_trace(path) == loaded


def test_a_trace_too_large_to_load_back_is_not_offered(tmp_path):
    """A run whose trace would exceed the upload limit gets no download (and says why) rather than a file the
    app would then refuse."""
    events = long_events(1700, topk=20)
    with pytest.raises(ValueError, match="not offered for download"):
        guard.write_trace_file(tmp_path, events, keep=4, max_age_s=3600)
    assert not list(tmp_path.glob("*.json"))


def test_streamed_text_leaves_out_the_special_tokens_the_final_text_drops():
    """The API's text so far never shows <|im_end|>; the final reply never did."""
    from engine.events import Committed

    events = [
        Committed(
            round=1,
            pos=5,
            token_ids=[7, 8, 2],
            tokens=["Hi", " there", "<|im_end|>"],
            origins=["accepted", "accepted", "bonus"],
            p=[0.9, 0.9, 0.9],
        )
    ]
    assert endpoints.text_so_far(events, frozenset({2})) == "Hi there"
    assert (
        endpoints.text_so_far(events, frozenset()) == "Hi there<|im_end|>"
    )  # the control: without the ids it shows


def test_quantized_copies_count_against_the_models_limit(tiny_dirs, monkeypatch):
    """A quant: copy lives in the models' LRU (SPECVIZ_MAX_MODELS), not beside it: trying every variant cannot
    pile up copies (RSS grew to 4.75 GiB that way)."""
    from engine.drafters.model import quantized_model

    target = models.load_model(tiny_dirs["target"])
    copy = quantized_model(target, "bf16")
    assert quantized_model(target, "bf16") is copy
    names = [k[0] for k in models._LOADED]
    assert f"{target.name}#quant:bf16" in names
    monkeypatch.setattr(models, "MAX_MODELS", 1)
    gone = models.unload_unused(keep=next(k for k in models._LOADED if k[0] == target.name))
    assert f"{target.name}#quant:bf16" in gone


def test_an_api_refusal_is_one_log_line(capsys, no_loads):
    """A refused /generate call logs one line and asks Gradio not to print its traceback."""
    with pytest.raises(gr.Error) as e:
        next(endpoints.api_generate("hi", draft=" model:/etc"))
    assert e.value.print_exception is False
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "refused an API call" in err[0] and "not allowed here" in err[0]


def test_a_raw_client_may_leave_out_every_argument_after_the_prompt():
    """A raw POST of ["hi"] gets the handler's defaults (it got `error: null`); [] is refused by name."""
    import app

    demo = app.build_demo()
    fn = next(f for f in demo.fns.values() if f.api_name == "generate")
    inputs = ["hi"]
    demo.validate_inputs(fn, inputs)
    assert inputs == ["hi", "ngram", 4, 48, 0.0, 0, "embedded", 1] and len(inputs) == len(fn.inputs)
    with pytest.raises(gr.Error, match="prompt is required"):
        demo.validate_inputs(fn, [])


@pytest.mark.parametrize(
    "kind,field,value,message",
    [
        (
            "verified",
            "target_topk",
            [7],
            r"verified.target_topk\[0\] must be a list of at most 20 \[id, text, prob\] rows",
        ),
        (
            "drafted",
            "draft_topk",
            [7, 7, 7, 7],
            r"drafted.draft_topk must be a list of at most 3 top-k lists",
        ),
        (
            "verified",
            "residual_topk",
            [[1, "x", 2.0]],
            r"verified.residual_topk\[0\]\[2\] must be a probability",
        ),
    ],
)
def test_top_k_fields_a_renderer_reads_are_validated(kind, field, value, message):
    """The two traces that broke every panel (and a residual with p = 2) are refused with one message."""
    import dataclasses

    from engine.events import trace_from_json
    from specviz.demo_trace import sample_events

    events = [
        dataclasses.replace(e, **{field: value}) if e.kind == kind and e.round == 2 else e
        for e in sample_events()
    ]
    with pytest.raises(ValueError, match=message):
        trace_from_json(trace_to_json(events))


def test_a_load_from_an_unreachable_hub_is_bounded(monkeypatch):
    """With the hub unreachable a hub id is looked up in the local cache only (huggingface_hub's retries took 24 s
    here before), and the message says why."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(models, "hub_reachable", lambda *a: False)
    with pytest.raises(models.ModelLoadError, match="the Hugging Face hub is unreachable from here"):
        models._load_pretrained("no-such-org/no-such-model", None, None, False)


def test_a_beam_run_with_a_drafter_beams_cannot_use_is_refused_before_it_is_built(no_loads):
    """quant (a deep copy) for beams is refused by the registry's check before any drafter is built."""
    with pytest.raises(ValueError, match="beam search .* drafts with"):
        outputs.prepare("embedded", "quant", "hello", False, num_beams=3)


def test_spec_arguments_are_normalised_too():
    """Choice arguments in any case, an empty argument dropped, a draft model's keyword in lower case."""
    from engine.specs import parse_draft

    assert parse_draft("quant:INT8")["kind"] == "int8" and parse_draft("auto:").text == "auto"
    assert parse_draft("model:Embedded").model == "embedded"
    assert av.check_allowed("embedded", "model:Embedded", env="") == ("embedded", "model:Embedded")
