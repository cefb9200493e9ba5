"""The SIMULATED fleet against the seeds' own figures: a seeded 20k demo, loaded into the warehouse, checked
row by row with plain SQL a reviewer would write (never the metric code). Calm = requests that started
outside the three incidents (cloud outage 20-30 %, thermal 45-65 %, push 75-90 % of the span).

The figures the demo showed before (issue 27's table, 20k, seed 7): 2.0 % calm fallbacks over 7,671
device-entered; 15 labeled quality fallbacks; the QA-like task at 0/1.5/30/68 %; device TTFT constant per
tier (correlation with input -0.01); ~600 ms cloud whatever the length; 21 % of consecutive events
backwards in time; 0 device_busy; thermal decode halved with TTFT unchanged."""

from __future__ import annotations

import pytest

from routerscope.cli.demo import run
from routerscope.core import broker
from routerscope.core.procs import free_port
from routerscope.warehouse.client import open_warehouse
from tests.support.home import settings_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]  # one 20k demo for the module

SPAN_MS = 120 * 60 * 1000
# the request's start as a share of the span: its event time (the decision's end) less its latency
PROGRESS = "((toUnixTimestamp64Milli(event_time) - latency_ms) - {start_ms:Int64}) / {span_ms:Int64}"
CALM = f"""NOT ({PROGRESS} >= 0.20 AND {PROGRESS} < 0.30) AND NOT ({PROGRESS} >= 0.45 AND {PROGRESS} < 0.65)
    AND NOT ({PROGRESS} >= 0.75 AND {PROGRESS} < 0.90)"""
THERMAL = f"{PROGRESS} >= 0.45 AND {PROGRESS} < 0.65"
# one row per decision (the local broker may deliver a message twice)
DECISIONS = "(SELECT * FROM routerscope.decisions FINAL LIMIT 1 BY event_id)"
BUCKET = "multiIf(confidence < 0.45, 0, confidence < 0.65, 1, confidence < 0.85, 2, 3)"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    home = tmp_path_factory.mktemp("calibration-home")
    settings = settings_for(home)
    try:
        out = run(settings, requests=20_000, seed=11, port=free_port(), span_minutes=120, corrupt=0, live_requests=0)
    finally:
        broker.stop(settings)
    start_ms = int(out["simulated"]["start"].timestamp() * 1000)
    with open_warehouse(settings) as client:

        def query(sql: str) -> list[tuple]:
            return client.query(sql, parameters={"start_ms": start_ms, "span_ms": SPAN_MS}).result_rows

        yield query


def test_calm_fallback_rate_over_device_entered_is_seed000s_30_percent(demo):
    """docs/sources.md#seed-000: "回退率 30%" — the denominator is the
    device-entered requests (capability misses excluded)."""
    [(entered, fell_back)] = demo(
        f"""SELECT count(), countIf(fallback_type != 'none') FROM {DECISIONS}
        WHERE mode = 'live' AND entered_device AND {CALM}"""
    )
    assert entered > 5000
    assert 0.20 <= fell_back / entered <= 0.40, (fell_back, entered)


def test_calm_false_fallback_rate_of_labeled_quality_fallbacks_is_seed000s_15_to_30_percent(demo):
    """docs/sources.md#seed-000: 误回退率 "通常 15%~30%", from at least
    100 labeled quality fallbacks (a usable interval). The seed's rate is the truth's: the simulated replay judge's
    labels are left out (it accepts a fifth of the bad answers on purpose, the error §3d's human share corrects): the
    demo's only `offline_replay` labels (its labelers, like every labeler, leave as the SDK's pseudonyms)."""
    [(labeled, acceptable)] = demo(
        f"""SELECT count(), countIf(l.device_acceptable)
        FROM {DECISIONS} AS d INNER JOIN (
            SELECT * FROM routerscope.labels FINAL WHERE source != 'offline_replay' LIMIT 1 BY request_id
        ) AS l
            ON l.request_id = d.request_id
        WHERE d.mode = 'live' AND d.entered_device AND d.fallback_type = 'quality' AND {CALM}"""
    )
    assert labeled >= 100
    assert 0.15 <= acceptable / labeled <= 0.30, (acceptable, labeled)


def test_the_qa_like_task_has_seed000s_confidence_buckets_and_pass_rates(demo):
    """The seed's (docs/sources.md#seed-000) calibration table: 18 / 27 / 34 / 21 % of a QA task's answers in [0,.45)
    [.45,.65) [.65,.85) [.85,1], passing 11 / 58 / 89 / 97 %. short_reply is the demo's QA-like task."""
    rows = demo(
        f"""SELECT {BUCKET} AS bucket, count() AS n FROM {DECISIONS}
        WHERE task_type = 'short_reply' AND mode = 'live' AND entered_device AND confidence IS NOT NULL AND {CALM}
        GROUP BY bucket ORDER BY bucket"""
    )
    total = sum(n for _, n in rows)
    shares = [n / total for _, n in rows]
    assert total > 1000 and len(rows) == 4
    for share, seed in zip(shares, (0.18, 0.27, 0.34, 0.21)):
        assert abs(share - seed) < 0.04, shares
    passing = demo(  # the truth's pass rates: the simulated replay judge's lenient labels left out, as above
        f"""SELECT {BUCKET} AS bucket, count(), avg(l.device_acceptable)
        FROM {DECISIONS} AS d INNER JOIN (
            SELECT * FROM routerscope.labels FINAL WHERE source != 'offline_replay' LIMIT 1 BY request_id
        ) AS l
            ON l.request_id = d.request_id
        WHERE d.task_type = 'short_reply' AND d.mode = 'live' AND d.confidence IS NOT NULL AND {CALM}
        GROUP BY bucket ORDER BY bucket"""
    )
    assert [n >= 40 for _, n, _ in passing] == [True] * 4, passing
    # each a labeled sample of 40-130: within 0.12, or three of its standard errors at the seed's rate where that is
    # wider (80 labeled at 0.58: 0.165; one run drew 0.71 there, 2.4 of them, where the fixed 0.12 failed)
    for (_, n, rate), seed in zip(passing, (0.11, 0.58, 0.89, 0.97)):
        assert abs(rate - seed) < max(0.12, 3 * (seed * (1 - seed) / n) ** 0.5), passing


def test_one_task_types_top_confidence_bucket_is_over_confident(demo):
    """The calibration view's lesson: a task type whose answers above 0.85 pass less often than those
    in [.65,.85) (short_summary, by construction). Over the whole span: a label's verdict depends on the
    confidence alone, never on an incident, and the calm part held only ~50 top-bucket labels, where one draw of
    the random stream put 39 of 48 over a 65 % pass rate (a 1 % tail) and hid the gap."""
    rows = demo(
        f"""SELECT d.task_type, avgIf(l.device_acceptable, d.confidence >= 0.85) AS top,
               avgIf(l.device_acceptable, d.confidence >= 0.65 AND d.confidence < 0.85) AS below,
               countIf(d.confidence >= 0.85) AS n_top
        FROM {DECISIONS} AS d INNER JOIN (SELECT * FROM routerscope.labels FINAL LIMIT 1 BY request_id) AS l
            ON l.request_id = d.request_id
        WHERE d.mode = 'live' AND d.confidence IS NOT NULL
        GROUP BY d.task_type HAVING n_top >= 30 AND top < below - 0.1"""
    )
    assert [r[0] for r in rows] == ["short_summary"], rows


def test_device_ttft_grows_with_the_input_at_the_tiers_prefill_rate(demo):
    """docs/sources.md#seed-003: TTFT = fixed + input / prefill_tps; a low-tier phone takes 0.72-5.05 s for 128-512
    tokens. Before: constant per tier, correlation with the input -0.01."""
    rows = demo(
        f"""SELECT device_tier, corr(toFloat64(input_tokens), ttft_ms),
               quantileExactIf(0.5)(ttft_ms, input_tokens BETWEEN 128 AND 512)
        FROM {DECISIONS}
        WHERE entered_device AND attempt_levels[1] = 0 AND NOT device_cold_start AND ttft_ms IS NOT NULL AND {CALM}
        GROUP BY device_tier ORDER BY device_tier"""
    )
    by_tier = {tier: (r, median) for tier, r, median in rows}
    assert set(by_tier) == {"high", "mid", "low"}
    assert all(r > 0.8 for r, _ in by_tier.values()), by_tier
    assert 720 <= by_tier["low"][1] <= 5050, by_tier
    assert by_tier["high"][1] < by_tier["mid"][1] < by_tier["low"][1]


def test_cloud_latency_by_output_length_is_seed000s_table_within_25_percent(demo):
    """docs/sources.md#seed-000: the cloud takes ~1.2 / 1.6 / 2.8 s for < 100 / 100-400 / > 400 output tokens. Requests
    the cloud served at L2 on its first try (no device attempt before it). Before: ~600 ms whatever the length."""
    rows = demo(
        f"""SELECT multiIf(output_tokens < 100, 0, output_tokens <= 400, 1, 2) AS size, count(), median(latency_ms)
        FROM {DECISIONS}
        WHERE mode = 'live' AND attempt_levels = [2] AND attempt_outcomes = ['ok'] AND {CALM}
        GROUP BY size ORDER BY size"""
    )
    assert [size for size, _, _ in rows] == [0, 1, 2] and all(n >= 50 for _, n, _ in rows), rows
    for (_, _, median), seed in zip(rows, (1200, 1600, 2800)):
        assert 0.75 * seed <= median <= 1.25 * seed, rows


def test_time_never_runs_backwards_for_the_router_instance(demo):
    """Before: the event clock ran backwards on 21 % of consecutive events (up to 6.7 s). In the order the
    router emitted them (Kafka offsets per partition) decision times never decrease, and each breaker's
    transitions, in their numbered order, never go back in time."""
    [(pairs, backwards)] = demo(
        """SELECT count(), countIf(event_time < previous) FROM (
            SELECT event_time, lagInFrame(event_time) OVER (PARTITION BY kafka_partition ORDER BY kafka_offset
                ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS previous, row_number() OVER (
                PARTITION BY kafka_partition ORDER BY kafka_offset) AS k
            FROM (SELECT event_time, kafka_partition, min(kafka_offset) AS kafka_offset FROM routerscope.decisions
                  GROUP BY event_id, event_time, kafka_partition)) WHERE k > 1"""
    )
    assert pairs > 19_000 and backwards == 0
    [(transitions, breaker_backwards)] = demo(
        """SELECT count(), countIf(event_time < previous) FROM (
            SELECT event_time, lagInFrame(event_time) OVER (PARTITION BY instance_id, boundary ORDER BY seq
                ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS previous, row_number() OVER (
                PARTITION BY instance_id, boundary ORDER BY seq) AS k
            FROM (SELECT * FROM routerscope.breaker_events FINAL LIMIT 1 BY event_id)) WHERE k > 1"""
    )
    assert transitions > 5 and breaker_backwards == 0


def test_requests_overlap_and_a_busy_device_sends_the_excess_to_the_cloud(demo):
    """docs/sources.md#seed-004-6: a hard device cap, the excess to the cloud (never a queue). Before: 0 device_busy."""
    [(busy, busy_entered, busy_cloud)] = demo(
        f"""SELECT count(), countIf(entered_device), countIf(attempt_levels[1] IN (2, 3)) FROM {DECISIONS}
        WHERE reason = 'device_busy' AND {CALM}"""
    )
    assert busy >= 100 and busy_entered == 0 and busy_cloud >= 0.9 * busy


def test_a_throttled_soc_doubles_the_calls_latency_and_the_thermal_episode_raises_timeouts(demo):
    """docs/sources.md#seed-003: "二次调用延迟直接翻倍" — a throttled device prefills and decodes at half speed (before:
    decode halved, TTFT unchanged); the thermal episode's timeout fallbacks stand out against the calm baseline."""
    [(cool, hot, cool_tps, hot_tps)] = demo(
        f"""SELECT medianIf(ttft_ms / input_tokens, device_thermal_state IN ('nominal', 'fair')),
               medianIf(ttft_ms / input_tokens, device_thermal_state IN ('serious', 'critical')),
               medianIf(device_decode_tps, device_thermal_state IN ('nominal', 'fair')),
               medianIf(device_decode_tps, device_thermal_state IN ('serious', 'critical'))
        FROM {DECISIONS}
        WHERE entered_device AND device_tier = 'low' AND attempt_levels[1] = 0 AND NOT device_cold_start
              AND ttft_ms IS NOT NULL AND device_decode_tps IS NOT NULL"""
    )
    assert 1.7 < hot / cool < 2.4 and 1.7 < cool_tps / hot_tps < 2.4, (cool, hot, cool_tps, hot_tps)
    [(calm_rate,)] = demo(
        f"""SELECT countIf(fallback_type = 'timeout') / count() FROM {DECISIONS}
        WHERE mode = 'live' AND entered_device AND {CALM}"""
    )
    [(thermal_rate,)] = demo(
        f"""SELECT countIf(fallback_type = 'timeout') / count() FROM {DECISIONS}
        WHERE mode = 'live' AND entered_device AND {THERMAL}"""
    )
    assert thermal_rate > 3 * calm_rate, (calm_rate, thermal_rate)
