"""The review rules as tables: the stage tracker's exit conditions (docs/sources.md#seed-004-7) each met and not met by
one unit, the grading tiers and the error-cost veto (docs/sources.md#seed-004-2), the gates and factor bands
of docs/sources.md#seed-003, and the router's sticky canary cohort."""

from __future__ import annotations

import pytest

from routerscope.router.policy import Capability, ConfigError, RolloutLimits, in_canary, parse
from routerscope.warehouse.analytics.review import (
    evaluate_stage,
    factors,
    gate_duration,
    gate_memory,
    gate_quality,
    gates,
    grade,
    readiness,
    streamable,
    token_screen,
)
from routerscope.warehouse.analytics.stats import EMPTY_ESTIMATE

LIMITS = RolloutLimits(
    agreement=0.9,
    min_n=30,
    error_rate_drift=0.02,
    fallback_rate=0.25,
    false_fallback_rate=0.10,
    offload_failure_rate=0.02,
    l4_margin=0.01,
)


def shadow_numbers(**over) -> dict:
    """Shadow numbers that meet every condition: 100 comparisons a bucket, 90 agreeing (0.90 = the target);
    device errors 2/100 in the first half, 4/100 in the second (+0.02 = the drift limit)."""
    numbers = {"buckets": {"0-128": (100, 90), "128-512": (100, 90)}, "errors": [(100, 2), (100, 4)], "rollback": []}
    numbers.update(over)
    return numbers


def canary_numbers(canary: dict | None = None, cloud: dict | None = None, rollback=()) -> dict:
    """Canary numbers that meet every condition, each exactly at its limit: fallbacks 25/100, false fallbacks
    10/100, offload failures 2/100; canned answers 2/100 against the cloud cohort's 1/100 (+0.01)."""
    base = {
        "requests": 100,
        "l4": 2,
        "device_entered": 100,
        "fallbacks": 25,
        "false_fallback_labeled": 100,
        "false_fallbacks": 10,
        "device_attempts": 100,
        "offload_failures": 2,
    }
    return {
        "cohorts": {"canary": {**base, **(canary or {})}, "cloud_only": {"requests": 100, "l4": 1, **(cloud or {})}},
        "rollback": list(rollback),
    }


@pytest.mark.parametrize(
    "numbers, expected, failing",
    [
        (shadow_numbers(), "advance", None),
        # agreement one comparison short of the target in one bucket
        (shadow_numbers(buckets={"0-128": (100, 90), "128-512": (100, 89)}), "hold", "agreement 128-512"),
        # a long-input bucket with traffic but one comparison short of the sample: it blocks
        # (short inputs cannot hide it)
        (shadow_numbers(buckets={"0-128": (100, 90), "512-2048": (29, 29)}), "hold", "agreement 512-2048"),
        (shadow_numbers(buckets={"0-128": (100, 90), "512-2048": (30, 27)}), "advance", None),
        # the device error rate one error above stable; and one attempt short of the sample in a half
        (shadow_numbers(errors=[(100, 2), (100, 5)]), "hold", "device error rate stable"),
        (shadow_numbers(errors=[(29, 0), (100, 0)]), "hold", "device error rate stable"),
        (shadow_numbers(buckets={}), "hold", "agreement"),  # no comparisons at all
        (shadow_numbers(rollback=["rollback_route_accuracy"]), "rollback", None),
    ],
    ids=[
        "all-met",
        "agreement-1-short",
        "bucket-sample-1-short",
        "bucket-sample-exactly",
        "error-rate-1-over",
        "error-sample-1-short",
        "no-comparisons",
        "rollback-signal",
    ],
)
def test_seed004_shadow_to_canary_exit_conditions(numbers, expected, failing):
    verdict = evaluate_stage("shadow", numbers, LIMITS)
    assert verdict["recommendation"] == expected
    assert verdict["to"] == {"advance": "canary", "hold": "shadow", "rollback": "cloud_only"}[expected]
    unmet = [c["condition"] for c in verdict["conditions"] if not c["met"]]
    assert unmet == ([failing] if failing else ([] if expected != "rollback" else unmet))


@pytest.mark.parametrize(
    "numbers, expected, failing",
    [
        (canary_numbers(), "advance", None),
        (canary_numbers({"fallbacks": 26}), "hold", "fallback rate"),
        (canary_numbers({"device_entered": 29, "fallbacks": 0}), "hold", "fallback rate"),  # sample one short
        (canary_numbers({"false_fallbacks": 11}), "hold", "false fallback rate"),
        (canary_numbers({"false_fallback_labeled": 29, "false_fallbacks": 0}), "hold", "false fallback rate"),
        (canary_numbers({"offload_failures": 3}), "hold", "offload failure rate"),
        (canary_numbers({"device_attempts": 29, "offload_failures": 0}), "hold", "offload failure rate"),
        (canary_numbers({"l4": 3}), "hold", "canned answers vs cloud cohort"),  # one canned answer over the margin
        (
            canary_numbers(cloud={"requests": 29, "l4": 0}),
            "hold",
            "canned answers vs cloud cohort",
        ),  # cloud cohort too small
        (canary_numbers(rollback=["rollback_offload_failure"]), "rollback", None),
    ],
    ids=[
        "all-met",
        "fallback-1-over",
        "fallback-sample-1-short",
        "false-fallback-1-over",
        "false-fallback-sample-1-short",
        "offload-1-over",
        "offload-sample-1-short",
        "l4-1-over",
        "cloud-cohort-1-short",
        "rollback-signal",
    ],
)
def test_seed004_canary_to_full_exit_conditions(numbers, expected, failing):
    verdict = evaluate_stage("canary", numbers, LIMITS)
    assert verdict["recommendation"] == expected
    unmet = [c["condition"] for c in verdict["conditions"] if not c["met"]]
    if failing:
        assert unmet == [failing]
    elif expected == "advance":
        assert unmet == []


@pytest.mark.parametrize(
    "stage, rollback, expected",
    [
        ("full", [], "hold"),
        ("full", ["rollback_degrade_trigger"], "rollback"),
        ("cloud_only", ["rollback_degrade_trigger"], "hold"),  # already back on the cloud
    ],
)
def test_full_and_cloud_only_move_only_back(stage, rollback, expected):
    verdict = evaluate_stage(stage, {"rollback": rollback}, LIMITS)
    assert verdict["recommendation"] == expected and verdict["conditions"] == []


@pytest.mark.parametrize(
    "p50, p95, daily, determinism, error_cost, tier, reason",
    [
        # input 256 → (2048 − 256)/1792 = 1; determinism 1; 100000 calls/day → log10 5 / 5 = 1 → score 1.0
        (100, 256, 100_000, 1.0, 0.2, "offload", "score >= 0.75"),
        # the same task with error cost 0.71: vetoed before any score (docs/sources.md#seed-004: 错误代价单独前置)
        (100, 256, 100_000, 1.0, 0.71, "keep-cloud", "error_cost_veto"),
        (100, 256, 100_000, 1.0, 0.70, "offload", "score >= 0.75"),  # 0.70 is not > 0.7
        # long tail (p95 > 4·p50) halves the input score: 0.4·0.5 + 0.4·1 + 0.2·1 = 0.8
        (50, 256, 100_000, 1.0, None, "offload", "score >= 0.75"),
        # null determinism scores 0: 0.4 + 0 + 0.2 = 0.6
        (100, 256, 100_000, None, None, "shadow", "0.5 <= score < 0.75"),
        # 0.4·1 + 0.4·0.2 + 0.2·0 (1 call/day) = 0.48
        (100, 256, 1, 0.2, None, "keep-cloud", "score < 0.5"),
    ],
)
def test_seed004_grading_tiers_and_the_veto(p50, p95, daily, determinism, error_cost, tier, reason):
    g = grade(p50, p95, daily, determinism, error_cost)
    assert (g["tier"], g["reason"]) == (tier, reason)


def test_grading_score_bands_at_their_edges():
    # input p95 2048 → 0; determinism 1 → 0.4; 10^(0.75·5)... use frequency to land exactly: daily 10^x
    assert grade(1000, 2048, 10**2.5, 1.0, 0.1)["score"] == 0.5  # 0.4 + 0.2·0.5 = 0.5 → shadow
    assert grade(1000, 2048, 10**2.5, 1.0, 0.1)["tier"] == "shadow"
    assert grade(1000, 2048, 10**2.45, 1.0, 0.1)["tier"] == "keep-cloud"  # 0.4 + 0.2·0.49 = 0.498


@pytest.mark.parametrize(
    "factor, kwargs, points",
    [
        ("calls_per_session_day", {"calls_per_session_day": 20.01}, 3),
        ("calls_per_session_day", {"calls_per_session_day": 20}, 1),
        ("calls_per_session_day", {"calls_per_session_day": 2}, 1),
        ("calls_per_session_day", {"calls_per_session_day": 1.99}, 0),
        ("token_budget_p90", {"token_budget_p90": 99}, 3),
        ("token_budget_p90", {"token_budget_p90": 100}, 1),
        ("token_budget_p90", {"token_budget_p90": 400}, 1),
        ("token_budget_p90", {"token_budget_p90": 401}, 0),
        ("network", {"weak_network_share": 0.30}, 3),
        ("network", {"weak_network_share": 0.29}, 1),
        ("network", {"weak_network_share": 0.05}, 1),
        ("network", {"weak_network_share": 0.04}, 0),
        ("error_cost", {"has_validator": True, "error_cost": 0.9}, 3),
        ("error_cost", {"error_cost": 0.3}, 1),
        ("error_cost", {"error_cost": 0.31}, 0),
        ("error_cost", {"error_cost": None}, 0),
        ("privacy", {"privacy": "strict"}, 3),
        ("iteration", {"iteration": "weekly"}, 0),
    ],
)
def test_seed003_factor_bands(factor, kwargs, points):
    base = dict(
        calls_per_session_day=None,
        token_budget_p90=None,
        privacy="public",
        has_validator=False,
        error_cost=None,
        weak_network_share=None,
        iteration="monthly",
    )
    assert factors(**{**base, **kwargs})[factor]["points"] == points


TIERS = {"low": {"memory_mb": 4096}, "high": {"memory_mb": 12288}}
# a §3c estimate whose interval ends at or below 3 %: 0 of 200 missed, Wilson high 1.959964² / (200 + 3.841459)
CLEAN = {"rate": 0.0, "ci": [0.0, 0.018846], "n_eff": 200.0, "coverage": 1.0}


def passing_gates() -> dict:
    return gates(
        memory=gate_memory({"low": {"peak": 1638.4, "resident": 1024.0, "n": 40}}, TIERS),
        duration=gate_duration(40, 0, 0, 10_000.0, True),
        quality=gate_quality(CLEAN, 200, 100, 0, 30),
    )


def test_seed003_gates_and_the_ready_score_of_12():
    ok = passing_gates()  # every gate exactly at its limit: peak 0.40·4096 = 1638.4, resident 0.25·4096 = 1024
    assert {k: g["status"] for k, g in ok.items()} == {
        "gate_memory": "pass",
        "gate_duration": "pass",
        "gate_quality": "pass",
    }
    assert (ok["gate_memory"]["limit"], ok["gate_memory"]["resident_limit"]) == (1638.4, 1024.0)
    six = {"a": {"points": 3, "weight": 2}, "b": {"points": 3, "weight": 2}}  # 12
    assert readiness(ok, six)["verdict"] == "ready"
    eleven = {"a": {"points": 3, "weight": 2}, "b": {"points": 1, "weight": 2}, "c": {"points": 3, "weight": 1}}
    assert readiness(ok, eleven) == {**readiness(ok, eleven), "verdict": "not_ready", "reasons": ["score_003 11 < 12"]}
    over = gates(
        memory=gate_memory({"low": {"peak": 1638.5, "resident": 10.0}}, TIERS),
        duration=gate_duration(40, 0, 0, 10_001.0, True),
        quality=gate_quality({"rate": 0.1, "ci": [0.031, 0.2], "n_eff": 100.0, "coverage": 1.0}, 100, 90, 10, 30),
    )
    assert readiness(over, six)["reasons"] == ["gate_memory fail", "gate_duration fail", "gate_quality fail"]


@pytest.mark.parametrize(
    "name, memory, status",
    [
        # docs/sources.md#seed-003 "常驻 ≤ 25%、峰值 ≤ 40%", low tier 4096 MB: limits 1024 resident, 1638.4 peak
        ("resident over 25 % fails though the peak passes", {"low": {"peak": 1200.0, "resident": 1024.1}}, "fail"),
        (
            "the peak is the max, not a p95: one request over fails",
            {"low": {"peak": 1700.0, "resident": 500.0}},
            "fail",
        ),
        ("no resident figure: unknown, which blocks readiness", {"low": {"peak": 1200.0, "resident": None}}, "unknown"),
        ("a failing part fails even with the other unknown", {"low": {"peak": 2000.0, "resident": None}}, "fail"),
        ("both within", {"low": {"peak": 1638.4, "resident": 1024.0, "n": 30}}, "pass"),
        # a pass needs 30 events with a peak on the tier (it passed on a single one); one event over still fails
        ("both within on one event: unknown", {"low": {"peak": 900.0, "resident": 500.0, "n": 1}}, "unknown"),
        ("both within on 29 events: unknown", {"low": {"peak": 900.0, "resident": 500.0, "n": 29}}, "unknown"),
        ("one event over fails", {"low": {"peak": 1700.0, "resident": 500.0, "n": 1}}, "fail"),
        # the long_summary: 2,868 MB peak on mid passes 0.40·8192 = 3276.8, but the lowest tier declared is
        # `low`, where nothing was measured: unknown, never a pass read off a bigger device
        ("data on a bigger tier only: unknown", {"high": {"peak": 2868.0, "resident": 100.0}}, "unknown"),
    ],
)
def test_seed003_memory_gate_reads_the_lowest_target_tier(name, memory, status):
    g = gate_memory(memory, TIERS)
    assert (g["status"], g["tier"]) == (status, "low"), name


def test_memory_gate_honours_target_false_and_available_mb():
    """§13: a tier with `target: false` is left out; `available_mb` (default `memory_mb`) sets the limits."""
    tiers = {"tiny": {"memory_mb": 2048, "target": False}, "low": {"memory_mb": 4096, "available_mb": 3000}}
    g = gate_memory({"low": {"peak": 1200.0, "resident": 750.0, "n": 30}}, tiers)
    # 0.40·3000 = 1200, 0.25·3000 = 750: both at the limit → pass, on `low`, not the excluded `tiny`
    assert (g["status"], g["tier"], g["limit"], g["resident_limit"], g["n"]) == ("pass", "low", 1200.0, 750.0, 30)
    assert gate_memory({}, {})["status"] == "unknown"


@pytest.mark.parametrize(
    "attempts, timed_out, past_limit, p95, status",
    [
        # the long_summary: 6 of 6 device attempts timed out at 8–12 s deadlines, their p95 capped at 8.4 s:
        # the old gate passed it. Fewer than 30 attempts → unknown.
        (6, 6, 0, 8400.0, "unknown"),
        # 40 attempts, 4 timed out (10 % > 5 %), cut at 8 s: nothing is known past 8 s → unknown
        (40, 4, 0, 8000.0, "unknown"),
        # 40 attempts, 3 cut at or past 10 s (7.5 % > 5 %): more than one in twenty took over 10 s → fail
        (40, 4, 3, 8000.0, "fail"),
        # 40 attempts, 2 timed out (5 %, not more than 5 %): the p95 is read, at the limit → pass
        (40, 2, 2, 10_000.0, "pass"),
        (40, 2, 2, 10_000.1, "fail"),
        # 30 attempts, none censored: at least 30 → judged
        (30, 0, 0, 900.0, "pass"),
        (29, 0, 0, 900.0, "unknown"),
    ],
)
def test_duration_gate_treats_timeouts_as_censored(attempts, timed_out, past_limit, p95, status):
    g = gate_duration(attempts, timed_out, past_limit, p95, True)
    assert (g["status"], g["n"], g["timed_out"]) == (status, attempts, timed_out)
    if status == "unknown":
        assert g["value"] is None and g["note"]


def test_seed003_errors_are_failures_not_durations():
    """A device that errored in ~0 ms on 96 of 100 attempts and timed out on 4 got `pass` with a p95 of 0.04 ms:
    the errors were read as durations. Now errors are left out of the p95 and counted as failures: more than 5 %
    of the attempts without a duration leave the gate unknown, which blocks."""
    g = gate_duration(100, 4, 0, 0.04, True, errors=96)
    assert (g["status"], g["value"], g["errors"]) == ("unknown", None, 96) and "errored" in g["note"]
    assert gate_duration(100, 0, 0, 900.0, True, errors=5)["status"] == "pass"  # 5 %: still measured
    assert gate_duration(100, 0, 0, 900.0, True, errors=6)["status"] == "unknown"
    assert gate_duration(100, 6, 6, 12_000.0, True, errors=90)["status"] == "fail"  # cut past 10 s: fails anyway


def test_seed003_a_short_whole_answer_counts_as_streamable():
    """A departure decided (docs/review.md): seed 003's own example candidate, intent classification, is checked
    whole and so defaulted to not streamable, failing the duration gate. An answer capped at 32 tokens arrives
    at once: there is nothing to stream, so it counts as streamable; longer whole answers (JSON slots, tool
    calls, code) do not, unless the policy declares the task streamable or asynchronous."""
    from routerscope.router.policy import default_policy

    p = default_policy()
    assert streamable(p.capability("intent_classify"), None) is True
    assert streamable(p.capability("slot_extract"), None) is False
    assert streamable(p.capability("tool_call"), None) is False
    assert streamable(p.capability("code_snippet"), None) is False  # code is served whole now
    assert streamable(p.capability("short_reply"), None) is True


def test_readiness_names_a_task_type_without_declared_answers_unchecked():
    from routerscope.router import answers
    from routerscope.router.policy import default_policy

    p = default_policy()
    checks = {t: answers.declared(p.capability(t)) or "unchecked" for t in p.capabilities}
    assert checks["intent_classify"] == "labels" and checks["slot_extract"] == "fields"
    assert checks["tool_call"] == "tools" and checks["code_snippet"] == "language"
    assert checks["short_reply"] == checks["short_summary"] == "unchecked"


def test_seed003_duration_gate_needs_a_streamable_or_asynchronous_task():
    """docs/sources.md#seed-003: "单次推理 ≤ 10s,且可流式或可异步": fast is not enough when the user must wait for
    the whole answer; a validated answer is checked whole, so `streamable` defaults to false there."""
    assert gate_duration(40, 0, 0, 900.0, False)["status"] == "fail"
    assert gate_duration(40, 0, 0, 900.0, True)["status"] == "pass"
    assert gate_duration(0, 0, 0, None, False)["status"] == "fail"
    assert streamable(Capability(supported=True, validator="json"), None) is False
    assert streamable(Capability(supported=True, tools=("lookup",)), None) is False
    assert streamable(Capability(supported=True), None) is True
    assert streamable(Capability(supported=True, validator="json"), True) is True  # declared asynchronous


@pytest.mark.parametrize(
    "est, labeled, caught, missed, status",
    [
        # the seed-003 pass on n = 1: one label, missed 0/1, auto-detected 2/2 → unknown, never pass
        ({"rate": 0.0, "ci": [0.0, 0.793455], "n_eff": 1.0, "coverage": 1.0}, 1, 2, 0, "unknown"),
        # nor fail on one bad label (Wilson 1/1 = [0.206545, 1]): below min_n nothing is judged
        ({"rate": 1.0, "ci": [0.206545, 1.0], "n_eff": 1.0, "coverage": 1.0}, 1, 0, 1, "unknown"),
        # 200 labels, 0 missed (high 0.018846 <= 3 %), auto-detected 100/100: Wilson low 100/103.841459 = 0.963006
        (CLEAN, 200, 100, 0, "pass"),
        # the same with 30 caught of 30: Wilson low 30/33.841459 = 0.886486 < 0.9, high 1 ≥ 0.9 → unknown
        (CLEAN, 200, 30, 0, "unknown"),
        # estimate interval [0.031, …] starts above 3 % → fail
        ({"rate": 0.1, "ci": [0.031, 0.2], "n_eff": 100.0, "coverage": 1.0}, 100, 100, 0, "fail"),
        # 40 labels, 0 missed: Wilson high 3.841459 / 43.841459 = 0.087621 > 3 %, low 0 → unknown
        ({"rate": 0.0, "ci": [0.0, 0.087621], "n_eff": 40.0, "coverage": 1.0}, 40, 100, 0, "unknown"),
        # nothing labeled at all
        (EMPTY_ESTIMATE, 0, 0, 0, "unknown"),
    ],
)
def test_quality_gate_on_intervals_and_a_minimum_sample(est, labeled, caught, missed, status):
    g = gate_quality(est, labeled, caught, missed, 30)
    assert (g["status"], g["n"], g["min_n"]) == (status, labeled, 30)


def test_quality_gate_auto_detected_interval_golden():
    # 100 caught of 100: Wilson [100 / 103.841459, 1] = [0.963006, 1]
    g = gate_quality(CLEAN, 200, 100, 0, 30)
    assert g["auto_detected_ci"] == [pytest.approx(0.963006, abs=1e-6), pytest.approx(1.0)]


def test_a_task_type_the_seeds_keep_off_the_device_is_never_ready():
    """docs/sources.md#seed-000: multi-step tool orchestration stays in the cloud; a policy that enables it and
    gates that pass do not make it ready (the issue's `multi_step_tools`, score 18 and ready)."""
    six = {"a": {"points": 3, "weight": 2}, "b": {"points": 3, "weight": 2}}
    r = readiness(passing_gates(), six, token_screen(300.0), "multi_step_tools")
    assert r["verdict"] == "not_ready"
    assert r["reasons"][0].startswith("kept_off_device")
    assert readiness(passing_gates(), six, token_screen(300.0), "short_reply")["verdict"] == "ready"


def test_grading_tier_settled_by_the_determinism_interval():
    """§12: the tier is settled when the score at both ends of determinism_ci gives the same tier."""
    # input p95 256 → 1; 100000 calls/day → 1: score = 0.6 + 0.4·d. d 0.8 → 0.92 offload; at 0.375533 → 0.750 offload;
    # at 0.963775 → 0.986 offload → settled
    assert grade(100, 256, 100_000, 0.8, 0.2, [0.375533, 0.963775])["tier_settled"] is True
    # the short_summary-like case: d 0.60 of 20 groups → Wilson [0.386582, 0.781193]; input p95 1024
    # → 0.571429, 1000 calls/day → 0.6: score 0.228571 + 0.24 + 0.12 = 0.589 shadow; at the low end 0.503
    # (shadow), at the high end 0.661 (shadow) → settled; with 5 groups, 3 agreeing, [0.230720, 0.882380]:
    # 0.441 keep-cloud at the low end → not settled
    assert grade(500, 1024, 1000, 0.6, 0.2, [0.386582, 0.781193])["tier_settled"] is True
    g = grade(500, 1024, 1000, 0.6, 0.2, [0.230720, 0.882380])
    assert (g["tier"], g["tier_settled"], g["note"]) == ("shadow", False, "few re-run groups")
    # no re-run group: the interval is [0, 1]
    assert grade(500, 1024, 1000, None, 0.2)["tier_settled"] is False


def test_seed003_token_screen_stops_a_long_budget_task_before_any_gate_or_score():
    """docs/sources.md#seed-003 "落地建议" 1: p90 input + output over 400 tokens is out before scoring: a 900-token task
    with a perfect score and passing gates is not_ready, and is not scored."""
    passing = {
        "gate_memory": {"status": "pass"},
        "gate_duration": {"status": "pass"},
        "gate_quality": {"status": "pass"},
    }
    thirty = {"a": {"points": 3, "weight": 10}}
    screened = readiness(passing, thirty, token_screen(900.0))
    assert (screened["verdict"], screened["score_003"]) == ("not_ready", None)
    assert screened["reasons"] == ["token_screen"]
    assert screened["token_screen"] == {"status": "fail", "value": 900.0, "limit": 400, "over_share": None}
    assert readiness(passing, thirty, token_screen(400.0))["verdict"] == "ready"  # at the limit: through
    assert token_screen(None)["status"] == "unknown"


def test_seed004_canary_cohort_is_sticky_by_session_and_near_its_percentage():
    sessions = [f"session-{i}" for i in range(10_000)]
    cohort = [s for s in sessions if in_canary(s, 20)]
    assert 0.18 < len(cohort) / len(sessions) < 0.22
    assert all(in_canary(s, 20) for s in cohort)  # the same answer on every request
    assert all(in_canary(s, 50) for s in cohort)  # widening the canary keeps the sessions already in it
    assert not any(in_canary(s, 0) for s in sessions) and all(in_canary(s, 100) for s in sessions)


@pytest.mark.parametrize(
    "rollout",
    [
        "{slot_extract: {stage: canary}}",
        "{slot_extract: {stage: canary, percent: 120}}",
        "{slot_extract: {stage: beta}}",
        "{slot_extract: [canary]}",
        "{slot_extract: {stage: canary, percent: true}}",
    ],
)
def test_hostile_rollout_settings_are_refused(rollout):
    from routerscope.router.policy import DEFAULT_POLICY

    with pytest.raises(ConfigError):
        parse(DEFAULT_POLICY.read_text().replace("rollout:", f"rollout: {rollout}\nunused_rollout:"))


@pytest.mark.parametrize(
    "field",
    [
        "error_cost: 1.5",
        "error_cost: -0.1",
        "error_cost: true",
        "error_cost: high",
        "privacy: secret",
        "iteration: daily",
        "streamable: maybe",
        "streamable: 1",
    ],
)
def test_hostile_review_inputs_in_the_capability_matrix_are_refused(field):
    from routerscope.router.policy import DEFAULT_POLICY

    with pytest.raises(ConfigError):
        parse(DEFAULT_POLICY.read_text().replace("error_cost: 0.4}", field + "}"))


@pytest.mark.parametrize("tiers", ["{low: {memory_mb: 0}}", "{low: 4096}", "{low: {memory_mb: true}}", "[low]"])
def test_hostile_device_tiers_are_refused(tiers):
    from routerscope.router.policy import DEFAULT_POLICY

    text = DEFAULT_POLICY.read_text()
    text = text[: text.index("device_tiers:")] + f"device_tiers: {tiers}\nbreakers:" + text.split("\nbreakers:", 1)[1]
    with pytest.raises(ConfigError):
        parse(text)


@pytest.mark.parametrize("section", ["rollout", "breakers"])
@pytest.mark.parametrize("value", ["[shadow, canary]", "canary", "3"])
def test_a_policy_section_that_is_not_a_mapping_is_a_config_error_not_a_crash(section, value):
    """A hot reload only keeps the last good policy on ConfigError: any other exception would escape into
    the router's request path."""
    from routerscope.router.policy import parse

    text = "version: t\ncapabilities: {short_reply: {supported: true, threshold: 0.6}}\n" + f"{section}: {value}\n"
    with pytest.raises(ConfigError, match=f"{section} must be a mapping"):
        parse(text)


@pytest.mark.parametrize(
    "strata, met, estimate, coverage, note",
    [
        # the labels of the canary's fallbacks pile up in [0.45, 0.65): 80 of its 100 fallbacks labeled, 4
        # acceptable; [0.65, 0.85) holds 400 with 20 labeled, 6 acceptable → labeled share 10/100 = 0.10 (at the
        # limit), estimate (100/500)·0.05 + (400/500)·0.3 = 0.25: the canary does not advance
        ([(100, 80, 4), (400, 20, 6)], False, 0.25, 1.0, None),
        # the same labels where a third stratum of 500 fallbacks has none: coverage 500/1000, said in the note
        (
            [(100, 80, 4), (400, 20, 6), (500, 0, 0)],
            False,
            0.25,
            0.5,
            "labels cover strata holding 50.0% of the fallbacks",
        ),
        # labeled in proportion (20 of 100, 80 of 400; 2 and 8 acceptable): estimate = labeled share = 0.10
        ([(100, 20, 2), (400, 80, 8)], True, 0.10, 1.0, None),
    ],
)
def test_the_canarys_false_fallback_condition_judges_the_estimate_with_the_labeled_share_beside_it(
    strata, met, estimate, coverage, note
):
    """docs/metrics.md §3c on the stage tracker: labels are no random sample, so canary → full judges the false
    fallbacks' estimate; the labeled share (10/100, exactly the limit) stands beside it."""
    numbers = canary_numbers({"false_fallback_strata": strata})
    cond = next(
        c for c in evaluate_stage("canary", numbers, LIMITS)["conditions"] if c["condition"].startswith("false")
    )
    assert cond["condition"] == "false fallback rate (estimate)"
    assert (cond["met"], cond["labeled_share"], cond["n"]) == (met, 0.10, 100)
    assert cond["value"] == pytest.approx(estimate) and cond["coverage"] == pytest.approx(coverage)
    assert cond.get("note") == note
