"""The copies of a decision's event_id under different event_times, as migration 0020 keeps them in
`decision_later_copies` (each copy with an earlier one, read by every metric window: common.FIRST_COPY).
Views on `decisions` write the pairs on every insert; this module writes them again for rows a killed run
left in `decisions` past its stored position. The warehouse commits each table's part of one insert on
its own, so a kill can land the decisions and not the pairs the views wrote; the next run skips those rows
as landed (warehouse/ingest/loader.py) instead of inserting them again, and calls `restore` for them.
Writing a pair again is harmless (the table folds, and the read asks only whether a pair exists)."""

from __future__ import annotations

from warehouse.queries.common import named

# The decisions of one topic at or past each partition's start (as ingest_offsets.LANDED_SQL reads them).
_PAST_STARTS = """
    SELECT event_id, event_time FROM $decisions
    WHERE kafka_topic = {topic:String} AND has({partitions:Array(UInt32)}, kafka_partition)
      AND kafka_offset >= arrayElement({starts:Array(UInt64)}, indexOf({partitions:Array(UInt32)}, kafka_partition))"""

# Every ordered pair of distinct times of those rows' ids, from every stored copy.
RESTORE_PAIRS_SQL = named(
    "decision_copies_restore_pairs",
    """
INSERT INTO $decision_later_copies
SELECT pair.2 AS event_time, event_id, pair.1 AS earlier_time
FROM
(
    SELECT event_id, arraySort(groupUniqArray(event_time)) AS times
    FROM $decisions
    WHERE event_id IN (SELECT event_id FROM ($past_starts))
    GROUP BY event_id
    HAVING length(times) > 1
)
ARRAY JOIN arrayFilter(p -> p.1 < p.2, arrayFlatten(arrayMap(a -> arrayMap(b -> (a, b), times), times))) AS pair
""",
    {"past_starts": _PAST_STARTS},
)


def restore(client, topic: str, starts: dict[int, int]) -> None:
    """Write again the pairs of `topic`'s decisions at or past each partition's start offset."""
    if not starts:
        return
    partitions = sorted(starts)
    parameters = {"topic": topic, "partitions": partitions, "starts": [starts[p] for p in partitions]}
    client.command(RESTORE_PAIRS_SQL, parameters=parameters)
