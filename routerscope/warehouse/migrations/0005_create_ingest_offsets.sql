-- The loader's position: the next offset to read per (consumer, topic, partition), written after
-- the rows it covers. ReplacingMergeTree versioned by next_offset keeps the furthest position;
-- readers take max(next_offset), so an unmerged older row never rewinds the loader.
CREATE TABLE IF NOT EXISTS routerscope.ingest_offsets
(
    consumer LowCardinality(String),
    kafka_topic LowCardinality(String),
    kafka_partition UInt32,
    next_offset UInt64,
    batch_token String,
    rows_loaded UInt64,
    rows_quarantined UInt64,
    committed_at DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree(next_offset)
ORDER BY (consumer, kafka_topic, kafka_partition);
