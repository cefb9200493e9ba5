"""Metric assets: docs/metrics.md per 5-minute window (on-call) and per day (tuning), materialized into
`metric_windows` / `calibration_windows`; schedules compute each window once it has ended (plus a
settle delay), and sensors recompute the windows that late data touches.

Thin glue over `routerscope.pipelines.core.metrics_window`; each run computes only its own partition's window.
When and why: `routerscope.pipelines.timing`."""

import json
import warnings
from datetime import datetime

import dagster as dg

from routerscope.core.errors import WarehouseError
from routerscope.core.timeutil import UTC
from routerscope.pipelines import core, timing
from routerscope.pipelines.ingest import TABLE_ASSETS
from routerscope.pipelines.partitions import DAILY, FIVE_MINUTES
from routerscope.pipelines.quality import data_quality
from routerscope.pipelines.resources import RouterscopeResource
from routerscope.warehouse.queries import metric_windows

FACTS = [TABLE_ASSETS["decisions"], TABLE_ASSETS["labels"]]
_DEFAULTS = core.MetricParams()
# A sensor waits at most this long for the embedded warehouse (a long ingest run may hold it); it
# skips the tick rather than outlive its evaluation timeout, and looks again at the next one.
SENSOR_WAREHOUSE_WAIT_S = 20.0


class MetricsConfig(dg.Config):
    baseline_days: float = _DEFAULTS.baseline_days
    target: float = _DEFAULTS.target
    min_n: int = _DEFAULTS.min_n


def _materialize(
    context: dg.AssetExecutionContext, config: MetricsConfig, routerscope: RouterscopeResource, grain: str
) -> dg.MaterializeResult:
    """Each partition of the run (one, or a range in a single run) computed and stored on its own window."""
    partitions = FIVE_MINUTES if grain == "5m" else DAILY
    params = core.MetricParams(baseline_days=config.baseline_days, target=config.target, min_n=config.min_n)
    settings = routerscope.settings()
    rows = requests = 0
    overall: dict = {}
    with core.unit_of_work(settings, purpose=f"metrics {grain}"):  # one open warehouse for a range of partitions
        for key in context.partition_keys:
            window = partitions.time_window_for_partition_key(key)
            start, end = window.start.astimezone(UTC), window.end.astimezone(UTC)
            result, written = core.metrics_window(settings, start, end, params, store_grain=grain)
            overall, rows, requests = result["overall"], rows + written, requests + result["overall"]["requests"]
    whole = context.partition_time_window
    rate = lambda v: dg.MetadataValue.float(v) if v is not None else None  # noqa: E731
    metadata: dict[str, str | int | bool | dg.MetadataValue | None] = {
        "window": f"[{whole.start.astimezone(UTC).isoformat()}, {whole.end.astimezone(UTC).isoformat()})",
        "windows": len(context.partition_keys),
        "rows": rows,
        "requests": requests,
    }
    if len(context.partition_keys) == 1:  # the headline of the one window
        metadata.update(
            fallback_rate=rate(overall["fallback_rate"]),
            naive_fallback_rate=rate(overall["naive_fallback_rate"]),
            l2_l3_drifting=overall["l2_l3_drift"]["drifting"],
        )
    return dg.MaterializeResult(metadata=metadata)


def _metrics_5m(context: dg.AssetExecutionContext, config: MetricsConfig, routerscope: RouterscopeResource):
    return _materialize(context, config, routerscope, "5m")


# A range of 5-minute partitions (a backfill, the demo's span) runs as one run: one process, one open
# warehouse. (`backfill_policy` is marked beta in Dagster 1.13; its warning would reach every command.)
with warnings.catch_warnings():
    warnings.simplefilter("ignore", dg.BetaWarning)
    metrics_5m = dg.asset(
        name="metrics_5m",
        partitions_def=FIVE_MINUTES,
        deps=FACTS,
        group_name="metrics",
        backfill_policy=dg.BackfillPolicy.single_run(),
        description="docs/metrics.md per 5-minute window (on-call view, alerts).",
    )(_metrics_5m)


@dg.asset(
    partitions_def=DAILY,
    deps=[*FACTS, data_quality],
    group_name="metrics",
    description="docs/metrics.md per day, with calibration (weekly tuning view). Waits for the day's "
    "blocking data-quality checks when both run together.",
)
def metrics_daily(context: dg.AssetExecutionContext, config: MetricsConfig, routerscope: RouterscopeResource):
    return _materialize(context, config, routerscope, "1d")


# In-process: chDB is one process at a time. Partitioning comes from the selected asset.
metrics_5m_job = dg.define_asset_job("metrics_5m_job", selection=[metrics_5m], executor_def=dg.in_process_executor)
# The day's data-quality suites run first; a blocking failure skips the day's metrics.
metrics_daily_job = dg.define_asset_job(
    "metrics_daily_job", selection=[data_quality, metrics_daily], executor_def=dg.in_process_executor
)


# Not `build_schedule_from_partitioned_job`: with `end_offset=1` it targets the window still open
# (at 12:05 the empty 12:05 window; at 00:15 today). These target the last *finished* window.
def _finished_window_schedule(name, cron, job, finished, key_of, description) -> dg.ScheduleDefinition:
    """A schedule that asks for the window that finished at its tick (`finished(tick)` → (start, end))."""

    @dg.schedule(
        name=name,
        cron_schedule=cron,
        job=job,
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description=description,
    )
    def _schedule(context: dg.ScheduleEvaluationContext):
        start, _ = finished(context.scheduled_execution_time)
        key = key_of(start)
        return dg.RunRequest(run_key=f"scheduled-{key}", partition_key=key)

    return _schedule


metrics_5m_schedule = _finished_window_schedule(
    "metrics_5m_schedule",
    timing.METRICS_5M_CRON,
    metrics_5m_job,
    timing.finished_5m_window,
    timing.five_minute_key,
    "Each 5-minute window, 2 minutes after it ends (the settle delay for late events).",
)
metrics_daily_schedule = _finished_window_schedule(
    "metrics_daily_schedule",
    timing.METRICS_DAILY_CRON,
    metrics_daily_job,
    timing.finished_day,
    timing.day_key,
    "Yesterday's data-quality suites, then its daily metrics, at 00:15 UTC.",
)


def _cursor_time(cursor: str | None) -> datetime:
    return datetime.fromisoformat(cursor) if cursor else datetime(1970, 1, 1, tzinfo=UTC)


@dg.sensor(
    job=metrics_5m_job,
    minimum_interval_seconds=timing.sensor_interval(timing.LATE_EVENTS_INTERVAL_S),
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Late data: recompute the 5-minute windows (of the last 2 hours) that received decisions "
    "or labels after their scheduled computation.",
)
def late_events_sensor(context: dg.SensorEvaluationContext, routerscope: RouterscopeResource):
    since = _cursor_time(context.cursor)
    now = datetime.now(UTC)
    horizon = max(timing.floor_5m(now - timing.LATE_HORIZON), FIVE_MINUTES.start)
    late_after = timing.FIVE_MINUTES + timing.SETTLE_5M
    try:
        with routerscope.warehouse("late data sensor", SENSOR_WAREHOUSE_WAIT_S) as client:
            starts, newest = metric_windows.windows_with_late_data(
                client, since, horizon, int(late_after.total_seconds())
            )
    except WarehouseError as exc:
        return dg.SkipReason(f"warehouse busy, trying again at the next tick: {exc}")
    newest = timing.utc(newest)
    if newest is None or newest <= since:
        return dg.SkipReason(f"nothing arrived since {since.isoformat()}")
    context.update_cursor(newest.isoformat())
    return dg.SensorResult(
        run_requests=[_window_run(first, last, f"late-{newest.isoformat()}") for first, last in _ranges(starts)]
    )


def _ranges(starts: list) -> list[tuple[datetime, datetime]]:
    """Consecutive 5-minute window starts grouped into (first, last) ranges."""
    ranges: list[list] = []
    for start in sorted(timing.utc(s) for s in starts):
        if ranges and start - ranges[-1][1] == timing.FIVE_MINUTES:
            ranges[-1][1] = start
        else:
            ranges.append([start, start])
    return [(first, last) for first, last in ranges]


def _window_run(first: datetime, last: datetime, why: str) -> dg.RunRequest:
    """One run for the windows first..last: a single partition, or a range (one process, `metrics_5m`'s
    single-run backfill policy) when the daemon was away for a while."""
    a, b = timing.five_minute_key(first), timing.five_minute_key(last)
    if a == b:
        return dg.RunRequest(run_key=f"{why}-{a}", partition_key=a)
    return dg.RunRequest(
        run_key=f"{why}-{a}-{b}",
        tags={"dagster/asset_partition_range_start": a, "dagster/asset_partition_range_end": b},
    )


@dg.sensor(
    job=metrics_daily_job,
    minimum_interval_seconds=timing.sensor_interval(timing.LATE_LABELS_INTERVAL_S),
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Days: yesterday when its 00:15 run was missed (the daemon was down, or started later), and "
    "the finished days whose decisions newly arrived labels touch.",
)
def late_labels_sensor(context: dg.SensorEvaluationContext, routerscope: RouterscopeResource):
    # cursor: {"labels": newest label arrival seen, "caught_up": the last day it caught up}
    state = (
        json.loads(context.cursor) if context.cursor and context.cursor.startswith("{") else {"labels": context.cursor}
    )
    since = _cursor_time(state.get("labels"))
    now = datetime.now(UTC)
    yesterday, today = timing.finished_day(now)
    due = now >= today + timing.SETTLE_DAILY + timing.DAILY_CATCH_UP_GRACE and yesterday >= DAILY.start
    catch_up = due and state.get("caught_up") != timing.day_key(yesterday)
    try:
        with routerscope.warehouse("late labels sensor", SENSOR_WAREHOUSE_WAIT_S) as client:
            days, newest = metric_windows.days_with_new_labels(client, since)
            missed = catch_up and not metric_windows.computed_after_end(client, "1d", yesterday)
    except WarehouseError as exc:
        return dg.SkipReason(f"warehouse busy, trying again at the next tick: {exc}")
    requests = []
    if catch_up:  # once per day: a run that fails again (a blocking data-quality check) is for a person to look at
        state["caught_up"] = timing.day_key(yesterday)
        if missed:
            requests.append(dg.RunRequest(run_key=f"catch-up-{state['caught_up']}", partition_key=state["caught_up"]))
    newest = timing.utc(newest)
    if newest is not None and newest > since:
        # Today's labels are not late: the daily schedule computes today once it has ended.
        first = DAILY.start.date()
        keys = [day.isoformat() for day in days if first <= day < today.date()]
        requests += [dg.RunRequest(run_key=f"labels-{newest.isoformat()}-{k}", partition_key=k) for k in keys]
        state["labels"] = newest.isoformat()
    context.update_cursor(json.dumps(state))
    if not requests:
        return dg.SkipReason(f"no labels arrived since {since.isoformat()}; yesterday is computed (or not due yet)")
    return dg.SensorResult(run_requests=requests)
