"""The golden review week: a 7-day window of hand-built version-2 decisions (device tiers, device stats, the
all-cloud cost, rollout stages, shadow traffic), their labels and the weekly replay's determinism groups, for
the device ledger, the all-cloud counterfactual, task grading and offload readiness (docs/metrics.md); every
expected number is computed by hand in the tests that use it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from routerscope.router.policy import parse
from tests.support.events import capability_miss, decision, iso, label, quality_fallback

START = datetime(2026, 11, 22, tzinfo=UTC)
END = START + timedelta(days=7)  # a 7-day review window
A, B = "intent_classify", "short_reply"
POLICY = parse("""
version: "golden"
capabilities:
  intent_classify: {supported: true, max_input_tokens: 512, max_output_tokens: 16, threshold: 0.7, validator: label,
                    error_cost: 0.2, privacy: redactable, iteration: quarterly}
  short_reply: {supported: true, max_input_tokens: 2048, max_output_tokens: 300, threshold: 0.6, error_cost: 0.8}
rollout:
  short_reply: {stage: canary, percent: 50}
shadow: [code_snippet]
device_tiers: {high: {memory_mb: 8192}, low: {memory_mb: 2048}}
""")


def at(days: float) -> str:
    return iso(START + timedelta(days=days))


def eid(n: int) -> str:
    """Ids of their own (variant 9, golden_day's are variant 8): the two fixtures share a warehouse in the
    dashboard tests, and one event id on two days is one re-sent event, counted once (docs/metrics.md)."""
    return f"00000000-0000-4000-9000-{n:012d}"


def v2(stats: dict | None, all_cloud: float | None = None, stage: str = "full", **fields) -> dict:
    """A version-2 decision: `fields` over the factory's, plus the v2 additions."""
    event = {**fields, "schema_version": 2, "rollout_stage": stage}
    if stats is not None:
        event["device_stats"] = stats
    if all_cloud is not None:
        event["all_cloud_cost_usd"] = all_cloud
    return event


def stats(peak, thermal, decode, cold=False, load=None, resident=None) -> dict:
    return {
        "peak_mem_mb": peak,
        "thermal_state": thermal,
        "decode_tps": decode,
        "prefill_tps": 300.0,
        "cold_start": cold,
        "load_ms": load,
        "resident_mem_mb": resident,
    }


def l0(latency: float, outcome: str = "ok") -> list[dict]:
    return [{"level": 0, "outcome": outcome, "latency_ms": latency}]


# Task A (intent_classify), tier high: three v2 events with device_stats, one v1 event without.
H1 = decision(
    **v2(
        stats(1000.0, "nominal", 50.0, resident=700.0),
        0.010,
        event_id=eid(1),
        request_id="h1",
        session_id="s1",
        task_type=A,
        event_time=at(1),
        ttft_ms=100.0,
        device_tier="high",
        input_tokens=40,
        network="weak",
        cost_usd=0.0,
        attempts=l0(180.0),
    )
)
H2 = quality_fallback(
    **v2(
        stats(1200.0, "serious", 40.0, True, 800.0),
        0.010,
        event_id=eid(2),
        request_id="h2",
        session_id="s1",
        task_type=A,
        event_time=at(2),
        ttft_ms=200.0,
        device_tier="high",
        input_tokens=60,
        cost_usd=0.004,
    )
)
H3 = decision(
    **v2(
        stats(1100.0, "critical", 30.0, True, 1000.0, resident=750.0),
        0.020,
        event_id=eid(3),
        request_id="h3",
        session_id="s2",
        task_type=A,
        event_time=at(3),
        ttft_ms=300.0,
        device_tier="high",
        input_tokens=80,
        attempts=l0(12000.0),
    )
)
V1 = decision(
    event_id=eid(4),
    request_id="v1",
    session_id="s2",
    task_type=A,
    event_time=at(4),
    device_tier="high",
    input_tokens=400,
    cost_usd=0.003,
)  # version 1: in §12/§13, never in §10/§11
# Task B (short_reply, error cost 0.8): one device event with no tier, one capability miss.
U1 = decision(
    **v2(
        {"peak_mem_mb": 900.0, "thermal_state": "unknown", "cold_start": False},
        0.005,
        stage="canary",
        event_id=eid(5),
        request_id="u1",
        session_id="s3",
        task_type=B,
        event_time=at(1.5),
        input_tokens=100,
        cost_usd=0.005,
        confidence=0.9,
        threshold=0.6,
    )
)
C1 = capability_miss(
    **v2(
        None,
        0.008,
        stage="cloud_only",
        event_id=eid(6),
        request_id="c1",
        session_id="s3",
        task_type=B,
        event_time=at(5),
        input_tokens=300,
        cost_usd=0.008,
    )
)
# Not in the ledger: a shadow event (mode shadow), a capability miss (never entered); outside the window.
SH1 = decision(
    **v2(
        stats(5000.0, "critical", 1.0),
        stage="shadow",
        event_id=eid(7),
        request_id="sh1",
        session_id="s4",
        task_type="code_snippet",
        mode="shadow",
        shadow_agree=True,
        event_time=at(1),
        device_tier="high",
        input_tokens=50,
    )
)
SH2 = decision(
    **v2(
        None,
        stage="shadow",
        event_id=eid(8),
        request_id="sh2",
        session_id="s4",
        task_type="code_snippet",
        mode="shadow",
        shadow_agree=False,
        event_time=at(5),
        input_tokens=600,
        attempts=l0(300.0, "error"),
        confidence=None,
    )
)
LATE = decision(
    **v2(
        stats(9999.0, "critical", 0.5),
        1.0,
        event_id=eid(9),
        request_id="late",
        session_id="s9",
        task_type=A,
        event_time=iso(END),
        device_tier="high",
    )
)
DECISIONS = [H1, H2, H3, V1, U1, C1, SH1, SH2, LATE]
LABELS = [
    label(request_id="h1", device_acceptable=True),  # device-served, fine
    label(request_id="h3", device_acceptable=False, route_correct=False),  # device-served, bad: missed
    label(request_id="h2", device_acceptable=False),  # a quality fallback of a bad answer: caught by the router
]
# The weekly replay's determinism groups of A (by the decision's time): 5 in the window, 4 agreeing; one outside.
RERUNS = [(f"r{i}", A, START + timedelta(days=i), 3, i != 2, ["x", "x", "y" if i == 2 else "x"], "m") for i in range(5)]
RERUNS.append(("r-out", A, END + timedelta(hours=1), 3, False, ["x", "y", "z"], "m"))
