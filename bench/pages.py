"""Every dashboard page as a person meets it, in a real headless Chromium: prints JSON figures.

    .venv/bin/python bench/pages.py [--home DIR] [--idle-s 60] [--moves 5]

Against the warehouse of `--home` (default ROUTERSCOPE_HOME: run `routerscope demo` first), it starts
`routerscope dashboard` on a free port and drives Debian's chromium through Playwright (as the tests do,
`tests/support/browser.py`):
  cold_s    per page, the first open after the dashboard is up (its health check answers; empty caches): from
            navigation to the last chart drawn (the page's own run finished, its title drawn, and every Vega chart
            holds its canvas or svg);
  warm_s    the same page opened again in a new browser tab (a new session, the caches filled);
  slider_s  on Weekly tuning, the what-if slider: its first move, the later ones, and the first move after
            `--idle-s` seconds on the page untouched (the caches must not expire under a reader), each from the
            key press to the candidate column redrawn.
  floor_s   the same for a page holding nothing but its title, served by the same Streamlit with the same options
            (a new tab's JavaScript, connection and session): what no page can be faster than on this machine;
            `warm_over_floor_s` is each page's warm time less the floor's warm time, its own work.
`load_1m` is the machine's load average at the start and the end: on a shared machine read the figures beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from routerscope.dashboards import timerange  # noqa: E402
from tests.support.browser import CHROMIUM_ARGS, open_when_up  # noqa: E402

# (name, path, the page's title: drawn by its own run, so a page showing it and idle has run): the dashboard's first
# five pages as it lists them (routerscope/dashboards/timerange.py), the first the default at the root
PAGES = tuple(
    (Path(file).stem, "" if k == 0 else Path(file).stem, title) for k, (file, title) in enumerate(timerange.PAGES[:5])
)
# the page's own run is over (its title is drawn and the app idle: before the run starts the app is idle too, with
# no title), and every chart on the page is drawn (vega-embed puts a canvas or an svg in it)
DRAWN = """(title) => { const app = document.querySelector('[data-testid="stApp"]');
    return app !== null && app.getAttribute('data-test-script-state') === 'notRunning'
        && [...document.querySelectorAll('h1')].some(h => h.innerText.trim() === title)
        && document.querySelectorAll('[data-testid="stSkeleton"]').length === 0
        && [...document.querySelectorAll('.vega-embed')].every(e => e.querySelector('canvas, svg') !== null); }"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load_1m() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def wait_for_server(base: str, within_s: float = 120) -> None:
    """Until the dashboard answers its health check: a cold page is timed from a server that is up, not from its
    start (before 2026-12-07 the first page's figure included the server's own start-up)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the dashboard at {base} did not come up within {within_s:.0f} s")
        time.sleep(0.1)


def open_page(browser, url: str, title: str) -> tuple[float, int]:
    """(seconds from navigation to the last chart drawn, charts drawn) in a new tab."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        t0 = time.monotonic()
        open_when_up(page, url)
        page.wait_for_function(DRAWN, arg=title, timeout=180_000, polling=50)
        elapsed = time.monotonic() - t0
        if page.locator('[data-testid="stException"]').count():
            raise RuntimeError(f"an error box on {url}")
        return elapsed, page.locator(".vega-embed").count()
    finally:
        page.close()


FLOOR_TITLE = "Floor"
FLOOR_APP = f"import streamlit as st\n\nst.set_page_config(layout='wide')\nst.title({FLOOR_TITLE!r})\n"


def floor(browser, env: dict) -> dict:
    """The floor page's cold and warm opens (`FLOOR_APP`, with the dashboard's Streamlit options)."""
    from routerscope.cli.cmd_dashboard import dashboard_command

    with tempfile.TemporaryDirectory() as tmp:
        app = Path(tmp) / "floor.py"
        app.write_text(FLOOR_APP)
        port = free_port()
        command = dashboard_command(port)
        command[command.index("run") + 1] = str(app)
        command[1:3] = ["-m", "streamlit"]  # Streamlit alone, none of the dashboard's preloading
        server = subprocess.Popen(
            command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        try:
            base = f"http://127.0.0.1:{port}"
            wait_for_server(base)
            cold, _ = open_page(browser, base, FLOOR_TITLE)
            warm, _ = open_page(browser, base, FLOOR_TITLE)
        finally:
            server.terminate()
            server.wait(30)
    return {"cold_s": round(cold, 3), "warm_s": round(warm, 3)}


def slider_moves(browser, url: str, moves: int, idle_s: float) -> dict:
    page = browser.new_page(viewport={"width": 1400, "height": 1400})
    page.set_default_timeout(180_000)
    open_when_up(page, url)
    page.wait_for_function(DRAWN, arg="Weekly tuning", timeout=180_000, polling=50)
    slider = page.get_by_role("slider").filter(has=None).nth(1)  # the target pass rate first, then the what-if's
    for candidate in page.get_by_role("slider").all():
        label = candidate.get_attribute("aria-label") or ""
        if label.startswith("Candidate threshold"):
            slider = candidate
    table = page.locator('[data-testid="stTable"]').first

    def move() -> float:
        before = table.inner_text()
        slider.focus()
        t0 = time.monotonic()
        page.keyboard.press("ArrowRight")
        page.wait_for_function(
            """(before) => { const t = document.querySelector('[data-testid="stTable"]');
                const app = document.querySelector('[data-testid="stApp"]');
                return t !== null && t.innerText !== before
                    && app.getAttribute('data-test-script-state') === 'notRunning'; }""",
            arg=before,
            timeout=180_000,
            polling=20,
        )
        return time.monotonic() - t0

    first = move()
    later = [move() for _ in range(max(moves - 1, 0))]
    time.sleep(idle_s)
    after_idle = move()
    page.close()
    return {"first": round(first, 3), "later": [round(x, 3) for x in later], "first_after_idle": round(after_idle, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", default=os.environ.get("ROUTERSCOPE_HOME"), help="a home with a demo warehouse")
    parser.add_argument("--idle-s", type=float, default=60.0)
    parser.add_argument("--moves", type=int, default=5)
    parser.add_argument("--range", default="24h", help="the range every page opens on (default 24h)")
    args = parser.parse_args()
    if not args.home:
        sys.exit("bench/pages.py: give --home (a home where `routerscope demo` ran) or set ROUTERSCOPE_HOME")
    from playwright.sync_api import sync_playwright

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROUTERSCOPE_")}
    env.update(ROUTERSCOPE_HOME=str(args.home), PYTHONPATH=str(REPO))
    routerscope = str(Path(sys.executable).parent / "routerscope")
    load_start = load_1m()
    server = subprocess.Popen(
        [routerscope, "dashboard", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    out: dict = {"range": args.range, "load_1m_start": load_start, "nproc": os.cpu_count(), "pages": {}}
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for_server(base)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            try:
                for name, path, title in PAGES:
                    url = f"{base}/{path}?range={args.range}"
                    cold, charts = open_page(browser, url, title)
                    warm, _ = open_page(browser, url, title)
                    out["pages"][name] = {"cold_s": round(cold, 3), "warm_s": round(warm, 3), "charts": charts}
                    print(f"bench: {name}: cold {cold:.2f} s, warm {warm:.2f} s", file=sys.stderr, flush=True)
                out["slider_s"] = slider_moves(browser, f"{base}/tuning?range=7d", args.moves, args.idle_s)
                out["floor_s"] = floor(browser, env)
                print(
                    f"bench: floor: cold {out['floor_s']['cold_s']:.2f} s, warm {out['floor_s']['warm_s']:.2f} s",
                    file=sys.stderr,
                    flush=True,
                )
            finally:
                browser.close()
    finally:
        server.terminate()
        server.wait(30)
    out["load_1m_end"] = load_1m()
    pages = out["pages"].values()
    out["worst_cold_s"] = max(p["cold_s"] for p in pages)
    out["worst_warm_s"] = max(p["warm_s"] for p in pages)
    out["warm_over_floor_s"] = {
        name: round(p["warm_s"] - out["floor_s"]["warm_s"], 3) for name, p in out["pages"].items()
    }
    slider = out["slider_s"]
    out["worst_slider_s"] = max([slider["first"], slider["first_after_idle"], *slider["later"]])
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
