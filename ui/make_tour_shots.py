"""Screenshots of the tour on a phone: assets/tour-phone-1.png … tour-phone-7.png, one per step, the 390 × 844
viewport at scale 1, each taken once the step's element is outlined and scrolled above the pinned caption.

    .venv/bin/python -m ui.make_tour_shots                      # starts app.py on a free port (no warm-up run)
    .venv/bin/python -m ui.make_tour_shots --url http://127.0.0.1:7860/

Needs Playwright and Debian's Chromium (make browser). The tour replays a recorded trace, so no model runs; the
race caption's machine and speedup are those recorded in assets/tour-trace.json (python -m ui.make_tour).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

from .tour import TOUR

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
PHONE = {"width": 390, "height": 844}


@contextlib.contextmanager
def serve(timeout_s: float = 180.0):
    """A fresh `python app.py` on a free port, without its warm-up run (the tour needs no model); its URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(
        os.environ,
        GRADIO_SERVER_NAME="127.0.0.1",
        GRADIO_SERVER_PORT=str(port),
        SPECVIZ_WARM_UP="0",
        GRADIO_ANALYTICS_ENABLED="False",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
    )
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "app.py")],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url, deadline = f"http://127.0.0.1:{port}/", time.monotonic() + timeout_s
    try:
        while True:
            try:
                urllib.request.urlopen(url, timeout=5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"app.py did not serve {url} (exit code {proc.poll()})") from None
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def shoot(url: str, out: Path) -> list[Path]:
    """Play the tour at phone size and save one viewport screenshot per step; the paths written."""
    paths = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport=PHONE, device_scale_factor=1)
        page.goto(url)
        for step in range(1, len(TOUR) + 1):
            page.wait_for_selector(f'#tour .sv-tour[data-step="{step}"]', timeout=60_000)
            page.wait_for_selector(".sv-tour-focus", timeout=10_000)
            page.wait_for_timeout(700)  # the scroll above the caption lands ~0.2-0.5 s after the outline
            paths.append(out / f"tour-phone-{step}.png")
            page.screenshot(path=str(paths[-1]))
        browser.close()
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running app (default: start one)")
    parser.add_argument("--out", type=Path, default=ROOT / "assets", help="the folder (default: assets/)")
    args = parser.parse_args()
    with contextlib.nullcontext(args.url) if args.url else serve() as url:
        for path in shoot(url, args.out):
            print(f"wrote {path} ({path.stat().st_size // 1024} KB)")


if __name__ == "__main__":
    main()
