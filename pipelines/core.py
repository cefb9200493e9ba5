"""The units of work the Dagster assets run, as plain functions: the command line (`routerscope metrics`,
`dq`, `alerts`) calls these same functions, with the same defaults (defined here and in the core
modules, once), so the deployed path and the command line cannot drift apart.

No Dagster import here: the command line stays quick to start."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from routerscope.core.settings import Settings
from warehouse.analytics import metrics as metric_core
from warehouse.client import open_warehouse


def unit_of_work(settings: Settings, purpose: str, timeout_s: float | None = None):
    """The warehouse, opened for one unit of work with its migrations applied (`open_warehouse(...,
    migrated=True)`). `timeout_s`: how long to wait for an embedded warehouse another process holds."""
    return open_warehouse(settings, purpose=purpose, timeout_s=timeout_s, migrated=True)


@dataclass(frozen=True)
class MetricParams:
    """The tunable inputs of METRICS.md: the L2/L3 drift baseline, and the threshold recommender's
    target pass rate and minimum sample."""

    baseline_days: float = metric_core.DEFAULT_BASELINE_DAYS
    target: float = metric_core.DEFAULT_TARGET
    min_n: int = metric_core.DEFAULT_MIN_N


def metrics_window(
    settings: Settings,
    start: datetime,
    end: datetime,
    params: MetricParams = MetricParams(),
    store_grain: str | None = None,
) -> tuple[dict[str, Any], int]:
    """Every metric of METRICS.md for [start, end); stored in `metric_windows` (and, for a day,
    `calibration_windows`) when `store_grain` is given. Returns the result and the rows stored."""
    from warehouse.queries import metric_windows

    with unit_of_work(settings, purpose=f"metrics {store_grain or ''}".strip()) as client:
        result = metric_core.compute(
            client, start, end, baseline_days=params.baseline_days, target=params.target, min_n=params.min_n
        )
        rows = metric_windows.write_window(client, store_grain, start, end, result) if store_grain else 0
    return result, rows


def quality_window(settings: Settings, start: datetime | None = None, end: datetime | None = None, thresholds=None):
    """The data-quality suites over [start, end) (default: the UTC day of the newest event), stored in
    `dq_results`, Data Docs under the home. Returns the `warehouse.analytics.quality.QualityReport`."""
    import great_expectations  # noqa: F401  (seconds to import: before taking the warehouse, not while holding it)

    from warehouse.analytics import quality
    from warehouse.queries.common import QueryWindow

    with unit_of_work(settings, purpose="data quality") as client:
        window = QueryWindow(start, end) if start is not None else quality.latest_window(client)
        report = quality.run_suites(client, window, home=settings.home, thresholds=thresholds)
        quality.store(client, report)
    return report


def evaluate_alerts(settings: Settings, now: datetime | None = None, notifier=None):
    """Evaluate the alert rules (as of `now`, default the current time), update the episodes, deliver
    pending notifications through `notifier` (a `warehouse.analytics.alerting.Notifier`; the alerts job passes
    its `AlertWebhookResource`; default: the webhook of `settings`). Returns the
    `warehouse.analytics.alerting.Evaluation`."""
    from warehouse.analytics import alerting

    if notifier is None:
        notifier = alerting.WebhookNotifier(settings.alert_webhook)
    with unit_of_work(settings, purpose="alerts") as client:
        return alerting.run(client, rules_path=settings.alert_rules, notifier=notifier, now=now)
