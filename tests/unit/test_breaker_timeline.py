"""The on-call breaker timeline draws each breaker's transitions in its own order (`seq`), not by timestamp: a
router clock that stepped back once drew the cloud breaker half-open for 85 minutes after it had closed."""

from __future__ import annotations

import pandas as pd

from routerscope.dashboards import charts

T = pd.Timestamp("2026-12-01 12:00", tz="UTC")


def _row(minute, seq, from_state, to_state, instance="a", boundary="cloud"):
    return {
        "event_time": T + pd.Timedelta(minutes=minute),
        "instance_id": instance,
        "boundary": boundary,
        "seq": seq,
        "from_state": from_state,
        "to_state": to_state,
        "trigger": "t",
    }


def test_bands_follow_the_breakers_sequence_and_a_stepped_back_clock_leaves_an_empty_band():
    # seq 2 (open → half_open) is stamped at 12:02:54, before seq 3 (half_open → closed) at 12:03 but after it by
    # arrival; a breaker without seq (older events) is drawn by time
    rows = [
        _row(1, 1, "closed", "open"),
        _row(3, 3, "half_open", "closed"),
        _row(2.9, 2, "open", "half_open"),
        _row(5, 4, "closed", "open"),
        _row(4.5, 5, "open", "half_open"),  # the clock stepped back: an empty band, not a long one
        _row(0, None, "closed", "open", "b", "device"),
    ]
    chart = charts.breaker_timeline(pd.DataFrame(rows), T - pd.Timedelta(minutes=5), T + pd.Timedelta(minutes=10))
    bands = pd.DataFrame(chart.data)
    cloud = bands[bands["lane"] == "a · cloud"]
    assert list(cloud["to_state"]) == ["closed", "open", "half_open", "closed", "open", "half_open"]
    minutes = [round((u - e).total_seconds() / 60, 2) for e, u in zip(cloud["event_time"], cloud["until"])]
    assert minutes == [6.0, 1.9, 0.1, 2.0, 0.0, 5.5]
    device = bands[bands["lane"] == "b · device"]
    assert list(device["to_state"]) == ["closed", "open"]


def test_no_state_is_drawn_before_the_first_data_of_the_range():
    """Issue 39 §6: a 6 h range that began four hours before the demo's first event painted the breaker "closed"
    over those four hours. The state before the first transition is drawn from the first data on."""
    rows = [_row(30, 1, "closed", "open"), _row(40, 2, "open", "closed")]
    since, first_data = T - pd.Timedelta(hours=4), T + pd.Timedelta(minutes=10)
    chart = charts.breaker_timeline(pd.DataFrame(rows), since, T + pd.Timedelta(hours=1), data_from=first_data)
    bands = pd.DataFrame(chart.data)
    assert list(bands["to_state"]) == ["closed", "open", "closed"]
    assert bands["event_time"].iloc[0] == first_data  # not `since`
    # data that began after the first transition's own time (a clock ahead): the band starts at the transition
    late = charts.breaker_timeline(pd.DataFrame(rows), since, T + pd.Timedelta(hours=1), T + pd.Timedelta(hours=2))
    assert pd.DataFrame(late.data)["event_time"].iloc[0] == T + pd.Timedelta(minutes=30)
