"""The event contract: one frozen record type per event (docs/contract.md).

Decision events come in schema versions 1 and 2 on the same topic (v1 stays valid forever): v2 adds
the optional `device_stats`, `all_cloud_cost_usd` and `rollout_stage`, the reasons `device_busy` and
`truncated`, and an attempt's optional `abandoned` (docs/router.md);
one record type carries both, and `routerscope.contract.validation` refuses v2-only content in a v1 event.

The types are `msgspec.Struct(frozen=True)`: frozen, slotted records with the same role as a frozen
dataclass, chosen because msgspec decodes *and* validates JSON into them in C (≈ 600k events/s on
this machine, versus ≈ 4k/s for the `jsonschema` package), which the loader needs. They are not
tracked by the garbage collector (`gc=False`: immutable, no reference cycles), so holding a batch of
a hundred thousand of them does not make every collection scan them. The field
annotations are the project's own definition of the JSON schemas: types, enums, ranges, lengths and
patterns. `routerscope.contract.validation` derives the rule-by-rule validation from these same annotations
and adds the cross-field invariants of docs/contract.md.

Differences from a JSON-Schema validator, on purpose: an integer field rejects `1.0` (JSON Schema
would accept it), patterns are anchored with `\\A…\\Z` (so a trailing newline does not match), and
`event_time` must carry a timezone, as RFC 3339 requires.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal, get_args

import msgspec
from msgspec import UNSET, Meta, UnsetType

UUID_PATTERN = r"\A[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\Z"

Uuid = Annotated[str, Meta(pattern=UUID_PATTERN)]
Timestamp = Annotated[datetime, Meta(tz=True)]
Share = Annotated[float, Meta(ge=0, le=1)]
NonNegFloat = Annotated[float, Meta(ge=0)]
NonNegInt = Annotated[int, Meta(ge=0)]
Level = Annotated[int, Meta(ge=0, le=4)]
Id128 = Annotated[str, Meta(min_length=1, max_length=128)]
BreakerState = Literal["closed", "open", "half_open"]

FallbackType = Literal["none", "quality", "timeout", "error", "capability"]
Reason = Literal[
    "default",
    "pii_pin",
    "capability_miss",
    "latency_pressure",
    "device_timeout",
    "low_confidence",
    "validator_failed",
    "device_error",
    "device_unavailable",
    "cloud_unavailable",
    "policy_cloud",
    "device_busy",  # contract v2 only
    "truncated",  # contract v2 only: served with a lowered output cap or a partial answer (neither side fitted)
]
Outcome = Literal["ok", "timeout", "low_confidence", "validator_failed", "error", "rejected"]
Network = Literal["wifi", "cellular", "weak", "offline", "unknown"]
ConfidenceSource = Literal["logprob", "sampling", "validator", "none"]
# In docs/metrics.md §3 precedence order, highest first: the chosen label of a request is from the highest-ranked
# source (the warehouse ranks sources by their position in LABEL_SOURCES, bound into its SQL).
LabelSource = Literal["human_review", "offline_replay", "validator", "shadow_compare"]
ThermalState = Literal["nominal", "fair", "serious", "critical", "unknown"]
RolloutStage = Literal["shadow", "canary", "full", "cloud_only"]

# Enum values as tuples, for code that needs to iterate them (SQL domains, data-quality suites).
FALLBACK_TYPES: tuple[str, ...] = get_args(FallbackType)
REASONS: tuple[str, ...] = get_args(Reason)
OUTCOMES: tuple[str, ...] = get_args(Outcome)
NETWORKS: tuple[str, ...] = get_args(Network)
CONFIDENCE_SOURCES: tuple[str, ...] = get_args(ConfidenceSource)
LABEL_SOURCES: tuple[str, ...] = get_args(LabelSource)
LABEL_SOURCE_OFFLINE_REPLAY: LabelSource = "offline_replay"  # the weekly replay's labels
BREAKER_STATES: tuple[str, ...] = get_args(BreakerState)
THERMAL_STATES: tuple[str, ...] = get_args(ThermalState)
ROLLOUT_STAGES: tuple[str, ...] = get_args(RolloutStage)
DECISION_SCHEMA_VERSIONS = (1, 2)
# What a version-1 decision may not carry (the v2 additions).
V2_ONLY_FIELDS = (
    "device_stats",
    "all_cloud_cost_usd",
    "rollout_stage",
    "gateway_deadline_ms",
    "answer_check",
    "device_input_tokens",
    "label_pi",
    "label_design_id",
    "policy_id",
    "experiment_id",
    "arm",
    "assignment_bucket",
)
EXPERIMENT_FIELDS = ("policy_id", "experiment_id", "arm", "assignment_bucket")  # v2, optional (docs/loop.md)
V2_ONLY_REASONS = ("device_busy", "truncated")
V2_ONLY_ATTEMPT_FIELDS = ("abandoned",)  # an attempt's v2 additions
DEVICE_FALLBACKS = ("quality", "timeout", "error")


class _Event(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, gc=False):
    """Shared behaviour: JSON in and out, exactly the contract's shape."""

    def to_json(self) -> bytes:
        return msgspec.json.encode(self)

    @classmethod
    def from_json(cls, raw: bytes | str):
        """Decode and type-check; raises `msgspec.ValidationError` / `DecodeError` on bad input.

        Cross-field invariants are not checked here: use `routerscope.contract.validation.parse`."""
        return msgspec.json.decode(raw, type=cls)


class Attempt(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, gc=False):
    level: Level
    outcome: Outcome
    latency_ms: NonNegFloat
    # v2: true when the router gave up on a backend that overran its level's timeout (the call still ran
    # on the router's guard pool; its late result was dropped); absent otherwise
    abandoned: bool | UnsetType = UNSET


class BreakerStates(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, gc=False):
    device: BreakerState | UnsetType = UNSET
    cloud: BreakerState | UnsetType = UNSET


class DeviceStats(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, gc=False):
    """What the device measured while serving one request (contract v2, docs/sources.md#seed-003)."""

    peak_mem_mb: NonNegFloat | UnsetType = UNSET
    thermal_state: ThermalState | UnsetType = UNSET
    decode_tps: NonNegFloat | None = None
    prefill_tps: NonNegFloat | None = None
    cold_start: bool | UnsetType = UNSET
    load_ms: NonNegFloat | None = None
    # The runtime's resident memory with the model loaded and idle
    # (docs/sources.md#seed-003: at most 25 % of the tier's).
    resident_mem_mb: NonNegFloat | None = None


class DecisionEvent(_Event, frozen=True):
    """One routed request (topic router.decisions.v1, key session_id), schema version 1 or 2."""

    schema_version: Literal[1, 2]
    event_id: Uuid
    event_time: Timestamp
    request_id: Id128
    session_id: Id128
    task_type: Annotated[str, Meta(pattern=r"\A[a-z][a-z0-9_]{0,63}\Z")]
    mode: Literal["live", "shadow"]
    entered_device: bool
    fallback_type: FallbackType
    reason: Reason
    degrade_level: Level
    attempts: Annotated[list[Attempt], Meta(min_length=1, max_length=5)]
    cloud_calls: NonNegInt
    confidence: Share | None
    threshold: Share | None
    deadline_ms: Annotated[int, Meta(ge=1)]
    elapsed_ms: NonNegInt
    latency_ms: NonNegFloat
    input_tokens: NonNegInt
    output_tokens: NonNegInt
    policy_version: Annotated[str, Meta(min_length=1, max_length=64)]
    # Optional fields: absent from the JSON when unset.
    app_id: Annotated[str, Meta(max_length=128)] | None = None
    app_version: Annotated[str, Meta(max_length=64)] | None = None
    confidence_source: ConfidenceSource | UnsetType = UNSET
    ttft_ms: NonNegFloat | None = None
    network: Network | UnsetType = UNSET
    device_tier: Annotated[str, Meta(max_length=32)] | None = None
    has_pii: bool | UnsetType = UNSET
    device_model: Annotated[str, Meta(max_length=128)] | None = None
    cloud_model: Annotated[str, Meta(max_length=128)] | None = None
    shadow_agree: bool | None = None
    breaker: BreakerStates | UnsetType = UNSET
    cost_usd: NonNegFloat | UnsetType = UNSET
    trace_id: Annotated[str, Meta(pattern=r"\A[0-9a-f]{32}\Z")] | None = None
    span_id: Annotated[str, Meta(pattern=r"\A[0-9a-f]{16}\Z")] | None = None
    # Version 2 only (absent from a v1 event).
    device_stats: DeviceStats | None = None
    all_cloud_cost_usd: NonNegFloat | UnsetType = UNSET
    rollout_stage: RolloutStage | UnsetType = UNSET
    # the deadline the gateway sent when `deadline_ms` cannot hold it (0 or negative: `deadline_ms` then reads 1)
    gateway_deadline_ms: Annotated[int, Meta(ge=-86_400_000, le=0)] | UnsetType = UNSET
    # Serve-time answer checks (docs/router.md, "Only a declared answer is served"; v2 only, absent when unset):
    # the first check an answer of this request failed (`labels`, `fields`, `tools`, `language`, `format`), and
    # the input's size in tokens the router judged the device's window by (its tokenizer's count, or the upper
    # bound it used without one)
    answer_check: Annotated[str, Meta(pattern=r"\A[a-z][a-z_]{0,31}\Z")] | UnsetType = UNSET
    device_input_tokens: NonNegInt | UnsetType = UNSET
    # the labeling design fixed at decision time (docs/metrics.md §3d): the inclusion probability of the request's
    # stratum (task type × confidence bucket) in the judge's sample, and the design that gave it
    label_pi: Share | UnsetType = UNSET
    label_design_id: Annotated[str, Meta(min_length=1, max_length=64)] | UnsetType = UNSET
    # The closed loop's canary (docs/loop.md): the candidate policy, the experiment, the session's arm and its
    # assignment bucket (hash(session, salt) mod 10000), on every request of a task type under an experiment.
    policy_id: Annotated[str, Meta(pattern=r"\A[0-9a-f]{16}\Z")] | UnsetType = UNSET
    experiment_id: Id128 | UnsetType = UNSET
    arm: Literal["candidate", "control"] | UnsetType = UNSET
    assignment_bucket: Annotated[int, Meta(ge=0, le=9999)] | UnsetType = UNSET


# Optional fields the contract leaves absent rather than null: a builder's None means "not known" (unset).
_ABSENT_WHEN_NONE = (
    "confidence_source",
    "network",
    "has_pii",
    "breaker",
    "cost_usd",
    "all_cloud_cost_usd",
    "rollout_stage",
    "gateway_deadline_ms",
    "label_pi",
    "label_design_id",
    *EXPERIMENT_FIELDS,
)


def new_decision(**fields) -> DecisionEvent:
    """A decision event of the newest schema version with a fresh `event_id`: the one builder behind the
    router (`routerscope.router.engine`) and the SDK for any other router (`routerscope.instrumentation.sdk`). A None
    for a field
    the contract leaves absent (`confidence_source`, `network`, …) leaves it absent."""
    for name in _ABSENT_WHEN_NONE:
        if fields.get(name, UNSET) is None:
            fields[name] = UNSET
    fields.setdefault("schema_version", DECISION_SCHEMA_VERSIONS[-1])
    fields.setdefault("event_id", str(uuid.uuid4()))
    return DecisionEvent(**fields)


class LabelEvent(_Event, frozen=True):
    """Ground truth about one request (topic router.labels.v1, key request_id)."""

    schema_version: Literal[1]
    label_id: Uuid
    event_time: Timestamp
    request_id: Id128
    source: LabelSource
    device_acceptable: bool | None
    route_correct: bool | None = None
    labeler: Annotated[str, Meta(max_length=128)] | None = None


class BreakerEvent(_Event, frozen=True):
    """A circuit-breaker transition (topic router.breakers.v1, key instance_id)."""

    schema_version: Literal[1]
    event_id: Uuid
    event_time: Timestamp
    instance_id: Id128
    boundary: Literal["device", "cloud"]
    from_state: BreakerState
    to_state: BreakerState
    failure_rate: Share
    window_s: Annotated[float, Meta(gt=0)]
    trigger: Annotated[str, Meta(max_length=64)] | None = None
    # Optional (events from before it stay valid): this breaker's transitions numbered 1, 2, … per
    # (instance_id, boundary), +1 each, so the timeline chains them in the order they happened.
    seq: Annotated[int, Meta(ge=1, le=4294967295)] | UnsetType = UNSET


PolicyState = Literal[
    "proposed",
    "evaluated",
    "shadow",
    "canary_5",
    "canary_10",
    "canary_25",
    "full",
    "rejected",
    "halted",
    "held",
    "rolled_back",
]
POLICY_STATES: tuple[str, ...] = get_args(PolicyState)
Sha256 = Annotated[str, Meta(pattern=r"\A[0-9a-f]{64}\Z")]
PolicyId = Annotated[str, Meta(pattern=r"\A[0-9a-f]{16}\Z")]


class PolicyEvent(_Event, frozen=True):
    """One transition of a candidate policy in the closed loop (topic router.policy.v1, key policy_id;
    docs/loop.md#events): from/to state, why, on what evidence (the file and its SHA-256), by whom, and the
    metric it stood on. `event_id` is derived from the policy and the transition's number, so a transition
    published again after a crash is the same event."""

    schema_version: Literal[1]
    event_id: Uuid
    event_time: Timestamp
    task_type: Id128
    policy_id: PolicyId
    seq: Annotated[int, Meta(ge=1, le=1_000_000)]
    from_state: PolicyState | None
    to_state: PolicyState
    reason: Annotated[str, Meta(min_length=1, max_length=64)]
    evidence_file: Annotated[str, Meta(min_length=1, max_length=256)]
    evidence_hash: Sha256
    actor: Annotated[str, Meta(min_length=1, max_length=128)]
    experiment_id: Id128 | None = None
    metric: Annotated[str, Meta(max_length=64)] | None = None
    estimate: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    n: Annotated[int, Meta(ge=0, le=10**12)] | None = None
    metrics: Annotated[str, Meta(max_length=65536)] = "{}"  # every metric the verdict stood on, as JSON text


EVENT_TYPES = (DecisionEvent, LabelEvent, BreakerEvent, PolicyEvent)
