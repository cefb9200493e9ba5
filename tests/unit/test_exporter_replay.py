"""The exporter's replay clock (`routerscope exporter --replay-from TIME --replay-speed X`) under hostile speeds."""

import time
from datetime import UTC, datetime, timedelta

import pytest

from routerscope.warehouse.analytics.exporter import Replay, worker_request

WALL = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize("speed", [1e300, float("inf")])
def test_a_speed_past_any_time_range_serves_the_present_instead_of_overflowing(speed):
    replay = Replay(WALL - timedelta(days=365), speed, started=time.monotonic() - 1)
    assert replay.as_of(WALL) == WALL


def test_a_replay_runs_from_its_start_at_its_speed_until_it_reaches_the_present():
    replay = Replay(WALL - timedelta(hours=1), 60.0, started=time.monotonic() - 10)  # 10 s at 60×: 10 minutes in
    served = replay.as_of(WALL)
    assert WALL - timedelta(minutes=50, seconds=5) < served < WALL - timedelta(minutes=49, seconds=55)
    assert Replay(WALL + timedelta(days=30), 1.0).as_of(WALL) == WALL  # a start in the future: the present


@pytest.mark.parametrize("speed", [0.0, -1.0, float("nan")])
def test_a_speed_that_is_not_positive_is_refused(speed):
    with pytest.raises(ValueError, match="positive"):
        Replay(WALL, speed)


def test_a_read_request_without_a_time_keeps_its_histograms_key():
    """The read worker's request line is `<time>\t<histograms key>`: after the first read of a live exporter the
    time is empty and the key is not, so the line starts with its tab. Stripped whole, the key was read as a time,
    the worker died on it and every later scrape reported "the exporter's read worker did not answer"."""
    assert worker_request("\t3f2a-17\n") == (None, "3f2a-17")
    assert worker_request("\t\n") == (None, "")
    assert worker_request("2026-12-07T03:00:00+00:00\tk\n") == (datetime(2026, 12, 7, 3, tzinfo=UTC), "k")
    assert worker_request("2026-12-07T03:00:00+00:00\t\n") == (datetime(2026, 12, 7, 3, tzinfo=UTC), "")


def test_a_replay_until_a_future_moment_runs_past_the_present_at_its_speed_and_stays_there():
    """--replay-until: time moving on after the data stopped (the drill of a stale window)."""
    replay = Replay(WALL, 60.0, started=time.monotonic() - 10, until=WALL + timedelta(hours=1))
    served = replay.as_of(WALL)  # 10 s at 60×: 10 minutes past the present
    assert WALL + timedelta(minutes=9, seconds=55) < served < WALL + timedelta(minutes=10, seconds=5)
    done = Replay(WALL, 60.0, started=time.monotonic() - 3600, until=WALL + timedelta(hours=1))
    assert done.as_of(WALL) == WALL + timedelta(hours=1)  # reached: it stays at `until`, never beyond


def test_a_replay_until_a_past_moment_stops_there_instead_of_catching_up():
    replay = Replay(WALL - timedelta(hours=2), float("inf"), until=WALL - timedelta(hours=1))
    assert replay.as_of(WALL) == WALL - timedelta(hours=1)
