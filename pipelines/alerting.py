"""Alert evaluation after each metric window: a sensor on `metrics_5m` materializations runs the
`alerts` job, which evaluates the rules (`routerscope.alerts`) and delivers notifications."""

import dagster as dg

from pipelines.resources import RouterscopeResource
from warehouse.client import open_warehouse
from warehouse.migrate import migrate


@dg.op(description="Evaluate the alert rules over the stored metric windows; notify the webhook.")
def evaluate_alerts(context: dg.OpExecutionContext, routerscope: RouterscopeResource):
    from routerscope import alerts

    settings = routerscope.settings()
    with open_warehouse(settings, purpose="alerts") as client:
        migrate(client)
        result = alerts.run(client, rules_path=settings.alert_rules, webhook=settings.alert_webhook)
    context.log.info(
        f"firing {len(result.firing)}, fired now {len(result.fired)}, resolved now {len(result.resolved)}, "
        f"delivery failures {result.delivery_failures}"
    )
    return result.as_dict()


@dg.job(executor_def=dg.in_process_executor, description="Evaluate alerts once.")
def alerts_job():
    evaluate_alerts()


@dg.asset_sensor(asset_key=dg.AssetKey("metrics_5m"), job=alerts_job, minimum_interval_seconds=60)
def alerts_after_metrics(context: dg.SensorEvaluationContext, asset_event):
    """Each new 5-minute metric window triggers one evaluation."""
    return dg.RunRequest(run_key=f"metrics-5m-{asset_event.storage_id}")
