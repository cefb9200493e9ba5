"""The loader's stored positions (`ingest_offsets`), read for consumer lag: messages behind per
(topic, partition) = the broker's end offset − the next offset the loader will read; and ingest
freshness (how old the newest loaded decision is)."""

from __future__ import annotations

from datetime import datetime

from routerscope.core import names
from routerscope.warehouse.queries import decisions
from routerscope.warehouse.sql import named

POSITIONS_SQL = named(
    "ingest_positions",
    """
SELECT kafka_topic, kafka_partition, max(next_offset) AS next_offset, max(committed_at) AS committed_at
FROM $ingest_offsets
WHERE consumer = {consumer:String}
GROUP BY kafka_topic, kafka_partition
ORDER BY kafka_topic, kafka_partition
""",
)


# The loader's resume point: per (topic, partition) the furthest next offset and the fingerprint of
# the message before it (routerscope.warehouse.ingest.loader: the broker must still hold that message).
STORED_POSITIONS_SQL = named(
    "ingest_stored_positions",
    """
SELECT kafka_topic, kafka_partition, max(next_offset), argMax(last_fingerprint, next_offset)
FROM $ingest_offsets
WHERE consumer = {consumer:String}
GROUP BY kafka_topic, kafka_partition
""",
)

# Rows already in a table at or past each partition's stored position (a run that died after its
# inserts, before its positions): partition i of `partitions` pairs with offset i of `starts`.
LANDED_SQL = {
    table: named(
        f"ingest_landed_{table}",
        """
SELECT kafka_partition, kafka_offset
FROM $source
WHERE kafka_topic = {topic:String} AND has({partitions:Array(UInt32)}, kafka_partition)
  AND kafka_offset >= arrayElement({starts:Array(UInt64)}, indexOf({partitions:Array(UInt32)}, kafka_partition))
""",
        source=names.TABLES[table],
    )
    for table in (
        names.TABLE_DECISIONS,
        names.TABLE_LABELS,
        names.TABLE_BREAKER_EVENTS,
        names.TABLE_POLICY_EVENTS,
        names.TABLE_QUARANTINE,
    )
}


def stored_positions(client, consumer: str) -> dict[tuple[str, int], tuple[int, str]]:
    """(next offset, fingerprint of the message before it) per (topic, partition)."""
    rows = client.query(STORED_POSITIONS_SQL, parameters={"consumer": consumer}).result_rows
    return {(t, int(p)): (int(o), f) for t, p, o, f in rows}


def landed_offsets(client, tables: tuple[str, ...], topic: str, starts: dict[int, int]) -> dict[int, set[int]]:
    """Offsets of `topic` at or past each partition's start already present in any of `tables`."""
    if not starts:
        return {}
    partitions = sorted(starts)
    parameters = {"topic": topic, "partitions": partitions, "starts": [starts[p] for p in partitions]}
    found: dict[int, set[int]] = {}
    for table in tables:
        for partition, offset in client.query(LANDED_SQL[table], parameters=parameters).result_rows:
            found.setdefault(int(partition), set()).add(int(offset))
    return found


def positions(client, consumer: str = names.CONSUMER_GROUP_LOADER) -> dict[tuple[str, int], tuple[int, object]]:
    """(topic, partition) → (next offset to load, when it was stored)."""
    rows = client.query(POSITIONS_SQL, parameters={"consumer": consumer}).result_rows
    return {(t, int(p)): (int(o), at) for t, p, o, at in rows}


def consumer_lag(
    stored: dict[tuple[str, int], tuple[int, object]], ends: dict[tuple[str, int], int] | None
) -> list[dict]:
    """One row per partition the broker or the loader knows: its loaded position, the broker's end
    offset (None when the broker did not answer) and the messages behind (None then too)."""
    keys = sorted(set(stored) | set(ends or {}))
    out = []
    for topic, partition in keys:
        position, at = stored.get((topic, partition), (0, None))
        end = None if ends is None else ends.get((topic, partition))
        out.append(
            {
                "topic": topic,
                "partition": partition,
                "loaded_to": position,
                "broker_end": end,
                "behind": None if end is None else max(end - position, 0),
                "stored_at": at,
            }
        )
    return out


POSITION_COUNT_SQL = named("ingest_position_count", "SELECT count() FROM $ingest_offsets")


def position_count(client) -> int:
    """Stored positions, every consumer and partition (0: nothing was ever loaded into this warehouse)."""
    return int(client.query(POSITION_COUNT_SQL).result_rows[0][0])


def freshness(client, horizon: datetime) -> dict:
    """`newest_event`: the newest loaded decision dated at most `horizon` (later ones are clock errors and
    do not count as fresh), `last_load`: when the newest row was loaded (both None before the first),
    `rows`: the decision rows stored."""
    last_load, rows = decisions.load_summary(client)
    return {"newest_event": decisions.newest_event(client, horizon), "last_load": last_load, "rows": rows}


# Messages loaded and since lost: the ledger keeps one row per loaded message with the id of the record it
# became, below each partition's stored position; a record its facts table no longer holds (a part the
# engine set aside took it) is missing. A duplicate delivery folded into an earlier copy keeps its ledger
# row and its record, so it is not missing. Offsets no table ever held (a transaction marker on a real
# cluster) are not missing either: only what was loaded counts.
MISSING_SQL = {
    table: named(
        f"ingest_missing_{table}",
        """
SELECT kafka_partition, kafka_offset
FROM $loaded_messages FINAL
WHERE kafka_topic = {topic:String} AND NOT rejected AND has({partitions:Array(UInt32)}, kafka_partition)
  AND kafka_offset < arrayElement({nexts:Array(UInt64)}, indexOf({partitions:Array(UInt32)}, kafka_partition))
  AND record_id NOT IN (SELECT $id FROM $facts)
ORDER BY kafka_partition, kafka_offset
""",
        facts=names.TABLES[table],
        id=id_column,
    )
    for table, id_column in (
        (names.TABLE_DECISIONS, "event_id"),
        (names.TABLE_LABELS, "label_id"),
        (names.TABLE_BREAKER_EVENTS, "event_id"),
        (names.TABLE_POLICY_EVENTS, "event_id"),  # without it a load after the first policy events were loaded failed
    )
}


def missing(client, topic: str, facts: str, nexts: dict[int, int]) -> dict[int, list[tuple[int, int]]]:
    """Per partition of `topic`, the offset ranges [first, last] below its stored next offset (`nexts`)
    that were loaded into `facts` and whose records it no longer holds (see MISSING_SQL)."""
    if not nexts:
        return {}
    partitions = sorted(nexts)
    parameters = {"topic": topic, "partitions": partitions, "nexts": [nexts[p] for p in partitions]}
    out: dict[int, list[tuple[int, int]]] = {}
    for partition, offset in client.query(MISSING_SQL[facts], parameters=parameters).result_rows:
        ranges = out.setdefault(int(partition), [])
        if ranges and ranges[-1][1] == int(offset) - 1:
            ranges[-1] = (ranges[-1][0], int(offset))
        else:
            ranges.append((int(offset), int(offset)))
    return out
