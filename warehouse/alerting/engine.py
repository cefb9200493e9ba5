"""One alert evaluation: gather (stored episodes, each rule's series or signal) → evaluate (pure) →
transitions (pure) → store the new episode versions → deliver what is pending.

"Now" for window rules is the latest stored window of the rule's grain that had ended by the
evaluation time, so an evaluation over replayed or simulated history (`now` in the past) behaves as
it would have live, even when later windows are already stored; pipeline signals (freshness, data
quality, breakers) are read as of the evaluation time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from routerscope.errors import ConfigError
from routerscope.timeutil import utc
from warehouse.alerting.delivery import Notifier
from warehouse.alerting.evaluate import (
    RECENTLY,
    Alert,
    BreachStreak,
    Episodes,
    Evaluation,
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
from warehouse.alerting.rules import GRAINS, Rule, load_rules
from warehouse.queries import alerts as store
from warehouse.queries import decisions, schema_migrations

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
        if rule.grain == "now":
            out.append((rule, "", evaluate_signal(rule, pipeline_signal(client, rule.metric, now), now)))
            continue
        if rule.grain not in windows:
            windows[rule.grain] = _windows(client, rule.grain, now)
        latest, rows = windows[rule.grain]
        if latest is None:
            continue
        series = series_by_scope(rule, rows)
        out += [(rule, scope, evaluate(rule, series.get(scope, []), latest)) for scope in scopes(rule, series, firing)]
    return out


def _windows(client, grain: str, now: datetime) -> tuple[datetime | None, list]:
    latest = store.latest_window_start(client, grain, now)
    if latest is None:
        return None, []
    return latest, store.window_series(client, grain, latest - GRAINS[grain] * LOOKBACK_WINDOWS, latest)


def pipeline_signal(client, metric: str, now: datetime):
    """A pipeline signal's value as of `now`."""
    if metric == "pipeline.freshness_lag_s":
        from warehouse.quality import FUTURE_ALLOWANCE

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
    if metric.startswith("pipeline.breaker_open."):
        return store.open_breakers(client, metric.rsplit(".", 1)[1])
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
