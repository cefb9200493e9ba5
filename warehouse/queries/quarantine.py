"""Queries over `quarantine`: the messages the loader could not store, with the rules they broke."""

from __future__ import annotations

from typing import Any

from warehouse.queries.common import dict_rows, named

RECENT_COLUMNS = ("kafka_topic", "kafka_partition", "kafka_offset", "rules", "raw_start", "quarantined_at")

RECENT_SQL = named(
    "quarantine_recent",
    """
SELECT kafka_topic, kafka_partition, kafka_offset, rules, substring(raw, 1, {prefix:UInt32}) AS raw_start,
       quarantined_at
FROM $quarantine
ORDER BY quarantined_at DESC
LIMIT {limit:UInt32}
""",
)


def recent(client, limit: int = 20, prefix: int = 120) -> list[dict[str, Any]]:
    """The newest `limit` quarantined messages (RECENT_COLUMNS), the first `prefix` bytes of each."""
    return dict_rows(client, RECENT_SQL, {"limit": limit, "prefix": prefix})


COUNTS_COLUMNS = ("kafka_topic", "rule", "messages")

COUNTS_SQL = named(
    "quarantine_counts",
    """
SELECT kafka_topic, arrayJoin(rules) AS rule, count() AS messages
FROM $quarantine
GROUP BY kafka_topic, rule
ORDER BY messages DESC
""",
)


def counts(client) -> list[dict[str, Any]]:
    """Quarantined messages per topic and broken rule (COUNTS_COLUMNS), most first; a message breaking
    two rules counts under both."""
    return dict_rows(client, COUNTS_SQL)
