-- Routing decisions (topic router.decisions.v1), one row per event; re-loading an event is harmless.
-- ORDER BY serves the metric queries: a time window [start, end) grouped by task_type; event_id last
-- so that a re-delivered event has the same sorting key and ReplacingMergeTree folds it away.
-- Exact counts still deduplicate at query time (FINAL or LIMIT 1 BY event_id): merges are lazy.
CREATE TABLE IF NOT EXISTS routerscope.decisions
(
    -- identity
    event_id UUID,
    event_time DateTime64(3, 'UTC'),
    schema_version UInt8,
    request_id String,
    session_id String,
    -- the decision, written by the router at the decision point
    task_type LowCardinality(String),
    mode LowCardinality(String),
    entered_device Bool,
    fallback_type LowCardinality(String),
    reason LowCardinality(String),
    degrade_level UInt8,
    attempt_levels Array(UInt8),
    attempt_outcomes Array(LowCardinality(String)),
    attempt_latency_ms Array(Float64),
    cloud_calls UInt32,
    -- confidence
    confidence Nullable(Float64),
    confidence_source LowCardinality(Nullable(String)),
    threshold Nullable(Float64),
    -- budget, latency, size
    deadline_ms UInt64,
    elapsed_ms UInt64,
    latency_ms Float64,
    ttft_ms Nullable(Float64),
    input_tokens UInt64,
    output_tokens UInt64,
    -- context
    app_id Nullable(String),
    app_version Nullable(String),
    network LowCardinality(Nullable(String)),
    device_tier LowCardinality(Nullable(String)),
    has_pii Nullable(Bool),
    policy_version LowCardinality(String),
    device_model LowCardinality(Nullable(String)),
    cloud_model LowCardinality(Nullable(String)),
    shadow_agree Nullable(Bool),
    breaker_device LowCardinality(Nullable(String)),
    breaker_cloud LowCardinality(Nullable(String)),
    cost_usd Nullable(Float64),
    trace_id Nullable(String),
    span_id Nullable(String),
    -- lineage: where the row came from
    kafka_topic LowCardinality(String),
    kafka_partition UInt32,
    kafka_offset UInt64,
    ingested_at DateTime64(3, 'UTC') DEFAULT now64(3),
    -- the loader's crash recovery looks up rows by (topic, partition, offset); parts are written
    -- one batch at a time, so their offset ranges are narrow and this index skips most of them
    INDEX kafka_offset_minmax kafka_offset TYPE minmax GRANULARITY 1
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(event_time)
ORDER BY (task_type, event_time, event_id)
SETTINGS non_replicated_deduplication_window = 10000;
