"""Golden numbers for docs/metrics.md §10–§13 (device ledger, all-cloud counterfactual, task grading, offload
readiness) and the stage tracker's cohort numbers: a small fixture loaded into a real embedded warehouse,
every expected number computed by hand in the comments."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from router.policy import parse
from tests.events import capability_miss, decision, iso, label, quality_fallback
from tests.integration.test_metrics import insert
from warehouse.analytics.metrics import compute
from warehouse.analytics.review import grading_report, readiness_report, rollout_report, side_by_side
from warehouse.client import open_warehouse
from warehouse.migrate import migrate
from warehouse.queries import review as review_queries
from warehouse.queries.common import QueryWindow

pytestmark = pytest.mark.integration

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
    return f"00000000-0000-4000-8000-{n:012d}"


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


@pytest.fixture
def loaded(home):
    from tests.conftest import settings_for

    with open_warehouse(settings_for(home)) as client:
        migrate(client)
        insert(client, DECISIONS, LABELS)
        client.insert(
            "routerscope.replay_reruns",
            RERUNS,
            column_names=["request_id", "task_type", "event_time", "runs", "agree", "answer_hashes", "device_model"],
        )
        yield client


def test_device_ledger_per_tier_seed003_golden(loaded):
    """§10 over live, device-entered v2 events with device_stats: H1 H2 H3 (high) and U1 (no tier → unknown)."""
    ledger = compute(loaded, START, END)["device_ledger"]
    assert set(ledger) == {"high", "unknown"}  # V1 (v1), SH1 (shadow), C1 (not entered), LATE (at END) are out
    high = ledger["high"]
    assert high["requests"] == 3
    # ttft [100, 200, 300]: p50 200; p95 at rank 0.95·2 = 1.9 → 200 + 0.9·100 = 290
    assert high["ttft_ms"] == {"p50": 200.0, "p95": pytest.approx(290.0)}
    # decode [30, 40, 50]: p50 40; p5 at rank 0.05·2 = 0.1 → 30 + 0.1·10 = 31 (the slow tail)
    assert high["decode_tps"] == {"p50": 40.0, "p5": pytest.approx(31.0)}
    # peak [1000, 1100, 1200]: p95 at 1.9 → 1100 + 0.9·100 = 1190; max 1200
    assert high["peak_mem_mb"] == {"p95": pytest.approx(1190.0), "max": 1200.0}
    assert high["throttled_share"] == pytest.approx(2 / 3)  # serious (H2) + critical (H3)
    assert high["cold_start_share"] == pytest.approx(2 / 3)  # H2 H3
    assert high["load_ms_p95"] == pytest.approx(990.0)  # [800, 1000] at rank 0.95 → 800 + 0.95·200
    assert high["fallback_rate"] == pytest.approx(1 / 3)  # H2's quality fallback
    unknown = ledger["unknown"]
    # U1 alone: no ttft, no decode rate (quantiles over no values are null), peak 900, never throttled or cold
    assert unknown == {
        "requests": 1,
        "ttft_ms": {"p50": None, "p95": None},
        "decode_tps": {"p50": None, "p5": None},
        "peak_mem_mb": {"p95": 900.0, "max": 900.0},
        "throttled_share": 0.0,
        "cold_start_share": 0.0,
        "load_ms_p95": None,
        "fallback_rate": 0.0,
    }


def test_all_cloud_counterfactual_seed003_seed004_golden(loaded):
    """§11: over live events carrying all_cloud_cost_usd; their own cost_usd (missing: 0) is what was spent."""
    result = compute(loaded, START, END)
    a, b, overall = (
        result["by_task_type"][A]["cost_usd"],
        result["by_task_type"][B]["cost_usd"],
        result["overall"]["cost_usd"],
    )
    # A: all-cloud 0.010 + 0.010 + 0.020 = 0.040; spent 0 + 0.004 + 0 (H3 has no cost_usd) = 0.004 → saved 0.036, 90 %.
    # V1 (v1) spent 0.003 of the total but carries no counterfactual: in `total`, not in `saved`.
    assert (
        a["all_cloud"] == pytest.approx(0.040)
        and a["saved"] == pytest.approx(0.036)
        and a["saved_share"] == pytest.approx(0.9)
    )
    assert a["total"] == pytest.approx(0.007)
    # where it went: H2's fallback after the device was tried, nothing routed straight to the cloud
    assert (a["spent_after_device"], a["spent_cloud_direct"]) == (pytest.approx(0.004), pytest.approx(0.0))
    # B: all-cloud 0.005 + 0.008 = 0.013, spent the same → saved 0, share 0 (the device saved nothing)
    assert (b["all_cloud"], b["saved"], b["saved_share"]) == (
        pytest.approx(0.013),
        pytest.approx(0.0),
        pytest.approx(0.0),
    )
    assert (b["spent_after_device"], b["spent_cloud_direct"]) == (pytest.approx(0.005), pytest.approx(0.008))  # U1; C1
    # overall: 0.053 all-cloud, 0.017 spent → 0.036 saved, 0.036 / 0.053 = 0.679245
    assert overall["all_cloud"] == pytest.approx(0.053) and overall["saved_share"] == pytest.approx(0.036 / 0.053)
    # code_snippet has only shadow events: no live event carries the field → nulls
    assert result["by_task_type"]["code_snippet"]["cost_usd"]["saved_share"] is None


def test_task_grading_seed004_golden_with_the_error_cost_veto(loaded):
    """§12 (docs/sources.md#seed-004-2): the error-cost veto decides
    before any score; scores renormalised 0.4/0.4/0.2."""
    report = grading_report(loaded, POLICY, QueryWindow(START, END))
    # §12 days_observed: live events at 11-23 00h (h1), 11-23 12h (u1), 11-24 00h (h2), 11-25 00h (h3),
    # 11-26 00h (v1), 11-27 00h (c1): 6 distinct UTC hours → 6 / 24 = 0.25 days, not the window's 7
    assert report["window"] == {
        "start": "2026-11-22T00:00:00Z",
        "end": "2026-11-29T00:00:00Z",
        "days": 7.0,
        "days_observed": 0.25,
    }
    a, b = report["task_types"][A], report["task_types"][B]
    # A: inputs [40, 60, 80, 400] → p50 at rank 1.5 = 70; p95 at 2.85 = 80 + 0.85·320 = 352; 352 > 4·70 → long tail.
    # input_length = (2048 − 352) / 1792 = 0.946429, halved → 0.473214. daily calls 4 / 0.25 = 16 →
    # frequency log10(16) / 5 = 0.240824. determinism: 5 groups in the window, 4 agree → 0.8.
    # score 0.4·0.473214 + 0.4·0.8 + 0.2·0.240824 = 0.557451 → 0.557 → shadow.
    assert a["input_tokens"] == {"p50": 70.0, "p95": pytest.approx(352.0)} and a["long_tail"] is True
    assert a["daily_calls"] == pytest.approx(16.0) and a["determinism"] == 0.8 and a["determinism_groups"] == 5
    assert a["scores"] == {
        "input_length": pytest.approx(0.473214, abs=1e-6),
        "determinism": 0.8,
        "frequency": pytest.approx(0.240824, abs=1e-6),
    }
    assert (a["score"], a["tier"], a["reason"], a["error_cost"]) == (0.557, "shadow", "0.5 <= score < 0.75", 0.2)
    # B: inputs [100, 300] → p50 200, p95 290 (not > 800: no long tail); input_length (2048 − 290) / 1792 = 0.981027;
    # no determinism group → 0; daily 2 / 0.25 = 8 → log10(8) / 5 = 0.180618; score 0.392411 + 0.036124 = 0.429;
    # but error cost 0.8 > 0.7 → vetoed whatever the score.
    assert (b["input_tokens"], b["long_tail"], b["determinism"]) == ({"p50": 200.0, "p95": 290.0}, False, None)
    assert (b["score"], b["tier"], b["reason"]) == (0.429, "keep-cloud", "error_cost_veto")


def test_offload_readiness_seed003_golden_gates_and_score(loaded):
    """§13: three hard gates (a gate without data blocks too), then the weighted score >= 12 of 30."""
    report = readiness_report(loaded, POLICY, QueryWindow(START, END))
    a, b = report["task_types"][A], report["task_types"][B]
    # gate_memory: A has memory data on `high` only (8192 MB) → that tier; the peak is the max of [1000, 1200, 1100]
    # = 1200 (a p95 would read 1190) <= 0.40·8192 = 3276.8; resident max of [700, 750] <= 0.25·8192 = 2048
    assert a["gates"]["gate_memory"] == {
        "status": "pass",
        "tier": "high",
        "value": 1200.0,
        "limit": pytest.approx(3276.8),
        "resident": 750.0,
        "resident_limit": 2048.0,
    }
    # gate_duration: device attempts [180 (h1), 200 (h2), 12000 (h3), 180 (v1)] → sorted [180, 180, 200, 12000];
    # p95 at rank 2.85 → 200 + 0.85·11800 = 10230 > 10000 → fail
    assert a["gates"]["gate_duration"]["status"] == "fail" and a["gates"]["gate_duration"]["value"] == pytest.approx(
        10230.0
    )
    # gate_quality: labeled device-served h1 (fine), h3 (bad) → missed 1/2; caught bad h2 → auto_detected 1 / (1 + 1)
    q = a["gates"]["gate_quality"]
    assert (q["status"], q["missed_fallback_rate"], q["auto_detected"]) == ("fail", 0.5, 0.5)
    # factors: calls/session/day 4 / 2 / 0.25 (days observed) = 8 → 1; token budget p50 of [46, 66, 86, 406] = 76
    # → 3 (and through the 400-token screen); redactable → 1; a validator → 3; weak network 1/4 = 0.25 → 1;
    # quarterly → 3. 2·(1+3+1+3) + 1 + 3 = 20
    assert a["token_screen"] == {"status": "pass", "value": 76.0, "limit": 400}
    assert a["factors"]["calls_per_session_day"]["value"] == pytest.approx(8.0)
    points = {k: f["points"] for k, f in a["factors"].items()}
    assert points == {
        "calls_per_session_day": 1,
        "token_budget_p50": 3,
        "privacy": 1,
        "error_cost": 3,
        "network": 1,
        "iteration": 3,
    }
    assert a["factors"]["token_budget_p50"]["value"] == 76.0
    assert (a["score_003"], a["verdict"]) == (20, "not_ready")
    assert a["reasons"] == ["gate_duration fail", "gate_quality fail"]
    # B: its only peak is on an unknown tier (not in device_tiers) → unknown; duration [180] passes;
    # no labels → unknown.
    # factors: 2 / 1 / 0.25 = 8 → 1; budget p50 of [106, 306] = 206 → 1; public 0; no validator and cost 0.8 → 0;
    # network 0; monthly 1 → 2·(1 + 1) + 1 = 5
    assert [b["gates"][g]["status"] for g in ("gate_memory", "gate_duration", "gate_quality")] == [
        "unknown",
        "pass",
        "unknown",
    ]
    assert (b["score_003"], b["verdict"]) == (5, "not_ready")
    assert b["reasons"] == ["gate_memory unknown", "gate_quality unknown", "score_003 5 < 12"]
    # side by side: A graded `shadow` but not ready → the seeds disagree; B keep-cloud and not ready → agree
    both = side_by_side(grading_report(loaded, POLICY, QueryWindow(START, END)), report)
    assert both[A]["disagree"] is True and both[B]["disagree"] is False


def test_rollout_cohort_numbers_and_the_shadow_buckets(loaded):
    """The tracker's inputs: cohorts by rollout_stage, shadow agreement per input-length bucket, device
    errors per half of the shadow traffic (the midpoint of sh1 and sh2 is 2026-11-25T00:00)."""
    numbers = review_queries.rollout_numbers(loaded, QueryWindow(START, END))
    assert numbers[B]["cohorts"]["canary"]["requests"] == 1 and numbers[B]["cohorts"]["cloud_only"]["requests"] == 1
    assert numbers[A]["cohorts"]["full"]["device_attempts"] == 3  # h1 h2 h3 (v1 has no stage)
    # sh1 (50 tokens, agreed) in 0-128; sh2 (600 tokens, disagreed) in 512-2048
    assert numbers["code_snippet"]["buckets"] == {"0-128": (1, 1), "512-2048": (1, 0)}
    assert numbers["code_snippet"]["errors"] == [(1, 0), (1, 1)]  # sh1 ok in the first half, sh2 error in the second
    report = rollout_report(loaded, POLICY, QueryWindow(START, END))
    assert report["task_types"]["code_snippet"]["stage"] == "shadow"
    assert report["task_types"]["code_snippet"]["recommendation"] == "hold"  # 1 comparison a bucket is no evidence
    assert report["task_types"][B]["stage"] == "canary" and report["task_types"][B]["percent"] == 50.0
