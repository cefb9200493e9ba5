"""Queries over `quarantine`: the messages the loader could not store, with the rules they broke."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from warehouse.queries.common import dict_rows, named, utc_text

_EPOCH, _LAST_DAY = datetime(1970, 1, 1, tzinfo=UTC), datetime(2299, 12, 31, tzinfo=UTC)  # "no bound"

RECENT_COLUMNS = ("kafka_topic", "kafka_partition", "kafka_offset", "rules", "raw_start", "quarantined_at")

RECENT_SQL = named(
    "quarantine_recent",
    """
SELECT kafka_topic, kafka_partition, kafka_offset, rules, substring(raw, 1, {prefix:UInt32}) AS raw_start,
       quarantined_at
FROM $quarantine
WHERE quarantined_at >= {start:DateTime64(3, 'UTC')} AND quarantined_at < {end:DateTime64(3, 'UTC')}
ORDER BY quarantined_at DESC
LIMIT {limit:UInt32}
""",
)


def _between(start: datetime | None, end: datetime | None) -> dict[str, str]:
    return {"start": utc_text(start or _EPOCH), "end": utc_text(end or _LAST_DAY)}


def recent(
    client, limit: int = 20, prefix: int = 120, start: datetime | None = None, end: datetime | None = None
) -> list[dict[str, Any]]:
    """The newest `limit` messages quarantined in [start, end) (default: ever) (RECENT_COLUMNS), the first
    `prefix` bytes of each."""
    return dict_rows(client, RECENT_SQL, {"limit": limit, "prefix": prefix, **_between(start, end)})


COUNTS_COLUMNS = ("kafka_topic", "rule", "messages")

COUNTS_SQL = named(
    "quarantine_counts",
    """
SELECT kafka_topic, arrayJoin(rules) AS rule, count() AS messages
FROM $quarantine
WHERE quarantined_at >= {start:DateTime64(3, 'UTC')} AND quarantined_at < {end:DateTime64(3, 'UTC')}
GROUP BY kafka_topic, rule
ORDER BY messages DESC
""",
)


def counts(client, start: datetime | None = None, end: datetime | None = None) -> list[dict[str, Any]]:
    """Messages quarantined in [start, end) (default: ever) per topic and broken rule (COUNTS_COLUMNS), most
    first; a message breaking two rules counts under both."""
    return dict_rows(client, COUNTS_SQL, _between(start, end))


# Every message ever quarantined and every message ever loaded (the exporter's counters: Prometheus takes the
# share over the day from their increase, as alerts.QUARANTINE_SHARE_SQL takes it over the last day).
TOTALS_SQL = named(
    "quarantine_totals", "SELECT (SELECT count() FROM $quarantine), (SELECT count() FROM $loaded_messages)"
)


def totals(client) -> tuple[int, int]:
    """(messages quarantined, messages loaded), all time."""
    quarantined, loaded = client.query(TOTALS_SQL).result_rows[0]
    return int(quarantined), int(loaded)
