"""Queries over `labels`: the one chosen label per request, and calibration (docs/metrics.md §3, §6).

Every value is a bound `{name:Type}` parameter; the SQL text is constant."""

from __future__ import annotations

from dataclasses import dataclass

from routerscope.contract.events import LABEL_SOURCE_OFFLINE_REPLAY, LABEL_SOURCES
from routerscope.core.timeutil import utc
from routerscope.warehouse.sql import WINDOW_CTE, QueryWindow, dict_rows, named, utc_text

# One label per request: the highest-ranked source, the latest event_time within it; labels with a
# null device_acceptable are never chosen. Duplicated label events count once (label_id).
# argMax over a tuple keeps a null route_correct of the chosen label (a bare argMax would skip it).
# A source's rank comes from its position in the bound `label_sources` (LABEL_SOURCES, docs/metrics.md §3
# precedence, highest first): the first ranks highest, an unknown source 0. Queries with this CTE take
# their parameters from `chosen_parameters`.
# Only labels of requests in the window are read: the filter compares 64-bit hashes of request_id,
# measured ~20 % cheaper than a set of the window's id strings; a hash collision only lets an extra
# label through, whose request then matches no event of the window in the exact join on request_id
# that every user of `chosen` makes, so the numbers are the same.
_CHOSEN_LABELS = """
chosen AS (
    SELECT
        request_id,
        argMax(tuple(device_acceptable, route_correct), (rank, event_time, label_id)) AS picked,
        tupleElement(picked, 1) AS acceptable,
        tupleElement(picked, 2) AS route_ok,
        1 AS labeled
    FROM (
        SELECT request_id, device_acceptable, route_correct, event_time, label_id,
               transform(source, {label_sources:Array(String)},
                         arrayReverse(arrayEnumerate({label_sources:Array(String)})), 0) AS rank
        FROM $labels
        WHERE device_acceptable IS NOT NULL AND cityHash64(request_id) IN (
            SELECT cityHash64(request_id) FROM @ids)
        LIMIT 1 BY label_id
    )
    GROUP BY request_id
)"""


def label_source_parameters() -> dict:
    """The bound precedence list the chosen-label CTEs rank sources by."""
    return {"label_sources": list(LABEL_SOURCES)}


def chosen_parameters(window: QueryWindow) -> dict:
    """The bound parameters of a query over the window that uses CHOSEN_LABELS_CTE."""
    return {**window.parameters(), **label_source_parameters()}


CHOSEN_LABELS_CTE = _CHOSEN_LABELS.replace(
    "@ids", "$decisions WHERE event_time >= {start:DateTime64(3, 'UTC')} AND event_time < {end:DateTime64(3, 'UTC')}"
)


def chosen_labels_of(events_table: str, fewer_labels: bool = False) -> str:
    """CHOSEN_LABELS_CTE for the requests of an already materialized window (a table with request_id).

    `fewer_labels`: the same labels, found the other way round for a window with more events than there are
    labels. The filter's set is built in one thread from its subquery's rows, so it is built from the smaller
    side: the hashes of the labeled requests, which the window's events are then looked up in (on every thread),
    leaving a set of the window's labeled requests alone. On the bench's day (1.25M events, 200k labels)
    0.05-0.06 s against 0.08-0.09 s (docs/benchmarks.md); with fewer events than labels (a 5-minute window, or
    labels kept far longer than the window) the window's own set is the smaller one."""
    if not fewer_labels:
        return _CHOSEN_LABELS.replace("@ids", events_table)
    # `events_table` is one of this module's table expressions, never a value: values are bound parameters
    labeled = (
        "(SELECT h FROM (SELECT cityHash64(request_id) AS h FROM " + events_table + ") WHERE h IN ("
        "SELECT cityHash64(request_id) FROM $labels WHERE device_acceptable IS NOT NULL))"
    )
    return _CHOSEN_LABELS.replace("SELECT cityHash64(request_id) FROM @ids", "SELECT h FROM " + labeled)


DEFAULT_EDGES = (0.0, 0.45, 0.65, 0.85, 1.0)
THRESHOLD_GRID = tuple(round(k * 0.05, 2) for k in range(21))

# Constant pieces of the statements below (named() puts them in before it spells the tables).
FRAGMENTS = {"window_cte": WINDOW_CTE, "chosen_labels_cte": CHOSEN_LABELS_CTE}

_CALIBRATED = """
WITH $window_cte,
$chosen_labels_cte,
cal AS (
    SELECT w.task_type AS task_type, w.confidence AS confidence, w.threshold AS threshold,
           c.acceptable AS acceptable
    FROM w INNER JOIN chosen AS c ON w.request_id = c.request_id
    WHERE w.mode = 'live' AND w.entered_device AND w.confidence IS NOT NULL AND c.acceptable IS NOT NULL
)
"""

# The same labeled device attempts, read from the metric set's materialized window (decisions'
# `WINDOW_TABLE`: the window's events with their chosen label's columns; acceptable is NULL without one).
_CALIBRATED_FROM_WINDOW = """
WITH cal AS (
    SELECT task_type, confidence, threshold, acceptable
    FROM $window
    WHERE mode = 'live' AND entered_device AND confidence IS NOT NULL AND acceptable IS NOT NULL
)
"""

# One pass per task type: bucket counts, counts at or above each threshold grid point, and the most
# frequent current threshold (ties: the higher one). Inner grouping by threshold keeps the mode exact.
_CALIBRATION_SELECT = """
SELECT task_type,
       sumForEach(bucket_n) AS bucket_n, sumForEach(bucket_passed) AS bucket_passed,
       sumForEach(grid_n) AS grid_n, sumForEach(grid_passed) AS grid_passed,
       argMax(threshold, tuple(n, threshold)) AS current_threshold,
       min(lowest) AS min_confidence
FROM (
    SELECT task_type, threshold, count() AS n, min(confidence) AS lowest,
           sumForEach(arrayMap(i -> toUInt64(bucket = i), range({buckets:UInt8}))) AS bucket_n,
           sumForEach(arrayMap(i -> toUInt64(bucket = i AND acceptable), range({buckets:UInt8}))) AS bucket_passed,
           sumForEach(arrayMap(c -> toUInt64(confidence >= c), {grid:Array(Float64)})) AS grid_n,
           sumForEach(arrayMap(c -> toUInt64(confidence >= c AND acceptable), {grid:Array(Float64)})) AS grid_passed
    FROM (SELECT *, arrayCount(e -> e <= confidence, {inner_edges:Array(Float64)}) AS bucket FROM cal)
    GROUP BY task_type, threshold
)
GROUP BY task_type
ORDER BY task_type
"""

CALIBRATION_SQL = named("calibration", _CALIBRATED + _CALIBRATION_SELECT, FRAGMENTS)


def calibration_from_window_sql(window_table: str) -> str:
    """CALIBRATION_SQL over a materialized window (the metric set's temporary table)."""
    return named("calibration_from_window", _CALIBRATED_FROM_WINDOW + _CALIBRATION_SELECT, window=window_table)


@dataclass(frozen=True)
class Calibration:
    task_type: str
    bucket_n: list[int]
    bucket_passed: list[int]
    grid: list[tuple[float, int, int]]  # (c, events with confidence >= c, of which acceptable)
    current_threshold: float | None
    min_confidence: float | None = None  # the smallest labeled confidence (docs/metrics.md §6 evidence floor)


def calibration(
    client, window: QueryWindow, edges=DEFAULT_EDGES, grid=THRESHOLD_GRID, window_table: str | None = None
) -> list[Calibration]:
    """Per task type with labeled device attempts: the counts behind docs/metrics.md §6. With `window_table`,
    read from that materialized window (decisions.materialized_window) instead of `decisions`."""
    sql = CALIBRATION_SQL if window_table is None else calibration_from_window_sql(window_table)
    parameters = {
        **chosen_parameters(window),
        "inner_edges": list(edges[1:-1]),
        "buckets": len(edges) - 1,
        "grid": list(grid),
    }
    found = []
    for task_type, bucket_n, bucket_passed, grid_n, grid_passed, current, lowest in client.query(
        sql, parameters=parameters
    ).result_rows:
        found.append(
            Calibration(
                task_type=task_type,
                bucket_n=[int(x) for x in bucket_n],
                bucket_passed=[int(x) for x in bucket_passed],
                grid=[(c, int(n), int(p)) for c, n, p in zip(grid, grid_n, grid_passed)],
                current_threshold=None if current is None else float(current),
                min_confidence=None if lowest is None else float(lowest),
            )
        )
    return found


# docs/metrics.md §6 `local_pass_rate`: per task type, the labeled device attempts grouped by confidence (a
# block per distinct value: its events and how many passed), ascending: the input of the
# pool-adjacent-violators fit (`routerscope.warehouse.analytics.stats.isotonic_blocks`). Read from the materialized
# window.
_CONFIDENCE_BLOCKS_SELECT = """
SELECT task_type, confidence, count() AS n, countIf(acceptable) AS passed
FROM cal
GROUP BY task_type, confidence
ORDER BY task_type, confidence
"""


def confidence_blocks(client, window_table: str) -> dict[str, list[tuple[float, int, int]]]:
    """task type → [(confidence, labeled events, of which acceptable)], confidence ascending, from the
    metric set's materialized window (the same labeled device attempts as `calibration`)."""
    sql = named("confidence_blocks", _CALIBRATED_FROM_WINDOW + _CONFIDENCE_BLOCKS_SELECT, window=window_table)
    found: dict[str, list[tuple[float, int, int]]] = {}
    for task_type, confidence, n, passed in client.query(sql).result_rows:
        found.setdefault(task_type, []).append((float(confidence), int(n), int(passed)))
    return found


# §3c for §6: the population the device would serve at each threshold grid point c — device-entered live events with
# a confidence >= c, labeled or not — per task type and confidence bucket (the strata), with those labeled (n) and
# acceptable (k) among them: the post-stratified pass rate of what a threshold serves, beside §6's labeled one.
# Read from the materialized window (acceptable is NULL without a chosen label). The events are first counted per
# distinct confidence, and each count placed once at its grid step `g` (how many grid points are <= the confidence:
# it is >= c for exactly the first g points of the ascending grid); `served_strata` adds the steps up from the top.
# Measured 0.02-0.05 s for a day of 10M decisions, the same counts as the sums over `confidence >= c` of three
# 21-element arrays per event it replaces (0.72-1.04 s, most of the metric set's time then).
_SERVED_STRATA = """
SELECT task_type, arrayCount(e -> e <= confidence, {inner_edges:Array(Float64)}) AS bucket,
       arrayCount(c -> c <= confidence, {grid:Array(Float64)}) AS g,
       sum(events) AS big, sum(labeled) AS n, sum(passed) AS k
FROM (
    SELECT task_type, confidence, count() AS events, countIf(acceptable IS NOT NULL) AS labeled,
           countIf(ifNull(acceptable, false)) AS passed
    FROM $window
    WHERE mode = 'live' AND entered_device AND confidence IS NOT NULL
    GROUP BY task_type, confidence
)
GROUP BY task_type, bucket, g
ORDER BY task_type, bucket, g
"""


def served_strata(
    client, window_table: str, edges=DEFAULT_EDGES, grid=THRESHOLD_GRID
) -> dict[str, list[list[tuple[int, int, int]]]]:
    """task type → per grid point (the order of `grid`, ascending) → [(N_h, n_h, k_h)] per confidence bucket of
    `edges`: the device-entered events with confidence >= c, those labeled, those acceptable (docs/metrics.md §3c
    over §6)."""
    if list(grid) != sorted(grid):
        raise ValueError(f"the threshold grid must be ascending: {grid!r}")
    sql = named("served_strata", _SERVED_STRATA, window=window_table)
    parameters = {"grid": list(grid), "inner_edges": list(edges[1:-1])}
    # (task type, bucket) → per step g (0..len(grid)): events, labeled, acceptable
    steps: dict[str, dict[int, list[list[int]]]] = {}
    for task_type, bucket, g, big, n, k in client.query(sql, parameters=parameters).result_rows:
        per_step = steps.setdefault(task_type, {}).setdefault(int(bucket), [[0, 0, 0] for _ in range(len(grid) + 1)])
        per_step[int(g)] = [int(big), int(n), int(k)]
    found: dict[str, list[list[tuple[int, int, int]]]] = {}
    for task_type, buckets in steps.items():
        per = found.setdefault(task_type, [[] for _ in grid])
        for _, per_step in sorted(buckets.items()):
            big = n = k = 0
            for i in range(len(grid), 0, -1):  # grid point i-1 serves the events at steps i and above
                big, n, k = big + per_step[i][0], n + per_step[i][1], k + per_step[i][2]
                per[i - 1].append((big, n, k))
    return found


# The offline replay's sample: judged fallbacks (docs/metrics.md §3: live, entered the device, quality or
# timeout) in the window that no offline replay has labeled yet, **per stratum** — task type × confidence
# bucket (§6's edges, -1 for a null confidence), the strata §3c post-stratifies on — up to `limit` of each, in
# a seeded pseudo-random order within the stratum (the same seed gives the same sample), with the stratum's size
# among the unreplayed fallbacks. Sampling every stratum, rather than the fallbacks at large, is what lets each
# stratum's labels stand for it (`routerscope.router.replay.allocate` spreads the run's sample over them).
REPLAY_SAMPLE_SQL = named(
    "replay_sample",
    """
WITH $window_cte
SELECT request_id, task_type, fallback_type,
       if(confidence IS NULL, -1, arrayCount(e -> e <= confidence, {inner_edges:Array(Float64)})) AS bucket,
       count() OVER (PARTITION BY task_type, bucket) AS stratum_size
FROM w
WHERE mode = 'live' AND entered_device AND fallback_type IN ('quality', 'timeout')
  AND request_id NOT IN (SELECT request_id FROM $labels WHERE source = {replay_source:String})
ORDER BY task_type, bucket, cityHash64(request_id, {seed:UInt64})
LIMIT {limit:UInt32} BY task_type, bucket
""",
    FRAGMENTS,
)


def replay_sample(
    client, window: QueryWindow, limit: int, seed: int = 0, edges: tuple[float, ...] = DEFAULT_EDGES
) -> list[tuple[str, str, str, int, int]]:
    """Up to `limit` per stratum of unreplayed judged fallbacks: (request_id, task_type, fallback_type, bucket,
    the stratum's unreplayed fallbacks), strata in order (task type, then bucket; -1 a null confidence)."""
    result = client.query(
        REPLAY_SAMPLE_SQL,
        parameters={
            **window.parameters(),
            "limit": limit,
            "seed": seed,
            "replay_source": LABEL_SOURCE_OFFLINE_REPLAY,
            "inner_edges": list(edges[1:-1]),
        },
    )
    return [(rid, task, fb, int(bucket), int(size)) for rid, task, fb, bucket, size in result.result_rows]


# Labels as of their arrival (docs/metrics.md "Labels as of their arrival"): the label-dependent numbers of
# each window of a grain, counting only the labels whose own event_time is at or before `as_of` (the alert
# evaluation's time), the chosen label (§3) picked among those. One pass over the windows an alert rule reads,
# per task type × confidence bucket (§3c's strata; `labels_as_of` adds them up overall). Decisions are folded by
# FINAL (an exact re-delivery counts once).
_ARRIVED_LABELS = _CHOSEN_LABELS.replace(
    "WHERE device_acceptable IS NOT NULL AND",
    "WHERE device_acceptable IS NOT NULL AND event_time <= {as_of:DateTime64(3, 'UTC')} AND",
).replace("@ids", "w")
assert _ARRIVED_LABELS != _CHOSEN_LABELS.replace("@ids", "w")  # the cut-off is in
LABELS_AS_OF_SQL = named(
    "labels_as_of",
    """
WITH w AS (
    SELECT task_type, request_id, entered_device, fallback_type, degrade_level,
           if(confidence IS NULL, -1, arrayCount(e -> e <= confidence, {inner_edges:Array(Float64)})) AS bucket,
           toStartOfInterval(event_time, toIntervalSecond({step:UInt32})) AS start
    FROM $decisions FINAL
    WHERE event_time >= {since:DateTime64(3, 'UTC')} AND event_time < {until:DateTime64(3, 'UTC')}
      AND mode = 'live'
),
"""
    + _ARRIVED_LABELS
    + """,
-- docs/metrics.md §3d as of arrival: the judge's and a person's route verdicts side by side (the newest of each)
judged AS (
    SELECT request_id,
           countIf(source = {judge:String}) > 0 AS has_j,
           tupleElement(argMaxIf(tuple(route_correct), (event_time, label_id), source = {judge:String}), 1) AS jr,
           countIf(source = {human:String}) > 0 AS has_h,
           tupleElement(argMaxIf(tuple(route_correct), (event_time, label_id), source = {human:String}), 1) AS hr
    FROM (
        SELECT request_id, source, route_correct, event_time, label_id FROM $labels
        WHERE device_acceptable IS NOT NULL AND event_time <= {as_of:DateTime64(3, 'UTC')}
          AND source IN ({judge:String}, {human:String})
          AND cityHash64(request_id) IN (SELECT cityHash64(request_id) FROM w)
        LIMIT 1 BY label_id
    )
    GROUP BY request_id
),
j AS (
    SELECT w.task_type AS task_type, w.start AS start, w.bucket AS bucket, c.labeled AS labeled,
           c.acceptable AS acceptable, c.route_ok AS route_ok,
           entered_device AND fallback_type IN ('quality', 'timeout') AS judged_fallback,
           entered_device AND fallback_type = 'quality' AS quality_fallback,
           entered_device AND fallback_type = 'none' AND degrade_level IN (0, 1) AS device_served,
           ifNull(d.has_j, 0) = 1 AND d.jr IS NOT NULL AS hjr,
           hjr AND ifNull(d.has_h, 0) = 1 AND d.hr IS NOT NULL AS hhr,
           toInt8(ifNull(d.jr, 0)) AS jv, toInt8(ifNull(d.hr, 0)) AS hv
    FROM w LEFT JOIN chosen AS c ON w.request_id = c.request_id
    LEFT JOIN judged AS d ON w.request_id = d.request_id
)
SELECT task_type, start, bucket,
       count() AS ra_N, countIf(route_ok IS NOT NULL) AS ra_n, countIf(route_ok) AS ra_k,
       countIf(judged_fallback) AS ff_N, countIf(judged_fallback AND labeled = 1) AS ff_n,
       countIf(judged_fallback AND labeled = 1 AND acceptable) AS ff_k,
       countIf(quality_fallback) AS qf_N, countIf(quality_fallback AND labeled = 1) AS qf_n,
       countIf(quality_fallback AND labeled = 1 AND acceptable) AS qf_k,
       countIf(device_served) AS mf_N, countIf(device_served AND labeled = 1) AS mf_n,
       countIf(device_served AND labeled = 1 AND NOT acceptable) AS mf_k,
       countIf(hjr) AS rp_n, countIf(hjr AND jv = 1) AS rp_y, countIf(hhr) AS rp_r,
       sumIf(hv - jv, hhr) AS rp_d, sumIf((hv - jv) * (hv - jv), hhr) AS rp_d2
FROM j
GROUP BY task_type, start, bucket
ORDER BY task_type, start, bucket
""",
)
# The measures of LABELS_AS_OF_SQL (docs/metrics.md §3c's populations): `ra` every live event (hit: the route was
# right; its labeled n is `route_labeled`), `ff` the judged fallbacks (hit: acceptable), `qf` the quality fallbacks
# alone, `mf` the device-served (hit: not acceptable).
AS_OF_MEASURES = ("ra", "ff", "qf", "mf")


def labels_as_of(
    client, step_s: int, since, until, as_of, edges: tuple[float, ...] = DEFAULT_EDGES
) -> dict[tuple[str, object], dict[str, list[tuple[int, ...]]]]:
    """(task_type, window start) → measure (AS_OF_MEASURES) → [(N_h, n_h, k_h)] per stratum (confidence bucket of
    `edges`, null confidence its own; overall, under task type '', every task type × bucket) of each window of
    `step_s` seconds starting in [since, until), counting only labels that had arrived by `as_of`; and `ra_ppi`:
    §3d's sums for route accuracy per stratum, (N_h, n_h, Σ Ŷ, r_h, Σ(Y − Ŷ), Σ(Y − Ŷ)²), as of the same time."""

    parameters = {
        "step": int(step_s),
        "since": utc_text(since),
        "until": utc_text(until),
        "as_of": utc_text(as_of),
        "inner_edges": list(edges[1:-1]),
        "judge": LABEL_SOURCE_OFFLINE_REPLAY,
        "human": "human_review",
        **label_source_parameters(),
    }
    found: dict[tuple[str, object], dict[str, list[tuple[int, ...]]]] = {}
    for row in dict_rows(client, LABELS_AS_OF_SQL, parameters):
        start = utc(row["start"])
        for key in ((row["task_type"], start), ("", start)):
            per = found.setdefault(key, {m: [] for m in (*AS_OF_MEASURES, "ra_ppi")})
            for m in AS_OF_MEASURES:
                per[m].append((int(row[f"{m}_N"]), int(row[f"{m}_n"]), int(row[f"{m}_k"])))
            # §3d's sums for route accuracy (N, judged, judged hits, audited, Σ(Y − Ŷ), Σ(Y − Ŷ)²)
            per["ra_ppi"].append((int(row["ra_N"]), *(int(row[f"rp_{k}"]) for k in ("n", "y", "r", "d", "d2"))))
    return found
    return {
        (row.pop("task_type") or "", utc(row.pop("start"))): {k: int(v) for k, v in row.items()}
        for row in dict_rows(client, LABELS_AS_OF_SQL, parameters)
    }
