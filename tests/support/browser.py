"""The dashboard in a real browser: `routerscope dashboard` as its own process and Debian's chromium driven
by Playwright (never `playwright install`, which downloads a browser)."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from routerscope.core.procs import free_port
from tests.support.home import ROUTERSCOPE, clean_env

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextmanager
def dashboard(home: Path) -> Iterator[str]:
    """`routerscope dashboard` over `home` on a free port: yields its base URL; stopped (and checked to be
    gone) on exit."""
    port = free_port()
    server = subprocess.Popen(
        [ROUTERSCOPE, "dashboard", "--port", str(port)],
        env=clean_env(home),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(20)
    with socket.socket() as probe:  # SIGTERM stops `routerscope dashboard` and its Streamlit child
        assert probe.connect_ex(("127.0.0.1", port)) != 0


@contextmanager
def browser_page(width: int = 1400, height: int = 1000):
    """A chromium page (Playwright), closed on exit."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        try:
            yield browser.new_page(viewport={"width": width, "height": height})
        finally:
            browser.close()


def open_when_up(page, url: str, within_s: float = 60) -> None:
    """Load `url`, retrying while the server is still starting."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            page.goto(url, timeout=5000)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
