"""/generate (api_generate; a raw client's missing arguments filled with its defaults) and every endpoint's
inputs checked by kind before Gradio reads them (app.Page.validate_inputs calls both)."""

from __future__ import annotations

import inspect

import gradio as gr

import specviz
import ui.server  # noqa: F401  (first: it imports ZeroGPU's `spaces`, when present, before torch)
from engine import GenerationConfig, load_model
from engine.config import MAX_BATCH
from engine.runtime.models import EMBEDDED
from ui import app_guard as guard
from ui import app_views as av
from ui.outputs import api_error, failure, prepare
from ui.run import stream_events
from ui.server import MAX_PROMPT_TOKENS, MAX_RUN_S, upload_folder


def api_generate(
    prompt: str,
    draft: str = "ngram",
    gamma: int = 4,
    max_new_tokens: int = 48,
    temperature: float = 0.0,
    seed: int = 0,
    target: str = EMBEDDED,
    num_beams: int = 1,
) -> tuple[str, str]:
    """Stream (text so far, summary JSON) once per round; the last pair is the finished run, or the
    text committed before the time limit with stop_reason "time_limit".

    num_beams 2..8 runs speculative beam search (greedy; draft ngram[:N] or self): the text so far is the
    best-scoring running beam, the summary adds every finished hypothesis with its score.

    The return hint names what each yield carries: gr.api derives the endpoint's outputs from it.

    A generator, so a client that cancels or disconnects closes the run and frees its slot.
    """
    try:
        args = guard.api_arguments(
            prompt,
            draft,
            gamma,
            max_new_tokens,
            temperature,
            seed,
            target,
            av.MAX_NEW_TOKENS,
            MAX_PROMPT_TOKENS,
            num_beams,
        )
        cfg = GenerationConfig(
            **av.config_kwargs(
                args["gamma"], "fixed", 0.0, args["temperature"], 0, 1.0, args["seed"], args["max_new_tokens"]
            ),
            time_limit_s=MAX_RUN_S,
            num_beams=args["num_beams"],
        )
        target, draft = prepare(target, draft, prompt, cfg.raw, cfg.num_beams)
    except ValueError as e:
        raise api_error(str(e)) from None
    events, special = [], frozenset(getattr(load_model(target).tokenizer, "all_special_ids", None) or ())
    try:
        for _, event in stream_events(target, draft, cfg, prompt, False):
            if event.kind == "prefilling":  # nothing to show yet; a client that leaves stops the run here
                yield "", ""
                continue
            events.append(event)
            if event.kind == "round_timed":
                yield (
                    (
                        specviz.running_best_text(events)
                        if cfg.num_beams > 1
                        else text_so_far(events, special)
                    ),
                    "",
                )
    except ValueError as e:
        raise api_error(str(e)) from None
    except RuntimeError as e:
        raise api_error(failure(e)) from None
    yield av.api_result(events, cut_reason="time_limit")


def fill_api_defaults(inputs: list) -> None:
    """/generate's arguments as a raw client sent them, completed in place with api_generate's defaults (every
    argument after the prompt is optional); no prompt at all is refused by name."""
    if not inputs:
        raise api_error(
            "prompt is required: /generate takes (prompt, draft, gamma, max_new_tokens, temperature, "
            "seed, target, num_beams), every argument after the prompt optional"
        )
    params = list(inspect.signature(api_generate).parameters.values())
    inputs.extend(p.default for p in params[len(inputs) :])


# others (State, Api): "any"
INPUT_KIND = (
    (gr.Slider, "number"),
    (gr.Number, "number"),
    (gr.Checkbox, "bool"),
    (gr.Textbox, "text"),
    (gr.Dropdown, "choice"),
    (gr.File, "file"),
    (gr.Dataset, "index"),
)
# characters of any text input (the batch's prompts)
MAX_TEXT = MAX_BATCH * MAX_PROMPT_TOKENS * guard.CHARS_PER_TOKEN


def input_label(block) -> str:
    """How a refusal names an input: its label, else its element id, else its kind."""
    return getattr(block, "label", None) or getattr(block, "elem_id", None) or type(block).__name__.lower()


RANGE_SET_BY_RUN = ("round",)  # sliders whose maximum each run sets (the replay round: the handler clamps it)


def input_spec(block) -> dict:
    """What the page itself may send for `block` (app_guard.check_input's spec): a number's range, a dropdown's
    choices, a gallery's size, whether None is one of its values."""
    if isinstance(block, (gr.Slider, gr.Number)):
        high = None if block.elem_id in RANGE_SET_BY_RUN else block.maximum
        return {"low": block.minimum, "high": high, "null": isinstance(block, gr.Number)}
    if isinstance(block, gr.Dropdown):
        choices = [c[1] if isinstance(c, (tuple, list)) else c for c in block.choices or []]
        return {"choices": choices, "custom": bool(block.allow_custom_value), "null": block.value is None}
    if isinstance(block, gr.Dataset):
        return {"count": len(block.samples or [])}
    if isinstance(block, gr.Textbox):
        return {"null": block.value is None}
    if isinstance(block, gr.File):
        return {"folder": upload_folder()}  # a file input names a file the server received, nothing else
    return {}


def check_run_ranges(block_fn, inputs: list, state) -> None:
    """The sliders whose maximum a run sets (RANGE_SET_BY_RUN), against the session's own maximum (`state`:
    Gradio's SessionState, holding the session's copy of each component): a value past it is refused naming the
    setting, never Gradio's bare "Value 1e9 is greater than maximum value 9." with a traceback."""
    for block, value in zip(block_fn.inputs, inputs):
        if not (isinstance(block, gr.Slider) and block.elem_id in RANGE_SET_BY_RUN):
            continue
        own = state[block._id] if state is not None and block._id in state else block
        high = getattr(own, "maximum", None)
        if isinstance(value, (int, float)) and high is not None and not 0 <= value <= high:
            raise api_error(
                f"{input_label(block)} must be from 0 to {high:g} (the last round of the run shown), got "
                f"{guard.shown(value)}"
            )


def check_endpoint_inputs(block_fn, inputs: list) -> None:
    """Every endpoint's inputs as a client sent them, checked by kind before Gradio reads them (app_guard.check_inputs):
    a missing, extra, null, non-finite, out-of-range, not-a-choice, invalid-text or wrong-type argument is refused
    with its setting's name and at most a short prefix of the value, never `error: null`."""
    wanted = [
        (
            next((kind for cls, kind in INPUT_KIND if isinstance(block, cls)), "any"),
            input_label(block),
            input_spec(block),
        )
        for block in block_fn.inputs
    ]
    try:
        guard.check_inputs(block_fn.api_name or block_fn.name, wanted, inputs, MAX_TEXT)
    except ValueError as e:
        raise api_error(str(e)) from None


def text_so_far(events, special: frozenset) -> str:
    """The committed text as the final reply will read it: special tokens (<|im_end|>) are left out, as the
    engine's decode(skip_special_tokens=True) leaves them out of the finished text."""
    return "".join(
        t for e in events if e.kind == "committed" for i, t in zip(e.token_ids, e.tokens) if i not in special
    )
