"""What a timer around compute depends on: how many CPU threads a race computes with (the setting, and a scope
that applies it to one OS thread), and waiting for a GPU's queued work before reading the clock."""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import contextmanager

import torch

MAX_THREADS = 256


def synchronizer(device) -> Callable[[], None]:
    """The call that waits for the device's queued work (a GPU runs asynchronously: its work is timed once done);
    a no-op on a CPU, whose work is done when the call returns."""
    return torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)


def _race_threads() -> int | None:
    """SPECVIZ_RACE_THREADS: CPU threads a race computes with, 1..MAX_THREADS; 0 keeps torch's default."""
    raw = os.environ.get("SPECVIZ_RACE_THREADS", "1")
    if not raw.strip().isdigit() or int(raw) > MAX_THREADS:
        raise ValueError(
            f"SPECVIZ_RACE_THREADS must be a whole number 0..{MAX_THREADS} "
            f"(0: torch's default thread count), got {raw!r}"
        )
    return int(raw) or None


RACE_THREADS = _race_threads()


def check_threads(threads) -> None:
    """A race's thread count: 1..MAX_THREADS, or None (the caller's)."""
    if threads is not None and not (isinstance(threads, int) and 1 <= threads <= MAX_THREADS):
        raise ValueError(f"race threads must be 1..{MAX_THREADS} (or None: the caller's), got {threads!r}")


@contextmanager
def torch_threads(n: int | None):
    """torch's intra-op threads set to n for this OS thread inside the block (None: unchanged)."""
    if n is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
