"""The shared server's process and limits, imported by every handler module before anything else: ZeroGPU's
`spaces` (before torch), Gradio's own temp folder, the limits each set by an environment variable, the one compute
queue, who a client is, and glibc's policy for large blocks. It knows nothing of the page."""

from __future__ import annotations

try:  # ZeroGPU on Hugging Face Spaces; must be imported before torch
    import spaces
except ImportError:
    spaces = None

import ctypes
import ctypes.util
import functools
import os
import tempfile
from pathlib import Path

# the app's own Gradio cache (uploads, served downloads): ui/uploads.py may then prune all of it, oldest first
os.environ.setdefault("GRADIO_TEMP_DIR", str(Path(tempfile.gettempdir()) / "specviz-gradio"))

import gradio.utils as gradio_utils  # noqa: E402  (after GRADIO_TEMP_DIR: Gradio reads it)

from engine.drafters.suffix import MAX_HISTORY_TOKENS  # noqa: E402
from ui.uploads import Limits, scope_identity  # noqa: E402

GRADIO_CACHE = Path(gradio_utils.get_upload_folder())  # Gradio's own copies of uploads and served downloads


def upload_folder() -> str:
    """Where Gradio puts uploads (ui/uploads.py bounds it)."""
    return str(GRADIO_CACHE)


# Limits of the shared server, each set by an environment variable (README: "Bad input and limits").
MAX_RUN_S = float(os.environ.get("SPECVIZ_MAX_RUN_S", "180"))  # a run (or a Play) is cut after this long
UPLOAD_LIMITS = Limits()  # what uploads may put on disk (ui/uploads.py: SPECVIZ_MAX_UPLOAD_MB and the others)


def client_of(scope) -> str:
    """Who a request comes from: its socket address, or behind a proxy named in SPECVIZ_TRUSTED_PROXIES the hop
    that proxy appended (ui/uploads.py); the queue's per-address rule and the upload limits use the same."""
    return scope_identity(scope, UPLOAD_LIMITS.trusted)


def trust_forwarded(trusted=UPLOAD_LIMITS.trusted, env=os.environ) -> str:
    """The one place that decides whose X-Forwarded-For is believed: uvicorn (under Gradio) rewrites a request's
    address from that header for the peers in FORWARDED_ALLOW_IPS, by default loopback, which would let any client
    behind a local proxy name itself; it gets SPECVIZ_TRUSTED_PROXIES instead (empty: nobody, loopback included).
    Called before the server starts; returns what it set."""
    env["FORWARDED_ALLOW_IPS"] = ",".join(str(net) for net in trusted)
    return env["FORWARDED_ALLOW_IPS"]


MAX_PROMPT_TOKENS = int(os.environ.get("SPECVIZ_MAX_PROMPT_TOKENS", "2048"))  # prompt tokens per run
# a session's run is dropped after this idle time
STATE_TTL_S = float(os.environ.get("SPECVIZ_STATE_TTL_S", "1800"))
# sessions kept in memory (a classroom's and more); when full, the oldest of the client holding the most go first
# (ui/fair_queue.py evictions)
MAX_SESSIONS = int(os.environ.get("SPECVIZ_MAX_SESSIONS", "160"))
# a session's earlier prompts and outputs kept for suffix speculation (and auto) to draft from: one per visitor,
# never shared, 8 bytes a token at rest (engine/drafters/suffix.py); 0 keeps none
HISTORY_TOKENS = int(os.environ.get("SPECVIZ_HISTORY_TOKENS", str(MAX_HISTORY_TOKENS)))
# a compute handler yields at least this often between rounds (an empty update when nothing changed): Gradio stops
# a request whose visitor left only at a yield (issue 65: Measure on this host ran 26.6 s on, never yielding)
TICK_S = 0.25
# runs, API calls, trace loads and Plays at once
CONCURRENCY = int(os.environ.get("SPECVIZ_CONCURRENCY", "2"))
# trace files kept in TRACE_DIR (and < 1 h old)
TRACE_FILES = int(os.environ.get("SPECVIZ_TRACE_FILES", "64"))
COMPUTE = dict(concurrency_id="compute", concurrency_limit=CONCURRENCY)  # one queue for every compute handler
# ZeroGPU: a GPU lease covers the app's own run limit, plus a minute for loading and the AR probe
gpu = spaces.GPU(duration=int(MAX_RUN_S) + 60) if spaces is not None else (lambda fn: fn)
LARGE_BLOCK = 4 * 2**20  # bytes from which glibc maps a block on its own and returns it to the OS when freed


@functools.lru_cache(maxsize=1)
def _libc():
    """glibc, loaded once, or None (another C library: its own policy applies)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


def return_large_blocks() -> None:
    """At start-up: every allocation of LARGE_BLOCK or more gets its own mapping, returned to the OS when freed.
    glibc's default raises that threshold to the largest block freed so far (up to 32 MiB), after which a B = 8 beam
    search's cache rows (~16 MiB a layer) came from the heap and stayed there: +1.3 GB after one search."""
    libc = _libc()
    if libc is not None:
        libc.mallopt(-3, LARGE_BLOCK)  # M_MMAP_THRESHOLD; setting it also fixes it (no dynamic raise)


def release_memory() -> None:
    """After a large job (a beam search, a batch): the heap's free pages back to the OS (malloc_trim)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
