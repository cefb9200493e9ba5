"""The warehouse's tables as the code writes them: the column order of each facts table's migration, the
Kafka lineage columns, and which table each topic's events land in. The loader builds rows in these orders
(`routerscope.warehouse.ingest.rows`) and the SQL that lands or reads rows names the same columns
(`routerscope.warehouse.queries`), so both read them here, below either."""

from __future__ import annotations

from routerscope.core import names

DECISION_COLUMNS = (
    "event_id",
    "event_time",
    "schema_version",
    "request_id",
    "session_id",
    "task_type",
    "mode",
    "entered_device",
    "fallback_type",
    "reason",
    "degrade_level",
    "attempt_levels",
    "attempt_outcomes",
    "attempt_latency_ms",
    "cloud_calls",
    "confidence",
    "confidence_source",
    "threshold",
    "deadline_ms",
    "elapsed_ms",
    "latency_ms",
    "ttft_ms",
    "input_tokens",
    "output_tokens",
    "app_id",
    "app_version",
    "network",
    "device_tier",
    "has_pii",
    "policy_version",
    "device_model",
    "cloud_model",
    "shadow_agree",
    "breaker_device",
    "breaker_cloud",
    "cost_usd",
    "trace_id",
    "span_id",
    # contract v2 (NULL for v1 events)
    "device_peak_mem_mb",
    "device_thermal_state",
    "device_decode_tps",
    "device_prefill_tps",
    "device_cold_start",
    "device_load_ms",
    "all_cloud_cost_usd",
    "rollout_stage",
    "device_resident_mem_mb",  # contract v2, optional (migration 0016)
    "label_pi",  # contract v2, optional (migration 0040): the labeling design's inclusion probability
    "label_design_id",
    "policy_id",  # contract v2, optional: the closed loop's canary (migration 0051)
    "experiment_id",
    "arm",
    "assignment_bucket",
    "answer_check",  # contract v2, optional: the serve-time answer checks (migration 0060)
    "device_input_tokens",
    "kafka_topic",
    "kafka_partition",
    "kafka_offset",
)

LABEL_COLUMNS = (
    "label_id",
    "event_time",
    "schema_version",
    "request_id",
    "source",
    "device_acceptable",
    "route_correct",
    "labeler",
    "kafka_topic",
    "kafka_partition",
    "kafka_offset",
)

BREAKER_COLUMNS = (
    "event_id",
    "event_time",
    "schema_version",
    "instance_id",
    "boundary",
    "from_state",
    "to_state",
    "failure_rate",
    "window_s",
    "trigger",
    "seq",  # optional (migration 0016): NULL for events from before it
    "kafka_topic",
    "kafka_partition",
    "kafka_offset",
)

POLICY_EVENT_COLUMNS = (
    "event_id",
    "event_time",
    "schema_version",
    "task_type",
    "policy_id",
    "seq",
    "from_state",
    "to_state",
    "reason",
    "evidence_file",
    "evidence_hash",
    "actor",
    "experiment_id",
    "metric",
    "estimate",
    "ci_low",
    "ci_high",
    "n",
    "metrics",
    "kafka_topic",
    "kafka_partition",
    "kafka_offset",
)

LEDGER_COLUMNS = ("kafka_topic", "kafka_partition", "kafka_offset", "record_id", "event_time")

# The id column of each topic's record (what the ledger stores as record_id).
RECORD_ID = {
    names.TOPIC_DECISIONS: "event_id",
    names.TOPIC_LABELS: "label_id",
    names.TOPIC_BREAKERS: "event_id",
    names.TOPIC_POLICY: "event_id",
}

QUARANTINE_COLUMNS = (
    "kafka_topic",
    "kafka_partition",
    "kafka_offset",
    "kafka_key",
    "kafka_timestamp",
    "raw",
    "rules",
    "error",
)

# The positions stored after the rows they cover (`ingest_offsets`; the loader's, and the OTLP step's).
OFFSET_COLUMNS = (
    "consumer",
    "kafka_topic",
    "kafka_partition",
    "next_offset",
    "batch_token",
    "rows_loaded",
    "rows_quarantined",
    "last_fingerprint",
)

# topic -> (table, column names) of the facts table its events land in
TOPIC_TABLES = {
    names.TOPIC_DECISIONS: (names.TABLE_DECISIONS, DECISION_COLUMNS),
    names.TOPIC_LABELS: (names.TABLE_LABELS, LABEL_COLUMNS),
    names.TOPIC_BREAKERS: (names.TABLE_BREAKER_EVENTS, BREAKER_COLUMNS),
    names.TOPIC_POLICY: (names.TABLE_POLICY_EVENTS, POLICY_EVENT_COLUMNS),
}
