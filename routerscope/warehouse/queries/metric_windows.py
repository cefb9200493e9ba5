"""The materialized metric tables: `metric_windows` and `calibration_windows` (written by the
Dagster metric assets, read by dashboards and alerts)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from routerscope.core import names
from routerscope.core.timeutil import utc
from routerscope.warehouse.sql import QueryWindow, dict_rows, named, utc_or_none, utc_text

OVERALL_KEY = ""  # task_type of the overall row
HEADLINE = (
    "requests",
    "device_entered",
    "sessions",
    "fallback_rate",
    "naive_fallback_rate",
    "capability_reject_rate",
    "device_bypass_rate",
    "false_fallback_rate",
    "false_fallback_labeled",
    "missed_fallback_rate",
    "missed_fallback_labeled",
    "route_accuracy",
    "l2_l3_share",
)
METRIC_COLUMNS = (
    "grain",
    "task_type",
    "window_start",
    "window_end",
    *HEADLINE,
    "l2_l3_delta_pp",
    "l2_l3_z",
    "l2_l3_psi",
    "l2_l3_drifting",
    "shadow_agreement_rate",
    "metrics",
)
CALIBRATION_COLUMNS = (
    "task_type",
    "window_start",
    "window_end",
    "labeled",
    "monotonic",
    "recommended_threshold",
    "current_threshold",
    "target",
    "min_n",
    "calibration",
)


def _metric_row(grain: str, task_type: str, start: datetime, end: datetime, g: dict[str, Any]) -> list:
    drift = g["l2_l3_drift"]
    return [
        grain,
        task_type,
        start,
        end,
        *(g[k] for k in HEADLINE),
        drift["delta_pp"],
        drift["z"],
        drift["psi"],
        bool(drift["drifting"]),
        g["shadow_agreement_rate"],
        json.dumps(g),
    ]


def write_window(client, grain: str, start: datetime, end: datetime, result: dict[str, Any]) -> int:
    """Store one computed window (`routerscope.warehouse.analytics.metrics.compute` output); returns the rows
    written."""
    rows = [_metric_row(grain, OVERALL_KEY, start, end, result["overall"])]
    rows += [_metric_row(grain, t, start, end, g) for t, g in result["by_task_type"].items()]
    client.insert(names.TABLES[names.TABLE_METRIC_WINDOWS], rows, column_names=list(METRIC_COLUMNS))
    calibration = [
        [
            t,
            start,
            end,
            sum(b["n"] for b in c["buckets"]),
            c["monotonic"],
            c["recommended_threshold"],
            c["current_threshold"],
            c["target"],
            c["min_n"],
            json.dumps(c),
        ]
        for t, c in result["calibration"].items()
    ]
    if grain == "1d" and calibration:
        client.insert(
            names.TABLES[names.TABLE_CALIBRATION_WINDOWS], calibration, column_names=list(CALIBRATION_COLUMNS)
        )
    return len(rows)


READ_SQL = named(
    "metric_windows_read",
    """
SELECT task_type, window_start, window_end, requests, device_entered, fallback_rate, naive_fallback_rate,
       l2_l3_share, l2_l3_drifting, metrics
FROM $metric_windows FINAL
WHERE grain = {grain:String}
  AND window_start >= {start:DateTime64(3, 'UTC')} AND window_start < {end:DateTime64(3, 'UTC')}
ORDER BY task_type, window_start
""",
)


def read_windows(client, grain: str, window: QueryWindow) -> list[dict[str, Any]]:
    """The stored windows of one grain starting in [start, end), latest computation of each."""
    result = client.query(READ_SQL, parameters={**window.parameters(), "grain": grain})
    return [dict(zip(result.column_names, row)) for row in result.result_rows]


LABELED_DAYS_SQL = named(
    "days_of_labeled_decisions",
    """
SELECT DISTINCT toDate(d.event_time, 'UTC') AS day
FROM $decisions AS d
WHERE d.request_id IN (
    SELECT request_id FROM $labels WHERE ingested_at > {since:DateTime64(3, 'UTC')}
)
ORDER BY day
""",
)

NEWEST_LABEL_SQL = named("newest_label_ingested", "SELECT max(ingested_at) FROM $labels")


def days_with_new_labels(client, since: datetime) -> tuple[list, datetime | None]:
    """The decision days whose labels arrived after `since`, and the newest label arrival time."""
    days = [row[0] for row in client.query(LABELED_DAYS_SQL, parameters={"since": utc_text(since)}).result_rows]
    newest = client.query(NEWEST_LABEL_SQL).result_rows[0][0]
    return days, newest


# 5-minute windows (starting at or after `horizon`) that received decisions, or labels of their
# decisions, after `since` and at least `late_after_s` after the window started — i.e. after the
# window's scheduled computation (its end plus the settle delay) could have seen them.
LATE_WINDOWS_SQL = named(
    "five_minute_windows_with_late_data",
    """
SELECT DISTINCT window_start FROM (
    SELECT toStartOfFiveMinutes(event_time) AS window_start
    FROM $decisions
    WHERE ingested_at > {since:DateTime64(3, 'UTC')} AND event_time >= {horizon:DateTime64(3, 'UTC')}
      AND ingested_at >= toStartOfFiveMinutes(event_time) + toIntervalSecond({late_after_s:UInt32})
    UNION ALL
    SELECT toStartOfFiveMinutes(d.event_time) AS window_start
    FROM $decisions AS d
    INNER JOIN (
        SELECT request_id, max(ingested_at) AS arrived FROM $labels
        WHERE ingested_at > {since:DateTime64(3, 'UTC')} GROUP BY request_id
    ) AS l ON d.request_id = l.request_id
    WHERE d.event_time >= {horizon:DateTime64(3, 'UTC')}
      AND l.arrived >= toStartOfFiveMinutes(d.event_time) + toIntervalSecond({late_after_s:UInt32})
)
ORDER BY window_start
""",
)

NEWEST_ARRIVAL_SQL = named(
    "newest_decision_or_label_ingested",
    "SELECT greatest((SELECT max(ingested_at) FROM $decisions), (SELECT max(ingested_at) FROM $labels))",
)


def windows_with_late_data(
    client, since: datetime, horizon: datetime, late_after_s: int
) -> tuple[list, datetime | None]:
    """The starts of the 5-minute windows with late data (see LATE_WINDOWS_SQL), and the newest
    arrival time of a decision or label (the caller's next `since`)."""
    parameters = {"since": utc_text(since), "horizon": utc_text(horizon), "late_after_s": int(late_after_s)}
    starts = [row[0] for row in client.query(LATE_WINDOWS_SQL, parameters=parameters).result_rows]
    newest = client.query(NEWEST_ARRIVAL_SQL).result_rows[0][0]
    return starts, newest


COMPUTED_AFTER_END_SQL = named(
    "window_computed_after_it_ended",
    """
SELECT count() FROM $metric_windows
WHERE grain = {grain:String} AND task_type = '' AND window_start = {start:DateTime64(3, 'UTC')}
  AND computed_at >= window_end
""",
)


def computed_after_end(client, grain: str, start: datetime) -> bool:
    """Was the window of `grain` starting at `start` computed (at least once) after it had ended?"""
    parameters = {"grain": grain, "start": utc_text(start)}
    return client.query(COMPUTED_AFTER_END_SQL, parameters=parameters).result_rows[0][0] > 0


# -- the dashboard's reads ---------------------------------------------------------------------------

LATEST_END_SQL = named(
    "metric_windows_latest_end",
    "SELECT max(window_end) FROM $metric_windows FINAL WHERE grain = {grain:String}",
)


def latest_end(client, grain: str) -> datetime | None:
    """The end of the newest stored window of `grain` (aware, UTC), or None before the first."""
    return utc_or_none(client.query(LATEST_END_SQL, parameters={"grain": grain}).result_rows[0][0])


TREND_COLUMNS = tuple(
    "window_start requests device_entered fallback_rate naive_fallback_rate device_bypass_rate "
    "l2_l3_share l2_l3_drifting false_fallback_rate false_fallback_labeled".split()
)
LATEST_CALIBRATION_COLUMNS = tuple(
    "window_start labeled monotonic recommended_threshold current_threshold calibration".split()
)

# Constant pieces the statements below share (named() puts them in before it spells the tables).
FRAGMENTS = {
    "trend_columns": ", ".join(TREND_COLUMNS),
    "calibration_columns": ", ".join(LATEST_CALIBRATION_COLUMNS),
}

TREND_SQL = named(
    "metric_windows_trend",
    """
SELECT $trend_columns
FROM $metric_windows FINAL
WHERE grain = {grain:String} AND task_type = {task:String} AND window_start >= {start:DateTime64(3, 'UTC')}
ORDER BY window_start
""",
    FRAGMENTS,
)


def trend(client, grain: str, task_type: str, start: datetime) -> list[dict[str, Any]]:
    """The headline columns (TREND_COLUMNS) of the windows of `grain` starting at or after `start`, of one
    task type ('' = overall), oldest first."""
    return dict_rows(client, TREND_SQL, {"grain": grain, "task": task_type, "start": utc_text(start)})


GROUPS_SQL = named(
    "metric_windows_groups",
    """
SELECT window_start, metrics
FROM $metric_windows FINAL
WHERE grain = {grain:String} AND task_type = {task:String} AND window_start >= {start:DateTime64(3, 'UTC')}
ORDER BY window_start
""",
)


def groups(client, grain: str, task_type: str, start: datetime) -> list[tuple[datetime, dict[str, Any]]]:
    """(window_start, the window's full docs/metrics.md group) of the windows of `grain` starting at or after
    `start`, of one task type ('' = overall), oldest first."""
    rows = client.query(GROUPS_SQL, parameters={"grain": grain, "task": task_type, "start": utc_text(start)})
    return [(start_, json.loads(metrics)) for start_, metrics in rows.result_rows]


TASK_TYPES_SQL = named(
    "metric_windows_task_types",
    "SELECT DISTINCT task_type FROM $metric_windows WHERE task_type != '' ORDER BY task_type",
)


def task_types(client) -> list[str]:
    """The task types with a stored metric window, sorted."""
    return [row[0] for row in client.query(TASK_TYPES_SQL).result_rows]


LATEST_CALIBRATION_SQL = named(
    "calibration_windows_latest",
    """
SELECT $calibration_columns
FROM $calibration_windows FINAL
WHERE task_type = {task:String}
ORDER BY window_start DESC
LIMIT 1
""",
    FRAGMENTS,
)


def latest_calibration(client, task_type: str) -> dict[str, Any] | None:
    """The newest stored daily calibration of one task type (LATEST_CALIBRATION_COLUMNS), or None."""
    rows = dict_rows(client, LATEST_CALIBRATION_SQL, {"task": task_type})
    return rows[0] if rows else None


GROUPS_IN_RANGE_SQL = named(
    "metric_windows_groups_in_range",
    """
SELECT task_type, window_start, metrics
FROM $metric_windows FINAL
WHERE grain = {grain:String} AND window_start >= {start:DateTime64(3, 'UTC')}
  AND window_start < {end:DateTime64(3, 'UTC')}
ORDER BY task_type, window_start
""",
)


def groups_in_range(client, grain: str, start: datetime, end: datetime) -> list[tuple[str, datetime, dict[str, Any]]]:
    """(task_type ('' = overall), window_start, the window's full docs/metrics.md group) of every window of
    `grain` starting in [start, end), all task types in one read."""
    rows = client.query(
        GROUPS_IN_RANGE_SQL, parameters={"grain": grain, "start": utc_text(start), "end": utc_text(end)}
    ).result_rows
    return [(task_type, utc(w0), json.loads(metrics)) for task_type, w0, metrics in rows]


# The counts behind a window row's rates, for the Prometheus exporter (`routerscope.warehouse.analytics.exporter`): each
# count is its rate times the rate's own denominator (docs/metrics.md), rounded — a stored rate is k / n, so
# this gives k back exactly; a rate over no events is null and counts 0. Constant SQL, no values.
WINDOW_COUNTS = {
    "decisions": "requests",
    "device_entered": "device_entered",
    "fallbacks_quality": "round(JSONExtractFloat(metrics, 'quality_fallback_rate') * device_entered)",
    "fallbacks_timeout": "round(JSONExtractFloat(metrics, 'timeout_fallback_rate') * device_entered)",
    "fallbacks_error": "round(JSONExtractFloat(metrics, 'error_fallback_rate') * device_entered)",
    "fallbacks_capability": "round(JSONExtractFloat(metrics, 'capability_reject_rate') * requests)",
    "device_bypassed": "round(JSONExtractFloat(metrics, 'device_bypass_rate') * requests)",
    **{
        f"served_{level}": f"round(JSONExtractFloat(metrics, 'degrade_share', '{level}') * requests)"
        for level in ("L0", "L1", "L2", "L3", "L4")
    },
    "false_fallbacks": "round(JSONExtractFloat(metrics, 'false_fallback_rate') * false_fallback_labeled)",
    "false_fallback_labeled": "false_fallback_labeled",
    "missed_fallbacks": "round(JSONExtractFloat(metrics, 'missed_fallback_rate') * missed_fallback_labeled)",
    "missed_fallback_labeled": "missed_fallback_labeled",
    "route_correct": "round(JSONExtractFloat(metrics, 'route_accuracy') * JSONExtractUInt(metrics, 'route_labeled'))",
    "route_labeled": "JSONExtractUInt(metrics, 'route_labeled')",
    "device_attempts": "JSONExtractUInt(metrics, 'device_attempts')",
    "offload_failures": (
        "round(JSONExtractFloat(metrics, 'offload_failure_rate') * JSONExtractUInt(metrics, 'device_attempts'))"
    ),
    "degrade_triggered": "round(JSONExtractFloat(metrics, 'degrade_trigger_rate') * device_entered)",
}
_COUNT_SUMS = {
    "count_sums": ",\n       ".join(f"toUInt64(sum({expr})) AS count_{key}" for key, expr in WINDOW_COUNTS.items())
}
# The latest window of a grain that had ended by `now` (the alerts read the same one: alerts.LATEST_WINDOW_SQL).
_LATEST_FINISHED = {
    "latest_finished": """(SELECT max(window_start) FROM $metric_windows
                      WHERE grain = {grain:String} AND window_end <= {now:DateTime64(3, 'UTC')})"""
}
LATEST_WINDOW_COUNTS_SQL = named(
    "metric_windows_latest_counts",
    """
SELECT task_type, any(window_start), any(window_end), max(l2_l3_drifting),
       $count_sums
FROM $metric_windows FINAL
WHERE grain = {grain:String} AND window_start = $latest_finished
GROUP BY task_type
ORDER BY task_type
""",
    fragments={**_COUNT_SUMS, **_LATEST_FINISHED},
)
TOTAL_COUNTS_SQL = named(
    "metric_windows_total_counts",
    """
SELECT task_type, $count_sums
FROM $metric_windows FINAL
WHERE grain = {grain:String} AND task_type != '' AND window_end <= {now:DateTime64(3, 'UTC')}
GROUP BY task_type
ORDER BY task_type
""",
    fragments=_COUNT_SUMS,
)


def latest_window_counts(client, grain: str, now: datetime) -> dict[str, Any] | None:
    """The latest window of `grain` that had ended by `now`: {start, end, drifting (the overall row's L2/L3
    drift flag), counts: {task_type: {count: n}} (WINDOW_COUNTS; task types with events only)}; None before
    the first."""
    result = client.query(LATEST_WINDOW_COUNTS_SQL, parameters={"grain": grain, "now": utc_text(now)})
    if not result.result_rows:
        return None
    keys = list(WINDOW_COUNTS)
    out: dict[str, Any] = {"start": None, "end": None, "drifting": False, "counts": {}}
    for task_type, start, end, drifting, *counts in result.result_rows:
        out["start"], out["end"] = utc_or_none(start), utc_or_none(end)
        if task_type == OVERALL_KEY:
            out["drifting"] = bool(drifting)
        else:
            out["counts"][task_type] = dict(zip(keys, (int(c) for c in counts)))
    return out


def total_counts(client, grain: str, now: datetime) -> dict[str, dict[str, int]]:
    """{task_type: {count: n}} summed over every stored window of `grain` that had ended by `now` (each window's
    latest computation): the exporter's counters."""
    result = client.query(TOTAL_COUNTS_SQL, parameters={"grain": grain, "now": utc_text(now)})
    keys = list(WINDOW_COUNTS)
    return {row[0]: dict(zip(keys, (int(c) for c in row[1:]))) for row in result.result_rows}
