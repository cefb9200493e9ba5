"""Every Dagster definition of routerscope (`dagster dev` / `dagster-daemon run` with `workspace.yaml`).

Deployed, everything runs by itself (schedules and sensors default to running; when: `routerscope.pipelines.timing`):
ingest every minute (one run at a time), each 5-minute window once it has ended plus a settle
delay and again when late data touches it, alerts after each window, yesterday's data quality and
daily metrics at 00:15 UTC, the days late labels touch, the weekly replay, the closed loop's hourly look
(`routerscope.pipelines.loop`); with ROUTERSCOPE_EXPORTER_PORT set, the Prometheus endpoint
(`routerscope.pipelines.exporter`).

No import-time side effects: nothing connects to a broker or opens the warehouse until a run."""

import dagster as dg

from routerscope.pipelines.alerting import alerts_after_metrics, alerts_job
from routerscope.pipelines.exporter import exporter_sensor
from routerscope.pipelines.ingest import ingest_job, ingest_sensor, ingest_topics
from routerscope.pipelines.loop import loop_step_job, loop_step_schedule
from routerscope.pipelines.metrics import (
    late_events_sensor,
    late_labels_sensor,
    metrics_5m,
    metrics_5m_job,
    metrics_5m_schedule,
    metrics_daily,
    metrics_daily_job,
    metrics_daily_schedule,
)
from routerscope.pipelines.quality import data_quality, quality_daily_job
from routerscope.pipelines.replay import offline_replay_labels, weekly_replay_job, weekly_replay_schedule
from routerscope.pipelines.resources import AlertWebhookResource, RouterscopeResource

defs = dg.Definitions(
    assets=[ingest_topics, data_quality, metrics_5m, metrics_daily, offline_replay_labels],
    jobs=[
        ingest_job,
        quality_daily_job,
        metrics_5m_job,
        metrics_daily_job,
        alerts_job,
        weekly_replay_job,
        loop_step_job,
    ],
    schedules=[metrics_5m_schedule, metrics_daily_schedule, weekly_replay_schedule, loop_step_schedule],
    sensors=[ingest_sensor, late_events_sensor, late_labels_sensor, alerts_after_metrics, exporter_sensor],
    resources={"routerscope": RouterscopeResource(), "alert_webhook": AlertWebhookResource()},
)
