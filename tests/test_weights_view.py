"""The roofline's sentence on the weights' format (specviz/roofline.py): a run on a GGUF's blocks says the bytes a
step reads beside the fp32 size, and the memory floor and ridge the fp32 bytes would give, from the printed inputs."""

import re

from specviz.roofline import format_sentence

ROOF = {
    "weight_bytes": 96.6e6,
    "kv_bytes_per_position": 92160.0,
    "bandwidth": 33e9,
    "flops_per_token": 0.27e9,
    "attn_flops_per_position": 30720.0,
    "flops": 190e9,
}


def test_a_run_on_blocks_states_both_sizes_and_the_fp32_floor_reproduces():
    """The fp32 memory floor printed is (fp32 GB + (context + 1) · KV MB) ÷ GB/s of the printed figures."""
    text = format_sentence(ROOF, {"weights": "gguf", "weight_bytes_fp32": 537.9e6}, 300)
    assert "0.097 GB a step" in text and "0.538 GB" in text
    m = re.search(
        r"\(([\d.]+) GB \+ \((\d+) \+ 1\) · ([\d.]+) MB\) ÷ ([\d.]+) GB/s = ([\d.]+) ms instead of ([\d.]+)",
        text,
    )
    gb, ctx, kv, bw, mem, mine = (float(x) for x in m.groups())
    assert abs((gb + (ctx + 1) * kv / 1e3) / bw * 1e3 - mem) <= 0.05
    assert abs((0.097 + (ctx + 1) * kv / 1e3) / bw * 1e3 - mine) <= 0.05 and mine < mem


def test_fp32_weights_and_older_records_say_nothing_of_a_format():
    """Only a run on blocks, with both sizes recorded, gets the sentence (an older trace has neither key)."""
    assert format_sentence(ROOF, {"weights": "fp32", "weight_bytes_fp32": 537.9e6}, 300) == ""
    assert format_sentence(ROOF, {}, 300) == ""
    assert format_sentence(ROOF, {"weights": "gguf"}, 300) == ""
