"""The metric assets materialize partition windows into the metric tables (dg.materialize on an
ephemeral instance), and late labels trigger a recompute of exactly the days they touch."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import dagster as dg
import pytest

from routerscope.pipelines.metrics import late_labels_sensor, metrics_5m, metrics_daily
from routerscope.pipelines.resources import RouterscopeResource
from routerscope.warehouse.client import open_warehouse
from routerscope.warehouse.migrate import migrate
from tests.support.events import label
from tests.support.golden_day import DECISION_EVENTS, LABEL_EVENTS, A, B, expected_overall_a, insert
from tests.support.home import settings_for

pytestmark = pytest.mark.integration


@pytest.fixture
def loaded(home):
    settings = settings_for(home)
    with open_warehouse(settings) as client:
        migrate(client)
        insert(client, DECISION_EVENTS, LABEL_EVENTS)
    return settings, {"routerscope": RouterscopeResource(home=str(home))}


def rows(settings, sql, **parameters):
    with open_warehouse(settings) as client:
        result = client.query(sql, parameters=parameters)
        return [dict(zip(result.column_names, r)) for r in result.result_rows]


def test_daily_partition_materializes_its_window_into_the_metric_tables(loaded):
    settings, resources = loaded
    result = dg.materialize(
        [metrics_daily], partition_key="2026-11-29", resources=resources, instance=dg.DagsterInstance.ephemeral()
    )
    assert result.success
    stored = {
        r["task_type"]: r for r in rows(settings, "SELECT * FROM routerscope.metric_windows FINAL WHERE grain = '1d'")
    }
    assert set(stored) == {"", A, B}
    a = stored[A]
    assert a["window_start"].replace(tzinfo=UTC) == datetime(2026, 11, 29, tzinfo=UTC)
    assert (a["requests"], a["device_entered"], a["false_fallback_labeled"]) == (6, 4, 2)
    assert a["fallback_rate"] == 0.75 and a["naive_fallback_rate"] == pytest.approx(4 / 6)
    assert a["l2_l3_drifting"] is True
    assert json.loads(a["metrics"])["route_accuracy"] == pytest.approx(expected_overall_a()["route_accuracy"])
    assert stored[B]["fallback_rate"] is None  # null, not 0
    calibration = rows(settings, "SELECT task_type, monotonic FROM routerscope.calibration_windows FINAL")
    assert calibration == [{"task_type": A, "monotonic": False}]


def test_five_minute_partition_covers_only_its_window(loaded):
    settings, resources = loaded
    # A1 is at 01:00:00.000 exactly (in [01:00, 01:05)); nothing else of the fixture is in it
    result = dg.materialize(
        [metrics_5m], partition_key="2026-11-29-01:00", resources=resources, instance=dg.DagsterInstance.ephemeral()
    )
    assert result.success
    stored = rows(
        settings,
        "SELECT task_type, requests, window_end FROM routerscope.metric_windows FINAL "
        "WHERE grain = '5m' ORDER BY task_type",
    )
    assert [(r["task_type"], r["requests"]) for r in stored] == [("", 1), (A, 1)]
    assert stored[0]["window_end"].replace(tzinfo=UTC) == datetime(2026, 11, 29, 1, 5, tzinfo=UTC)


def test_late_labels_recompute_the_days_they_touch(loaded):
    settings, resources = loaded
    instance = dg.DagsterInstance.ephemeral()
    dg.materialize([metrics_daily], partition_key="2026-11-29", resources=resources, instance=instance)

    # First evaluation sees the fixture's labels: they label decisions of 2026-11-29 only.
    with dg.build_sensor_context(instance=instance, resources=resources) as context:
        first = late_labels_sensor(context)
        cursor = context.cursor
    assert [r.partition_key for r in first.run_requests if r.run_key.startswith("labels-")] == ["2026-11-29"]
    with dg.build_sensor_context(instance=instance, resources=resources, cursor=cursor) as context:
        assert isinstance(late_labels_sensor(context), dg.SkipReason)

    # A late human review of a1 (served on device) outranks its validator label and says acceptable:
    # missed fallbacks go from 1 of 1 to 0 of 1 once the day is recomputed.
    with open_warehouse(settings) as client:
        insert(
            client,
            [],
            [
                label(
                    request_id="a1",
                    source="human_review",
                    device_acceptable=True,
                    event_time="2026-11-30T09:00:00.000Z",
                )
            ],
        )
    with dg.build_sensor_context(instance=instance, resources=resources, cursor=cursor) as context:
        late = late_labels_sensor(context)
    assert [r.partition_key for r in late.run_requests] == ["2026-11-29"]
    dg.materialize([metrics_daily], partition_key="2026-11-29", resources=resources, instance=instance)
    a = {
        r["task_type"]: r for r in rows(settings, "SELECT * FROM routerscope.metric_windows FINAL WHERE grain = '1d'")
    }[A]
    assert (a["missed_fallback_rate"], a["missed_fallback_labeled"]) == (0.0, 1)


def test_late_events_recompute_the_finished_5_minute_windows_they_arrive_in(home):
    """A window is recomputed when decisions or labels arrive for it after its scheduled run (its
    end + the settle delay), up to 2 hours back; the open window and older history are left alone."""
    from datetime import timedelta

    from routerscope.pipelines.metrics import late_events_sensor
    from routerscope.pipelines.timing import floor_5m
    from tests.support.events import decision, iso, new_id

    settings = settings_for(home)
    resources = {"routerscope": RouterscopeResource(home=str(home))}
    now = datetime.now(UTC)
    late = floor_5m(now) - timedelta(minutes=30)  # ended 25 minutes ago: its scheduled run is long past
    at = {
        "late": late + timedelta(minutes=1),
        "open": now - timedelta(seconds=1),
        "old": late - timedelta(hours=3),
        "later-1": late + timedelta(minutes=10),
        "later-2": late + timedelta(minutes=16),
    }  # two consecutive windows
    with open_warehouse(settings) as client:
        migrate(client)
        insert(client, [decision(event_id=new_id(), request_id=f"r-{k}", event_time=iso(t)) for k, t in at.items()], [])
    instance = dg.DagsterInstance.ephemeral()
    with dg.build_sensor_context(instance=instance, resources=resources) as context:
        first = late_events_sensor(context)
        cursor = context.cursor
    key = lambda t: t.strftime("%Y-%m-%d-%H:%M")  # noqa: E731
    assert [r.partition_key for r in first.run_requests] == [key(late), None]
    ranged = first.run_requests[1].tags  # consecutive windows: one run for the range
    assert (ranged["dagster/asset_partition_range_start"], ranged["dagster/asset_partition_range_end"]) == (
        key(late + timedelta(minutes=10)),
        key(late + timedelta(minutes=15)),
    )
    with dg.build_sensor_context(instance=instance, resources=resources, cursor=cursor) as context:
        assert isinstance(late_events_sensor(context), dg.SkipReason)  # nothing new: nothing again

    # A label for the late window's request arrives: the window is recomputed, with a new run key.
    with open_warehouse(settings) as client:
        insert(client, [], [label(request_id="r-late", event_time=iso(now))])
    with dg.build_sensor_context(instance=instance, resources=resources, cursor=cursor) as context:
        again = late_events_sensor(context)
    assert [r.partition_key for r in again.run_requests] == [late.strftime("%Y-%m-%d-%H:%M")]
    assert again.run_requests[0].run_key != first.run_requests[0].run_key


def test_yesterday_is_computed_once_when_its_scheduled_run_was_missed(home):
    """The daemon was down at 00:15 (or started later): from 01:00 the late-labels sensor asks for
    yesterday once, unless yesterday was already computed after it ended."""
    from routerscope.pipelines.timing import DAILY_CATCH_UP_GRACE, SETTLE_DAILY, day_key, finished_day

    now = datetime.now(UTC)
    yesterday, today = finished_day(now)
    if now < today + SETTLE_DAILY + DAILY_CATCH_UP_GRACE:
        pytest.skip("between 00:00 and 01:00 UTC yesterday's scheduled run is not missed yet")
    settings, resources = settings_for(home), {"routerscope": RouterscopeResource(home=str(home))}
    with open_warehouse(settings) as client:
        migrate(client)
    instance = dg.DagsterInstance.ephemeral()
    with dg.build_sensor_context(instance=instance, resources=resources) as context:
        first = late_labels_sensor(context)
        cursor = context.cursor
    assert [(r.run_key, r.partition_key) for r in first.run_requests] == [
        (f"catch-up-{day_key(yesterday)}", day_key(yesterday))
    ]
    with dg.build_sensor_context(instance=instance, resources=resources, cursor=cursor) as context:
        assert isinstance(late_labels_sensor(context), dg.SkipReason)  # once
    dg.materialize([metrics_daily], partition_key=day_key(yesterday), resources=resources, instance=instance)
    with dg.build_sensor_context(instance=instance, resources=resources) as context:
        assert isinstance(late_labels_sensor(context), dg.SkipReason)  # computed after it ended: nothing to catch up


def test_a_range_of_5_minute_partitions_runs_as_one_run_and_stores_each_window(loaded):
    """A backfill (or the demo's span) is one run: every window of the range stored on its own."""
    settings, resources = loaded
    result = dg.materialize(
        [metrics_5m],
        resources=resources,
        instance=dg.DagsterInstance.ephemeral(),
        tags={
            "dagster/asset_partition_range_start": "2026-11-29-00:55",
            "dagster/asset_partition_range_end": "2026-11-29-01:05",
        },
    )
    assert result.success
    [materialization] = [e.event_specific_data.materialization for e in result.get_asset_materialization_events()][:1]
    stored = rows(
        settings,
        "SELECT window_start, requests FROM routerscope.metric_windows FINAL "
        "WHERE grain = '5m' AND task_type = '' ORDER BY window_start",
    )
    assert [(r["window_start"].strftime("%H:%M"), r["requests"]) for r in stored] == [
        ("00:55", 0),
        ("01:00", 1),
        ("01:05", 0),
    ]
    assert materialization.metadata["windows"].value == 3
