"""Validation of events against the contract, returning *every* broken rule by name.

Two paths, one definition:

* fast path: `msgspec` decodes the raw JSON straight into the frozen event type, checking every field
  annotation in C; then the cross-field invariants run on the typed event;
* slow path, only for events the fast path rejects: each field is checked on its own against the
  same annotation (`msgspec.convert`), so the quarantine can list every broken field, and the
  invariants whose fields are all valid run as well.

Rule names (stable; quarantine rows and tests use them):
`json.invalid`, `json.not_object`, `json.too_large`, `json.too_deep`, `json.duplicate_key`,
`schema.version`, `schema.required.<field>`, `schema.invalid.<field>`, `schema.unknown.<field>`,
`schema.range.<field>`, `invariant.<name>`, and `contract.error` when validation itself failed.

**No message can make validation raise.** Whatever a Kafka writer sends ends as an event or as a
list of rules: a message over `MAX_MESSAGE_BYTES` is refused unread, nesting deep enough to exhaust
the interpreter's recursion is `json.too_deep`, and any other exception is `contract.error`.

**Column ranges.** The contract's maxima (decision_event.v2.schema.json, applied to version 1 as
well) and the warehouse's `DateTime64(3)` range for `event_time` are `schema.range.<field>` rules,
so every value that passes fits its column and the insert cannot fail on it. They are checked
after decoding, not in the field annotations, so that a value of the right type but past its
range is named as such.

**Versions.** Decision events are version 1 or 2; a version-1 event carrying a v2 field is
`schema.unknown.<field>`, the v2 reasons (`device_busy`, `truncated`) in a v1 event are `schema.invalid.reason`,
and an attempt's v2 `abandoned` in a v1 event is `schema.invalid.attempts`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any, get_args

import msgspec
from msgspec import UNSET

from routerscope.contract.events import (
    DEVICE_FALLBACKS,
    V2_ONLY_FIELDS,
    V2_ONLY_REASONS,
    BreakerEvent,
    DecisionEvent,
    LabelEvent,
    PolicyEvent,
)
from routerscope.core import names

UTC = timezone.utc  # datetime.UTC is Python 3.11+; the SDK runs on 3.10

_decoder_any = msgspec.json.Decoder()
_encode = msgspec.json.Encoder().encode
_decoder_keys = msgspec.json.Decoder(dict[str, msgspec.Raw])  # an object's keys, values left undecoded

# Larger messages are quarantined unread (a decision event is under 2 KB; Kafka's default limit is 1 MB).
MAX_MESSAGE_BYTES = 1024 * 1024
# The range of the warehouse's DateTime64(3) columns: an event_time outside it cannot be stored.
EVENT_TIME_MIN = datetime(1900, 1, 1, tzinfo=timezone.utc)
EVENT_TIME_MAX = datetime(2299, 12, 31, 23, 59, 59, 999000, tzinfo=timezone.utc)
# decision_event.v2.schema.json's maxima (the same for version 1): field -> largest value.
DECISION_MAXIMA: dict[str, float] = {
    "cloud_calls": 100,
    "deadline_ms": 86_400_000,
    "elapsed_ms": 86_400_000,
    "latency_ms": 86_400_000,
    "ttft_ms": 86_400_000,
    "input_tokens": 10_000_000,
    "output_tokens": 10_000_000,
    "device_input_tokens": 10_000_000,
    "cost_usd": 1_000_000,
    "all_cloud_cost_usd": 1_000_000,
}
ATTEMPT_LATENCY_MAX = 86_400_000
DEVICE_STATS_MAXIMA: dict[str, float] = {
    "peak_mem_mb": 1_048_576,
    "decode_tps": 100_000,
    "prefill_tps": 10_000_000,
    "load_ms": 3_600_000,
    "resident_mem_mb": 1_048_576,
}
_STATS_ITEMS = tuple(DEVICE_STATS_MAXIMA.items())


def _over(value, maximum) -> bool:
    return value is not None and value is not UNSET and value > maximum


def _time_out_of_range(value) -> bool:
    return not (EVENT_TIME_MIN <= value <= EVENT_TIME_MAX)


def _range_rules(field_name: str, value) -> list[str]:
    """The `schema.range.*` rules one decoded field value breaks (any contract)."""
    if field_name == "event_time":
        return ["schema.range.event_time"] if _time_out_of_range(value) else []
    maximum = DECISION_MAXIMA.get(field_name)
    if maximum is not None:
        return [f"schema.range.{field_name}"] if _over(value, maximum) else []
    if field_name == "attempts":
        broken = any(a.latency_ms > ATTEMPT_LATENCY_MAX for a in value)
        return ["schema.range.attempts.latency_ms"] if broken else []
    if field_name == "device_stats" and value is not None:
        return [f"schema.range.device_stats.{k}" for k, hi in _STATS_ITEMS if _over(getattr(value, k), hi)]
    return []


def decision_ranges_hold(e) -> bool:
    """True when a typed decision is within every column range and is a consistent v1 or v2 event.

    The same rules as `_range_rules`, inlined (one call per event in the loader); a property test
    keeps the two equivalent."""
    if not EVENT_TIME_MIN <= e.event_time <= EVENT_TIME_MAX:
        return False
    if (
        e.cloud_calls > 100
        or e.input_tokens > 10_000_000
        or e.output_tokens > 10_000_000
        or e.deadline_ms > 86_400_000
        or e.elapsed_ms > 86_400_000
        or e.latency_ms > 86_400_000
    ):
        return False
    ttft, cost = e.ttft_ms, e.cost_usd
    if (ttft is not None and ttft > 86_400_000) or (cost is not UNSET and cost > 1_000_000):
        return False
    for a in e.attempts:
        if a.latency_ms > ATTEMPT_LATENCY_MAX:
            return False
    stats, all_cloud = e.device_stats, e.all_cloud_cost_usd
    if e.schema_version == 1:
        return (
            stats is None
            and all_cloud is UNSET
            and e.rollout_stage is UNSET
            and e.gateway_deadline_ms is UNSET
            and e.answer_check is UNSET
            and e.device_input_tokens is UNSET
            and e.label_pi is UNSET
            and e.label_design_id is UNSET
            and e.arm is UNSET
            and e.policy_id is UNSET
            and e.experiment_id is UNSET
            and e.assignment_bucket is UNSET
            and e.reason not in V2_ONLY_REASONS
            and all(a.abandoned is UNSET for a in e.attempts)
        )
    if all_cloud is not UNSET and all_cloud > 1_000_000:
        return False
    if e.device_input_tokens is not UNSET and e.device_input_tokens > 10_000_000:
        return False
    return stats is None or not any(_over(getattr(stats, k), hi) for k, hi in _STATS_ITEMS)


def times_hold(e) -> bool:
    return not _time_out_of_range(e.event_time)


def _reject_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise _DuplicateKey(next(k for k in keys if keys.count(k) > 1))
    return dict(pairs)


class _DuplicateKey(ValueError):
    pass


def duplicate_key(raw: bytes) -> str | None:
    """The first key repeated within one JSON object of `raw` (at any depth), or None."""
    try:
        json.loads(raw, object_pairs_hook=_reject_duplicates)
    except _DuplicateKey as exc:
        return str(exc)
    except (ValueError, RecursionError):
        return None
    return None


@dataclass(frozen=True)
class Invariant:
    """A cross-field rule. `broken(event)` is True when the event violates it."""

    name: str
    fields: tuple[str, ...]
    broken: Callable[[Any, tuple], bool]  # (event, attempt levels) -> broken?
    doc: str

    @property
    def rule(self) -> str:
        return f"invariant.{self.name}"


DECISION_INVARIANTS: tuple[Invariant, ...] = (
    Invariant(
        "capability_iff_capability_miss",
        ("fallback_type", "reason"),
        lambda e, lv: (e.fallback_type == "capability") != (e.reason == "capability_miss"),
        "fallback_type = capability ⇔ reason = capability_miss",
    ),
    Invariant(
        "capability_not_entered",
        ("fallback_type", "entered_device"),
        lambda e, lv: e.fallback_type == "capability" and e.entered_device,
        "fallback_type = capability ⇒ entered_device = false",
    ),
    Invariant(
        "device_fallback_entered_device",
        ("fallback_type", "entered_device"),
        lambda e, lv: e.fallback_type in DEVICE_FALLBACKS and not e.entered_device,
        "fallback_type IN (quality, timeout, error) ⇒ entered_device = true",
    ),
    Invariant(
        "device_fallback_level_at_least_2",
        ("fallback_type", "degrade_level"),
        lambda e, lv: e.fallback_type in DEVICE_FALLBACKS and e.degrade_level < 2,
        "fallback_type IN (quality, timeout, error) ⇒ degrade_level >= 2",
    ),
    Invariant(
        "served_on_device_level",
        ("fallback_type", "entered_device", "degrade_level", "mode"),
        lambda e, lv: e.fallback_type == "none" and e.entered_device and e.degrade_level > 1 and e.mode == "live",
        "fallback_type = none AND entered_device AND mode = live ⇒ degrade_level IN (0, 1) (a shadow request's"
        " device runs beside the cloud that serves it)",
    ),
    Invariant(
        "not_entered_no_device_attempt",
        ("entered_device", "attempts"),
        lambda e, lv: not e.entered_device and any(level <= 1 for level in lv),
        "entered_device = false ⇒ no attempt at level 0 or 1",
    ),
    Invariant(
        "entered_first_attempt_on_device",
        ("entered_device", "attempts"),
        lambda e, lv: e.entered_device and e.attempts[0].level > 1,
        "entered_device = true ⇒ the first attempt is at level 0 or 1",
    ),
    Invariant(
        "attempt_levels_non_decreasing",
        ("attempts",),
        lambda e, lv: any(b < a for a, b in zip(lv, lv[1:])),
        "attempt levels never decrease",
    ),
    Invariant(
        "level_1_at_most_once",
        ("attempts",),
        lambda e, lv: lv.count(1) > 1,
        "level 1 appears at most once",
    ),
    Invariant(
        "last_attempt_is_degrade_level",
        ("attempts", "degrade_level"),
        lambda e, lv: e.attempts[-1].level != e.degrade_level,
        "the last attempt's level is degrade_level",
    ),
    Invariant(
        "cloud_calls_cover_cloud_attempts",
        ("attempts", "cloud_calls"),
        lambda e, lv: e.cloud_calls < sum(1 for level in lv if level in (2, 3)),
        "cloud_calls >= the number of attempts at levels 2 and 3",
    ),
    Invariant(
        "pii_pin_has_pii",
        ("reason", "has_pii"),
        lambda e, lv: e.reason == "pii_pin" and e.has_pii is not True,
        "reason = pii_pin ⇒ has_pii = true",
    ),
    Invariant(
        "pii_pin_no_cloud_attempt",
        ("reason", "attempts"),
        lambda e, lv: e.reason == "pii_pin" and any(level in (2, 3) for level in lv),
        "reason = pii_pin ⇒ no attempt at levels 2 or 3",
    ),
    Invariant(
        "pii_pin_no_cloud_calls",
        ("reason", "cloud_calls"),
        lambda e, lv: e.reason == "pii_pin" and e.cloud_calls != 0,
        "reason = pii_pin ⇒ cloud_calls = 0",
    ),
    Invariant(
        "low_confidence_below_threshold",
        ("reason", "confidence", "threshold"),
        lambda e, lv: (
            e.reason == "low_confidence"
            and not (e.confidence is not None and e.threshold is not None and e.confidence < e.threshold)
        ),
        "reason = low_confidence ⇒ confidence < threshold",
    ),
)


def _fallback_agrees(ft: str, reason: str, entered: bool, level: int, mode: str) -> bool:
    """The fallback type against the reason, the device entered and the degrade level: the rules
    capability_iff_capability_miss, capability_not_entered, served_on_device_level and the two device_fallback_
    ones, inlined for `decision_invariants_hold`."""
    if (ft == "capability") != (reason == "capability_miss"):
        return False
    if ft == "capability":
        return not entered
    if ft == "none":
        return not (entered and level > 1 and mode == "live")
    return bool(entered) and level >= 2  # quality, timeout, error


def decision_invariants_hold(e) -> bool:
    """True when a typed decision breaks none of DECISION_INVARIANTS: the same rules, inlined.

    The loader calls this once per event (one call instead of fifteen); only events it rejects go
    through the named rules. A property test keeps the two equivalent."""
    reason, entered, level = e.reason, e.entered_device, e.degrade_level
    lv = [a.level for a in e.attempts]
    if not _fallback_agrees(e.fallback_type, reason, entered, level, e.mode):
        return False
    if entered:
        if lv[0] > 1:
            return False
    elif min(lv) <= 1:
        return False
    previous, ones, cloud = -1, 0, 0
    for x in lv:
        if x < previous:
            return False
        previous = x
        if x == 1:
            ones += 1
        elif x == 2 or x == 3:
            cloud += 1
    if ones > 1 or lv[-1] != level or e.cloud_calls < cloud:
        return False
    if reason == "pii_pin":
        return e.has_pii is True and cloud == 0 and e.cloud_calls == 0
    if reason == "low_confidence":
        c, t = e.confidence, e.threshold
        return c is not None and t is not None and c < t
    return True


BREAKER_INVARIANTS: tuple[Invariant, ...] = (
    Invariant(
        "breaker_state_changes",
        ("from_state", "to_state"),
        lambda e, lv: e.from_state == e.to_state,
        "a breaker event is a transition: from_state != to_state",
    ),
)


POLICY_INVARIANTS: tuple[Invariant, ...] = (
    Invariant(
        "policy_state_changes",
        ("from_state", "to_state"),
        lambda e, lv: e.from_state == e.to_state,
        "a policy event is a transition: from_state != to_state",
    ),
    Invariant(
        "policy_interval_ordered",
        ("ci_low", "ci_high"),
        lambda e, lv: e.ci_low is not None and e.ci_high is not None and e.ci_low > e.ci_high,
        "ci_low <= ci_high",
    ),
)


def _admits_none(annotation) -> bool:
    stack = [annotation]
    while stack:
        t = stack.pop()
        if t is type(None):
            return True
        stack.extend(get_args(t))
    return False


def _struct_types(annotation) -> list[type]:
    found, stack = [], [annotation]
    while stack:
        t = stack.pop()
        if isinstance(t, type) and issubclass(t, msgspec.Struct):
            found.append(t)
        else:
            stack.extend(get_args(t))
    return found


@dataclass(frozen=True)
class Contract:
    """One event type on one topic: its record type and its invariants."""

    topic: str
    event_type: type[msgspec.Struct]
    invariants: tuple[Invariant, ...]
    holds: Callable[[Any], bool] | None = None  # fast all-invariants check, if the contract has one
    in_range: Callable[[Any], bool] = times_hold  # fast column-range (and version) check
    # derived from the above in __post_init__: not arguments, and no part of a contract's identity
    _decoder: msgspec.json.Decoder = field(init=False, repr=False, compare=False)
    _fields: tuple[msgspec.structs.FieldInfo, ...] = field(init=False, repr=False, compare=False)
    _has_attempts: bool = field(init=False, repr=False, compare=False)
    _objects: tuple[str, ...] = field(init=False, repr=False, compare=False)  # nested single objects
    _required_nullable: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _v2_only_nullable: tuple[bytes, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "_decoder", msgspec.json.Decoder(self.event_type))
        object.__setattr__(self, "_fields", msgspec.structs.fields(self.event_type))
        object.__setattr__(self, "_has_attempts", "attempts" in self.event_type.__struct_fields__)
        objects = tuple(f.name for f in self._fields if f.name != "attempts" and _struct_types(f.type))
        object.__setattr__(self, "_objects", objects)  # nested single objects (breaker, device_stats)
        nullable = tuple(i for i, f in enumerate(self._fields) if f.required and _admits_none(f.type))
        object.__setattr__(self, "_required_nullable", nullable)
        # v2-only fields a v1 event must not carry even as null; the decoded event cannot tell a null
        # from an absent one, so a v1 message naming one is judged by the rule-by-rule path
        v2_null = tuple(
            f'"{f.name}"'.encode() for f in self._fields if f.name in V2_ONLY_FIELDS and _admits_none(f.type)
        )
        object.__setattr__(self, "_v2_only_nullable", v2_null if self.topic == names.TOPIC_DECISIONS else ())

    # -- rules ---------------------------------------------------------------------------------
    def invariant_rules(self, event) -> list[str]:
        levels = tuple([a.level for a in event.attempts]) if self._has_attempts else ()
        return [inv.rule for inv in self.invariants if inv.broken(event, levels)]

    def validate(self, obj: Any) -> list[str]:
        """Every rule `obj` (already decoded JSON) breaks, in a stable order; [] when valid."""
        if not isinstance(obj, dict):
            return ["json.not_object"]
        rules: list[str] = []
        values: dict[str, Any] = {}
        invalid: set[str] = set()
        version_1 = obj.get("schema_version") == 1 and self.topic == names.TOPIC_DECISIONS
        for f in self._fields:
            if f.name not in obj:
                if f.required:
                    rules.append(f"schema.required.{f.name}")
                    invalid.add(f.name)
                else:
                    values[f.name] = f.default
                continue
            if version_1 and f.name in V2_ONLY_FIELDS:
                rules.append(f"schema.unknown.{f.name}")
                invalid.add(f.name)
                continue
            try:
                value = msgspec.convert(obj[f.name], f.type)
            except msgspec.ValidationError:
                rules.append("schema.version" if f.name == "schema_version" else f"schema.invalid.{f.name}")
                invalid.add(f.name)
                continue
            if version_1 and f.name == "reason" and value in V2_ONLY_REASONS:
                rules.append("schema.invalid.reason")
                invalid.add(f.name)
                continue
            if version_1 and f.name == "attempts" and any(a.abandoned is not UNSET for a in value):
                rules.append("schema.invalid.attempts")  # `abandoned` is an attempt's v2 addition
                invalid.add(f.name)
                continue
            broken = _range_rules(f.name, value)
            if broken:
                rules.extend(broken)
                invalid.add(f.name)
                continue
            values[f.name] = value
        known = {f.name for f in self._fields}
        rules.extend(f"schema.unknown.{k}" for k in obj if k not in known)
        view = SimpleNamespace(**values)
        levels = tuple(a.level for a in values["attempts"]) if "attempts" in values else ()
        for inv in self.invariants:
            if invalid.isdisjoint(inv.fields) and inv.broken(view, levels):
                rules.append(inv.rule)
        return rules

    def parse(self, raw: bytes) -> tuple[Any | None, list[str]]:
        """Decode one message. Returns (event, []) when valid, else (None, every broken rule).

        Never raises: see the module docstring."""
        event, rules, _ = self.parse_encoded(raw)
        return event, rules

    def parse_encoded(self, raw: bytes) -> tuple[Any | None, list[str], bytes]:
        """`parse`, and for a valid event also its canonical JSON (msgspec's encoding of the event:
        `raw` itself for the router's own messages), which the loader hands to the warehouse."""
        if len(raw) > MAX_MESSAGE_BYTES:
            return None, ["json.too_large"], b""
        try:
            return self._parse(raw)
        except RecursionError:
            return None, ["json.too_deep"], b""
        except Exception:  # a bug or an input nobody foresaw: quarantined, never a stuck loader
            return None, ["contract.error"], b""

    def _parse(self, raw: bytes) -> tuple[Any | None, list[str], bytes]:
        try:
            event = self._decoder.decode(raw)
        except (msgspec.ValidationError, msgspec.DecodeError):
            pass
        else:
            holds = self.holds(event) if self.holds is not None else not self.invariant_rules(event)
            v1_naming_v2 = self._v2_only_nullable and event.schema_version == 1 and self._names_v2_only(raw)
            if holds and self.in_range(event) and not v1_naming_v2:
                # msgspec keeps the last of a repeated key, so a repeat must be looked for. The
                # router's own messages are byte for byte the canonical encoding of their event,
                # which repeats nothing (one encode and compare); others are screened by counting
                # keys, and only a message that may repeat one pays for the exact check.
                encoded = _encode(event)
                if encoded == raw:
                    return event, [], raw
                if not self._may_repeat_keys(raw, event) or duplicate_key(raw) is None:
                    return event, [], encoded
                return None, ["json.duplicate_key"], b""
        try:
            obj = _decoder_any.decode(raw)
        except (msgspec.DecodeError, UnicodeDecodeError):
            return None, ["json.invalid"], b""
        rules = self.validate(obj)
        if duplicate_key(raw) is not None:
            rules.append("json.duplicate_key")
        # The fast path refused it, so something is wrong even if no rule names it; never let such a
        # message pass as valid.
        return None, rules or ["schema.invalid"], b""

    def _names_v2_only(self, raw: bytes) -> bool:
        """Does this v1 message have a v2-only field among its keys (even as null)? Its bytes are
        searched first; only a message that may name one (the name appears, or a key could be spelled
        with escapes) pays for reading its keys."""
        if b"\\u" not in raw and not any(key in raw for key in self._v2_only_nullable):
            return False
        keys = _decoder_keys.decode(raw)
        return any(key[1:-1].decode() in keys for key in self._v2_only_nullable)

    def _may_repeat_keys(self, raw: bytes, event) -> bool:
        """False when `raw` certainly repeats no key; True when it might (then check exactly).

        Once whitespace is removed, every key ends in the two bytes `":`, so counting them counts
        every key (a string value may add to the count, never take from it: an over-count only
        costs the exact check). A message without repeats has at least its required fields, its
        optional fields that hold a value, three keys per attempt (all required) and the valued
        fields of its nested objects, and exactly that many unless it spells out nulls; then its
        distinct keys are counted from the top-level key map instead."""
        keys = raw.translate(None, b" \t\r\n").count(b'":')
        if keys == self._keys_with_values(event):
            return False
        top = _decoder_keys.decode(raw)
        expected = len(top)
        if self._has_attempts:
            expected += 3 * len(event.attempts)
        for name in self._objects:
            inner = top.get(name)
            if inner is not None and bytes(inner) != b"null":
                expected += len(_decoder_keys.decode(inner))
        return keys != expected

    def _keys_with_values(self, event) -> int:
        values = msgspec.structs.astuple(event)
        n = len(values) - values.count(None) - values.count(UNSET)  # identity first: C-speed counts
        for i in self._required_nullable:  # a required field is a key even when null
            if values[i] is None:
                n += 1
        if self._has_attempts:
            n += 3 * len(event.attempts)
        for name in self._objects:
            inner = getattr(event, name)
            if inner is not None and inner is not UNSET:
                inner_values = msgspec.structs.astuple(inner)
                n += len(inner_values) - inner_values.count(None) - inner_values.count(UNSET)
        return n


DECISIONS = Contract(
    names.TOPIC_DECISIONS, DecisionEvent, DECISION_INVARIANTS, decision_invariants_hold, decision_ranges_hold
)
LABELS = Contract(names.TOPIC_LABELS, LabelEvent, ())
BREAKERS = Contract(names.TOPIC_BREAKERS, BreakerEvent, BREAKER_INVARIANTS)
POLICY = Contract(names.TOPIC_POLICY, PolicyEvent, POLICY_INVARIANTS)

CONTRACTS: dict[str, Contract] = {c.topic: c for c in (DECISIONS, LABELS, BREAKERS, POLICY)}


def all_rules(contract: Contract) -> Iterable[str]:
    """Every rule name a contract can report (for documentation and tests)."""
    yield from (
        "json.invalid",
        "json.not_object",
        "json.too_large",
        "json.too_deep",
        "json.duplicate_key",
        "schema.version",
        "contract.error",
    )
    for f in contract._fields:
        yield f"schema.required.{f.name}" if f.required else f"schema.invalid.{f.name}"
    yield "schema.range.event_time"
    if contract.topic == names.TOPIC_DECISIONS:
        yield from (f"schema.range.{name}" for name in DECISION_MAXIMA)
        yield "schema.range.attempts.latency_ms"
        yield from (f"schema.range.device_stats.{name}" for name in DEVICE_STATS_MAXIMA)
    yield from (inv.rule for inv in contract.invariants)
