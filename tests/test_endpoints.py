"""Every endpoint the app registers checks its inputs like /generate does, private ones included: a raw client's
missing, extra, non-finite or wrong-type argument is refused with a message that names the endpoint or the setting
(each got `error: null` and a traceback before). The enumeration covers every registered endpoint, so a new one,
or a new kind of input, cannot slip past."""

from __future__ import annotations

import math
from collections import Counter

import gradio as gr
import pytest

import app
from ui import endpoints as ui_endpoints


@pytest.fixture(scope="module")
def demo():
    return app.build_demo()


def endpoints(demo) -> list:
    """Every registered endpoint with a backend function: what a client can call."""
    return [fn for fn in demo.fns.values() if fn.fn is not None]


def defaults(fn) -> list:
    """Values the browser would send: each component's own value (the /generate API: a prompt and its defaults)."""
    if fn.api_name == "generate":
        return ["hi"]
    # an index
    return [0 if isinstance(block, gr.Dataset) else getattr(block, "value", None) for block in fn.inputs]


def refused(demo, fn, values) -> str:
    with pytest.raises(gr.Error) as e:
        demo.validate_inputs(fn, list(values))
    return e.value.message


def test_every_input_of_every_endpoint_has_a_checked_kind(demo):
    """A new endpoint whose input is of a kind the checker does not know fails here (it would reach the handler
    unchecked)."""
    unknown = [
        (fn.api_name, type(block).__name__)
        for fn in endpoints(demo)
        for block in fn.inputs
        if not any(isinstance(block, cls) for cls, _ in ui_endpoints.INPUT_KIND)
        and type(block).__name__ not in ("State", "Api")
    ]
    assert not unknown


def test_every_endpoint_accepts_what_the_browser_sends(demo):
    """The check refuses nothing the page itself sends (each component's own value)."""
    for fn in endpoints(demo):
        demo.validate_inputs(fn, defaults(fn))


def test_every_endpoint_refuses_missing_and_extra_arguments_by_name(demo):
    """Too few or too many arguments: a gr.Error naming the endpoint and what it takes, for every endpoint."""
    for fn in endpoints(demo):
        values = defaults(fn)
        if fn.api_name == "generate":
            assert "prompt is required" in refused(demo, fn, [])
            assert "/generate takes 8 inputs" in refused(demo, fn, values + ["x"] * 8)
            continue
        if values:
            assert f"/{fn.api_name} takes {len(values)} input" in refused(demo, fn, values[:-1])
        assert f"/{fn.api_name} takes {len(values)} input" in refused(demo, fn, values + [0])


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, "4", [4], True])
def test_every_number_of_every_endpoint_refuses_a_non_number_by_its_label(demo, bad):
    """NaN, ±Infinity, a string, a list or a bool in any number input (a slider's range check let NaN through) is
    refused with the setting's label."""
    seen = 0
    for fn in endpoints(demo):
        for k, block in enumerate(fn.inputs):
            if isinstance(block, (gr.Slider, gr.Number)):
                values = defaults(fn)
                values[k] = bad
                assert ui_endpoints.input_label(block) in refused(demo, fn, values)
                seen += 1
    assert seen >= 20  # the run, the drift meter, beams, batch, replay


@pytest.mark.parametrize(
    "args,where",
    [
        (["hi", "ngram", math.nan], "gamma"),
        (["hi", "ngram", 4, math.inf], "max_new_tokens"),
        (["hi", "ngram", 4, 8, math.nan], "temperature"),
        (["hi", "ngram", 4, 8, 0.0, math.inf], "seed"),
    ],
)
def test_generate_refuses_non_finite_arguments_by_name(demo, args, where):
    """/generate's own arguments (gr.api) are checked by api_arguments when it runs: NaN and Infinity by name."""
    fn = next(f for f in endpoints(demo) if f.api_name == "generate")
    demo.validate_inputs(fn, args)  # the checker fills the defaults; the handler names the argument
    with pytest.raises(gr.Error, match=where):
        list(ui_endpoints.api_generate(*args))


# per kind of checked input (ui_endpoints.INPUT_KIND), a value of another type; numbers have their own test above
WRONG_TYPE = {"bool": "yes", "text": 7, "choice": ["ngram"], "file": 3, "index": "1"}


def test_wrong_types_are_refused_by_label(demo):
    """A checkbox that is not a bool, a text that is not text, a choice that is a list, a file that is a number, an
    example index that is text: refused with the input's label. Counts what it checked against the page's inputs of
    those components, so a kind the checker learns without a case here, or an input it stops classifying, fails."""
    assert {kind for _, kind in ui_endpoints.INPUT_KIND} == {*WRONG_TYPE, "number"}
    seen = Counter()
    for fn in endpoints(demo):
        for k, block in enumerate(fn.inputs):
            kind = next((kind for cls, kind in ui_endpoints.INPUT_KIND if isinstance(block, cls)), None)
            if kind in WRONG_TYPE:
                values = defaults(fn)
                values[k] = WRONG_TYPE[kind]
                assert ui_endpoints.input_label(block) in refused(demo, fn, values), (fn.api_name, kind)
                seen[kind] += 1
    expected = sum(
        isinstance(block, (gr.Checkbox, gr.Textbox, gr.Dropdown, gr.File, gr.Dataset))
        for fn in endpoints(demo)
        for block in fn.inputs
    )
    assert sum(seen.values()) == expected >= 30 and seen.keys() == WRONG_TYPE.keys(), (seen, expected)


# one value per hostile case; `null` is refused wherever the page itself never sends it
HOSTILE = {"null": None, "surrogate": "\ud800", "a 1 MB string": "x" * 2**20}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_every_input_refuses_null_surrogates_and_oversize_values_by_name_in_few_words(demo, case):
    """null, a lone surrogate and a 1 MB string in every input of every endpoint (sliders, dropdowns, checkboxes,
    text, files, galleries): refused with the input's label in a message of at most 300 characters, never the value
    echoed (a 20 MB dropdown value came back whole in the error and the log; a surrogate killed the stream with
    'str is not valid UTF-8'; null gave `error: null`), or, where the page sends that value itself (an empty
    number box, no file), accepted. Counts every case, so a new endpoint or kind is covered or the count fails."""
    bad, seen, kinds = HOSTILE[case], 0, set()
    for fn in endpoints(demo):
        for k, block in enumerate(fn.inputs):
            kind = next((kind for cls, kind in ui_endpoints.INPUT_KIND if isinstance(block, cls)), None)
            if kind is None:
                continue
            values = defaults(fn)
            values[k] = bad
            if bad is None and ui_endpoints.input_spec(block).get("null", kind in ("number", "file")):
                demo.validate_inputs(fn, values)  # the page's own value: accepted
                continue
            message = refused(demo, fn, values)
            assert ui_endpoints.input_label(block) in message and len(message) <= 300, (
                fn.api_name,
                message[:400],
            )
            seen, kinds = seen + 1, kinds | {type(block).__name__}
    assert seen >= 40, seen
    assert {"Slider", "Dropdown", "Textbox", "Checkbox"} <= kinds, kinds


@pytest.mark.parametrize(
    "label,value,words",
    [
        ("γ (draft tokens per round)", 99, "must be from 1 to 16"),
        ("top-p", 0, "must be from 0.05 to 1"),
        ("Beams B", 9, "must be from 2 to 8"),
        ("Drafter", "no-such-drafter", "must be one of its choices"),
        (
            "Load a trace to replay (no model needed)",
            {"path": "https://example.com/t.json"},
            "does not fetch",
        ),
        ("Load a trace to replay (no model needed)", "/etc/passwd", "must be an uploaded file"),
    ],
)
def test_out_of_range_and_not_a_choice_are_refused_by_name(demo, label, value, words):
    """Values the page cannot send (out of a slider's or a number box's range, not among a dropdown's choices, a
    file given as a server path or an address to fetch) are refused naming the setting, not by Gradio's traceback
    ('Value -3 is less than minimum value 0.' named no field)."""
    seen = 0
    for fn in endpoints(demo):
        for k, block in enumerate(fn.inputs):
            if ui_endpoints.input_label(block) == label:
                values = defaults(fn)
                values[k] = value
                message = refused(demo, fn, values)
                assert label in message and words in message, message
                seen += 1
    assert seen >= 1


def test_a_number_typed_out_of_a_sliders_range_is_refused_by_name(demo):
    """Gradio's page clamps a number typed into a slider's box to its range as the box loses focus (γ 0 ran as γ 1,
    silently), after sending the typed value with `release`: every slider but the replay round (whose range is the
    run's) has a release listener, whose check refuses a value below or above the range naming the slider and the
    range, and takes the slider's own value."""
    sliders = [
        b
        for b in demo.blocks.values()
        if isinstance(b, gr.Slider) and b.elem_id not in ui_endpoints.RANGE_SET_BY_RUN
    ]
    released = {
        fn.inputs[0]._id: fn
        for fn in endpoints(demo)
        if len(fn.inputs) == 1 and any(event == "release" for _, event in fn.targets)
    }
    assert len(sliders) >= 8  # γ, max new tokens, p_min, temperature, top-p, node budget, branching, beams
    for s in sliders:
        fn = released[s._id]
        for value in (s.minimum - 1, s.maximum + 1):
            message = refused(demo, fn, [value])
            assert s.label in message and f"from {s.minimum:g} to {s.maximum:g}" in message, message
        demo.validate_inputs(fn, [s.value])


def test_number_boxes_leave_their_range_to_the_run(demo):
    """A number box with a Gradio minimum refused -3 in Generate's first, unqueued step, which shows no message: the
    click did nothing (or Gradio said "Value -3 is less than minimum value 0.", naming no field). The boxes carry no
    bound of Gradio's; the run refuses out-of-range values with the box's name and range (tests/test_app_messages)."""
    boxes = [b for b in demo.blocks.values() if isinstance(b, gr.Number)]
    assert {b.label for b in boxes} >= {"n / L / W / k (0 = default)", "top-k (0 = off)", "Seed"}
    assert [(b.label, b.minimum, b.maximum) for b in boxes if (b.minimum, b.maximum) != (None, None)] == []
