"""One alert evaluation: gather (stored episodes, each rule's series or signal) → evaluate (pure) →
transitions (pure) → store the new episode versions → deliver what is pending.

"Now" for window rules is the latest stored window of the rule's grain that had ended by the
evaluation time, so an evaluation over replayed or simulated history (`now` in the past) behaves as
it would have live, even when later windows are already stored; the breaker signals are read per window
from `breaker_events` in the same way (the latest window that had ended by the evaluation time); the
other pipeline signals (freshness, data quality, quarantine) as of the evaluation time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from routerscope.core.errors import ConfigError
from routerscope.core.timeutil import utc
from warehouse.analytics.alerting.delivery import Notifier
from warehouse.analytics.alerting.evaluate import (
    RECENTLY,
    Alert,
    BreachStreak,
    Episodes,
    Evaluation,
    breaker_open_series,
    evaluate,
    evaluate_signal,
    open_by_key,
    pending,
    scopes,
    series_by_scope,
    summarize,
    transitions,
    with_changes,
)
from warehouse.analytics.alerting.rules import GRAINS, WINDOW_SIGNALS, Rule, load_rules
from warehouse.queries import alerts as store
from warehouse.queries import breaker_events, decisions, schema_migrations

# How far back a window rule reads: far enough to see where a streak began.
LOOKBACK_WINDOWS = 400


def run(
    client, *, rules_path: Path | str | None = None, notifier: Notifier | None = None, now: datetime | None = None
) -> Evaluation:
    """Evaluate every rule as of `now` (default: the current time), update the episodes, deliver
    pending notifications through `notifier` (None: none configured)."""
    now = utc(now) or datetime.now(UTC)
    version, rules = load_rules(rules_path)
    known = stored_episodes(client, now)
    firing = open_by_key(known)
    change = transitions(verdicts(client, rules, firing, now), firing, version, now)
    store.write_alerts(client, [a.row() for a in change.changed])
    known = with_changes(known, change.changed)
    deliveries, failures = deliver_pending(client, known, notifier)
    return summarize(now, version, change, known, deliveries, failures)


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
        series = series_by_scope(rule, rows)
        out += [
            (rule, scope, evaluate(rule, series.get(scope, []), latest, scope))
            for scope in scopes(rule, series, firing)
        ]
    return out


def _windows(client, grain: str, now: datetime) -> tuple[datetime | None, list]:
    latest = store.latest_window_start(client, grain, now)
    if latest is None:
        return None, []
    return latest, store.window_series(client, grain, latest - GRAINS[grain] * LOOKBACK_WINDOWS, latest)


def last_ended_window(now: datetime, step: timedelta) -> datetime:
    """The start of the latest window of length `step` (aligned to the epoch, UTC) that had ended by `now`."""
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    return epoch + ((now - epoch) // step) * step - step


def breaker_verdict(client, rule: Rule, now: datetime) -> BreachStreak:
    """`pipeline.breaker_open.<boundary>` as of each window up to the latest that had ended by `now`, from
    `breaker_events` (see evaluate.breaker_open_series)."""
    step = GRAINS[rule.grain]
    latest = last_ended_window(now, step)
    since = latest - step * (LOOKBACK_WINDOWS - 1)
    boundary = rule.metric.rsplit(".", 1)[1]
    found = breaker_events.signal_transitions(client, boundary, since, latest + step)
    starts = [since + k * step for k in range(LOOKBACK_WINDOWS)]
    return evaluate(rule, breaker_open_series(found, starts, step), latest)


def pipeline_signal(client, metric: str, now: datetime):
    """A pipeline signal's value as of `now`."""
    if metric == "pipeline.freshness_lag_s":
        from warehouse.analytics.quality import FUTURE_ALLOWANCE

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
