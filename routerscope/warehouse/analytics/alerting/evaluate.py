"""The pure part of alerting: a rule over a series (the consecutive-window streak), and the episode
lifecycle (fired → still firing → resolved) as functions over the stored episodes. No I/O here: the
engine (`routerscope.warehouse.analytics.alerting.engine`) reads the series and the episodes, calls these, and stores
and
delivers what they return.

A rule fires when its last `windows` consecutive windows all breach, each with at least `min_n`
events behind the number (act on consecutive breaches, not on one noisy point — docs/sources.md#seed-004-7); it
stays firing without repeat notifications while that holds, and resolves when the latest window no
longer breaches."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from routerscope.core.timeutil import utc_iso
from routerscope.warehouse.analytics.alerting.rules import WINDOW_GRAINS, Rule
from routerscope.warehouse.queries.alerts import ALERT_COLUMNS

# A resolved episode is listed (and re-read by the next evaluation) for this long.
RECENTLY = timedelta(hours=24)


def iso_z(t: datetime) -> str:
    return utc_iso(t, "auto")


@dataclass(frozen=True)
class Point:
    """One window of a series: its start, the metric's value, and the events behind it."""

    start: datetime
    value: Any
    n: int | None = None
    interval: list[float] | None = None  # the value's confidence interval, for rules that ask for evidence
    read: str | None = None  # the metric read instead of the rule's (docs/metrics.md §3d: the corrected estimate)


@dataclass(frozen=True)
class BreachStreak:
    """The verdict of one rule on one scope: does it breach, and over which windows (the streak)."""

    breaching: bool
    first_seen: datetime | None = None  # start of the earliest window of the breaching streak
    last_seen: datetime | None = None  # end of the latest breaching window
    points: tuple[Point, ...] = ()
    late: bool = False  # a streak before the latest window, known only once its labels arrived (`latest_streak`)

    def span(self) -> tuple[datetime, datetime]:
        """(first_seen, last_seen) of a breaching streak, which always has both (`evaluate`, `evaluate_signal`)."""
        if self.first_seen is None or self.last_seen is None:
            raise ValueError("a verdict that does not breach has no span")
        return self.first_seen, self.last_seen


def evaluate(rule: Rule, series: list[Point], latest: datetime, scope: str = "") -> BreachStreak:
    """Does `rule` breach as of the window starting at `latest`? `series`: the windows of `scope` (a task
    type, '' = overall), judged against the limit that applies to it (`Rule.limit_for`).

    The last `rule.windows` windows must all be present (a gap breaks the streak) and breach. The
    streak is then extended back as far as it goes, so first_seen is where the episode began."""
    step = WINDOW_GRAINS[rule.grain]
    by_start = {p.start: p for p in series}
    streak: list[Point] = []
    t = latest
    while t in by_start and rule.breaches(by_start[t].value, by_start[t].n, by_start[t].interval, scope):
        streak.append(by_start[t])
        t -= step
    if len(streak) < rule.windows:
        return BreachStreak(False)
    streak.reverse()
    return BreachStreak(True, streak[0].start, streak[-1].start + step, tuple(streak))


def latest_streak(rule: Rule, series: list[Point], latest: datetime, scope: str = "") -> BreachStreak:
    """The most recent breaching streak that ended before the window starting at `latest` (that window itself
    does not breach), marked `late`: for a label-based rule, windows whose labels arrived after they had been
    evaluated. BreachStreak(False) when there is none in `series`."""
    for start in sorted((p.start for p in series if p.start < latest), reverse=True):
        streak = evaluate(rule, series, start, scope)
        if streak.breaching:
            return replace(streak, late=True)
    return BreachStreak(False)


def evaluate_signal(rule: Rule, value, now: datetime) -> BreachStreak:
    """A pipeline signal (grain `now`): one reading, as of the evaluation time."""
    return BreachStreak(True, now, now, (Point(now, value),)) if rule.breaches(value, None) else BreachStreak(False)


def breaker_open_series(transitions: list[dict], starts: list[datetime], step: timedelta) -> list[Point]:
    """`pipeline.breaker_open.<boundary>` per window (docs/metrics.md "Pipeline signals per window"): for each window
    [start, start + step), the number of instances whose breaker was open at any moment in it.

    `transitions`: one boundary's transitions per instance in the breaker's own order (`seq`), with the last
    one before the first window (the state carried in). A transition to `open` opens a span that lasts until
    the instance's next transition (a clock that stepped back still leaves the moment of the transition) or,
    with none, for good; a first transition *from* `open` means the breaker was open before it. So the signal
    is the same whether the alert job runs live, late, or over history, and a breaker that opened and closed
    between two runs is not missed."""
    spans: list[tuple[str, datetime | None, datetime | None]] = []  # (instance, from, until); None: unbounded
    chains: dict[str, list[dict]] = {}
    for t in transitions:
        chains.setdefault(t["instance_id"], []).append(t)
    for instance, chain in chains.items():
        if chain[0]["from_state"] == "open":
            spans.append((instance, None, chain[0]["event_time"]))
        for k, t in enumerate(chain):
            if t["to_state"] != "open":
                continue
            opened = t["event_time"]
            closed = chain[k + 1]["event_time"] if k + 1 < len(chain) else None
            spans.append(
                (instance, opened, None if closed is None else max(closed, opened + timedelta(milliseconds=1)))
            )
    points = []
    for start in starts:
        end = start + step
        open_ = {i for i, a, b in spans if (a is None or a < end) and (b is None or b > start)}
        points.append(Point(start, len(open_)))
    return points


def signal(metric: str) -> str:
    """A rule's metric as the signal it names: `.rate` of a §3c estimate dropped (`route_accuracy_est.rate` →
    `route_accuracy_est`), any other metric as it is."""
    return metric.removesuffix(".rate")


def dig(metrics: dict, path: str):
    """A metric of a stored window by its dotted path (`degrade_share.L4`); None when absent."""
    value: Any = metrics
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def series_by_scope(rule: Rule, rows: Iterable[tuple[str, datetime, dict]]) -> dict[str, list[Point]]:
    """The rule's series per scope ('' = overall) from stored windows (task_type, start, metrics)."""
    series: dict[str, list[Point]] = {}
    for task_type, start, metrics in rows:
        if (rule.scope == "overall") != (task_type == ""):
            continue
        n = dig(metrics, rule.denominator) if rule.denominator else None
        metric, interval_key = corrected(metrics, rule.metric), rule.interval
        if metric != rule.metric and interval_key and interval_key.startswith(rule.metric.split(".")[0] + "."):
            interval_key = metric.split(".")[0] + "." + interval_key.split(".", 1)[1]
        interval = dig(metrics, interval_key) if interval_key else None
        read = metric if metric != rule.metric else None
        series.setdefault(task_type, []).append(Point(start, dig(metrics, metric), n, interval, read))
    return series


# docs/metrics.md §3d: a §3c estimate and the prediction-powered one of the same population
CORRECTED = {
    "route_accuracy_est": "route_accuracy_ppi",
    "missed_fallback_est": "missed_fallback_ppi",
    "false_fallback_est": "false_fallback_ppi",
}


def corrected(metrics: dict, path: str) -> str:
    """The path a rule reads: a §3c estimate's `rate` from the §3d estimate of the same population where the window
    has one (`route_accuracy_est.rate` → `route_accuracy_ppi.rate`), so a decision reads the judge's verdicts
    corrected by people's and says so; else `path`."""
    name, _, part = path.partition(".")
    other = CORRECTED.get(name)
    if other and part == "rate" and isinstance(metrics.get(other), dict):
        return f"{other}.{part}"
    return path


@dataclass
class Alert:
    """One episode of a rule on a scope, as stored in `alerts`."""

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
            out[k] = None if out[k] is None else iso_z(out[k])
        out["trip_values"] = json.loads(self.trip_values)
        return out


Episodes = dict[tuple[str, datetime], Alert]  # (alert_key, first_seen) → the episode's latest version


def open_by_key(known: Episodes) -> dict[str, Alert]:
    """The firing episode of each rule|scope."""
    return {a.alert_key: a for a in known.values() if a.status == "firing"}


def scopes(rule: Rule, series: dict[str, list[Point]], firing: dict[str, Alert]) -> set[str]:
    """Every scope with windows, and every scope the rule is firing on (so that it can resolve)."""
    return set(series) | {a.task_type for a in firing.values() if a.rule == rule.name}


def trip_values(rule: Rule, streak: BreachStreak, scope: str = "") -> str:
    """JSON of the condition and the windows that tripped it (stored with the episode). `limit` is the one
    that applied to `scope`; when that is a task type's own limit, `default_limit` is the rule's `limit`."""
    windows = [
        {
            "start": iso_z(p.start),
            "value": p.value,
            "n": p.n,
            **({"interval": p.interval} if rule.interval else {}),
            **({"read": p.read} if p.read else {}),
        }
        for p in streak.points
    ]
    limit = rule.limit_for(scope)
    own = {"default_limit": rule.limit} if scope in (rule.limits or {}) else {}
    late = {"late": True} if streak.late else {}  # raised when its labels arrived, after the windows it names
    return json.dumps(
        {"metric": rule.metric, "op": rule.op, "limit": limit, **own, **late, "windows": windows}, default=str
    )


def transition(
    rule: Rule, scope: str, streak: BreachStreak, current: Alert | None, version: str, now: datetime
) -> tuple[str, Alert] | None:
    """What a verdict does to the rule's episode on `scope`: ("fired" | "extended" | "resolved", the new
    version of the episode), or None when nothing changes (still firing over the same windows, or quiet)."""
    if streak.breaching and current is None:
        first_seen, last_seen = streak.span()
        alert = Alert(
            f"{rule.name}|{scope}",
            first_seen,
            rule.name,
            scope,
            rule.severity,
            rule.action,
            rule.summary_for(scope),
            "firing",
            last_seen,
            None,
            trip_values(rule, streak, scope),
            version,
            "pending",
        )
        return "fired", alert
    if streak.breaching and current is not None:
        last_seen = streak.span()[1]
        if last_seen <= current.last_seen:  # the same windows, or an evaluation as of an earlier time
            return None
        return "extended", replace(current, last_seen=last_seen, trip_values=trip_values(rule, streak, scope))
    if current is not None:
        if now < current.last_seen:
            # An evaluation as of a time before the episode was last seen breaching (a replay of history, a
            # demo re-run evaluating its span after `alerts --evaluate` ran as of the wall clock) cannot say it
            # is over: it would resolve before it fired. A later evaluation resolves it.
            return None
        # a rollback episode paged with its task type's first one (`one_page_per_rollback`) resolves quietly too
        state = GROUPED if current.notify_state == GROUPED else "pending"
        return "resolved", replace(current, status="resolved", resolved_at=now, notify_state=state)
    return None


GROUPED = "grouped"  # notify_state of a rollback episode paged with its task type's first one (never delivered alone)


def one_page_per_rollback(known: Episodes, fired: Iterable[Alert]) -> list[Alert]:
    """One rollback recommendation, one page (docs/metrics.md, "One rollback truth"): a rollback episode fired while
    another rollback episode of the same task type fires is `grouped` — stored, listed, never delivered on its own
    (a second signal of the same recommendation paged on-call twice). When the episode that paged has resolved and a
    grouped one still fires, the grouped one pages (the recommendation stands). Returns the episodes changed."""
    changed = []
    fired_now = {(a.alert_key, a.first_seen) for a in fired}
    by_task: dict[str, list[Alert]] = {}
    for a in known.values():
        if a.action == "rollback" and a.status == "firing":
            by_task.setdefault(a.task_type, []).append(a)
    for alerts in by_task.values():
        alerts.sort(key=lambda a: (a.first_seen, a.alert_key))
        paging = [a for a in alerts if a.notify_state != GROUPED and (a.alert_key, a.first_seen) not in fired_now]
        primary = paging[0] if paging else next((a for a in alerts if a.notify_state != GROUPED), alerts[0])
        for a in alerts:
            if a is primary and a.notify_state == GROUPED:
                changed.append(replace(a, notify_state="pending"))
            elif a is not primary and (a.alert_key, a.first_seen) in fired_now and a.notify_state == "pending":
                changed.append(replace(a, notify_state=GROUPED))
    return changed


@dataclass(frozen=True)
class Transitions:
    fired: list[Alert]
    resolved: list[Alert]
    changed: list[Alert]  # every new version to store: fired, extended and resolved


def transitions(
    verdicts: Iterable[tuple[Rule, str, BreachStreak]], firing: dict[str, Alert], version: str, now: datetime
) -> Transitions:
    fired, resolved, changed = [], [], []
    for rule, scope, streak in verdicts:
        step = transition(rule, scope, streak, firing.get(f"{rule.name}|{scope}"), version, now)
        if step is None:
            continue
        kind, alert = step
        changed.append(alert)
        if kind == "fired":
            fired.append(alert)
        elif kind == "resolved":
            resolved.append(alert)
    return Transitions(fired, resolved, changed)


def with_changes(known: Episodes, changed: Iterable[Alert]) -> Episodes:
    return {**known, **{(a.alert_key, a.first_seen): a for a in changed}}


def pending(known: Episodes) -> list[Alert]:
    """Every episode with a notification still owed, including what an earlier evaluation failed to deliver."""
    return [a for a in known.values() if a.notify_state == "pending"]


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
        """Task type → the rollback signals firing for it
        (docs/sources.md#seed-004-7: name the task type and the signals)."""
        found: dict[str, list[str]] = {}
        for a in self.firing:
            if a.action == "rollback":
                found.setdefault(a.task_type or "overall", []).append(
                    signal(json.loads(a.trip_values).get("metric", a.rule))
                )
        return {task: sorted(signals) for task, signals in sorted(found.items())}

    def rollback_evidence(self) -> dict[str, dict[str, dict[str, Any]]]:
        """Task type → breached signal → its latest window's value, interval and sample, and the limit that
        applied to the task type (docs/metrics.md §3b: the recommendation names the values and their intervals)."""
        found: dict[str, dict[str, dict[str, Any]]] = {}
        for a in self.firing:
            if a.action == "rollback":
                trip = json.loads(a.trip_values)
                latest = trip["windows"][-1] if trip.get("windows") else {}
                found.setdefault(a.task_type or "overall", {})[signal(trip.get("metric", a.rule))] = {
                    "value": latest.get("value"),
                    "interval": latest.get("interval"),
                    "n": latest.get("n"),
                    "limit": trip.get("limit"),
                    "windows": len(trip.get("windows", [])),
                }
        return dict(sorted(found.items()))

    def as_dict(self) -> dict[str, Any]:
        return {
            "evaluated_at": iso_z(self.at),
            "rule_version": self.rule_version,
            "rollback_recommended": self.rollback_recommended(),
            "rollback_evidence": self.rollback_evidence(),
            "firing": [a.public() for a in self.firing],
            "recently_resolved": [a.public() for a in self.recently_resolved],
            "fired_now": [a.alert_key for a in self.fired],
            "resolved_now": [a.alert_key for a in self.resolved],
            "delivery_failures": self.delivery_failures,
        }


def summarize(
    now: datetime, version: str, change: Transitions, known: Episodes, deliveries: int = 0, failures: int = 0
) -> Evaluation:
    """The evaluation's report: what changed, what is firing, what resolved within RECENTLY."""
    firing = sorted((a for a in known.values() if a.status == "firing"), key=lambda a: a.alert_key)
    recently_resolved = sorted(
        (a for a in known.values() if a.status == "resolved" and a.resolved_at and a.resolved_at >= now - RECENTLY),
        key=lambda a: a.alert_key,
    )
    return Evaluation(now, version, change.fired, change.resolved, firing, recently_resolved, deliveries, failures)
