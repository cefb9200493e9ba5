"""Event factories for tests: valid contract events as dicts, with overrides."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import msgspec

BASE_TIME = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)


def iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_id(n: int | None = None) -> str:
    return str(uuid.UUID(int=n)) if n is not None else str(uuid.uuid4())


def decision(**overrides) -> dict:
    """A valid live decision served on the device at L0."""
    event = {
        "schema_version": 1,
        "event_id": new_id(),
        "event_time": iso(BASE_TIME),
        "request_id": "req-1",
        "session_id": "sess-1",
        "task_type": "intent_classify",
        "mode": "live",
        "entered_device": True,
        "fallback_type": "none",
        "reason": "default",
        "degrade_level": 0,
        "attempts": [{"level": 0, "outcome": "ok", "latency_ms": 180.0}],
        "cloud_calls": 0,
        "confidence": 0.91,
        "threshold": 0.7,
        "deadline_ms": 2000,
        "elapsed_ms": 120,
        "latency_ms": 190.5,
        "input_tokens": 42,
        "output_tokens": 6,
        "policy_version": "2026-11-29.1",
        "network": "wifi",
        "has_pii": False,
    }
    event.update(overrides)
    return event


def quality_fallback(**overrides) -> dict:
    """A valid device attempt below threshold, served by the small cloud model (L2)."""
    return decision(
        **{
            "fallback_type": "quality",
            "reason": "low_confidence",
            "degrade_level": 2,
            "attempts": [
                {"level": 0, "outcome": "low_confidence", "latency_ms": 200.0},
                {"level": 2, "outcome": "ok", "latency_ms": 700.0},
            ],
            "cloud_calls": 1,
            "confidence": 0.4,
            "threshold": 0.7,
            "cloud_model": "cloud-small",
            **overrides,
        }
    )


def capability_miss(**overrides) -> dict:
    """A valid admission rejection: never entered the device, served by the cloud (L2)."""
    return decision(
        **{
            "task_type": "long_summary",
            "entered_device": False,
            "fallback_type": "capability",
            "reason": "capability_miss",
            "degrade_level": 2,
            "attempts": [{"level": 2, "outcome": "ok", "latency_ms": 900.0}],
            "cloud_calls": 1,
            "confidence": None,
            **overrides,
        }
    )


def label(**overrides) -> dict:
    event = {
        "schema_version": 1,
        "label_id": new_id(),
        "event_time": iso(BASE_TIME + timedelta(hours=1)),
        "request_id": "req-1",
        "source": "human_review",
        "device_acceptable": True,
        "route_correct": True,
        "labeler": "reviewer-7",
    }
    event.update(overrides)
    return event


def breaker(**overrides) -> dict:
    event = {
        "schema_version": 1,
        "event_id": new_id(),
        "event_time": iso(BASE_TIME),
        "instance_id": "router-a",
        "boundary": "cloud",
        "from_state": "closed",
        "to_state": "open",
        "failure_rate": 0.6,
        "window_s": 30,
        "trigger": "error_rate",
    }
    event.update(overrides)
    return event


def dumps(event: dict) -> bytes:
    return msgspec.json.encode(event)
