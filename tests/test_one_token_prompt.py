"""A one-token prompt has no prefill: the first forward of a round meets an empty cache (issue 12, item 9)."""

import pytest

from engine import Engine, GenerationConfig, load_model

DRAFTS = ["self", "ngram", "layerskip:1", "quant", "auto", "model:other"]


@pytest.mark.parametrize("spec", DRAFTS)
def test_one_token_prompt_matches_ar_with_every_drafter(tiny_dirs, spec):
    """With no prefill, every drafter (layer-skip sharing half the cache too) runs and equals greedy AR."""
    spec = spec.replace("model:other", f"model:{tiny_dirs['other']}")
    engine = Engine(load_model(tiny_dirs["target"]), spec, measure_step=False)
    cfg = GenerationConfig(gamma=3, max_new_tokens=12)
    for ids in ([42], [1]):
        events = list(engine.generate(None, cfg, prompt_ids=ids))
        assert (
            events[-1].token_ids == list(engine.generate(None, cfg, mode="ar", prompt_ids=ids))[-1].token_ids
        )
        assert events[0].prompt_ids == ids and len(events[-1].token_ids) >= 1


def test_one_token_raw_text_prompt_runs_layer_skip(tiny_dirs):
    """The same through text: a raw prompt that encodes to one token drafts with layer skip and equals AR."""
    engine = Engine(load_model(tiny_dirs["target"]), "layerskip:1", measure_step=False)
    cfg = GenerationConfig(gamma=4, max_new_tokens=10, raw=True)
    assert len(engine.encode("Hello", True)) == 1
    events = list(engine.generate("Hello", cfg))
    assert any(e.kind == "drafted" for e in events)
    assert events[-1].token_ids == list(engine.generate("Hello", cfg, mode="ar"))[-1].token_ids
