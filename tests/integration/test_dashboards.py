"""The dashboard pages render against a real embedded warehouse holding the golden fixture, its
metric windows, data-quality results and an alert (streamlit.testing AppTest)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from streamlit.testing.v1 import AppTest

from routerscope import alerts
from tests.conftest import REPO, settings_for
from tests.integration.test_metrics import DECISION_EVENTS, END, LABEL_EVENTS, START, insert
from warehouse import quality
from warehouse.client import open_warehouse
from warehouse.metrics import compute
from warehouse.migrate import migrate
from warehouse.queries.common import QueryWindow
from warehouse.queries.metric_windows import write_window

pytestmark = pytest.mark.integration
PAGES = REPO / "dashboards" / "app_pages"


@pytest.fixture
def populated(home, monkeypatch):
    settings = settings_for(home)
    with open_warehouse(settings) as client:
        migrate(client)
        insert(client, DECISION_EVENTS, LABEL_EVENTS)
        for k in range(12):  # 01:00-02:00 in 5-minute windows (the fixture's A1 is at 01:00)
            w0 = START + timedelta(hours=1) + k * timedelta(minutes=5)
            write_window(client, "5m", w0, w0 + timedelta(minutes=5), compute(client, w0, w0 + timedelta(minutes=5)))
        write_window(client, "1d", START, END, compute(client, START, END, min_n=1))
        quality.store(client, quality.run_suites(client, QueryWindow(START, END), now=END))
        alerts.run(client)
    monkeypatch.setenv("ROUTERSCOPE_HOME", str(home))
    for name in [k for k in list(__import__("os").environ) if k.startswith("ROUTERSCOPE_") and k != "ROUTERSCOPE_HOME"]:
        monkeypatch.delenv(name)
    from dashboards import data

    for loader in (data.latest_window_end, data.windows, data.task_types, data.alerts, data.breaker_transitions,
                   data.freshness, data.calibration, data.dq_latest, data.quarantine, data.decisions):  # fmt: skip
        loader.clear()
    return settings


def render(page: str) -> AppTest:
    app = AppTest.from_file(str(PAGES / page), default_timeout=60)
    app.run()
    assert not app.exception, app.exception
    return app


def test_oncall_shows_both_denominators(populated):
    app = render("oncall.py")
    labels = [m.label for m in app.metric]
    assert "Fallback rate (of device-entered)" in labels and "Naive fallback rate (all requests)" in labels
    assert any("denominator" in (m.help or "") for m in app.metric)
    assert [m.value for m in app.metric][:2] == ["0.0%", "0.0%"]  # A1: served on device at L0


def test_tuning_shows_calibration_and_flags_non_monotonic_buckets(populated):
    app = render("tuning.py")
    assert app.selectbox[0].value == "intent_classify"
    assert any("not monotonic" in w.value for w in app.warning)


def test_quality_page_lists_checks_and_quarantine(populated):
    app = render("quality.py")
    assert [m.value for m in app.metric][:1] == [str(len(quality.CHECKS))]


def test_explorer_filters_with_bound_parameters(populated):
    app = render("explorer.py")
    app.selectbox[1].set_value("quality").run()
    assert not app.exception
    assert "decisions" in app.caption[0].value


def test_a_person_sees_the_oncall_page_in_a_real_browser(populated, home, tmp_path):
    """Streamlit renders over a websocket: drive Debian's chromium with playwright and wait for the
    tiles before the screenshot."""
    import subprocess
    import time

    from playwright.sync_api import sync_playwright

    from tests.conftest import ROUTERSCOPE, clean_env, free_port

    port = free_port()
    server = subprocess.Popen([ROUTERSCOPE, "dashboard", "--port", str(port)], env=clean_env(home),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path="/usr/bin/chromium",
                args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
            )
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            deadline = time.monotonic() + 60
            while True:
                try:
                    page.goto(f"http://127.0.0.1:{port}/", timeout=5000)
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
            page.get_by_text("Fallback rate (of device-entered)").wait_for(timeout=60_000)
            page.get_by_text("Naive fallback rate (all requests)").wait_for(timeout=10_000)
            page.locator(".vega-embed").first.wait_for(timeout=60_000)  # the charts, not just the tiles
            page.wait_for_timeout(1500)
            shot = tmp_path / "oncall.png"  # kept under pytest's tmp dir for a look after a run
            page.screenshot(path=str(shot), full_page=True)
            page.get_by_text("Weekly tuning").first.click()
            page.get_by_text("Current threshold").wait_for(timeout=60_000)
            browser.close()
        assert shot.stat().st_size > 20_000  # a rendered page, not a blank one
    finally:
        server.terminate()
        server.wait(10)
