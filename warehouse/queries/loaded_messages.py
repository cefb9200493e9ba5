"""The loader's ledger (`loaded_messages`): one row per Kafka message loaded into a facts table.

The Python parser's facts insert writes the ledger rows of its events through a view
(warehouse/queries/json_rows.py), and the rows of re-read landed messages itself; the SQL parser fills the
ledger from its staging tables (warehouse/queries/landing.py), one `INSERT … SELECT` per topic and
batch, landed rows included (their facts are already in place; their ledger row is written again,
harmlessly: the ledger folds rows with the same Kafka coordinates).
"""

from __future__ import annotations

from routerscope import names
from warehouse.queries.common import named
from warehouse.queries.landing import LOADABLE, staging_table
from warehouse.rows import LEDGER_COLUMNS, RECORD_ID

# Constant pieces of the statements below (named() puts them in before it spells the tables).
FRAGMENTS = {"ledger_columns": ", ".join(LEDGER_COLUMNS), "loadable": LOADABLE}

# Per topic: its record id column and its staging table, as identifiers.
FROM_STAGING = {
    topic: named(
        f"loaded_messages_from_staging_{names.TOPIC_TABLE[topic]}",
        """
INSERT INTO $loaded_messages ($ledger_columns)
SELECT kafka_topic, kafka_partition, kafka_offset, $record_id, event_time
FROM $staging
WHERE $loadable
""",
        FRAGMENTS,
        record_id=RECORD_ID[topic],
        staging=staging_table(topic),
    )
    for topic in RECORD_ID
}


# The ledger rows of messages the warehouse refused to store as facts: the insert's views run one after
# the other, in no promised order, so the ledger view may have written them before the facts view
# refused the block.
FORGET = named(
    "loaded_messages_forget",
    "DELETE FROM $loaded_messages WHERE kafka_topic = {topic:String} "
    "AND has({coordinates:Array(Tuple(UInt32, UInt64))}, (kafka_partition, kafka_offset))",
)
