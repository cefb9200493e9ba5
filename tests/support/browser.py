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


IDLE = """() => { const app = document.querySelector('[data-testid="stApp"]');
                 return app !== null && app.getAttribute('data-test-script-state') === 'notRunning'; }"""
RUNNING = """() => { const app = document.querySelector('[data-testid="stApp"]');
                    return app !== null && app.getAttribute('data-test-script-state') === 'running'; }"""


def wait_idle(page, timeout_ms: float = 120_000) -> None:
    """Until the page's script run has finished (Streamlit marks its root `data-test-script-state`)."""
    page.wait_for_function(IDLE, timeout=timeout_ms, polling=100)


def timed(page, action, timeout_ms: float = 120_000) -> float:
    """Seconds from `action()` (a click, a key press) until the run it starts has finished: the time a person waits
    for the page to answer. (A run too quick to be seen running counts from the action to idle.)"""
    start = time.monotonic()
    action()
    try:
        page.wait_for_function(RUNNING, timeout=3_000, polling="raf")
    except Exception:  # the run was over before a frame showed it: idle below returns at once
        pass
    wait_idle(page, timeout_ms)
    return time.monotonic() - start


# Vega draws its charts as SVG with an ARIA description of each axis (its title and domain), legend (its values)
# and title: what a chart shows, read as a screen reader would, with where it sits on the page.
CHARTS = """() => [...document.querySelectorAll('.vega-embed')].map(chart => {
    const described = (prefix) => [...chart.querySelectorAll('[aria-label]')]
        .filter(e => e.getAttribute('aria-label').startsWith(prefix))
        .map(e => { const r = e.getBoundingClientRect();
                    return {label: e.getAttribute('aria-label'), left: r.left, width: r.width}; });
    return {
        x: described('X-axis'),
        y: described('Y-axis'),
        legends: described('Symbol legend').map(l => l.label),
        texts: [...chart.querySelectorAll('text')].map(t => t.textContent),
        marks: [...chart.querySelectorAll('[aria-roledescription]')]
            .map(m => m.getAttribute('aria-roledescription') + ': ' + (m.getAttribute('aria-label') || '')),
        top: chart.getBoundingClientRect().top,
    };
})"""


def charts(page) -> list[dict]:
    """Every Vega chart on the page, top to bottom: its axes (ARIA label, left edge and width on the page), its
    legends' descriptions, every text it draws and its marks ('bar: bucket: …; n: 3; …', 'point: …')."""
    return sorted(page.evaluate(CHARTS), key=lambda c: c["top"])
