"""The loop's states and the transitions between them (docs/loop.md#lifecycle).

    proposed → evaluated → shadow → canary_5 → canary_10 → canary_25 → full
                 ↘ rejected     any canary stage → rolled_back | halted | held

`halted` and `held` wait for a person: `resume` returns to the stage the candidate was in; `rollback` ends any
live state (a person's or the rules'). `full` may still be rolled back by a person. `rejected` and
`rolled_back` are final.
"""

from __future__ import annotations

CANARY = ("canary_5", "canary_10", "canary_25")
SHARES = {"canary_5": 0.05, "canary_10": 0.10, "canary_25": 0.25, "full": 1.0}
STATES = ("proposed", "evaluated", "shadow", *CANARY, "full", "rejected", "halted", "held", "rolled_back")
FINAL = frozenset({"rejected", "rolled_back"})
LIVE = frozenset({"shadow", *CANARY, "full"})  # states in which the router applies the candidate to some traffic

_NEXT = {
    "proposed": "evaluated",
    "evaluated": "shadow",
    "shadow": "canary_5",
    **dict(zip(CANARY, (*CANARY[1:], "full"))),
}


class TransitionRefused(ValueError):
    """A transition the lifecycle does not allow (the message says which and what is allowed)."""


def allowed(state: str) -> set[str]:
    """Every state `state` may move to."""
    if state in FINAL:
        return set()
    out: set[str] = set()
    if state in _NEXT:
        out.add(_NEXT[state])
    if state in ("proposed", "evaluated", "shadow"):
        out.add("rejected")
    if state in ("shadow", *CANARY):
        out |= {"halted", "held"}
    if state in ("shadow", *CANARY, "full", "halted", "held"):
        out.add("rolled_back")
    if state in ("halted", "held"):
        out |= {"shadow", *CANARY}  # resume: to the stage it stopped in (checked by the caller's history)
    return out


def check(from_state: str, to_state: str) -> None:
    if from_state not in STATES or to_state not in STATES:
        raise TransitionRefused(f"unknown state: {from_state if from_state not in STATES else to_state}")
    if to_state not in allowed(from_state):
        options = ", ".join(sorted(allowed(from_state))) or "none: it is final"
        raise TransitionRefused(f"{from_state} cannot move to {to_state} (allowed: {options})")


def next_stage(state: str) -> str | None:
    return _NEXT.get(state)
