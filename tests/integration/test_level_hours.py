"""§5's baseline from kept hours (`level_hours`, migration 0021) counts what the direct read of the span counts
(`decisions.level_counts`), for spans of whole hours and not, before and after late events, derived or not."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from routerscope.warehouse.queries import decision_copies, level_hours
from routerscope.warehouse.queries.decisions import level_counts
from routerscope.warehouse.sql import QueryWindow
from tests.support.events import capability_miss, decision, iso, new_id, quality_fallback
from tests.support.golden_day import insert

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 1, tzinfo=UTC)
TASKS = ("intent_classify", "short_reply", "rewrite")


def events(rng: random.Random, n: int, span: timedelta) -> list[dict]:
    """`n` decisions over `span` from T0: live and shadow, L0, L1 and L2, some re-delivered as they were."""
    out = []
    for i in range(n):
        t = iso(T0 + timedelta(seconds=rng.randrange(int(span.total_seconds()))))
        kind = rng.choice(("l0", "l0", "l1", "capability", "quality", "shadow"))
        common = {"event_id": new_id(), "event_time": t, "task_type": rng.choice(TASKS), "request_id": f"r{i}"}
        if kind == "capability":
            event = capability_miss(**common)
        elif kind == "quality":
            event = quality_fallback(**common)
        elif kind == "l1":
            event = decision(**common, degrade_level=1, attempts=[{"level": 1, "outcome": "ok", "latency_ms": 9.0}])
        else:
            event = decision(**common, mode="shadow" if kind == "shadow" else "live")
        out.append(event)
        if rng.random() < 0.1:
            out.append(dict(event))  # a re-delivery: FINAL folds it
    return out


def kept_rows(client) -> int:
    return client.query(f"SELECT count() FROM {level_hours.TABLE}").result_rows[0][0]


def windows(rng: random.Random) -> list[QueryWindow]:
    """Whole hours, a 5-minute window's baseline (mid-hour at both ends), spans under an hour, beyond the data."""
    out = [QueryWindow(T0, T0 + timedelta(days=3)), QueryWindow(T0 - timedelta(hours=5), T0 + timedelta(days=4))]
    for _ in range(8):
        start = T0 + timedelta(minutes=5 * rng.randrange(12 * 24 * 3))
        length = rng.choice((timedelta(minutes=20), timedelta(hours=1), timedelta(hours=7), timedelta(days=2)))
        out.append(QueryWindow(start, start + length))
    return out


def test_kept_hours_count_what_the_direct_read_counts_and_late_events_are_counted_again(warehouse):
    rng = random.Random(7)
    insert(warehouse, events(rng, 600, timedelta(days=3)), [])
    assert decision_copies.derive(warehouse)
    checked = windows(rng)
    for window in checked:
        assert level_hours.baseline_level_counts(warehouse, window) == level_counts(warehouse, window), window
    kept = kept_rows(warehouse)
    assert kept > 0
    for window in checked:  # from the kept hours now: nothing counted again
        assert level_hours.baseline_level_counts(warehouse, window) == level_counts(warehouse, window), window
    assert kept_rows(warehouse) == kept

    # late events in kept hours: pending first (not derived), then derived; a re-delivery of a counted one
    late = events(rng, 40, timedelta(days=3))
    insert(warehouse, late, [])
    for window in checked:
        assert level_hours.baseline_level_counts(warehouse, window) == level_counts(warehouse, window), window
    assert kept_rows(warehouse) == kept  # the hours holding rows not derived yet are counted, not kept
    decision_copies.derive(warehouse)
    insert(warehouse, late[:5], [])
    decision_copies.derive(warehouse)
    for window in checked:
        assert level_hours.baseline_level_counts(warehouse, window) == level_counts(warehouse, window), window
    whole = QueryWindow(T0, T0 + timedelta(days=3))
    assert level_hours.baseline_level_counts(warehouse, whole)[None].requests > 0


def test_nothing_is_kept_before_any_derivation_and_an_empty_span_counts_nothing(warehouse):
    window = QueryWindow(T0, T0 + timedelta(days=1))
    assert level_hours.baseline_level_counts(warehouse, window) == {}
    insert(warehouse, [decision(event_id=new_id(), event_time=iso(T0 + timedelta(hours=2)))], [])
    assert level_hours.baseline_level_counts(warehouse, window) == level_counts(warehouse, window)
    assert kept_rows(warehouse) == 0
    assert level_hours.baseline_level_counts(warehouse, window)[None].requests == 1
