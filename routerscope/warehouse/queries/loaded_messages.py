"""The loader's ledger (`loaded_messages`): one row per Kafka message loaded into a facts table.

The loader's facts insert writes the ledger rows of its events through a view
(routerscope/warehouse/queries/json_rows.py), and the rows of re-read landed messages itself (their facts are
already in place; their ledger row is written again, harmlessly: the ledger folds rows with the same Kafka
coordinates).
"""

from __future__ import annotations

import json

from routerscope.core.timeutil import parse_utc
from routerscope.warehouse.schema import LEDGER_COLUMNS, RECORD_ID

# A message the warehouse refused to store as facts (quarantined as `insert.rejected`): the insert's views
# run one after the other, in no promised order, so the ledger view may have written its row before the
# facts view refused the block. Nothing on the ingest path deletes (a DELETE is a mutation, and one cut
# short by a full disk left a warehouse that could not be opened again): the loader inserts the same
# coordinates again with `rejected = 1`, after that row, and the ledger (ReplacingMergeTree without a
# version: the last inserted row of a key wins) folds it. Readers take `FINAL` and skip rejected rows.
REJECTED = "rejected"


def rejected_rows(topic: str, refused: list[tuple[int, int, bytes]]) -> list[list]:
    """Column-oriented ledger rows (LEDGER_COLUMNS + `rejected`) for refused messages: (partition,
    offset, the event's JSON line as the loader inserted it)."""
    columns: list[list] = [[] for _ in range(len(LEDGER_COLUMNS) + 1)]
    for partition, offset, line in refused:
        event = json.loads(line)
        for column, value in zip(
            columns,
            (topic, partition, offset, event[RECORD_ID[topic]], parse_utc(event["event_time"]), 1),
        ):
            column.append(value)
    return columns
