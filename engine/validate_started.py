"""What a run's first and last events must hold: run_started (its config, who recorded it, the measured host) and
finished's summary. Checked with validate_fields.py's field checks; engine/validate.py runs them. Plain Python.
"""

from __future__ import annotations

from .config import MAX_GAMMA, MODES, GenerationConfig, short_repr
from .validate_fields import (
    CONFIG_KEYS,
    MAX_FORWARD_ROWS,
    RUN_ID,
    each,
    one_of,
    positive,
    prob,
    real_number,
    same_length,
    texts,
    whole,
)


def check_config(config: dict) -> None:
    """The known keys of RunStarted.config, checked by GenerationConfig itself (unknown keys are kept as data)."""
    known = {k: v for k, v in config.items() if k in CONFIG_KEYS}
    try:
        GenerationConfig(**known)
    except ValueError as e:
        raise ValueError(f"run_started.config.{e}") from None


def check_summary(summary: dict, ar: bool, n_events: int) -> None:
    """The known keys of Finished.summary (engine/metrics.py writes them); unknown keys are kept as data."""
    where = "finished.summary."
    for key, value in summary.items():
        if key in ("acceptance_rate", "alpha", "contended_share"):
            prob(where + key, value, none_ok=True)
        elif key == "per_position_acceptance":
            if not isinstance(value, list):
                raise ValueError(f"{where}{key} must be a list of probabilities, got {short_repr(value)}")
            each(where + key, value, prob, none_ok=True)
        elif key == "gamma":
            whole(where + key, value, 0 if ar else 1, MAX_GAMMA)
        elif key == "rounds":
            whole(where + key, value, 0, n_events)
        elif key == "v_n" and value is not None:
            whole(where + key, value, 1, MAX_FORWARD_ROWS)
        elif key in ("new_tokens", "drafted", "accepted", "rejections", "max_new_tokens", "tree_rounds"):
            whole(where + key, value, 0)
        elif key in ("wall_s", "target_step_s", "c", "v", "ar_wall_s"):
            positive(where + key, value)
        elif key in (
            "tokens_per_s",
            "draft_s",
            "verify_s",
            "forward_per_round_s",
            "host_per_round_s",
            "predicted_speedup",
            "ar_tokens_per_s",
            "speedup",
            "mean_accepted_length",
            "expected_tokens",
            "model_tokens",
            "model_steps",
            "c_spread",
            "v_spread",
            "step_spread",
            "probe_step_s",
            "outside_cores",
            "free_cores",
        ):
            positive(where + key, value, zero_ok=True)
        elif key == "plain":
            check_plain(value)
        elif key == "ar_token_ids":
            if not isinstance(value, list):
                raise ValueError(f"{where}{key} must be a list of token ids, got {short_repr(value)}")
            each(where + key, value, whole, 0)
        elif key == "identical_to_ar" and not isinstance(value, bool):
            raise ValueError(f"{where}{key} must be true or false, got {short_repr(value)}")
        elif key == "mode" and not isinstance(value, str):
            raise ValueError(f"{where}{key} must be a string, got {short_repr(value)}")


def check_started(e) -> None:
    if not (isinstance(e.run_id, str) and RUN_ID.fullmatch(e.run_id)):
        raise ValueError(
            f"run_started.run_id must be 1 to 64 characters of A-Z a-z 0-9 _ -, got {short_repr(e.run_id)}"
        )
    one_of("run_started.mode", e.mode, MODES)
    check_config(e.config)
    same_length("run_started", e, ["prompt_ids", "prompt_tokens"])
    each("run_started.prompt_ids", e.prompt_ids, whole, 0)
    texts("run_started.prompt_tokens", e.prompt_tokens)
    if e.pos != len(e.prompt_ids):
        raise ValueError(
            f"run_started.pos must be the prompt length ({len(e.prompt_ids)}), got {short_repr(e.pos)}"
        )
    check_host(e.host)
    check_engine(getattr(e, "engine", {}))


ENGINE_TEXT = (
    "name",
    "version",
    "method",
    "hook",
)  # RunStarted.engine: who recorded the run (engine/recorders)
MAX_ENGINE_TEXT = 120


def check_engine(engine) -> None:
    """RunStarted.engine: {} (specviz's own run) or the recording engine's name, version, method and hook (short
    strings) and `missing`, what the recording could not see (a list of short strings)."""
    if not isinstance(engine, dict):
        raise ValueError(f"run_started.engine must be an object, got {short_repr(engine)}")
    unknown = set(engine) - set(ENGINE_TEXT) - {"missing"}
    if unknown:
        raise ValueError(
            f"run_started.engine has unknown key {sorted(unknown)[0]!r}; known: {', '.join(ENGINE_TEXT)}, missing"
        )
    for key in ENGINE_TEXT:
        value = engine.get(key, "")
        if not isinstance(value, str) or len(value) > MAX_ENGINE_TEXT:
            raise ValueError(
                f"run_started.engine.{key} must be text of at most {MAX_ENGINE_TEXT} characters, "
                f"got {short_repr(value)}"
            )
    missing = engine.get("missing", [])
    if not isinstance(missing, list) or len(missing) > 8:
        raise ValueError(
            f"run_started.engine.missing must be a list of at most 8 texts, got {short_repr(missing)}"
        )
    for i, m in enumerate(missing):
        if not isinstance(m, str) or len(m) > MAX_ENGINE_TEXT:
            raise ValueError(
                f"run_started.engine.missing[{i}] must be text of at most {MAX_ENGINE_TEXT} characters, "
                f"got {short_repr(m)}"
            )


HOST_TEXT = ("cpu", "gpu", "torch", "dtype", "device", "forward", "measured", "weights")
HOST_NUMBERS = (
    "threads",
    "bandwidth",
    "bandwidth_best",
    "copy_bandwidth",
    "flops",
    "weight_bytes",
    "weight_bytes_fp32",
    "flops_per_token",
    "kv_bytes_per_position",
    "attn_flops_per_position",
    "outside_cores",
)
KERNEL_NAMES = ("native", "mkl", "onednn", "dequant")


def check_host(host) -> None:
    """RunStarted.host: the measured machine (engine/runtime/roofline.py). Known keys only, numbers >= 0,
    short strings, kernels {projection: {rows: "native" | "mkl" | "onednn"}}."""
    if not isinstance(host, dict):
        raise ValueError(f"run_started.host must be an object, got {short_repr(host)}")
    unknown = set(host) - set(HOST_TEXT) - set(HOST_NUMBERS) - {"flags", "kernels", "calibration"}
    if unknown:
        raise ValueError(
            f"run_started.host has unknown keys {short_repr(sorted(unknown))}; known: "
            f"{', '.join(HOST_TEXT + HOST_NUMBERS + ('flags', 'kernels', 'calibration'))}"
        )
    for k in HOST_NUMBERS:
        positive(f"run_started.host.{k}", host.get(k), zero_ok=True)
    for k in HOST_TEXT:
        if k in host and not (isinstance(host[k], str) and len(host[k]) <= 200):
            raise ValueError(
                f"run_started.host.{k} must be a string of at most 200 characters, got {short_repr(host[k])}"
            )
    flags = host.get("flags", [])
    if not (
        isinstance(flags, list)
        and len(flags) <= 32
        and all(isinstance(f, str) and len(f) <= 32 for f in flags)
    ):
        raise ValueError(
            f"run_started.host.flags must be a list of at most 32 short strings, got {short_repr(flags)}"
        )
    plan = host.get("kernels", {})
    ok = (
        isinstance(plan, dict)
        and len(plan) <= 16
        and all(
            isinstance(name, str)
            and len(name) <= 32
            and isinstance(rows, dict)
            and len(rows) <= 64
            and all(
                isinstance(r, str) and r.isdigit() and len(r) <= 4 and k in KERNEL_NAMES
                for r, k in rows.items()
            )
            for name, rows in plan.items()
        )
    )
    check_calibration(host.get("calibration", {}))
    if not ok:
        raise ValueError(
            'run_started.host.kernels must map at most 16 projections to {rows: "native", "mkl" or "onednn"}, '
            f"got {short_repr(plan)}"
        )


def check_calibration(cal) -> None:
    """RunStarted.host.calibration: {"v": {rows: the kernel plan's time at rows ÷ at 1 row}} (roofline.py), or {};
    "of": "blocks" when the times are the block kernels' (cache-hot) against the memory floor."""
    v = cal.get("v", {}) if isinstance(cal, dict) else None
    ok = (
        isinstance(v, dict)
        and set(cal) <= {"v", "of"}
        and cal.get("of", "blocks") == "blocks"
        and len(v) <= 64
        and all(
            isinstance(r, str) and r.isdigit() and len(r) <= 4 and real_number(x) and x >= 0
            for r, x in v.items()
        )
    )
    if not ok:
        raise ValueError(
            f'run_started.host.calibration must be {{"v": {{rows: a number >= 0}}}}, got {short_repr(cal)}'
        )


def check_plain(plain) -> None:
    """finished.summary.plain: a recorder's measured plain decoding beside its run (engine/recorders/trace.with_plain)."""
    ok = (
        isinstance(plain, dict)
        and set(plain) <= {"plain_s", "assisted_s", "plain_tokens", "identical"}
        and all(real_number(plain.get(k)) and plain[k] > 0 for k in ("plain_s", "assisted_s"))
        and (
            isinstance(plain.get("plain_tokens", 0), int)
            and not isinstance(plain.get("plain_tokens", 0), bool)
        )
        and plain.get("plain_tokens", 0) >= 0
        and isinstance(plain.get("identical", False), bool)
    )
    if not ok:
        raise ValueError(
            "finished.summary.plain must be {plain_s > 0, assisted_s > 0, plain_tokens >= 0, identical: bool}, "
            f"got {short_repr(plain)}"
        )
