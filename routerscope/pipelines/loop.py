"""The closed loop's look every hour (Dagster): `routerscope.warehouse.analytics.loop.runner.step_all`, the same
unit of work as `routerscope loop step` (docs/loop.md#a-look)."""

from datetime import datetime

import dagster as dg

from routerscope.core.timeutil import UTC
from routerscope.pipelines.resources import RouterscopeResource
from routerscope.warehouse.analytics.loop.runner import step_all


@dg.op(description="One look at every candidate policy in a canary stage; its verdict's transition published.")
def loop_step(context: dg.OpExecutionContext, routerscope: RouterscopeResource) -> None:
    results = step_all(routerscope.settings(), now=datetime.now(UTC))
    for r in results:
        context.log.info(f"{r['task_type']} {r['policy_id']}: {r['from']} → {r['to'] or r['from']}: {r['verdict']}")


@dg.job(description="The closed loop's hourly look at every canary (docs/loop.md).")
def loop_step_job():
    loop_step()


loop_step_schedule = dg.ScheduleDefinition(
    job=loop_step_job,
    cron_schedule="7 * * * *",  # hourly, clear of the 5-minute windows' settle
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
)
