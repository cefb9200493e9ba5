"""Queries of the alert engine (`routerscope.warehouse.analytics.alerting`): the metric windows a rule reads, the
pipeline
signals (freshness, data quality, quarantine) read as of the evaluation time, the stored
alert episodes and their delivery attempts; and the dashboard's list of alerts.

Every value is a bound `{name:Type}` parameter; the SQL text is constant. Times come back in UTC."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from routerscope.core import names
from routerscope.core.timeutil import utc
from routerscope.warehouse.sql import named, utc_or_none, utc_text

# The columns of one alert episode, in storage order (migration 0010).
ALERT_COLUMNS = (
    "alert_key",
    "first_seen",
    "rule",
    "task_type",
    "severity",
    "action",
    "summary",
    "status",
    "last_seen",
    "resolved_at",
    "trip_values",
    "rule_version",
    "notify_state",
)
DELIVERY_COLUMNS = ("alert_key", "first_seen", "event", "attempt", "status_code", "error")

# The latest window that had ended by the evaluation time: replaying history as of a past time sees
# only the windows that existed then, even when later ones are already stored.
LATEST_WINDOW_SQL = named(
    "alerts_latest_window",
    """
SELECT max(window_start) FROM $metric_windows
WHERE grain = {grain:String} AND window_end <= {now:DateTime64(3, 'UTC')}
""",
)
WINDOW_SERIES_SQL = named(
    "alerts_window_series",
    """
SELECT task_type, window_start, metrics
FROM $metric_windows FINAL
WHERE grain = {grain:String} AND window_start > {since:DateTime64(3, 'UTC')}
  AND window_start <= {latest:DateTime64(3, 'UTC')}
ORDER BY task_type, window_start
""",
)
# The episodes an evaluation can change or must report: open, undelivered, or resolved recently.
STORED_SQL = named(
    "alerts_open_or_recent",
    """
SELECT alert_key, first_seen, rule, task_type, severity, action, summary, status, last_seen, resolved_at,
       trip_values, rule_version, notify_state
FROM $alerts FINAL
WHERE status = 'firing' OR notify_state = 'pending' OR resolved_at >= {since:DateTime64(3, 'UTC')}
""",
)
EPISODE_EXISTS_SQL = named(
    "alerts_episode_exists",
    """
SELECT count() FROM $alerts WHERE alert_key = {alert_key:String} AND first_seen = {first_seen:DateTime64(3, 'UTC')}
""",
)
DQ_BLOCKING_SQL = named(
    "alerts_signal_dq_blocking",
    """
SELECT countIf(NOT success AND blocking) FROM $dq_results
WHERE (window_start, run_at) IN (
    SELECT window_start, max(run_at) FROM $dq_results
    WHERE window_start = (SELECT max(window_start) FROM $dq_results) GROUP BY window_start)
""",
)
QUARANTINE_SHARE_SQL = named(
    "alerts_signal_quarantine_share",
    """
SELECT (SELECT count() FROM $quarantine WHERE quarantined_at >= {since:DateTime64(3, 'UTC')})
     / nullIf((SELECT count() FROM $quarantine WHERE quarantined_at >= {since:DateTime64(3, 'UTC')})
            + (SELECT count() FROM $loaded_messages WHERE loaded_at >= {since:DateTime64(3, 'UTC')}), 0)
""",
)
RECENT_SQL = named(
    "alerts_recent",
    """
SELECT severity, summary, task_type, status, first_seen, last_seen, resolved_at, action, trip_values
FROM $alerts FINAL ORDER BY status = 'firing' DESC, last_seen DESC LIMIT {limit:UInt32}
""",
)


def _scalar(client, sql: str, parameters: dict | None = None):
    return client.query(sql, parameters=parameters or {}).result_rows[0][0]


def latest_window_start(client, grain: str, now: datetime) -> datetime | None:
    """The start of the newest stored window of `grain` that had ended by `now`, or None."""
    return utc_or_none(_scalar(client, LATEST_WINDOW_SQL, {"grain": grain, "now": utc_text(now)}))


def window_series(client, grain: str, since: datetime, latest: datetime) -> list[tuple[str, datetime, dict]]:
    """(task_type, window start, metrics) of the windows of `grain` starting in (since, latest]."""
    rows = client.query(
        WINDOW_SERIES_SQL, parameters={"grain": grain, "since": utc_text(since), "latest": utc_text(latest)}
    ).result_rows
    return [(task_type, utc(start), json.loads(metrics)) for task_type, start, metrics in rows]


def open_or_recent(client, since: datetime) -> list[dict[str, Any]]:
    """The stored episodes that are firing, not yet delivered, or resolved since `since` (ALERT_COLUMNS)."""
    out = []
    for row in client.query(STORED_SQL, parameters={"since": utc_text(since)}).result_rows:
        episode = dict(zip(ALERT_COLUMNS, row))
        for k in ("first_seen", "last_seen", "resolved_at"):
            episode[k] = utc(episode[k])
        out.append(episode)
    return out


def episode_exists(client, alert_key: str, first_seen: datetime) -> bool:
    """Whether an episode of `alert_key` beginning at `first_seen` was ever stored (firing or resolved)."""
    return bool(_scalar(client, EPISODE_EXISTS_SQL, {"alert_key": alert_key, "first_seen": utc_text(first_seen)}))


def blocking_dq_failures(client) -> int:
    """Failed blocking checks of the latest run over the latest data-quality window."""
    return int(_scalar(client, DQ_BLOCKING_SQL))


def quarantine_share(client, since: datetime) -> float | None:
    """Quarantined messages over all messages (quarantined + loaded) since `since`; None with none."""
    value = _scalar(client, QUARANTINE_SHARE_SQL, {"since": utc_text(since)})
    return None if value is None else float(value)


def write_alerts(client, rows: list[list]) -> None:
    """Store new versions of episodes (rows in ALERT_COLUMNS order); readers fold them with FINAL."""
    if rows:
        client.insert(names.TABLES[names.TABLE_ALERTS], rows, column_names=list(ALERT_COLUMNS))


def write_deliveries(client, rows: list[list]) -> None:
    """Record delivery attempts (rows in DELIVERY_COLUMNS order)."""
    if rows:
        client.insert(names.TABLES[names.TABLE_ALERT_DELIVERIES], rows, column_names=list(DELIVERY_COLUMNS))


def recent(client, limit: int = 50) -> tuple[list[str], list[tuple]]:
    """The newest episodes, firing first: (column names, rows), for the on-call page."""
    result = client.query(RECENT_SQL, parameters={"limit": limit})
    return list(result.column_names), list(result.result_rows)


# The on-call page's incident list: every episode firing now or whose breaching span overlaps [start, end),
# with every stored column of the episode.
INCIDENT_COLUMNS = ALERT_COLUMNS
INCIDENTS_SQL = named(
    "alerts_incidents_in_range",
    """
SELECT $alert_columns
FROM $alerts FINAL
WHERE status = 'firing'
   OR (first_seen < {end:DateTime64(3, 'UTC')} AND coalesce(resolved_at, last_seen) >= {start:DateTime64(3, 'UTC')})
ORDER BY status = 'firing' DESC, first_seen DESC, alert_key
LIMIT {limit:UInt32}
""",
    {"alert_columns": ", ".join(ALERT_COLUMNS)},
)


def incidents(client, start: datetime, end: datetime, limit: int = 200) -> list[dict[str, Any]]:
    """Episodes firing now, or breaching or resolved within [start, end): INCIDENT_COLUMNS, firing first,
    then newest first; times in UTC and `trip_values` decoded."""
    rows = client.query(
        INCIDENTS_SQL, parameters={"start": utc_text(start), "end": utc_text(end), "limit": limit}
    ).result_rows
    out = []
    for row in rows:
        episode = dict(zip(INCIDENT_COLUMNS, row))
        for k in ("first_seen", "last_seen", "resolved_at"):
            episode[k] = utc_or_none(episode[k])
        episode["trip_values"] = json.loads(episode["trip_values"] or "{}")
        out.append(episode)
    return out


# The rules each evaluation judged with (migration 0019).
EVALUATION_COLUMNS = ("as_of", "rules_path", "rule_version", "rules_sha256", "by")
LAST_EVALUATION_SQL = named(
    "alerts_last_evaluation",
    """
SELECT evaluated_at, as_of, rules_path, rule_version, rules_sha256, by
FROM $alert_evaluations
ORDER BY evaluated_at DESC
LIMIT 1
""",
)


def record_evaluation(client, as_of: datetime, rules_path: str, rule_version: str, rules_sha256: str, by: str) -> None:
    """Remember the rules one evaluation judged with."""
    client.insert(
        names.TABLES[names.TABLE_ALERT_EVALUATIONS],
        [[as_of, rules_path, rule_version, rules_sha256, by]],
        column_names=list(EVALUATION_COLUMNS),
    )


def last_evaluation(client) -> dict[str, Any] | None:
    """The newest recorded evaluation: evaluated_at, as_of (UTC), rules_path, rule_version, rules_sha256, by;
    None when none was recorded (a warehouse from before migration 0019, or never evaluated)."""
    rows = client.query(LAST_EVALUATION_SQL).result_rows
    if not rows:
        return None
    out = dict(zip(("evaluated_at", "as_of", "rules_path", "rule_version", "rules_sha256", "by"), rows[0]))
    out["evaluated_at"], out["as_of"] = utc(out["evaluated_at"]), utc(out["as_of"])
    return out
