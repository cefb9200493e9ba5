"""Alert evaluation after each metric window: a sensor on `metrics_5m` materializations runs the
`alerts` job, which evaluates the rules (`routerscope.warehouse.analytics.alerting`, via
`routerscope.pipelines.core.evaluate_alerts`,
the same call as `routerscope alerts`) and delivers notifications through the `alert_webhook`
resource (`routerscope.pipelines.resources.AlertWebhookResource`)."""

from datetime import datetime

import dagster as dg

from routerscope.pipelines import core, timing
from routerscope.pipelines.resources import AlertDelivery, RouterscopeResource


class AlertsConfig(dg.Config):
    # Evaluate as of each of these ISO times, in order, instead of once now: replaying history (the
    # demo evaluates as of the end of each simulated window, as the sensor would have then).
    as_of: list[str] = []


@dg.op(description="Evaluate the alert rules over the stored metric windows; notify the webhook.")
def evaluate_alerts(
    context: dg.OpExecutionContext, config: AlertsConfig, routerscope: RouterscopeResource, alert_webhook: AlertDelivery
) -> list:
    """One `Evaluation.as_dict()` per evaluation time (one, now, unless replaying)."""
    settings = routerscope.settings()
    evaluations = []
    with core.unit_of_work(settings, purpose="alerts"):
        times: list[datetime | None] = [datetime.fromisoformat(t) for t in config.as_of]
        for now in times or [None]:
            result = core.evaluate_alerts(settings, now=now, notifier=alert_webhook)
            context.log.info(
                f"as of {result.at.isoformat()}: firing {len(result.firing)}, fired now {len(result.fired)}, "
                f"resolved now {len(result.resolved)}, delivery failures {result.delivery_failures}"
            )
            evaluations.append(result.as_dict())
    return evaluations


@dg.job(executor_def=dg.in_process_executor, description="Evaluate alerts once.")
def alerts_job():
    evaluate_alerts()


@dg.asset_sensor(
    asset_key=dg.AssetKey("metrics_5m"),
    job=alerts_job,
    minimum_interval_seconds=timing.sensor_interval(timing.ALERTS_INTERVAL_S),
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def alerts_after_metrics(context: dg.SensorEvaluationContext, asset_event):
    """Each new 5-minute metric window triggers one evaluation (`asset_event` is an EventLogEntry: the
    run that materialized it and when name the evaluation)."""
    return dg.RunRequest(run_key=f"metrics-5m-{asset_event.run_id}-{asset_event.timestamp}")
