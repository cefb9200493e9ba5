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
        for k in range(12):  # the first hour of the day in 5-minute windows
            w0 = START + k * timedelta(minutes=5)
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
