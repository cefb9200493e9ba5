"""Queries over `breaker_events`: the circuit breakers' state transitions."""

from __future__ import annotations

from typing import Any

from warehouse.queries.common import dict_rows, named

TRANSITION_COLUMNS = ("event_time", "instance_id", "boundary", "from_state", "to_state", "trigger")

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
