"""What visitors can put on disk is bounded where files arrive (ui/uploads.py): bytes per request, files per request,
uploads and bytes per client, and the folder's total, pruned oldest first. A fake upload route writes the files, as
Gradio's does; the real server's route is tested in test_app_api."""

from __future__ import annotations

import asyncio
import json
import os
import time

from ui.uploads import MIB, Limits, UploadBound, prune_folder


def limits(**kw) -> Limits:
    env = {
        "SPECVIZ_MAX_UPLOAD_MB": "1",
        "SPECVIZ_CLIENT_UPLOADS": "5",
        "SPECVIZ_CLIENT_UPLOAD_MB": "3",
        "SPECVIZ_UPLOAD_FILES": "4",
        "SPECVIZ_UPLOAD_TOTAL_MB": "2",
        **kw,
    }
    return Limits(env)


def route(folder, files: int, size: int):
    """An ASGI upload route writing `files` files of `size` bytes into folder/<n>/, answering their paths."""

    async def app(scope, receive, send):
        paths = []
        for _ in range(files):
            sub = folder / f"{time.monotonic_ns()}"
            sub.mkdir()
            path = sub / "trace.json"
            path.write_bytes(b"x" * size)
            paths.append(str(path))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": json.dumps(paths).encode()})

    return app


def post(bound: UploadBound, length: int, client: str = "1.2.3.4") -> tuple[int, str]:
    out = []

    async def send(message):
        out.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/gradio_api/upload",
        "client": (client, 1),
        "headers": [(b"content-length", str(length).encode())],
    }
    asyncio.run(bound(scope, None, send))
    return out[0]["status"], b"".join(m.get("body", b"") for m in out[1:]).decode()


def files_in(folder) -> list:
    return [p for p in folder.rglob("*") if p.is_file()]


def test_a_request_over_one_files_bytes_is_refused_unread(tmp_path):
    """Content-Length beyond SPECVIZ_MAX_UPLOAD_MB (+ the form's overhead): 413 naming the bytes; nothing written."""
    bound = UploadBound(route(tmp_path, 1, 10), lambda: tmp_path, limits())
    status, text = post(bound, 2 * MIB)
    assert (
        status == 413
        and "1048576 bytes" in text
        and "SPECVIZ_MAX_UPLOAD_MB" in text
        and not files_in(tmp_path)
    )


def test_thirty_files_in_one_request_are_refused_and_removed(tmp_path):
    """One request carrying 30 small files: 413, and none of them stays on disk."""
    bound = UploadBound(route(tmp_path, 30, 10), lambda: tmp_path, limits())
    status, text = post(bound, 30 * 200)
    assert status == 413 and "at most 4 files" in text and not files_in(tmp_path)


def test_a_client_is_refused_past_its_count_and_others_are_not(tmp_path):
    """Five uploads from one client pass, the sixth gets 429 naming SPECVIZ_CLIENT_UPLOADS; another client passes."""
    bound = UploadBound(route(tmp_path, 1, 100), lambda: tmp_path, limits())
    assert [post(bound, 300)[0] for _ in range(5)] == [200] * 5
    status, text = post(bound, 300)
    assert status == 429 and "SPECVIZ_CLIENT_UPLOADS" in text
    assert post(bound, 300, client="5.6.7.8")[0] == 200


def test_a_client_is_refused_past_its_bytes(tmp_path):
    """Three 0.9 MiB uploads fill a client's 3 MiB; the fourth gets 429 naming SPECVIZ_CLIENT_UPLOAD_MB."""
    bound = UploadBound(route(tmp_path, 1, 10), lambda: tmp_path, limits(SPECVIZ_UPLOAD_TOTAL_MB="64"))
    assert [post(bound, int(0.9 * MIB))[0] for _ in range(3)] == [200] * 3
    status, text = post(bound, int(0.9 * MIB))
    assert status == 429 and "SPECVIZ_CLIENT_UPLOAD_MB" in text


def test_the_folder_is_pruned_oldest_first_to_its_count_and_bytes(tmp_path):
    """Past SPECVIZ_UPLOAD_FILES the oldest files go first; past SPECVIZ_UPLOAD_TOTAL_MB too; the newest stays."""
    for k in range(6):
        sub = tmp_path / f"old{k}"
        sub.mkdir()
        (sub / "f.json").write_bytes(b"x" * 1000)
        os.utime(sub / "f.json", (1000 + k, 1000 + k))
    assert prune_folder(tmp_path, 4, 10**9) == 2
    assert sorted(p.parent.name for p in files_in(tmp_path)) == ["old2", "old3", "old4", "old5"]
    assert not (tmp_path / "old0").exists()  # its emptied folder too
    assert prune_folder(tmp_path, 4, 2500) == 2
    assert sorted(p.parent.name for p in files_in(tmp_path)) == ["old4", "old5"]


def test_uploads_past_the_total_leave_the_newest(tmp_path):
    """Ten clients uploading one 0.5 MiB file each into a 2 MiB, 4-file folder: 4 files remain, the last upload's
    among them."""
    bound = UploadBound(route(tmp_path, 1, MIB // 2), lambda: tmp_path, limits())
    for k in range(10):
        status, text = post(bound, MIB // 2 + 300, client=f"10.0.0.{k}")
        assert status == 200
    left = files_in(tmp_path)
    assert len(left) == 4 and json.loads(text)[0] in map(str, left)
