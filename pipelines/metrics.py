"""Metric assets: METRICS.md per 5-minute window (on-call) and per day (tuning), materialized into
`metric_windows` / `calibration_windows`; a sensor recomputes the days that late labels touch.

Thin glue over `warehouse.metrics.compute`; each run computes only its own partition's window."""

from datetime import datetime, timezone

import dagster as dg

from pipelines.ingest import TABLE_ASSETS
from pipelines.partitions import DAILY, FIVE_MINUTES
from pipelines.quality import data_quality
from pipelines.resources import RouterscopeResource
from warehouse.client import open_warehouse
from warehouse.metrics import compute
from warehouse.migrate import migrate
from warehouse.queries import metric_windows

FACTS = [TABLE_ASSETS["decisions"], TABLE_ASSETS["labels"]]


class MetricsConfig(dg.Config):
    baseline_days: float = 7.0
    target: float = 0.95
    min_n: int = 30


def _materialize(context: dg.AssetExecutionContext, config: MetricsConfig, routerscope: RouterscopeResource,
                 grain: str) -> dg.MaterializeResult:  # fmt: skip
    window = context.partition_time_window
    start, end = window.start.astimezone(timezone.utc), window.end.astimezone(timezone.utc)
    with open_warehouse(routerscope.settings(), purpose=f"metrics {grain}") as client:
        migrate(client)
        result = compute(client, start, end, baseline_days=config.baseline_days, target=config.target,
                         min_n=config.min_n)  # fmt: skip
        rows = metric_windows.write_window(client, grain, start, end, result)
    overall = result["overall"]
    return dg.MaterializeResult(
        metadata={
            "window": f"[{start.isoformat()}, {end.isoformat()})",
            "rows": rows,
            "requests": overall["requests"],
            "fallback_rate": dg.MetadataValue.float(overall["fallback_rate"]) if overall["fallback_rate"] is not None else None,
            "naive_fallback_rate": dg.MetadataValue.float(overall["naive_fallback_rate"]) if overall["naive_fallback_rate"] is not None else None,
            "l2_l3_drifting": overall["l2_l3_drift"]["drifting"],
        }
    )


@dg.asset(partitions_def=FIVE_MINUTES, deps=FACTS, group_name="metrics",
          description="METRICS.md per 5-minute window (on-call view, alerts).")  # fmt: skip
def metrics_5m(context: dg.AssetExecutionContext, config: MetricsConfig, routerscope: RouterscopeResource):
    return _materialize(context, config, routerscope, "5m")


@dg.asset(partitions_def=DAILY, deps=[*FACTS, data_quality], group_name="metrics",
          description="METRICS.md per day, with calibration (weekly tuning view). Waits for the day's "
                      "blocking data-quality checks when both run together.")  # fmt: skip
def metrics_daily(context: dg.AssetExecutionContext, config: MetricsConfig, routerscope: RouterscopeResource):
    return _materialize(context, config, routerscope, "1d")


# In-process: chDB is one process at a time. Partitioning comes from the selected asset.
metrics_5m_job = dg.define_asset_job("metrics_5m_job", selection=[metrics_5m], executor_def=dg.in_process_executor)
# The day's data-quality suites run first; a blocking failure skips the day's metrics.
metrics_daily_job = dg.define_asset_job(
    "metrics_daily_job", selection=[data_quality, metrics_daily], executor_def=dg.in_process_executor
)

metrics_5m_schedule = dg.build_schedule_from_partitioned_job(metrics_5m_job)
metrics_daily_schedule = dg.build_schedule_from_partitioned_job(metrics_daily_job, hour_of_day=0, minute_of_hour=15)


@dg.sensor(job=metrics_daily_job, minimum_interval_seconds=300,
           description="Late labels: recompute the daily metrics of the days whose decisions they label.")  # fmt: skip
def late_labels_sensor(context: dg.SensorEvaluationContext, routerscope: RouterscopeResource):
    since = datetime.fromisoformat(context.cursor) if context.cursor else datetime(1970, 1, 1, tzinfo=timezone.utc)
    with open_warehouse(routerscope.settings(), purpose="late labels sensor") as client:
        migrate(client)
        days, newest = metric_windows.days_with_new_labels(client, since)
    newest = newest.replace(tzinfo=timezone.utc) if newest is not None and newest.tzinfo is None else newest
    if newest is None or newest <= since:
        return dg.SkipReason(f"no labels arrived since {since.isoformat()}")
    first = DAILY.start.date()
    keys = [day.isoformat() for day in days if day >= first]
    context.update_cursor(newest.isoformat())
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=f"labels-{newest.isoformat()}-{k}", partition_key=k) for k in keys]
    )
