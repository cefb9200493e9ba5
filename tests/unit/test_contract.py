"""The event contract: a table of valid and invalid events, each invalid one with exactly the rules
it breaks. Every cross-field invariant of docs/contract.md has a case."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from routerscope.contract.events import FALLBACK_TYPES, REASONS, DecisionEvent
from routerscope.contract.validation import (
    ATTEMPT_LATENCY_MAX,
    BREAKERS,
    DECISION_MAXIMA,
    DECISIONS,
    DEVICE_STATS_MAXIMA,
    LABELS,
    all_rules,
    decision_invariants_hold,
    decision_ranges_hold,
)
from tests.support.events import breaker, capability_miss, decision, dumps, label, quality_fallback

VALID_DECISIONS = {
    "device L0": decision(),
    "device degraded L1": decision(
        degrade_level=1,
        attempts=[
            {"level": 0, "outcome": "timeout", "latency_ms": 900},
            {"level": 1, "outcome": "ok", "latency_ms": 300},
        ],
    ),
    "quality fallback to L2": quality_fallback(),
    "timeout fallback to L3": quality_fallback(
        fallback_type="timeout",
        reason="device_timeout",
        degrade_level=3,
        attempts=[
            {"level": 0, "outcome": "timeout", "latency_ms": 1400},
            {"level": 2, "outcome": "timeout", "latency_ms": 500},
            {"level": 3, "outcome": "ok", "latency_ms": 800},
        ],
        cloud_calls=2,
    ),
    "capability miss": capability_miss(),
    "pii pinned on device": decision(reason="pii_pin", has_pii=True),
    "pii pinned, conservative L4": decision(
        reason="pii_pin",
        has_pii=True,
        fallback_type="quality",
        degrade_level=4,
        attempts=[
            {"level": 0, "outcome": "validator_failed", "latency_ms": 300},
            {"level": 4, "outcome": "ok", "latency_ms": 5},
        ],
    ),
    "device bypass": decision(
        entered_device=False,
        reason="device_unavailable",
        degrade_level=2,
        attempts=[{"level": 2, "outcome": "ok", "latency_ms": 600}],
        cloud_calls=1,
        confidence=None,
        breaker={"device": "open", "cloud": "closed"},
    ),
    "shadow with extra cloud call": decision(mode="shadow", shadow_agree=True, cloud_calls=1),
    "all optional fields": decision(
        app_id="app",
        app_version="1.2.3",
        confidence_source="logprob",
        ttft_ms=95.5,
        device_tier="high",
        device_model="gemma3-270m-q4_k_m",
        cloud_model=None,
        cost_usd=0.0,
        trace_id="0" * 32,
        span_id="a" * 16,
        event_time="2026-11-29T12:00:00+08:00",
    ),
    # contract v2 on the same topic (v1 stays valid forever)
    "v2 with the device ledger": decision(
        schema_version=2,
        device_stats={
            "peak_mem_mb": 412.5,
            "thermal_state": "fair",
            "decode_tps": 38.0,
            "prefill_tps": 900.0,
            "cold_start": True,
            "load_ms": 850.0,
        },
        all_cloud_cost_usd=0.0021,
        rollout_stage="canary",
    ),
    "v2 device busy": decision(
        schema_version=2,
        entered_device=False,
        reason="device_busy",
        degrade_level=2,
        attempts=[{"level": 2, "outcome": "ok", "latency_ms": 600}],
        cloud_calls=1,
        confidence=None,
        device_stats=None,
        rollout_stage="full",
    ),
    "v2 without any v2 field": decision(schema_version=2),
    "every value at its column's maximum": decision(
        schema_version=2,
        cloud_calls=100,
        deadline_ms=86_400_000,
        elapsed_ms=86_400_000,
        latency_ms=86_400_000,
        ttft_ms=86_400_000,
        input_tokens=10_000_000,
        output_tokens=10_000_000,
        cost_usd=1_000_000,
        all_cloud_cost_usd=1_000_000,
        attempts=[{"level": 0, "outcome": "ok", "latency_ms": 86_400_000}],
        device_stats={"peak_mem_mb": 1_048_576, "decode_tps": 100_000, "prefill_tps": 10_000_000, "load_ms": 3_600_000},
        event_time="2299-12-31T23:59:59.999Z",
    ),
    "event_time at the column's minimum": decision(event_time="1900-01-01T00:00:00Z"),
}

# name -> (event, exactly the rules it breaks)
INVALID_DECISIONS = {
    # -- schema ---------------------------------------------------------------------------------
    "unknown schema version": (decision(schema_version=3), ["schema.version"]),
    # -- contract v2 fields in a v1 event --------------------------------------------------------
    "v1 with v2 fields": (
        decision(device_stats={"cold_start": False}, all_cloud_cost_usd=0.1, rollout_stage="full"),
        ["schema.unknown.device_stats", "schema.unknown.all_cloud_cost_usd", "schema.unknown.rollout_stage"],
    ),
    "v1 device busy": (
        decision(
            entered_device=False,
            reason="device_busy",
            degrade_level=2,
            attempts=[{"level": 2, "outcome": "ok", "latency_ms": 600}],
            cloud_calls=1,
        ),
        ["schema.invalid.reason"],
    ),
    "v2 unknown device stat": (
        decision(schema_version=2, device_stats={"gpu": "yes"}),
        ["schema.invalid.device_stats"],
    ),
    # -- column ranges (v2 maxima, applied to v1 too) ------------------------------------------
    "input_tokens 2^64 (past UInt64)": (decision(input_tokens=2**64), ["schema.range.input_tokens"]),
    "cloud_calls 2^40": (decision(cloud_calls=2**40), ["schema.range.cloud_calls"]),
    "latencies past a day": (
        decision(latency_ms=1e300, attempts=[{"level": 0, "outcome": "ok", "latency_ms": 86_400_001}]),
        ["schema.range.attempts.latency_ms", "schema.range.latency_ms"],
    ),
    "deadline past a day": (
        decision(deadline_ms=86_400_001, elapsed_ms=2**63),
        ["schema.range.deadline_ms", "schema.range.elapsed_ms"],
    ),
    "v2 device stats past their maxima": (
        decision(schema_version=2, device_stats={"peak_mem_mb": 2e6, "load_ms": 1e12}, all_cloud_cost_usd=1e7),
        [
            "schema.range.device_stats.peak_mem_mb",
            "schema.range.device_stats.load_ms",
            "schema.range.all_cloud_cost_usd",
        ],
    ),
    "event_time past DateTime64 (year 9999)": (
        decision(event_time="9999-12-31T23:59:59Z"),
        ["schema.range.event_time"],
    ),
    "event_time before DateTime64 (year 1899)": (
        decision(event_time="1899-12-31T23:59:59Z"),
        ["schema.range.event_time"],
    ),
    "missing required field": (
        {k: v for k, v in decision().items() if k != "policy_version"},
        ["schema.required.policy_version"],
    ),
    "wrong enum": (decision(network="5g"), ["schema.invalid.network"]),
    "level out of range": (
        decision(degrade_level=7, attempts=[{"level": 7, "outcome": "ok", "latency_ms": 1}]),
        ["schema.invalid.degrade_level", "schema.invalid.attempts"],
    ),
    "bad timestamp": (decision(event_time="2026-11-29 noon"), ["schema.invalid.event_time"]),
    "timestamp without zone": (decision(event_time="2026-11-29T12:00:00"), ["schema.invalid.event_time"]),
    "not a uuid": (decision(event_id="42"), ["schema.invalid.event_id"]),
    "unknown field": (decision(prompt="hello"), ["schema.unknown.prompt"]),
    "boolean is not a number": (decision(latency_ms=True), ["schema.invalid.latency_ms"]),
    "task type pattern, trailing newline": (decision(task_type="intent\n"), ["schema.invalid.task_type"]),
    "confidence above 1": (decision(confidence=1.5), ["schema.invalid.confidence"]),
    "too many attempts": (
        decision(attempts=[{"level": 0, "outcome": "ok", "latency_ms": 1}] * 6),
        ["schema.invalid.attempts"],
    ),
    "several broken fields at once": (
        decision(mode="canary", cloud_calls=-1, deadline_ms=0),
        ["schema.invalid.mode", "schema.invalid.cloud_calls", "schema.invalid.deadline_ms"],
    ),
    # -- invariants (docs/contract.md) -----------------------------------------------------------------
    "capability without capability_miss": (
        capability_miss(reason="default"),
        ["invariant.capability_iff_capability_miss"],
    ),
    "capability_miss without capability": (
        quality_fallback(reason="capability_miss"),
        ["invariant.capability_iff_capability_miss"],
    ),
    "capability but entered the device": (
        capability_miss(
            entered_device=True,
            attempts=[
                {"level": 0, "outcome": "rejected", "latency_ms": 1},
                {"level": 2, "outcome": "ok", "latency_ms": 1},
            ],
        ),
        ["invariant.capability_not_entered"],
    ),
    "quality fallback that never entered": (
        quality_fallback(entered_device=False, attempts=[{"level": 2, "outcome": "ok", "latency_ms": 1}]),
        ["invariant.device_fallback_entered_device"],
    ),
    "quality fallback served on device": (
        quality_fallback(
            degrade_level=1,
            attempts=[
                {"level": 0, "outcome": "low_confidence", "latency_ms": 1},
                {"level": 1, "outcome": "ok", "latency_ms": 1},
            ],
            cloud_calls=0,
        ),
        ["invariant.device_fallback_level_at_least_2"],
    ),
    "no fallback but served by cloud": (
        decision(
            degrade_level=2,
            attempts=[{"level": 0, "outcome": "ok", "latency_ms": 1}, {"level": 2, "outcome": "ok", "latency_ms": 1}],
            cloud_calls=1,
        ),
        ["invariant.served_on_device_level"],
    ),
    "not entered but device attempt": (
        capability_miss(
            attempts=[
                {"level": 0, "outcome": "rejected", "latency_ms": 1},
                {"level": 2, "outcome": "ok", "latency_ms": 1},
            ]
        ),
        ["invariant.not_entered_no_device_attempt"],
    ),
    "entered but first attempt in cloud": (
        quality_fallback(attempts=[{"level": 2, "outcome": "ok", "latency_ms": 1}]),
        ["invariant.entered_first_attempt_on_device"],
    ),
    "levels decrease": (
        quality_fallback(
            attempts=[
                {"level": 0, "outcome": "timeout", "latency_ms": 1},
                {"level": 3, "outcome": "error", "latency_ms": 1},
                {"level": 2, "outcome": "ok", "latency_ms": 1},
            ],
            cloud_calls=2,
        ),
        ["invariant.attempt_levels_non_decreasing"],
    ),
    "level 1 twice": (
        decision(
            degrade_level=1,
            attempts=[
                {"level": 1, "outcome": "timeout", "latency_ms": 1},
                {"level": 1, "outcome": "ok", "latency_ms": 1},
            ],
        ),
        ["invariant.level_1_at_most_once"],
    ),
    "last attempt is not the served level": (
        quality_fallback(degrade_level=3),
        ["invariant.last_attempt_is_degrade_level"],
    ),
    "fewer cloud calls than cloud attempts": (
        quality_fallback(cloud_calls=0),
        ["invariant.cloud_calls_cover_cloud_attempts"],
    ),
    "pii pin without the flag": (decision(reason="pii_pin", has_pii=False), ["invariant.pii_pin_has_pii"]),
    "pii pin, flag absent": (
        {k: v for k, v in decision(reason="pii_pin").items() if k != "has_pii"},
        ["invariant.pii_pin_has_pii"],
    ),
    "pii pin reached the cloud": (
        quality_fallback(reason="pii_pin", has_pii=True, cloud_calls=1),
        ["invariant.pii_pin_no_cloud_attempt", "invariant.pii_pin_no_cloud_calls"],
    ),
    "pii pin with a shadow cloud call": (
        decision(reason="pii_pin", has_pii=True, cloud_calls=1),
        ["invariant.pii_pin_no_cloud_calls"],
    ),
    "low confidence above threshold": (
        quality_fallback(confidence=0.8, threshold=0.7),
        ["invariant.low_confidence_below_threshold"],
    ),
    "low confidence with no confidence": (
        quality_fallback(confidence=None),
        ["invariant.low_confidence_below_threshold"],
    ),
    "schema and invariant together": (
        decision(reason="pii_pin", has_pii=False, network="5g"),
        ["schema.invalid.network", "invariant.pii_pin_has_pii"],
    ),
    "invariant skipped when its field is invalid": (
        decision(reason="pii_pin", has_pii="yes"),
        ["schema.invalid.has_pii"],
    ),
}


@pytest.mark.parametrize("name", VALID_DECISIONS)
def test_valid_decision_parses_to_a_typed_event(name):
    raw = dumps(VALID_DECISIONS[name])
    event, rules = DECISIONS.parse(raw)
    assert rules == []
    assert isinstance(event, DecisionEvent)
    assert DECISIONS.validate(json.loads(raw)) == []


@pytest.mark.parametrize("name", INVALID_DECISIONS)
def test_invalid_decision_reports_exactly_its_rules(name):
    event_dict, expected = INVALID_DECISIONS[name]
    event, rules = DECISIONS.parse(dumps(event_dict))
    assert event is None
    assert rules == expected
    # the rule-by-rule path on the decoded object says the same
    assert DECISIONS.validate(event_dict) == expected


def test_every_invariant_has_a_case():
    covered = {rule for _, rules in INVALID_DECISIONS.values() for rule in rules}
    invariants = {inv.rule for inv in DECISIONS.invariants}
    assert invariants <= covered, invariants - covered


@pytest.mark.parametrize(
    "raw, expected",
    [
        (b"not json at all", ["json.invalid"]),
        (b"\x00\xff\xfe binary garbage \x80", ["json.invalid"]),
        (b'{"truncated": ', ["json.invalid"]),
        (b"[1, 2, 3]", ["json.not_object"]),
        (b'"a string"', ["json.not_object"]),
    ],
)
def test_non_objects_are_named(raw, expected):
    assert DECISIONS.parse(raw) == (None, expected)


def test_round_trip_through_the_typed_event_is_lossless():
    """As the router emits them: contract v2 (a v1 event's encoding names `device_stats`, which v1
    does not have: see the test on that below)."""
    original = {**VALID_DECISIONS["all optional fields"], "schema_version": 2}
    event, _ = DECISIONS.parse(dumps(original))
    again, rules = DECISIONS.parse(event.to_json())
    assert rules == [] and again == event
    encoded = json.loads(event.to_json())
    assert "breaker" not in encoded and "confidence_source" in encoded  # unset optionals stay absent


@pytest.mark.parametrize(
    "contract, event, expected",
    [
        (LABELS, label(), []),
        (LABELS, label(device_acceptable=None, route_correct=None, labeler=None), []),
        (LABELS, label(source="crowd"), ["schema.invalid.source"]),
        (LABELS, {k: v for k, v in label().items() if k != "device_acceptable"}, ["schema.required.device_acceptable"]),
        (LABELS, label(label_id="x", request_id=""), ["schema.invalid.label_id", "schema.invalid.request_id"]),
        (BREAKERS, breaker(), []),
        (BREAKERS, breaker(to_state="closed"), ["invariant.breaker_state_changes"]),
        (BREAKERS, breaker(window_s=0, failure_rate=1.2), ["schema.invalid.failure_rate", "schema.invalid.window_s"]),
        (BREAKERS, breaker(boundary="edge"), ["schema.invalid.boundary"]),
        (BREAKERS, breaker(schema_version="1"), ["schema.version"]),
        # the per-breaker sequence: optional (older events carry none), an integer from 1
        (BREAKERS, breaker(seq=1), []),
        (BREAKERS, breaker(seq=0), ["schema.invalid.seq"]),
        (BREAKERS, breaker(seq=2.0), ["schema.invalid.seq"]),
        (BREAKERS, breaker(seq=4294967296), ["schema.invalid.seq"]),
    ],
)
def test_label_and_breaker_contracts(contract, event, expected):
    parsed, rules = contract.parse(dumps(event))
    assert rules == expected
    assert (parsed is None) == bool(expected)


def test_rule_catalogue_lists_invariants():
    rules = list(all_rules(DECISIONS))
    assert "invariant.pii_pin_no_cloud_calls" in rules and "schema.required.event_id" in rules


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_never_crash_and_are_never_valid(raw):
    for contract in (DECISIONS, LABELS, BREAKERS):
        event, rules = contract.parse(raw)
        assert event is None and rules


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(list(decision()) + ["extra"]),
        st.one_of(
            st.none(),
            st.booleans(),
            st.integers(-5, 10),
            st.floats(allow_nan=False, allow_infinity=False),
            st.text(max_size=5),
        ),
    )
)
def test_arbitrary_objects_get_named_rules_from_both_paths(obj):
    # Finite floats only: JSON has no infinity (msgspec writes it as null).
    merged = {**decision(), **obj}
    event, rules = DECISIONS.parse(msgspec.json.encode(merged))
    assert (event is None) == bool(rules)
    assert DECISIONS.validate(merged) == rules


@settings(max_examples=2000, deadline=None)
@given(
    fallback_type=st.sampled_from(FALLBACK_TYPES),
    reason=st.sampled_from(REASONS),
    entered_device=st.booleans(),
    degrade_level=st.integers(0, 4),
    levels=st.lists(st.integers(0, 4), min_size=1, max_size=5),
    cloud_calls=st.integers(0, 4),
    has_pii=st.sampled_from([True, False, None]),
    confidence=st.one_of(st.none(), st.floats(0, 1)),
    threshold=st.one_of(st.none(), st.floats(0, 1)),
)
def test_inlined_invariant_check_agrees_with_the_named_rules(
    fallback_type, reason, entered_device, degrade_level, levels, cloud_calls, has_pii, confidence, threshold
):
    fields = dict(
        fallback_type=fallback_type,
        reason=reason,
        entered_device=entered_device,
        degrade_level=degrade_level,
        attempts=[{"level": lv, "outcome": "ok", "latency_ms": 1.0} for lv in levels],
        cloud_calls=cloud_calls,
        confidence=confidence,
        threshold=threshold,
    )
    if has_pii is not None:
        fields["has_pii"] = has_pii
    event = decision(**fields)
    if has_pii is None:
        del event["has_pii"]
    typed = msgspec.json.decode(dumps(event), type=DecisionEvent)
    assert decision_invariants_hold(typed) == (DECISIONS.invariant_rules(typed) == [])


# -- hostile messages: every one ends as named rules, none raises (issue: no message stops ingest) --
def _deep(depth: int) -> bytes:
    return dumps(decision())[:-1] + b', "app_id": ' + b"[" * depth + b"]" * depth + b"}"


@pytest.mark.parametrize(
    "raw, expected",
    [
        (_deep(5000), ["json.too_deep"]),  # ~10 KB nested 5000 levels: RecursionError inside the decoder
        (b"[" * 100_000, ["json.too_deep"]),
        (b'{"a": "' + b"x" * (1024 * 1024) + b'"}', ["json.too_large"]),
        # a repeated key: msgspec would keep the last one silently
        (dumps(decision())[:-1] + b', "cloud_calls": 0}', ["json.duplicate_key"]),
        (dumps(decision())[:-1] + b', "cloud_calls" : 0}', ["json.duplicate_key"]),
        (dumps(decision())[:-1] + b', "\\u0063loud_calls": 0}', ["json.duplicate_key"]),  # spelt with an escape
        (
            dumps(decision(attempts=[{"level": 0, "outcome": "ok", "latency_ms": 1.0}])).replace(
                b'"level":0', b'"level":0,"level":0'
            ),
            ["json.duplicate_key"],
        ),  # inside an attempt
        (dumps(decision())[:-1] + b', "mode": "sideways"}', ["schema.invalid.mode", "json.duplicate_key"]),
        # explicit nulls (as the router writes them) around a repeat: counted from the key map
        (dumps(decision(app_id=None, ttft_ms=None))[:-1] + b', "app_id": "x"}', ["json.duplicate_key"]),
        (dumps(decision(app_id="x"))[:-1] + b', "app_id": null}', ["json.duplicate_key"]),
    ],
    ids=[
        "deep field",
        "deep array",
        "over 1 MiB",
        "repeated key",
        "repeated key, spaced",
        "repeated key, escaped",
        "repeated key in an attempt",
        "repeated key and a bad field",
        "null then value",
        "value then null",
    ],
)
def test_hostile_messages_are_named_never_raised(raw, expected):
    assert DECISIONS.parse(raw) == (None, expected)


def test_a_value_that_looks_like_a_key_is_still_valid():
    """The cheap repeated-key screen may send such a message to the exact check; it must still pass."""
    raw = dumps(decision(task_type="event_id", request_id='"cloud_calls": 1', app_id=":level", device_tier=None))
    event, rules = DECISIONS.parse(raw)
    assert rules == [] and event.task_type == "event_id"


@pytest.mark.parametrize(
    "contract, event",
    [(LABELS, label(event_time="9999-01-01T00:00:00Z")), (BREAKERS, breaker(event_time="1800-01-01T00:00:00Z"))],
)
def test_label_and_breaker_times_must_fit_the_column(contract, event):
    assert contract.parse(dumps(event)) == (None, ["schema.range.event_time"])


@settings(max_examples=1500, deadline=None)
@given(
    version=st.sampled_from([1, 2]),
    reason=st.sampled_from(["default", "device_busy"]),
    values=st.fixed_dictionaries(
        {},
        optional={
            name: st.one_of(st.integers(0, 2 * hi), st.integers(0, 2**70))
            if name
            in ("cloud_calls", "deadline_ms", "elapsed_ms", "input_tokens", "output_tokens", "device_input_tokens")
            else st.floats(0, 2 * hi, allow_nan=False)
            for name, hi in DECISION_MAXIMA.items()
        },
    ),
    attempt_latency=st.floats(0, 2 * ATTEMPT_LATENCY_MAX),
    stats=st.one_of(
        st.none(),
        st.fixed_dictionaries({}, optional={k: st.floats(0, 2 * hi) for k, hi in DEVICE_STATS_MAXIMA.items()}),
    ),
    year=st.integers(1850, 2350),
)
def test_inlined_range_check_agrees_with_the_named_rules(version, reason, values, attempt_latency, stats, year):
    """decision_ranges_hold (one call per event in the loader) says exactly what the schema.range.*
    and version rules of the rule-by-rule path say."""
    fields = dict(
        values,
        schema_version=version,
        event_time=f"{year}-06-01T00:00:00Z",
        attempts=[{"level": 0, "outcome": "ok", "latency_ms": attempt_latency}],
    )
    if values.get("deadline_ms") == 0:
        fields["deadline_ms"] = 1
    if reason == "device_busy":
        fields.update(
            reason=reason,
            entered_device=False,
            degrade_level=2,
            cloud_calls=max(1, values.get("cloud_calls", 1)),
            attempts=[{"level": 2, "outcome": "ok", "latency_ms": attempt_latency}],
        )
    if stats is not None:
        fields["device_stats"] = stats
    event = decision(**fields)
    typed = msgspec.json.decode(dumps(event), type=DecisionEvent)
    rules = DECISIONS.validate(msgspec.json.decode(dumps(event)))
    assert all(r.startswith(("schema.range.", "schema.unknown.", "schema.invalid.reason")) for r in rules), rules
    assert decision_ranges_hold(typed) == (rules == [])


def test_a_v1_decision_naming_device_stats_even_as_null_is_refused_like_the_rule_by_rule_path_refuses_it():
    """Contract v1 has no `device_stats` (its schema forbids other properties). msgspec's encoding of a
    decoded v1 event writes the field as null, so the canonical bytes of a v1 event must not pass the
    fast path either; a v1 event without the key, and a v2 event with it null, stay valid."""
    contract = DECISIONS
    event, rules = contract.parse(dumps(decision()))
    assert rules == []
    canonical = msgspec.json.encode(event)
    assert b'"device_stats":null' in canonical
    assert contract.parse(canonical) == (None, ["schema.unknown.device_stats"])
    assert contract.validate(msgspec.json.decode(canonical)) == ["schema.unknown.device_stats"]
    assert contract.parse(dumps(decision(schema_version=2, device_stats=None)))[1] == []
    assert contract.parse(dumps(decision(request_id='say "device_stats"')))[1] == []  # only a key counts


def test_a_v1_decision_whose_strings_say_device_stats_stays_valid_and_an_escaped_key_does_not():
    """Only a key counts: the word in a value is not the field, and a key spelled with an escape is."""
    assert DECISIONS.parse(dumps(decision(task_type="device_stats")))[1] == []
    assert DECISIONS.parse(dumps(decision(policy_version="device_stats")))[1] == []
    escaped = dumps(decision(device_stats=None)).replace(b'"device_stats"', b'"device\\u005fstats"')
    assert b"device\\u005fstats" in escaped
    assert DECISIONS.parse(escaped) == (None, ["schema.unknown.device_stats"])
