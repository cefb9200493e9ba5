"""The Dagster definitions load without touching a broker or a warehouse, and name what the docs name."""

from __future__ import annotations

import dagster as dg

from pipelines.definitions import defs


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
