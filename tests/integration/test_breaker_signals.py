"""Breaker alerts as of each window (docs/metrics.md "Pipeline signals per window"), from `breaker_events` in the real
warehouse: a history replay and a late alert run see the same outage as a live one; the demo's simulated
cloud outage raises `cloud_breaker_open` for its windows and resolves after. The signal used to read each
breaker's latest state, so the demo's 12-minute outage raised nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from routerscope.contract.validation import BREAKERS
from routerscope.core import names
from routerscope.warehouse.analytics import alerting
from routerscope.warehouse.client import open_warehouse
from routerscope.warehouse.ingest.rows import FACTS
from routerscope.warehouse.migrate import migrate
from tests.support.events import breaker, dumps, iso
from tests.support.home import settings_for

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
STEP = timedelta(minutes=5)


def store(client, events: list[dict]) -> None:
    """Breaker events as the loader stores them (contract-checked, the loader's column builder)."""
    parsed = []
    for e in events:
        event, rules = BREAKERS.parse(dumps(e))
        assert not rules, (e, rules)
        parsed.append(event)
    table, columns, build = FACTS[names.TOPIC_BREAKERS]
    offsets = list(range(len(parsed)))
    client.insert(
        f"routerscope.{table}",
        build(parsed, names.TOPIC_BREAKERS, [0] * len(parsed), offsets),
        column_names=list(columns),
        column_oriented=True,
    )


def cloud(seq: int, minute: float, from_state: str, to_state: str) -> dict:
    return breaker(
        instance_id="router-a",
        boundary="cloud",
        seq=seq,
        event_time=iso(T0 + timedelta(minutes=minute)),
        from_state=from_state,
        to_state=to_state,
    )


def firing(evaluation) -> list[str]:
    return sorted(a.alert_key for a in evaluation.firing)


def test_an_outage_between_two_runs_alerts_live_late_and_over_history(warehouse):
    """The cloud breaker opened at 12:06 and closed at 12:08 (inside the 12:05 window), then opened again at
    12:21 and stayed open until 12:33 (the 12:20, 12:25 and 12:30 windows). A device breaker elsewhere
    never changed."""
    store(
        warehouse,
        [
            cloud(1, 6, "closed", "open"),
            cloud(2, 7.5, "open", "half_open"),
            cloud(3, 8, "half_open", "closed"),
            cloud(4, 21, "closed", "open"),
            cloud(5, 26, "open", "half_open"),
            cloud(6, 26.1, "half_open", "open"),
            cloud(7, 33, "open", "half_open"),
            cloud(8, 33.2, "half_open", "closed"),
        ],
    )
    # history replayed as of each window's end + 1 minute: every later transition is already stored
    seen = {}
    for k in range(9):
        evaluation = alerting.run(warehouse, now=T0 + (k + 1) * STEP + timedelta(minutes=1))
        seen[k] = firing(evaluation)
        if k == 1:
            (alert,) = evaluation.firing
            assert (alert.rule, alert.first_seen, alert.severity) == ("cloud_breaker_open", T0 + STEP, "ticket")
    assert [k for k, keys in seen.items() if keys == ["cloud_breaker_open|"]] == [1, 4, 5, 6]
    # two episodes: the short one (12:05 window) and the long one (12:20 → 12:35)
    episodes = warehouse.query(
        "SELECT first_seen, last_seen, status FROM routerscope.alerts FINAL WHERE rule = 'cloud_breaker_open' "
        "ORDER BY first_seen"
    ).result_rows
    assert [(f.replace(tzinfo=UTC), s) for f, _, s in episodes] == [
        (T0 + STEP, "resolved"),
        (T0 + 4 * STEP, "resolved"),
    ]
    assert episodes[1][1].replace(tzinfo=UTC) == T0 + 7 * STEP  # the end of the last open window


def test_a_late_alert_run_still_sees_the_window_the_breaker_was_open_in(home):
    """One run at 12:09, after the breaker had opened (12:06) and closed (12:08): the latest state is closed,
    but the 12:05 window had it open; the next run resolves it."""
    with open_warehouse(settings_for(home)) as client:
        migrate(client)
        store(
            client,
            [cloud(1, 6, "closed", "open"), cloud(2, 7, "open", "half_open"), cloud(3, 8, "half_open", "closed")],
        )
        late = alerting.run(client, now=T0 + 2 * STEP - timedelta(minutes=1))  # 12:09: the 12:00 window ended
        assert firing(late) == []
        on_time = alerting.run(client, now=T0 + 2 * STEP + timedelta(minutes=3))  # 12:13: the 12:05 window ended
        assert firing(on_time) == ["cloud_breaker_open|"]
        after = alerting.run(client, now=T0 + 3 * STEP + timedelta(minutes=3))
        assert firing(after) == [] and [a.alert_key for a in after.resolved] == ["cloud_breaker_open|"]


def test_the_demo_cloud_outage_raises_cloud_breaker_open_for_its_windows_and_resolves_after(warehouse):
    """The SIMULATED fleet's cloud outage (20–30 % of a two-hour span: 12:24 → 12:36) through the real router:
    its breaker events, numbered per breaker, chain; alerts as of each window's end (as the demo runs
    them) fire for the outage's windows and resolve after."""
    from routerscope.router.sim.fleet import Fleet, Incidents

    events = []
    fleet = Fleet(
        seed=7,
        start=T0,
        span=timedelta(hours=2),
        incidents=Incidents(cloud_outage=(0.20, 0.30), thermal=(2.0, 2.0), bad_threshold=(2.0, 2.0)),
        on_breaker_event=events.append,
    )
    fleet.run(4000)
    cloud_events = [e for e in events if e.boundary == "cloud"]
    assert cloud_events and [e.seq for e in cloud_events] == list(range(1, len(cloud_events) + 1))
    assert all(b.from_state == a.to_state for a, b in zip(cloud_events, cloud_events[1:]))
    import msgspec

    store(warehouse, [msgspec.json.decode(e.to_json()) for e in events])
    fired_at, resolved_at = [], []
    for k in range(24):
        evaluation = alerting.run(warehouse, now=T0 + (k + 1) * STEP + timedelta(minutes=1))
        fired_at += [k for a in evaluation.fired if a.rule == "cloud_breaker_open"]
        resolved_at += [k for a in evaluation.resolved if a.rule == "cloud_breaker_open"]
    opened = min(e.event_time for e in cloud_events if e.to_state == "open")
    closed = max(e.event_time for e in cloud_events if e.to_state == "closed")
    assert T0 + timedelta(minutes=24) <= opened < T0 + timedelta(minutes=36) < closed + timedelta(minutes=5)
    first, last = (opened - T0) // STEP, (closed - T0) // STEP  # the windows of the first open and the last close
    # one episode: fired as of the window the breaker first opened in, resolved after the window it closed in
    assert fired_at == [first] and resolved_at == [last + 1]
