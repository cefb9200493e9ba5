"""The closed loop's reads (docs/loop.md#evaluate): the what-if of docs/metrics.md §14 summed per session, for the
session-cluster bootstrap. Same rules as `routerscope/warehouse/queries/whatif.py` (the same CTE: which events
move, which stay, `unknown` routes counted as fallbacks and never as served), grouped by session instead of by
task type; an event without a session is a session of its own."""

from __future__ import annotations

from typing import Any

from routerscope.warehouse.queries.decisions import WINDOW_TABLE
from routerscope.warehouse.queries.whatif import _WHATIF_CTE, CURRENT
from routerscope.warehouse.sql import dict_rows, named

SESSIONS_SQL = named(
    "loop_whatif_sessions",
    _WHATIF_CTE
    + """
SELECT
    if(ifNull(session_id, '') = '', concat('event:', toString(rowNumberInAllBlocks())), session_id) AS session,
    candidate >= 0 AS is_candidate,
    count() AS requests,
    countIf(entered_device) AS device_entered,
    countIf(device_served_x) AS served,
    countIf(fallback_x) AS fallbacks,
    sum(if(moves_to_cloud, cloud_calls + 1, if(moves_to_device, 0, cloud_calls))) AS calls
FROM m
GROUP BY session, is_candidate
ORDER BY session, is_candidate
""",
    window_table=WINDOW_TABLE,
)


def sessions(client, task_type: str, candidate: float) -> dict[str, list[dict[str, Any]]]:
    """{"current": [...], "candidate": [...]}: per session of the materialized window, the requests, device-entered,
    device-served, fallbacks and cloud calls as recorded and under `candidate`."""
    parameters = {"tasks": [task_type], "values": [float(candidate)], "current": CURRENT}
    out: dict[str, list[dict[str, Any]]] = {"current": [], "candidate": []}
    for row in dict_rows(client, SESSIONS_SQL, parameters):
        out["candidate" if row.pop("is_candidate") else "current"].append(row)
    return out
