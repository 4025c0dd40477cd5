"""transformers' assisted generation, recorded round by round into a specviz trace.

`_assisted_decoding` asks a candidate generator for each round's proposal (`get_candidates`), runs the target once
over it, keeps the matching prefix plus one token, and tells the generator how it went
(`update_candidate_strategy(input_ids, scores, num_matches)`). The recorder wraps the generator transformers builds
(`GenerationMixin._get_candidate_generator`, private: the supported range is pinned below and a missing or moved
method is an error naming it) and reads, per round: the proposal, the target's processed scores (p of every
proposed token and of the token it added), the kept count, and the time each side took. Without the hook
(`hook="streamer"`) only a streamer's counts are seen (each `put` is one round's kept drafts and the target's
token): the trace says so in run_started.engine.missing, and p comes from one forward over the output after the
run.

    from engine.recorders.hf import record
    with record(model, tokenizer, prompt_ids) as rec:      # prompt_ids: the ids you pass to generate
        out = model.generate(input_ids, prompt_lookup_num_tokens=4, max_new_tokens=64, do_sample=False)
    write_trace("run.json", rec.events)
"""

from __future__ import annotations

import contextlib
import inspect
import time

import torch

from ..config import GenerationConfig
from ..events import write_trace
from ..runtime.models import LoadedModel, load_model, materialize
from ..specs import ModelLoadError, parse_draft
from .trace import Recording, Round, with_plain

SUPPORTED = (
    (4, 46),
    (5, 99),
)  # transformers versions whose _assisted_decoding this recorder was read against
HOOKED = "GenerationMixin._get_candidate_generator"
HOOK_PARAMS = ("generation_config", "input_ids", "logits_processor", "model_kwargs")
TOPK = 5  # alternatives recorded per verified position


def _version() -> tuple[str, tuple[int, int]]:
    import transformers

    text = transformers.__version__
    parts = (text.split(".") + ["0"])[:2]
    return text, tuple(int("".join(c for c in p if c.isdigit()) or 0) for p in parts)


def check_hook(model) -> None:
    """Refuse (RuntimeError naming the method) a transformers whose private hook this recorder cannot trust."""
    text, version = _version()
    if not SUPPORTED[0] <= version <= SUPPORTED[1]:
        raise RuntimeError(
            f"transformers {text} is outside the recorder's supported range "
            f"{'.'.join(map(str, SUPPORTED[0]))} .. {'.'.join(map(str, SUPPORTED[1]))}.x (it hooks {HOOKED}); "
            "record with hook='streamer' for counts only"
        )
    method = getattr(type(model), "_get_candidate_generator", None)
    params = set(inspect.signature(method).parameters) if method is not None else set()
    if not set(HOOK_PARAMS) <= params:
        raise RuntimeError(
            f"transformers {text}: {HOOKED} is gone or its parameters moved (expected {', '.join(HOOK_PARAMS)}); "
            "record with hook='streamer' for counts only"
        )


def _method(generation_config, assistant, other_tokenizer: bool = False) -> str:
    if getattr(generation_config, "prompt_lookup_num_tokens", None) is not None:
        return f"assisted generation: prompt lookup ({generation_config.prompt_lookup_num_tokens} tokens)"
    if getattr(generation_config, "assistant_early_exit", None) is not None:
        return f"assisted generation: early exit at layer {generation_config.assistant_early_exit}"
    if assistant is not None and other_tokenizer:
        return "universal assisted generation: an assistant model with another tokenizer"
    if assistant is not None:
        return "assisted generation: assistant model"
    return "assisted generation"


class _Observed:
    """One round in flight: what get_candidates returned and when."""

    def __init__(self, start: int, proposal: list, q_logits, draft_s: float, t_drafted: float):
        self.start, self.proposal, self.q_logits = start, proposal, q_logits
        self.draft_s, self.t_drafted = draft_s, t_drafted


class _RecordingGenerator:
    """The generator transformers built, with every call passed through and observed."""

    def __init__(self, inner, recorder: "Recorder", greedy: bool):
        self._inner, self._rec, self._greedy = inner, recorder, greedy
        self._now: _Observed | None = None

    def __getattr__(self, name):  # requires_model_outputs, model_kwargs_overrides, ...
        return getattr(self._inner, name)

    def get_candidates(self, input_ids, **kwargs):
        t0 = time.perf_counter()
        candidates, logits = self._inner.get_candidates(input_ids, **kwargs)
        t1 = time.perf_counter()
        start = input_ids.shape[1]
        proposal = candidates[0, start:].tolist()
        self._now = _Observed(start, proposal, None if logits is None else logits[0].float(), t1 - t0, t1)
        return candidates, logits

    def update_candidate_strategy(self, input_ids, scores, num_matches):
        t2 = time.perf_counter()
        now, self._now = self._now, None
        if now is not None:
            valid = input_ids[0, now.start :].tolist()
            self._rec.observe(now, valid, scores[0].float(), t2 - now.t_drafted, self._greedy)
        return self._inner.update_candidate_strategy(input_ids, scores, num_matches)


def _round(now: _Observed, valid: list, probs: torch.Tensor, verify_s: float, greedy: bool) -> Round:
    """A round from what the target kept: valid = kept drafts + the target's token. transformers cuts the kept run
    at an end-of-text or the length limit; a cut inside the proposal leaves its last kept token a draft the
    target agreed with: the proposal is then recorded up to the cut (the target's token ends it, as a bonus)."""
    k = len(valid) - 1
    proposal = now.proposal
    if k < len(proposal) and valid[k] == proposal[k]:
        proposal = proposal[:k]
    g = len(proposal)
    p = [float(probs[i, t]) for i, t in enumerate(proposal)]
    best = probs[: g + 1].argmax(dim=-1).tolist()
    q = None
    if now.q_logits is not None and g:
        q_probs = torch.softmax(now.q_logits[:g], dim=-1)
        q = [float(q_probs[i, t]) for i, t in enumerate(proposal)]
    if greedy:
        accept = [1.0 if best[i] == t else 0.0 for i, t in enumerate(proposal)]
    else:  # the standard rule's min(1, p/q); a one-hot proposal: p itself
        accept = [min(1.0, pi / qi) if qi else 0.0 for pi, qi in zip(p, q or [1.0] * g)]
    top = torch.topk(probs[: g + 1], TOPK, dim=-1)
    rows = [list(zip(i.tolist(), v.tolist())) for i, v in zip(top.indices, top.values)]
    return Round(
        proposal=proposal,
        kept=k,
        next_id=valid[k],
        p=p,
        next_p=float(probs[k, valid[k]]),
        accept_prob=accept,
        q=q,
        draft_s=now.draft_s,
        verify_s=verify_s,
        target_topk=rows,
    )


class Recorder:
    """The recording of one `generate` call: `events` once it has finished (see `record`)."""

    def __init__(
        self,
        model,
        tokenizer,
        prompt_ids: list,
        draft: str,
        cfg: GenerationConfig,
        hook: str,
        target: str = "",
    ):
        self.model, self.tokenizer, self.hook, self.target = materialize(model), tokenizer, hook, target
        self.prompt_ids, self.draft, self.cfg = [int(i) for i in prompt_ids], draft, cfg
        self.recording: Recording | None = None
        self.events: list = []
        self.wall_s: float | None = None  # the recorded block's time (the generate call)
        self.streamer, self.forwards = None, None  # the fallback's streamer and its timer on the target
        self.method = "assisted generation"

    def start(self, generation_config, assistant, other_tokenizer: bool = False) -> None:
        text, _ = _version()
        self.method = _method(generation_config, assistant, other_tokenizer)
        if generation_config is not None:  # γ and the length limit as generate() was given them
            limit = getattr(generation_config, "max_length", None)
            source = assistant.generation_config if assistant is not None else generation_config
            gamma = getattr(generation_config, "prompt_lookup_num_tokens", None) or getattr(
                source, "num_assistant_tokens", None
            )
            self.cfg = GenerationConfig(
                gamma=min(max(int(gamma or self.cfg.gamma), 1), 16),
                max_new_tokens=max(limit - len(self.prompt_ids), 1) if limit else self.cfg.max_new_tokens,
                record_topk=TOPK,
            )
        missing = ["the prompt's prefill is timed with round 1 (transformers verifies round 1 with it)"]
        if self.hook == "streamer":
            missing = [
                "rejected drafts (a streamer sees only the kept tokens; a round that kept none shows as a plain step)",
                "the drafter's q",
                "drafting time apart from bookkeeping (a round's time less its target forward, both measured)",
                "p: one forward of the target over the output, after the run",
            ]
        self.recording = Recording(
            engine={
                "name": "transformers",
                "version": text,
                "method": self.method,
                "hook": HOOKED if self.hook == "candidates" else "a streamer's put (counts only)",
                "missing": missing,
            },
            target=self.target or getattr(self.model, "name_or_path", "") or type(self.model).__name__,
            draft=self.draft or self.method,
            tokenizer=self.tokenizer,
            prompt_ids=self.prompt_ids,
            cfg=self.cfg,
            device=str(self.model.device),
            dtype=str(self.model.dtype).replace("torch.", ""),
            threads=torch.get_num_threads() if self.model.device.type == "cpu" else 0,
        )

    def observe(
        self, now: _Observed, valid: list, scores: torch.Tensor, verify_s: float, greedy: bool
    ) -> None:
        probs = torch.softmax(scores, dim=-1)
        self.recording.add(_round(now, valid, probs, verify_s, greedy))

    def finish(self, target_step_s: float | None = None) -> list:
        """The run's finished event (its stop reason read from the output), once the recorded call returned."""
        from ..runtime.models import eos_ids

        rec = self.recording
        if rec is None:
            raise RuntimeError(
                "no assisted generate() ran inside record(...): pass an assistant_model, prompt_lookup_num_tokens "
                "or assistant_early_exit to generate (hook='candidates'), or streamer=rec.streamer (hook='streamer')"
            )
        new = rec.new_ids
        if new and new[-1] in eos_ids(self.model, self.tokenizer):
            reason = "eos"
        else:  # transformers' own stopping criteria (a stop string, a custom one) end a run short of the limit
            reason = "max_new_tokens" if len(new) >= self.cfg.max_new_tokens else "stopping_criteria"
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        rec.finish(reason, text, target_step_s, self.wall_s)
        self.events = rec.events
        return self.events


class _CountingStreamer:
    """The fallback's view: one put per round after the prompt's."""

    def __init__(self):
        self.puts: list[list[int]] = []
        self.times: list[float] = []  # when each put came: a round's time is the gap since the one before

    def put(self, value):
        self.puts.append([int(x) for x in value.reshape(-1).tolist()])
        self.times.append(time.perf_counter())

    def end(self):
        pass


@contextlib.contextmanager
def record(
    model,
    tokenizer,
    prompt_ids: list,
    draft: str = "",
    hook: str = "candidates",
    max_new_tokens: int = 64,
    gamma: int = 4,
    target: str = "",
    target_step_s: float | None = None,
):
    """Record the assisted `generate` calls made inside the block (one per block) on `model`:

        with record(model, tokenizer, ids, draft="prompt-lookup") as rec:
            model.generate(torch.tensor([ids]), prompt_lookup_num_tokens=4, max_new_tokens=64, do_sample=False)
        rec.events  # specviz's events: write_trace(path, rec.events)

    hook="candidates" wraps the candidate generator (every proposal, p and q, times); hook="streamer" needs no
    private method: pass `streamer=rec.streamer` to generate and get the kept counts only."""
    if hook not in ("candidates", "streamer"):
        raise ValueError(f"hook must be 'candidates' or 'streamer', got {hook!r}")
    cfg = GenerationConfig(gamma=min(max(int(gamma), 1), 16), max_new_tokens=max_new_tokens, record_topk=TOPK)
    rec = Recorder(model, tokenizer, prompt_ids, draft, cfg, hook, target)
    rec.streamer = _CountingStreamer()
    rec.forwards = ForwardTimer(model) if hook == "streamer" else None  # the fallback's verify times
    if hook == "candidates":
        check_hook(model)
        original = type(model)._get_candidate_generator

        def hooked(*args, **kwargs):
            generator = original(model, *args, **kwargs)
            config = kwargs.get("generation_config", args[0] if args else None)
            rec.start(config, kwargs.get("assistant_model"), kwargs.get("assistant_tokenizer") is not None)
            return _RecordingGenerator(generator, rec, not getattr(config, "do_sample", False))

        model._get_candidate_generator = hooked
    t0 = time.perf_counter()
    try:
        yield rec
        rec.wall_s = time.perf_counter() - t0
    finally:
        if hook == "candidates":
            del model._get_candidate_generator
        else:
            rec.forwards.close()
    if hook == "streamer":
        _from_counts(rec)
    rec.finish(target_step_s)


def _from_counts(rec: Recorder) -> None:
    """The streamer fallback: each put after the prompt's is one round, its kept drafts and the target's token;
    p from one forward over prompt + output."""
    rec.start(None, None)
    rounds = rec.streamer.puts[1:]
    ids = rec.prompt_ids + [t for r in rounds for t in r]
    with torch.no_grad():
        logits = rec.model(torch.tensor([ids], device=rec.model.device)).logits[0].float()
    probs = torch.softmax(logits, dim=-1)
    at = len(rec.prompt_ids)
    times, forwards = rec.streamer.times, [t for _, t in rec.forwards.calls]
    for i, r in enumerate(rounds):
        total = times[i + 1] - times[i]
        rows = probs[at - 1 : at - 1 + len(r)]
        p = [float(rows[j, t]) for j, t in enumerate(r)]
        rec.recording.add(
            Round(
                proposal=r[:-1],
                kept=len(r) - 1,
                next_id=r[-1],
                p=p[:-1],
                next_p=p[-1],
                accept_prob=[1.0] * (len(r) - 1),
                draft_s=max(total - forwards[i], 0.0),
                verify_s=forwards[i],
                total_s=total,
            )
        )
        at += len(r)


# -- on specviz's models: the command and the tests ------------------------------------------------------------


def hf_equivalent(spec: str, gamma: int, target: LoadedModel) -> tuple[dict, dict] | None:
    """generate() kwargs (and a JSON-safe copy) matching our drafter spec at γ; None when none exists. The spec
    is read by the engine's one parser (engine/specs.py), defaults included (`ngram` is ngram:3; transformers'
    own default is 2)."""
    try:
        parsed = parse_draft(spec)
    except ModelLoadError:
        return None
    # a fixed γ: no schedule, no confidence cut-off
    fixed = {
        "num_assistant_tokens": gamma,
        "num_assistant_tokens_schedule": "constant",
        "assistant_confidence_threshold": 0.0,
    }
    if parsed.name in ("self", "model"):
        draft = (
            target
            if parsed.name == "self"
            else load_model(parsed.model, str(target.device), str(target.dtype).replace("torch.", ""))
        )
        return {"assistant_model": materialize(draft.model), **fixed}, {
            "assistant_model": draft.name,
            **fixed,
        }
    if parsed.name == "ngram":
        kw = {"prompt_lookup_num_tokens": gamma, "max_matching_ngram_size": parsed["N"]}
        return kw, dict(kw)
    if parsed.name == "layerskip":
        layers = parsed["L"] or max(1, target.model.config.get_text_config().num_hidden_layers // 4)
        # drafters/model.py's default L: a quarter of the layers
        kw = {"assistant_early_exit": layers, **fixed}
        return kw, dict(kw)
    return None


@contextlib.contextmanager
def fixed_assistant(models: list, kwargs: dict):
    """transformers 5.23 reads γ, its schedule and the confidence threshold from the *assistant's*
    generation_config, ignoring the generate() kwargs: set them there for one call, then restore."""
    keys = [
        k
        for k in ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")
        if k in kwargs
    ]
    saved = [(m.generation_config, k, getattr(m.generation_config, k, None)) for m in models for k in keys]
    try:
        for gc, k, _ in saved:
            setattr(gc, k, kwargs[k])
        yield
    finally:
        for gc, k, old in saved:
            setattr(gc, k, old)


def assisted_kwargs(target, draft: str, gamma: int) -> dict:
    """generate()'s arguments for `draft`: a specviz drafter spec with a transformers counterpart (hf_equivalent),
    prompt-lookup (transformers' own default, max_matching_ngram_size 2) or quant[:int8] (the target's int8 copy
    as assistant model); an assistant model with another tokenizer makes it universal assisted generation."""
    from ..drafters.model import quantized_model

    fixed = {
        "num_assistant_tokens": gamma,
        "num_assistant_tokens_schedule": "constant",
        "assistant_confidence_threshold": 0.0,
    }
    name, _, arg = draft.partition(":")
    if name == "prompt-lookup":
        return {"prompt_lookup_num_tokens": gamma}
    if name == "quant":
        return {"assistant_model": quantized_model(target, arg or "int8"), **fixed}
    found = hf_equivalent(draft, gamma, target)
    if found is None:
        raise ValueError(
            f"draft {draft!r} has no transformers counterpart: use prompt-lookup, ngram[:N], self, layerskip:L, "
            "model:SPEC or quant[:int8]"
        )
    kwargs = found[0]
    other = kwargs.get("assistant_model")
    if other is not None and draft.startswith("model:"):
        tok = load_model(
            draft.partition(":")[2], str(target.device), str(target.dtype).replace("torch.", "")
        ).tokenizer
        if tok.get_vocab() != target.tokenizer.get_vocab():
            kwargs = {**kwargs, "tokenizer": target.tokenizer, "assistant_tokenizer": tok}
    return kwargs


class ForwardTimer:
    """Hooks on the target: how many forwards it ran, with how many rows and how long each took."""

    def __init__(self, model):
        self.calls: list[tuple[int, float]] = []
        self._t = 0.0
        self._handles = [
            model.register_forward_pre_hook(self._before, with_kwargs=True),
            model.register_forward_hook(self._after, with_kwargs=True),
        ]

    def _before(self, module, args, kwargs):
        self._t = time.perf_counter()

    def _after(self, module, args, kwargs, output):
        ids = kwargs.get("input_ids", args[0] if args else None)
        self.calls.append((int(ids.shape[1]) if ids is not None else 0, time.perf_counter() - self._t))

    def close(self) -> None:
        for h in self._handles:
            h.remove()

    def step_s(self) -> float | None:
        """The median one-row forward (a plain decoding step), None if there was none."""
        ones = sorted(t for n, t in self.calls if n == 1)
        return ones[len(ones) // 2] if ones else None


def plain_kwargs(target, max_new_tokens: int) -> dict:
    """generate()'s greedy arguments as our engine decodes: the model's own sampling defaults switched off, every
    end-of-text id of ours (engine/runtime/models.py eos_ids) ending the run."""
    eos = sorted(target.eos_ids)
    pad = target.tokenizer.pad_token_id
    return dict(
        max_new_tokens=max_new_tokens,
        do_sample=False,
        num_beams=1,
        temperature=None,
        top_p=None,
        top_k=None,
        repetition_penalty=1.0,
        eos_token_id=eos,
        pad_token_id=pad if pad is not None else eos[0],
    )


def run(
    target_spec: str,
    draft: str,
    prompt: str,
    gamma: int = 4,
    max_new_tokens: int = 64,
    raw: bool = False,
    hook: str = "candidates",
    reference: bool = True,
) -> dict:
    """One prompt through transformers' assisted generation, recorded, and (reference=True) through its plain
    greedy decoding: {"events", "reference" (plain greedy's new ids, or None), "forwards" (the target's forwards in
    the assisted run, counted by a forward hook), "plain_s", "assisted_s"}."""
    from ..runtime.models import prompt_ids

    target = load_model(target_spec)
    model, tok = materialize(target.model), target.tokenizer  # transformers runs on its fp32 weights
    ids = prompt_ids(tok, prompt, raw)
    x = torch.tensor([ids], device=target.device)
    plain = ForwardTimer(model)
    t0 = time.perf_counter()
    with torch.no_grad():
        ref = (
            model.generate(x, **plain_kwargs(target, max_new_tokens))[0, len(ids) :].tolist()
            if reference
            else None
        )
    plain_s = time.perf_counter() - t0
    plain.close()
    kwargs = assisted_kwargs(target, draft, gamma)
    timer = ForwardTimer(model)
    with record(model, tok, ids, draft, hook, max_new_tokens, gamma, target_spec, plain.step_s()) as rec:
        extra = {"streamer": rec.streamer} if hook == "streamer" else {}
        t0 = time.perf_counter()
        assistants = [model] + ([kwargs["assistant_model"]] if "assistant_model" in kwargs else [])
        with torch.no_grad(), fixed_assistant(assistants, kwargs):
            model.generate(x, **plain_kwargs(target, max_new_tokens), **kwargs, **extra)
        assisted_s = time.perf_counter() - t0
    timer.close()
    forwards = len(timer.calls) - (1 if hook == "streamer" else 0)  # the fallback's own forward after the run
    events = rec.events
    if ref is not None:  # kept in the trace: the page shows this measured comparison for the imported run
        events = with_plain(events, plain_s=plain_s, assisted_s=assisted_s, plain_ids=ref)
    return {
        "events": events,
        "reference": ref,
        "forwards": forwards,
        "plain_s": plain_s,
        "assisted_s": assisted_s,
    }


def record_cli(args) -> int:
    """`python -m engine record hf ...`: record, check against plain greedy, write the trace, say what it saw."""
    out = run(args.target, args.draft, args.prompt, args.gamma, args.max_new_tokens, args.raw)
    events = out["events"]
    write_trace(args.trace, events)
    done = events[-1]
    s = done.summary
    same = done.token_ids == out["reference"]
    print(
        f"{events[0].engine['method']}: {len(done.token_ids)} tokens in {s['rounds']} rounds "
        f"({out['forwards']} target forwards), α {s['accepted']}/{s['accepted'] + s['rejections']}, "
        f"{'identical to' if same else 'DIFFERENT from'} plain greedy; "
        f"{out['assisted_s']:.2f} s assisted, {out['plain_s']:.2f} s plain; trace: {args.trace}"
    )
    return 0 if same else 1
