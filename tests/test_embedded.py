"""Integration on the real embedded SmolLM2-135M-Instruct: lossless greedy, the CLI contract."""

import json
import subprocess
import sys

import pytest

from engine import Engine, GenerationConfig
from tests.conftest import ROOT

PROMPTS = [
    "Write a short poem about the sea.",
    "Repeat this sentence exactly: The quick brown fox jumps over the lazy dog.",
    "What is 12 times 7? Explain briefly.",
]


@pytest.fixture(scope="module")
def ar_outputs(embedded):
    engine = Engine(embedded, "self", measure_step=False)
    return {
        p: list(engine.generate(p, GenerationConfig(max_new_tokens=40), mode="ar"))[-1].token_ids
        for p in PROMPTS
    }


@pytest.mark.parametrize("gamma", [1, 3, 8])
def test_greedy_speculation_matches_ar_on_embedded(embedded, ar_outputs, gamma):
    """The promise on the real model: token-identical to the target's own greedy decoding."""
    engine = Engine(embedded, "self", measure_step=False)
    for prompt in PROMPTS:
        run = list(engine.generate(prompt, GenerationConfig(gamma=gamma, max_new_tokens=40)))
        assert run[-1].token_ids == ar_outputs[prompt]
        s = run[-1].summary  # the self draft is the upper bound: every tested draft token is accepted
        assert s["alpha"] == 1.0 and s["rejections"] == 0


def test_raw_prompt_skips_chat_template(embedded):
    """--raw sends text as-is; by default the chat template wraps the user message."""
    engine = Engine(embedded, "self")
    templated, raw = engine.encode("hello", raw=False), engine.encode("hello", raw=True)
    assert len(templated) > len(raw) and "<|im_start|>" in embedded.tokenizer.decode(templated)
    assert embedded.tokenizer.decode(raw) == "hello"


def cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "engine", "generate", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_cli_json_contract(tmp_path):
    """`--json` ends stdout with one object carrying the documented keys; --trace writes a readable trace."""
    trace = tmp_path / "run.json"
    proc = cli(
        "--prompt",
        "Name three colours.",
        "--gamma",
        "3",
        "--max-new-tokens",
        "16",
        "--compare-ar",
        "--json",
        "--trace",
        str(trace),
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for key in [
        "text",
        "token_ids",
        "rounds",
        "drafted",
        "accepted",
        "acceptance_rate",
        "mean_accepted_length",
        "wall_s",
        "tokens_per_s",
        "ar_token_ids",
        "ar_wall_s",
        "ar_tokens_per_s",
        "speedup",
        "identical_to_ar",
    ]:
        assert key in out, key
    assert out["identical_to_ar"] is True and out["token_ids"] == out["ar_token_ids"]
    from engine import read_trace

    events = read_trace(trace)
    assert [e.kind for e in events].count("finished") == 2  # speculative run, then the AR baseline


@pytest.mark.parametrize(
    "args,message",
    [
        (["--prompt", "hi", "--gamma", "0"], "gamma must be between 1 and 16"),
        (["--prompt", " "], "prompt is empty"),
        (["--prompt", "hi", "--target", "/nonexistent/model"], "is not a directory"),
    ],
)
def test_cli_errors_go_to_stderr_with_nonzero_exit(args, message):
    """Bad input: a one-line error on stderr and exit code 2, nothing on stdout."""
    proc = cli(*args)
    assert proc.returncode == 2 and message in proc.stderr and proc.stdout == ""
