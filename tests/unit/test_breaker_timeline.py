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


def test_two_routers_lanes_keep_their_height_the_axis_starts_at_the_data_and_an_unrecorded_start_is_assumed():
    """Issue 55 §7, after a re-run: two routers' lanes were drawn in a fixed 100 px, their names on top of each other,
    on an axis from the range's start a day before the data; and the second router, started 20 minutes after the
    first data, was painted "closed" from the first data on as if it had run then. Each lane now has its own step,
    the axis starts at the first data, and the state before a breaker's first transition (seq 1: its router's start is
    not recorded) is marked assumed (drawn faint); a lane whose earlier transitions lie before the range is not."""
    rows = [
        _row(30, 1, "closed", "open", "run-1"),
        _row(40, 2, "open", "closed", "run-1"),
        _row(50, 7, "closed", "open", "run-2"),  # its transitions 1-6 lie before the range: its state is known
    ]
    since, first_data = T - pd.Timedelta(hours=24), T + pd.Timedelta(minutes=10)
    chart = charts.breaker_timeline(pd.DataFrame(rows), since, T + pd.Timedelta(hours=1), data_from=first_data)
    spec = charts.spec(chart)
    assert spec["height"] == {"step": charts.LANE_STEP}
    assert spec["encoding"]["x"]["scale"]["domain"][0].startswith(first_data.strftime("%Y-%m-%dT%H:%M"))
    bands = pd.DataFrame(chart.data)
    before = bands[bands["trigger"].str.startswith("(")].set_index("lane")
    assert bool(before.loc["run-1 · cloud", "assumed"]) and not bool(before.loc["run-2 · cloud", "assumed"])
    assert not bands[~bands["trigger"].str.startswith("(")]["assumed"].any()  # every recorded transition is a fact
