"""The golden day of metrics: one day of hand-built decision and label events (task types A and B, a 7-day
baseline before it), the way the loader inserts them, and the overall numbers of task A computed by hand from
the metric definitions (docs/metrics.md; the arithmetic is in the comments)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from routerscope.contract.validation import DECISIONS, LABELS
from routerscope.core import names
from routerscope.warehouse.ingest.rows import FACTS, ledger_columns
from routerscope.warehouse.schema import LEDGER_COLUMNS
from tests.support.events import capability_miss, decision, dumps, iso, label, quality_fallback

START = datetime(2026, 11, 29, tzinfo=UTC)
END = START + timedelta(days=1)
A, B, C = "intent_classify", "short_reply", "extract_fields"


def at(hours: float) -> str:
    return iso(START + timedelta(hours=hours))


def eid(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012d}"


def attempts(*levels_outcomes):
    return [{"level": lv, "outcome": oc, "latency_ms": 100.0} for lv, oc in levels_outcomes]


# Task A, window [START, END): six live requests, three sessions.
A1 = decision(event_id=eid(1), request_id="a1", session_id="s1", task_type=A, event_time=at(1), confidence=0.9)
A2 = quality_fallback(event_id=eid(2), request_id="a2", session_id="s1", task_type=A, event_time=at(2), confidence=0.4)


def timeout_fallback(**fields) -> dict:
    """A device timeout answered by the cloud at L2 (no device answer, so no confidence)."""
    return quality_fallback(
        fallback_type="timeout",
        reason="device_timeout",
        confidence=None,
        attempts=attempts((0, "timeout"), (2, "ok")),
        **fields,
    )


A3 = timeout_fallback(event_id=eid(3), request_id="a3", session_id="s2", task_type=A, event_time=at(3))
A4 = quality_fallback(
    event_id=eid(4),
    request_id="a4",
    session_id="s2",
    task_type=A,
    event_time=at(4),
    fallback_type="error",
    reason="device_error",
    degrade_level=3,
    confidence=0.5,
    attempts=attempts((0, "error"), (3, "ok")),
)
A5 = capability_miss(event_id=eid(5), request_id="a5", session_id="s3", task_type=A, event_time=at(5))
A6 = decision(
    event_id=eid(6),
    request_id="a6",
    session_id="s3",
    task_type=A,
    event_time=at(6),
    entered_device=False,
    reason="device_unavailable",
    degrade_level=2,
    cloud_calls=1,
    confidence=None,
    attempts=attempts((2, "ok")),
)
A_SHADOW = decision(
    event_id=eid(7),
    request_id="a7",
    session_id="s4",
    task_type=A,
    event_time=at(7),
    mode="shadow",
    shadow_agree=True,
    input_tokens=100,
)
A_AT_END = decision(event_id=eid(8), request_id="a8", session_id="s5", task_type=A, event_time=iso(END))
# Task B: only shadow traffic in the window, so every live metric of B is null.
B_SHADOW = decision(
    event_id=eid(9),
    request_id="b1",
    session_id="s6",
    task_type=B,
    event_time=at(8),
    mode="shadow",
    shadow_agree=False,
    input_tokens=600,
)
# Baseline (the 7 days before START): four live A requests, three at L0, one at L2.
BASELINE = [
    decision(
        event_id=eid(20),
        request_id="z0",
        session_id="z",
        task_type=A,
        event_time=iso(START - timedelta(milliseconds=1)),
    ),
    decision(event_id=eid(21), request_id="z1", session_id="z", task_type=A, event_time=iso(START - timedelta(days=2))),
    decision(event_id=eid(22), request_id="z2", session_id="z", task_type=A, event_time=iso(START - timedelta(days=3))),
    quality_fallback(
        event_id=eid(23), request_id="z3", session_id="z", task_type=A, event_time=iso(START - timedelta(days=6))
    ),
]
OLDER_THAN_BASELINE = capability_miss(
    event_id=eid(24), request_id="z4", session_id="z", task_type=A, event_time=iso(START - timedelta(days=7, seconds=1))
)

DECISION_EVENTS = [A1, A2, A3, A4, A5, A6, A1, A_SHADOW, A_AT_END, B_SHADOW, *BASELINE, OLDER_THAN_BASELINE]

LABEL_EVENTS = [
    # a2 (quality fallback): validator says bad, human review says fine → human review wins: a false fallback
    label(request_id="a2", source="validator", device_acceptable=False, route_correct=None, event_time=at(10)),
    label(request_id="a2", source="human_review", device_acceptable=True, route_correct=True, event_time=at(9)),
    # a3 (timeout fallback): two offline replays, the later says fine → a false fallback; shadow_compare ranks lower
    label(request_id="a3", source="offline_replay", device_acceptable=False, route_correct=True, event_time=at(10)),
    label(request_id="a3", source="offline_replay", device_acceptable=True, route_correct=False, event_time=at(11)),
    label(request_id="a3", source="shadow_compare", device_acceptable=False, route_correct=True, event_time=at(12)),
    # a4 (error fallback): labeled, but error fallbacks are never judged false/missed
    label(request_id="a4", source="human_review", device_acceptable=True, route_correct=True, event_time=at(10)),
    # a1 (served on device): the human label has a null verdict and is ignored → the validator's "bad" counts
    label(request_id="a1", source="human_review", device_acceptable=None, route_correct=True, event_time=at(10)),
    label(request_id="a1", source="validator", device_acceptable=False, route_correct=None, event_time=at(9)),
]


def insert(client, decisions: list[dict], labels: list[dict]) -> None:
    """Insert events the way the loader does: contract-checked, then the loader's column builders."""
    for topic, contract, events in (
        (names.TOPIC_DECISIONS, DECISIONS, decisions),
        (names.TOPIC_LABELS, LABELS, labels),
    ):
        if not events:
            continue
        parsed = []
        for e in events:
            event, rules = contract.parse(dumps(e))
            assert not rules, (e, rules)
            parsed.append(event)
        table, columns, build = FACTS[topic]
        offsets = list(range(len(parsed)))
        client.insert(
            f"routerscope.{table}",
            build(parsed, topic, [0] * len(parsed), offsets),
            column_names=list(columns),
            column_oriented=True,
        )
        client.insert(
            "routerscope.loaded_messages",
            ledger_columns(parsed, topic, [0] * len(parsed), offsets),
            column_names=list(LEDGER_COLUMNS),
            column_oriented=True,
        )


def expected_overall_a() -> dict:
    return {
        # §1: a1..a6 live in the window (a1's duplicate once; shadow, at-END and baseline events out)
        "requests": 6,
        "device_entered": 4,  # a1 a2 a3 a4
        "sessions": 3,  # s1 s2 s3
        # §2 over the 4 that entered the device: a2 quality, a3 timeout, a4 error
        "fallback_rate": 3 / 4,
        "quality_fallback_rate": 1 / 4,
        "timeout_fallback_rate": 1 / 4,
        "error_fallback_rate": 1 / 4,
        "naive_fallback_rate": 4 / 6,  # a2 a3 a4 a5 have fallback_type != none, over all 6
        "capability_reject_rate": 1 / 6,  # a5
        "device_bypass_rate": 1 / 6,  # a6
        # §3: judged fallbacks a2, a3 both acceptable → 2/2; device-served a1 not acceptable → 1/1
        "false_fallback_rate": 1.0,
        "false_fallback_labeled": 2,
        # Wilson(2, 2): centre 0.671190, half 0.328810 → [0.342380, 1.0]
        "false_fallback_ci": [pytest.approx(0.342380, abs=1e-6), 1.0],
        "missed_fallback_rate": 1.0,
        "missed_fallback_labeled": 1,
        # Wilson(1, 1): centre (1 + 1.920729)/4.841459 = 0.603275, half 0.396725 → [0.206549, 1.0]
        "missed_fallback_ci": [pytest.approx(0.206549, abs=1e-6), 1.0],
        # chosen labels with route_correct: a2 true, a3 false (the later replay), a4 true;
        # a1's chosen (validator) is null
        "route_accuracy": 2 / 3,
        # coverage: both judged fallbacks (a2 a3) and the one device-served (a1) have a chosen label
        "label_coverage": {"fallbacks": 1.0, "device_served": 1.0},
        # §4: s1 0+1 = 1, s2 1+1 = 2, s3 1+1 = 2 → mean 5/3; sorted [1, 2, 2]: p50 at rank 1 → 2, p95 at 1.9 → 2
        "cloud_calls_per_session": {"mean": 5 / 3, "p50": 2.0, "p95": 2.0},
        # §5: levels a1 L0; a2 a3 a5 a6 L2; a4 L3
        "degrade_share": {"L0": 1 / 6, "L1": 0.0, "L2": 4 / 6, "L3": 1 / 6, "L4": 0.0},
        "l2_l3_share": 5 / 6,
        # baseline: 4 live, one at L2 → 1/4. delta 100·(5/6 − 1/4) = 58.333; z = 1.844662 (see test_stats);
        # psi = 0.877378 + 0.408679 + 1.235689 = 2.521746 (see test_stats) → drifting
        "l2_l3_drift": {
            "delta_pp": pytest.approx(58.333333, abs=1e-5),
            "z": pytest.approx(1.844662, abs=1e-6),
            "psi": pytest.approx(2.521746, abs=1e-5),
            "drifting": True,
        },
        "shadow_agreement_rate": 1.0,  # A's one shadow event agreed
        # §3b: device attempts (levels 0, 1) of live events: a1 ok, a2 low_confidence, a3 timeout, a4 error → 4,
        # of which validator_failed or error: a4 → 1/4 (a timeout and a low confidence are not offload failures).
        # Device-entered that then called the cloud (an L2/L3 attempt): a2 a3 a4 of 4 → 3/4.
        # route_labeled: a2 a3 a4 (a1's chosen label, the validator's, has a null route_correct) → 3
        "route_labeled": 3,
        "device_attempts": 4,
        "offload_failure_rate": 1 / 4,
        "degrade_trigger_rate": 3 / 4,
        # §3b intervals, Wilson at z = 1.959964 (z² = 3.841459):
        # (2, 3): centre (2/3 + 0.640243)/2.280486 = 0.573084, half 0.859451·√(0.074074 + 0.106707) = 0.365424
        "route_accuracy_ci": [pytest.approx(0.207660, abs=1e-6), pytest.approx(0.938508, abs=1e-6)],
        # (1, 4): centre (0.25 + 0.480182)/1.960365 = 0.372473, half 0.999793·√(0.046875 + 0.060023) = 0.326885
        "offload_failure_ci": [pytest.approx(0.045587, abs=1e-6), pytest.approx(0.699358, abs=1e-6)],
        # (3, 4): centre (0.75 + 0.480182)/1.960365 = 0.627527, the same half 0.326885
        "degrade_trigger_ci": [pytest.approx(0.300642, abs=1e-6), pytest.approx(0.954413, abs=1e-6)],
        # §3 by type: a2 is the one labeled quality fallback (acceptable), a3 the one timeout (acceptable)
        "false_fallback_by_type": {
            "quality": {"rate": 1.0, "labeled": 1, "ci": [pytest.approx(0.206549, abs=1e-6), 1.0]},
            "timeout": {"rate": 1.0, "labeled": 1, "ci": [pytest.approx(0.206549, abs=1e-6), 1.0]},
            # §3c over the quality fallbacks: a2 alone (bucket [0, 0.45), N 1, n 1, k 1): rate 1, V 0 → n_eff = 1
            "quality_est": {
                "rate": 1.0,
                "ci": [pytest.approx(0.206549, abs=1e-6), 1.0],
                "n_eff": 1.0,
                "coverage": 1.0,
            },
        },
        # §3c: judged fallbacks a2 (bucket [0, 0.45)) and a3 (null confidence), each N 1 n 1 k 1 → rate
        # ½·1 + ½·1 = 1, V = 0 (p(1−p) = 0) → n_eff = Σ n_h = 2, Wilson(2, 2); a1 alone in [0.85, 1] → n_eff 1
        "false_fallback_est": {
            "rate": 1.0,
            "ci": [pytest.approx(0.342380, abs=1e-6), 1.0],
            "n_eff": 2.0,
            "coverage": 1.0,
        },
        "missed_fallback_est": {
            "rate": 1.0,
            "ci": [pytest.approx(0.206549, abs=1e-6), 1.0],
            "n_eff": 1.0,
            "coverage": 1.0,
        },
        # §9: every A event carries policy 2026-11-29.1 → the version's numbers are A's
        "by_policy_version": {
            "2026-11-29.1": {
                "requests": 6,
                "device_entered": 4,
                "fallback_rate": 3 / 4,
                "false_fallback_rate": 1.0,
                "false_fallback_labeled": 2,
                "missed_fallback_rate": 1.0,
                "missed_fallback_labeled": 1,
                "route_accuracy": pytest.approx(2 / 3),
                "first_event": "2026-11-29T01:00:00Z",
                "last_event": "2026-11-29T06:00:00Z",
            }
        },
    }
