"""The Dagster definitions load without touching a broker or a warehouse, and name what the docs name."""

from __future__ import annotations

import dagster as dg

from routerscope.pipelines.definitions import defs


def test_definitions_load_and_every_job_resolves():
    dg.Definitions.validate_loadable(defs)
    jobs = {job.name: job for job in defs.resolve_all_job_defs()}
    assert {
        "ingest",
        "quality_daily_job",
        "metrics_5m_job",
        "metrics_daily_job",
        "alerts_job",
        "weekly_replay_job",
    } <= set(jobs)
    assert defs.resolve_schedule_def("weekly_replay_job_schedule").cron_schedule == "0 4 * * 1"
    assert jobs["metrics_5m_job"].partitions_def.get_cron_schedule() == "*/5 * * * *"
    assert defs.resolve_sensor_def("late_labels_sensor").job_name == "metrics_daily_job"
    assert defs.resolve_schedule_def("metrics_daily_schedule").job_name == "metrics_daily_job"
    assert defs.resolve_sensor_def("alerts_after_metrics").job_name == "alerts_job"
    # the day's data-quality checks run before, and can hold back, the day's metrics
    daily = {node.name for node in jobs["metrics_daily_job"].nodes}
    assert daily == {"data_quality", "metrics_daily"}


def test_the_alert_webhook_is_read_from_the_environment_at_run_time(monkeypatch):
    """Unset, ROUTERSCOPE_ALERT_WEBHOOK leaves alerts stored, not delivered: loading the definitions and
    building the resource must not fail (a `dg.EnvVar` would fail every run's config)."""
    from routerscope.pipelines.resources import AlertWebhookResource

    assert isinstance(defs.resources["alert_webhook"], AlertWebhookResource)
    monkeypatch.delenv("ROUTERSCOPE_ALERT_WEBHOOK", raising=False)
    assert not AlertWebhookResource().configured()
    monkeypatch.setenv("ROUTERSCOPE_ALERT_WEBHOOK", "http://127.0.0.1:9/hook")
    assert AlertWebhookResource().notifier().url == "http://127.0.0.1:9/hook"
    assert AlertWebhookResource(url="http://127.0.0.1:8/other").notifier().url == "http://127.0.0.1:8/other"
