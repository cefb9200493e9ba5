"""Each schedule asks for a window that has *ended*: evaluated at fixed ticks with
`schedule.evaluate_tick(dg.build_schedule_context(scheduled_execution_time=...))`, the requested
partitions' time windows are checked. (`build_schedule_from_partitioned_job` with `end_offset=1`
asked at 12:05 for the empty window that had just opened, and at 00:15 for today.)"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta

import dagster as dg
import pytest

from routerscope.core.errors import ConfigError
from routerscope.pipelines import timing
from routerscope.pipelines.definitions import defs
from routerscope.pipelines.ingest import ingest_job, ingest_sensor

UTC = UTC
REPOSITORY = defs.get_repository_def()


def requested_windows(schedule_name: str, tick: datetime) -> list[tuple[datetime, datetime]]:
    schedule = defs.resolve_schedule_def(schedule_name)
    partitions = defs.resolve_job_def(schedule.job_name).partitions_def
    with dg.build_schedule_context(scheduled_execution_time=tick, repository_def=REPOSITORY) as context:
        data = schedule.evaluate_tick(context)
    windows = []
    for request in data.run_requests:
        window = partitions.time_window_for_partition_key(request.partition_key)
        windows.append((window.start.astimezone(UTC), window.end.astimezone(UTC)))
    return windows


@pytest.mark.parametrize(
    "tick, start",
    [
        (datetime(2026, 12, 1, 12, 7, tzinfo=UTC), datetime(2026, 12, 1, 12, 0, tzinfo=UTC)),
        (datetime(2026, 12, 1, 0, 2, tzinfo=UTC), datetime(2026, 11, 30, 23, 55, tzinfo=UTC)),  # across midnight
        (datetime(2027, 1, 1, 0, 2, tzinfo=UTC), datetime(2026, 12, 31, 23, 55, tzinfo=UTC)),  # across a year
    ],
)
def test_the_5_minute_schedule_asks_for_the_window_that_ended_a_settle_delay_before_the_tick(tick, start):
    assert requested_windows("metrics_5m_schedule", tick) == [(start, start + timedelta(minutes=5))]
    assert start + timedelta(minutes=5) == tick - timing.SETTLE_5M == tick - timedelta(minutes=2)


def test_the_5_minute_schedule_computes_every_window_of_a_day_once_and_only_after_it_ended():
    # Dagster's own tick iterator (the one its daemon uses) over the schedule's cron string
    from dagster._utils.schedules import cron_string_iterator

    day = datetime(2026, 12, 1, tzinfo=UTC)
    schedule = defs.resolve_schedule_def("metrics_5m_schedule")
    ticks = []
    for tick in cron_string_iterator(day.timestamp(), schedule.cron_schedule, "UTC"):
        if tick >= day + timedelta(days=1):
            break
        ticks.append(tick.astimezone(UTC))
    assert len(ticks) == 288
    windows = [w for tick in ticks for w in requested_windows("metrics_5m_schedule", tick)]
    assert [start for start, _ in windows] == [
        day - timedelta(minutes=5) + k * timedelta(minutes=5) for k in range(288)
    ]
    assert all(end + timing.SETTLE_5M == tick for (_, end), tick in zip(windows, ticks))


@pytest.mark.parametrize(
    "tick, yesterday",
    [
        (datetime(2026, 12, 1, 0, 15, tzinfo=UTC), datetime(2026, 11, 30, tzinfo=UTC)),
        (datetime(2026, 3, 1, 0, 15, tzinfo=UTC), datetime(2026, 2, 28, tzinfo=UTC)),
        (datetime(2027, 1, 1, 0, 15, tzinfo=UTC), datetime(2026, 12, 31, tzinfo=UTC)),
    ],
)
def test_the_daily_schedule_asks_at_00_15_for_yesterday(tick, yesterday):
    assert defs.resolve_schedule_def("metrics_daily_schedule").cron_schedule == "15 0 * * *"
    assert requested_windows("metrics_daily_schedule", tick) == [(yesterday, yesterday + timedelta(days=1))]


def test_everything_runs_by_itself_once_deployed():
    schedules = {s.name: s for s in defs.schedules}
    sensors = {s.name: s for s in defs.sensors}
    assert set(schedules) == {
        "metrics_5m_schedule",
        "metrics_daily_schedule",
        "weekly_replay_job_schedule",
        "loop_step_job_schedule",
    }
    assert set(sensors) == {
        "ingest_sensor",
        "late_events_sensor",
        "late_labels_sensor",
        "alerts_after_metrics",
        "exporter_sensor",
    }
    assert all(s.default_status == dg.DefaultScheduleStatus.RUNNING for s in schedules.values())
    assert all(s.default_status == dg.DefaultSensorStatus.RUNNING for s in sensors.values())
    assert sensors["ingest_sensor"].job_name == "ingest" and sensors["ingest_sensor"].minimum_interval_seconds == 60
    assert sensors["late_events_sensor"].job_name == "metrics_5m_job"
    assert schedules["loop_step_job_schedule"].cron_schedule == "7 * * * *"  # the closed loop's hourly look


def test_ingest_never_overlaps_itself_the_sensor_skips_while_a_run_is_active():
    instance = dg.DagsterInstance.ephemeral()
    instance.add_run(dg.DagsterRun(job_name="ingest", run_id="finished", status=dg.DagsterRunStatus.SUCCESS))
    instance.add_run(dg.DagsterRun(job_name="metrics_5m_job", run_id="other", status=dg.DagsterRunStatus.STARTED))
    with dg.build_sensor_context(instance=instance) as context:
        assert isinstance(ingest_sensor(context), dg.RunRequest)
    for status in (dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED):
        instance.add_run(dg.DagsterRun(job_name="ingest", run_id=f"busy-{status.value}", status=status))
        with dg.build_sensor_context(instance=instance) as context:
            skipped = ingest_sensor(context)
        assert isinstance(skipped, dg.SkipReason) and "one ingest at a time" in skipped.skip_message


@pytest.mark.parametrize("raw, expected", [(None, 60), ("", 60), ("3", 3)])
def test_sensor_intervals_can_be_shortened_for_a_test(raw, expected):
    env = {} if raw is None else {timing.INTERVAL_ENV: raw}
    assert timing.sensor_interval(60, env) == expected


@pytest.mark.parametrize("raw", ["0", "-5", "fast", "1.5"])
def test_a_bad_sensor_interval_is_a_config_error(raw):
    with pytest.raises(ConfigError, match=timing.INTERVAL_ENV):
        timing.sensor_interval(60, {timing.INTERVAL_ENV: raw})


def test_each_new_5_minute_window_triggers_one_alert_evaluation():
    from routerscope.pipelines.alerting import alerts_after_metrics

    instance = dg.DagsterInstance.ephemeral()
    with dg.build_sensor_context(instance=instance, repository_def=REPOSITORY) as context:
        assert not alerts_after_metrics.evaluate_tick(context).run_requests  # no window yet: nothing to evaluate
    instance.report_runless_asset_event(dg.AssetMaterialization("metrics_5m", partition="2026-12-01-12:00"))
    with dg.build_sensor_context(instance=instance, repository_def=REPOSITORY) as context:
        first = alerts_after_metrics.evaluate_tick(context)
        cursor = context.cursor
    assert [r.job_name or "alerts_job" for r in first.run_requests] == ["alerts_job"]
    with dg.build_sensor_context(instance=instance, repository_def=REPOSITORY, cursor=cursor) as context:
        assert not alerts_after_metrics.evaluate_tick(context).run_requests  # the same window: not again


def test_an_ingest_run_whose_worker_was_killed_is_marked_failed_and_the_next_one_starts():
    """A SIGKILLed run worker leaves its run STARTED (the default launcher has no health check): without this,
    the sensor would skip every tick for ever and nothing would load again."""
    from dagster._core.events import EngineEventData

    with dg.instance_for_test() as instance:
        worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "dagster-run-worker"])
        try:
            run = instance.create_run_for_job(defs.resolve_job_def(ingest_job.name), status=dg.DagsterRunStatus.STARTED)
            instance.report_engine_event("Started process for run", run, EngineEventData.in_process(worker.pid))
            with dg.build_sensor_context(instance=instance) as context:
                skipped = ingest_sensor(context)
            assert isinstance(skipped, dg.SkipReason)  # alive: one ingest at a time
            worker.kill()
            worker.wait()
            with dg.build_sensor_context(instance=instance) as context:
                assert isinstance(ingest_sensor(context), dg.RunRequest)
            assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.FAILURE
        finally:
            worker.kill()


@pytest.mark.parametrize("pid", ["not-a-number", "-1", "0"])
def test_an_unreadable_worker_pid_leaves_the_run_alone_and_the_sensor_keeps_skipping(pid):
    """A run whose engine event carries no usable pid must neither crash the sensor (ingest would stop for
    good) nor be failed while it may still run."""
    from dagster._core.events import EngineEventData

    with dg.instance_for_test() as instance:
        run = instance.create_run_for_job(defs.resolve_job_def(ingest_job.name), status=dg.DagsterRunStatus.STARTED)
        instance.report_engine_event(
            "Started process for run", run, EngineEventData(metadata={"pid": dg.MetadataValue.text(pid)})
        )
        with dg.build_sensor_context(instance=instance) as context:
            assert isinstance(ingest_sensor(context), dg.SkipReason)
        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.STARTED
