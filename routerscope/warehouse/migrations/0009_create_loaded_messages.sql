-- The loader's ledger: one row per Kafka message loaded into a facts table, with the id and the
-- event_time of the record it became. The facts tables fold duplicate deliveries of an event (same sorting key), so
-- the (partition, offset) of a folded copy disappears from them; this ledger keeps every offset.
-- The data-quality completeness check reads it: per partition, every offset between the first and
-- the last of a window's messages must be here or in the quarantine, and every record here must
-- still exist in its facts table.
-- ReplacingMergeTree on the Kafka coordinates: writing a message's row again is harmless.
CREATE TABLE IF NOT EXISTS routerscope.loaded_messages
(
    kafka_topic LowCardinality(String),
    kafka_partition UInt32,
    kafka_offset UInt64,
    record_id UUID,
    event_time DateTime64(3, 'UTC'),
    loaded_at DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree
ORDER BY (kafka_topic, kafka_partition, kafka_offset)
SETTINGS non_replicated_deduplication_window = 10000;
