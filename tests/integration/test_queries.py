"""The single reads of the query modules that the dashboard, the review and the demo share, on a real
embedded warehouse."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from routerscope.warehouse.queries import decisions, ingest_offsets, labels
from routerscope.warehouse.sql import QueryWindow
from tests.support.events import decision, iso, label, quality_fallback
from tests.support.golden_day import eid, insert

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)


def test_newest_decision_skips_events_from_the_future_and_shadow_traffic_when_asked(warehouse):
    """routerscope.warehouse.analytics.quality: "one event dated 2100 would hide stale ingest for good" — an event
    dated past
    the horizon is a device clock error and is not the newest decision."""
    assert decisions.newest_event(warehouse) is None  # an empty table: None, not the epoch
    assert ingest_offsets.freshness(warehouse, NOW) == {"newest_event": None, "last_load": None, "rows": 0}
    insert(
        warehouse,
        [
            decision(event_id=eid(1), request_id="r1", event_time=iso(NOW - timedelta(hours=2))),
            decision(event_id=eid(2), request_id="r2", event_time=iso(NOW - timedelta(hours=1)), mode="shadow"),
            decision(event_id=eid(3), request_id="r3", event_time=iso(datetime(2100, 1, 1, tzinfo=UTC))),
        ],
        [],
    )
    assert decisions.newest_event(warehouse) == datetime(2100, 1, 1, tzinfo=UTC)
    assert decisions.newest_event(warehouse, NOW) == NOW - timedelta(hours=1)
    assert decisions.newest_event(warehouse, NOW, live_only=True) == NOW - timedelta(hours=2)
    fresh = ingest_offsets.freshness(warehouse, NOW)
    assert fresh["newest_event"] == NOW - timedelta(hours=1) and fresh["rows"] == 3
    assert fresh["last_load"] is not None and fresh["last_load"].tzinfo is not None


def test_the_replay_sample_skips_fallbacks_an_offline_replay_already_labeled(warehouse):
    """docs/metrics.md §3 label sources: only an `offline_replay` label takes a judged fallback out of the weekly
    replay's sample; a human or validator label does not."""
    fallbacks = [
        quality_fallback(event_id=eid(10 + i), request_id=f"f{i}", event_time=iso(NOW - timedelta(minutes=i + 1)))
        for i in range(3)
    ]
    insert(
        warehouse,
        fallbacks,
        [
            label(request_id="f0", source="offline_replay", event_time=iso(NOW)),
            label(request_id="f1", source="human_review", event_time=iso(NOW)),
        ],
    )
    window = QueryWindow(NOW - timedelta(hours=1), NOW)
    assert sorted(r[0] for r in labels.replay_sample(warehouse, window, limit=10)) == ["f1", "f2"]


def test_the_replay_sample_is_drawn_per_task_type_and_confidence_bucket_with_each_strata_size(warehouse):
    """The sampling design: up to `limit` of each task type × confidence bucket (§6's edges, and no confidence),
    with the stratum's size among the unreplayed fallbacks."""
    confidences = [0.1, 0.2, 0.3, 0.5, 0.9, None]
    fallbacks = [
        quality_fallback(
            event_id=eid(40 + i),
            request_id=f"g{i}",
            event_time=iso(NOW - timedelta(minutes=i + 1)),
            confidence=c,
            threshold=1.0,
            **({} if c is not None else {"fallback_type": "timeout", "reason": "device_timeout"}),
        )
        for i, c in enumerate(confidences)
    ]
    insert(warehouse, fallbacks, [])
    sample = labels.replay_sample(warehouse, QueryWindow(NOW - timedelta(hours=1), NOW), limit=1)
    assert sorted((r[3], r[4]) for r in sample) == [(-1, 1), (0, 3), (1, 1), (3, 1)]
