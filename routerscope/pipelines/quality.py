"""Data-quality asset: the Great Expectations suites of `routerscope.warehouse.analytics.quality` on each daily window.

Its blocking checks stop `metrics_daily` for the same window when they fail (the metric asset
depends on this one, so a run that selects both skips the metrics). Non-blocking findings
(freshness, volume, label coverage) are warnings."""

import dagster as dg

from routerscope.core import names
from routerscope.core.timeutil import UTC
from routerscope.pipelines import core
from routerscope.pipelines.ingest import TABLE_ASSETS
from routerscope.pipelines.partitions import DAILY
from routerscope.pipelines.resources import RouterscopeResource
from routerscope.warehouse.analytics import quality
from routerscope.warehouse.analytics.quality import Thresholds

ASSET = "data_quality"

# Asset check → the routerscope.warehouse.analytics.quality checks it summarises (by name prefix).
BLOCKING = {
    "decisions_contract": ("decisions.",),
    "labels_contract": ("labels.",),
    "breakers_contract": ("breakers.",),
    "pipeline_completeness": ("pipeline.offsets.", "pipeline.quarantine_share"),
}
WARNING = {
    "pipeline_health": (
        "pipeline.freshness",
        "pipeline.future_events",
        "pipeline.volume",
        "pipeline.label_coverage",
        "pipeline.known_task_types",
    )
}
_THRESHOLDS = Thresholds()


class QualityConfig(dg.Config):
    # Defaults are `routerscope.warehouse.analytics.quality.Thresholds`' (the same as `routerscope dq`).
    freshness_lag_s: float = _THRESHOLDS.freshness_lag_s
    quarantine_share: float = _THRESHOLDS.quarantine_share
    volume_low: float = _THRESHOLDS.volume_low
    volume_high: float = _THRESHOLDS.volume_high
    label_coverage: float = _THRESHOLDS.label_coverage


@dg.asset(
    partitions_def=DAILY,
    deps=[TABLE_ASSETS["decisions"], TABLE_ASSETS["labels"], TABLE_ASSETS["breakers"]],
    group_name="quality",
    description="Great Expectations suites over one day of decisions, labels and breaker events.",
    check_specs=[dg.AssetCheckSpec(name, asset=ASSET, blocking=True) for name in BLOCKING]
    + [dg.AssetCheckSpec(name, asset=ASSET, blocking=False) for name in WARNING],
)
def data_quality(context: dg.AssetExecutionContext, config: QualityConfig, routerscope: RouterscopeResource):
    window = context.partition_time_window
    report = core.quality_window(
        routerscope.settings(),
        window.start.astimezone(UTC),
        window.end.astimezone(UTC),
        thresholds=quality.Thresholds(**config.model_dump()),
    )
    yield dg.MaterializeResult(
        metadata={
            "checks": len(report.results),
            "failed": len(report.failed()),
            "blocking_failures": ", ".join(r.check for r in report.blocking_failures) or "none",
            "data_docs": dg.MetadataValue.path(report.docs_index) if report.docs_index else None,
            "results_table": f"{names.DATABASE}.{names.TABLE_DQ_RESULTS}",
        }
    )
    for checks, severity in ((BLOCKING, dg.AssetCheckSeverity.ERROR), (WARNING, dg.AssetCheckSeverity.WARN)):
        for check_name, prefixes in checks.items():
            mine = [r for r in report.results if r.check.startswith(prefixes)]
            failed = [r for r in mine if not r.success]
            yield dg.AssetCheckResult(
                check_name=check_name,
                passed=not failed,
                severity=severity,
                metadata={
                    "failed": ", ".join(f"{r.check} ({r.unexpected_count})" for r in failed) or "none",
                    "sample_ids": ", ".join(sorted({i for r in failed for i in r.sample_ids})[:10]) or "none",
                },
            )


quality_daily_job = dg.define_asset_job(
    "quality_daily_job", selection=[data_quality], executor_def=dg.in_process_executor
)
