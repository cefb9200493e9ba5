"""Alerts: rules over the stored metric windows, a lifecycle, and webhook delivery.

Rules are data (`routerscope/alert_rules.yaml`, or the file named by ROUTERSCOPE_ALERT_RULES). A
rule fires when its last `windows` consecutive windows all breach, each with at least `min_n`
events behind the number (act on consecutive breaches, not on one noisy point — seed 003 §7); it
stays firing without repeat notifications while that holds, and resolves when the latest window no
longer breaches. Episodes are stored in `alerts` with the windows and values that tripped them and
the rule file's version. Notifications (Slack-compatible JSON) are retried with backoff; every
attempt is recorded in `alert_deliveries`, and one that never got through stays pending and is
retried at the next evaluation, so a delivery failure never loses an alert.

"Now" for window rules is the latest stored window of the rule's grain that had ended by the
evaluation time, so an evaluation over replayed or simulated history (`now` in the past) behaves as
it would have live, even when later windows are already stored; pipeline signals (freshness, data
quality, breakers) are read as of the evaluation time.
"""

from __future__ import annotations

import json
import operator
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from routerscope.errors import ConfigError

DEFAULT_RULES = Path(__file__).with_name("alert_rules.yaml")
GRAINS = {"5m": timedelta(minutes=5), "1d": timedelta(days=1), "now": None}
OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne}
SEVERITIES = ("page", "ticket", "info")
SCOPES = ("overall", "per_task_type")
RECENTLY = timedelta(hours=24)


@dataclass(frozen=True)
class Rule:
    name: str
    summary: str
    metric: str
    scope: str
    grain: str
    op: str
    limit: Any
    windows: int
    severity: str
    min_n: int = 0
    denominator: str | None = None
    action: str = ""

    def breaches(self, value, n: int | None) -> bool:
        if value is None:
            return False
        if self.denominator and (n is None or n < self.min_n):
            return False  # too few events behind the number to act on it
        return bool(OPS[self.op](value, self.limit))


def load_rules(path: Path | str | None = None) -> tuple[str, list[Rule]]:
    """The rules and their version; a bad file is a ConfigError naming the rule and the field."""
    path = Path(path) if path else DEFAULT_RULES
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read alert rules {path}: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("rules"), list) or "version" not in doc:
        raise ConfigError(f"alert rules {path}: expected a mapping with `version` and a list `rules`")
    rules, names = [], set()
    known = set(Rule.__dataclass_fields__)
    for i, raw in enumerate(doc["rules"]):
        where = f"alert rules {path}, rule {i + 1} ({raw.get('name', '?') if isinstance(raw, dict) else '?'})"
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: expected a mapping")
        unknown = set(raw) - known
        if unknown:
            raise ConfigError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
        try:
            rule = Rule(**raw)
        except TypeError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        problems = [
            f"op must be one of {', '.join(OPS)}" if rule.op not in OPS else "",
            f"grain must be one of {', '.join(GRAINS)}" if rule.grain not in GRAINS else "",
            f"scope must be one of {', '.join(SCOPES)}" if rule.scope not in SCOPES else "",
            f"severity must be one of {', '.join(SEVERITIES)}" if rule.severity not in SEVERITIES else "",
            "windows must be at least 1" if not isinstance(rule.windows, int) or rule.windows < 1 else "",
            "a duplicate rule name" if rule.name in names else "",
            "pipeline signals have grain `now`" if rule.metric.startswith("pipeline.") != (rule.grain == "now") else "",
        ]
        problems = [p for p in problems if p]
        if problems:
            raise ConfigError(f"{where}: {'; '.join(problems)}")
        names.add(rule.name)
        rules.append(rule)
    return str(doc["version"]), rules


# -- evaluation (pure) ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Point:
    """One window of a series: its start, the metric's value, and the events behind it."""

    start: datetime
    value: Any
    n: int | None = None


@dataclass(frozen=True)
class Verdict:
    breaching: bool
    first_seen: datetime | None = None  # start of the earliest window of the breaching streak
    last_seen: datetime | None = None  # end of the latest breaching window
    points: tuple[Point, ...] = ()


def evaluate(rule: Rule, series: list[Point], latest: datetime) -> Verdict:
    """Does `rule` breach as of the window starting at `latest`? `series`: the scope's windows.

    The last `rule.windows` windows must all be present (a gap breaks the streak) and breach. The
    streak is then extended back as far as it goes, so first_seen is where the episode began."""
    step = GRAINS[rule.grain]
    by_start = {p.start: p for p in series}
    streak: list[Point] = []
    t = latest
    while t in by_start and rule.breaches(by_start[t].value, by_start[t].n):
        streak.append(by_start[t])
        t -= step
    if len(streak) < rule.windows:
        return Verdict(False)
    streak.reverse()
    return Verdict(True, streak[0].start, streak[-1].start + step, tuple(streak))


# -- the warehouse side --------------------------------------------------------------------------
# The latest window that had ended by the evaluation time: replaying history as of a past time sees
# only the windows that existed then, even when later ones are already stored.
LATEST_SQL = """
SELECT max(window_start) FROM routerscope.metric_windows
WHERE grain = {grain:String} AND window_end <= {now:DateTime64(3, 'UTC')}
"""
SERIES_SQL = """
SELECT task_type, window_start, metrics
FROM routerscope.metric_windows FINAL
WHERE grain = {grain:String} AND window_start > {since:DateTime64(3, 'UTC')} AND window_start <= {latest:DateTime64(3, 'UTC')}
ORDER BY task_type, window_start
"""
OPEN_SQL = """
SELECT alert_key, first_seen, rule, task_type, severity, action, summary, status, last_seen, resolved_at,
       trip_values, rule_version, notify_state
FROM routerscope.alerts FINAL
WHERE status = 'firing' OR notify_state = 'pending' OR resolved_at >= {since:DateTime64(3, 'UTC')}
"""
# Events dated past now + the allowance (warehouse.quality.FUTURE_ALLOWANCE) must not hide stale ingest.
FRESHNESS_SQL = "SELECT max(event_time) FROM routerscope.decisions WHERE event_time <= {horizon:DateTime64(3, 'UTC')}"
DQ_SQL = """
SELECT countIf(NOT success AND blocking) FROM routerscope.dq_results
WHERE (window_start, run_at) IN (
    SELECT window_start, max(run_at) FROM routerscope.dq_results
    WHERE window_start = (SELECT max(window_start) FROM routerscope.dq_results) GROUP BY window_start)
"""
QUARANTINE_SQL = """
SELECT (SELECT count() FROM routerscope.quarantine WHERE quarantined_at >= {since:DateTime64(3, 'UTC')})
     / nullIf((SELECT count() FROM routerscope.quarantine WHERE quarantined_at >= {since:DateTime64(3, 'UTC')})
            + (SELECT count() FROM routerscope.loaded_messages WHERE loaded_at >= {since:DateTime64(3, 'UTC')}), 0)
"""
BREAKERS_SQL = """
SELECT countIf(state = 'open') FROM (
    SELECT instance_id, argMax(to_state, (event_time, event_id)) AS state
    FROM routerscope.breaker_events FINAL WHERE boundary = {boundary:String} GROUP BY instance_id)
"""
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


def _utc(t: datetime | None) -> datetime | None:
    if t is None:
        return None
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


def _text(t: datetime) -> str:
    return _utc(t).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _dig(metrics: dict, path: str):
    value: Any = metrics
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _window_series(client, rule: Rule, cache: dict, now: datetime) -> tuple[datetime | None, dict[str, list[Point]]]:
    if rule.grain not in cache:
        latest = _utc(client.query(LATEST_SQL, parameters={"grain": rule.grain, "now": _text(now)}).result_rows[0][0])
        rows = []
        if latest is not None and latest.year > 1970:
            since = latest - GRAINS[rule.grain] * 400  # far enough back to see where a streak began
            rows = client.query(
                SERIES_SQL, parameters={"grain": rule.grain, "since": _text(since), "latest": _text(latest)}
            ).result_rows
        else:
            latest = None
        cache[rule.grain] = (latest, [(t, _utc(s), json.loads(m)) for t, s, m in rows])
    latest, rows = cache[rule.grain]
    series: dict[str, list[Point]] = {}
    for task_type, start, metrics in rows:
        if (rule.scope == "overall") != (task_type == ""):
            continue
        n = metrics.get(rule.denominator) if rule.denominator else None
        series.setdefault(task_type, []).append(Point(start, _dig(metrics, rule.metric), n))
    return latest, series


def _signal(client, metric: str, now: datetime):
    if metric == "pipeline.freshness_lag_s":
        from warehouse.quality import FUTURE_ALLOWANCE

        horizon = _text(now + FUTURE_ALLOWANCE)
        newest = _utc(client.query(FRESHNESS_SQL, parameters={"horizon": horizon}).result_rows[0][0])
        return None if newest is None or newest.year <= 1970 else (now - newest).total_seconds()
    if metric == "pipeline.dq_blocking_failures":
        return int(client.query(DQ_SQL).result_rows[0][0])
    if metric == "pipeline.quarantine_share":
        value = client.query(QUARANTINE_SQL, parameters={"since": _text(now - timedelta(days=1))}).result_rows[0][0]
        return None if value is None else float(value)
    if metric.startswith("pipeline.breaker_open."):
        boundary = metric.rsplit(".", 1)[1]
        return int(client.query(BREAKERS_SQL, parameters={"boundary": boundary}).result_rows[0][0])
    raise ConfigError(f"unknown pipeline signal {metric!r}")


@dataclass
class Alert:
    alert_key: str
    first_seen: datetime
    rule: str
    task_type: str
    severity: str
    action: str
    summary: str
    status: str
    last_seen: datetime
    resolved_at: datetime | None
    trip_values: str
    rule_version: str
    notify_state: str

    def row(self) -> list:
        return [getattr(self, c) for c in ALERT_COLUMNS]

    def public(self) -> dict[str, Any]:
        out = asdict(self)
        for k in ("first_seen", "last_seen", "resolved_at"):
            out[k] = None if out[k] is None else _utc(out[k]).isoformat().replace("+00:00", "Z")
        out["trip_values"] = json.loads(self.trip_values)
        return out


@dataclass
class Evaluation:
    at: datetime
    rule_version: str
    fired: list[Alert] = field(default_factory=list)
    resolved: list[Alert] = field(default_factory=list)
    firing: list[Alert] = field(default_factory=list)
    recently_resolved: list[Alert] = field(default_factory=list)
    deliveries: int = 0
    delivery_failures: int = 0

    def rollback_recommended(self) -> dict[str, list[str]]:
        """Task type → the rollback signals firing for it (seed 004 §7: name the task type and the signals)."""
        found: dict[str, list[str]] = {}
        for a in self.firing:
            if a.action == "rollback":
                found.setdefault(a.task_type or "overall", []).append(json.loads(a.trip_values).get("metric", a.rule))
        return {task: sorted(signals) for task, signals in sorted(found.items())}

    def as_dict(self) -> dict[str, Any]:
        return {
            "evaluated_at": self.at.isoformat().replace("+00:00", "Z"),
            "rule_version": self.rule_version,
            "rollback_recommended": self.rollback_recommended(),
            "firing": [a.public() for a in self.firing],
            "recently_resolved": [a.public() for a in self.recently_resolved],
            "fired_now": [a.alert_key for a in self.fired],
            "resolved_now": [a.alert_key for a in self.resolved],
            "delivery_failures": self.delivery_failures,
        }


def run(
    client,
    *,
    rules_path: Path | str | None = None,
    webhook: str | None = None,
    now: datetime | None = None,
    retries: int = 3,
    backoff_s: float = 0.5,
) -> Evaluation:
    """Evaluate every rule, update the episodes, deliver pending notifications."""
    now = _utc(now) or datetime.now(UTC)
    version, rules = load_rules(rules_path)
    result = Evaluation(now, version)
    known = {}
    for row in client.query(OPEN_SQL, parameters={"since": _text(now - RECENTLY)}).result_rows:
        alert = Alert(*row)
        alert.first_seen, alert.last_seen, alert.resolved_at = (
            _utc(alert.first_seen),
            _utc(alert.last_seen),
            _utc(alert.resolved_at),
        )
        known[alert.alert_key, alert.first_seen] = alert
    open_by_key = {a.alert_key: a for a in known.values() if a.status == "firing"}
    changed: list[Alert] = []
    cache: dict = {}
    for rule in rules:
        if rule.grain == "now":
            value = _signal(client, rule.metric, now)
            verdicts = {
                "": (Verdict(True, now, now, (Point(now, value),)) if rule.breaches(value, None) else Verdict(False))
            }
        else:
            latest, series = _window_series(client, rule, cache, now)
            if latest is None:
                continue
            scopes = set(series) | {a.task_type for a in open_by_key.values() if a.rule == rule.name}
            verdicts = {scope: evaluate(rule, series.get(scope, []), latest) for scope in scopes}
        for scope, verdict in verdicts.items():
            key = f"{rule.name}|{scope}"
            current = open_by_key.get(key)
            values = json.dumps(
                {
                    "metric": rule.metric,
                    "op": rule.op,
                    "limit": rule.limit,
                    "windows": [
                        {"start": _utc(p.start).isoformat().replace("+00:00", "Z"), "value": p.value, "n": p.n}
                        for p in verdict.points
                    ],
                },
                default=str,
            )
            if verdict.breaching and current is None:
                alert = Alert(
                    key,
                    verdict.first_seen,
                    rule.name,
                    scope,
                    rule.severity,
                    rule.action,
                    rule.summary,
                    "firing",
                    verdict.last_seen,
                    None,
                    values,
                    version,
                    "pending",
                )
                result.fired.append(alert)
                changed.append(alert)
            elif verdict.breaching:
                if current.last_seen != verdict.last_seen:
                    current.last_seen, current.trip_values = verdict.last_seen, values
                    changed.append(current)
            elif current is not None:
                current.status, current.resolved_at, current.notify_state = "resolved", now, "pending"
                result.resolved.append(current)
                changed.append(current)
    if changed:
        client.insert("routerscope.alerts", [a.row() for a in changed], column_names=list(ALERT_COLUMNS))
    for alert in changed:
        known[alert.alert_key, alert.first_seen] = alert
    # Deliver everything pending, including what an earlier evaluation failed to deliver.
    delivered = []
    for alert in known.values():
        if alert.notify_state != "pending":
            continue
        if not webhook:
            alert.notify_state = "no_webhook"
            delivered.append(alert)
            continue
        ok, attempts = deliver(webhook, alert, retries=retries, backoff_s=backoff_s)
        client.insert(
            "routerscope.alert_deliveries",
            attempts,
            column_names=["alert_key", "first_seen", "event", "attempt", "status_code", "error"],
        )
        result.deliveries += 1
        if ok:
            alert.notify_state = "sent"
            delivered.append(alert)
        else:
            result.delivery_failures += 1
    if delivered:
        client.insert("routerscope.alerts", [a.row() for a in delivered], column_names=list(ALERT_COLUMNS))
    result.firing = sorted((a for a in known.values() if a.status == "firing"), key=lambda a: a.alert_key)
    result.recently_resolved = sorted(
        (a for a in known.values() if a.status == "resolved" and a.resolved_at and a.resolved_at >= now - RECENTLY),
        key=lambda a: a.alert_key,
    )
    return result


# -- delivery ------------------------------------------------------------------------------------
def slack_body(alert: Alert) -> dict[str, Any]:
    """A Slack-compatible incoming-webhook body (also fine for most chat and paging webhooks)."""
    firing = alert.status == "firing"
    scope = alert.task_type or "overall"
    head = f"{'FIRING' if firing else 'RESOLVED'} [{alert.severity}] {alert.summary} ({scope})"
    trip = json.loads(alert.trip_values)
    if alert.action == "rollback" and firing:
        head += f" — ROLLBACK RECOMMENDED for {scope}: {trip.get('metric')}"
    latest = trip["windows"][-1] if trip.get("windows") else {}
    return {
        "text": head,
        "attachments": [
            {
                "color": "danger" if firing else "good",
                "fields": [
                    {"title": "rule", "value": f"{alert.rule} (rules {alert.rule_version})", "short": True},
                    {
                        "title": "condition",
                        "value": f"{trip.get('metric')} {trip.get('op')} {trip.get('limit')}",
                        "short": True,
                    },
                    {"title": "latest value", "value": f"{latest.get('value')} (n={latest.get('n')})", "short": True},
                    {"title": "since", "value": _utc(alert.first_seen).isoformat(), "short": True},
                ],
            }
        ],
    }


def deliver(url: str, alert: Alert, *, retries: int = 3, backoff_s: float = 0.5, timeout_s: float = 5.0):
    """POST the alert, retrying with exponential backoff. Returns (delivered?, attempt rows)."""
    body = json.dumps(slack_body(alert)).encode()
    event = "firing" if alert.status == "firing" else "resolved"
    attempts = []
    for attempt in range(1, retries + 1):
        status, error = None, ""
        try:
            request = urllib.request.Request(
                url, data=body, headers={"Content-Type": "application/json"}, method="POST"
            )
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                status = response.status
        except urllib.error.HTTPError as exc:
            status, error = exc.code, f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError) as exc:
            error = str(getattr(exc, "reason", exc))[:300]
        attempts.append([alert.alert_key, alert.first_seen, event, attempt, status, error])
        if status is not None and 200 <= status < 300:
            return True, attempts
        if attempt < retries:
            time.sleep(backoff_s * 2 ** (attempt - 1))
    return False, attempts
