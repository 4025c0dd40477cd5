"""Glue between app.py and the renderers: UI choices -> engine arguments, events -> the view outputs
(a `Views` tuple, addressed by name). Pure: no gradio, no torch (it reads only the plain engine modules:
config, events, costmodel, sizing and specs, the drafter registry).
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections import namedtuple
from pathlib import Path

from engine import costmodel, costrule, sizing
from engine.events import MAX_TRACE_BYTES, trace_from_json
from engine.figures import fixed, plural
from engine.specs import FAMILIES, ModelLoadError, parse_draft, parse_model
from engine.specs import drafter_choices as registry_choices
from specviz import beams
from specviz.charts import (
    accepted_length_fig,
    position_acceptance_fig,
    running_acceptance_fig,
    speedup_model_fig,
    throughput_fig,
)
from specviz.crossvocab import render_tokenisations
from specviz.drift import drift_meter, lossy_badge
from specviz.explain import render_explain
from specviz.history import credit, summary_part
from specviz.markup import esc, recorded_by
from specviz.race import live_time, render_race, visible_tokens
from specviz.replay import events_upto, rounds_of, time_at_round
from specviz.runs import main_run, predicted_terms, run_set, spec_summary, view_runs
from specviz.tokens import render_stream
from specviz.tree import render_tree
from specviz.verify import render_verify

from .app_guard import SEED_MAX, drafter_param, ended, whole

EMBEDDED_PAIR = "SmolLM2-135M-Instruct (embedded)"
HUB = "(needs the Hugging Face hub)"
PRESET_DRAFT = "preset draft model"
# label -> (target spec, draft spec of its preset draft model)
PAIRS = {
    EMBEDDED_PAIR: ("embedded", ""),
    f"SmolLM2 135M → 360M {HUB}": (
        "HuggingFaceTB/SmolLM2-360M-Instruct",
        "model:HuggingFaceTB/SmolLM2-135M-Instruct",
    ),
    f"SmolLM2 135M → 1.7B {HUB}": (
        "HuggingFaceTB/SmolLM2-1.7B-Instruct",
        "model:HuggingFaceTB/SmolLM2-135M-Instruct",
    ),
    f"Qwen2.5 0.5B → 1.5B {HUB}": ("Qwen/Qwen2.5-1.5B-Instruct", "model:Qwen/Qwen2.5-0.5B-Instruct"),
    f"Qwen2.5 0.5B → 7B {HUB}": ("Qwen/Qwen2.5-7B-Instruct", "model:Qwen/Qwen2.5-0.5B-Instruct"),
}
GEMMA_PAIR = "SmolLM2-135M → Gemma-3-270M (both embedded)"
# two vocabularies: drafted through text (engine/drafters/crossvocab.py)
PAIRS[GEMMA_PAIR] = ("embedded-gemma", "model:embedded")
PAIR_NOTES = {
    GEMMA_PAIR: (
        "Gemma-3-270M is a base model: give it raw text to continue (a passage, a list to extend), not a "
        "question. SmolLM2 drafts in its own 49k-token vocabulary; its text is re-tokenised into Gemma's 262k "
        "tokens and verified losslessly (both tokenisations show under the output). What to expect on the 2-core "
        "CPU it was measured on (benchmarks/probes/gemma_pair.py, γ = 4, greedy, both on their GGUF blocks): α ≈ 0.85 "
        "per token where the prompt already holds the text (3.2 tokens per Gemma forward), ≈ 0.58 on open "
        "continuations (2.2). But a SmolLM2 draft step costs c ≈ 0.55 of a Gemma step here, so the pair ran at 0.84× "
        "and 0.59× the speed of Gemma alone (the cost model predicted 0.83× and 0.56×): speculation pays only when α clearly "
        'exceeds c. Turn on the race to measure it on this machine. Try: "January, February, March, April, '
        'May, June, July, August, September, October, November, December. January, February, March,"'
    )
}
ADAPTIVE = ("fixed", "heuristic", "confidence (p_min)")
MAX_NEW_TOKENS = 512
READY = "specviz: ready"  # app.py prints it once start-up (warm-up included) is over; tests and benchmarks wait for it
STOP_LABELS = {
    "cancelled": "stopped (Stop pressed)",
    "time_limit": "stopped at the time limit",
    "eos": "done: end of text",
    "max_new_tokens": "done: max new tokens reached",
}

# (label, prompt, drafter, what to expect): prompts the embedded 135M model does well (checked by running them:
# README "Examples"); the expectation is what a run on this machine showed, greedy, γ = 4, 64 tokens
EXAMPLES = [
    (
        "Good drafter · copy a passage",
        "Copy this text exactly:\n\nThe honeybee is one of the most important "
        "pollinators in the world. Bees visit flowers to collect nectar and pollen, which they use as food for the "
        "colony.",
        "ngram",
        "n-gram finds the passage in the prompt: most drafts accepted (α ≈ 0.9), ~3-4 tokens "
        "per target forward",
    ),
    (
        "Good drafter · list it again",
        "Here is a list of fruits: apple, banana, cherry, date, elderberry, fig, grape. "
        "Write the same list again, in the same order.",
        "ngram",
        "n-gram drafts the list from the prompt (α ≈ 0.75); the words around it are the target's own",
    ),
    (
        "Model drafter · int8 copy",
        "Explain in three sentences why the sky is blue.",
        "quant",
        "an int8 copy of the target agrees often (α ≈ 0.65), but each of its draft steps costs time on a CPU",
    ),
    (
        "Sanity check · self-drafting",
        "Write a short poem about the sea at night.",
        "self",
        "the target drafts for itself: every draft accepted (α = 1), yet no faster: drafting costs a full step",
    ),
    (
        "Bad drafter · layer skip",
        "Write a short poem about the sea at night.",
        "layerskip",
        "the first quarter of the layers of a model not trained for early exit: watch nearly every draft fail (α ≈ 0)",
    ),
    (
        "Adaptive · auto",
        "Copy this sentence, then say what it means: A rolling stone gathers no moss.",
        "auto",
        "auto drafts (n-gram) only where it predicts a gain and says why each round, in the tree",
    ),
]


def examples_html() -> str:
    """What each example should show, one line each, beside the example buttons."""
    items = "".join(f"<li><b>{esc(label)}</b>: {esc(expect)}</li>" for label, _, _, expect in EXAMPLES)
    return f'<details class="specviz sv-expect"><summary>What each example shows</summary><ul>{items}</ul></details>'


def drafter_choices() -> list[str]:
    """The drafter dropdown: the registry's families offered in the app (engine/specs.py), then the pair's
    preset draft model."""
    return [*registry_choices(), PRESET_DRAFT]


def draft_model(draft: str) -> str | None:
    """The model a draft spec loads besides the target (model:<id>), None for the others and for a bad spec
    (refused, with its own message, where it is parsed for the run)."""
    try:
        return parse_draft(draft).model if draft else None
    except ModelLoadError:
        return None


def allowed_models(env: str | None = None) -> set[str]:
    """Model ids the UI and API may load: the presets, widened by SPECVIZ_ALLOW_MODELS (comma list)."""
    ids = {"embedded"} | {t for t, _ in PAIRS.values()} | {draft_model(d) for _, d in PAIRS.values() if d}
    extra = os.environ.get("SPECVIZ_ALLOW_MODELS", "") if env is None else env
    return ids | {x.strip() for x in extra.split(",") if x.strip()}


def check_allowed(target, draft, env: str | None = None, heads_env: str | None = None) -> tuple[str, str]:
    """The public server's policy, on the parsed specs (engine/specs.py: stripped, case-normalised): the target
    and any draft model must be on the allowlist (local paths never are), a head file only the shipped one
    or one inside SPECVIZ_HEADS_DIR, and the pair must fit this machine (sizing). Returns the normal forms
    (target, draft) the run uses; ValueError naming what was refused, before anything is read or loaded."""
    try:
        target, spec = parse_model(target), parse_draft(draft)
    except ModelLoadError as e:
        raise ValueError(str(e)) from None
    allowed = allowed_models(env)
    for role, name in [("target", target)] + ([("draft", spec.model)] if spec.model else []):
        if name not in allowed:
            raise ValueError(
                f"{role} model {name[:80]!r} is not allowed here; allowed: {', '.join(sorted(allowed))} "
                f"(a private deployment can add ids with SPECVIZ_ALLOW_MODELS)"
            )
    if spec.path is not None and not heads_file_allowed(spec.path, heads_env):
        raise ValueError(
            f"draft {spec.name}:PATH is not allowed here: the public app loads only the shipped heads "
            f"(draft '{spec.name}'); a deployment can allow a folder with SPECVIZ_HEADS_DIR"
        )
    why = sizing.refusal(target, spec)
    if why:
        raise ValueError(why)
    return target, spec.text


def heads_file_allowed(path: str, heads_env: str | None = None) -> bool:
    """A head file the server may read: a regular file inside the folder SPECVIZ_HEADS_DIR names (none by
    default). Whether a refused path exists is never said; a FIFO or a device is never opened."""
    folder = os.environ.get("SPECVIZ_HEADS_DIR", "") if heads_env is None else heads_env
    if not folder:
        return False
    root, real = os.path.realpath(folder), os.path.realpath(path)
    if os.path.commonpath([root, real]) != root:
        return False
    try:
        return stat.S_ISREG(os.stat(real).st_mode)
    except OSError:
        return False


def pair_choices() -> list[str]:
    """The pairs this machine can hold with their preset draft (the others are hidden: engine/sizing.py)."""
    return [label for label, (target, draft) in PAIRS.items() if sizing.refusal(target, draft) is None]


def pair_note(pair: str) -> str:
    """What to expect from a pair, shown under the pair dropdown ("" for none)."""
    return PAIR_NOTES.get(pair, "")


def model_specs(pair: str, drafter: str, param) -> tuple[str, str]:
    """(target spec, draft spec) for the chosen model pair, drafter and its parameter (n or L, 0 = default)."""
    if pair not in PAIRS:
        raise ValueError(f"unknown model pair {pair!r}")
    target, preset = PAIRS[pair]
    why = sizing.refusal(target, preset)  # a pair this machine cannot hold is refused before any load
    if why:
        raise ValueError(why)
    if drafter == PRESET_DRAFT:
        if not preset:
            raise ValueError(
                f"the embedded pair has no separate draft model: choose one of "
                f"{', '.join(registry_choices())}"
            )
        return target, preset
    family = FAMILIES.get(drafter) if isinstance(drafter, str) else None
    if family is None or not family.choice:
        raise ValueError(
            f"unknown drafter {str(drafter)[:40]!r}: choose one of {', '.join(drafter_choices())}"
        )
    n = drafter_param(param, family)  # -3 or 2.5 refused naming the box and this drafter's range
    if family.param and n:
        return target, f"{drafter}:{n}"
    return target, drafter


# the exact rule, Medusa-2's default ε, δ, a
ACCEPT_CHOICES = ("exact", "typical:0.09,0.3", "typical:0.3,0.55")
# looser one; any "typical:EPS,DELTA" may be typed (GenerationConfig checks it)


def config_kwargs(
    gamma,
    adaptive,
    p_min,
    temperature,
    top_k,
    top_p,
    seed,
    max_new_tokens,
    tree_budget=0,
    tree_branching=2,
    accept="exact",
) -> dict:
    """GenerationConfig keyword arguments from the controls (GenerationConfig itself validates ranges).
    tree_budget > 0 turns on tree speculation: up to that many draft nodes, tree_branching children each, depth at most γ."""
    if adaptive not in ADAPTIVE:
        raise ValueError(f"adaptive must be one of {', '.join(ADAPTIVE)}, got {adaptive!r}")
    max_new_tokens = whole("max_new_tokens", max_new_tokens)
    if max_new_tokens > MAX_NEW_TOKENS:
        raise ValueError(f"max_new_tokens is capped at {MAX_NEW_TOKENS} in the app, got {max_new_tokens}")
    confidence = adaptive.startswith("confidence")
    # GenerationConfig checks it and names its range
    return dict(
        gamma=whole("gamma", gamma),
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_k=whole("top_k", top_k or 0),
        top_p=top_p,
        seed=None if seed is None else whole("seed", seed, 0, SEED_MAX),
        adaptive="fixed" if confidence else adaptive,
        p_min=p_min if confidence else 0.0,
        tree_budget=whole("tree_budget", tree_budget or 0),
        tree_branching=whole("tree_branching", 2 if tree_branching is None else tree_branching),
        accept=accept or "exact",
    )


def summary_html(events) -> str:
    """One line: tokens/s, α, tokens per target forward, rounds, stop reason; when raced, each lane's
    progress until both have finished, then the measured speedup beside the predicted one."""
    run = main_run(events)
    if run is None:
        return '<div class="specviz sv-summary sv-empty">Type a prompt and press Generate, or load a trace.</div>'
    s = spec_summary(events) if run.mode == "speculative" else {}
    tps, alpha = run.tokens_per_s(), s.get("alpha")
    done = run.forwards()
    mal = run.n_tokens() / done if done and run.mode == "speculative" else None
    parts = [
        f"<b>{tps:.1f} tok/s</b>" if tps else "– tok/s",
        f"α = {fixed(alpha, 2)} per token ({costmodel.tested_counts(s.get('accepted', 0), s.get('rejections', 0), s.get('drafted', 0))})"
        if alpha is not None
        else "",
        f"{fixed(mal, 2)} tokens per target forward" if mal else "",
        f"{plural(done, 'round')} · {plural(run.n_tokens(), 'token')}",
    ]
    if run.finished is not None:
        reason = run.finished.stop_reason
        parts.append(
            f'<span class="sv-stop" data-stop="{esc(reason)}">{esc(STOP_LABELS.get(reason, f"stop: {reason}"))}'
            f"</span>"
        )
    ar = view_runs(events).get("ar")
    if s.get("speedup") is not None:
        u = costrule.usable(s)  # the costs a prediction may rest on (Explain and the charts read the same)
        predicted = predicted_terms(u)
        source = (u.get("costs") or {}).get("source")
        said = (
            " (prediction withheld: timing unreliable)"
            if source == "none"
            else ""
            if predicted is None
            else f" (predicted {predicted[0]}× on its host's quiet calibration)"
            if source == "calibration"
            else f" (predicted {predicted[0]}×)"
        )
        parts.append(f'<b class="sv-speedup">{s["speedup"]:.2f}× vs autoregressive</b>{said}')
    elif ar is not None:
        target = run.target_tokens or "?"
        # the race panel's moment: the same counts
        t = live_time(run, ar) if not (run.done and ar.done) else None
        parts.append(
            f'<span class="sv-racing">racing: speculative {visible_tokens(run, t)}/{target} · '
            f"autoregressive {visible_tokens(ar, t)}/{target} tokens</span>"
        )
    parts.append(summary_part(credit(run)))  # drafts taken from the session's earlier runs, "" when none
    if s.get("timing_flags"):
        reasons = "; ".join(s["timing_flags"])
        # one short line; the reasons a click away
        parts.append(
            f'<details class="sv-busy sv-warn"><summary title="{esc(reasons)}">⚠ {esc(costmodel.BUSY)}'
            f"</summary>{esc(reasons)}</details>"
        )
    if run.mode == "speculative":
        parts.append(drift_meter(run, ar, s.get("speedup")))  # "" unless the run used a lossy rule
    who = f"{esc(run.started.target)} · draft {esc(run.started.draft or '—')}" if run.started else ""
    body = " · ".join(p for p in parts if p)
    run_id = esc(run.started.run_id) if run.started else ""
    return (
        f'<div class="specviz sv-summary" data-run="{run_id}" data-rounds="{len(run.rounds)}" '
        f'data-done="{int(run.done)}">'
        f"{recorded_by(run.started)}{lossy_badge(run)}{body}<small>{who}</small></div>"
    )


# the views, by name (a Views tuple in this order is what Gradio receives)
VIEWS = (
    "stream",
    "tree",
    "race",
    "explain",
    "summary",
    "verify",
    "fig_len",
    "fig_pos",
    "fig_run",
    "fig_tput",
    "fig_speedup",
)
Views = namedtuple("Views", VIEWS)


def views(events, r: int | None = None, figures: bool = True, selected: int | None = None) -> Views:
    """Every view (VIEWS, by name) as it stood after round r (None: everything).
    figures=False puts None in the figures' places (they cost ~30 ms each, the HTML ~1 ms).

    Pass the RunSet a streaming run folds its events into (RunSet.add): each call then folds nothing again,
    builds only the rounds not drawn before and the summary once, so a run's updates cost O(R) each."""
    events = run_set(events)
    if r is not None and r >= rounds_of(events):
        r = None
    cut = events_upto(events, r)
    t = None if r is None else time_at_round(events, r)
    figs = (
        (
            accepted_length_fig(cut),
            position_acceptance_fig(cut),
            running_acceptance_fig(cut),
            throughput_fig(cut),
            speedup_model_fig(cut),
        )
        if figures
        else (None,) * 5
    )
    # "" unless the draft has another vocabulary
    tokenisations = render_tokenisations(cut) if events.retokenized else ""
    return Views(
        render_stream(events, upto_round=r) + tokenisations,  # (the whole run: Play reads every round's time)
        render_tree(cut, upto_round=r),
        render_race(events, t=t),
        render_explain(cut),
        summary_html(cut),
        render_verify(cut, selected),
        *figs,
    )


def controls_of(events) -> dict:
    """The controls a loaded trace ran with (pair, drafter, its parameter, γ, sampling, tree): only the ones
    its RunStarted names with values the controls can show."""
    run = main_run(events, "speculative") or main_run(events)
    if run is None or run.started is None:
        return {}
    cfg, out = run.config, {}
    target = run.started.target
    pair = next((label for label, (t, _) in PAIRS.items() if t == target), None)
    if pair is not None:
        out["pair"] = pair
    out.update(drafter_of(run.started.draft))
    for key, ctl, low, high in (
        ("gamma", "gamma", 1, 16),
        ("max_new_tokens", "max_new", 1, MAX_NEW_TOKENS),
        ("top_k", "top_k", 0, 10**6),
        ("tree_budget", "tree_budget", 0, 64),
        ("tree_branching", "tree_branching", 1, 8),
        ("seed", "seed", 0, SEED_MAX),
    ):
        v = cfg.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and low <= v <= high:
            out[ctl] = v
    for key, low, high in (("temperature", 0, 2), ("top_p", 0.05, 1)):
        v = cfg.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and low <= v <= high:
            out[key] = v
    if cfg.get("adaptive") in ("fixed", "heuristic"):
        out["adaptive"] = "confidence (p_min)" if (cfg.get("p_min") or 0) > 0 else cfg["adaptive"]
    p_min = cfg.get("p_min")
    if isinstance(p_min, (int, float)) and not isinstance(p_min, bool) and 0 < p_min <= 0.95:
        out["p_min"] = p_min  # the confidence threshold the run used (the slider's range: 0..0.95)
    if isinstance(cfg.get("accept"), str) and cfg["accept"] in ACCEPT_CHOICES:
        out["accept"] = cfg["accept"]  # a lossy run loads back lossy, badge and all
    prompt = prompt_of(run.started.prompt_text, bool(cfg.get("raw")))
    if prompt:
        out["prompt"] = prompt
    return out


# Gemma
USER_TURNS = (
    re.compile(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", re.S),  # SmolLM2, Qwen (ChatML)
    re.compile(r"<start_of_turn>user\n(.*?)<end_of_turn>", re.S),
)


def prompt_of(prompt_text, raw: bool) -> str:
    """The prompt as it was typed, from a trace's templated prompt_text: the last user turn of a chat template
    this app's models use; the text itself for a raw prompt or an unknown template ("" if not a string)."""
    if not isinstance(prompt_text, str):
        return ""
    if not raw:
        for turn in USER_TURNS:
            found = turn.findall(prompt_text)
            if found:
                return found[-1]
    return prompt_text[:20_000]


def drafter_of(draft: str) -> dict:
    """{drafter, param} the dropdown and the number show for a trace's draft spec ({} when they cannot)."""
    try:
        spec = parse_draft(draft or "")
    except ModelLoadError:
        return {}
    if spec.family.model_arg:
        return {"drafter": PRESET_DRAFT}
    if not spec.family.choice:
        return {}
    param = spec[spec.family.param] if spec.family.param else None
    return {"drafter": spec.name, "param": param if isinstance(param, int) and spec.text != spec.name else 0}


def load_trace(path) -> list:
    """Events of a trace file; ValueError for anything too big, not a valid trace, or without rounds."""
    size = Path(path).stat().st_size
    if size > MAX_TRACE_BYTES:  # refused unread
        raise ValueError(
            f"trace file is {size / 2**20:.1f} MB; the limit is {MAX_TRACE_BYTES / 2**20:.0f} MB"
        )
    events = trace_from_json(Path(path).read_bytes())  # validates format, fields, types and numbers
    # a batched run: the single-run views replay its first row
    if any(getattr(e, "row", 0) != 0 for e in events):
        events = [e for e in events if getattr(e, "row", 0) == 0]
    if not rounds_of(events):
        raise ValueError("trace holds no rounds to replay")
    return events


def api_result(events, cut_reason: str = "cancelled") -> tuple[str, str]:
    """(final text, summary JSON) for the named API endpoint; a run cut before the engine finished it
    (cut_reason: "time_limit", "cancelled") still returns its committed text and says why it stopped."""
    if any(getattr(e, "kind", None) in ("beam_step", "beam_result") for e in events or []):
        return beams.api_result(events, cut_reason)
    runs = view_runs(ended(events, cut_reason))
    spec = runs.get("speculative")
    done = spec.finished if spec is not None else None
    summary = spec_summary(ended(events, cut_reason))
    if done is not None:
        summary["stop_reason"] = done.stop_reason
    return (done.text if done is not None else ""), json.dumps(summary)
