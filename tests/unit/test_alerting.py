"""Alert rules: the consecutive-window logic, table-driven, the rules file's validation, and the episode
lifecycle as pure transitions."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from routerscope.errors import ConfigError
from warehouse.alerting import Alert, BreachStreak, Point, Rule, evaluate, load_rules
from warehouse.alerting.evaluate import evaluate_signal, transition, transitions

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
STEP = timedelta(minutes=5)
RULE = Rule(
    name="fb",
    summary="fallback high",
    metric="fallback_rate",
    scope="per_task_type",
    grain="5m",
    op=">",
    limit=0.3,
    windows=3,
    severity="ticket",
    min_n=30,
    denominator="device_entered",
)


def series(*values, n=100):
    """Windows T0, T0+5m, …; a value of None leaves a gap (no window stored)."""
    return [Point(T0 + i * STEP, v, n) for i, v in enumerate(values) if v != "gap"]


@pytest.mark.parametrize(
    "name, points, fires, first_index",
    [
        ("no breach", series(0.1, 0.2, 0.1), False, None),
        ("N-1 breaching windows do not fire", series(0.1, 0.5, 0.5), False, None),
        ("N breaching windows fire", series(0.1, 0.5, 0.5, 0.5), True, 1),
        ("a longer streak starts where it began", series(0.5, 0.5, 0.5, 0.5, 0.5), True, 0),
        ("the latest window clear resolves", series(0.5, 0.5, 0.5, 0.2), False, None),
        ("a gap window breaks the streak", series(0.5, 0.5, "gap", 0.5, 0.5), False, None),
        ("at the limit is not over it", series(0.3, 0.3, 0.3), False, None),
        ("a null rate (empty denominator) never breaches", series(None, None, None), False, None),
        ("min-sample guard: 3 requests cannot page", series(0.9, 0.9, 0.9, n=3), False, None),
        ("min-sample guard: exactly min_n counts", series(0.9, 0.9, 0.9, n=30), True, 0),
    ],
)
def test_consecutive_window_rule(name, points, fires, first_index):
    latest = max(p.start for p in points) if points else T0
    verdict = evaluate(RULE, points, latest)
    assert verdict.breaching is fires, name
    if fires:
        assert verdict.first_seen == T0 + first_index * STEP
        assert verdict.last_seen == latest + STEP


def test_a_window_below_the_sample_guard_in_the_middle_breaks_the_streak():
    points = series(0.9, 0.9, 0.9) + [Point(T0 + 3 * STEP, 0.9, 2)] + [Point(T0 + 4 * STEP, 0.9, 100)]
    assert not evaluate(RULE, points, T0 + 4 * STEP).breaching


def test_equality_rules_on_flags():
    drift = Rule(
        name="d",
        summary="drift",
        metric="l2_l3_drift.drifting",
        scope="overall",
        grain="5m",
        op="==",
        limit=True,
        windows=2,
        severity="ticket",
    )
    assert evaluate(drift, series(True, True), T0 + STEP).breaching
    assert not evaluate(drift, series(True, False), T0 + STEP).breaching


def test_default_rules_load_and_cover_design_section_4():
    version, rules = load_rules()
    assert version
    names = {r.name for r in rules}
    assert {
        "fallback_rate_high",
        "l2_l3_drift",
        "device_bypass",
        "cloud_breaker_open",
        "false_fallback_high",
        "rollback_route_accuracy",
        "rollback_offload_failure",
        "rollback_degrade_trigger",
        "ingest_stale",
        "quarantine_share_high",
        "data_quality_blocking",
    } <= names
    assert {r.name for r in rules if r.action == "rollback"} == {n for n in names if n.startswith("rollback_")}
    assert all(r.windows == 3 for r in rules if r.action == "rollback")


def test_seed004_rollback_rules_are_per_task_type_on_the_metrics_3b_signals_and_denominators():
    """Seed 004 §7 THRESHOLDS = {route_acc: 0.95, offload_fail: 0.02, degrade_rate: 0.05}, 3 windows; METRICS.md §3b:
    the minimum sample applies to each signal's own denominator."""
    _, rules = load_rules()
    rollback = {r.name: (r.metric, r.scope, r.op, r.limit, r.denominator) for r in rules if r.action == "rollback"}
    assert rollback == {
        "rollback_route_accuracy": ("route_accuracy", "per_task_type", "<", 0.95, "route_labeled"),
        "rollback_offload_failure": ("offload_failure_rate", "per_task_type", ">", 0.02, "device_attempts"),
        "rollback_degrade_trigger": ("degrade_trigger_rate", "per_task_type", ">", 0.05, "device_entered"),
    }


@pytest.mark.parametrize(
    "body, message",
    [
        ("rules: []", "version"),
        (
            "version: 1\nrules:\n"
            "  - {name: x, summary: s, metric: m, scope: overall, grain: 5m, "
            "op: '~', limit: 1, windows: 1, severity: page}",
            "op must be",
        ),
        (
            "version: 1\nrules:\n"
            "  - {name: x, summary: s, metric: m, scope: overall, grain: 5m, "
            "op: '>', limit: 1, windows: 0, severity: page}",
            "windows must be",
        ),
        (
            "version: 1\nrules:\n"
            "  - {name: x, summary: s, metric: m, scope: overall, grain: 5m, "
            "op: '>', limit: 1, windows: 1, severity: loud}",
            "severity",
        ),
        (
            "version: 1\nrules:\n"
            "  - {name: x, summary: s, metric: m, scope: overall, grain: 5m, "
            "op: '>', limit: 1, windows: 1, severity: page, colour: red}",
            "unknown field",
        ),
        (
            "version: 1\nrules:\n"
            "  - {name: x, summary: s, metric: pipeline.freshness_lag_s, scope: overall, grain: 5m, "
            "op: '>', limit: 1, windows: 1, severity: page}",
            "grain `now`",
        ),
        ("version: [", "cannot read"),
    ],
)
def test_a_bad_rules_file_is_one_clear_error(tmp_path, body, message):
    path = tmp_path / "rules.yaml"
    path.write_text(body)
    with pytest.raises(ConfigError, match=message):
        load_rules(path)


# -- the episode lifecycle, as pure transitions over the stored episode ------------------------------
NOW = T0 + 10 * STEP


def streak(*values):
    return evaluate(RULE, series(*values), T0 + (len(values) - 1) * STEP)


def episode(last_seen_index: int, status: str = "firing") -> Alert:
    return Alert(
        "fb|intent_classify",
        T0,
        "fb",
        "intent_classify",
        "ticket",
        "",
        "fallback high",
        status,
        T0 + (last_seen_index + 1) * STEP,
        None,
        "{}",
        "v0",
        "sent",
    )


@pytest.mark.parametrize(
    "name, verdict, current, kind",
    [
        ("a new breach fires", streak(0.5, 0.5, 0.5), None, "fired"),
        ("still breaching over the same windows: nothing to store, no repeat", streak(0.5, 0.5, 0.5), episode(2), None),
        (
            "still breaching, one more window: extended, no repeat notification",
            streak(0.5, 0.5, 0.5, 0.6),
            episode(2),
            "extended",
        ),
        ("clear while firing resolves", streak(0.5, 0.5, 0.5, 0.1), episode(2), "resolved"),
        ("clear and quiet: nothing", streak(0.1, 0.1, 0.1), None, None),
    ],
)
def test_episode_transitions(name, verdict, current, kind):
    step = transition(RULE, "intent_classify", verdict, current, "v1", NOW)
    assert (step and step[0]) == kind, name
    if kind == "fired":
        alert = step[1]
        assert (alert.alert_key, alert.status, alert.notify_state, alert.rule_version) == (
            "fb|intent_classify",
            "firing",
            "pending",
            "v1",
        )
        assert alert.first_seen == T0 and alert.last_seen == T0 + 3 * STEP
        assert [w["value"] for w in json.loads(alert.trip_values)["windows"]] == [0.5, 0.5, 0.5]
    if kind == "extended":
        assert step[1].notify_state == "sent" and step[1].last_seen == T0 + 4 * STEP
        assert current.last_seen == T0 + 3 * STEP  # the stored episode object is not changed in place
    if kind == "resolved":
        assert (step[1].status, step[1].resolved_at, step[1].notify_state) == ("resolved", NOW, "pending")


def test_transitions_split_fired_and_resolved_and_store_every_change():
    firing = {"fb|a": replace(episode(2), alert_key="fb|a", task_type="a")}
    change = transitions(
        [(RULE, "a", streak(0.5, 0.5, 0.5, 0.1)), (RULE, "b", streak(0.5, 0.5, 0.5)), (RULE, "c", streak(0.1))],
        firing,
        "v1",
        NOW,
    )
    assert [a.alert_key for a in change.fired] == ["fb|b"]
    assert [a.alert_key for a in change.resolved] == ["fb|a"]
    assert [a.alert_key for a in change.changed] == ["fb|a", "fb|b"]


def test_a_signal_reading_breaches_as_of_the_evaluation_time():
    signal = dict(metric="pipeline.breaker_open.device", scope="overall", grain="now", limit=0, windows=1)
    breaker = replace(RULE, **signal, min_n=0, denominator=None)
    assert evaluate_signal(breaker, 1, NOW) == BreachStreak(True, NOW, NOW, (Point(NOW, 1),))
    assert not evaluate_signal(breaker, 0, NOW).breaching
    assert not evaluate_signal(breaker, None, NOW).breaching
