"""What visitors can put on the server's disk: one bound, enforced where files arrive (Gradio's /upload route).

Each upload request carries at most one file's bytes (SPECVIZ_MAX_UPLOAD_MB, plus the form's overhead) and at most
FILES_PER_REQUEST files; each client (its address; behind a proxy, the first X-Forwarded-For hop) may upload at most
SPECVIZ_CLIENT_UPLOADS files and SPECVIZ_CLIENT_UPLOAD_MB per UPLOAD_WINDOW_S; and after every upload the folder the
files land in (the app's own Gradio cache, ui/handlers.py) is pruned, oldest first, to SPECVIZ_UPLOAD_FILES files and
SPECVIZ_UPLOAD_TOTAL_MB in all. A refusal is a 413 or 429 whose text names the limit and its variable.
An ASGI middleware: no gradio, no torch.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections import OrderedDict
from pathlib import Path

MIB = 2**20
FORM_OVERHEAD = 64 * 1024  # multipart boundaries and headers around one file
FILES_PER_REQUEST = 4  # the page uploads one trace at a time
UPLOAD_WINDOW_S = 3600.0  # a client's uploads count for this long (Gradio keeps its files for an hour)
CLIENTS_KEPT = 4096  # clients the ledger remembers; the oldest are forgotten first


class Limits:
    """The limits, each from its environment variable (README: "Bad input and limits")."""

    def __init__(self, env=os.environ):
        self.file_bytes = int(float(env.get("SPECVIZ_MAX_UPLOAD_MB", "6")) * MIB)
        self.client_files = int(env.get("SPECVIZ_CLIENT_UPLOADS", "20"))
        self.client_bytes = int(float(env.get("SPECVIZ_CLIENT_UPLOAD_MB", "32")) * MIB)
        self.total_files = int(env.get("SPECVIZ_UPLOAD_FILES", "64"))
        self.total_bytes = int(float(env.get("SPECVIZ_UPLOAD_TOTAL_MB", "128")) * MIB)


def prune_folder(folder: Path, max_files: int, max_bytes: int) -> int:
    """Delete the folder's oldest files (and their emptied sub-folders) until at most max_files files and max_bytes
    remain; returns how many went."""
    files = []
    for f in folder.rglob("*"):
        try:
            if f.is_file():
                st = f.stat()
                files.append((st.st_mtime, st.st_size, f))
        except OSError:  # removed meanwhile
            continue
    files.sort(reverse=True)  # newest first
    kept_n, kept_bytes, gone = 0, 0, 0
    for _, size, f in files:
        if kept_n < max_files and kept_bytes + size <= max_bytes:
            kept_n, kept_bytes = kept_n + 1, kept_bytes + size
            continue
        try:
            f.unlink(missing_ok=True)
            gone += 1
            if f.parent != folder and not any(f.parent.iterdir()):
                shutil.rmtree(f.parent, ignore_errors=True)
        except OSError:
            pass
    return gone


class UploadBound:
    """ASGI middleware bounding POST …/upload (module docstring); every other request passes untouched."""

    def __init__(self, app, folder=None, limits: Limits | None = None):
        self.app, self.limits = app, limits or Limits()
        self.folder = folder  # a callable giving the upload folder (it is read when a request comes)
        # client -> (time, files, bytes)
        self.ledger: OrderedDict[str, list[tuple[float, int, int]]] = OrderedDict()

    async def __call__(self, scope, receive, send):
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or not scope["path"].rstrip("/").endswith("/upload")
        ):
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        client = (
            headers.get("x-forwarded-for", "").split(",")[0].strip() or (scope.get("client") or ("?",))[0]
        )
        refusal = self.refusal(client, headers.get("content-length"))
        if refusal is not None:
            return await _reply(send, *refusal)
        start, body = None, []

        async def hold(message):  # the reply is a short JSON list of paths: held until it is counted
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
            else:
                body.append(message.get("body", b""))

        await self.app(scope, receive, hold)
        paths = _paths(b"".join(body)) if start is not None and start["status"] == 200 else []
        if len(paths) > FILES_PER_REQUEST:
            for p in paths:
                Path(p).unlink(missing_ok=True)
            return await _reply(
                send, 413, f"at most {FILES_PER_REQUEST} files per upload request, got {len(paths)}"
            )
        self.record(client, len(paths), int(headers["content-length"]))  # what the client sent
        if self.folder is not None:
            prune_folder(Path(self.folder()), self.limits.total_files, self.limits.total_bytes)
        await send(start)
        await send({"type": "http.response.body", "body": b"".join(body)})

    def refusal(self, client: str, length) -> tuple[int, str] | None:
        """(status, message) when this upload is over a limit, else None."""
        lim = self.limits
        try:
            n = int(length)
        except (TypeError, ValueError):
            return 411, "an upload must say its Content-Length"
        if n > lim.file_bytes + FORM_OVERHEAD:
            return 413, (
                f"an upload request may carry at most {lim.file_bytes} bytes (SPECVIZ_MAX_UPLOAD_MB), got {n}"
            )
        recent = self._recent(client)
        files, sent = sum(r[1] for r in recent), sum(r[2] for r in recent)
        if files >= lim.client_files:
            return 429, (
                f"at most {lim.client_files} uploads per client per hour (SPECVIZ_CLIENT_UPLOADS); "
                f"try again later"
            )
        if sent + n > lim.client_bytes + FORM_OVERHEAD:
            return 429, (
                f"at most {lim.client_bytes // MIB} MiB of uploads per client per hour "
                f"(SPECVIZ_CLIENT_UPLOAD_MB); try again later"
            )
        return None

    def record(self, client: str, files: int, size: int) -> None:
        self.ledger[client] = self._recent(client) + [(time.monotonic(), files, size)]
        self.ledger.move_to_end(client)
        while len(self.ledger) > CLIENTS_KEPT:
            self.ledger.popitem(last=False)

    def _recent(self, client: str) -> list:
        now = time.monotonic()
        return [r for r in self.ledger.get(client, []) if now - r[0] < UPLOAD_WINDOW_S]


def _paths(body: bytes) -> list[str]:
    try:
        out = json.loads(body)
    except ValueError:
        return []
    return [p for p in out if isinstance(p, str)] if isinstance(out, list) else []


async def _reply(send, status: int, text: str) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"text/plain; charset=utf-8")],
        }
    )
    await send({"type": "http.response.body", "body": text.encode("utf-8")})
