"""Copies of one event under different event_times (a client re-sending it the next day) count once in the
metrics: on the day of the first copy, never again within the look-back (docs/metrics.md, "each event_id
counts once": the 7-day look-back, and what happens beyond it). Produced to a real broker and loaded by
`routerscope load`, as a user's events would be; every number below is counted by hand from the events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from routerscope.core import broker
from routerscope.core.procs import free_port
from routerscope.warehouse.analytics.metrics import compute
from routerscope.warehouse.client import open_warehouse
from tests.support.events import decision, dumps, iso, quality_fallback
from tests.support.home import clean_env, run_cli, settings_for

pytestmark = pytest.mark.integration

D1 = datetime(2026, 11, 28, tzinfo=UTC)
D2 = D1 + timedelta(days=1)
DAY = timedelta(days=1)


def eid(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012d}"


def at(day: datetime, hours: float) -> str:
    return iso(day + timedelta(hours=hours))


# X: a quality fallback on D1 10:00, re-sent with the same event_id and contents dated D2 10:00.
X = quality_fallback(event_id=eid(1), request_id="x", session_id="sx", event_time=at(D1, 10))
X_RESENT = {**X, "event_time": at(D2, 10)}
# Y: served on the device, D2 11:00, delivered twice byte for byte (a redelivery: FINAL folds it).
Y = decision(event_id=eid(2), request_id="y", session_id="sy", event_time=at(D2, 11))
# Z: served on the device, D2 12:00, re-sent 7 days later (within the look-back); V: the same at 14:00,
# re-sent 8 days later (beyond it).
Z = decision(event_id=eid(3), request_id="z", session_id="sz", event_time=at(D2, 12))
Z_7_DAYS_LATER = {**Z, "event_time": at(D2 + 7 * DAY, 12)}
V = decision(event_id=eid(5), request_id="v", session_id="sv", event_time=at(D2, 14))
V_8_DAYS_LATER = {**V, "event_time": at(D2 + 8 * DAY, 14)}
# W: a quality fallback on D2 13:00 re-sent the same day at 15:00: two copies inside one window.
W = quality_fallback(event_id=eid(4), request_id="w", session_id="sw", event_time=at(D2, 13))
W_RESENT = {**W, "event_time": at(D2, 15)}

EVENTS = [X, X_RESENT, Y, Y, Z, Z_7_DAYS_LATER, V, V_8_DAYS_LATER, W, W_RESENT]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """A warehouse that `routerscope load` filled from a real broker with EVENTS; its settings."""
    home = tmp_path_factory.mktemp("duplicates") / "home"
    home.mkdir()
    settings = settings_for(home)
    broker.start(settings, port=free_port())
    try:
        env = clean_env(home)
        (home / "decisions.jsonl").write_bytes(b"\n".join(dumps(e) for e in EVENTS) + b"\n")
        done = run_cli("produce", str(home / "decisions.jsonl"), "--topic", "decisions", "--quiet", env=env)
        assert done.returncode == 0, done.stderr
        done = run_cli("load", "--idle-timeout", "0.5", env=env)
        assert done.returncode == 0, done.stderr
    finally:
        broker.stop(settings)
    with open_warehouse(settings) as client:  # every copy is stored: the metrics, not the loader, count once
        assert client.query("SELECT count() FROM routerscope.decisions FINAL").result_rows[0][0] == len(EVENTS) - 1
    return settings


def overall(settings, start: datetime, end: datetime) -> dict:
    with open_warehouse(settings) as client:
        return compute(client, start, end)["overall"]


def test_a_copy_dated_the_next_day_counts_on_the_day_of_its_first_copy_only(loaded):
    """Issue: X counted on D1 and again on D2. D1 holds X alone: 1 request, 1 device-entered, 1 fallback.
    D2 holds X's copy (left out: its first copy is on D1), Y (twice, one event), Z, V, and W with its same-day
    copy (one event): 4 requests, all device-entered, 1 fallback (W) → 1/4."""
    d1 = overall(loaded, D1, D2)
    assert (d1["requests"], d1["device_entered"], d1["fallback_rate"]) == (1, 1, 1.0)
    d2 = overall(loaded, D2, D2 + DAY)
    assert (d2["requests"], d2["device_entered"], d2["sessions"]) == (4, 4, 4)
    assert d2["fallback_rate"] == 1 / 4 and d2["naive_fallback_rate"] == 1 / 4


def test_a_window_holding_both_copies_counts_the_event_once(loaded):
    """[D1, D2 + 1 day) holds X and its copy, Y, Z, V, W and its copy: 5 events (X, Y, Z, V, W), 2 fallbacks."""
    both = overall(loaded, D1, D2 + DAY)
    assert (both["requests"], both["sessions"]) == (5, 5)
    assert both["fallback_rate"] == 2 / 5


def test_the_five_minute_window_of_a_later_copy_counts_nothing(loaded):
    """The metric windows the pipeline computes every 5 minutes: X's copy at D2 10:00 is its window's only
    event, and it is not counted (an empty denominator: null, not 0); W's first copy counts at 13:00, its
    copy not at 15:00."""
    start = D2 + timedelta(hours=10)
    copy_only = overall(loaded, start, start + timedelta(minutes=5))
    assert (copy_only["requests"], copy_only["fallback_rate"]) == (0, None)
    first = overall(loaded, D2 + timedelta(hours=13), D2 + timedelta(hours=13, minutes=5))
    later = overall(loaded, D2 + timedelta(hours=15), D2 + timedelta(hours=15, minutes=5))
    assert (first["requests"], first["fallback_rate"]) == (1, 1.0)
    assert (later["requests"], later["fallback_rate"]) == (0, None)


def test_a_copy_within_the_look_back_is_left_out_and_one_beyond_it_counts_again(loaded):
    """Z's copy 7 days after its first copy lies within the 7 days before its window: left out. V's copy 8
    days after does not: beyond the look-back it counts again, as docs/metrics.md says (and the data-quality
    check, looking back as far, does not flag it either)."""
    seventh = overall(loaded, D2 + 7 * DAY, D2 + 8 * DAY)
    eighth = overall(loaded, D2 + 8 * DAY, D2 + 9 * DAY)
    assert seventh["requests"] == 0
    assert (eighth["requests"], eighth["sessions"]) == (1, 1)
