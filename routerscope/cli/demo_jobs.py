"""The demo's Dagster steps, as the daemon runs them, in the demo's process (`routerscope.cli.demo.run`): the
`ingest` job once, `metrics_5m_job` over the span's 5-minute partitions with `alerts_job` after each window (as
the daemon's sensor evaluates), then `metrics_daily_job` per day. Each step says what it runs in one line on
stderr. Dagster is imported inside each step: `routerscope simulate` and the command line's start never need it.
"""

from __future__ import annotations

import sys
from datetime import datetime, timedelta, timezone

from routerscope.core.settings import Settings
from routerscope.core.timeutil import parse_utc
from routerscope.pipelines.core import metrics_window, unit_of_work
from routerscope.pipelines.timing import FIVE_MINUTES, five_minute_key, floor_5m


def load(resources: dict, instance) -> dict:
    """The `ingest` job once (as the daemon's ingest sensor starts it); rows loaded per topic."""
    from routerscope.pipelines.run import materializations, run_job  # deferred: pulls dagster

    print("  loading into the warehouse (Dagster ingest job) …", file=sys.stderr, flush=True)
    result = run_job(
        "ingest",
        resources=resources,
        instance=instance,
    )
    return {k: v.get("loaded") for k, v in materializations(result).items()}


def metrics_and_alerts(settings: Settings, start: datetime, end: datetime, *, resources: dict, instance):
    """The span's 5-minute windows with the alerts after each (`windows_and_alerts`), the summary of the
    whole span (not stored), then the alerts as of now. Returns (summary, fired lines, firing keys)."""
    with unit_of_work(settings, purpose="demo metrics"):  # one open warehouse for the windows, the summary, the alerts
        fired = windows_and_alerts(start, end, resources=resources, instance=instance)
        summary, _ = metrics_window(settings, start, end)
        final = run_alerts(resources, instance)
    return summary, fired, final["firing_keys"]


def span_days(start: datetime, end: datetime) -> list:
    """The UTC days [start, end) touches."""
    return sorted({start.date(), (end - timedelta(microseconds=1)).date()})


def daily_quality_and_metrics(days: list, *, resources: dict, instance) -> dict:
    """`metrics_daily_job` per day (as the daily schedule runs it): the day's data-quality suites, then,
    unless a blocking check failed, its metrics. Day → the blocking checks that failed, and whether the
    metrics were materialized."""
    from routerscope.pipelines.run import run_job  # deferred: pulls dagster

    quality = {}
    for day in days:
        print(
            f"  data-quality suites and daily metrics for {day} (Dagster metrics_daily_job) …",
            file=sys.stderr,
            flush=True,
        )
        daily = run_job(
            "metrics_daily_job",
            partition_key=day.isoformat(),
            raise_on_error=False,
            resources=resources,
            instance=instance,
        )
        checks = {e.check_name: e.passed for e in daily.get_asset_check_evaluations()}
        quality[day.isoformat()] = {
            "blocking_failed": [k for k, ok in checks.items() if not ok and k != "pipeline_health"],
            "metrics_materialized": daily.success,
        }
    return quality


def run_alerts(resources: dict, instance, as_of: list[datetime] | None = None, since: datetime | None = None) -> dict:
    """The `alerts_job` once: evaluated as of each time of `as_of` in order (default: once, now). Returns
    `fired_lines` (rule|task type at first seen, in firing order, over every evaluation; one whose episode
    began before `since`, the run's start, says so: a re-run raises late-labelled episodes of the run before,
    and must not pass them off as its own) and the alert keys `firing_keys` after the last evaluation."""
    from routerscope.pipelines.alerting import evaluate_alerts  # deferred: pulls dagster
    from routerscope.pipelines.run import run_job  # deferred: pulls dagster

    config = {"as_of": [t.isoformat() for t in as_of]} if as_of else {}
    result = run_job(
        "alerts_job", ops_config={evaluate_alerts.name: {"config": config}}, resources=resources, instance=instance
    )
    lines = []
    evaluations = result.output_for_node(evaluate_alerts.name)
    for evaluation in evaluations:
        firing = {a["alert_key"]: a for a in evaluation["firing"]}
        for key in evaluation["fired_now"]:
            a = firing[key]
            first_seen = parse_utc(a["first_seen"])
            line = f"{a['rule']}{'|' + a['task_type'] if a['task_type'] else ''} at {first_seen:%H:%M}"
            late = (a.get("trip_values") or {}).get("late")
            if since is not None and first_seen < since:
                line += " (began before this run" + ("; raised now that its labels arrived)" if late else ")")
            elif late:
                line += " (raised late, when its labels arrived)"
            lines.append(line)
    return {"fired_lines": lines, "firing_keys": [a["alert_key"] for a in evaluations[-1]["firing"]]}


def windows_and_alerts(start: datetime, end: datetime, *, resources: dict, instance) -> list[str]:
    """Every 5-minute partition overlapping [start, end) that has ended, through `metrics_5m_job` (one
    run for the range), then `alerts_job` as of one minute after each window's end, in order: the
    evaluations the daemon's sensor would have made as the windows ended (an evaluation sees only the
    windows that had ended by its time). Returns the alerts fired, in order, as `rule|task_type at HH:MM`."""

    from routerscope.pipelines.run import run_job  # deferred: pulls dagster

    first = floor_5m(start)
    last_end = min(floor_5m(end - timedelta(microseconds=1)) + FIVE_MINUTES, floor_5m(datetime.now(timezone.utc)))
    windows = [first + k * FIVE_MINUTES for k in range((last_end - first) // FIVE_MINUTES)]
    if not windows:
        return []
    print(
        f"  {len(windows)} five-minute metric windows (Dagster metrics_5m_job), alerts after each (alerts_job) …",
        file=sys.stderr,
        flush=True,
    )
    # One open warehouse: the jobs' units of work nest in it instead of opening the embedded warehouse per run.
    with unit_of_work(resources["routerscope"].settings(), purpose="demo metric windows"):
        run_job(
            "metrics_5m_job",
            resources=resources,
            instance=instance,
            tags={
                "dagster/asset_partition_range_start": five_minute_key(windows[0]),
                "dagster/asset_partition_range_end": five_minute_key(windows[-1]),
            },
        )
        as_of = [w + FIVE_MINUTES + timedelta(minutes=1) for w in windows]
        return run_alerts(resources, instance, as_of=as_of, since=start)["fired_lines"]
