"""What visitors can put on the server's disk: one bound, enforced where files arrive (Gradio's /upload route).

Each upload request carries at most one file's bytes (SPECVIZ_MAX_UPLOAD_MB, plus the form's overhead) and at most
FILES_PER_REQUEST files; each client may upload at most SPECVIZ_CLIENT_UPLOADS files and SPECVIZ_CLIENT_UPLOAD_MB per
UPLOAD_WINDOW_S, and holds at most as much on disk; after every upload the folder the files land in (the app's own
Gradio cache, ui/server.py) is pruned to SPECVIZ_UPLOAD_FILES files and SPECVIZ_UPLOAD_TOTAL_MB in all, taking from
the largest holder first (prune_folder), so a client's flood evicts its own files before anyone else's.
A refusal is a 413 or 429 whose text names the limit and its variable.

Who a client is (client_identity): the socket's address; when that address is a proxy the operator named in
SPECVIZ_TRUSTED_PROXIES, the right-most X-Forwarded-For hop that is not itself a trusted proxy (the one a trusted proxy
appended). A hop the client wrote is never identity. An IPv6 address counts by its /64 (one host's usual block).
An ASGI middleware and pure functions: no gradio, no torch.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import shutil
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from pathlib import Path

MIB = 2**20
FORM_OVERHEAD = 64 * 1024  # multipart boundaries and headers around one file
FILES_PER_REQUEST = 4  # the page uploads one trace at a time
UPLOAD_WINDOW_S = 3600.0  # a client's uploads count for this long (Gradio keeps its files for an hour)
CLIENTS_KEPT = 4096  # clients the ledger remembers; the oldest are forgotten first
NOBODY = ""  # the holder of files no upload seen by this process brought (left from before a restart)
# the app's trace files for the download button (ui/app_guard.py write_trace_file; Gradio's copies of them are bounded
# by prune_cache there): never the upload bound's to count or delete, unless an upload brought the file
SERVED_GLOB = "specviz-trace-*.json"

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def trusted_proxies(env: Mapping[str, str] = os.environ) -> tuple[Network, ...]:
    """SPECVIZ_TRUSTED_PROXIES: the proxies whose X-Forwarded-For hop is believed, as comma-separated addresses or
    CIDR networks (10.0.0.0/8, 127.0.0.1, fd00::/8). Unset or empty: none. Anything else is a ValueError naming the
    variable (read at start-up: a typo never silently trusts, or distrusts, a proxy)."""
    nets = []
    for item in env.get("SPECVIZ_TRUSTED_PROXIES", "").split(","):
        if not item.strip():
            continue
        try:
            nets.append(ipaddress.ip_network(item.strip(), strict=False))
        except ValueError:
            raise ValueError(
                f"SPECVIZ_TRUSTED_PROXIES must be comma-separated IP addresses or CIDR networks "
                f"(such as 10.0.0.0/8,127.0.0.1), got {item.strip()[:40]!r}"
            ) from None
    return tuple(nets)


def client_identity(
    peer: str | None, forwarded_for: Iterable[str] = (), trusted: tuple[Network, ...] = ()
) -> str:
    """Who a request comes from, for per-client limits. peer: the socket's address (ASGI scope["client"][0],
    Starlette's request.client.host); forwarded_for: the X-Forwarded-For header lines in order; trusted:
    trusted_proxies(). The peer itself unless it is a trusted proxy; then the right-most hop that is not a trusted
    proxy. Each proxy appends the address it saw, so hops left of that one are the client's own writing."""
    if not _is_trusted(peer, trusted):
        return _key(peer)
    hops = [hop.strip() for line in forwarded_for for hop in line.split(",")]
    for hop in reversed([h for h in hops if h]):
        host = _host(hop)
        if not _is_trusted(host, trusted):
            return _key(host)
    return _key(peer)  # nothing appended, or only proxies: the proxy is the client


def scope_identity(scope: Mapping, trusted: tuple[Network, ...] = ()) -> str:
    """client_identity of an ASGI request scope (what a middleware sees; a Starlette request's .scope)."""
    peer = (scope.get("client") or (None,))[0]
    forwarded = [v.decode("latin-1") for k, v in scope.get("headers", []) if k.lower() == b"x-forwarded-for"]
    return client_identity(peer, forwarded, trusted)


def _address(host: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """host as an address (an IPv4-mapped IPv6 one as IPv4), or None when it is not one."""
    try:
        ip = ipaddress.ip_address(host or "")
    except ValueError:
        return None
    if ip.version == 6 and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _is_trusted(host: str | None, trusted: tuple[Network, ...]) -> bool:
    ip = _address(host)
    return ip is not None and any(ip in net for net in trusted)


def _key(host: str | None) -> str:
    """The ledger's key for an address: IPv4 as written, IPv6 by its /64; anything else (a unix socket, a
    malformed hop a proxy passed on) as at most 64 characters of text."""
    ip = _address(host)
    if ip is None:
        return (host or "?")[:64]
    if ip.version == 6:
        return str(ipaddress.ip_network((ip, 64), strict=False))
    return str(ip)


def _host(hop: str) -> str:
    """A forwarded hop without its port: 1.2.3.4:80 -> 1.2.3.4, [2001:db8::1]:80 -> 2001:db8::1."""
    if hop.startswith("[") and "]" in hop:
        return hop[1 : hop.index("]")]
    if hop.count(":") == 1:
        return hop[: hop.index(":")]  # host:port (an IPv6 address has more colons)
    return hop


class Limits:
    """The limits, each from its environment variable (README: "Bad input and limits")."""

    def __init__(self, env=os.environ):
        self.file_bytes = int(float(env.get("SPECVIZ_MAX_UPLOAD_MB", "6")) * MIB)
        self.client_files = int(env.get("SPECVIZ_CLIENT_UPLOADS", "20"))
        self.client_bytes = int(float(env.get("SPECVIZ_CLIENT_UPLOAD_MB", "32")) * MIB)
        self.total_files = int(env.get("SPECVIZ_UPLOAD_FILES", "64"))
        self.total_bytes = int(float(env.get("SPECVIZ_UPLOAD_TOTAL_MB", "128")) * MIB)
        self.trusted = trusted_proxies(env)  # whose X-Forwarded-For hop names the client


@dataclasses.dataclass(eq=False)
class Held:
    """One file in the upload folder and the clients that uploaded it (Gradio stores identical uploads once)."""

    path: Path
    mtime: float
    size: int
    holders: set[str]


def prune_folder(
    folder: Path,
    max_files: int,
    max_bytes: int,
    owners: Mapping[str, set[str]] | None = None,
    spare: Iterable[str] = (),
    client_cap: tuple[int, int] | None = None,
    uploader: str | None = None,
) -> int:
    """Delete files until the folder holds at most max_files files and max_bytes, and each client at most
    client_cap (files, bytes); returns how many went. owners: resolved path -> the clients that uploaded it; a file
    no one holds is NOBODY's, except the app's trace files (SERVED_GLOB), which are left alone. The largest holder
    (on a tie, the uploader) loses its oldest file first (evictions), so a flood takes its own files before another
    visitor's. spare: paths never deleted (the upload being answered)."""
    folder = folder.resolve()  # as owners name the files
    files = _holdings(folder, owners or {})
    spare = {str(Path(p).resolve()) for p in spare}
    gone = evictions(files, max_files, max_bytes, spare, client_cap, uploader)
    _delete(folder, gone)
    return len(gone)


def _holdings(folder: Path, owners: Mapping[str, set[str]]) -> list[Held]:
    files = []
    for f in folder.rglob("*"):
        holders = set(owners.get(str(f), ()))
        if not holders and f.match(SERVED_GLOB):  # a download copy: prune_cache's, not ours
            continue
        try:
            if f.is_file():
                st = f.stat()
                files.append(Held(f, st.st_mtime, st.st_size, holders or {NOBODY}))
        except OSError:  # removed meanwhile
            continue
    return files


def evictions(
    files: list[Held],
    max_files: int,
    max_bytes: int,
    spare: set[str] = frozenset(),
    client_cap: tuple[int, int] | None = None,
    uploader: str | None = None,
) -> list[Held]:
    """Which files to delete: while a client is over client_cap, or the folder over its bounds, the largest holder
    (by files when the count is over, else by bytes; a client over its cap before anyone; on a tie the uploader,
    then the holder of the oldest file) gives up its oldest file that is not spared. A file goes when its last
    holder gives it up: one client's flood never takes another's file while the flooder has one to give.
    Pure: it only updates each Held's holders; the caller deletes."""
    held: dict[str, list[Held]] = {}
    for f in sorted(files, key=lambda f: f.mtime):
        for h in f.holders:
            held.setdefault(h, []).append(f)
    given = {h: [f for f in fs if str(f.path) not in spare] for h, fs in held.items()}  # oldest first
    count = {h: [len(fs), sum(f.size for f in fs)] for h, fs in held.items()}
    total = [len(files), sum(f.size for f in files)]
    cap = client_cap or (float("inf"), float("inf"))
    gone = []
    while True:
        can = [h for h in given if given[h]]
        over_cap = [h for h in can if h != NOBODY and (count[h][0] > cap[0] or count[h][1] > cap[1])]
        if not over_cap and not (can and (total[0] > max_files or total[1] > max_bytes)):
            return gone
        can = over_cap or can
        by_files = total[0] > max_files or bool(over_cap)
        h = max(
            can, key=lambda h: (count[h] if by_files else count[h][::-1], h == uploader, -given[h][0].mtime)
        )
        f = given[h].pop(0)
        f.holders.discard(h)
        count[h][0] -= 1
        count[h][1] -= f.size
        if not f.holders:
            gone.append(f)
            total[0] -= 1
            total[1] -= f.size


def _delete(folder: Path, files: list[Held]) -> None:
    for f in files:
        try:
            f.path.unlink(missing_ok=True)
            if f.path.parent != folder and not any(f.path.parent.iterdir()):  # its emptied hash folder too
                shutil.rmtree(f.path.parent, ignore_errors=True)
        except OSError:
            pass


class UploadBound:
    """ASGI middleware bounding POST …/upload (module docstring); every other request passes untouched."""

    def __init__(self, app, folder=None, limits: Limits | None = None):
        self.app, self.limits = app, limits or Limits()
        self.folder = folder  # a callable giving the upload folder (it is read when a request comes)
        # client -> (time, files, bytes)
        self.ledger: OrderedDict[str, list[tuple[float, int, int]]] = OrderedDict()
        # uploaded path -> the clients that uploaded it, while it is in the folder
        self.owners: dict[str, set[str]] = {}

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"].rstrip("/").endswith("/process_recording"):
            # Gradio's media-recording route writes files past /upload; this app records no media
            return await _reply(send, 404, "this app takes no recordings")
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or not scope["path"].rstrip("/").endswith("/upload")
        ):
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        client = scope_identity(scope, self.limits.trusted)
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
            self.prune(Path(self.folder()), client, paths)
        await send(start)
        await send({"type": "http.response.body", "body": b"".join(body)})

    def prune(self, folder: Path, client: str, paths: list[str]) -> None:
        """Attribute the new upload to its client, then prune the folder as prune_folder does: to its bounds and
        each client to its own (what a client may upload per window is also what it may hold); the new upload is
        spared. Files gone from the folder (Gradio's delete_cache) drop out of the attribution."""
        new = [str(Path(p).resolve()) for p in paths]  # as the folder's walk names them
        for p in new:
            self.owners.setdefault(p, set()).add(client)
        lim = self.limits
        folder = folder.resolve()
        files = _holdings(folder, self.owners)
        gone = evictions(
            files, lim.total_files, lim.total_bytes, set(new), (lim.client_files, lim.client_bytes), client
        )
        _delete(folder, gone)
        self.owners = {str(f.path): f.holders - {NOBODY} for f in files if f.holders - {NOBODY}}

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
