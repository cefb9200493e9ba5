"""The what-if of docs/metrics.md §14: a window's own live traffic re-scored under candidate thresholds, in
one pass over the metric set's materialized window (`decisions.WINDOW_TABLE`, restricted to the task
types asked about), whatever the number of candidates.

Every count is written once, for any candidate: an event keeps its recorded outcome unless it *moves*. Only
*gated* events can move (entered the device, a confidence, the first L0 attempt answered, `ok` or
`low_confidence`, not a PII pin):

* to the cloud: its L0 answer passed the gate (`ok`) and its confidence is below the candidate;
* to the device: its L0 answer was turned down (`low_confidence`), the request then left the device
  (its recorded fallback is not `none`) and its confidence is at or above the candidate.

A low-confidence L0 answer that the one L1 retry then served on the device (*rescued*) does not move to
the device under a looser candidate (it was device-served already). Under a stricter candidate than the
recorded threshold its route is unknown: the router judges the retry's answer against the threshold too,
and the event records only the first attempt's confidence. Such events count as `unknown` and are left out
of the candidate's device-served and missed-fallback figures (never counted as served).

How one pass serves every candidate: an event can make one kind of move only (`kind`: 1 to the cloud, 2 to the
device, 3 unknown; 0 none), and whether it makes it under a candidate turns on a single comparison with one
value of its own (its confidence; the recorded threshold for a rescued one). With a task type's candidates
sorted, `k`, the number of them at or below that value, says under which ones it moves: kinds 1 and 3 under the
candidates from the `k`-th on (the candidate above the value), kind 2 under the first `k` (at or below it). Each
movable event is counted twice, as it stays (`state` 0) and as it moves (`state` 1), grouped by (kind, k, state);
`combine` adds up each candidate's totals from those groups in Python. `current` (the recorded outcomes) is
every event as it stays. Before, every event was repeated once per candidate, 102 times for the tuning
page's slider.

The SQL returns counts and sums; `routerscope/warehouse/analytics/whatif.py` does the rates, the
intervals and the cost of the new fallbacks (their all-cloud cost, else the task type's mean cloud cost)."""

from __future__ import annotations

import bisect
from typing import Any

from routerscope.contract.events import LABEL_SOURCE_OFFLINE_REPLAY
from routerscope.warehouse.queries.decisions import WINDOW_TABLE
from routerscope.warehouse.sql import QueryWindow, dict_rows, named

# The events of the asked task types with the move each can make (`kind`) and the position of its breakpoint among
# every asked candidate (`k`, over {grid}: `parameters`); then each movable
# event as it stays and as it moves (`$states`, `$moved`: `routes` spells them per statement).
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
           labeled = 1 AS has_label,
           toUInt8(multiIf(
               is_gated AND l0_outcome = 'ok', 1,
               is_gated AND l0_outcome = 'low_confidence' AND fallback_type != 'none', 2,
               rescued AND threshold IS NOT NULL, 3,
               0)) AS kind,
           if(kind = 3, assumeNotNull(threshold), assumeNotNull(confidence)) AS breakpoint,
           -- to the cloud under X when confidence < X, i.e. not X <= confidence; to the device when X <= confidence;
           -- unknown when X > threshold: the same comparisons as one candidate at a time. `k` counts the grid's
           -- values at or below the breakpoint (a binary search: roundDown gives the greatest, indexOf its place)
           if(kind = 0 OR breakpoint < {grid:Array(Float64)}[1], 0,
              indexOf({grid:Array(Float64)}, roundDown(breakpoint, {grid:Array(Float64)}))) AS k
    FROM $window_table
    WHERE mode = 'live'
),
m AS (
    SELECT *,
           state,  -- (`*` leaves out the ARRAY JOIN's alias)
           $moved AS moved,
           moved AND kind = 1 AS moves_to_cloud,
           moved AND kind = 2 AS moves_to_device,
           moved AND kind = 3 AS unknown_x,
           -- an unknown route counts as a fallback (the pessimistic side for the fallback rate; docs/whatif.md)
           (fell_back AND NOT moves_to_device) OR moves_to_cloud OR unknown_x AS fallback_x,
           (quality_recorded AND NOT moves_to_device) OR moves_to_cloud AS quality_fallback_x,
           ((served_recorded AND NOT moves_to_cloud) OR moves_to_device) AND NOT unknown_x AS device_served_x
    FROM j
    ARRAY JOIN $states AS state
)
"""
# every candidate at once: each movable event as it stays (state 0) and as it moves (state 1), grouped by (kind, k)
_ALL_CANDIDATES = {"states": "if(kind = 0, [0], [0, 1])", "moved": "state = 1"}


def routes(states: str, moved: str) -> str:
    """`_WHATIF_CTE` with `$states` (the ARRAY JOIN's states of each event) and `$moved` (whether it moves in one)."""
    return _WHATIF_CTE.replace("$states", states).replace("$moved", moved)


WHATIF_SQL = named(
    "whatif_by_candidate",
    routes(**_ALL_CANDIDATES)
    + """
SELECT
    task_type,
    kind,
    k,
    state,
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
GROUP BY task_type, kind, k, state
""",
    window_table=WINDOW_TABLE,
)

# docs/metrics.md §3c for the candidate's own routes: per task type, candidate and confidence bucket (§6's edges,
# -1 for a null confidence), its quality fallbacks (`qf`: hit = acceptable) and device-served events (`mf`: hit =
# not acceptable) — N, labeled n, hits k — for the post-stratified estimates of the blocks.
WHATIF_STRATA_SQL = named(
    "whatif_strata",
    routes(**_ALL_CANDIDATES)
    + """
SELECT
    task_type,
    kind,
    k,
    state,
    if(confidence IS NULL, -1, arrayCount(e -> e <= confidence, {inner_edges:Array(Float64)})) AS bucket,
    countIf(quality_fallback_x) AS qf_N,
    countIf(quality_fallback_x AND has_label) AS qf_n,
    countIf(quality_fallback_x AND has_label AND acceptable) AS qf_k,
    countIf(device_served_x) AS mf_N,
    countIf(device_served_x AND has_label) AS mf_n,
    countIf(device_served_x AND has_label AND NOT acceptable) AS mf_k
FROM m
GROUP BY task_type, kind, k, state, bucket
""",
    window_table=WINDOW_TABLE,
)


def sorted_candidates(candidates: dict[str, list[float]]) -> dict[str, list[float]]:
    """task type → its candidates as floats, sorted and distinct (the order `k` counts in)."""
    return {t: sorted({float(v) for v in values}) for t, values in candidates.items()}


def parameters(candidates: dict[str, list[float]]) -> dict[str, Any]:
    """The statements' {grid}: every task type's candidates together, sorted and distinct (`combine` maps a
    position in it to each task type's own `k`)."""
    grid = sorted({float(v) for values in candidates.values() for v in values})
    if not grid:
        raise ValueError("no candidate threshold to re-score")
    return {"grid": grid}


_NOT_SUMMED = {"threshold_min": min, "threshold_max": max}  # the recorded thresholds: one value for every candidate


def combine(
    rows: list[dict[str, Any]], candidates: dict[str, list[float]], by: str | None = None
) -> dict[str, dict[float | None, dict[Any, dict[str, Any]]]]:
    """Each candidate's totals from the (task type, kind, k, state[, `by`]) groups of a statement over `routes`:
    task type → candidate (None: `current`) → the `by` column's value (None without one) → column → total.
    `current` is every event as it stays. A candidate's totals are `current`'s plus, per group of events that move
    under it, what moving changes (the group's state-1 sums less its state-0 sums). NULL sums add as 0; the
    recorded thresholds are the least and greatest over the groups holding gated events."""
    ordered = sorted_candidates(candidates)
    grid = parameters(candidates)["grid"]
    groups: dict[str, dict[Any, dict[tuple[int, int], list[dict | None]]]] = {}
    for row in rows:
        task = row.pop("task_type")
        kind, g, state = (int(row.pop(key)) for key in ("kind", "k", "state"))
        # the grid's values at or below the breakpoint → the task type's own candidates at or below it
        k = bisect.bisect_right(ordered.get(task, []), grid[g - 1]) if g else 0
        by_group = groups.setdefault(task, {}).setdefault(row.pop(by) if by else None, {})
        pair = by_group.setdefault((kind, k), [None, None])
        # (two grid positions can be one position among the task type's candidates: their groups add up)
        earlier = pair[state]
        pair[state] = row if earlier is None else _totals([earlier, row])
    found: dict[str, dict[float | None, dict[Any, dict[str, Any]]]] = {}
    for task, per_key in groups.items():
        values = ordered.get(task, [])
        out = found.setdefault(task, {None: {}, **{v: {} for v in values}})
        for key, pairs in sorted(per_key.items(), key=lambda kv: (kv[0] is None, kv[0])):
            # every event is counted as it stays; a movable one also as it moves
            stays = [stay for stay, _ in pairs.values() if stay is not None]
            current = _totals(stays)
            out[None][key] = current
            # per candidate position: the change each group's move makes, added where it moves
            steps: list[dict[str, float]] = [{} for _ in range(len(values) + 1)]
            for (kind, k), (stay, move) in pairs.items():
                if stay is None or move is None or kind == 0:
                    continue
                change = {c: _num(move[c]) - _num(stay[c]) for c in move if c not in _NOT_SUMMED}
                # kinds 1 and 3 move under candidates k.. (add from k on), kind 2 under 0..k-1 (add at 0, take off at k)
                for c, d in change.items():
                    if kind == 2:
                        steps[0][c] = steps[0].get(c, 0) + d
                        steps[k][c] = steps[k].get(c, 0) - d
                    else:
                        steps[k][c] = steps[k].get(c, 0) + d
            running: dict[str, float] = {}
            for i, x in enumerate(values):
                for c, d in steps[i].items():
                    running[c] = running.get(c, 0) + d
                out[x][key] = {c: (v if c in _NOT_SUMMED else _num(v) + running.get(c, 0)) for c, v in current.items()}
    return found


def _num(value) -> float:
    return 0 if value is None else value


def _totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The columns of `rows` summed (NULL as 0), the recorded thresholds as their least and greatest."""
    out: dict[str, Any] = {}
    gated = [r for r in rows if int(r.get("gated") or 0)]
    for c in rows[0]:
        if c in _NOT_SUMMED:
            seen = [r[c] for r in gated if r[c] is not None]
            out[c] = _NOT_SUMMED[c](seen) if seen else None
        else:
            out[c] = sum(_num(r[c]) for r in rows)
    return out


def by_candidate(client, candidates: dict[str, list[float]]) -> dict[str, dict[float | None, dict[str, Any]]]:
    """task_type → candidate (None: the recorded outcomes, `current`) → the counts and sums of WHATIF_SQL,
    over the materialized window (which holds the task types of `candidates` only)."""
    combined = combine(dict_rows(client, WHATIF_SQL, parameters(candidates)), candidates)
    return {task: {x: per[None] for x, per in by_x.items()} for task, by_x in combined.items()}


def strata(
    client, candidates: dict[str, list[float]], inner_edges: tuple[float, ...]
) -> dict[str, dict[float | None, dict[str, list[tuple[int, int, int]]]]]:
    """task_type → candidate (None: `current`) → measure (`qf`, `mf`) → [(N_h, n_h, k_h)] per confidence bucket:
    the strata of §3c over each candidate's own routes (materialized window, as `by_candidate`)."""
    bound = {**parameters(candidates), "inner_edges": list(inner_edges)}
    combined = combine(dict_rows(client, WHATIF_STRATA_SQL, bound), candidates, by="bucket")
    return {
        task: {
            x: {m: [(int(r[f"{m}_N"]), int(r[f"{m}_n"]), int(r[f"{m}_k"])) for r in per.values()] for m in ("qf", "mf")}
            for x, per in by_x.items()
        }
        for task, by_x in combined.items()
    }


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
    + routes(**_ALL_CANDIDATES).strip().removeprefix("WITH ").replace("$window_table", "ev")
    + """
SELECT
    task_type,
    kind,
    k,
    state,
    if(confidence IS NULL, -1, arrayCount(e -> e <= confidence, {inner_edges:Array(Float64)})) AS bucket,
    countIf(quality_fallback_x) AS ff_N, countIf(quality_fallback_x AND hj) AS ff_n,
    countIf(quality_fallback_x AND hj AND ja = 1) AS ff_y, countIf(quality_fallback_x AND hh) AS ff_r,
    sumIf(ha - ja, quality_fallback_x AND hh) AS ff_d, sumIf((ha - ja) * (ha - ja), quality_fallback_x AND hh) AS ff_d2,
    countIf(device_served_x) AS mf_N, countIf(device_served_x AND hj) AS mf_n,
    countIf(device_served_x AND hj AND ja = 0) AS mf_y, countIf(device_served_x AND hh) AS mf_r,
    sumIf(ja - ha, device_served_x AND hh) AS mf_d, sumIf((ja - ha) * (ja - ha), device_served_x AND hh) AS mf_d2
FROM m
GROUP BY task_type, kind, k, state, bucket
""",
    {"window_table": WINDOW_TABLE},
)


def ppi_strata(
    client, window: QueryWindow, candidates: dict[str, list[float]], inner_edges: tuple[float, ...]
) -> dict[str, dict[float | None, dict[str, list[tuple[int, ...]]]]]:
    """task_type → candidate (None: `current`) → measure (`ff`, `mf`) → [(N, n, y, r, d, d2)] per confidence
    bucket: §3d's sums over each candidate's own routes (docs/metrics.md §3d, §14), over the materialized window
    of `window` (`decisions.materialized_window`, open on `client`)."""
    bound = {
        **window.parameters(),
        **parameters(candidates),
        "inner_edges": list(inner_edges),
        "asked": sorted(candidates),
        "judge": LABEL_SOURCE_OFFLINE_REPLAY,
        "human": "human_review",
    }
    combined = combine(dict_rows(client, WHATIF_PPI_SQL, bound), candidates, by="bucket")
    parts = ("N", "n", "y", "r", "d", "d2")
    return {
        task: {
            x: {m: [tuple(int(r[f"{m}_{p}"]) for p in parts) for r in per.values()] for m in ("ff", "mf")}
            for x, per in by_x.items()
        }
        for task, by_x in combined.items()
    }
