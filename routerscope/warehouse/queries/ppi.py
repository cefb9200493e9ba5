"""The sums behind docs/metrics.md §3d: per task type × confidence bucket, the judge's verdicts and the people's
corrections of them, for the prediction-powered estimates and the judge's audit
(routerscope/warehouse/analytics/ppi.py).

A *judged* event has an `offline_replay` label (the newest, by event_time then label_id) whose device_acceptable is
not null; an *audited* event has, besides, a `human_review` label (the newest) whose device_acceptable is not null.
Unlike §3's chosen label, both are read side by side: the person corrects the judge, neither replaces the other.
Every label counts, whenever it arrived. Every value is a bound parameter; the SQL text is constant."""

from __future__ import annotations

from collections.abc import Sequence

from routerscope.contract.events import LABEL_SOURCE_OFFLINE_REPLAY
from routerscope.warehouse.queries.decisions import WINDOW_TABLE
from routerscope.warehouse.sql import WINDOW_CTE, QueryWindow, dict_rows, named

LABEL_SOURCE_HUMAN = "human_review"
MEASURES = ("ff", "mf", "ra")  # §3d's false fallbacks, missed fallbacks, route accuracy

# Per measure: N (the population's events), n (judged), y (judged hits), r (audited), d / d2 (the sum of the
# corrections Y − Ŷ and of their squares over the audited). ff: judged fallbacks (quality, timeout), hit =
# acceptable; mf: device-served, hit = not acceptable; ra: every live event, judged when the judge's label has a
# route verdict, hit = the route was right. a_*: the audit over every event with both verdicts.
# Several sets of bucket edges are read at once on the finest buckets, those of every edge of every set
# (`ppi_strata_sets`), and each set's buckets summed from them here.
_PPI = """
WITH $events,
lab AS (
    SELECT request_id, source, device_acceptable, route_correct, event_time, label_id
    FROM $labels
    WHERE device_acceptable IS NOT NULL AND source IN ({judge:String}, {human:String})
      AND cityHash64(request_id) IN (SELECT cityHash64(request_id) FROM ev $labeled_only)
    LIMIT 1 BY label_id
),
per AS (
    SELECT request_id,
           countIf(source = {judge:String}) > 0 AS has_j,
           argMaxIf(tuple(device_acceptable, route_correct), (event_time, label_id), source = {judge:String}) AS jp,
           countIf(source = {human:String}) > 0 AS has_h,
           argMaxIf(tuple(device_acceptable, route_correct), (event_time, label_id), source = {human:String}) AS hp
    FROM lab GROUP BY request_id
),
j AS (
    SELECT e.task_type AS task_type,
           $bucket AS bucket,
           $populations,
           ifNull(p.has_j, 0) = 1 AS hj,
           hj AND ifNull(p.has_h, 0) = 1 AS hh,
           toInt8(ifNull(tupleElement(p.jp, 1), 0)) AS ja,
           toInt8(ifNull(tupleElement(p.hp, 1), 0)) AS ha,
           hj AND tupleElement(p.jp, 2) IS NOT NULL AS hjr,
           hjr AND hh AND tupleElement(p.hp, 2) IS NOT NULL AS hhr,
           toInt8(ifNull(tupleElement(p.jp, 2), 0)) AS jr,
           toInt8(ifNull(tupleElement(p.hp, 2), 0)) AS hr
    FROM $joined AS e LEFT JOIN per AS p ON e.request_id = p.request_id
    $unlabeled
)
SELECT task_type, bucket,
       countIf(pop_ff) AS ff_N, countIf(pop_ff AND hj) AS ff_n, countIf(pop_ff AND hj AND ja = 1) AS ff_y,
       countIf(pop_ff AND hh) AS ff_r, sumIf(ha - ja, pop_ff AND hh) AS ff_d,
       sumIf((ha - ja) * (ha - ja), pop_ff AND hh) AS ff_d2,
       countIf(pop_mf) AS mf_N, countIf(pop_mf AND hj) AS mf_n, countIf(pop_mf AND hj AND ja = 0) AS mf_y,
       countIf(pop_mf AND hh) AS mf_r, sumIf(ja - ha, pop_mf AND hh) AS mf_d,
       sumIf((ja - ha) * (ja - ha), pop_mf AND hh) AS mf_d2,
       count() AS ra_N, countIf(hjr) AS ra_n, countIf(hjr AND jr = 1) AS ra_y,
       countIf(hhr) AS ra_r, sumIf(hr - jr, hhr) AS ra_d, sumIf((hr - jr) * (hr - jr), hhr) AS ra_d2,
       countIf(hh) AS a_n, countIf(hh AND ha = ja) AS a_agree,
       countIf(hh AND ha = 0) AS a_bad, countIf(hh AND ha = 0 AND ja = 1) AS a_accept_bad,
       countIf(hh AND ha = 1) AS a_good, countIf(hh AND ha = 1 AND ja = 0) AS a_reject_good
FROM j
GROUP BY task_type, bucket
ORDER BY task_type, bucket
"""
AUDIT_KEYS = ("a_n", "a_agree", "a_bad", "a_accept_bad", "a_good", "a_reject_good")
STRATUM_KEYS = ("N", "n", "y", "r", "d", "d2")

_BUCKET = "if(e.confidence IS NULL, -1, toInt16(arrayCount(x -> e.confidence >= x, {edges:Array(Float64)})))"
_POPULATIONS = (
    "e.entered_device AND e.fallback_type IN ('quality', 'timeout') AS pop_ff,\n"
    "           e.entered_device AND e.fallback_type = 'none' AND e.degrade_level IN (0, 1) AS pop_mf"
)
# The window's events without a chosen label (decisions.WINDOW_TABLE's `labeled` = 0) have neither verdict: every
# label with a device verdict can be the chosen one, the judge's and the person's included. They count in N only,
# without the join: on the bench's day (1.24M events, 2 % labeled) the statement took 0.08 s against 0.15 s with
# every event joined, and the same on the demo's week, most of whose events are labeled (docs/benchmarks.md).
_UNLABELED = f"""UNION ALL
    SELECT e.task_type, {_BUCKET}, {_POPULATIONS},
           false, false, toInt8(0), toInt8(0), false, false, toInt8(0), toInt8(0)
    FROM ev AS e WHERE NOT e.labeled"""

_EVENTS = "request_id, task_type, confidence, entered_device, fallback_type, degrade_level"
PPI_SQL = named(
    "ppi_strata",
    _PPI,
    {
        "events": f"{WINDOW_CTE},\nev AS (SELECT {_EVENTS} FROM w WHERE mode = 'live')",
        "labeled_only": "",
        "bucket": _BUCKET,
        "populations": _POPULATIONS,
        "joined": "ev",
        "unlabeled": "",
    },
)
# The same over the metric set's materialized window (decisions.WINDOW_TABLE: its events each once, request ids
# kept for this join), which `compute` has read already: reading the window again, FINAL and with its look-back,
# twice (the labels' filter and the join) was 0.3 s of the bench's 0.86 s metric set (docs/benchmarks.md).
PPI_FROM_WINDOW_SQL = named(
    "ppi_strata_from_window",
    _PPI,
    {
        "events": f"ev AS (SELECT {_EVENTS}, labeled FROM {WINDOW_TABLE} WHERE mode = 'live')",
        "labeled_only": "WHERE labeled",
        "bucket": _BUCKET,
        "populations": _POPULATIONS,
        "joined": "(SELECT * FROM ev WHERE labeled)",
        "unlabeled": _UNLABELED,
    },
)


def ppi_strata(client, window: QueryWindow, inner_edges: tuple[float, ...]) -> dict[str, dict]:
    """task_type → {"strata": {measure: [(N, n, y, r, d, d2) per bucket]}, "buckets": [bucket of each stratum],
    "audit": {a_n, a_agree, …}} over the window's live events (each once); a bucket is the count of `inner_edges`
    at or below the confidence, -1 for a null one, and only buckets holding an event are listed."""
    return ppi_strata_sets(client, window, [inner_edges])[0]


def ppi_strata_sets(
    client, window: QueryWindow, edge_sets: Sequence[tuple[float, ...]], from_window: bool = False
) -> list[dict[str, dict]]:
    """`ppi_strata` under each set of inner edges, in one read of the window and its labels: the metric set
    stratifies on §6's edges and checks each recommended threshold on those edges with the threshold added
    (analytics/metrics.py `checked`), three reads of the same events and labels on the demo's week, now one. The
    read groups on the finest buckets (every edge of every set); a set's bucket is the count of its edges at or
    below the finest bucket's lower edge, and its sums are those of its finest buckets (every figure is a count or a
    sum: each set's strata are exactly what reading it alone gives). `from_window`: the events from the metric set's
    materialized window (`decisions.materialized_window`, open on `client`) instead of the warehouse."""
    if not edge_sets:
        return []
    finest = tuple(sorted({float(edge) for edges in edge_sets for edge in edges}))
    parameters = {
        **window.parameters(),
        "judge": LABEL_SOURCE_OFFLINE_REPLAY,
        "human": LABEL_SOURCE_HUMAN,
        "edges": list(finest),
    }
    read: dict[str, dict] = {}
    for row in dict_rows(client, PPI_FROM_WINDOW_SQL if from_window else PPI_SQL, parameters):
        per = read.setdefault(
            row["task_type"],
            {"strata": {m: [] for m in MEASURES}, "buckets": [], "audit": dict.fromkeys(AUDIT_KEYS, 0)},
        )
        per["buckets"].append(int(row["bucket"]))
        for m in MEASURES:
            per["strata"][m].append(tuple(int(row[f"{m}_{k}"]) for k in STRATUM_KEYS))
        for k in AUDIT_KEYS:
            per["audit"][k] += int(row[k])
    return [_coarsened(read, finest, tuple(float(edge) for edge in edges)) for edges in edge_sets]


def _coarsened(read: dict[str, dict], finest: tuple[float, ...], edges: tuple[float, ...]) -> dict[str, dict]:
    """`read` (strata on the `finest` edges' buckets) on the buckets of `edges` (a subset of `finest`)."""
    # finest bucket k holds the confidences in [finest[k-1], finest[k]): of `edges`, those at or below finest[k-1]
    bucket_of = [0, *(sum(1 for edge in edges if edge <= low) for low in finest)]
    found: dict[str, dict] = {}
    for task_type, per in read.items():
        sums: dict[int, dict[str, list[int]]] = {}
        for k, bucket in enumerate(per["buckets"]):
            coarse = sums.setdefault(
                -1 if bucket < 0 else bucket_of[bucket], {m: [0] * len(STRATUM_KEYS) for m in MEASURES}
            )
            for m in MEASURES:
                coarse[m] = [a + b for a, b in zip(coarse[m], per["strata"][m][k])]
        buckets = sorted(sums)
        found[task_type] = {
            "strata": {m: [tuple(sums[b][m]) for b in buckets] for m in MEASURES},
            "buckets": buckets,
            "audit": dict(per["audit"]),
        }
    return found


# The labeling design's candidates (docs/metrics.md §3d): the window's live events that carry a design and left a
# device answer to judge (judged fallbacks, device-served), not judged by an offline replay yet. Whether the
# design drew each is decided from the event alone (routerscope.router.label_design.drawn). Exact re-deliveries
# fold (FINAL).
DESIGNED_SQL = named(
    "designed_candidates",
    """
SELECT request_id, any(task_type) AS task, any(fallback_type) AS fallback, any(label_pi) AS pi,
       any(label_design_id) AS design
FROM $decisions FINAL
WHERE event_time >= {start:DateTime64(3, 'UTC')} AND event_time < {end:DateTime64(3, 'UTC')}
  AND mode = 'live' AND label_design_id IS NOT NULL AND label_pi IS NOT NULL AND entered_device
  AND (fallback_type IN ('quality', 'timeout') OR (fallback_type = 'none' AND degrade_level IN (0, 1)))
  AND request_id NOT IN (SELECT request_id FROM $labels WHERE source = {judge:String})
GROUP BY request_id
ORDER BY request_id
""",
)


def designed_candidates(client, window: QueryWindow) -> list[tuple[str, str, str, float, str]]:
    """(request_id, task_type, fallback_type, label_pi, label_design_id) of DESIGNED_SQL."""
    rows = dict_rows(client, DESIGNED_SQL, {**window.parameters(), "judge": LABEL_SOURCE_OFFLINE_REPLAY})
    return [(r["request_id"], r["task"], r["fallback"], float(r["pi"]), r["design"]) for r in rows]
