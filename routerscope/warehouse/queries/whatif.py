"""The what-if of docs/metrics.md §14: a window's own live traffic re-scored under candidate thresholds, in
one pass over the metric set's materialized window (`decisions.WINDOW_TABLE`, restricted to the task
types asked about), grouped by task type and candidate.

Each event is repeated once per candidate of its task type (ARRAY JOIN) plus once for `current` (the
candidate `CURRENT`, -1: no event moves), and every count is written once, for any candidate: an event
keeps its recorded outcome unless it *moves*. Only *gated* events can move (entered the device, a
confidence, the first L0 attempt answered, `ok` or `low_confidence`, not a PII pin):

* to the cloud: its L0 answer passed the gate (`ok`) and its confidence is below the candidate;
* to the device: its L0 answer was turned down (`low_confidence`), the request then left the device
  (its recorded fallback is not `none`) and its confidence is at or above the candidate.

A low-confidence L0 answer that the one L1 retry then served on the device (*rescued*) does not move to
the device under a looser candidate (it was device-served already). Under a stricter candidate than the
recorded threshold its route is unknown: the router judges the retry's answer against the threshold too,
and the event records only the first attempt's confidence. Such events count as `unknown` and are left out
of the candidate's device-served and missed-fallback figures (never counted as served).

The SQL returns counts and sums; `routerscope/warehouse/analytics/whatif.py` does the rates, the
intervals and the cost of the new fallbacks (their all-cloud cost, else the task type's mean cloud cost)."""

from __future__ import annotations

from typing import Any

from routerscope.contract.events import LABEL_SOURCE_OFFLINE_REPLAY
from routerscope.warehouse.queries.decisions import WINDOW_TABLE
from routerscope.warehouse.sql import QueryWindow, dict_rows, named

CURRENT = -1.0  # the candidate value that stands for the recorded outcomes (no event moves)

# The events of the asked task types, each repeated per candidate, with where each one goes under it.
_WHATIF_CTE = """
WITH j AS (
    SELECT *,
           if(has(attempt_levels, 0), attempt_outcomes[indexOf(attempt_levels, 0)], '') AS l0_outcome,
           entered_device AND confidence IS NOT NULL AND reason != 'pii_pin'
               AND l0_outcome IN ('ok', 'low_confidence') AS is_gated,
           entered_device AND fallback_type IN ('quality', 'timeout', 'error') AS fell_back,
           entered_device AND fallback_type = 'quality' AS quality_recorded,
           entered_device AND fallback_type = 'none' AND degrade_level IN (0, 1) AS served_recorded,
           is_gated AND l0_outcome = 'low_confidence' AND fallback_type = 'none' AND degrade_level = 1 AS rescued,
           labeled = 1 AS has_label
    FROM $window_table
    WHERE mode = 'live'
),
m AS (
    SELECT *,
           candidate,  -- (`*` leaves out the ARRAY JOIN's alias)
           candidate >= 0 AND is_gated AND l0_outcome = 'ok' AND confidence < candidate AS moves_to_cloud,
           candidate >= 0 AND is_gated AND l0_outcome = 'low_confidence' AND fallback_type != 'none'
               AND confidence >= candidate AS moves_to_device,
           candidate >= 0 AND rescued AND candidate > threshold AS unknown_x,
           -- an unknown route counts as a fallback (the pessimistic side for the fallback rate; docs/whatif.md)
           (fell_back AND NOT moves_to_device) OR moves_to_cloud OR unknown_x AS fallback_x,
           (quality_recorded AND NOT moves_to_device) OR moves_to_cloud AS quality_fallback_x,
           ((served_recorded AND NOT moves_to_cloud) OR moves_to_device) AND NOT unknown_x AS device_served_x
    FROM j
    ARRAY JOIN arrayPushFront(arrayFilter((v, t) -> t = task_type, {values:Array(Float64)}, {tasks:Array(String)}),
                              {current:Float64}) AS candidate
)
"""

WHATIF_SQL = named(
    "whatif_by_candidate",
    _WHATIF_CTE
    + """
SELECT
    task_type,
    candidate,
    count() AS requests,
    countIf(entered_device) AS device_entered,
    countIf(is_gated) AS gated,
    minIf(threshold, is_gated) AS threshold_min,
    maxIf(threshold, is_gated) AS threshold_max,
    countIf(fallback_x) AS fallbacks,
    countIf(quality_fallback_x) AS quality_fallbacks,
    countIf(quality_fallback_x AND has_label) AS false_fallback_labeled,
    countIf(quality_fallback_x AND has_label AND acceptable) AS false_fallbacks,
    countIf(device_served_x) AS device_served,
    countIf(device_served_x AND has_label) AS missed_fallback_labeled,
    countIf(device_served_x AND has_label AND NOT acceptable) AS missed_fallbacks,
    sum(if(moves_to_cloud, cloud_calls + 1, if(moves_to_device, 0, cloud_calls))) AS calls,
    sum(cost_usd) AS cost_recorded,
    countIf(cost_usd IS NOT NULL) AS cost_reported,
    sumIf(cost_usd, cloud_calls > 0) AS cloud_cost_sum,
    countIf(cloud_calls > 0 AND cost_usd IS NOT NULL) AS cloud_cost_n,
    sumIf(all_cloud_cost_usd, moves_to_cloud AND all_cloud_cost_usd IS NOT NULL) AS added_all_cloud,
    countIf(moves_to_cloud AND all_cloud_cost_usd IS NULL) AS added_unpriced,
    sumIf(ifNull(cost_usd, 0), moves_to_device) AS removed_cost,
    countIf(unknown_x) AS unknown,
    countIf(moves_to_cloud) AS to_cloud,
    countIf(moves_to_cloud AND has_label) AS to_cloud_labeled,
    countIf(moves_to_cloud AND has_label AND acceptable) AS to_cloud_passed,
    countIf(moves_to_device) AS to_device,
    countIf(moves_to_device AND has_label) AS to_device_labeled,
    countIf(moves_to_device AND has_label AND acceptable) AS to_device_passed
FROM m
GROUP BY task_type, candidate
ORDER BY task_type, candidate
""",
    window_table=WINDOW_TABLE,
)

# docs/metrics.md §3c for the candidate's own routes: per task type, candidate and confidence bucket (§6's edges,
# -1 for a null confidence), its quality fallbacks (`qf`: hit = acceptable) and device-served events (`mf`: hit =
# not acceptable) — N, labeled n, hits k — for the post-stratified estimates of the blocks.
WHATIF_STRATA_SQL = named(
    "whatif_strata",
    _WHATIF_CTE
    + """
SELECT
    task_type,
    candidate,
    if(confidence IS NULL, -1, arrayCount(e -> e <= confidence, {inner_edges:Array(Float64)})) AS bucket,
    countIf(quality_fallback_x) AS qf_N,
    countIf(quality_fallback_x AND has_label) AS qf_n,
    countIf(quality_fallback_x AND has_label AND acceptable) AS qf_k,
    countIf(device_served_x) AS mf_N,
    countIf(device_served_x AND has_label) AS mf_n,
    countIf(device_served_x AND has_label AND NOT acceptable) AS mf_k
FROM m
GROUP BY task_type, candidate, bucket
ORDER BY task_type, candidate, bucket
""",
    window_table=WINDOW_TABLE,
)


def by_candidate(client, candidates: dict[str, list[float]]) -> dict[str, dict[float | None, dict[str, Any]]]:
    """task_type → candidate (None: the recorded outcomes, `current`) → the counts and sums of WHATIF_SQL,
    over the materialized window (which holds the task types of `candidates` only)."""
    tasks = [t for t, values in candidates.items() for _ in values]
    values = [float(v) for vs in candidates.values() for v in vs]
    found: dict[str, dict[float | None, dict[str, Any]]] = {}
    for row in dict_rows(client, WHATIF_SQL, {"tasks": tasks, "values": values, "current": CURRENT}):
        candidate = float(row.pop("candidate"))
        found.setdefault(row.pop("task_type"), {})[None if candidate == CURRENT else candidate] = row
    return found


def strata(
    client, candidates: dict[str, list[float]], inner_edges: tuple[float, ...]
) -> dict[str, dict[float | None, dict[str, list[tuple[int, int, int]]]]]:
    """task_type → candidate (None: `current`) → measure (`qf`, `mf`) → [(N_h, n_h, k_h)] per confidence bucket:
    the strata of §3c over each candidate's own routes (materialized window, as `by_candidate`)."""
    tasks = [t for t, values in candidates.items() for _ in values]
    values = [float(v) for vs in candidates.values() for v in vs]
    parameters = {"tasks": tasks, "values": values, "current": CURRENT, "inner_edges": list(inner_edges)}
    found: dict[str, dict[float | None, dict[str, list[tuple[int, int, int]]]]] = {}
    for row in dict_rows(client, WHATIF_STRATA_SQL, parameters):
        candidate = float(row["candidate"])
        per = found.setdefault(row["task_type"], {}).setdefault(
            None if candidate == CURRENT else candidate, {"qf": [], "mf": []}
        )
        for m in ("qf", "mf"):
            per[m].append((int(row[f"{m}_N"]), int(row[f"{m}_n"]), int(row[f"{m}_k"])))
    return found


# docs/metrics.md §3d for the candidate's own routes: per task type, candidate and confidence bucket, the judge's
# verdicts and the people's corrections over its quality fallbacks (`ff`: hit = acceptable) and device-served
# events (`mf`: hit = not acceptable) — N, judged n, judged hits y, audited r, Σ(Y − Ŷ) d and Σ(Y − Ŷ)² d2 — as
# routerscope/warehouse/queries/ppi.py reads them for the metrics. It reads the materialized window (the asked task
# types only; its request ids join the labels) with the same routing as above, its chosen labels left out.
WHATIF_PPI_SQL = named(
    "whatif_ppi_strata",
    """
WITH w AS (SELECT * EXCEPT (labeled, acceptable, route_ok) FROM $window_table),
lab AS (
    SELECT request_id, source, device_acceptable, event_time, label_id
    FROM $labels
    WHERE device_acceptable IS NOT NULL AND source IN ({judge:String}, {human:String})
      AND cityHash64(request_id) IN (SELECT cityHash64(request_id) FROM w WHERE task_type IN {asked:Array(String)})
    LIMIT 1 BY label_id
),
per AS (
    SELECT request_id,
           countIf(source = {judge:String}) > 0 AS has_j,
           argMaxIf(device_acceptable, (event_time, label_id), source = {judge:String}) AS jv,
           countIf(source = {human:String}) > 0 AS has_h,
           argMaxIf(device_acceptable, (event_time, label_id), source = {human:String}) AS hv
    FROM lab GROUP BY request_id
),
ev AS (
    SELECT w.*, 0 AS labeled, CAST(NULL AS Nullable(Bool)) AS acceptable,
           ifNull(p.has_j, 0) = 1 AS hj, hj AND ifNull(p.has_h, 0) = 1 AS hh,
           toInt8(ifNull(p.jv, 0)) AS ja, toInt8(ifNull(p.hv, 0)) AS ha
    FROM w LEFT JOIN per AS p ON w.request_id = p.request_id
    WHERE w.task_type IN {asked:Array(String)}
),
"""
    + _WHATIF_CTE.strip().removeprefix("WITH ").replace("$window_table", "ev")
    + """
SELECT
    task_type,
    candidate,
    if(confidence IS NULL, -1, arrayCount(e -> e <= confidence, {inner_edges:Array(Float64)})) AS bucket,
    countIf(quality_fallback_x) AS ff_N, countIf(quality_fallback_x AND hj) AS ff_n,
    countIf(quality_fallback_x AND hj AND ja = 1) AS ff_y, countIf(quality_fallback_x AND hh) AS ff_r,
    sumIf(ha - ja, quality_fallback_x AND hh) AS ff_d, sumIf((ha - ja) * (ha - ja), quality_fallback_x AND hh) AS ff_d2,
    countIf(device_served_x) AS mf_N, countIf(device_served_x AND hj) AS mf_n,
    countIf(device_served_x AND hj AND ja = 0) AS mf_y, countIf(device_served_x AND hh) AS mf_r,
    sumIf(ja - ha, device_served_x AND hh) AS mf_d, sumIf((ja - ha) * (ja - ha), device_served_x AND hh) AS mf_d2
FROM m
GROUP BY task_type, candidate, bucket
ORDER BY task_type, candidate, bucket
""",
    {"window_table": WINDOW_TABLE},
)


def ppi_strata(
    client, window: QueryWindow, candidates: dict[str, list[float]], inner_edges: tuple[float, ...]
) -> dict[str, dict[float | None, dict[str, list[tuple[int, ...]]]]]:
    """task_type → candidate (None: `current`) → measure (`ff`, `mf`) → [(N, n, y, r, d, d2)] per confidence
    bucket: §3d's sums over each candidate's own routes (docs/metrics.md §3d, §14), over the materialized window
    of `window` (`decisions.materialized_window`, open on `client`)."""
    tasks = [t for t, values in candidates.items() for _ in values]
    values = [float(v) for vs in candidates.values() for v in vs]
    parameters = {
        **window.parameters(),
        "tasks": tasks,
        "values": values,
        "current": CURRENT,
        "inner_edges": list(inner_edges),
        "asked": sorted(candidates),
        "judge": LABEL_SOURCE_OFFLINE_REPLAY,
        "human": "human_review",
    }
    found: dict[str, dict[float | None, dict[str, list[tuple[int, ...]]]]] = {}
    for row in dict_rows(client, WHATIF_PPI_SQL, parameters):
        candidate = float(row["candidate"])
        per = found.setdefault(row["task_type"], {}).setdefault(
            None if candidate == CURRENT else candidate, {"ff": [], "mf": []}
        )
        for m in ("ff", "mf"):
            per[m].append(tuple(int(row[f"{m}_{k}"]) for k in ("N", "n", "y", "r", "d", "d2")))
    return found
