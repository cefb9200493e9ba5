"""Queries over `breaker_events`: the circuit breakers' state transitions."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from routerscope.core.timeutil import utc
from routerscope.warehouse.sql import dict_rows, named, utc_text

TRANSITION_COLUMNS = ("event_time", "instance_id", "boundary", "seq", "from_state", "to_state", "trigger")

# Constant pieces of the statements below (named() puts them in before it spells the tables).
FRAGMENTS = {"transition_columns": ", ".join(TRANSITION_COLUMNS)}

TRANSITIONS_SQL = named(
    "breaker_transitions",
    """
SELECT $transition_columns
FROM $breaker_events FINAL
ORDER BY event_time DESC
LIMIT {limit:UInt32}
""",
    FRAGMENTS,
)


def transitions(client, limit: int = 200) -> list[dict[str, Any]]:
    """The newest `limit` transitions (TRANSITION_COLUMNS), newest first."""
    return dict_rows(client, TRANSITIONS_SQL, {"limit": limit})


# A breaker's own order: its `seq` (stamped by the router, +1 per transition); events from before `seq`
# existed (NULL) come first, by time. Never by arrival, and never by event_time alone: a router's
# clock may step back between two transitions.
CHAIN_ORDER = "ifNull(seq, 0), event_time, event_id"

# Pipeline signal `pipeline.breaker_open.<boundary>` as of each window (docs/metrics.md "Pipeline signals per
# window"): the transitions of one boundary up to `until`, from `since` on, plus each instance's last
# transition before `since` (the state it carried into the first window).
SIGNAL_TRANSITIONS_SQL = named(
    "breaker_transitions_for_signal",
    """
SELECT instance_id, seq, event_time, event_id, from_state, to_state
FROM $breaker_events FINAL
WHERE boundary = {boundary:String} AND event_time < {until:DateTime64(3, 'UTC')}
  AND (event_time >= {since:DateTime64(3, 'UTC')} OR event_id IN (
        SELECT argMax(event_id, tuple($chain_order))
        FROM $breaker_events FINAL
        WHERE boundary = {boundary:String} AND event_time < {since:DateTime64(3, 'UTC')}
        GROUP BY instance_id))
ORDER BY instance_id, $chain_order
""",
    {"chain_order": CHAIN_ORDER},
)


def signal_transitions(client, boundary: str, since: datetime, until: datetime) -> list[dict[str, Any]]:
    """One boundary's transitions for `pipeline.breaker_open` over [since, until) (SIGNAL_TRANSITIONS_SQL),
    per instance in chain order; event_time aware UTC."""
    rows = dict_rows(
        client, SIGNAL_TRANSITIONS_SQL, {"boundary": boundary, "since": utc_text(since), "until": utc_text(until)}
    )
    for row in rows:
        row["event_time"] = utc(row["event_time"])
    return rows
