"""Every chart the pages draw is a valid Vega-Lite spec. The pages skip Altair's schema validation (`charts.spec`:
it was most of a page's time), so these tests validate what they would draw; and the range is the x domain."""

from __future__ import annotations

import pandas as pd
import pytest

from routerscope.dashboards import charts

T0 = pd.Timestamp("2026-12-01 12:00", tz="UTC")
SINCE, UNTIL = T0 - pd.Timedelta(hours=1), T0 + pd.Timedelta(hours=1)


def _series(task_type: str = "", n: int = 6, entered: int = 40) -> pd.DataFrame:
    rows = []
    for k in range(n):
        rows.append(
            {
                "task_type": task_type,
                "window_start": T0 + pd.Timedelta(minutes=5 * k),
                "requests": entered + 5,
                "device_entered": entered if k else 3,  # the first window: too few to judge
                "fallback_rate": 0.3,
                "quality_fallback_rate": 0.2,
                "timeout_fallback_rate": 0.05,
                "error_fallback_rate": 0.05,
                "naive_fallback_rate": 0.35,
                "device_bypass_rate": 0.0,
                "l2_l3_share": 0.4,
                "l4_share": 0.02,
                "l2_l3_drifting": False,
            }
        )
    return pd.DataFrame(rows)


INCIDENTS = pd.DataFrame(
    [
        {  # began two hours before the range: its band is cut to the range, never widens it
            "rule": "l2_l3_drift",
            "task_type": "",
            "severity": "ticket",
            "status": "resolved",
            "summary": "drift",
            "first_seen": T0 - pd.Timedelta(hours=3),
            "last_seen": T0 + pd.Timedelta(minutes=20),
            "trip_values": {"metric": "l2_l3_drift.drifting", "windows": [{"value": True}]},
        },
        {  # firing, days after the range: listed on the page, nothing of it drawn here
            "rule": "ingest_stale",
            "task_type": "",
            "severity": "page",
            "status": "firing",
            "summary": "stale",
            "first_seen": T0 + pd.Timedelta(days=3),
            "last_seen": T0 + pd.Timedelta(days=3),
            "trip_values": {},
        },
    ]
)
SPAN = {"since": SINCE, "until": UNTIL}
CHARTS = {
    "timeline": lambda: charts.incident_timeline(INCIDENTS, SINCE, UNTIL),
    "rates": lambda: charts.with_incidents(charts.fallback_rates(_series(), **SPAN), INCIDENTS, **SPAN),
    "by_type": lambda: charts.with_incidents(charts.fallback_by_type(_series(), **SPAN), INCIDENTS, **SPAN),
    "l2_l3": lambda: charts.with_incidents(charts.share_line(_series(), "l2_l3_share", "L2+L3", **SPAN), INCIDENTS),
    "panel": lambda: charts.with_incidents(
        charts.task_type_panel(_series("short_reply"), "short_reply", SINCE, UNTIL, 30), INCIDENTS, False, **SPAN
    ),
    "calibration": lambda: charts.calibration_bars(
        pd.DataFrame({"low": [0.0, 0.5], "high": [0.5, 1.0], "n": [1, 80], "pass_rate": [1.0, 0.8], "flagged": [0, 0]}),
        30,
    ),
    "saved": lambda: charts.saved_share(
        pd.DataFrame(
            {
                "task type": ["a", "b"],
                "all-cloud USD": [1.0, 2.0],
                "saved USD": [0.5, -0.1],
                "saved share": [0.5, -0.05],
            }
        )
    ),
}


@pytest.mark.parametrize("name", list(CHARTS))
def test_every_chart_is_a_valid_vega_lite_spec(name):
    CHARTS[name]().to_dict()  # validates against the Vega-Lite schema (raises when it does not hold)


@pytest.mark.parametrize("name", ["timeline", "rates", "by_type", "panel"])
def test_the_x_domain_is_the_chosen_range(name):
    spec = charts.spec(CHARTS[name]())
    domains = [
        enc["x"]["scale"]["domain"]
        for layer in _layers(spec)
        for enc in [layer.get("encoding") or {}]
        if "scale" in (enc.get("x") or {})
    ]
    assert domains and all(d == [SINCE.isoformat(), UNTIL.isoformat()] for d in domains), domains


def _layers(spec: dict):
    yield spec
    for layer in spec.get("layer") or []:
        yield from _layers(layer)


def test_the_task_panels_filled_from_one_template_are_valid_and_each_its_own():
    import altair as alt

    series = pd.concat([_series("short_reply"), _series("tool_call", entered=2)])
    panels = charts.task_panels(series, INCIDENTS, SINCE, UNTIL, 30)
    assert list(panels) == ["short_reply", "tool_call"]
    for task_type, spec in panels.items():
        alt.LayerChart.from_dict(spec, validate=True)
        assert spec["title"]["text"] == task_type
    # short_reply: one window under 30 (a hollow point), the rest on the line; tool_call: every window under 30
    assert len(panels["short_reply"]["datasets"]["small"]) == 1
    assert panels["tool_call"]["title"]["subtitle"] == [
        "13 device-entered in the range · hollow: n < 30",  # (the first window 3, the five others 2 each: under 30)
        "solid: fallback rate · dashed: L4 share",  # every mark named
    ]
    assert all(row["value"] is None for row in panels["tool_call"]["datasets"]["judged"])
    # the drift band, cut to the range; the firing incident days later is not drawn
    (band,) = panels["short_reply"]["datasets"]["bands"]
    assert pd.Timestamp(band["start"]) == SINCE


def test_the_incident_timeline_names_each_lane_in_words_not_by_rule_id():
    """Issue 55 §8 (machine text): a lane read `l2_l3_drift · overall`; it says what broke, the id in its tooltip."""
    chart = charts.spec(charts.incident_timeline(INCIDENTS, SINCE, UNTIL))
    texts = [row["lane"] for name, rows in chart["datasets"].items() for row in rows if "lane" in row]
    assert texts and set(texts) == {"L2+L3 share drifting · overall"}
