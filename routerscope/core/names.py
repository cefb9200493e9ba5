"""Names used across packages, defined once: topics, message keys, tables, consumer groups."""

from __future__ import annotations

# Kafka topics (docs/contract.md). The short names are what the command line accepts.
TOPIC_DECISIONS = "router.decisions.v1"
TOPIC_LABELS = "router.labels.v1"
TOPIC_BREAKERS = "router.breakers.v1"
TOPIC_POLICY = "router.policy.v1"  # the closed loop's transitions (docs/loop.md#events)

TOPICS: dict[str, str] = {
    "decisions": TOPIC_DECISIONS,
    "labels": TOPIC_LABELS,
    "breakers": TOPIC_BREAKERS,
    "policy": TOPIC_POLICY,
}

# OTLP in (docs/otlp.md): OTLP trace messages in protobuf, one trace per message, keyed by trace id, written by
# `routerscope collect` or an OpenTelemetry Collector's Kafka exporter (whose default traces topic this is).
# Not in TOPICS: its messages are not events of the contract; the loader maps them into decisions first.
TOPIC_OTLP = "otlp_spans"
# The loader's positions in it (ingest_offsets.consumer), apart from those of the three topics.
CONSUMER_OTLP = "routerscope-otlp"

# The JSON field whose value is the message key of each topic (docs/contract.md).
TOPIC_KEY_FIELD: dict[str, str] = {
    TOPIC_DECISIONS: "session_id",
    TOPIC_LABELS: "request_id",
    TOPIC_BREAKERS: "instance_id",
    TOPIC_POLICY: "policy_id",
}

# Warehouse (docs/architecture.md §6).
DATABASE = "routerscope"
TABLE_DECISIONS = "decisions"
TABLE_LABELS = "labels"
TABLE_BREAKER_EVENTS = "breaker_events"
TABLE_POLICY_EVENTS = "policy_events"
TABLE_QUARANTINE = "quarantine"
TABLE_INGEST_OFFSETS = "ingest_offsets"
TABLE_MIGRATIONS = "schema_migrations"
TABLE_METRIC_WINDOWS = "metric_windows"
TABLE_CALIBRATION_WINDOWS = "calibration_windows"
TABLE_DQ_RESULTS = "dq_results"
TABLE_LOADED_MESSAGES = "loaded_messages"
TABLE_ALERTS = "alerts"
TABLE_ALERT_DELIVERIES = "alert_deliveries"
TABLE_ALERT_EVALUATIONS = "alert_evaluations"
TABLE_REPLAY_RERUNS = "replay_reruns"
# The removed SQL parser's tables (migrations 0014, 0018: frozen, so they stay; nothing writes them, and their
# rows expired after a day by TTL).
TABLE_LANDING = "landing"
TABLE_LANDING_VERDICTS = "landing_verdicts"
TABLE_DECISION_COPIES_DERIVED = "decision_copies_derived"  # how far decision_later_copies is complete (0020)
TABLE_DECISION_LATER_COPIES = "decision_later_copies"  # copies of an event_id with an earlier copy (0020)

# Every table, as SQL text names it: `$decisions` in a query module's SQL becomes `routerscope.decisions`
# (routerscope.warehouse.sql.named substitutes them).
TABLES: dict[str, str] = {
    t: f"{DATABASE}.{t}"
    for t in (
        TABLE_DECISIONS,
        TABLE_LABELS,
        TABLE_BREAKER_EVENTS,
        TABLE_POLICY_EVENTS,
        TABLE_QUARANTINE,
        TABLE_INGEST_OFFSETS,
        TABLE_MIGRATIONS,
        TABLE_METRIC_WINDOWS,
        TABLE_CALIBRATION_WINDOWS,
        TABLE_DQ_RESULTS,
        TABLE_LOADED_MESSAGES,
        TABLE_ALERTS,
        TABLE_ALERT_DELIVERIES,
        TABLE_ALERT_EVALUATIONS,
        TABLE_REPLAY_RERUNS,
        TABLE_LANDING,
        TABLE_LANDING_VERDICTS,
        TABLE_DECISION_COPIES_DERIVED,
        TABLE_DECISION_LATER_COPIES,
    )
}

# Which table each topic lands in.
TOPIC_TABLE: dict[str, str] = {
    TOPIC_DECISIONS: TABLE_DECISIONS,
    TOPIC_LABELS: TABLE_LABELS,
    TOPIC_BREAKERS: TABLE_BREAKER_EVENTS,
    TOPIC_POLICY: TABLE_POLICY_EVENTS,
}

# Consumer group of the loader (offsets are stored in the warehouse; the group is for lag tools).
CONSUMER_GROUP_LOADER = "routerscope-loader"

# The request-text store under a home (opt-in request texts for the replay, divergence samples).
REQUEST_TEXTS = "request_texts.sqlite"
