"""Alert rules: the consecutive-window logic, table-driven, the rules file's validation, and the episode
lifecycle as pure transitions."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from routerscope.core.errors import ConfigError
from routerscope.warehouse.analytics.alerting import Alert, BreachStreak, Point, Rule, evaluate, load_rules
from routerscope.warehouse.analytics.alerting.evaluate import evaluate_signal, series_by_scope, transition, transitions

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
    """docs/sources.md#seed-004-7 THRESHOLDS = {route_acc: 0.95, offload_fail: 0.02, degrade_rate: 0.05}, 3 windows;
    docs/metrics.md §3b: the minimum sample applies to each signal's own denominator; route accuracy rests on
    labels, so the rule reads §3c's estimate of it and the estimate's interval."""
    _, rules = load_rules()
    rollback = {r.name: (r.metric, r.scope, r.op, r.limit, r.denominator) for r in rules if r.action == "rollback"}
    assert rollback == {
        "rollback_route_accuracy": ("route_accuracy_est.rate", "per_task_type", "<", 0.95, "route_labeled"),
        "rollback_offload_failure": ("offload_failure_rate", "per_task_type", ">", 0.02, "device_attempts"),
        "rollback_degrade_trigger": ("degrade_trigger_rate", "per_task_type", ">", 0.05, "device_entered"),
    }


def _rollback_rule(name: str):
    return next(r for r in load_rules()[1] if r.name == name)


def _windows(*counts):
    """Stored 5-minute windows of one task type from (degrade-triggered, device-entered) counts, with the
    metric set's own Wilson intervals."""
    from routerscope.warehouse.analytics import stats

    return [
        (
            "tool_call",
            T0 + i * STEP,
            {"degrade_trigger_rate": k / n, "degrade_trigger_ci": stats.wilson(k, n), "device_entered": n},
        )
        for i, (k, n) in enumerate(counts)
    ]


def test_seed004_calm_windows_over_the_point_limit_do_not_recommend_a_rollback():
    """docs/metrics.md §3b: tool_call's degrade trigger 2/32 = 0.062, 2/34 = 0.059, 2/37 = 0.054 sits over the 0.05
    limit three windows running, but each Wilson interval contains the limit (lows 0.0173, 0.0163, 0.0150:
    (2, 32): centre (0.0625 + 3.841459/64)/1.120046 = 0.109391, half 0.092080 → 0.017311): no evidence, no page."""
    rule = _rollback_rule("rollback_degrade_trigger")
    assert rule.interval == "degrade_trigger_ci"
    series_ = series_by_scope(rule, _windows((2, 32), (2, 34), (2, 37)))["tool_call"]
    assert [round(p.interval[0], 6) for p in series_] == [0.017311, 0.016283, 0.014951]
    assert not evaluate(rule, series_, T0 + 2 * STEP).breaching
    # the point estimate alone would have paged
    assert evaluate(replace(rule, interval=None), series_, T0 + 2 * STEP).breaching


def test_seed004_a_rollback_fires_when_every_interval_lies_beyond_the_limit_and_names_them():
    """10/35, 9/33, 11/36 device-entered requests sent on to the cloud: Wilson lows 0.163, 0.151, 0.180 > 0.05."""
    rule = _rollback_rule("rollback_degrade_trigger")
    series_ = series_by_scope(rule, _windows((10, 35), (9, 33), (11, 36)))["tool_call"]
    verdict = evaluate(rule, series_, T0 + 2 * STEP)
    assert verdict.breaching and verdict.first_seen == T0
    step = transition(rule, "tool_call", verdict, None, "v1", NOW)
    trip = json.loads(step[1].trip_values)
    assert [round(w["interval"][0], 6) for w in trip["windows"]] == [0.163265, 0.150674, 0.180045]
    from routerscope.warehouse.analytics.alerting import slack_body

    assert "ROLLBACK RECOMMENDED for tool_call: degrade_trigger_rate 0.306 [0.18, 0.469]" in slack_body(step[1])["text"]


@pytest.mark.parametrize(
    "name, accuracy, breaches",
    [
        # 28/32 = 0.875 < 0.95, and the interval's high end 0.950299 is not: the limit is inside it
        ("28 of 32 correct cannot tell 0.875 from 0.95", (28, 32), False),
        # 20/32 = 0.625: Wilson high 0.773 < 0.95
        ("20 of 32 correct is evidence", (20, 32), True),
        ("31 of 32 correct is fine either way", (31, 32), False),
    ],
)
def test_seed004_route_accuracy_breaches_on_the_interval_high_end(name, accuracy, breaches):
    from routerscope.warehouse.analytics import stats

    rule = _rollback_rule("rollback_route_accuracy")
    k, n = accuracy
    assert rule.breaches(k / n, n, stats.wilson(k, n)) is breaches, name
    assert not rule.breaches(k / n, n, None)  # no interval, no evidence


# -- per task type limits (docs/metrics.md §3b: a confidence-gated task type's limit sits above its baseline) --
PER_TASK = replace(
    RULE, summary="fallback over its limit ({limit})", limits={"short_reply": 0.45, "slot_extract": 0.15}
)


@pytest.mark.parametrize(
    "name, scope, value, breaches",
    [
        # a task type not named gets the default 0.30
        ("0.20 against the 0.30 default: clear", "intent_classify", 0.20, False),
        ("0.35 against the 0.30 default: over", "intent_classify", 0.35, True),
        # slot_extract's own 0.15 is stricter than the default
        ("0.20 against slot_extract's 0.15: over, though under the default", "slot_extract", 0.20, True),
        # short_reply's own 0.45 sits above its designed ~0.35 baseline
        ("0.35 against short_reply's 0.45: clear, though over the default", "short_reply", 0.35, False),
        ("0.45 against short_reply's 0.45: at the limit is not over it", "short_reply", 0.45, False),
        ("0.46 against short_reply's 0.45: over", "short_reply", 0.46, True),
        ("the overall scope has the default", "", 0.35, True),
    ],
)
def test_a_task_types_own_limit_replaces_the_default(name, scope, value, breaches):
    verdict = evaluate(PER_TASK, series(value, value, value), T0 + 2 * STEP, scope)
    assert verdict.breaching is breaches, name
    assert PER_TASK.limit_for(scope) == {"short_reply": 0.45, "slot_extract": 0.15}.get(scope, 0.3)


def test_an_interval_rule_judges_each_task_type_against_its_own_limit():
    """Degrade trigger with an interval (docs/metrics.md §3b), short_reply's limit 0.45, the default 0.05.
    Calm: 60/170 = 0.353, Wilson low (0.352941 + 3.841459/340)/(1 + 3.841459/170) − 1.959964·√(0.352941·0.647059/170
    + 3.841459/115600)/1.022597 = 0.356193 − 0.071114 = 0.285078: over 0.05, not over 0.45. The push: 140/175 =
    0.8, low 0.734579 > 0.45. tool_call (no limit of its own) at 13/40 = 0.325, low 0.200845 > 0.05."""
    from routerscope.warehouse.analytics import stats

    rule = replace(_rollback_rule("rollback_degrade_trigger"), limits={"short_reply": 0.45})

    def trio(task_type, k, n):
        rate = {"degrade_trigger_rate": k / n, "degrade_trigger_ci": stats.wilson(k, n), "device_entered": n}
        return [(task_type, T0 + i * STEP, rate) for i in range(3)]

    by_scope = series_by_scope(rule, trio("short_reply", 60, 170))
    assert round(by_scope["short_reply"][0].interval[0], 6) == 0.285078
    assert not evaluate(rule, by_scope["short_reply"], T0 + 2 * STEP, "short_reply").breaching
    assert evaluate(rule, by_scope["short_reply"], T0 + 2 * STEP, "tool_call").breaching  # the default 0.05 would page
    pushed = series_by_scope(rule, trio("short_reply", 140, 175))["short_reply"]
    assert round(pushed[0].interval[0], 6) == 0.734579
    assert evaluate(rule, pushed, T0 + 2 * STEP, "short_reply").breaching
    other = series_by_scope(rule, trio("tool_call", 13, 40))["tool_call"]
    assert round(other[0].interval[0], 6) == 0.200845
    assert evaluate(rule, other, T0 + 2 * STEP, "tool_call").breaching


def test_the_alert_names_the_limit_that_applied_to_its_task_type():
    """The stored episode (trip values, summary), the webhook message and the rollback evidence carry the task
    type's own limit, and the default beside it."""
    from routerscope.warehouse.analytics.alerting import slack_body
    from routerscope.warehouse.analytics.alerting.evaluate import summarize

    own = transition(PER_TASK, "short_reply", streak(0.5, 0.5, 0.5), None, "v1", NOW)[1]
    trip = json.loads(own.trip_values)
    assert (trip["limit"], trip["default_limit"]) == (0.45, 0.3)
    assert own.summary == "fallback over its limit (0.45)"
    assert "fallback_rate > 0.45" in json.dumps(slack_body(own))
    default = transition(PER_TASK, "intent_classify", streak(0.5, 0.5, 0.5), None, "v1", NOW)[1]
    trip = json.loads(default.trip_values)
    assert trip["limit"] == 0.3 and "default_limit" not in trip
    assert default.summary == "fallback over its limit (0.3)"
    rollback = replace(PER_TASK, action="rollback")
    fired = transition(rollback, "short_reply", streak(0.5, 0.5, 0.5), None, "v1", NOW)[1]
    evidence = summarize(NOW, "v1", transitions([], {}, "v1", NOW), {(fired.alert_key, fired.first_seen): fired})
    assert evidence.rollback_evidence()["short_reply"]["fallback_rate"]["limit"] == 0.45


LIMITS_RULE = (
    "  - {name: x, summary: s, metric: m, scope: per_task_type, grain: 5m, op: '>', windows: 1, severity: page, "
)


@pytest.mark.parametrize(
    "rule, message",
    [
        ("limit: 0.3, limits: [0.4]}", r"rule 1 \(x\): limits must be a non-empty mapping"),
        ("limit: 0.3, limits: {}}", "limits must be a non-empty mapping"),
        ("limit: 0.3, limits: {Short-Reply: 0.4}}", "'Short-Reply' is not a task type name"),
        ("limit: 0.3, limits: {short_reply: '0.4'}}", r"limits.short_reply must be a finite number, not '0.4'"),
        ("limit: 0.3, limits: {short_reply: .nan}}", "limits.short_reply must be a finite number"),
        ("limit: 0.3, limits: {short_reply: true}}", "limits.short_reply must be of the same kind as limit"),
        ("limit: '0.3'}", "limit must be a finite number, not '0.3'"),
        ("limit: true}", "limit must be a number, not True"),
    ],
)
def test_a_bad_limit_or_limits_map_is_one_clear_error(tmp_path, rule, message):
    path = tmp_path / "rules.yaml"
    path.write_text("version: 1\nrules:\n" + LIMITS_RULE + rule)
    with pytest.raises(ConfigError, match=message) as error:
        load_rules(path)
    assert "\n" not in str(error.value)


def test_limits_on_an_overall_rule_are_refused(tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text(
        "version: 1\nrules:\n  - {name: x, summary: s, metric: m, scope: overall, grain: 5m, op: '>', limit: 0.3, "
        "limits: {short_reply: 0.4}, windows: 1, severity: page}"
    )
    with pytest.raises(ConfigError, match=r"rule 1 \(x\): limits \(per task type\) needs scope per_task_type"):
        load_rules(path)


def test_the_shipped_defaults_have_no_per_task_limits():
    """The shipped rules are the documented limits for every task type (docs/metrics.md §3b); a fleet sets its
    own per task type in its rules file."""
    assert all(rule.limits is None for rule in load_rules()[1])


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
        (
            "version: 1\nrules:\n"
            "  - {name: x, summary: s, metric: m, interval: m_ci, scope: overall, grain: 5m, "
            "op: '==', limit: 1, windows: 1, severity: page}",
            "an interval needs",
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


def test_an_evaluation_as_of_a_time_before_an_episode_was_last_seen_neither_resolves_nor_shortens_it():
    """Issue 39 §3: `alerts` run as of the wall clock fired `ingest_stale` (first and last seen: now); the demo's
    re-run then evaluated its span, as of earlier times, and "resolved" it before it fired."""
    signal = dict(metric="pipeline.freshness_lag_s", scope="overall", grain="now", limit=600, windows=1)
    stale_rule = replace(RULE, **signal, min_n=0, denominator=None)
    fired_at = NOW + timedelta(minutes=7)
    stale = transition(stale_rule, "", evaluate_signal(stale_rule, 1200.0, fired_at), None, "v1", fired_at)[1]
    assert stale.first_seen == stale.last_seen == fired_at
    earlier = fired_at - timedelta(minutes=5)  # a replayed window's evaluation, with fresh events as of then
    assert transition(stale_rule, "", evaluate_signal(stale_rule, 30.0, earlier), stale, "v1", earlier) is None
    later = fired_at + timedelta(minutes=1)  # the next evaluation as of a later time resolves it, after it fired
    kind, resolved = transition(stale_rule, "", evaluate_signal(stale_rule, 30.0, later), stale, "v1", later)
    assert kind == "resolved" and resolved.resolved_at == later >= resolved.first_seen
    # a window rule's episode is not moved back to an earlier last window by an evaluation as of earlier
    assert transition(RULE, "intent_classify", streak(0.5, 0.5, 0.5), episode(3), "v1", NOW) is None


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


# -- the breaker signals, as of each window (docs/metrics.md "Pipeline signals per window") --------------------
def _t(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def _transition(instance, seq, minute, from_state, to_state):
    return {
        "instance_id": instance,
        "seq": seq,
        "event_time": _t(minute),
        "from_state": from_state,
        "to_state": to_state,
    }


@pytest.mark.parametrize(
    "name, transitions, open_windows",
    [
        ("closed all along", [], []),
        # opened at 12:01 and closed at 12:03: only the 12:00 window, though it is closed at every window's end
        (
            "opened and closed inside one window",
            [_transition("a", 1, 1, "closed", "open"), _transition("a", 2, 3, "open", "closed")],
            [0],
        ),
        # the state carried in: opened at 11:58 (before the first window), closed at 12:12
        (
            "open carried in from before the first window",
            [_transition("a", 1, -2, "closed", "open"), _transition("a", 2, 12, "open", "closed")],
            [0, 1, 2],
        ),
        ("still open: every window after", [_transition("a", 1, 7, "closed", "open")], [1, 2, 3]),
        # half-open is not open; re-opened at 12:16 from the failed trial
        (
            "half-open between two opens",
            [
                _transition("a", 1, 1, "closed", "open"),
                _transition("a", 2, 4, "open", "half_open"),
                _transition("a", 3, 16, "half_open", "open"),
                _transition("a", 4, 17, "open", "closed"),
            ],
            [0, 3],
        ),
        # the router's clock stepped back: seq 2 is stamped before seq 1; the open moment still counts
        (
            "a clock that stepped back keeps the moment the breaker opened",
            [_transition("a", 1, 11, "closed", "open"), _transition("a", 2, 9, "open", "closed")],
            [2],
        ),
        # only what the window reads: the first transition known is from open (history before it not kept)
        ("a first transition from open", [_transition("a", 5, 6, "open", "half_open")], [0, 1]),
    ],
)
def test_breaker_open_at_any_moment_of_each_window(name, transitions, open_windows):
    from routerscope.warehouse.analytics.alerting.evaluate import breaker_open_series

    starts = [T0 + k * STEP for k in range(4)]
    points = breaker_open_series(transitions, starts, STEP)
    assert [k for k, p in enumerate(points) if p.value] == open_windows, name


def test_breaker_open_counts_instances():
    from routerscope.warehouse.analytics.alerting.evaluate import breaker_open_series

    transitions = [_transition("a", 1, 1, "closed", "open"), _transition("b", 1, 2, "closed", "open")]
    assert [p.value for p in breaker_open_series(transitions, [T0, T0 + STEP], STEP)] == [2, 2]


def test_breaker_signals_are_window_rules_and_a_now_grain_is_refused(tmp_path):
    _, rules = load_rules()
    assert {r.grain for r in rules if r.metric.startswith("pipeline.breaker_open.")} == {"5m"}
    path = tmp_path / "rules.yaml"
    path.write_text(
        "version: 1\nrules:\n  - {name: x, summary: s, metric: pipeline.breaker_open.cloud, scope: overall, "
        "grain: now, op: '>', limit: 0, windows: 1, severity: page}"
    )
    with pytest.raises(ConfigError, match="read per window"):
        load_rules(path)


def _rollback(rule: str, first: datetime, notify_state: str = "pending", status: str = "firing", task="short_reply"):
    return Alert(
        f"{rule}|{task}", first, rule, task, "page", "rollback", rule, status, first + timedelta(minutes=15),
        None, "{}", "v", notify_state,
    )  # fmt: skip


def test_one_rollback_recommendation_pages_once_however_many_of_its_rules_fire():
    """Issue 38 ("On-call pages twice"): a second rollback rule firing for a task type whose rollback already
    pages is grouped (stored, never delivered alone); two firing at once page the earlier; another task type pages
    on its own; when the paging episode has resolved, a grouped one still firing pages."""
    from routerscope.warehouse.analytics.alerting.evaluate import GROUPED, one_page_per_rollback, pending, with_changes

    t0 = datetime(2026, 12, 4, 4, 40, tzinfo=UTC)
    degrade = _rollback("rollback_degrade_trigger", t0, "sent")
    route = _rollback("rollback_route_accuracy", t0 + timedelta(minutes=5))
    other = _rollback("rollback_degrade_trigger", t0 + timedelta(minutes=5), task="tool_call")
    known = with_changes({}, [degrade, route, other])
    changed = one_page_per_rollback(known, [route, other])
    assert [(a.alert_key, a.notify_state) for a in changed] == [("rollback_route_accuracy|short_reply", GROUPED)]
    known = with_changes(known, changed)
    assert [a.alert_key for a in pending(known)] == ["rollback_degrade_trigger|tool_call"]
    # both rules fire in one evaluation: the earlier pages, the later is grouped
    fresh = [replace(degrade, notify_state="pending"), route]
    changed = one_page_per_rollback(with_changes({}, fresh), fresh)
    assert [(a.rule, a.notify_state) for a in changed] == [("rollback_route_accuracy", GROUPED)]
    # the degrade trigger's episode resolved (its resolution pages); the route accuracy one still fires: it pages now
    later = with_changes(known, [replace(degrade, status="resolved", notify_state="pending")])
    changed = one_page_per_rollback(later, [])
    assert [(a.rule, a.notify_state) for a in changed] == [("rollback_route_accuracy", "pending")]
    # a grouped episode resolves quietly: nothing was paged for it alone
    rule = load_rules()[1][0]
    step = transition(replace(rule, name="rollback_route_accuracy"), "short_reply", BreachStreak(False),
                      replace(route, notify_state=GROUPED), "v", t0 + timedelta(hours=1))  # fmt: skip
    assert step[0] == "resolved" and step[1].notify_state == GROUPED


def test_the_route_accuracy_rollback_reads_the_corrected_estimate_where_a_window_has_one_and_names_it():
    """docs/metrics.md §3d: a window whose route accuracy the judge's verdicts and people's corrections estimate
    (`route_accuracy_ppi`) is read from that, interval included; a window without one reads §3c's. The episode's
    signal names what it read."""
    from routerscope.warehouse.analytics.rollback import _signal

    rule = _rollback_rule("rollback_route_accuracy")
    est = {"rate": 0.97, "ci": [0.9, 0.99], "n_eff": 200.0, "coverage": 1.0}
    corrected = {"rate": 0.8, "ci": [0.7, 0.9], "coverage": 1.0, "n_judged": 300, "n_human": 40}
    rows = [
        ("short_reply", T0 + k * STEP, {"route_accuracy_est": est, "route_labeled": 200, "route_accuracy_ppi": p})
        for k, p in enumerate((corrected, corrected, corrected))
    ]
    rows.append(
        ("short_reply", T0 + 3 * STEP, {"route_accuracy_est": est, "route_labeled": 200, "route_accuracy_ppi": None})
    )
    points = series_by_scope(rule, rows)["short_reply"]
    assert [(p.value, p.interval, p.read) for p in points] == [
        (0.8, [0.7, 0.9], "route_accuracy_ppi.rate"),
    ] * 3 + [(0.97, [0.9, 0.99], None)]
    verdict = evaluate(rule, points[:3], T0 + 2 * STEP)
    assert verdict.breaching  # the judge alone (§3c over its labels) said 0.97 [0.90, 0.99]: no evidence
    alert = transition(rule, "short_reply", verdict, None, "v1", NOW)[1]
    trip = json.loads(alert.trip_values)
    assert [w["read"] for w in trip["windows"]] == ["route_accuracy_ppi.rate"] * 3
    assert _signal({"rule": rule.name, "trip_values": trip}) == "route_accuracy_ppi"


def test_route_accuracy_as_of_arrival_is_corrected_only_by_the_verdicts_that_had_arrived():
    from routerscope.warehouse.analytics.alerting.engine import as_of_arrival

    # one stratum: N 100, judged 100 with 95 right routes, 40 audited with Σ(Y − Ŷ) = −8: 0.95 − 0.2 = 0.75
    strata = {"ra": [(100, 60, 50)], "ra_ppi": [(100, 100, 95, 40, -8, 8)]}
    out = as_of_arrival({"route_accuracy_ppi": {"rate": 0.1}, "missed_fallback_ppi": {"rate": 0.5}}, strata)
    assert out["route_accuracy_ppi"]["rate"] == pytest.approx(0.75) and out["route_accuracy_ppi"]["n_human"] == 40
    assert out["missed_fallback_ppi"] is None  # not recomputed as of arrival: never read from later labels
    assert (
        as_of_arrival({}, {"ra": [(100, 60, 50)], "ra_ppi": [(100, 100, 95, 29, -8, 8)]})["route_accuracy_ppi"] is None
    )
