"""Queries behind the seeds' ledgers and reports (docs/metrics.md §10–§13) and the rollout stage tracker.

* §10 the device ledger per tier, from v2 events that carry `device_stats` (flattened into the
  `device_*` columns by migration 0011);
* §11 the all-cloud counterfactual per task type (`all_cloud_cost_usd` against the same events' spend);
* §12/§13 per task type over a review window: input lengths, volumes, the token budget, the network,
  device attempt durations, peak memory per tier, labeled quality, and the replay's determinism groups;
* the stage tracker's cohort numbers: per task type and `rollout_stage`, and the shadow traffic by
  input-length bucket and by half of the window.

Every value is a bound `{name:Type}` parameter; the SQL text is constant. Grouping sets give the
overall row with task_type NULL (`group_by_use_nulls`)."""

from __future__ import annotations

import math
from typing import Any

from routerscope.core import names
from routerscope.warehouse.queries.decisions import INPUT_LENGTH_BUCKETS, INPUT_LENGTH_EDGES, WINDOW_TABLE
from routerscope.warehouse.queries.labels import CHOSEN_LABELS_CTE, DEFAULT_EDGES, chosen_parameters
from routerscope.warehouse.sql import FIRST_COPY, QueryWindow, dict_rows, named

# The columns of the window these queries read (the v2 ones included).
REVIEW_COLUMNS = """event_id, event_time, task_type, mode, session_id, request_id, entered_device, fallback_type,
           reason, confidence, degrade_level, schema_version, input_tokens, output_tokens, latency_ms, ttft_ms,
           network, device_tier, cost_usd, shadow_agree, attempt_levels, attempt_outcomes, attempt_latency_ms,
           device_peak_mem_mb,
           device_thermal_state, device_decode_tps, device_prefill_tps, device_cold_start, device_load_ms,
           all_cloud_cost_usd, rollout_stage, device_resident_mem_mb"""
# The de-duplicated events of the window with those columns.
REVIEW_CTE = (
    """
w AS (
    SELECT """
    + REVIEW_COLUMNS
    + """
    FROM $decisions FINAL
    WHERE event_time >= {start:DateTime64(3, 'UTC')} AND event_time < {end:DateTime64(3, 'UTC')}
      AND """
    + FIRST_COPY
    + """
)"""
)

# §10: "carries device_stats" = a v2 event with at least one measured device_* value.
HAS_DEVICE_STATS = (
    "schema_version = 2 AND (device_peak_mem_mb IS NOT NULL OR device_thermal_state IS NOT NULL "
    "OR device_decode_tps IS NOT NULL OR device_prefill_tps IS NOT NULL OR device_cold_start IS NOT NULL)"
)

# The metric set runs §10 and §11 over its materialized window (decisions.materialized_window, which
# holds the columns these two read) instead of reading `decisions FINAL` again.
FROM_WINDOW_CTE = "w AS (SELECT * FROM " + WINDOW_TABLE + ")"

# Constant pieces the statements below share (named() puts them in before it spells the tables).
FRAGMENTS = {
    "review_cte": REVIEW_CTE,
    "from_window_cte": FROM_WINDOW_CTE,
    "chosen_labels_cte": CHOSEN_LABELS_CTE,
    "has_device_stats": HAS_DEVICE_STATS,
}
# The same statements over the review's materialized window (`decisions.materialized_window(wide=True)`, what
# `routerscope report` and the tuning page open once for the whole review): its events with the columns above,
# and each labeled request's chosen label, which the window holds beside its events (the same pick as
# CHOSEN_LABELS_CTE: one per request, so every event of a request holds the same). Each statement read the window
# FINAL, with its look-back, and the labels again: eleven reads of the same week (docs/benchmarks.md).
WINDOW_FRAGMENTS = {
    **FRAGMENTS,
    "review_cte": f"w AS (SELECT {REVIEW_COLUMNS} FROM {WINDOW_TABLE})",
    "chosen_labels_cte": (
        f"chosen AS (SELECT DISTINCT request_id, labeled, acceptable, route_ok FROM {WINDOW_TABLE} WHERE labeled = 1)"
    ),
}


def _both(name: str, template: str) -> dict[bool, str]:
    """`template` over the warehouse (False) and over the review's materialized window (True)."""
    return {False: named(name, template, FRAGMENTS), True: named(f"{name}_from_window", template, WINDOW_FRAGMENTS)}


_DEVICE_LEDGER = """
SELECT ifNull(device_tier, 'unknown') AS tier,
       count() AS requests,
       quantileExactInclusive(0.5)(ttft_ms) AS ttft_p50,
       quantileExactInclusive(0.95)(ttft_ms) AS ttft_p95,
       quantileExactInclusive(0.5)(device_decode_tps) AS decode_p50,
       quantileExactInclusive(0.05)(device_decode_tps) AS decode_p5,
       countIf(device_decode_tps IS NOT NULL) AS decode_n,
       quantileExactInclusive(0.95)(device_peak_mem_mb) AS peak_p95,
       max(device_peak_mem_mb) AS peak_max,
       countIf(device_peak_mem_mb IS NOT NULL) AS peak_n,
       countIf(ttft_ms IS NOT NULL) AS ttft_n,
       countIf(device_thermal_state IN ('serious', 'critical')) / count() AS throttled_share,
       countIf(device_cold_start) / count() AS cold_start_share,
       countIf(device_cold_start AND device_load_ms IS NOT NULL) AS cold_n,
       quantileExactInclusiveIf(0.95)(device_load_ms, device_cold_start = true AND device_load_ms IS NOT NULL)
           AS load_p95,
       countIf(fallback_type IN ('quality', 'timeout', 'error')) / count() AS fallback_rate
FROM w
WHERE mode = 'live' AND entered_device AND $has_device_stats
GROUP BY tier
ORDER BY tier
"""
DEVICE_LEDGER_SQL = named("device_ledger", "WITH $review_cte" + _DEVICE_LEDGER, FRAGMENTS)
DEVICE_LEDGER_FROM_WINDOW_SQL = named("device_ledger_from_window", "WITH $from_window_cte" + _DEVICE_LEDGER, FRAGMENTS)

_ALL_CLOUD = """
SELECT task_type,
       countIf(all_cloud_cost_usd IS NOT NULL) AS carried,
       sumIf(all_cloud_cost_usd, all_cloud_cost_usd IS NOT NULL) AS all_cloud,
       sumIf(ifNull(cost_usd, 0), all_cloud_cost_usd IS NOT NULL) AS spent,
       sumIf(ifNull(cost_usd, 0), all_cloud_cost_usd IS NOT NULL AND entered_device) AS spent_after_device
FROM w WHERE mode = 'live'
GROUP BY GROUPING SETS ((task_type), ())
ORDER BY task_type
SETTINGS group_by_use_nulls = 1
"""
ALL_CLOUD_SQL = named("all_cloud_cost", "WITH $review_cte" + _ALL_CLOUD, FRAGMENTS)
ALL_CLOUD_FROM_WINDOW_SQL = named("all_cloud_cost_from_window", "WITH $from_window_cte" + _ALL_CLOUD, FRAGMENTS)

# §12/§13 per task type. auto_detected's parts: labeled judged fallbacks (quality, timeout) judged
# unacceptable — bad answers the router caught — and labeled device-served judged unacceptable — missed.
REVIEW_SQL = _both(
    "task_review",
    """
WITH $review_cte,
$chosen_labels_cte,
j AS (
    SELECT w.*, c.labeled AS labeled, c.acceptable AS acceptable,
           w.entered_device AND w.fallback_type IN ('quality', 'timeout') AS judged_fallback,
           w.entered_device AND w.fallback_type = 'none' AND w.degrade_level IN (0, 1) AS device_served
    FROM w LEFT JOIN chosen AS c ON w.request_id = c.request_id
    WHERE w.mode = 'live'
)
SELECT task_type,
       count() AS requests,
       uniqExact(session_id) AS sessions,
       quantileExactInclusive(0.5)(input_tokens) AS input_p50,
       quantileExactInclusive(0.95)(input_tokens) AS input_p95,
       quantileExactInclusive(0.9)(input_tokens + output_tokens) AS token_budget_p90,
       countIf(input_tokens + output_tokens > {token_screen:UInt32}) / count() AS token_budget_over_share,
       countIf(network IN ('weak', 'offline')) / count() AS weak_network_share,
       quantileExactInclusiveArray(0.95)(arrayFilter((lat, l, o) -> l IN (0, 1) AND o != 'error',
                                                     attempt_latency_ms, attempt_levels, attempt_outcomes))
           AS device_p95_ms,
       sum(arrayCount(l -> l IN (0, 1), attempt_levels)) AS device_attempts,
       sum(arrayCount((l, o) -> l IN (0, 1) AND o = 'error', attempt_levels, attempt_outcomes)) AS device_errors,
       sum(arrayCount((l, o) -> l IN (0, 1) AND o = 'timeout', attempt_levels, attempt_outcomes)) AS device_timeouts,
       sum(arrayCount((l, o, lat) -> l IN (0, 1) AND o = 'timeout' AND lat >= {duration_ms:Float64},
                      attempt_levels, attempt_outcomes, attempt_latency_ms)) AS device_timeouts_past_limit,
       countIf(device_served AND labeled = 1) AS missed_fallback_labeled,
       countIf(device_served AND labeled = 1 AND NOT acceptable) AS missed_fallbacks,
       countIf(judged_fallback AND labeled = 1 AND NOT acceptable) AS caught_bad
FROM j
GROUP BY task_type
ORDER BY task_type
""",
)

# §13 gate_quality on §3c's estimate: the device-served events per task type × confidence bucket (§6's edges,
# -1 for a null confidence), how many carry a chosen label and how many of those were judged not acceptable.
MISSED_STRATA_SQL = _both(
    "review_missed_fallback_strata",
    """
WITH $review_cte,
$chosen_labels_cte
SELECT w.task_type AS task_type,
       if(w.confidence IS NULL, -1, arrayCount(e -> e <= w.confidence, {inner_edges:Array(Float64)})) AS bucket,
       count() AS N,
       countIf(c.labeled = 1) AS n,
       countIf(c.labeled = 1 AND NOT c.acceptable) AS k
FROM w LEFT JOIN chosen AS c ON w.request_id = c.request_id
WHERE w.mode = 'live' AND w.entered_device AND w.fallback_type = 'none' AND w.degrade_level IN (0, 1)
GROUP BY task_type, bucket
ORDER BY task_type, bucket
""",
)

# §13 memory gate per task type and tier: the peak (max, never a p95) of the per-request peaks, and the
# max resident memory (model loaded, idle), each with how many events reported it.
PEAK_BY_TIER_SQL = _both(
    "peak_memory_by_task_and_tier",
    """
WITH $review_cte
SELECT task_type, ifNull(device_tier, 'unknown') AS tier,
       countIf(device_peak_mem_mb IS NOT NULL) AS n,
       quantileExactInclusive(0.95)(device_peak_mem_mb) AS peak_p95,
       max(device_peak_mem_mb) AS peak_max,
       countIf(device_resident_mem_mb IS NOT NULL) AS resident_n,
       max(device_resident_mem_mb) AS resident_max
FROM w
WHERE mode = 'live' AND entered_device AND (device_peak_mem_mb IS NOT NULL OR device_resident_mem_mb IS NOT NULL)
GROUP BY task_type, tier
ORDER BY task_type, tier
""",
)

# §12 `days_observed`: the span of the window's live events (any task type), first to last, in milliseconds,
# and how many there are.
_LIVE_SPAN = """
SELECT count(), toUnixTimestamp64Milli(max(event_time)) - toUnixTimestamp64Milli(min(event_time)) FROM $events
WHERE mode = 'live' AND event_time >= {start:DateTime64(3, 'UTC')} AND event_time < {end:DateTime64(3, 'UTC')}
"""
LIVE_SPAN_SQL = {
    False: named("live_event_span", _LIVE_SPAN, {"events": "$decisions"}),
    True: named("live_event_span_from_window", _LIVE_SPAN, {"events": WINDOW_TABLE}),
}
MIN_SPAN_DAYS = 5 / 1440  # §12: at least 5 minutes


def days_observed(client, window: QueryWindow, from_window: bool = False) -> float:
    """docs/metrics.md §12: the span of the window's live events in days, at least 5 minutes and at most the
    window's length (a night without traffic inside the span still counts as time); 0 without live events.
    `from_window`: over the review's materialized window (`decisions.materialized_window(wide=True)`)."""
    count, span_ms = client.query(LIVE_SPAN_SQL[from_window], parameters=window.parameters()).result_rows[0]
    if not int(count):
        return 0.0
    length = (window.end - window.start).total_seconds() / 86400
    return min(length, max(MIN_SPAN_DAYS, int(span_ms) / 86_400_000))


DETERMINISM_SQL = named(
    "replay_determinism",
    """
SELECT task_type, count() AS groups, countIf(agree) AS agreeing
FROM (SELECT * FROM $replay_reruns FINAL
      WHERE event_time >= {start:DateTime64(3, 'UTC')} AND event_time < {end:DateTime64(3, 'UTC')})
GROUP BY task_type
ORDER BY task_type
""",
    FRAGMENTS,
)

# The stage tracker: per task type and rollout_stage (live events; shadow events are stage `shadow`).
COHORTS_SQL = _both(
    "rollout_cohorts",
    """
WITH $review_cte,
$chosen_labels_cte,
j AS (
    SELECT w.*, c.labeled AS labeled, c.acceptable AS acceptable,
           w.entered_device AND w.fallback_type IN ('quality', 'timeout') AS judged_fallback
    FROM w LEFT JOIN chosen AS c ON w.request_id = c.request_id
    WHERE w.mode = 'live' AND w.rollout_stage IS NOT NULL
)
SELECT task_type, rollout_stage AS stage,
       count() AS requests,
       countIf(degrade_level = 4) AS l4,
       countIf(entered_device) AS device_entered,
       countIf(entered_device AND fallback_type IN ('quality', 'timeout', 'error')) AS fallbacks,
       countIf(judged_fallback AND labeled = 1) AS false_fallback_labeled,
       countIf(judged_fallback AND labeled = 1 AND acceptable) AS false_fallbacks,
       sum(arrayCount(l -> l IN (0, 1), attempt_levels)) AS device_attempts,
       sum(arrayCount((l, o) -> l IN (0, 1) AND o IN ('validator_failed', 'error'), attempt_levels, attempt_outcomes))
           AS offload_failures
FROM j
GROUP BY task_type, stage
ORDER BY task_type, stage
""",
)

# The canary → full condition on false fallbacks reads §3c's estimate (docs/metrics.md): per cohort, the judged
# fallbacks of each confidence bucket (N), those labeled (n) and acceptable among them (k).
COHORT_STRATA_SQL = _both(
    "rollout_cohort_strata",
    """
WITH $review_cte,
$chosen_labels_cte
SELECT w.task_type AS task_type, w.rollout_stage AS stage,
       if(w.confidence IS NULL, -1, arrayCount(e -> e <= w.confidence, {inner_edges:Array(Float64)})) AS bucket,
       count() AS big, countIf(c.labeled = 1) AS n, countIf(c.labeled = 1 AND c.acceptable) AS k
FROM w LEFT JOIN chosen AS c ON w.request_id = c.request_id
WHERE w.mode = 'live' AND w.rollout_stage IS NOT NULL
  AND w.entered_device AND w.fallback_type IN ('quality', 'timeout')
GROUP BY task_type, stage, bucket
ORDER BY task_type, stage, bucket
""",
)

# Shadow → canary: agreement per input-length bucket (with its sample), and the device's error rate
# (L0 attempts that timed out or errored) in each half of the task type's shadow traffic (split at the
# midpoint between its first and last shadow event in the window: a review window longer than the
# traffic still has two halves to compare).
SHADOW_BUCKETS_SQL = _both(
    "rollout_shadow_buckets",
    """
WITH $review_cte
SELECT task_type, arrayCount(e -> e <= input_tokens, {edges:Array(UInt64)}) AS bucket,
       count() AS compared, countIf(shadow_agree) AS agreed
FROM w WHERE mode = 'shadow' AND shadow_agree IS NOT NULL
GROUP BY task_type, bucket
ORDER BY task_type, bucket
""",
)

SHADOW_ERRORS_SQL = _both(
    "rollout_shadow_device_errors",
    """
WITH $review_cte,
mid AS (
    SELECT task_type, fromUnixTimestamp64Milli(intDiv(toUnixTimestamp64Milli(min(event_time))
                                                      + toUnixTimestamp64Milli(max(event_time)), 2), 'UTC') AS middle
    FROM w WHERE mode = 'shadow' GROUP BY task_type
)
SELECT w.task_type AS task_type, w.event_time >= mid.middle AS second_half,
       countIf(w.attempt_levels[1] = 0) AS attempts,
       countIf(w.attempt_levels[1] = 0 AND w.attempt_outcomes[1] IN ('error', 'timeout')) AS errors
FROM w INNER JOIN mid ON w.task_type = mid.task_type
WHERE w.mode = 'shadow'
GROUP BY task_type, second_half
ORDER BY task_type, second_half
""",
)


def _num(value) -> float | None:
    """A float, or None for SQL NULL and for the NaN an empty quantile can return."""
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


def device_ledger(client, window: QueryWindow, from_window: bool = False) -> dict[str, dict[str, Any]]:
    """docs/metrics.md §10: tier → its ledger (`from_window`: over the metric set's materialized window)."""
    ledger = {}
    sql = DEVICE_LEDGER_FROM_WINDOW_SQL if from_window else DEVICE_LEDGER_SQL
    for r in dict_rows(client, sql, window.parameters()):
        ledger[r["tier"]] = {
            "requests": int(r["requests"]),
            "ttft_ms": {
                "p50": _num(r["ttft_p50"]) if r["ttft_n"] else None,
                "p95": _num(r["ttft_p95"]) if r["ttft_n"] else None,
            },
            "decode_tps": {
                "p50": _num(r["decode_p50"]) if r["decode_n"] else None,
                "p5": _num(r["decode_p5"]) if r["decode_n"] else None,
            },
            "peak_mem_mb": {
                "p95": _num(r["peak_p95"]) if r["peak_n"] else None,
                "max": _num(r["peak_max"]) if r["peak_n"] else None,
            },
            "throttled_share": _num(r["throttled_share"]),
            "cold_start_share": _num(r["cold_start_share"]),
            "load_ms_p95": _num(r["load_p95"]) if r["cold_n"] else None,
            "fallback_rate": _num(r["fallback_rate"]),
        }
    return ledger


def all_cloud_cost(client, window: QueryWindow, from_window: bool = False) -> dict[str | None, dict[str, float | None]]:
    """docs/metrics.md §11: task_type (None: overall) → all_cloud, saved, saved_share; and where the spend went
    (additions): `spent_after_device`, paid after the device was tried (fallbacks, re-tries: the saving
    the device path gave back), and `spent_cloud_direct`, paid routing straight to the cloud."""
    found: dict[str | None, dict[str, float | None]] = {}
    for r in dict_rows(client, ALL_CLOUD_FROM_WINDOW_SQL if from_window else ALL_CLOUD_SQL, window.parameters()):
        if not r["carried"]:
            found[r["task_type"]] = {
                "all_cloud": None,
                "saved": None,
                "saved_share": None,
                "spent_after_device": None,
                "spent_cloud_direct": None,
            }
            continue
        all_cloud, spent, after = float(r["all_cloud"]), float(r["spent"]), float(r["spent_after_device"])
        found[r["task_type"]] = {
            "all_cloud": all_cloud,
            "saved": all_cloud - spent,
            "saved_share": (all_cloud - spent) / all_cloud if all_cloud else None,
            "spent_after_device": after,
            "spent_cloud_direct": spent - after,
        }
    return found


def task_review(
    client, window: QueryWindow, duration_ms: float = 10_000, token_screen: int = 400, from_window: bool = False
) -> dict[str, dict[str, Any]]:
    """§12/§13 inputs per task type (live events), with the determinism groups, peak memory per tier and the
    strata of the missed-fallback estimate (`missed_strata`: [(N_h, n_h, k_h)], §3c). `duration_ms`: the cut
    at or past which a timed-out device attempt counts against gate_duration; `token_screen`: the token
    budget whose share of requests over it is reported beside the p90. `from_window`: over the review's
    materialized window (`decisions.materialized_window(wide=True)`)."""
    parameters = {**chosen_parameters(window), "duration_ms": float(duration_ms), "token_screen": int(token_screen)}
    found = {r.pop("task_type"): r for r in dict_rows(client, REVIEW_SQL[from_window], parameters)}
    for r in found.values():
        finished = r["device_attempts"] - r["device_errors"]  # an error is a failure, never a duration (§13)
        r["device_p95_ms"] = _num(r["device_p95_ms"]) if finished else None
        r["peak_by_tier"] = {}
        r["missed_strata"] = []
        r["determinism_groups"], r["determinism_agreeing"] = 0, 0
    strata_parameters = {**chosen_parameters(window), "inner_edges": list(DEFAULT_EDGES[1:-1])}
    for r in dict_rows(client, MISSED_STRATA_SQL[from_window], strata_parameters):
        if r["task_type"] in found:
            found[r["task_type"]]["missed_strata"].append((int(r["N"]), int(r["n"]), int(r["k"])))
    for r in dict_rows(client, PEAK_BY_TIER_SQL[from_window], window.parameters()):
        if r["task_type"] in found:
            found[r["task_type"]]["peak_by_tier"][r["tier"]] = {
                "n": int(r["n"]),
                "p95": _num(r["peak_p95"]) if r["n"] else None,
                "max": _num(r["peak_max"]) if r["n"] else None,
                "resident_n": int(r["resident_n"]),
                "resident_max": _num(r["resident_max"]) if r["resident_n"] else None,
            }
    for r in dict_rows(client, DETERMINISM_SQL, window.parameters()):
        if r["task_type"] in found:
            found[r["task_type"]]["determinism_groups"] = int(r["groups"])
            found[r["task_type"]]["determinism_agreeing"] = int(r["agreeing"])
    return found


def rollout_numbers(client, window: QueryWindow, from_window: bool = False) -> dict[str, dict[str, Any]]:
    """task type → {stage: cohort counts, with `false_fallback_strata` [(N_h, n_h, k_h)] per confidence bucket},
    `buckets` {bucket: (compared, agreed)}, `errors` [(attempts, errors)
    of the first half, of the second]; `rollback` stays empty here (the caller fills it from
    `routerscope.warehouse.analytics.rollback`, the one reading of the rollback recommendation). `from_window`:
    over the review's materialized window (`decisions.materialized_window(wide=True)`)."""
    found: dict[str, dict[str, Any]] = {}

    def of(task_type: str) -> dict[str, Any]:
        return found.setdefault(task_type, {"cohorts": {}, "buckets": {}, "errors": [(0, 0), (0, 0)], "rollback": []})

    for r in dict_rows(client, COHORTS_SQL[from_window], chosen_parameters(window)):
        task_type, stage = r.pop("task_type"), r.pop("stage")
        of(task_type)["cohorts"][stage] = {k: int(v) for k, v in r.items()}
    strata = {**chosen_parameters(window), "inner_edges": list(DEFAULT_EDGES[1:-1])}
    for r in dict_rows(client, COHORT_STRATA_SQL[from_window], strata):
        cohort = of(r["task_type"])["cohorts"].setdefault(r["stage"], {})
        cohort.setdefault("false_fallback_strata", []).append((int(r["big"]), int(r["n"]), int(r["k"])))
    for r in dict_rows(
        client, SHADOW_BUCKETS_SQL[from_window], {**window.parameters(), "edges": list(INPUT_LENGTH_EDGES)}
    ):
        of(r["task_type"])["buckets"][INPUT_LENGTH_BUCKETS[r["bucket"]]] = (int(r["compared"]), int(r["agreed"]))
    for r in dict_rows(client, SHADOW_ERRORS_SQL[from_window], window.parameters()):
        of(r["task_type"])["errors"][int(bool(r["second_half"]))] = (int(r["attempts"]), int(r["errors"]))
    return found


# The weekly replay's determinism sample: per task type, up to `per_task` live requests of the window
# that the device could serve (they entered it) and that no earlier replay re-ran, in a seeded order.
DETERMINISM_SAMPLE_SQL = named(
    "determinism_sample",
    """
WITH $review_cte
SELECT request_id, task_type, event_time
FROM w
WHERE mode = 'live' AND entered_device
  AND request_id NOT IN (SELECT request_id FROM $replay_reruns)
ORDER BY task_type, cityHash64(request_id, {seed:UInt64})
LIMIT {per_task:UInt32} BY task_type
""",
    FRAGMENTS,
)

RERUN_COLUMNS = ("request_id", "task_type", "event_time", "runs", "agree", "answer_hashes", "device_model")


def determinism_sample(client, window: QueryWindow, per_task: int, seed: int = 0) -> list[tuple]:
    """(request_id, task_type, event_time) to re-run, up to `per_task` of each task type."""
    rows = client.query(DETERMINISM_SAMPLE_SQL, parameters={**window.parameters(), "per_task": per_task, "seed": seed})
    return [tuple(r) for r in rows.result_rows]


def store_reruns(client, rows: list[tuple]) -> int:
    """Insert determinism groups (RERUN_COLUMNS order); returns the rows written."""
    if rows:
        client.insert(names.TABLES[names.TABLE_REPLAY_RERUNS], rows, column_names=list(RERUN_COLUMNS))
    return len(rows)
