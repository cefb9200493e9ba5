"""The closed loop's reads (docs/loop.md#evaluate): the what-if of docs/metrics.md §14 summed per session, for the
session-cluster bootstrap. Same rules as `routerscope/warehouse/queries/whatif.py` (the same CTE: which events
move, which stay, `unknown` routes counted as fallbacks and never as served), grouped by session instead of by
task type; an event without a session is a session of its own."""

from __future__ import annotations

from typing import Any

from routerscope.warehouse.queries.decisions import WINDOW_TABLE
from routerscope.warehouse.queries.labels import CHOSEN_LABELS_CTE, chosen_parameters
from routerscope.warehouse.queries.whatif import parameters as candidate_parameters
from routerscope.warehouse.queries.whatif import routes
from routerscope.warehouse.sql import QueryWindow, dict_rows, named

SESSIONS_SQL = named(
    "loop_whatif_sessions",
    # each event as recorded (state 0) and under the one candidate (state 1): with one candidate `k` is 0 or 1,
    # so kinds 1 and 3 move when k = 0 (the candidate above their value), kind 2 when k = 1 (at or below it)
    routes("[0, 1]", "state = 1 AND ((kind IN (1, 3) AND k = 0) OR (kind = 2 AND k = 1))")
    + """
SELECT
    if(ifNull(session_id, '') = '', concat('event:', toString(rowNumberInAllBlocks())), session_id) AS session,
    state = 1 AS is_candidate,
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
    parameters = candidate_parameters({task_type: [float(candidate)]})
    out: dict[str, list[dict[str, Any]]] = {"current": [], "candidate": []}
    for row in dict_rows(client, SESSIONS_SQL, parameters):
        out["candidate" if row.pop("is_candidate") else "current"].append(row)
    return out


# The chosen label of each request, among the labels judged before the look's time (the window's end): a look is
# what was known then, so it is recomputed from the warehouse with the same sums however many labels arrived since
# (docs/loop.md#files: reproducible).
_AS_OF = "WHERE device_acceptable IS NOT NULL AND"
if _AS_OF not in CHOSEN_LABELS_CTE:  # the shared CTE changed shape: this filter has to follow it
    raise RuntimeError("CHOSEN_LABELS_CTE no longer filters on device_acceptable: update CANARY_LABELS_CTE")
CANARY_LABELS_CTE = CHOSEN_LABELS_CTE.replace(_AS_OF, _AS_OF + " event_time < {end:DateTime64(3, 'UTC')} AND")

# A canary's sessions (docs/loop.md#a-look): the live decisions of one experiment in the window, per session:
# its arm(s), when it was first seen (the share it was assigned at is the stage's then), its requests,
# device-served, judged device-served (a chosen label, docs/metrics.md §3), missed fallbacks among those, the
# mean first-try confidence (pre-treatment: the balance check), cloud calls, device timeouts and canned answers.
CANARY_SQL = named(
    "loop_canary_sessions",
    """
WITH $chosen
SELECT
    d.session_id AS session,
    groupUniqArray(d.arm) AS arms,
    min(d.event_time) AS first_seen,
    count() AS requests,
    countIf(d.entered_device AND d.fallback_type = 'none' AND d.degrade_level IN (0, 1)) AS served,
    countIf(d.entered_device AND d.fallback_type = 'none' AND d.degrade_level IN (0, 1) AND c.labeled = 1) AS judged,
    countIf(d.entered_device AND d.fallback_type = 'none' AND d.degrade_level IN (0, 1) AND c.labeled = 1
            AND NOT c.acceptable) AS missed,
    avgIf(d.confidence, d.entered_device AND d.confidence IS NOT NULL) AS confidence,
    sum(d.cloud_calls) AS calls,
    countIf(d.fallback_type = 'timeout') AS timeouts,
    countIf(d.degrade_level = 4) AS canned
FROM (
    SELECT * FROM $decisions FINAL
    WHERE event_time >= {start:DateTime64(3, 'UTC')} AND event_time < {end:DateTime64(3, 'UTC')}
      AND experiment_id = {experiment:String} AND mode = 'live' AND arm IS NOT NULL
) AS d
LEFT JOIN chosen AS c ON d.request_id = c.request_id
GROUP BY d.session_id
ORDER BY first_seen, session
""",
    {"chosen": CANARY_LABELS_CTE},
)


def canary_sessions(client, experiment_id: str, window: QueryWindow) -> list[dict[str, Any]]:
    """CANARY_SQL's rows, one per session, first seen first."""
    return dict_rows(client, CANARY_SQL, {**chosen_parameters(window), "experiment": experiment_id})
