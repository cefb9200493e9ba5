-- The closed loop's transitions (topic router.policy.v1, docs/loop.md#events): one row per transition of a
-- candidate policy. event_id is derived from the policy and the transition's number, so a transition
-- published twice (a crash between its file and its event) is one row after merges (read with FINAL).
CREATE TABLE IF NOT EXISTS routerscope.policy_events
(
    event_id UUID,
    event_time DateTime64(3, 'UTC'),
    schema_version UInt8,
    task_type LowCardinality(String),
    policy_id String,
    seq UInt32,
    from_state LowCardinality(Nullable(String)),
    to_state LowCardinality(String),
    reason LowCardinality(String),
    evidence_file String,
    evidence_hash String,
    actor LowCardinality(String),
    experiment_id Nullable(String),
    metric LowCardinality(Nullable(String)),
    estimate Nullable(Float64),
    ci_low Nullable(Float64),
    ci_high Nullable(Float64),
    n Nullable(UInt64),
    metrics String,
    -- lineage
    kafka_topic LowCardinality(String),
    kafka_partition UInt32,
    kafka_offset UInt64,
    ingested_at DateTime64(3, 'UTC') DEFAULT now64(3),
    INDEX kafka_offset_minmax kafka_offset TYPE minmax GRANULARITY 1
)
ENGINE = ReplacingMergeTree
ORDER BY (task_type, policy_id, seq, event_id)
SETTINGS non_replicated_deduplication_window = 10000;
