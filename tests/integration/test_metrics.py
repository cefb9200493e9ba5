"""Golden metrics: small fixtures whose every number is computed by hand from docs/metrics.md (the
arithmetic is in the comments), loaded into a real embedded warehouse, computed by the SQL."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from routerscope.core import broker
from routerscope.core.procs import free_port
from routerscope.warehouse.analytics.metrics import calibration, compute, policy_versions
from routerscope.warehouse.sql import QueryWindow
from tests.support.events import capability_miss, decision, dumps, label, quality_fallback
from tests.support.golden_day import (
    A1,
    A2,
    A3,
    A4,
    DECISION_EVENTS,
    END,
    LABEL_EVENTS,
    START,
    A,
    B,
    C,
    at,
    attempts,
    eid,
    expected_overall_a,
    insert,
    timeout_fallback,
)
from tests.support.home import clean_env, run_cli, settings_for

pytestmark = pytest.mark.integration


def test_golden_window_overall_and_per_task_type(warehouse):
    insert(warehouse, DECISION_EVENTS, LABEL_EVENTS)
    result = compute(warehouse, START, END)

    assert result["window"] == {"start": "2026-11-29T00:00:00Z", "end": "2026-11-30T00:00:00Z"}
    a = result["by_task_type"][A]
    for key, value in expected_overall_a().items():
        assert a[key] == (pytest.approx(value) if isinstance(value, float) else value), key

    # Overall = A's live numbers (B has no live events) except the shadow agreement:
    # A agreed, B did not → 1/2. B's shadow event had 600 input tokens → bucket 512-2048.
    overall = result["overall"]
    for key in (
        "requests",
        "device_entered",
        "sessions",
        "fallback_rate",
        "naive_fallback_rate",
        "false_fallback_labeled",
        "route_accuracy",
        "l2_l3_share",
        "route_labeled",
        "device_attempts",
        "offload_failure_rate",
        "degrade_trigger_rate",
    ):
        assert overall[key] == pytest.approx(a[key]), key
    assert overall["by_policy_version"] == a["by_policy_version"]
    assert overall["shadow_agreement_rate"] == 0.5
    assert overall["shadow_agreement_by_input_length"] == {
        "0-128": 1.0,
        "128-512": None,
        "512-2048": 0.0,
        "2048+": None,
    }

    # B: only shadow traffic → counts 0, every live ratio null (never 0), agreement 0/1.
    b = result["by_task_type"][B]
    assert (b["requests"], b["device_entered"], b["sessions"]) == (0, 0, 0)
    for key in (
        "fallback_rate",
        "naive_fallback_rate",
        "capability_reject_rate",
        "false_fallback_rate",
        "false_fallback_ci",
        "route_accuracy",
        "l2_l3_share",
        "offload_failure_rate",
        "degrade_trigger_rate",
        "route_accuracy_ci",
        "offload_failure_ci",
        "degrade_trigger_ci",
    ):
        assert b[key] is None, key
    assert b["false_fallback_by_type"] == {
        "quality": {"rate": None, "labeled": 0, "ci": None},
        "timeout": {"rate": None, "labeled": 0, "ci": None},
        "quality_est": {"rate": None, "ci": None, "n_eff": None, "coverage": None},  # §3c: nothing labeled
    }
    assert (b["route_labeled"], b["device_attempts"], b["by_policy_version"]) == (0, 0, {})
    assert b["degrade_share"] == {"L0": None, "L1": None, "L2": None, "L3": None, "L4": None}
    assert b["cloud_calls_per_session"] == {"mean": None, "p50": None, "p95": None}
    assert b["l2_l3_drift"] == {"delta_pp": None, "z": None, "psi": None, "drifting": False}
    assert b["shadow_agreement_rate"] == 0.0


def test_seed000_false_fallbacks_by_type_never_mix_quality_and_timeout(warehouse):
    """docs/sources.md#seed-000: the three fallback types are never mixed. Four labeled quality fallbacks, one
    acceptable (a threshold that is mostly right); three labeled timeout fallbacks, all acceptable (a latency problem).
    The combined rate, 4/7 = 0.571, would read as thresholds set far too high."""
    quality = [
        quality_fallback(event_id=eid(700 + i), request_id=f"q{i}", task_type=C, event_time=at(1)) for i in range(4)
    ]
    timeout = [
        timeout_fallback(event_id=eid(710 + i), request_id=f"t{i}", task_type=C, event_time=at(1)) for i in range(3)
    ]
    unlabeled = quality_fallback(event_id=eid(720), request_id="q-unlabeled", task_type=C, event_time=at(1))
    labels = [label(request_id=f"q{i}", device_acceptable=i == 0) for i in range(4)]
    labels += [label(request_id=f"t{i}", device_acceptable=True) for i in range(3)]
    insert(warehouse, [*quality, *timeout, unlabeled], labels)
    result = compute(warehouse, START, END)
    for group in (result["overall"], result["by_task_type"][C]):
        assert group["false_fallback_rate"] == pytest.approx(4 / 7) and group["false_fallback_labeled"] == 7
        by_type = group["false_fallback_by_type"]
        # Wilson(1, 4): centre 0.372473, half 0.326885 (see the golden window's offload_failure_ci)
        assert by_type["quality"] == {
            "rate": 0.25,
            "labeled": 4,
            "ci": [pytest.approx(0.045587, abs=1e-6), pytest.approx(0.699358, abs=1e-6)],
        }
        # Wilson(3, 3): centre (1 + 0.640243)/2.280486 = 0.719249, half 0.859451·√(3.841459/36) = 0.280747
        assert by_type["timeout"] == {"rate": 1.0, "labeled": 3, "ci": [pytest.approx(0.438503, abs=1e-6), 1.0]}


def test_validator_failed_fallbacks_split_by_the_serve_time_check_that_failed(warehouse):
    """The live `validator_failed` fallbacks counted by the check named in `answer_check` (contract v2, migration
    0060): task C has two `labels` failures, one `fields` and one v1 event naming none (`unnamed`); task B one
    `tools`; a shadow failure and a low-confidence fallback count nowhere. Overall: labels 2, fields 1, tools 1,
    unnamed 1."""

    def failed(n: int, task: str, check: str | None, **kw) -> dict:
        extra = {} if check is None else {"schema_version": 2, "answer_check": check}
        return quality_fallback(
            event_id=eid(n),
            request_id=f"vf{n}",
            task_type=task,
            event_time=at(1),
            reason="validator_failed",
            confidence=0.9,
            attempts=attempts((0, "validator_failed"), (2, "ok")),
            **extra,
            **kw,
        )

    events = [
        failed(800, C, "labels"),
        failed(801, C, "labels", device_input_tokens=300),
        failed(802, C, "fields"),
        failed(803, C, None),
        failed(804, B, "tools"),
        failed(805, B, "tools", mode="shadow"),
        quality_fallback(event_id=eid(806), request_id="low", task_type=B, event_time=at(1)),
    ]
    insert(warehouse, events, [])
    result = compute(warehouse, START, END)
    assert result["by_task_type"][C]["validator_failed_by_check"] == {"fields": 1, "labels": 2, "unnamed": 1}
    assert result["by_task_type"][B]["validator_failed_by_check"] == {"tools": 1}
    assert result["overall"]["validator_failed_by_check"] == {"fields": 1, "labels": 2, "tools": 1, "unnamed": 1}
    with_window = warehouse.query("SELECT device_input_tokens FROM routerscope.decisions WHERE request_id = 'vf801'")
    assert with_window.result_rows == [(300,)]


def test_cloud_calls_histogram_counts_sessions_by_their_sum(warehouse):
    from routerscope.warehouse.queries.decisions import cloud_calls_histogram
    from routerscope.warehouse.sql import QueryWindow

    insert(warehouse, DECISION_EVENTS, LABEL_EVENTS)
    window = QueryWindow(START, END)
    # live A events: s1 0+1 = 1 call, s2 1+1 = 2, s3 (a5 capability 1, a6 1) = 2 → one session with 1, two with 2
    assert cloud_calls_histogram(warehouse, window) == [(1, 1), (2, 2)]
    assert cloud_calls_histogram(warehouse, window, A) == [(1, 1), (2, 2)]
    assert cloud_calls_histogram(warehouse, window, B) == []  # B has shadow traffic only


def test_label_coverage_is_the_labeled_share_of_each_denominator(warehouse):
    # 4 quality fallbacks, one labeled → 1/4. 3 device-served: d0 labeled, d1's only label has a null
    # verdict (never chosen), d2 unlabeled → 1/3. The error fallback and its label do not count.
    fallbacks = [quality_fallback(event_id=eid(300 + i), request_id=f"f{i}", event_time=at(1)) for i in range(4)]
    served = [decision(event_id=eid(310 + i), request_id=f"d{i}", event_time=at(1)) for i in range(3)]
    error = quality_fallback(
        event_id=eid(320),
        request_id="e0",
        event_time=at(1),
        fallback_type="error",
        reason="device_error",
        attempts=attempts((0, "error"), (2, "ok")),
    )
    labels = [
        label(request_id="f0", source="validator", device_acceptable=True, event_time=at(2)),
        label(request_id="d0", source="human_review", device_acceptable=True, event_time=at(2)),
        label(request_id="d1", source="human_review", device_acceptable=None, event_time=at(2)),
        label(request_id="e0", source="human_review", device_acceptable=True, event_time=at(2)),
    ]
    insert(warehouse, [*fallbacks, *served, error], labels)
    overall = compute(warehouse, START, END)["overall"]
    assert overall["label_coverage"] == {"fallbacks": pytest.approx(1 / 4), "device_served": pytest.approx(1 / 3)}
    assert (overall["false_fallback_labeled"], overall["missed_fallback_labeled"]) == (1, 1)


def test_an_empty_window_is_all_nulls_and_zeros(warehouse):
    insert(warehouse, DECISION_EVENTS, LABEL_EVENTS)
    result = compute(warehouse, END + timedelta(days=30), END + timedelta(days=31))
    assert result["by_task_type"] == {} and result["calibration"] == {}
    overall = result["overall"]
    assert (overall["requests"], overall["false_fallback_labeled"]) == (0, 0)
    assert overall["fallback_rate"] is None and overall["false_fallback_ci"] is None


def test_the_naive_rate_differs_from_the_correct_one_when_capability_rejections_abound(warehouse):
    # 2 device-served, 1 quality fallback, 7 capability rejections.
    # correct: 1 fallback / 3 entered = 0.333; naive: 8 non-'none' / 10 requests = 0.8
    events = [decision(event_id=eid(100 + i), request_id=f"d{i}", event_time=at(1)) for i in range(2)]
    events.append(quality_fallback(event_id=eid(110), request_id="q", event_time=at(1)))
    events += [capability_miss(event_id=eid(120 + i), request_id=f"c{i}", event_time=at(1)) for i in range(7)]
    insert(warehouse, events, [])
    overall = compute(warehouse, START, END)["overall"]
    assert overall["fallback_rate"] == pytest.approx(1 / 3)
    assert overall["naive_fallback_rate"] == pytest.approx(8 / 10)
    assert overall["capability_reject_rate"] == pytest.approx(7 / 10)


# Calibration fixture, task C: (confidence, device_acceptable) of live device attempts, threshold 0.7
# except two at 0.6. Buckets [0,.45) [.45,.65) [.65,.85) [.85,1]:
#   0.30 F | 0.50 F, 0.60 T | 0.70 T, 0.80 T | 0.90 T, 0.95 T, 1.00 T
CALIBRATION_C = [
    (0.30, False),
    (0.50, False),
    (0.60, True),
    (0.70, True),
    (0.80, True),
    (0.90, True),
    (0.95, True),
    (1.00, True),
]


def calibration_events():
    decisions, labels = [], []
    for i, (confidence, acceptable) in enumerate(CALIBRATION_C):
        threshold = 0.6 if i in (1, 2) else 0.7
        make = quality_fallback if confidence < threshold else decision
        decisions.append(
            make(
                event_id=eid(200 + i),
                request_id=f"c{i}",
                task_type=C,
                event_time=at(1),
                confidence=confidence,
                threshold=threshold,
            )
        )
        labels.append(label(request_id=f"c{i}", device_acceptable=acceptable))
    # An unlabeled attempt and one whose only label has a null verdict: both outside calibration.
    decisions.append(decision(event_id=eid(300), request_id="unlabeled", task_type=C, event_time=at(1), confidence=0.1))
    decisions.append(
        decision(event_id=eid(301), request_id="null-verdict", task_type=C, event_time=at(1), confidence=0.1)
    )
    labels.append(label(request_id="null-verdict", device_acceptable=None))
    return decisions, labels


def test_golden_calibration_buckets_threshold_recommendation_and_flags(warehouse):
    decisions, labels = calibration_events()
    insert(warehouse, decisions + [A1, A2, A3, A4], labels + LABEL_EVENTS)
    result = compute(warehouse, START, END, target=0.95, min_n=3)
    c = result["calibration"][C]
    # 8 labeled events: shares 1/8, 2/8, 2/8, 3/8; pass rates 0/1, 1/2, 2/2, 3/3 → monotonic
    assert c["buckets"] == [
        {"low": 0.0, "high": 0.45, "n": 1, "share": 1 / 8, "pass_rate": 0.0},
        {"low": 0.45, "high": 0.65, "n": 2, "share": 2 / 8, "pass_rate": 0.5},
        {"low": 0.65, "high": 0.85, "n": 2, "share": 2 / 8, "pass_rate": 1.0},
        {"low": 0.85, "high": 1.0, "n": 3, "share": 3 / 8, "pass_rate": 1.0},
    ]
    assert c["monotonic"] is True and c["non_monotonic_buckets"] == []
    # confidence >= c: c ≤ 0.30 → 5/8; 0.35..0.50 → 5/7 (0.50 F still in); 0.55 → 0.60..1.00 = 6/6 ≥ 0.95, n 6 ≥ 3
    assert c["recommended_threshold"] == 0.55
    assert c["evidence_floor"] == 0.3  # the smallest labeled confidence is 0.30
    assert c["current_threshold"] == 0.7  # six events at 0.7, two at 0.6
    assert (c["target"], c["min_n"]) == (0.95, 3)
    # the metric set's §6 is the calibration of the same window and target (the tuning page reads it from there)
    assert result["calibration"] == calibration(warehouse, QueryWindow(START, END), 0.95, 3)

    # Task A: a2 0.4 ok → bucket 0 pass 1/1; a4 0.5 ok → bucket 1 pass 1/1; a1 0.9 bad → bucket 3 pass 0/1:
    # bucket 3 is below an earlier bucket → flagged. a3 has no confidence.
    a = result["calibration"][A]
    assert [b["n"] for b in a["buckets"]] == [1, 1, 0, 1]
    assert a["buckets"][2]["pass_rate"] is None and a["buckets"][2]["share"] == 0.0
    assert a["monotonic"] is False and a["non_monotonic_buckets"] == [3]
    # no c has ≥ 3 events at pass rate ≥ 0.95 (c = 0: 2/3) → null
    assert a["recommended_threshold"] is None

    # §6 evidence floor: A's smallest labeled confidence is 0.4 (a2), so the candidates start at 0.40, not 0.00:
    # c = 0.40: a2, a4, a1 → 3 events, 2/3 = 0.667 ≥ 0.6
    assert a["evidence_floor"] == 0.4
    # local pass rate: blocks 0.4 ok, 0.5 ok, 0.9 bad → 1, 1, 0 pools to one block 2/3 everywhere, below the
    # default local floor 0.85: nothing qualifies; with a floor of 0.6 the cut at 0.40 passes
    assert compute(warehouse, START, END, target=0.6, min_n=2)["calibration"][A]["recommended_threshold"] is None
    loose = compute(warehouse, START, END, target=0.6, min_n=2, local_floor=0.6)["calibration"][A]
    assert loose["recommended_threshold"] == 0.4
    assert loose["local_pass_rate_at_recommended"] == pytest.approx(2 / 3)


def test_golden_evidence_floor_no_recommendation_below_the_labeled_confidences(warehouse):
    """docs/metrics.md §6: with labels only at 0.66 and above (all acceptable), the smallest candidate is 0.65;
    before the floor, every bucket passing recommended 0.00 (the demo's intent_classify)."""
    decisions, labels = [], []
    for i, confidence in enumerate((0.66, 0.7, 0.8, 0.9)):
        decisions.append(
            decision(event_id=eid(500 + i), request_id=f"e{i}", task_type=C, event_time=at(1), confidence=confidence)
        )
        labels.append(label(request_id=f"e{i}", device_acceptable=True))
    insert(warehouse, decisions, labels)
    c = compute(warehouse, START, END, target=0.95, min_n=3)["calibration"][C]
    assert (c["evidence_floor"], c["recommended_threshold"]) == (0.65, 0.65)  # 4 events >= 0.65, 4/4 pass
    strict = compute(warehouse, START, END, target=0.95, min_n=5)["calibration"][C]
    assert (strict["evidence_floor"], strict["recommended_threshold"]) == (0.65, None)  # only 4 events anywhere


# §6 local floor fixture, task C, every event at threshold 0.80: (confidence, events, of which acceptable).
LOCAL_FLOOR_C = [(0.40, 4, 0), (0.55, 6, 2), (0.60, 3, 3), (0.65, 3, 1), (0.75, 20, 20), (0.90, 200, 200)]


def local_floor_events():
    decisions, labels, n = [], [], 0
    for confidence, events, passed in LOCAL_FLOOR_C:
        for k in range(events):
            make = quality_fallback if confidence < 0.8 else decision
            request = f"lf{n}"
            decisions.append(
                make(
                    event_id=eid(1000 + n),
                    request_id=request,
                    task_type=C,
                    event_time=at(1),
                    confidence=confidence,
                    threshold=0.8,
                )
            )
            labels.append(label(request_id=request, device_acceptable=k < passed))
            n += 1
    return decisions, labels


def test_golden_local_floor_no_recommendation_into_a_failing_band(warehouse):
    """docs/metrics.md §6 (docs/sources.md#seed-000: a 58 % band goes to
    "device + post-check", never to direct output). The high-
    confidence mass (200 passing at 0.90) carries the cumulative pass rate over 0.95 from c = 0.40 down:
    c = 0.40: 226/236 = 0.9576; 0.45–0.55: 226/232 = 0.9741; 0.60: 224/226; 0.65: 221/223; 0.70: 220/220.
    Pool-adjacent-violators over the blocks 0/4, 2/6, 3/3, 1/3, 20/20, 200/200: 1/3 < 3/3 pools to 4/6, so
    local_pass_rate = 0 at 0.40, 1/3 at 0.45–0.55, 2/3 at 0.60–0.65, 1 from 0.70: the first c whose local
    rate reaches 0.85 is 0.70."""
    decisions, labels = local_floor_events()
    insert(warehouse, decisions, labels)
    c = compute(warehouse, START, END)["calibration"][C]
    assert (c["evidence_floor"], c["current_threshold"], c["local_floor"]) == (0.4, 0.8, 0.85)
    assert c["recommended_threshold"] == 0.7
    assert (c["local_pass_rate_at_recommended"], c["local_pass_rate_at_current"]) == (1.0, 1.0)
    # moving 0.80 → 0.70 serves the 20 labeled requests at 0.75 on the device; all passed.
    # Wilson(20, 20): centre (1 + 0.096036)/1.192073 = 0.919437, half 1.644164·√(3.841459/1600) = 0.080562
    assert c["threshold_change"] == {
        "from": 0.8,
        "to": 0.7,
        "band": {"low": 0.7, "high": 0.8, "n": 20, "pass_rate": 1.0, "ci": [pytest.approx(0.838875, abs=1e-6), 1.0]},
    }

    # Without the local floor the cumulative rule alone recommends 0.40 and moves a band that passed 26/36.
    loose = calibration(warehouse, QueryWindow(START, END), 0.95, 30, local_floor=0.0)[C]
    assert loose["recommended_threshold"] == 0.4 and loose["local_pass_rate_at_recommended"] == 0.0
    band = loose["threshold_change"]["band"]
    assert (band["low"], band["high"], band["n"], band["pass_rate"]) == (0.4, 0.8, 36, pytest.approx(26 / 36))
    # a floor of 0.6 admits the pooled 2/3 block: 0.60, band [0.60, 0.80) = 3 + 3 + 20 events, 24 passed
    mid = calibration(warehouse, QueryWindow(START, END), 0.95, 30, local_floor=0.6)[C]
    assert mid["recommended_threshold"] == 0.6 and mid["local_pass_rate_at_recommended"] == pytest.approx(2 / 3)
    band = mid["threshold_change"]["band"]
    assert (band["n"], band["pass_rate"]) == (26, pytest.approx(24 / 26))
    assert band["ci"] == [pytest.approx(0.758584, abs=1e-6), pytest.approx(0.978645, abs=1e-6)]


def test_golden_threshold_change_is_null_without_a_move(warehouse):
    """docs/metrics.md §6: null when the recommendation is null or equals the current threshold."""
    decisions, labels = calibration_events()
    insert(warehouse, decisions, labels)
    strict = compute(warehouse, START, END, target=0.99, min_n=30)["calibration"][C]
    assert strict["recommended_threshold"] is None and strict["threshold_change"] is None
    assert strict["local_pass_rate_at_recommended"] is None
    # the calibration fixture: blocks 0.30 F, 0.50 F, 0.60 T, 0.70 T, 0.80 T, 0.90 T, 0.95 T, 1.00 T are
    # non-decreasing; at the current 0.70 the fitted value is 1; above 1.00 nothing is labeled
    assert strict["local_pass_rate_at_current"] == 1.0


def test_golden_by_policy_version_attributes_a_threshold_push(warehouse):
    """docs/metrics.md §9: the same task type before and after a push, each version with its own numbers.
    p1 (hours 1-2): 3 served at L0, 1 quality fallback; labels: served a/a/bad, the fallback bad.
    p2 (hours 3-4): 1 served, 3 quality fallbacks; labels: the served ok, two fallbacks acceptable, one bad."""
    p1 = [
        decision(event_id=eid(600 + i), request_id=f"p1-{i}", event_time=at(1 + i / 10), policy_version="p1")
        for i in range(3)
    ]
    p1.append(quality_fallback(event_id=eid(603), request_id="p1-3", event_time=at(2), policy_version="p1"))
    p2 = [decision(event_id=eid(610), request_id="p2-0", event_time=at(3), policy_version="p2")]
    p2 += [
        quality_fallback(
            event_id=eid(611 + i), request_id=f"p2-{i + 1}", event_time=at(3.5 + i / 10), policy_version="p2"
        )
        for i in range(3)
    ]
    verdicts = {
        "p1-0": (True, True),
        "p1-1": (True, True),
        "p1-2": (False, False),
        "p1-3": (False, True),
        "p2-0": (True, True),
        "p2-1": (True, False),
        "p2-2": (True, False),
        "p2-3": (False, True),
    }
    labels = [label(request_id=r, device_acceptable=ok, route_correct=rc) for r, (ok, rc) in verdicts.items()]
    insert(warehouse, p1 + p2, labels)
    versions = compute(warehouse, START, END)["by_task_type"]["intent_classify"]["by_policy_version"]
    assert list(versions) == ["p1", "p2"]  # in order of first event
    assert versions["p1"] == {
        "requests": 4,
        "device_entered": 4,
        "fallback_rate": 1 / 4,
        "false_fallback_rate": 0.0,
        "false_fallback_labeled": 1,  # p1-3 judged bad: a right fallback
        "missed_fallback_rate": pytest.approx(1 / 3),
        "missed_fallback_labeled": 3,  # p1-2 served but bad
        "route_accuracy": pytest.approx(3 / 4),
        "first_event": "2026-11-29T01:00:00Z",
        "last_event": "2026-11-29T02:00:00Z",
    }
    assert versions["p2"] == {
        "requests": 4,
        "device_entered": 4,
        "fallback_rate": 3 / 4,
        "false_fallback_rate": pytest.approx(2 / 3),
        "false_fallback_labeled": 3,  # the push's false fallbacks
        "missed_fallback_rate": 0.0,
        "missed_fallback_labeled": 1,
        "route_accuracy": pytest.approx(2 / 4),
        "first_event": "2026-11-29T03:00:00Z",
        "last_event": "2026-11-29T03:42:00Z",
    }
    # §9 alone (the tuning page's push baseline) reads the same numbers, per task type and overall
    assert policy_versions(warehouse, START, END, "intent_classify") == versions
    assert policy_versions(warehouse, START, END) == compute(warehouse, START, END)["overall"]["by_policy_version"]
    assert policy_versions(warehouse, START, END, "no_such_task") == {}


def test_cloud_calls_quantiles_interpolate_between_ranks(warehouse):
    # Sessions with cloud-call sums 0, 1, 2, 3 and 10:
    # mean 16/5 = 3.2; p50 at rank 0.5·4 = 2 → 2; p95 at rank 3.8 → 3 + 0.8·(10 − 3) = 8.6
    events, n = [], 0
    for session, calls in (("p", 0), ("q", 1), ("r", 2), ("s", 3), ("t", 10)):
        for _ in range(calls):
            events.append(
                capability_miss(event_id=eid(400 + n), request_id=f"r{n}", session_id=session, event_time=at(1))
            )
            n += 1
        if calls == 0:
            events.append(decision(event_id=eid(400 + n), request_id=f"r{n}", session_id=session, event_time=at(1)))
            n += 1
    insert(warehouse, events, [])
    calls = compute(warehouse, START, END)["overall"]["cloud_calls_per_session"]
    assert calls == {"mean": pytest.approx(3.2), "p50": 2.0, "p95": pytest.approx(8.6)}


@pytest.mark.slow
def test_end_to_end_produce_load_and_metrics_json(home):
    """Produce the golden fixture to a real broker, `routerscope load`, `routerscope metrics --json`."""
    settings = settings_for(home)
    broker.start(settings, port=free_port())
    try:
        env = clean_env(home)
        (home / "decisions.jsonl").write_bytes(b"\n".join(dumps(e) for e in DECISION_EVENTS) + b"\n")
        (home / "labels.jsonl").write_bytes(b"\n".join(dumps(e) for e in LABEL_EVENTS) + b"\n")
        for topic, path in (("decisions", "decisions.jsonl"), ("labels", "labels.jsonl")):
            done = run_cli("produce", str(home / path), "--topic", topic, "--quiet", env=env)
            assert done.returncode == 0, done.stderr
        loaded = run_cli("load", "--json", "--idle-timeout", "0.5", env=env)
        assert loaded.returncode == 0, loaded.stderr
        assert json.loads(loaded.stdout)["loaded"] == {
            "decisions": len(DECISION_EVENTS),
            "labels": len(LABEL_EVENTS),
            "breakers": 0,
            "policy": 0,
        }
        done = run_cli("metrics", "--start", "2026-11-29T00:00:00Z", "--end", "2026-11-30T00:00:00Z", "--json", env=env)
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        a = result["by_task_type"][A]
        for key, value in expected_overall_a().items():
            assert a[key] == (pytest.approx(value) if isinstance(value, float) else value), key
        assert set(result) >= {"window", "overall", "by_task_type", "calibration"}
        human = run_cli("metrics", "--start", "2026-11-29", "--end", "2026-11-30", env=env)
        assert human.returncode == 0 and "fallback rate (of entered)" in human.stdout and "75.0%" in human.stdout
        bad = run_cli("metrics", "--start", "yesterday", "--end", "2026-11-30", env=env)
        assert bad.returncode == 2 and "ISO 8601" in bad.stderr
    finally:
        broker.stop(settings)
