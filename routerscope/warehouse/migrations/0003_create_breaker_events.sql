-- Circuit-breaker transitions (topic router.breakers.v1). ORDER BY serves the breaker timeline of
-- the on-call view: per instance and boundary, in time; event_id last for de-duplication.
CREATE TABLE IF NOT EXISTS routerscope.breaker_events
(
    event_id UUID,
    event_time DateTime64(3, 'UTC'),
    schema_version UInt8,
    instance_id String,
    boundary LowCardinality(String),
    from_state LowCardinality(String),
    to_state LowCardinality(String),
    failure_rate Float64,
    window_s Float64,
    trigger LowCardinality(Nullable(String)),
    -- lineage
    kafka_topic LowCardinality(String),
    kafka_partition UInt32,
    kafka_offset UInt64,
    ingested_at DateTime64(3, 'UTC') DEFAULT now64(3),
    -- the loader's crash recovery looks up rows by (topic, partition, offset); parts are written
    -- one batch at a time, so their offset ranges are narrow and this index skips most of them
    INDEX kafka_offset_minmax kafka_offset TYPE minmax GRANULARITY 1
)
ENGINE = ReplacingMergeTree
ORDER BY (instance_id, boundary, event_time, event_id)
SETTINGS non_replicated_deduplication_window = 10000;
