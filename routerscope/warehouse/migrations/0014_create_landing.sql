-- Raw landing for the loader's SQL parser: each batch of Kafka messages arrives here as bytes in one
-- columnar insert, and the warehouse parses and validates them (warehouse/queries/landing.py) into
-- the facts tables or the quarantine. A batch is its own partition, dropped once its rows are
-- routed; what a killed run left behind is removed by the TTL. `landed`: the message's row is already
-- in a facts table (found past the stored position), so only its ledger row is written again.
CREATE TABLE IF NOT EXISTS routerscope.landing
(
    batch String,
    kafka_topic LowCardinality(String),
    kafka_partition UInt32,
    kafka_offset UInt64,
    kafka_key Nullable(String),
    kafka_timestamp Nullable(DateTime64(3, 'UTC')),
    value String,
    landed Bool,
    landed_at DateTime DEFAULT now()
)
ENGINE = MergeTree
PARTITION BY batch
ORDER BY (kafka_topic, kafka_partition, kafka_offset)
TTL landed_at + INTERVAL 1 DAY;
