"""Queries over `quarantine`: the messages the loader could not store, with the rules they broke.

Which time a quarantined message is filtered by (docs/dashboards.md#data-quality): its **own** `event_time`
when its bytes are JSON with an `event_time` that reads as a time no later than its load (plus the same
5-minute allowance for clock errors the freshness check grants), else the time it was **loaded**
(`quarantined_at`). A reader picking "the last hour of events" wants the broken events of that hour; a
message with no readable time of its own (not JSON, or no time) is placed where the loader met it. Both
times are returned."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from routerscope.core.timeutil import UTC
from routerscope.warehouse.sql import dict_rows, named, utc_or_none, utc_text

_EPOCH, _LAST_DAY = datetime(1970, 1, 1, tzinfo=UTC), datetime(2299, 12, 31, tzinfo=UTC)  # "no bound"

# The message's own time, or its load time (see the module's docstring). A constant SQL fragment, never data.
_OWN = "parseDateTime64BestEffortOrNull(JSONExtractString(raw, 'event_time'), 3, 'UTC')"
MESSAGE_TIME = (
    f"if(isNull({_OWN}) OR {_OWN} > quarantined_at + INTERVAL 5 MINUTE, quarantined_at, assumeNotNull({_OWN}))"
)
_FRAGMENTS = {"message_time": MESSAGE_TIME}

RECENT_COLUMNS = (
    "kafka_topic",
    "kafka_partition",
    "kafka_offset",
    "rules",
    "raw_start",
    "message_time",
    "time_is_own",
    "quarantined_at",
)

RECENT_SQL = named(
    "quarantine_recent",
    """
SELECT kafka_topic, kafka_partition, kafka_offset, rules, substring(raw, 1, {prefix:UInt32}) AS raw_start,
       $message_time AS message_time, message_time != quarantined_at AS time_is_own, quarantined_at
FROM $quarantine
WHERE message_time >= {start:DateTime64(3, 'UTC')} AND message_time < {end:DateTime64(3, 'UTC')}
ORDER BY message_time DESC, quarantined_at DESC
LIMIT {limit:UInt32}
""",
    _FRAGMENTS,
)


def _between(start: datetime | None, end: datetime | None) -> dict[str, str]:
    return {"start": utc_text(start or _EPOCH), "end": utc_text(end or _LAST_DAY)}


def recent(
    client, limit: int = 20, prefix: int = 120, start: datetime | None = None, end: datetime | None = None
) -> list[dict[str, Any]]:
    """The newest `limit` messages whose time (their own, else their load's: MESSAGE_TIME) is in [start, end)
    (default: ever) (RECENT_COLUMNS), the first `prefix` bytes of each."""
    return dict_rows(client, RECENT_SQL, {"limit": limit, "prefix": prefix, **_between(start, end)})


COUNTS_COLUMNS = ("kafka_topic", "rule", "messages")

COUNTS_SQL = named(
    "quarantine_counts",
    """
SELECT kafka_topic, arrayJoin(rules) AS rule, count() AS messages
FROM $quarantine
WHERE $message_time >= {start:DateTime64(3, 'UTC')} AND $message_time < {end:DateTime64(3, 'UTC')}
GROUP BY kafka_topic, rule
ORDER BY messages DESC
""",
    _FRAGMENTS,
)


def counts(client, start: datetime | None = None, end: datetime | None = None) -> list[dict[str, Any]]:
    """Messages whose time (MESSAGE_TIME) is in [start, end) (default: ever) per topic and broken rule
    (COUNTS_COLUMNS), most first; a message breaking two rules counts under both."""
    return dict_rows(client, COUNTS_SQL, _between(start, end))


NEWEST_SQL = named("quarantine_newest", "SELECT max($message_time) FROM $quarantine", _FRAGMENTS)


def newest(client) -> datetime | None:
    """The latest MESSAGE_TIME of any quarantined message (None when nothing was quarantined): the shared time
    range's presets end at or after it, so what the loader refused a minute ago is in "the last hour"."""
    rows = client.query(NEWEST_SQL).result_rows
    value = utc_or_none(rows[0][0]) if rows else None
    return value if value is not None and value.year > 1970 else None


# Every message ever quarantined and every message ever loaded (the exporter's counters: Prometheus takes the
# share over the day from their increase, as alerts.QUARANTINE_SHARE_SQL takes it over the last day).
TOTALS_SQL = named(
    "quarantine_totals", "SELECT (SELECT count() FROM $quarantine), (SELECT count() FROM $loaded_messages)"
)


def totals(client) -> tuple[int, int]:
    """(messages quarantined, messages loaded), all time."""
    quarantined, loaded = client.query(TOTALS_SQL).result_rows[0]
    return int(quarantined), int(loaded)
