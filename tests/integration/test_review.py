"""Golden numbers for docs/metrics.md §10–§13 (device ledger, all-cloud counterfactual, task grading, offload
readiness) and the stage tracker's cohort numbers: a small fixture loaded into a real embedded warehouse,
every expected number computed by hand in the comments."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest

from routerscope.warehouse.analytics.metrics import compute
from routerscope.warehouse.analytics.review import (
    grading_report,
    readiness_report,
    rollout_report,
    side_by_side,
    week_and_review,
    weekly_review,
)
from routerscope.warehouse.client import open_warehouse
from routerscope.warehouse.migrate import migrate
from routerscope.warehouse.queries import review as review_queries
from routerscope.warehouse.sql import QueryWindow
from tests.support.golden_day import insert
from tests.support.golden_week import DECISIONS, END, LABELS, POLICY, RERUNS, START, A, B

pytestmark = pytest.mark.integration


@pytest.fixture
def loaded(home):
    from tests.support.home import settings_for

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
    # §12 days_observed: the span of the live events, h1 at 11-23 00:00 to c1 at 11-27 00:00 → 4.0 days (not the
    # window's 7; the old count of distinct clock hours read 6 / 24 = 0.25 and put 16 calls a day on 4 events)
    assert report["window"] == {
        "start": "2026-11-22T00:00:00Z",
        "end": "2026-11-29T00:00:00Z",
        "days": 7.0,
        "days_observed": 4.0,
    }
    a, b = report["task_types"][A], report["task_types"][B]
    # A: inputs [40, 60, 80, 400] → p50 at rank 1.5 = 70; p95 at 2.85 = 80 + 0.85·320 = 352; 352 > 4·70 → long tail.
    # input_length = (2048 − 352) / 1792 = 0.946429, halved → 0.473214. daily calls 4 / 4 = 1 →
    # frequency log10(1) / 5 = 0. determinism: 5 groups in the window, 4 agree → 0.8.
    # score 0.4·0.473214 + 0.4·0.8 + 0.2·0 = 0.509286 → 0.509 → shadow.
    assert a["input_tokens"] == {"p50": 70.0, "p95": pytest.approx(352.0)} and a["long_tail"] is True
    assert a["daily_calls"] == pytest.approx(1.0) and a["determinism"] == 0.8 and a["determinism_groups"] == 5
    assert a["scores"] == {"input_length": pytest.approx(0.473214, abs=1e-6), "determinism": 0.8, "frequency": 0.0}
    assert (a["score"], a["tier"], a["reason"], a["error_cost"]) == (0.509, "shadow", "0.5 <= score < 0.75", 0.2)
    # determinism_ci: Wilson 4/5 → centre (0.8 + 1.920729/5)/1.768292 = 0.669654, half-width
    # 1.959964·√(0.032 + 0.038415)/1.768292 = 0.294121 → [0.375533, 0.963775]. At the low end the score is
    # 0.189286 + 0.4·0.375533 = 0.339 (keep-cloud), at the high end 0.575 (shadow): the tier is not settled.
    assert a["determinism_ci"] == [pytest.approx(0.375533, abs=1e-5), pytest.approx(0.963775, abs=1e-5)]
    assert (a["tier_settled"], a["note"]) == (False, "few re-run groups")
    # B: inputs [100, 300] → p50 200, p95 290 (not > 800: no long tail); input_length (2048 − 290) / 1792 = 0.981027;
    # no determinism group → 0; daily 2 / 4 = 0.5 → log10 < 0 → frequency 0; score 0.392411 → 0.392;
    # but error cost 0.8 > 0.7 → vetoed whatever the score (and so settled: the veto holds at both ends).
    assert (b["input_tokens"], b["long_tail"], b["determinism"]) == ({"p50": 200.0, "p95": 290.0}, False, None)
    assert (b["score"], b["tier"], b["reason"], b["tier_settled"]) == (0.392, "keep-cloud", "error_cost_veto", True)


def test_offload_readiness_seed003_golden_gates_and_score(loaded):
    """§13: the token screen on the p90, three hard gates on their evidence (too little is unknown, and unknown
    blocks too), then the weighted score >= 12 of 30."""
    report = readiness_report(loaded, POLICY, QueryWindow(START, END))
    a, b = report["task_types"][A], report["task_types"][B]
    # gate_memory: the policy's lowest target tier is `low` (2048 MB, available = memory); A has memory data on
    # `high` only, which says nothing about the small device → unknown, limits 0.40·2048 = 819.2, 0.25·2048 = 512.
    # (The old gate read the smallest tier *with data*, `high`, and passed.)
    assert a["gates"]["gate_memory"] == {
        "status": "unknown",
        "tier": "low",
        "available_mb": 2048.0,
        "value": None,
        "limit": pytest.approx(819.2),
        "resident": None,
        "resident_limit": 512.0,
        "n": 0,
        "note": "no memory figures from the low tier",
    }
    # gate_duration: 4 device attempts [180, 200, 12000, 180] < 30 → the time part is unknown; A has a
    # validator (its answer is checked whole) but its answer is capped at 16 tokens: it arrives at once, so it
    # counts as streamable (docs/review.md; it failed on that before, the seed's own example candidate) → unknown.
    d = a["gates"]["gate_duration"]
    assert (d["status"], d["n"], d["timed_out"], d["errors"], d["streamable"], d["value"]) == (
        "unknown",
        4,
        0,
        0,
        True,
        None,
    )
    assert d["note"] == "too few device attempts (4 < 30)"
    # gate_quality: labeled device-served h1 (fine), h3 (bad) → 2 labels < min_n 30 → unknown, whatever the rate.
    # §3c: one stratum (confidence 0.91, bucket ≥ 0.85) N 3 (h1 h3 v1), n 2, k 1 → rate 0.5,
    # V = 0.25/2·(1 − 2/3) = 1/24 → n_eff 6; Wilson(0.5, 6) = 0.5 ± 1.959964·√(0.041667 + 0.026677)/1.640243
    # = 0.5 ± 0.312385. auto_detected: caught h2, missed h3 → 1/2, Wilson [0.094531, 0.905469].
    q = a["gates"]["gate_quality"]
    assert (q["status"], q["n"], q["min_n"], q["missed_fallback_rate"], q["auto_detected"]) == (
        "unknown",
        2,
        30,
        0.5,
        0.5,
    )
    assert q["missed_fallback_est"]["n_eff"] == pytest.approx(6.0)
    assert q["missed_fallback_est"]["ci"] == [pytest.approx(0.187615, abs=1e-5), pytest.approx(0.812385, abs=1e-5)]
    assert q["auto_detected_ci"] == [pytest.approx(0.094531, abs=1e-5), pytest.approx(0.905469, abs=1e-5)]
    # token screen: p90 of input + output [46, 66, 86, 406] at rank 2.7 → 86 + 0.7·320 = 310 ≤ 400 → through;
    # 1 of 4 over 400. Factors: calls/session/day 4 / 2 / 4 = 0.5 → 0; token budget 310 → 1; redactable → 1;
    # a validator → 3; weak network 1/4 = 0.25 → 1; quarterly → 3. 2·(0+1+1+3) + 1 + 3 = 14
    assert a["token_screen"] == {"status": "pass", "value": pytest.approx(310.0), "limit": 400, "over_share": 0.25}
    assert a["factors"]["calls_per_session_day"]["value"] == pytest.approx(0.5)
    points = {k: f["points"] for k, f in a["factors"].items()}
    assert points == {
        "calls_per_session_day": 0,
        "token_budget_p90": 1,
        "privacy": 1,
        "error_cost": 3,
        "network": 1,
        "iteration": 3,
    }
    assert (a["score_003"], a["verdict"]) == (14, "not_ready")
    assert a["reasons"] == ["gate_memory unknown", "gate_duration unknown", "gate_quality unknown"]
    # neither task type declares its answers in this policy: the router checks their form only
    assert (a["answer_check"], b["answer_check"]) == ("unchecked", "unchecked")
    # B: no data on `low` → unknown; 1 device attempt → unknown (no validator: streamable); no labels → unknown.
    # factors: 2 / 1 / 4 = 0.5 → 0; budget p90 of [106, 306] = 106 + 0.9·200 = 286 → 1; public 0; no validator
    # and cost 0.8 → 0; network 0; monthly 1 → 2·1 + 1 = 3
    assert [b["gates"][g]["status"] for g in ("gate_memory", "gate_duration", "gate_quality")] == [
        "unknown",
        "unknown",
        "unknown",
    ]
    assert (b["score_003"], b["verdict"]) == (3, "not_ready")
    assert b["reasons"] == ["gate_memory unknown", "gate_duration unknown", "gate_quality unknown", "score_003 3 < 12"]
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


def test_the_rollout_report_recommends_a_rollback_the_rules_raised_within_its_window_even_once_resolved(loaded):
    """One rollback truth (docs/metrics.md): the tracker reads the window's rollback state, not only what fires as
    it runs. A's rollback rule fired and resolved inside the window (it said "hold" before); an episode of B that
    resolved before the window and a ticket on A are no rollback."""
    import json
    from datetime import timedelta

    from routerscope.warehouse.analytics.alerting.evaluate import Alert
    from routerscope.warehouse.queries.alerts import write_alerts

    def episode(rule, task_type, first, last, action="rollback", severity="page", metric="degrade_trigger_rate"):
        return Alert(
            f"{rule}|{task_type}", first, rule, task_type, severity, action, rule, "resolved", last,
            last + timedelta(minutes=6), json.dumps({"metric": metric, "windows": []}), "v", "sent",
        ).row()  # fmt: skip

    at = START + timedelta(days=3, hours=19, minutes=20)
    write_alerts(
        loaded,
        [
            episode("rollback_degrade_trigger", A, at, at + timedelta(minutes=20)),
            episode("rollback_route_accuracy", A, at + timedelta(minutes=5), at + timedelta(minutes=25),
                    metric="route_accuracy_est.rate"),
            episode("fallback_rate_high", A, at, at + timedelta(minutes=20), action="", severity="ticket"),
            episode("rollback_degrade_trigger", B, START - timedelta(days=2), START - timedelta(days=2, minutes=-15)),
        ],
    )  # fmt: skip
    report = rollout_report(loaded, POLICY, QueryWindow(START, END))["task_types"]
    a, b = report[A], report[B]
    # A is at stage full (golden_week's policy): rolled back on both signals, 19:20 to 19:45, resolved 19:51
    assert (a["recommendation"], a["to"], a["rollback_signals"]) == (
        "rollback",
        "cloud_only",
        ["degrade_trigger_rate", "route_accuracy_est"],
    )
    assert a["rollback"]["words"] == (
        f"rollback recommended for {A} (degrade_trigger_rate, route_accuracy_est) 2026-11-25 19:20 – 19:45 UTC, "
        "resolved 19:51"
    )
    assert b["rollback"] == {
        "recommended": False,
        "signals": [],
        "first_seen": None,
        "last_seen": None,
        "firing": False,
        "resolved_at": None,
        "words": "no rollback recommended",
    }
    assert b["recommendation"] != "rollback"


def test_seed003_device_errors_are_failures_not_durations_in_the_duration_gate(home):
    """A device that errored in ~0 ms on 96 of 100 attempts and timed out on 4 got `gate_duration: pass` with a
    p95 of 0.04 ms. The warehouse's p95 now leaves errors out (the 4 timeouts at 8,000 ms are the only durations)
    and counts them; with 100 of 100 attempts without a duration the gate is unknown, never a pass."""
    from routerscope.contract.validation import DECISIONS as CONTRACT
    from tests.support.events import decision, iso
    from tests.support.home import settings_for

    def event(n: int, outcome: str, latency: float) -> dict:
        return decision(
            event_id=f"00000000-0000-4000-a000-{n:012d}",
            request_id=f"err-{n}",
            event_time=iso(START + timedelta(days=1, minutes=n)),
            fallback_type="error" if outcome == "error" else "timeout",
            reason="device_error" if outcome == "error" else "device_timeout",
            degrade_level=2,
            attempts=[
                {"level": 0, "outcome": outcome, "latency_ms": latency},
                {"level": 2, "outcome": "ok", "latency_ms": 700.0},
            ],
            cloud_calls=1,
        )

    events = [event(n, "error", 0.04) for n in range(96)] + [event(n, "timeout", 8000.0) for n in range(96, 100)]
    assert all(CONTRACT.parse(json.dumps(e).encode())[1] == [] for e in events[:1])
    with open_warehouse(settings_for(home)) as client:
        migrate(client)
        insert(client, events, [])
        window = QueryWindow(START, END)
        row = review_queries.task_review(client, window)[A]
        assert (row["device_attempts"], row["device_errors"], row["device_timeouts"]) == (100, 96, 4)
        assert row["device_p95_ms"] == pytest.approx(8000.0)  # was 0.04: the errors read as durations
        gate = readiness_report(client, POLICY, window)["task_types"][A]["gates"]["gate_duration"]
        assert (gate["status"], gate["errors"], gate["value"]) == ("unknown", 96, None)


@contextmanager
def recording(client) -> Iterator[list[str]]:
    """Every statement `client` runs meanwhile, in order."""
    statements: list[str] = []
    query, command = client.query, client.command

    def recorded(run):
        def call(sql, *args, **kwargs):
            statements.append(sql)
            return run(sql, *args, **kwargs)

        return call

    client.query, client.command = recorded(query), recorded(command)
    try:
        yield statements
    finally:
        client.query, client.command = query, command


def test_the_weekly_review_reads_the_week_once_and_says_what_each_report_says_alone(loaded, tmp_path):
    """`weekly_review` (`routerscope report`, the tuning page) materializes the week once, its events and their
    chosen labels, and runs every statement over that; each statement read the window FINAL, with its look-back,
    and the labels again (on the bench's week: 9.7 s, now 3.7 s). The reports are the same as read alone."""
    window = QueryWindow(START, END)
    with recording(loaded) as statements:
        week = weekly_review(loaded, POLICY, window, tmp_path)
    reading_decisions = [s.split("*/")[0] for s in statements if "routerscope.decisions" in s]
    assert reading_decisions and all(
        "materialize_review_window_events" in s or "metric_window_fold_check" in s for s in reading_decisions
    ), reading_decisions
    assert week["grading"] == grading_report(loaded, POLICY, window)
    assert week["readiness"] == readiness_report(loaded, POLICY, window)
    assert week["rollout"] == rollout_report(loaded, POLICY, window)
    assert week["ledger"] == review_queries.device_ledger(loaded, window)
    assert week["cost"] == review_queries.all_cloud_cost(loaded, window)


def test_the_week_and_its_review_read_together_are_each_what_it_is_alone(loaded, tmp_path):
    """Weekly tuning shows the week's metric set and its review (`week_and_review`): one materialization of the week
    serves both, and readiness takes the metric set's §3d instead of reading it again. Each is what it is computed
    alone, and only the one materialization reads `decisions` (with the metric window's fold check)."""
    window = QueryWindow(START, END)
    with recording(loaded) as statements:
        week, review = week_and_review(loaded, POLICY, window, tmp_path)
    materializing = [s for s in statements if "materialize_review_window_events" in s]
    assert len(materializing) == 1, [s.split("*/")[0] for s in statements if "routerscope.decisions" in s]
    assert not [s for s in statements if "/* routerscope:ppi_strata" in s][1:], "§3d read more than once"
    assert week == compute(loaded, START, END)
    assert review == weekly_review(loaded, POLICY, window, tmp_path)
