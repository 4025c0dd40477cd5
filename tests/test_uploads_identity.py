"""Who a client is, and whose files a flood may delete (issue 52, point 3). A client is its socket address, or the
X-Forwarded-For hop a proxy named in SPECVIZ_TRUSTED_PROXIES appended: never a hop the client wrote. Pruning takes
from the largest holder first, so one client's flood evicts its own files, never another visitor's upload or
trace download. The ASGI middleware is driven directly with a fake upload route and hand-built scopes."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shutil
import time

import pytest

import ui.uploads as uploads
from specviz.demo_trace import sample_events
from ui import app_guard as guard

SERIAL = itertools.count()


def limits(**kw) -> uploads.Limits:
    env = {
        "SPECVIZ_MAX_UPLOAD_MB": "1",
        "SPECVIZ_CLIENT_UPLOADS": "5",
        "SPECVIZ_CLIENT_UPLOAD_MB": "3",
        "SPECVIZ_UPLOAD_FILES": "64",
        "SPECVIZ_UPLOAD_TOTAL_MB": "128",
        **kw,
    }
    return uploads.Limits(env)


def route(folder, name: str = "trace.json", size: int = 1024):
    """An ASGI upload route writing one file of `size` bytes as folder/<n>/<name> (Gradio: <hash>/<name>),
    answering its path; `name` may be a callable giving a fresh name per upload."""

    async def app(scope, receive, send):
        path = folder / f"u{next(SERIAL):06d}" / (name() if callable(name) else name)
        path.parent.mkdir(parents=True)
        path.write_bytes(b"x" * size)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": json.dumps([str(path)]).encode()})

    return app


def post(bound, peer: str, forwarded: str | None = None, length: int = 1300) -> tuple[int, str]:
    """One upload request from socket address `peer`, with an X-Forwarded-For header when given."""
    out = []

    async def send(message):
        out.append(message)

    headers = [(b"content-length", str(length).encode())]
    if forwarded is not None:
        headers.append((b"x-forwarded-for", forwarded.encode()))
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/gradio_api/upload",
        "client": (peer, 50000),
        "headers": headers,
    }
    asyncio.run(bound(scope, None, send))
    body = b"".join(m.get("body", b"") for m in out[1:]).decode()
    return out[0]["status"], body


def uploaded(body: str) -> str:
    return json.loads(body)[0]


# --- who a client is ---------------------------------------------------------------------------


def test_identity_is_the_socket_or_the_hop_a_trusted_proxy_appended():
    """The rule itself: no proxy trusted, the socket; behind a trusted proxy, the right-most hop it did not
    write itself; IPv6 counts by its /64; a garbage hop is bounded text."""
    ident, trusted = (
        uploads.client_identity,
        uploads.trusted_proxies({"SPECVIZ_TRUSTED_PROXIES": "10.0.0.0/8"}),
    )
    assert ident("1.2.3.4", ["9.9.9.9"]) == "1.2.3.4"  # no proxy trusted: the header is ignored
    assert ident("1.2.3.4", ["9.9.9.9"], trusted) == "1.2.3.4"  # a direct client is not a proxy
    assert ident("10.0.0.2", ["9.9.9.9, 1.2.3.4"], trusted) == "1.2.3.4"  # the client wrote 9.9.9.9
    assert ident("10.0.0.2", ["9.9.9.9", "1.2.3.4, 10.0.0.3"], trusted) == "1.2.3.4"  # two proxies, two lines
    assert ident("10.0.0.2", ["1.2.3.4:5555"], trusted) == "1.2.3.4"  # a hop with its port
    assert ident("10.0.0.2", [], trusted) == "10.0.0.2"  # nothing appended: the proxy itself
    assert ident("2001:db8:1:2::1") == ident("2001:db8:1:2:ffff::9") == "2001:db8:1:2::/64"
    assert ident("::ffff:1.2.3.4") == "1.2.3.4"
    assert len(ident("10.0.0.2", ["x" * 5000], trusted)) <= 64
    assert ident(None) == "?"


@pytest.mark.parametrize("value", ["10.0.0.0/33", "proxy.internal", "*", "10.0.0.0/8;10.1.0.0/16", "1.2.3"])
def test_a_malformed_trusted_proxies_value_is_refused_by_name(value):
    """A typo in SPECVIZ_TRUSTED_PROXIES is refused at start-up (Limits() is built when the app starts), naming
    the variable, not silently trusted or ignored."""
    with pytest.raises(ValueError, match="SPECVIZ_TRUSTED_PROXIES"):
        limits(SPECVIZ_TRUSTED_PROXIES=value)


def test_trusted_proxies_parses_addresses_and_networks():
    """Addresses, CIDR networks, IPv6 and spaces around commas; empty trusts no proxy."""
    nets = uploads.trusted_proxies({"SPECVIZ_TRUSTED_PROXIES": " 10.0.0.0/8 , 127.0.0.1,fd00::/8 "})
    assert [str(n) for n in nets] == ["10.0.0.0/8", "127.0.0.1/32", "fd00::/8"]
    assert uploads.trusted_proxies({}) == () == uploads.trusted_proxies({"SPECVIZ_TRUSTED_PROXIES": " "})


def test_a_new_forwarded_for_per_request_does_not_evade_the_client_limit(tmp_path):
    """No proxy trusted: an attacker writing a fresh X-Forwarded-For each time is still one client (it got
    35 of 35 uploads through)."""
    bound = uploads.UploadBound(route(tmp_path), lambda: tmp_path, limits())
    statuses = [post(bound, "1.2.3.4", forwarded=f"203.0.113.{k}")[0] for k in range(8)]
    assert statuses == [200] * 5 + [429] * 3


def test_a_forged_forwarded_for_does_not_lock_out_its_victim(tmp_path):
    """No proxy trusted: 20 uploads claiming the victim's address count against the sender, not the victim."""
    bound = uploads.UploadBound(route(tmp_path), lambda: tmp_path, limits())
    for _ in range(6):
        post(bound, "1.2.3.4", forwarded="198.51.100.7")
    assert post(bound, "198.51.100.7")[0] == 200


def test_behind_a_trusted_proxy_only_the_hop_it_appended_counts(tmp_path):
    """SPECVIZ_TRUSTED_PROXIES set: the hop the proxy appends is the client; hops the client wrote before it
    neither evade the limit nor lock out the address they name."""
    lim = limits(SPECVIZ_TRUSTED_PROXIES="10.0.0.0/8")
    bound = uploads.UploadBound(route(tmp_path), lambda: tmp_path, lim)
    proxy = "10.1.2.3"
    spoofed = [post(bound, proxy, forwarded=f"203.0.113.{k}, 1.2.3.4")[0] for k in range(8)]
    assert spoofed == [200] * 5 + [429] * 3
    for _ in range(6):  # claiming the victim's address, through the proxy
        post(bound, proxy, forwarded="198.51.100.7, 5.6.7.8")
    assert post(bound, proxy, forwarded="198.51.100.7")[0] == 200  # the victim, through the proxy
    assert post(bound, proxy, forwarded="203.0.113.99, 198.51.100.7")[0] == 200
    # a client talking to the server directly is not a proxy: its header is ignored
    direct = [post(bound, "192.0.2.1", forwarded=f"203.0.113.{k}")[0] for k in range(6)]
    assert direct == [200] * 5 + [429]


# --- whose files a flood deletes ---------------------------------------------------------------


def test_seventy_spoofed_uploads_leave_another_visitors_upload(tmp_path):
    """The issue's flood, with the default limits: 70 1 KiB uploads, each with a new X-Forwarded-For, deleted a
    visitor's fresh upload; now the flood is one client, refused past its 20, and the upload stays."""
    bound = uploads.UploadBound(route(tmp_path), lambda: tmp_path, uploads.Limits({}))
    status, body = post(bound, "198.51.100.7")
    victim = uploaded(body)
    flood = [post(bound, "1.2.3.4", forwarded=f"203.0.113.{k % 250}")[0] for k in range(70)]
    assert flood.count(200) == 20 and os.path.exists(victim)


def test_a_flood_evicts_its_own_files_first(tmp_path):
    """A client allowed many uploads into a 16-file folder: its own oldest files go, the other visitors'
    uploads stay; its newest upload stays too."""
    lim = limits(SPECVIZ_CLIENT_UPLOADS="1000", SPECVIZ_CLIENT_UPLOAD_MB="100", SPECVIZ_UPLOAD_FILES="16")
    bound = uploads.UploadBound(route(tmp_path), lambda: tmp_path, lim)
    visitors = [uploaded(post(bound, f"198.51.100.{k}")[1]) for k in range(3)]
    flood = [post(bound, "1.2.3.4") for _ in range(70)]
    assert all(status == 200 for status, _ in flood)
    assert all(os.path.exists(p) for p in visitors) and os.path.exists(uploaded(flood[-1][1]))
    assert sum(1 for p in tmp_path.rglob("*") if p.is_file()) == 16


def test_a_client_holds_at_most_its_own_limit(tmp_path):
    """Once its uploads leave the hour's window, a client still holds at most SPECVIZ_CLIENT_UPLOADS files on
    disk: its oldest go first, the newest stays."""
    bound = uploads.UploadBound(route(tmp_path), lambda: tmp_path, limits(SPECVIZ_CLIENT_UPLOADS="3"))
    first = [uploaded(post(bound, "1.2.3.4")[1]) for _ in range(3)]
    bound.ledger.clear()  # as if the hour had passed
    later = [uploaded(post(bound, "1.2.3.4")[1]) for _ in range(2)]
    held = [p for p in first + later if os.path.exists(p)]
    assert held == first[2:] + later


def test_a_file_two_clients_uploaded_stays_while_one_still_holds_it(tmp_path):
    """Gradio stores identical bytes under one name at one path: a flooder uploading a copy of a visitor's file
    cannot delete it by flooding past it."""
    lim = limits(SPECVIZ_CLIENT_UPLOADS="1000", SPECVIZ_CLIENT_UPLOAD_MB="100", SPECVIZ_UPLOAD_FILES="8")
    same = tmp_path / "same" / "trace.json"

    async def shared(scope, receive, send):  # the first upload of each client is the same file
        client = scope["client"][0]
        path = same if not seen.setdefault(client, False) else tmp_path / f"u{next(SERIAL):06d}" / "t.json"
        seen[client] = True
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * 1024)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": json.dumps([str(path)]).encode()})

    seen: dict = {}
    bound = uploads.UploadBound(shared, lambda: tmp_path, lim)
    post(bound, "198.51.100.7")
    for _ in range(30):
        post(bound, "1.2.3.4")
    assert same.exists()


def test_uploads_through_a_symlinked_folder_are_still_attributed(tmp_path):
    """GRADIO_TEMP_DIR may be a symlink or relative: attribution still holds (the flooder's files go, not the
    visitor's), and the folder itself stays when a file directly in it is deleted."""
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)

    async def flat(scope, receive, send):  # files directly in the folder, named through the link
        path = link / f"f{next(SERIAL):06d}.json"
        path.write_bytes(b"x" * 1024)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": json.dumps([str(path)]).encode()})

    lim = limits(SPECVIZ_CLIENT_UPLOADS="1000", SPECVIZ_CLIENT_UPLOAD_MB="100", SPECVIZ_UPLOAD_FILES="2")
    bound = uploads.UploadBound(flat, lambda: str(link), lim)
    visitor = uploaded(post(bound, "198.51.100.7")[1])
    for _ in range(5):
        post(bound, "1.2.3.4")
    assert os.path.exists(visitor) and real.is_dir() and len(list(real.iterdir())) == 2


# --- trace downloads in Gradio's cache ---------------------------------------------------------


def download_copy(tmp_path, cache):
    """The app's trace file for the download button and Gradio's copy of it in the cache (<hash>/<name>)."""
    path = guard.write_trace_file(tmp_path / "traces", sample_events(), keep=64, max_age_s=3600)
    copy = cache / "c0ffee" / path.name
    copy.parent.mkdir(parents=True)
    shutil.copyfile(path, copy)
    os.utime(copy, (time.time() - 60, time.time() - 60))  # written a minute before the flood
    return copy


def test_uploads_named_like_trace_files_do_not_evict_a_download(tmp_path):
    """70 uploads named specviz-trace-….json (fresh names, and the download's own name) push no visitor's
    download copy out of Gradio's cache: neither the upload bound nor the trace-copy bound deletes it."""
    cache = tmp_path / "cache"
    copy = download_copy(tmp_path, cache)
    names = itertools.chain([copy.name] * 5, (f"specviz-trace-{k:016x}.json" for k in itertools.count()))
    lim = limits(SPECVIZ_CLIENT_UPLOADS="1000", SPECVIZ_CLIENT_UPLOAD_MB="100", SPECVIZ_UPLOAD_FILES="8")
    bound = uploads.UploadBound(route(cache, name=lambda: next(names)), lambda: cache, lim)
    assert all(post(bound, "1.2.3.4")[0] == 200 for _ in range(70))
    assert copy.exists()
    guard.prune_cache(cache, keep=4, max_age_s=3600)  # what a run's end or a trace load then calls
    assert copy.exists()


def test_trace_copies_are_still_bounded_by_count_and_age(tmp_path):
    """The app's own copies beyond the newest `keep`, or past their age, go; an upload named like one is left
    to the upload bound unless it is past the age."""
    cache = tmp_path / "cache"
    now = time.time()
    copies = []
    for k in range(6):
        path = guard.write_trace_file(tmp_path / "traces", sample_events(), keep=64, max_age_s=3600)
        copy = cache / f"h{k}" / path.name
        copy.parent.mkdir(parents=True)
        shutil.copyfile(path, copy)
        os.utime(copy, (now - 100 + k, now - 100 + k))
        copies.append(copy)
    forged = cache / "up" / "specviz-trace-00000000000000000000000000000000.json"
    old = cache / "old" / "specviz-trace-0000000000000000.json"
    for f, t in [(forged, now), (old, now - 7200)]:
        f.parent.mkdir()
        f.write_text("{}")
        os.utime(f, (t, t))
    assert guard.prune_cache(cache, keep=4, max_age_s=3600) == 3
    assert [c.exists() for c in copies] == [False, False, True, True, True, True]
    assert forged.exists() and not old.exists() and not (cache / "h0").exists()


def test_a_download_copy_is_not_the_upload_bounds_to_delete(tmp_path):
    """The upload prune counts and deletes only files uploads brought (and unclaimed leftovers): the app's
    trace copies, which the upload middleware never saw arrive, stay whatever the folder holds."""
    cache = tmp_path / "cache"
    copy = download_copy(tmp_path, cache)
    leftover = cache / "left" / "old-upload.json"  # from before a restart: nobody's, deleted first
    leftover.parent.mkdir()
    leftover.write_bytes(b"x" * 1024)
    os.utime(leftover, (0, 0))
    assert uploads.prune_folder(cache, 0, 0) == 1
    assert copy.exists() and not leftover.exists()


# --- messages a visitor sees -------------------------------------------------------------------


def test_an_error_message_names_only_a_files_base_name():
    """No absolute server path reaches a visitor: an OSError names the file's base name only; a path inside
    any other message is cut to its base name too."""
    missing = "/tmp/specviz-gradio/0123abcd/my trace.json"
    try:
        open(missing)
    except OSError as e:
        text = guard.public_error(e)
    assert text == "No such file or directory: 'my trace.json'"
    text = guard.public_error(ValueError("cannot read /srv/app/cache/ab12/trace.json (bad) at /opt/x/"))
    assert text == "cannot read trace.json (bad) at x"
    assert "/" not in guard.public_error(PermissionError(13, "Permission denied", "/etc/shadow"))
    assert guard.public_error(ValueError("1/2 of 3 MiB/s; see https://example.org/a/b")) == (
        "1/2 of 3 MiB/s; see https://example.org/a/b"
    )


def test_the_media_recording_route_writes_nothing(tmp_path):
    """POST /gradio_api/process_recording (Gradio's media-recording route, which writes files past /upload and its
    limits) is answered 404 before Gradio reads it: this app records no media. Other requests pass."""
    reached, out = [], []

    async def app(scope, receive, send):
        reached.append(scope["path"])

    async def send(message):
        out.append(message)

    bound = uploads.UploadBound(app, folder=lambda: str(tmp_path), limits=limits())
    for path in ("/gradio_api/process_recording", "/gradio_api/process_recording/"):
        scope = {"type": "http", "method": "POST", "path": path, "client": ("1.2.3.4", 1), "headers": []}
        asyncio.run(bound(scope, None, send))
    assert reached == [] and [m["status"] for m in out if "status" in m] == [404, 404]
    asyncio.run(bound({"type": "http", "method": "GET", "path": "/config", "headers": []}, None, send))
    assert reached == ["/config"]
