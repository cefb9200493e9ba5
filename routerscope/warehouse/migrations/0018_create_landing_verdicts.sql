-- The loader's SQL parser runs each batch through views (warehouse/queries/landing.py): one insert of
-- the raw messages into a Null table, parsed once by a view that writes the valid ones to the facts
-- table and the ledger. The messages it did not load are listed here by their Kafka coordinates:
-- invalid ones (`python` = 0), which the loader quarantines with the rules the Python validator names
-- for them, and those whose verdict only the Python validator can reach exactly (`python` = 1). Rows
-- are read for the batch that wrote them only; what stays is removed by the TTL.
CREATE TABLE IF NOT EXISTS routerscope.landing_verdicts
(
    batch String,
    kafka_topic LowCardinality(String),
    kafka_partition UInt32,
    kafka_offset UInt64,
    landed Bool,
    python Bool,
    staged_at DateTime DEFAULT now()
)
ENGINE = MergeTree
ORDER BY (batch, kafka_topic, kafka_partition, kafka_offset)
TTL staged_at + INTERVAL 1 DAY;
