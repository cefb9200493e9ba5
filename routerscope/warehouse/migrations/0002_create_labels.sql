-- Review labels (topic router.labels.v1). Labels join decisions by request_id whatever their own
-- event_time (they may arrive days later), so ORDER BY serves that join: request_id first,
-- label_id last so a re-delivered label folds away.
CREATE TABLE IF NOT EXISTS routerscope.labels
(
    label_id UUID,
    event_time DateTime64(3, 'UTC'),
    schema_version UInt8,
    request_id String,
    source LowCardinality(String),
    device_acceptable Nullable(Bool),
    route_correct Nullable(Bool),
    labeler Nullable(String),
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
ORDER BY (request_id, label_id)
SETTINGS non_replicated_deduplication_window = 10000;
