"""The transformers recorder (engine/recorders/hf.py): assisted generation recorded round by round is
transformers' own greedy output, one round per target forward, and a trace every view renders."""

from __future__ import annotations

import pytest
import torch

from engine.events import trace_from_json, trace_to_json
from engine.recorders import hf
from tests.recorded_prompts import PROMPTS
from tests.tiny import tiny_llama


class Chars:
    """A stand-in tokenizer: one letter per id."""

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(97 + int(i) % 26) for i in ids)


PROMPT = [5, 9, 14, 3, 5, 9, 14, 3, 5, 9, 22, 7, 5, 9]  # repeats, so prompt lookup proposes


def greedy(model, ids, n, **extra):
    x = torch.tensor([ids])
    with torch.no_grad():
        out = model.generate(x, max_new_tokens=n, do_sample=False, pad_token_id=0, **extra)
    return out[0, len(ids) :].tolist()


def recorded(model, ids, n, hook="candidates", **extra):
    timer = hf.ForwardTimer(model)
    with hf.record(model, Chars(), ids, "prompt-lookup", hook=hook, max_new_tokens=n, gamma=3) as rec:
        if hook == "streamer":
            extra["streamer"] = rec.streamer
        greedy(model, ids, n, prompt_lookup_num_tokens=3, **extra)
    timer.close()
    events = trace_from_json(trace_to_json(rec.events))  # the validator's checks
    return events, len(timer.calls)


def kinds(events, kind):
    return [e for e in events if e.kind == kind]


def test_a_recorded_prompt_lookup_run_is_transformers_own_greedy_output():
    model = tiny_llama(seed=3, vocab=32, max_position_embeddings=128)
    want = greedy(model, PROMPT, 40)
    events, forwards = recorded(model, PROMPT, 40)
    done = events[-1]
    assert done.token_ids == want
    assert done.round == forwards  # one round per target forward, counted by a hook on the target
    committed = kinds(events, "committed")
    assert sum(len(c.token_ids) for c in committed) == len(want)
    verified = kinds(events, "verified")
    assert verified, "prompt lookup proposed nothing: the prompt no longer repeats"
    for v, c in zip(verified, [c for c in committed if c.round in {v.round for v in verified}], strict=True):
        assert c.origins.count("accepted") == sum(v.accepted)  # accepted counts add up
    assert events[0].engine["name"] == "transformers" and events[0].engine["hook"] == hf.HOOKED


def test_greedy_acceptance_is_the_targets_argmax_and_p_its_probability():
    model = tiny_llama(seed=3, vocab=32, max_position_embeddings=128)
    events, _ = recorded(model, PROMPT, 30)
    ids, drafted, checked = list(PROMPT), {e.round: e for e in kinds(events, "drafted")}, 0
    for e in events[1:]:
        if e.kind == "verified":
            proposal = drafted[e.round].token_ids
            with torch.no_grad():
                logits = model(torch.tensor([ids + proposal])).logits[0, len(ids) - 1 :]
            probs = torch.softmax(logits.float(), dim=-1)
            for i, t in enumerate(proposal):
                assert e.p[i] == pytest.approx(float(probs[i, t]), abs=1e-4)
                assert e.accept_prob[i] == float(int(probs[i].argmax()) == t)
                checked += 1
        if e.kind == "committed":
            ids += e.token_ids
    assert checked


def test_the_streamer_fallback_says_what_it_could_not_see_and_keeps_the_output():
    model = tiny_llama(seed=3, vocab=32, max_position_embeddings=128)
    want = greedy(model, PROMPT, 30)
    events, forwards = recorded(model, PROMPT, 30, hook="streamer")
    assert events[-1].token_ids == want
    assert events[-1].round == forwards - 1  # the fallback's own forward over the output is not a round
    assert "streamer" in events[0].engine["hook"]
    assert any("rejected drafts" in m for m in events[0].engine["missing"])


def test_a_moved_hook_is_refused_naming_the_method(monkeypatch):
    model = tiny_llama(seed=3, vocab=32)
    for cls in type(model).__mro__:
        if "_get_candidate_generator" in vars(cls):
            monkeypatch.delattr(cls, "_get_candidate_generator")
    with pytest.raises(RuntimeError, match="_get_candidate_generator"):
        with hf.record(model, Chars(), PROMPT):
            pass
    monkeypatch.setattr(hf, "SUPPORTED", ((9, 0), (9, 9)))
    with pytest.raises(RuntimeError, match="outside the recorder's supported range"):
        hf.check_hook(tiny_llama())


def test_an_off_by_one_reading_of_the_kept_tokens_fails_the_identity_check(monkeypatch):
    """The negative control: a recorder that took one token fewer from each round would not reproduce the output."""
    model = tiny_llama(seed=3, vocab=32, max_position_embeddings=128)
    want = greedy(model, PROMPT, 30)
    real = hf._round

    def short(now, valid, probs, verify_s, greedy_):
        r = real(now, valid, probs, verify_s, greedy_)
        if r.kept == 0:
            return r
        return hf.Round(**{**r.__dict__, "kept": r.kept - 1, "next_id": r.proposal[r.kept - 1]})

    monkeypatch.setattr(hf, "_round", short)
    events, _ = recorded(model, PROMPT, 30)
    assert events[-1].token_ids != want


# -- the embedded models -------------------------------------------------------------------------------------

# prompt lookup on all 12; the model drafters, whose rounds cost a draft model's forwards too, on a share each (the
# two cross-vocabulary cases on disjoint halves of it)
CASES = [
    ("embedded", "prompt-lookup", False, PROMPTS),
    ("embedded", "quant:int8", False, PROMPTS[::2]),
    ("embedded", "model:embedded-gemma", False, PROMPTS[:4]),
    ("embedded-gemma", "model:embedded", True, PROMPTS[6:10]),
]
NEW = 12


@pytest.mark.slow
@pytest.mark.parametrize(("target", "draft", "raw", "prompts"), CASES, ids=[c[1] for c in CASES])
def test_recorded_runs_of_the_embedded_models_are_their_greedy_output(target, draft, raw, prompts):
    """Per prompt: the trace's tokens are transformers' unassisted greedy output, rounds = target forwards (a
    forward hook counts them), the committed origins add up, and the trace passes the validator; one trace per
    case renders every view."""
    from ui import app_views as av

    for i, prompt in enumerate(prompts):
        out = hf.run(target, draft, prompt, gamma=4, max_new_tokens=NEW, raw=raw)
        events = trace_from_json(trace_to_json(out["events"]))
        done = events[-1]
        assert done.token_ids == out["reference"], prompt
        assert done.round == out["forwards"], prompt
        origins = [o for e in kinds(events, "committed") for o in e.origins]
        assert len(origins) == len(done.token_ids)
        assert origins.count("accepted") == done.summary["accepted"]
        if i == 0:
            views = av.views(events)
            assert all(v for v in views), [n for n, v in views._asdict().items() if not v]
            assert 'data-engine="transformers"' in views.summary
