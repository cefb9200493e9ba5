-- Messages that failed the contract: never dropped, kept with the raw bytes (String is binary-safe)
-- and every broken rule. ORDER BY is the message's Kafka coordinates, so a re-delivered message
-- folds away and the data-quality suite can check offsets for gaps per partition.
CREATE TABLE IF NOT EXISTS routerscope.quarantine
(
    kafka_topic LowCardinality(String),
    kafka_partition UInt32,
    kafka_offset UInt64,
    kafka_key Nullable(String),
    kafka_timestamp Nullable(DateTime64(3, 'UTC')),
    raw String,
    rules Array(LowCardinality(String)),
    error String,
    quarantined_at DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree
ORDER BY (kafka_topic, kafka_partition, kafka_offset)
SETTINGS non_replicated_deduplication_window = 10000;
