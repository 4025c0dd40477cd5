"""Start `python app.py` on a free port for the app tests, and stop it again (no conftest needed)."""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class ServerURL(str):
    """The server's URL, carrying the server's process id (for memory checks)."""
    pid: int


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve_app(timeout_s: float = 180.0):
    """Yield the URL of a fresh app server; its output goes to a log file named in any startup error."""
    port = free_port()
    env = dict(os.environ, GRADIO_SERVER_NAME="127.0.0.1", GRADIO_SERVER_PORT=str(port),
               GRADIO_ANALYTICS_ENABLED="False", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))  # 1 thread: far faster on a busy 2-core box
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"specviz-app-{port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, str(ROOT / "app.py")], cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"app.py exited with {proc.returncode}; see {log}")
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"app.py did not serve {url} within {timeout_s:.0f} s; see {log}")
            time.sleep(0.5)
        served = ServerURL(url)
        served.pid = proc.pid
        yield served
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
