"""Validation of events against the contract, returning *every* broken rule by name.

Two paths, one definition:

* fast path: `msgspec` decodes the raw JSON straight into the frozen event type, checking every field
  annotation in C; then the cross-field invariants run on the typed event;
* slow path, only for events the fast path rejects: each field is checked on its own against the
  same annotation (`msgspec.convert`), so the quarantine can list every broken field, and the
  invariants whose fields are all valid run as well.

Rule names (stable; quarantine rows and tests use them):
`json.invalid`, `json.not_object`, `schema.version`, `schema.required.<field>`,
`schema.invalid.<field>`, `schema.unknown.<field>`, `invariant.<name>`.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable, Iterable

import msgspec

from instrumentation.events import (
    DEVICE_FALLBACKS,
    BreakerEvent,
    DecisionEvent,
    LabelEvent,
)
from routerscope import names

_decoder_any = msgspec.json.Decoder()


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
        ("fallback_type", "entered_device", "degrade_level"),
        lambda e, lv: e.fallback_type == "none" and e.entered_device and e.degrade_level > 1,
        "fallback_type = none AND entered_device ⇒ degrade_level IN (0, 1)",
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
        lambda e, lv: e.reason == "low_confidence"
        and not (e.confidence is not None and e.threshold is not None and e.confidence < e.threshold),
        "reason = low_confidence ⇒ confidence < threshold",
    ),
)

def decision_invariants_hold(e) -> bool:
    """True when a typed decision breaks none of DECISION_INVARIANTS: the same rules, inlined.

    The loader calls this once per event (one call instead of fifteen); only events it rejects go
    through the named rules. A property test keeps the two equivalent."""
    ft, reason, entered, level = e.fallback_type, e.reason, e.entered_device, e.degrade_level
    lv = [a.level for a in e.attempts]
    if (ft == "capability") != (reason == "capability_miss"):
        return False
    if ft == "capability":
        if entered:
            return False
    elif ft == "none":
        if entered and level > 1:
            return False
    elif not entered or level < 2:  # quality, timeout, error
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


@dataclass(frozen=True)
class Contract:
    """One event type on one topic: its record type and its invariants."""

    topic: str
    event_type: type
    invariants: tuple[Invariant, ...]
    holds: Callable[[Any], bool] | None = None  # fast all-invariants check, if the contract has one

    def __post_init__(self):
        object.__setattr__(self, "_decoder", msgspec.json.Decoder(self.event_type))
        object.__setattr__(self, "_fields", msgspec.structs.fields(self.event_type))
        object.__setattr__(self, "_has_attempts", "attempts" in self.event_type.__struct_fields__)

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
        for f in self._fields:
            if f.name not in obj:
                if f.required:
                    rules.append(f"schema.required.{f.name}")
                    invalid.add(f.name)
                else:
                    values[f.name] = f.default
                continue
            try:
                values[f.name] = msgspec.convert(obj[f.name], f.type)
            except msgspec.ValidationError:
                rules.append("schema.version" if f.name == "schema_version" else f"schema.invalid.{f.name}")
                invalid.add(f.name)
        known = {f.name for f in self._fields}
        rules.extend(f"schema.unknown.{k}" for k in obj if k not in known)
        view = SimpleNamespace(**values)
        levels = tuple(a.level for a in values["attempts"]) if "attempts" in values else ()
        for inv in self.invariants:
            if invalid.isdisjoint(inv.fields) and inv.broken(view, levels):
                rules.append(inv.rule)
        return rules

    def parse(self, raw: bytes) -> tuple[Any | None, list[str]]:
        """Decode one message. Returns (event, []) when valid, else (None, every broken rule)."""
        try:
            event = self._decoder.decode(raw)
        except (msgspec.ValidationError, msgspec.DecodeError):
            pass
        else:
            if self.holds is not None and self.holds(event):
                return event, []
            rules = self.invariant_rules(event)
            return (None, rules) if rules else (event, rules)
        try:
            obj = _decoder_any.decode(raw)
        except (msgspec.DecodeError, UnicodeDecodeError):
            return None, ["json.invalid"]
        rules = self.validate(obj)
        # The fast path refused it, so something is wrong even if no field rule names it
        # (e.g. a duplicate key); never let such a message pass as valid.
        return None, rules or ["schema.invalid"]


DECISIONS = Contract(names.TOPIC_DECISIONS, DecisionEvent, DECISION_INVARIANTS, decision_invariants_hold)
LABELS = Contract(names.TOPIC_LABELS, LabelEvent, ())
BREAKERS = Contract(names.TOPIC_BREAKERS, BreakerEvent, BREAKER_INVARIANTS)

CONTRACTS: dict[str, Contract] = {c.topic: c for c in (DECISIONS, LABELS, BREAKERS)}


def contract_for(topic: str) -> Contract:
    try:
        return CONTRACTS[topic]
    except KeyError:
        raise KeyError(f"no contract for topic {topic!r}; known: {sorted(CONTRACTS)}") from None


def all_rules(contract: Contract) -> Iterable[str]:
    """Every rule name a contract can report (for documentation and tests)."""
    yield from ("json.invalid", "json.not_object", "schema.version")
    for f in contract._fields:
        yield f"schema.required.{f.name}" if f.required else f"schema.invalid.{f.name}"
    yield from (inv.rule for inv in contract.invariants)
