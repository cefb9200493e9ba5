-- alert_deliveries
CREATE TABLE routerscope.alert_deliveries (`alert_key` String, `first_seen` DateTime64(3, 'UTC'), `event` LowCardinality(String), `attempt` UInt8, `status_code` Nullable(UInt16), `error` String, `attempted_at` DateTime64(3, 'UTC') DEFAULT now64(3)) ENGINE = MergeTree ORDER BY (alert_key, first_seen, attempted_at) SETTINGS index_granularity = 8192;

-- alert_evaluations
CREATE TABLE routerscope.alert_evaluations (`evaluated_at` DateTime64(3, 'UTC') DEFAULT now64(3), `as_of` DateTime64(3, 'UTC'), `rules_path` String, `rule_version` LowCardinality(String), `rules_sha256` String, `by` LowCardinality(String)) ENGINE = MergeTree ORDER BY evaluated_at SETTINGS index_granularity = 8192;

-- alerts
CREATE TABLE routerscope.alerts (`alert_key` String, `first_seen` DateTime64(3, 'UTC'), `rule` LowCardinality(String), `task_type` LowCardinality(String), `severity` LowCardinality(String), `action` LowCardinality(String), `summary` String, `status` LowCardinality(String), `last_seen` DateTime64(3, 'UTC'), `resolved_at` Nullable(DateTime64(3, 'UTC')), `trip_values` String, `rule_version` LowCardinality(String), `notify_state` LowCardinality(String), `updated_at` DateTime64(3, 'UTC') DEFAULT now64(3)) ENGINE = ReplacingMergeTree(updated_at) ORDER BY (alert_key, first_seen) SETTINGS index_granularity = 8192;

-- breaker_events
CREATE TABLE routerscope.breaker_events (`event_id` UUID, `event_time` DateTime64(3, 'UTC'), `schema_version` UInt8, `instance_id` String, `boundary` LowCardinality(String), `from_state` LowCardinality(String), `to_state` LowCardinality(String), `failure_rate` Float64, `window_s` Float64, `trigger` LowCardinality(Nullable(String)), `seq` Nullable(UInt32), `kafka_topic` LowCardinality(String), `kafka_partition` UInt32, `kafka_offset` UInt64, `ingested_at` DateTime64(3, 'UTC') DEFAULT now64(3), INDEX kafka_offset_minmax kafka_offset TYPE minmax GRANULARITY 1) ENGINE = ReplacingMergeTree ORDER BY (instance_id, boundary, event_time, event_id) SETTINGS non_replicated_deduplication_window = 10000, index_granularity = 8192;

-- calibration_windows
CREATE TABLE routerscope.calibration_windows (`task_type` LowCardinality(String), `window_start` DateTime64(3, 'UTC'), `window_end` DateTime64(3, 'UTC'), `labeled` UInt64, `monotonic` Bool, `recommended_threshold` Nullable(Float64), `current_threshold` Nullable(Float64), `target` Float64, `min_n` UInt32, `calibration` String, `computed_at` DateTime64(3, 'UTC') DEFAULT now64(3)) ENGINE = ReplacingMergeTree(computed_at) ORDER BY (task_type, window_start) SETTINGS index_granularity = 8192;

-- decision_copies_derived
CREATE TABLE routerscope.decision_copies_derived (`derived_through` DateTime64(3, 'UTC'), `derived_at` DateTime64(3, 'UTC') DEFAULT now64(3)) ENGINE = MergeTree ORDER BY derived_through SETTINGS index_granularity = 8192;

-- decision_later_copies
CREATE TABLE routerscope.decision_later_copies (`event_time` DateTime64(3, 'UTC'), `event_id` UUID, `earlier_time` DateTime64(3, 'UTC')) ENGINE = ReplacingMergeTree PARTITION BY toYYYYMM(event_time) ORDER BY (event_time, event_id, earlier_time) SETTINGS index_granularity = 8192;

-- decision_level_hours
CREATE TABLE routerscope.decision_level_hours (`hour` DateTime('UTC'), `task_type` LowCardinality(String), `requests` UInt64, `l0` UInt64, `l1` UInt64, `l2` UInt64, `l3` UInt64, `l4` UInt64, `counted_through` DateTime64(3, 'UTC'), `counted_at` DateTime64(3, 'UTC')) ENGINE = MergeTree ORDER BY (hour, counted_at, task_type) SETTINGS index_granularity = 8192;

-- decisions
CREATE TABLE routerscope.decisions (`event_id` UUID, `event_time` DateTime64(3, 'UTC'), `schema_version` UInt8, `request_id` String, `session_id` String, `task_type` LowCardinality(String), `mode` LowCardinality(String), `entered_device` Bool, `fallback_type` LowCardinality(String), `reason` LowCardinality(String), `degrade_level` UInt8, `attempt_levels` Array(UInt8), `attempt_outcomes` Array(LowCardinality(String)), `attempt_latency_ms` Array(Float64), `cloud_calls` UInt32, `confidence` Nullable(Float64), `confidence_source` LowCardinality(Nullable(String)), `threshold` Nullable(Float64), `deadline_ms` UInt64, `elapsed_ms` UInt64, `latency_ms` Float64, `ttft_ms` Nullable(Float64), `input_tokens` UInt64, `output_tokens` UInt64, `app_id` Nullable(String), `app_version` Nullable(String), `network` LowCardinality(Nullable(String)), `device_tier` LowCardinality(Nullable(String)), `has_pii` Nullable(Bool), `policy_version` LowCardinality(String), `device_model` LowCardinality(Nullable(String)), `cloud_model` LowCardinality(Nullable(String)), `shadow_agree` Nullable(Bool), `breaker_device` LowCardinality(Nullable(String)), `breaker_cloud` LowCardinality(Nullable(String)), `cost_usd` Nullable(Float64), `trace_id` Nullable(String), `span_id` Nullable(String), `device_peak_mem_mb` Nullable(Float64), `device_thermal_state` LowCardinality(Nullable(String)), `device_decode_tps` Nullable(Float64), `device_prefill_tps` Nullable(Float64), `device_cold_start` Nullable(Bool), `device_load_ms` Nullable(Float64), `all_cloud_cost_usd` Nullable(Float64), `rollout_stage` LowCardinality(Nullable(String)), `device_resident_mem_mb` Nullable(Float64), `label_pi` Nullable(Float64), `label_design_id` LowCardinality(Nullable(String)), `kafka_topic` LowCardinality(String), `kafka_partition` UInt32, `kafka_offset` UInt64, `ingested_at` DateTime64(3, 'UTC') DEFAULT now64(3), INDEX kafka_offset_minmax kafka_offset TYPE minmax GRANULARITY 1, INDEX ingested_at_minmax ingested_at TYPE minmax GRANULARITY 1) ENGINE = ReplacingMergeTree PARTITION BY toYYYYMM(event_time) ORDER BY (task_type, event_time, event_id) SETTINGS non_replicated_deduplication_window = 10000, index_granularity = 8192;

-- dq_results
CREATE TABLE routerscope.dq_results (`suite` LowCardinality(String), `check_name` LowCardinality(String), `window_start` DateTime64(3, 'UTC'), `window_end` DateTime64(3, 'UTC'), `success` Bool, `blocking` Bool, `unexpected_count` UInt64, `element_count` UInt64, `sample_ids` Array(String), `observed` String, `run_at` DateTime64(3, 'UTC') DEFAULT now64(3)) ENGINE = MergeTree ORDER BY (window_start, check_name, run_at) SETTINGS index_granularity = 8192;

-- ingest_offsets
CREATE TABLE routerscope.ingest_offsets (`consumer` LowCardinality(String), `kafka_topic` LowCardinality(String), `kafka_partition` UInt32, `next_offset` UInt64, `batch_token` String, `rows_loaded` UInt64, `rows_quarantined` UInt64, `last_fingerprint` String DEFAULT '', `committed_at` DateTime64(3, 'UTC') DEFAULT now64(3)) ENGINE = ReplacingMergeTree(next_offset) ORDER BY (consumer, kafka_topic, kafka_partition) SETTINGS index_granularity = 8192;

-- labels
CREATE TABLE routerscope.labels (`label_id` UUID, `event_time` DateTime64(3, 'UTC'), `schema_version` UInt8, `request_id` String, `source` LowCardinality(String), `device_acceptable` Nullable(Bool), `route_correct` Nullable(Bool), `labeler` Nullable(String), `kafka_topic` LowCardinality(String), `kafka_partition` UInt32, `kafka_offset` UInt64, `ingested_at` DateTime64(3, 'UTC') DEFAULT now64(3), INDEX kafka_offset_minmax kafka_offset TYPE minmax GRANULARITY 1) ENGINE = ReplacingMergeTree ORDER BY (request_id, label_id) SETTINGS non_replicated_deduplication_window = 10000, index_granularity = 8192;

-- landing
CREATE TABLE routerscope.landing (`batch` String, `kafka_topic` LowCardinality(String), `kafka_partition` UInt32, `kafka_offset` UInt64, `kafka_key` Nullable(String), `kafka_timestamp` Nullable(DateTime64(3, 'UTC')), `value` String, `landed` Bool, `landed_at` DateTime DEFAULT now()) ENGINE = MergeTree PARTITION BY batch ORDER BY (kafka_topic, kafka_partition, kafka_offset) TTL landed_at + toIntervalDay(1) SETTINGS index_granularity = 8192;

-- landing_verdicts
CREATE TABLE routerscope.landing_verdicts (`batch` String, `kafka_topic` LowCardinality(String), `kafka_partition` UInt32, `kafka_offset` UInt64, `landed` Bool, `python` Bool, `staged_at` DateTime DEFAULT now()) ENGINE = MergeTree ORDER BY (batch, kafka_topic, kafka_partition, kafka_offset) TTL staged_at + toIntervalDay(1) SETTINGS index_granularity = 8192;

-- loaded_messages
CREATE TABLE routerscope.loaded_messages (`kafka_topic` LowCardinality(String), `kafka_partition` UInt32, `kafka_offset` UInt64, `record_id` UUID, `event_time` DateTime64(3, 'UTC'), `loaded_at` DateTime64(3, 'UTC') DEFAULT now64(3), `rejected` UInt8 DEFAULT 0) ENGINE = ReplacingMergeTree ORDER BY (kafka_topic, kafka_partition, kafka_offset) SETTINGS non_replicated_deduplication_window = 10000, index_granularity = 8192;

-- metric_windows
CREATE TABLE routerscope.metric_windows (`grain` LowCardinality(String), `task_type` LowCardinality(String), `window_start` DateTime64(3, 'UTC'), `window_end` DateTime64(3, 'UTC'), `requests` UInt64, `device_entered` UInt64, `sessions` UInt64, `fallback_rate` Nullable(Float64), `naive_fallback_rate` Nullable(Float64), `capability_reject_rate` Nullable(Float64), `device_bypass_rate` Nullable(Float64), `false_fallback_rate` Nullable(Float64), `false_fallback_labeled` UInt64, `missed_fallback_rate` Nullable(Float64), `missed_fallback_labeled` UInt64, `route_accuracy` Nullable(Float64), `l2_l3_share` Nullable(Float64), `l2_l3_delta_pp` Nullable(Float64), `l2_l3_z` Nullable(Float64), `l2_l3_psi` Nullable(Float64), `l2_l3_drifting` Bool, `shadow_agreement_rate` Nullable(Float64), `metrics` String, `computed_at` DateTime64(3, 'UTC') DEFAULT now64(3)) ENGINE = ReplacingMergeTree(computed_at) ORDER BY (grain, task_type, window_start) SETTINGS index_granularity = 8192;

-- quarantine
CREATE TABLE routerscope.quarantine (`kafka_topic` LowCardinality(String), `kafka_partition` UInt32, `kafka_offset` UInt64, `kafka_key` Nullable(String), `kafka_timestamp` Nullable(DateTime64(3, 'UTC')), `raw` String, `rules` Array(LowCardinality(String)), `error` String, `quarantined_at` DateTime64(3, 'UTC') DEFAULT now64(3)) ENGINE = ReplacingMergeTree ORDER BY (kafka_topic, kafka_partition, kafka_offset) SETTINGS non_replicated_deduplication_window = 10000, index_granularity = 8192;

-- replay_reruns
CREATE TABLE routerscope.replay_reruns (`request_id` String, `task_type` LowCardinality(String), `event_time` DateTime64(3, 'UTC'), `runs` UInt8, `agree` Bool, `answer_hashes` Array(String), `device_model` LowCardinality(String), `replayed_at` DateTime64(3, 'UTC') DEFAULT now64(3)) ENGINE = ReplacingMergeTree(replayed_at) ORDER BY (task_type, event_time, request_id) SETTINGS index_granularity = 8192;

-- schema_migrations
CREATE TABLE routerscope.schema_migrations (`version` UInt32, `name` String, `checksum` String, `applied_at` DateTime64(3, 'UTC') DEFAULT now64(3)) ENGINE = MergeTree ORDER BY version SETTINGS index_granularity = 8192;
