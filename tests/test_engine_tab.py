"""The Your engine tab's handlers (ui/engine_tab.py) without a browser: a metrics file or text gives every view, a
dropped file's text lands in the box, and each bad input (a number out of its range, v(n) points that are not n:v,
no text, a file too large or not UTF-8) is one warning naming the field, every view left as it was."""

from __future__ import annotations

import warnings

import pytest

from specviz import engine_metrics as ev
from tests.test_engine_metrics import FIXTURES
from ui import engine_tab as et

SETTINGS = dict(
    kind="auto", gamma=4, costs=et.TYPED, c=0.05, v=1.1, points="", target_b=8, draft_b=1, model=""
)


def shown(text: str, **changes):
    return et.show_metrics(text, *{**SETTINGS, **changes}.values())


def refusal(call) -> str:
    """The one warning a refused call gives (outside a request, gr.Warning warns), and that it changed nothing."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = call()
    messages = [str(w.message) for w in caught if "cannot read metrics" in str(w.message)]
    assert len(messages) == 1, [str(w.message) for w in caught]
    assert all(
        isinstance(x, dict) and x.get("__type__") == "update" and len(x) == 1 for x in out
    )  # gr.skip()
    return messages[0]


def test_a_report_gives_every_view_in_order():
    """The outputs are specviz.engine_metrics.VIEWS in order: the summary, then the four figures."""
    out = shown((FIXTURES / "vllm-metrics.prom").read_text(encoding="utf-8"))
    assert len(out) == len(ev.VIEWS) and 'data-kind="vllm-prometheus"' in out[0]
    assert out[1].layout.title.text.startswith("Acceptance by draft position")


def test_a_dropped_file_fills_the_box_and_empties_the_drop_zone():
    """The file's text goes into the box (what Read and predict reads again), the drop zone is emptied."""
    path = FIXTURES / "sglang-meta-info.json"
    drop, box, summary, *_ = et.show_upload(str(path), *SETTINGS.values())
    assert drop is None and box == path.read_text(encoding="utf-8") and 'data-kind="sglang"' in summary


def test_a_gpu_preset_needs_the_parameter_counts():
    """A preset's roofline takes the target's and the draft's parameters, each within its range."""
    text = (FIXTURES / "vllm-metrics.prom").read_text(encoding="utf-8")
    assert "H100 SXM" in shown(text, costs="H100 SXM")[0]
    assert f"{et.TARGET_LABEL} must be from 0.001 to 2000, got 5000" in refusal(
        lambda: shown(text, costs="H100 SXM", target_b=5000)
    )
    assert f"{et.DRAFT_LABEL} must be set" in refusal(lambda: shown(text, costs="H100 SXM", draft_b=None))
    assert "Costs must be typed or one of" in refusal(lambda: shown(text, costs="TPU v9"))


@pytest.mark.parametrize(
    "changes,words",
    [
        (dict(c=12), f"{et.C_LABEL} must be from 0 to 10, got 12"),
        (dict(c=None), f"{et.C_LABEL} must be set, from 0 to 10"),
        (dict(v=0.5), f"{et.V_LABEL} must be from 1 to 100, got 0.5"),
        (dict(v=float("nan")), f"{et.V_LABEL} must be a finite number"),
        (dict(points="5:1.2, 9:x"), f"{et.POINTS_LABEL}: '9:x' is not n:v (n a whole number from 2 to 65"),
        (dict(points="1:1.0"), "is not n:v"),
        (dict(points=" ".join(f"{n}:1.5" for n in range(2, 40))), "takes at most 32 points, got 38"),
        (dict(gamma=0), "γ must be a whole number from 1 to 16"),
        (dict(kind="tgi"), "metrics kind must be auto or one of"),
    ],
)
def test_a_setting_out_of_its_range_is_refused_by_name(changes, words):
    """Each number or text setting is checked by the handler (the boxes carry no Gradio bound), named in the
    warning with its range."""
    text = (FIXTURES / "vllm-metrics.prom").read_text(encoding="utf-8")
    assert words in refusal(lambda: shown(text, **changes))


def test_typed_points_replace_v():
    """v(n) points, when given, are the verify curve; the summary prints them."""
    text = (FIXTURES / "vllm-metrics.prom").read_text(encoding="utf-8")
    summary = shown(text, points="3:1.05 5:1.2 9:1.6")[0]
    assert "v(3) = 1.05, v(5) = 1.2, v(9) = 1.6; v(5) as typed = <b>1.2</b>" in summary


def test_nothing_to_read_a_large_file_and_bytes_that_are_not_text_are_refused(tmp_path):
    """An empty box, a file over the limit (refused unread) and a file that is not UTF-8: one warning each."""
    assert "nothing to read" in refusal(lambda: shown("  "))
    big = tmp_path / "big.prom"
    big.write_bytes(b"#" * (et.em.MAX_METRICS_BYTES + 1))
    assert "the limit is 512 KiB" in refusal(lambda: et.show_upload(str(big), *SETTINGS.values())[2:])
    binary = tmp_path / "bin.json"
    binary.write_bytes(b"\xff\xfe{}")
    assert "not UTF-8 text" in refusal(lambda: et.show_upload(str(binary), *SETTINGS.values())[2:])


def test_the_model_box_picks_one_of_several_models():
    """A scrape of two models: the first shown with both listed; the Model box picks the other; a model the report
    does not hold is one warning naming the ones it does."""
    from tests.test_serving_formats import two_models

    first = shown(two_models())[0]
    assert "holds 2 models, read apart" in first and "Qwen2.5-7B-Instruct" in first
    small = shown(two_models(), model="small")[0]
    assert "model_name=&quot;small&quot;" in small and "<td>150</td>" in small
    assert "no model 'tiny'" in refusal(lambda: shown(two_models(), model="tiny"))
