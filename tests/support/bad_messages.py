"""Messages that must not stop ingest: every malformed kind of decision and every poison class, each with
exactly the rules the quarantine must name, and the good messages that used to break an insert or hide among
them (each must load exactly once)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from tests.support.events import capability_miss, decision, dumps, iso, quality_fallback
from tests.support.ingest import valid_decisions

# Every kind of malformed decision, with exactly the rules it must be quarantined with.
MALFORMED: list[tuple[str, bytes, list[str]]] = [
    ("non-JSON", b"this is not json", ["json.invalid"]),
    ("binary garbage", bytes(range(256)), ["json.invalid"]),
    ("truncated JSON", dumps(decision())[:-7], ["json.invalid"]),
    ("JSON but not an object", b"[1, 2, 3]", ["json.not_object"]),
    ("wrong enum", dumps(decision(fallback_type="sideways")), ["schema.invalid.fallback_type"]),
    (
        "out-of-range level",
        dumps(decision(degrade_level=7, attempts=[{"level": 7, "outcome": "ok", "latency_ms": 1.0}])),
        ["schema.invalid.degrade_level", "schema.invalid.attempts"],
    ),
    (
        "missing field",
        dumps({k: v for k, v in decision().items() if k != "session_id"}),
        ["schema.required.session_id"],
    ),
    ("unknown schema version", dumps(decision(schema_version=3)), ["schema.version"]),
    ("bad timestamp", dumps(decision(event_time="yesterday at noon")), ["schema.invalid.event_time"]),
    ("timestamp without zone", dumps(decision(event_time="2026-11-29T12:00:00")), ["schema.invalid.event_time"]),
    ("unknown field", dumps(decision(prompt="tell me a secret")), ["schema.unknown.prompt"]),
    # msgspec's encoding of a v1 event writes `"device_stats":null`: v1 has no such field (contract v1)
    ("v1 naming a v2 field as null", dumps(decision(device_stats=None)), ["schema.unknown.device_stats"]),
    (
        "capability without capability_miss",
        dumps(capability_miss(reason="default")),
        ["invariant.capability_iff_capability_miss"],
    ),
    (
        "capability but entered the device",
        dumps(capability_miss(entered_device=True)),
        ["invariant.capability_not_entered", "invariant.entered_first_attempt_on_device"],
    ),
    (
        "device fallback without entering the device",
        dumps(quality_fallback(entered_device=False, attempts=[{"level": 2, "outcome": "ok", "latency_ms": 1.0}])),
        ["invariant.device_fallback_entered_device"],
    ),
    (
        "device fallback served on the device",
        dumps(
            quality_fallback(
                degrade_level=1,
                attempts=[
                    {"level": 0, "outcome": "ok", "latency_ms": 1.0},
                    {"level": 1, "outcome": "ok", "latency_ms": 1.0},
                ],
            )
        ),
        ["invariant.device_fallback_level_at_least_2"],
    ),
    (
        "no fallback yet served in the cloud after entering",
        dumps(quality_fallback(fallback_type="none", reason="default")),
        ["invariant.served_on_device_level"],
    ),
    (
        "not entered but attempted on the device",
        dumps(
            capability_miss(
                attempts=[
                    {"level": 0, "outcome": "rejected", "latency_ms": 1.0},
                    {"level": 2, "outcome": "ok", "latency_ms": 1.0},
                ]
            )
        ),
        ["invariant.not_entered_no_device_attempt"],
    ),
    (
        "entered but first attempt in the cloud",
        dumps(
            decision(
                attempts=[
                    {"level": 2, "outcome": "ok", "latency_ms": 1.0},
                    {"level": 0, "outcome": "ok", "latency_ms": 1.0},
                ]
            )
        ),
        # and the level-2 attempt is a cloud call that cloud_calls = 0 does not cover
        [
            "invariant.entered_first_attempt_on_device",
            "invariant.attempt_levels_non_decreasing",
            "invariant.cloud_calls_cover_cloud_attempts",
        ],
    ),
    (
        "levels decrease",
        dumps(
            quality_fallback(
                attempts=[
                    {"level": 0, "outcome": "timeout", "latency_ms": 1.0},
                    {"level": 3, "outcome": "error", "latency_ms": 1.0},
                    {"level": 2, "outcome": "ok", "latency_ms": 1.0},
                ],
                cloud_calls=2,
            )
        ),
        ["invariant.attempt_levels_non_decreasing"],
    ),
    (
        "L1 twice",
        dumps(
            decision(
                degrade_level=1,
                attempts=[
                    {"level": 1, "outcome": "timeout", "latency_ms": 1.0},
                    {"level": 1, "outcome": "ok", "latency_ms": 1.0},
                ],
            )
        ),
        ["invariant.level_1_at_most_once"],
    ),
    (
        "last attempt is not the degrade level",
        dumps(quality_fallback(degrade_level=3)),
        ["invariant.last_attempt_is_degrade_level"],
    ),
    (
        "cloud calls below cloud attempts",
        dumps(quality_fallback(cloud_calls=0)),
        ["invariant.cloud_calls_cover_cloud_attempts"],
    ),
    ("pii pin without pii", dumps(decision(reason="pii_pin", has_pii=False)), ["invariant.pii_pin_has_pii"]),
    (
        "pii pin reached the cloud",
        dumps(quality_fallback(reason="pii_pin", has_pii=True)),
        ["invariant.pii_pin_no_cloud_attempt", "invariant.pii_pin_no_cloud_calls"],
    ),
    (
        "pii pin with cloud calls",
        dumps(decision(reason="pii_pin", has_pii=True, cloud_calls=1)),
        ["invariant.pii_pin_no_cloud_calls"],
    ),
    (
        "low confidence above threshold",
        dumps(quality_fallback(confidence=0.9)),
        ["invariant.low_confidence_below_threshold"],
    ),
]


def _id(prefix: int, i: int) -> str:
    return str(uuid.UUID(int=(prefix << 64) + i))


def deep(depth: int) -> bytes:
    """About 2 KB per thousand levels: a field nested `depth` levels deep."""
    return dumps(decision())[:-1] + b', "app_id": ' + b"[" * depth + b"]" * depth + b"}"


# Good messages that used to break an insert or hide among the poison: each must load exactly once.
def good_messages() -> list[bytes]:
    months = [  # one valid event in each of 130 months: more partitions than one INSERT may touch
        dumps(
            decision(
                event_id=_id(1, m),
                request_id=f"month-{m}",
                event_time=iso(datetime(2015 + m // 12, m % 12 + 1, 3, tzinfo=UTC)),
            )
        )
        for m in range(130)
    ]
    v2 = [
        dumps(
            decision(
                schema_version=2,
                event_id=_id(2, 0),
                request_id="v2-ledger",
                rollout_stage="canary",
                all_cloud_cost_usd=0.002,
                device_stats={
                    "peak_mem_mb": 400.0,
                    "thermal_state": "serious",
                    "decode_tps": 31.5,
                    "cold_start": False,
                },
            )
        ),
        dumps(
            decision(
                schema_version=2,
                event_id=_id(2, 1),
                request_id="v2-busy",
                entered_device=False,
                reason="device_busy",
                degrade_level=2,
                cloud_calls=1,
                confidence=None,
                attempts=[{"level": 2, "outcome": "ok", "latency_ms": 500.0}],
            )
        ),
        dumps(
            quality_fallback(
                schema_version=2,
                event_id=_id(2, 2),
                request_id="v2-answer-check",
                reason="validator_failed",
                attempts=[
                    {"level": 0, "outcome": "validator_failed", "latency_ms": 200.0},
                    {"level": 2, "outcome": "ok", "latency_ms": 700.0},
                ],
                confidence=0.9,
                answer_check="labels",
                device_input_tokens=10_000_000,
            )
        ),
    ]
    edges = [
        dumps(decision(event_id=_id(3, 0), request_id="far-future", event_time="2100-01-01T00:00:00Z")),
        dumps(
            decision(
                event_id=_id(3, 1),
                request_id="at-maxima",
                input_tokens=10_000_000,
                cloud_calls=100,
                deadline_ms=86_400_000,
                latency_ms=86_400_000,
            )
        ),
        dumps(
            decision(event_id=_id(3, 2), request_id="json-lookalike", task_type="event_id", app_id='"cloud_calls": 2')
        ),
    ]
    return valid_decisions(200) + months + v2 + edges


# (name, payload, the rules it must be quarantined with). The earlier malformed kinds come on top.
POISON: list[tuple[str, bytes | None, list[str]]] = [
    ("input_tokens 2^64", dumps(decision(input_tokens=2**64)), ["schema.range.input_tokens"]),
    ("cloud_calls 2^40", dumps(decision(cloud_calls=2**40)), ["schema.range.cloud_calls"]),
    (
        "output_tokens 2^63 (fits UInt64, past the contract)",
        dumps(decision(output_tokens=2**63)),
        ["schema.range.output_tokens"],
    ),
    ("latency 1e300", dumps(decision(latency_ms=1e300)), ["schema.range.latency_ms"]),
    ("nested 3000 levels in 6 KB", deep(3000), ["json.too_deep"]),
    ("event_time year 9999", dumps(decision(event_time="9999-12-31T23:59:59.999Z")), ["schema.range.event_time"]),
    ("event_time year 1850", dumps(decision(event_time="1850-01-01T00:00:00Z")), ["schema.range.event_time"]),
    ("repeated key", dumps(decision())[:-1] + b', "cloud_calls": 0}', ["json.duplicate_key"]),
    (
        "v1 with a v2 reason",
        dumps(
            decision(
                reason="device_busy",
                entered_device=False,
                degrade_level=2,
                cloud_calls=1,
                attempts=[{"level": 2, "outcome": "ok", "latency_ms": 1.0}],
            )
        ),
        ["schema.invalid.reason"],
    ),
    (
        "v2 stat past its maximum",
        dumps(decision(schema_version=2, device_stats={"peak_mem_mb": 1e9})),
        ["schema.range.device_stats.peak_mem_mb"],
    ),
    (
        "answer_check longer than its 32 characters",
        dumps(decision(schema_version=2, answer_check="labels" + "_x" * 20)),
        ["schema.invalid.answer_check"],
    ),
    (
        "answer_check not a check's name",
        dumps(decision(schema_version=2, answer_check="Labels; DROP")),
        ["schema.invalid.answer_check"],
    ),
    (
        "device_input_tokens negative",
        dumps(decision(schema_version=2, device_input_tokens=-1)),
        ["schema.invalid.device_input_tokens"],
    ),
    (
        "device_input_tokens 2^40",
        dumps(decision(schema_version=2, device_input_tokens=2**40)),
        ["schema.range.device_input_tokens"],
    ),
    ("v1 naming answer_check", dumps(decision(answer_check="labels")), ["schema.unknown.answer_check"]),
    ("1.5 MB", b'{"pad": "' + b"x" * 1_500_000 + b'"}', ["json.too_large"]),
    ("tombstone (no value)", None, ["json.invalid"]),
    # valid for the contract, refused by the warehouse (a CHECK constraint the test adds): the last line
    ("refused by the warehouse", dumps(decision(request_id="reject-me")), ["insert.rejected"]),
]
