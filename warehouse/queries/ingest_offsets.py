"""The loader's stored positions (`ingest_offsets`), read for consumer lag: messages behind per
(topic, partition) = the broker's end offset − the next offset the loader will read."""

from __future__ import annotations

from routerscope import names
from warehouse.queries.common import named

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
