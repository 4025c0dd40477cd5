"""Start `python app.py` on a free port for the app tests, and stop it again (no conftest needed)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from ui.app_views import READY

ROOT = Path(__file__).resolve().parent.parent
# Debian's Chromium (make browser): Playwright's own download does not work here
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def playwright_or_skip():
    """Playwright's sync API, or skip the calling test module when it or Debian's Chromium is missing."""
    import pytest

    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} not installed (make browser)", allow_module_level=True)
    return sync_api


class ServerURL(str):
    """The server's URL, carrying the server's process id (for memory checks) and its Gradio cache folder."""

    pid: int
    uploads: Path
    log: Path

    def errors(self) -> str:
        """The server log's tracebacks and error lines so far (for a failing check's message)."""
        lines = self.log.read_text(errors="replace").splitlines()
        return "\n".join(line for line in lines if "Traceback" in line or "Error" in line)[-4000:]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve_app(timeout_s: float = 180.0, **env_vars: str):
    """Yield the URL of a fresh app server (env_vars added to its environment, e.g. SPECVIZ_MAX_RUN_S="3");
    its output goes to a log file named in any startup error."""
    port = free_port()
    uploads = Path(tempfile.mkdtemp(prefix=f"specviz-gradio-{port}-"))  # this server's own Gradio cache
    # 1 thread: faster on a busy 2-core box
    env = dict(
        os.environ,
        GRADIO_SERVER_NAME="127.0.0.1",
        GRADIO_SERVER_PORT=str(port),
        GRADIO_TEMP_DIR=str(uploads),
        GRADIO_ANALYTICS_ENABLED="False",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
        # every browser test module's pages come from 127.0.0.1, one upload client for the whole shared server:
        # the hourly per-client bound (20) is tests/test_uploads*.py's to check, on servers of their own
        SPECVIZ_CLIENT_UPLOADS="10000",
        SPECVIZ_CLIENT_UPLOAD_MB="10000",
    )
    env.update(env_vars)
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"specviz-app-{port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "app.py")], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"app.py exited with {proc.returncode}; see {log}")
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    # serving, warm-up run over
                    if r.status == 200 and READY in log.read_text(errors="replace"):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"app.py was not ready at {url} within {timeout_s:.0f} s; see {log}")
            time.sleep(0.5)
        served = ServerURL(url)
        served.pid, served.uploads, served.log = proc.pid, uploads, log
        yield served
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(uploads, ignore_errors=True)


def fn_index(url: str, api_name: str) -> int:
    """Index of the app's event named api_name (private UI events included), from the server's /config."""
    import httpx

    config = httpx.get(f"{url}config", timeout=30).json()
    for dep in config["dependencies"]:
        if dep.get("api_name") == api_name:
            return dep["id"]
    raise KeyError(api_name)


def call_event(url: str, api_name: str, data: list, session: str, timeout_s: float = 300.0) -> dict:
    """Run one of the app's events in `session` as the browser does (join the queue, read its event stream).

    Returns {"outputs": the last outputs (None if none), "error": the error message or None,
    "warnings": the warning toasts, "updates": how many output messages arrived}.
    """
    import json

    import httpx

    index = fn_index(url, api_name)
    body = {"data": data, "fn_index": index, "session_hash": session, "event_data": None, "trigger_id": None}
    result = {"outputs": None, "error": None, "warnings": [], "updates": 0}
    with httpx.Client(timeout=timeout_s) as http:
        # json.dumps, not httpx's encoder: a hostile client can send NaN, Infinity and lone surrogates too
        event_id = (
            http.post(
                f"{url}gradio_api/queue/join",
                content=json.dumps(body),
                headers={"content-type": "application/json"},
            )
            .raise_for_status()
            .json()["event_id"]
        )
        with http.stream("GET", f"{url}gradio_api/queue/data", params={"session_hash": session}) as stream:
            for line in stream.iter_lines():
                if not line.startswith("data:"):
                    continue
                msg = json.loads(line[5:])
                if msg.get("event_id") not in (None, event_id):
                    continue
                if msg.get("msg") == "log" and msg.get("level") == "warning":
                    result["warnings"].append(msg.get("log"))
                elif msg.get("msg") in ("process_generating", "process_completed"):
                    output = msg.get("output") or {}
                    if output.get("data") is not None:
                        result["outputs"], result["updates"] = output["data"], result["updates"] + 1
                    if msg["msg"] == "process_completed":
                        result["error"] = None if msg.get("success") else str(output.get("error"))
                        return result
                elif msg.get("msg") == "close_stream":
                    return result
    return result


def upload(url: str, path: Path) -> dict:
    """Upload a file as the browser's file drop does; the FileData for an event's input, or HTTPStatusError."""
    import httpx

    with open(path, "rb") as f:
        reply = httpx.post(
            f"{url}gradio_api/upload", files={"files": (path.name, f, "application/json")}, timeout=120
        )
    reply.raise_for_status()
    return {"path": reply.json()[0], "orig_name": path.name, "meta": {"_type": "gradio.FileData"}}


def set_number(page, elem_id: str, value) -> None:
    """Type a slider's number and commit it. A control in an accordion that has just opened can mount again
    after the first fill on a busy machine (losing it), so fill until the value holds."""
    box = page.locator(f"#{elem_id} input[type=number]").first
    for _ in range(3):
        box.wait_for(state="visible")
        box.fill(str(value))
        box.press("Tab")
        page.wait_for_timeout(300)
        if box.input_value() == str(value):
            return


class OpenPage:
    """What an open page holds: its session's heartbeat stream (Gradio's frontend and gradio_client open
    /heartbeat/<session> on load and keep it while open), on a thread until the context ends. `api`: the
    server's .../gradio_api/ URL. `ready` is set once the stream answered."""

    def __init__(self, api: str, session: str):
        self.api, self.session, self.ready, self.response = api, session, threading.Event(), None

    def hold(self) -> None:
        import httpx

        try:
            with (
                httpx.Client(timeout=None) as http,
                http.stream("GET", f"{self.api}heartbeat/{self.session}") as r,
            ):
                self.response = r
                for _ in r.iter_lines():
                    self.ready.set()
        except httpx.HTTPError:
            self.ready.set()

    def __enter__(self):
        threading.Thread(target=self.hold, daemon=True).start()
        self.ready.wait(10)
        return self

    def __exit__(self, *exc):
        if self.response is not None:
            self.response.close()


def open_derivation(page) -> None:
    """Unfold Explain's derivation (it stays open across the panel's updates, assets/specviz.js)."""
    page.evaluate(
        "() => document.querySelectorAll('#explain details.sv-derivation').forEach(d => { d.open = true; })"
    )


def page_top(locator) -> float:
    """The element's top in page coordinates: unlike a bounding box it does not move while the page scrolls
    (the tour's hand-over scrolls its caption into view a moment after Skip)."""
    return locator.evaluate("e => e.getBoundingClientRect().top + window.scrollY")


def open_tab(page, name: str) -> None:
    """Click tab `name`, through Gradio's "More tabs" menu where a narrow screen folds it there; waits until the tab
    strip is laid out (the tab or the menu button shown) before deciding which."""
    tab = page.get_by_role("tab", name=name, exact=True)
    more = page.locator('button[aria-label="More tabs"]')
    tab.or_(more).first.wait_for(state="visible", timeout=30_000)
    if not tab.is_visible():
        more.click()
        tab = page.locator(".overflow-dropdown button", has_text=name)
    tab.click()
