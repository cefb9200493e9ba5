"""One alert evaluation: gather (stored episodes, each rule's series or signal) → evaluate (pure) →
transitions (pure) → store the new episode versions → deliver what is pending.

"Now" for window rules is the latest stored window of the rule's grain that had ended by the
evaluation time, so an evaluation over replayed or simulated history (`now` in the past) behaves as
it would have live, even when later windows are already stored; the breaker signals are read per window
from `breaker_events` in the same way (the latest window that had ended by the evaluation time); the
other pipeline signals (freshness, data quality, quarantine) as of the evaluation time.

Labels arrive late (hours, days). A rule over a label-based number (route accuracy, false and missed
fallbacks) reads its windows with those numbers recomputed from the labels whose own `event_time` is at or
before the evaluation time (`labels_as_of`): a stored window may have been recomputed since with later labels,
and an evaluation as of a past time must not see them, so a late label never moves an alert into the past.
What late labels reveal about windows before the latest fires when they arrive (`late_streak`), once, marked
`late` in its trip values; its episode still begins at its first window."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import datetime, timedelta
from pathlib import Path

from routerscope.core.errors import ConfigError
from routerscope.core.timeutil import UTC, utc
from routerscope.warehouse import schema_migrations
from routerscope.warehouse.analytics import ppi, stats
from routerscope.warehouse.analytics.alerting.delivery import Notifier
from routerscope.warehouse.analytics.alerting.evaluate import (
    RECENTLY,
    Alert,
    BreachStreak,
    Episodes,
    Evaluation,
    Transitions,
    breaker_open_series,
    evaluate,
    evaluate_signal,
    latest_streak,
    one_page_per_rollback,
    open_by_key,
    pending,
    scopes,
    series_by_scope,
    summarize,
    transitions,
    with_changes,
)
from routerscope.warehouse.analytics.alerting.rules import (
    DEFAULT_RULES,
    WINDOW_GRAINS,
    WINDOW_SIGNALS,
    Rule,
    load_rules,
)
from routerscope.warehouse.analytics.quality import FUTURE_ALLOWANCE
from routerscope.warehouse.queries import alerts as store
from routerscope.warehouse.queries import breaker_events, decisions
from routerscope.warehouse.queries import labels as label_queries

# How far back a window rule reads: far enough to see where a streak began.
LOOKBACK_WINDOWS = 400


def run(
    client,
    *,
    rules_path: Path | str | None = None,
    notifier: Notifier | None = None,
    now: datetime | None = None,
    by: str = "alerts_job",
) -> Evaluation:
    """Evaluate every rule as of `now` (default: the current time), update the episodes, deliver
    pending notifications through `notifier` (None: none configured). The rules file, its version and its
    fingerprint are recorded with the evaluation (`by` names who ran it), so later evaluations and readers
    know which rules judged this warehouse (`rules_for_evaluation`)."""
    now = utc(now) or datetime.now(UTC)
    version, rules = load_rules(rules_path)
    path = rules_file(rules_path)
    store.record_evaluation(client, now, str(path), version, fingerprint(path), by)
    known = stored_episodes(client, now)
    firing = open_by_key(known)
    change = transitions(verdicts(client, rules, firing, now), firing, version, now)
    known = with_changes(known, change.changed)
    grouped = one_page_per_rollback(known, change.fired)  # one rollback recommendation of a task type, one page
    known = with_changes(known, grouped)
    store.write_alerts(client, [a.row() for a in with_changes({}, [*change.changed, *grouped]).values()])
    deliveries, failures = deliver_pending(client, known, notifier)
    refresh = getattr(notifier, "refresh", None)  # Alertmanager: a firing alert is re-sent while it fires
    if refresh is not None:
        refresh([a for a in known.values() if a.status == "firing" and a.notify_state == "sent"])
    return summarize(now, version, change, known, deliveries, failures)


def rules_file(path: Path | str | None) -> Path:
    """The rules file an evaluation reads: `path`, or the shipped defaults."""
    return Path(path).expanduser().resolve() if path else DEFAULT_RULES.resolve()


def fingerprint(path: Path) -> str:
    """SHA-256 of the rules file's bytes ('' when it cannot be read)."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return ""


def read(client, now: datetime | None = None) -> Evaluation:
    """What is stored, evaluating nothing and writing nothing: the firing episodes and those resolved within
    RECENTLY of the last recorded evaluation (default: of `now`, the current time), with the rules' version
    that evaluation used. `routerscope alerts` without `--evaluate`."""
    last = store.last_evaluation(client)
    now = utc(now) or (last["as_of"] if last else None) or datetime.now(UTC)
    known = stored_episodes(client, now)
    version = last["rule_version"] if last else ""
    return summarize(now, version, Transitions([], [], []), known)


def rules_for_evaluation(client, configured: Path | str | None, accept_new: bool = False) -> tuple[Path, str]:
    """The rules file a new evaluation of this warehouse must use, and a warning to print ('' for none).

    The rules the warehouse was last judged with (`alert_evaluations`) win when none are `configured`
    (ROUTERSCOPE_ALERT_RULES unset): the demo judges with its fleet's rules, and an `alerts --evaluate` an hour
    later must not judge the same windows under the shipped defaults and write incidents the demo never raised.
    When those rules are gone or changed, or `configured` ones differ from them, the evaluation is refused
    (ConfigError) unless `accept_new`, and then done under `configured` (or the defaults) with a warning."""
    last = store.last_evaluation(client)
    wanted = rules_file(configured)
    if last is None:
        return wanted, ""
    recorded = Path(last["rules_path"])
    before = f"{recorded} (version {last['rule_version']}, at {last['evaluated_at']:%Y-%m-%d %H:%M} UTC)"
    if configured is None:
        if fingerprint(recorded) == last["rules_sha256"]:
            return recorded, ""
        problem = (
            f"the rules this warehouse was judged with, {before}, are {'changed' if recorded.exists() else 'gone'}"
        )
    elif fingerprint(wanted) == last["rules_sha256"]:
        return wanted, ""
    else:
        problem = f"ROUTERSCOPE_ALERT_RULES={wanted} differs from the rules this warehouse was judged with, {before}"
    if not accept_new:
        raise ConfigError(
            f"{problem}: evaluating under other rules would write incidents its own runs never raised. Set "
            "ROUTERSCOPE_ALERT_RULES to the rules to judge with and add --new-rules to evaluate anyway."
        )
    return wanted, f"{problem}; evaluating under {wanted} as asked (--new-rules)"


def stored_episodes(client, now: datetime) -> Episodes:
    return {(a.alert_key, a.first_seen): a for a in (Alert(**e) for e in store.open_or_recent(client, now - RECENTLY))}


def verdicts(
    client, rules: list[Rule], firing: dict[str, Alert], now: datetime
) -> list[tuple[Rule, str, BreachStreak]]:
    """Every rule's verdict per scope, from the warehouse as of `now` (window rules of a grain with no
    ended window yet have none)."""
    out = []
    windows: dict[str, tuple[datetime | None, list]] = {}  # grain → (latest, rows): read once per grain
    for rule in rules:
        if rule.metric in WINDOW_SIGNALS:
            out.append((rule, "", breaker_verdict(client, rule, now)))
            continue
        if rule.grain == "now":
            out.append((rule, "", evaluate_signal(rule, pipeline_signal(client, rule.metric, now), now)))
            continue
        if rule.grain not in windows:
            windows[rule.grain] = _windows(client, rule.grain, now)
        latest, rows = windows[rule.grain]
        if latest is None:
            continue
        if uses_labels(rule):  # labels as of their arrival: never one dated after `now`
            key = f"{rule.grain}|labels"
            if key not in windows:
                most = max(r.windows for r in rules if r.grain == rule.grain and uses_labels(r))
                windows[key] = (latest, labels_as_of(client, rule.grain, rows, latest, now, most))
            rows = windows[key][1]
        series = series_by_scope(rule, rows)
        for scope in scopes(rule, series, firing):
            streak = evaluate(rule, series.get(scope, []), latest, scope)
            if not streak.breaching and uses_labels(rule):
                streak = late_streak(client, rule, series.get(scope, []), latest, scope, firing)
            out.append((rule, scope, streak))
    return out


def late_streak(client, rule: Rule, series: list, latest: datetime, scope: str, firing: dict) -> BreachStreak:
    """A label-based rule whose latest window does not breach may still have breached earlier, on labels that
    arrived since: the most recent such streak fires now, once (an episode beginning at its first window is
    never raised twice), and resolves at the next evaluation. While an episode of the rule is firing on
    `scope`, nothing late is looked for: that episode resolves first."""
    if f"{rule.name}|{scope}" in firing:
        return BreachStreak(False)
    streak = latest_streak(rule, series, latest, scope)
    if streak.breaching and store.episode_exists(client, f"{rule.name}|{scope}", streak.span()[0]):
        return BreachStreak(False)
    return streak


def _windows(client, grain: str, now: datetime) -> tuple[datetime | None, list]:
    latest = store.latest_window_start(client, grain, now)
    if latest is None:
        return None, []
    return latest, store.window_series(client, grain, latest - WINDOW_GRAINS[grain] * LOOKBACK_WINDOWS, latest)


# The window keys that rest on labels (docs/metrics.md §3, §3b, §3c): an alert evaluated as of `now` recomputes
# them from the labels that had arrived by `now` (their own event_time), whatever the stored window holds. A rule
# reads a label key when its metric, denominator or interval is one of these or lies under one
# (`false_fallback_by_type.quality_est.rate`).
LABEL_KEYS = (
    "route_accuracy",
    "route_accuracy_ci",
    "route_labeled",
    "route_accuracy_est",
    "false_fallback_rate",
    "false_fallback_ci",
    "false_fallback_labeled",
    "false_fallback_est",
    "false_fallback_by_type",
    "missed_fallback_rate",
    "missed_fallback_ci",
    "missed_fallback_labeled",
    "missed_fallback_est",
    "route_accuracy_ppi",  # docs/metrics.md §3d, as of arrival too (the others' _ppi are not: they read null)
    "false_fallback_ppi",
    "missed_fallback_ppi",
)


def uses_labels(rule: Rule) -> bool:
    return any(k.split(".")[0] in LABEL_KEYS for k in (rule.metric, rule.denominator, rule.interval) if k)


def as_of_arrival(metrics: dict, strata: Mapping[str, list] | None) -> dict:
    """A stored window's metrics with its label keys recomputed from `strata` (`labels.labels_as_of`: per measure,
    (N_h, n_h, k_h) per stratum, counting only the labels that had arrived; §3d's six sums per stratum under
    `ra_ppi`): the labeled shares, their Wilson intervals and denominators (§3, §3b), the quality fallbacks alone
    (`false_fallback_by_type.quality`) and the §3c estimates; no strata (no live event in the window) → nothing
    labeled."""
    strata = strata or {}
    out = dict(metrics)

    def counts(measure: str) -> tuple[int, int]:
        rows = strata.get(measure) or []
        return sum(k for _, _, k in rows), sum(n for _, n, _ in rows)

    for key, measure, n_key in (
        ("route_accuracy", "ra", "route_labeled"),
        ("false_fallback", "ff", "false_fallback_labeled"),
        ("missed_fallback", "mf", "missed_fallback_labeled"),
    ):
        k, labeled = counts(measure)
        out[key if key == "route_accuracy" else f"{key}_rate"] = stats.ratio(k, labeled)
        out[f"{key}_ci"] = stats.wilson(k, labeled)
        out[n_key] = labeled
        out[f"{key}_est"] = stats.post_stratified(strata.get(measure) or [])
    k, labeled = counts("qf")
    by_type = dict(out.get("false_fallback_by_type") or {})
    by_type["quality"] = {"rate": stats.ratio(k, labeled), "labeled": labeled, "ci": stats.wilson(k, labeled)}
    by_type["quality_est"] = stats.post_stratified(strata.get("qf") or [])
    out["false_fallback_by_type"] = by_type
    # §3d: route accuracy corrected by the people's verdicts that had arrived; the fallback estimates' _ppi are not
    # recomputed as of arrival, so an alert never reads them from a window that holds later labels
    out["route_accuracy_ppi"] = ppi.ppi(strata.get("ra_ppi") or [])
    out["false_fallback_ppi"] = out["missed_fallback_ppi"] = None
    return out


# How far back from the latest window the label keys are recomputed as of the evaluation (the simulated
# reviewers' longest delay is 30 h; a label later than this after its window is taken as the stored window has
# it). It bounds the read: every evaluation would otherwise read the whole look-back of decisions, 400 days for
# a daily rule. At least the rule's own streak is recomputed.
LATE_LABEL_HORIZON = timedelta(days=2)


def labels_as_of(client, grain: str, rows: list, latest: datetime, now: datetime, windows: int = 1) -> list:
    """`rows` (task_type, start, metrics) with their label keys as of `now` (see `as_of_arrival`), for the
    windows within LATE_LABEL_HORIZON (or `windows` windows) of `latest`; older ones as stored."""
    if not rows:
        return rows
    step = WINDOW_GRAINS[grain]
    horizon = max(LATE_LABEL_HORIZON, step * windows)
    since = max(min(start for _, start, _ in rows), latest - horizon)
    strata = label_queries.labels_as_of(client, int(step.total_seconds()), since, latest + step, now)
    return [
        (task_type, start, as_of_arrival(m, strata.get((task_type, start))) if start >= since else m)
        for task_type, start, m in rows
    ]


def last_ended_window(now: datetime, step: timedelta) -> datetime:
    """The start of the latest window of length `step` (aligned to the epoch, UTC) that had ended by `now`."""
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    return epoch + ((now - epoch) // step) * step - step


def breaker_verdict(client, rule: Rule, now: datetime) -> BreachStreak:
    """`pipeline.breaker_open.<boundary>` as of each window up to the latest that had ended by `now`, from
    `breaker_events` (see evaluate.breaker_open_series)."""
    step = WINDOW_GRAINS[rule.grain]
    latest = last_ended_window(now, step)
    since = latest - step * (LOOKBACK_WINDOWS - 1)
    boundary = rule.metric.rsplit(".", 1)[1]
    found = breaker_events.signal_transitions(client, boundary, since, latest + step)
    starts = [since + k * step for k in range(LOOKBACK_WINDOWS)]
    return evaluate(rule, breaker_open_series(found, starts, step), latest)


def pipeline_signal(client, metric: str, now: datetime):
    """A pipeline signal's value as of `now`."""
    if metric == "pipeline.freshness_lag_s":
        # events dated past now + the allowance (clock errors) must not hide stale ingest
        newest = decisions.newest_event(client, now + FUTURE_ALLOWANCE)
        if newest is None:  # nothing ever arrived: as stale as the pipeline is old (its warehouse's creation)
            newest = schema_migrations.created_at(client)
            if newest is None or newest > now:  # (replaying a time before the warehouse existed)
                return None
        return (now - newest).total_seconds()
    if metric == "pipeline.dq_blocking_failures":
        return store.blocking_dq_failures(client)
    if metric == "pipeline.quarantine_share":
        return store.quarantine_share(client, now - timedelta(days=1))
    raise ConfigError(f"unknown pipeline signal {metric!r}")


def deliver_pending(client, known: Episodes, notifier: Notifier | None) -> tuple[int, int]:
    """Deliver every pending notification, record the attempts, store the episodes that got through
    (or that have nowhere to go: `no_webhook`). Returns (deliveries tried, deliveries failed)."""
    done, tried, failed = [], 0, 0
    for alert in pending(known):
        if notifier is None or not notifier.configured():
            alert.notify_state = "no_webhook"
            done.append(alert)
            continue
        ok, attempts = notifier.deliver(alert)
        store.write_deliveries(client, attempts)
        tried += 1
        if ok:
            alert.notify_state = "sent"
            done.append(alert)
        else:
            failed += 1
    store.write_alerts(client, [a.row() for a in done])
    return tried, failed
