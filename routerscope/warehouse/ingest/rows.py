"""Columns of the facts tables, built from decoded contract events (one list per column).

The loader inserts column-oriented batches (`client.insert(..., column_oriented=True)`), so each
table has one function turning a list of events plus their Kafka lineage into the table's columns,
in the column order of its migration. Unset optional fields become NULL.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from msgspec import UNSET

from routerscope.core import names
from routerscope.core.timeutil import UTC
from routerscope.warehouse.schema import (
    BREAKER_COLUMNS,
    DECISION_COLUMNS,
    LABEL_COLUMNS,
    POLICY_EVENT_COLUMNS,
    RECORD_ID,
)

_UTC = UTC


def _opt(values):
    """Unset optional fields are NULL in the warehouse."""
    return [None if v is UNSET else v for v in values]


def _lineage(topic: str, partitions: Sequence[int], offsets: Sequence[int]) -> list:
    return [[topic] * len(offsets), list(partitions), list(offsets)]


def decision_columns(events: Sequence, topic: str, partitions: Sequence[int], offsets: Sequence[int]) -> list:
    breakers = [e.breaker for e in events]
    attempts = [e.attempts for e in events]
    stats = [e.device_stats for e in events]
    return [
        [e.event_id for e in events],
        [e.event_time for e in events],
        [e.schema_version for e in events],
        [e.request_id for e in events],
        [e.session_id for e in events],
        [e.task_type for e in events],
        [e.mode for e in events],
        [e.entered_device for e in events],
        [e.fallback_type for e in events],
        [e.reason for e in events],
        [e.degrade_level for e in events],
        [[a.level for a in at] for at in attempts],
        [[a.outcome for a in at] for at in attempts],
        [[a.latency_ms for a in at] for at in attempts],
        [e.cloud_calls for e in events],
        [e.confidence for e in events],
        _opt([e.confidence_source for e in events]),
        [e.threshold for e in events],
        [e.deadline_ms for e in events],
        [e.elapsed_ms for e in events],
        [e.latency_ms for e in events],
        [e.ttft_ms for e in events],
        [e.input_tokens for e in events],
        [e.output_tokens for e in events],
        [e.app_id for e in events],
        [e.app_version for e in events],
        _opt([e.network for e in events]),
        [e.device_tier for e in events],
        _opt([e.has_pii for e in events]),
        [e.policy_version for e in events],
        [e.device_model for e in events],
        [e.cloud_model for e in events],
        [e.shadow_agree for e in events],
        [None if b is UNSET else _unset_none(b.device) for b in breakers],
        [None if b is UNSET else _unset_none(b.cloud) for b in breakers],
        _opt([e.cost_usd for e in events]),
        [e.trace_id for e in events],
        [e.span_id for e in events],
        *_device_stats(stats),
        _opt([e.all_cloud_cost_usd for e in events]),
        _opt([e.rollout_stage for e in events]),
        [None if s is None else s.resident_mem_mb for s in stats],
        _opt([e.label_pi for e in events]),
        _opt([e.label_design_id for e in events]),
        _opt([e.policy_id for e in events]),
        _opt([e.experiment_id for e in events]),
        _opt([e.arm for e in events]),
        _opt([e.assignment_bucket for e in events]),
        _opt([e.answer_check for e in events]),
        _opt([e.device_input_tokens for e in events]),
        *_lineage(topic, partitions, offsets),
    ]


_DEVICE_STATS = ("peak_mem_mb", "thermal_state", "decode_tps", "prefill_tps", "cold_start", "load_ms")


def _device_stats(stats: list) -> list[list]:
    """The six device_* columns; every one NULL for an event without device_stats (all of v1)."""
    if all(s is None for s in stats):
        return [[None] * len(stats) for _ in _DEVICE_STATS]
    return [[None if s is None else _unset_none(getattr(s, name)) for s in stats] for name in _DEVICE_STATS]


def _unset_none(value):
    return None if value is UNSET else value


def label_columns(events: Sequence, topic: str, partitions: Sequence[int], offsets: Sequence[int]) -> list:
    return [
        [e.label_id for e in events],
        [e.event_time for e in events],
        [e.schema_version for e in events],
        [e.request_id for e in events],
        [e.source for e in events],
        [e.device_acceptable for e in events],
        [e.route_correct for e in events],
        [e.labeler for e in events],
        *_lineage(topic, partitions, offsets),
    ]


def breaker_columns(events: Sequence, topic: str, partitions: Sequence[int], offsets: Sequence[int]) -> list:
    return [
        [e.event_id for e in events],
        [e.event_time for e in events],
        [e.schema_version for e in events],
        [e.instance_id for e in events],
        [e.boundary for e in events],
        [e.from_state for e in events],
        [e.to_state for e in events],
        [e.failure_rate for e in events],
        [e.window_s for e in events],
        [e.trigger for e in events],
        _opt([e.seq for e in events]),
        *_lineage(topic, partitions, offsets),
    ]


def policy_columns(events: Sequence, topic: str, partitions: Sequence[int], offsets: Sequence[int]) -> list:
    return [
        *([getattr(e, name) for e in events] for name in POLICY_EVENT_COLUMNS[:-3]),
        *_lineage(topic, partitions, offsets),
    ]


def ledger_columns(events: Sequence, topic: str, partitions: Sequence[int], offsets: Sequence[int]) -> list:
    """The `loaded_messages` rows of loaded events (their Kafka coordinates and record ids)."""
    id_field = RECORD_ID[topic]
    return [
        *_lineage(topic, partitions, offsets),
        [getattr(e, id_field) for e in events],
        [e.event_time for e in events],
    ]


# topic -> (table, column names, column builder)
FACTS = {
    names.TOPIC_DECISIONS: (names.TABLE_DECISIONS, DECISION_COLUMNS, decision_columns),
    names.TOPIC_LABELS: (names.TABLE_LABELS, LABEL_COLUMNS, label_columns),
    names.TOPIC_BREAKERS: (names.TABLE_BREAKER_EVENTS, BREAKER_COLUMNS, breaker_columns),
    names.TOPIC_POLICY: (names.TABLE_POLICY_EVENTS, POLICY_EVENT_COLUMNS, policy_columns),
}


# Kafka timestamps outside the quarantine column's DateTime64(3) range are stored as NULL.
_KAFKA_MS_MIN = 0
_KAFKA_MS_MAX = int(datetime(2299, 12, 31, 23, 59, 59, tzinfo=_UTC).timestamp() * 1000)


def kafka_time(timestamp: tuple[int, int]) -> datetime | None:
    """A confluent-kafka `Message.timestamp()` (type, ms) as a UTC datetime; None when absent or
    outside what the warehouse can store (any producer sets its own CreateTime)."""
    kind, ms = timestamp
    if kind == 0 or not _KAFKA_MS_MIN <= ms <= _KAFKA_MS_MAX:  # TIMESTAMP_NOT_AVAILABLE, or absurd
        return None
    return datetime.fromtimestamp(ms / 1000, tz=_UTC)
