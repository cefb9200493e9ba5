"""Queries over `labels`: the one chosen label per request, and calibration (METRICS.md §3, §6).

Every value is a bound `{name:Type}` parameter; the SQL text is constant."""

from __future__ import annotations

from dataclasses import dataclass

from warehouse.queries.common import WINDOW_CTE, QueryWindow, named

# Source precedence of METRICS.md §3, highest first.
SOURCE_PRECEDENCE = ("human_review", "offline_replay", "validator", "shadow_compare")

# One label per request: the highest-ranked source, the latest event_time within it; labels with a
# null device_acceptable are never chosen. Duplicated label events count once (label_id).
# argMax over a tuple keeps a null route_correct of the chosen label (a bare argMax would skip it).
CHOSEN_LABELS_CTE = """
chosen AS (
    SELECT
        request_id,
        argMax(tuple(device_acceptable, route_correct), (rank, event_time, label_id)) AS picked,
        tupleElement(picked, 1) AS acceptable,
        tupleElement(picked, 2) AS route_ok,
        1 AS labeled
    FROM (
        SELECT request_id, device_acceptable, route_correct, event_time, label_id,
               transform(source, ['human_review', 'offline_replay', 'validator', 'shadow_compare'],
                         [4, 3, 2, 1], 0) AS rank
        FROM routerscope.labels
        WHERE device_acceptable IS NOT NULL AND request_id IN (SELECT request_id FROM w)
        LIMIT 1 BY label_id
    )
    GROUP BY request_id
)"""

DEFAULT_EDGES = (0.0, 0.45, 0.65, 0.85, 1.0)
THRESHOLD_GRID = tuple(round(k * 0.05, 2) for k in range(21))

_CALIBRATED = f"""
WITH {WINDOW_CTE},
{CHOSEN_LABELS_CTE},
cal AS (
    SELECT w.task_type AS task_type, w.confidence AS confidence, w.threshold AS threshold,
           c.acceptable AS acceptable
    FROM w INNER JOIN chosen AS c ON w.request_id = c.request_id
    WHERE w.mode = 'live' AND w.entered_device AND w.confidence IS NOT NULL AND c.acceptable IS NOT NULL
)
"""

BUCKETS_SQL = named(
    "calibration_buckets",
    _CALIBRATED
    + """
SELECT task_type,
       arrayCount(e -> e <= confidence, {inner_edges:Array(Float64)}) AS bucket,
       count() AS n,
       countIf(acceptable) AS passed
FROM cal
GROUP BY task_type, bucket
ORDER BY task_type, bucket
""",
)

GRID_SQL = named(
    "calibration_threshold_grid",
    _CALIBRATED
    + """
SELECT task_type, c, countIf(confidence >= c) AS n, countIf(confidence >= c AND acceptable) AS passed
FROM cal
ARRAY JOIN {grid:Array(Float64)} AS c
GROUP BY task_type, c
ORDER BY task_type, c
""",
)

CURRENT_THRESHOLD_SQL = named(
    "calibration_current_threshold",
    _CALIBRATED
    + """
SELECT task_type, threshold, count() AS n
FROM cal
WHERE threshold IS NOT NULL
GROUP BY task_type, threshold
ORDER BY task_type, n DESC, threshold DESC
LIMIT 1 BY task_type
""",
)


@dataclass(frozen=True)
class BucketCount:
    task_type: str
    bucket: int
    n: int
    passed: int


def calibration_buckets(client, window: QueryWindow, edges=DEFAULT_EDGES) -> list[BucketCount]:
    rows = client.query(BUCKETS_SQL, parameters={**window.parameters(), "inner_edges": list(edges[1:-1])}).result_rows
    return [BucketCount(t, int(b), int(n), int(p)) for t, b, n, p in rows]


def threshold_grid(client, window: QueryWindow, grid=THRESHOLD_GRID) -> dict[str, list[tuple[float, int, int]]]:
    """Per task type: (c, events with confidence >= c, of which acceptable) for each grid point."""
    rows = client.query(GRID_SQL, parameters={**window.parameters(), "grid": list(grid)}).result_rows
    found: dict[str, list[tuple[float, int, int]]] = {}
    for task_type, c, n, passed in rows:
        found.setdefault(task_type, []).append((round(float(c), 2), int(n), int(passed)))
    return found


def current_thresholds(client, window: QueryWindow) -> dict[str, float]:
    """Per task type, the most frequent threshold (ties: the higher one)."""
    rows = client.query(CURRENT_THRESHOLD_SQL, parameters=window.parameters()).result_rows
    return {task_type: float(threshold) for task_type, threshold, _ in rows}
