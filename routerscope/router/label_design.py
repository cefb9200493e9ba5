"""The labeling design fixed at decision time (docs/metrics.md §3d): which requests the replay's judge labels and
which of those a person reviews, decided by a hash of the request id, so the sample is a probability sample whose
inclusion probabilities are known for every event.

* *Strata*: task type × §6's confidence buckets (`[0, 0.45)`, `[0.45, 0.65)`, `[0.65, 0.85)`, `[0.85, 1]`, and
  null confidence), the same strata the estimates are weighted by.
* *Inclusion probability* `π_h`: `pi_near` (default 1) for a bucket that reaches within `near` (0.10) of the task
  type's threshold — the bucket's interval meets `[threshold − near, threshold + near]` — where a verdict can move
  the threshold; `pi_far` (0.1) for every other bucket and for a null confidence. `overrides` set a stratum's own.
* *Draw*: `u(design_id, request_id) < π_h`, `u` the first 8 bytes of SHA-256 over `design_id + "\\0" + request_id`
  read as a fraction of 2⁶⁴: the same request is drawn or not in every process, by anyone holding the event.
* *Review*: among the drawn, a uniform share `human_pi` (0.05) is queued for a person, by an independent hash
  (`"human\\0"` prefixed).

`stamp(event)` records `label_pi` and `label_design_id` on a decision event (optional fields of contract v2);
`drawn(event)` and `for_review(event)` answer from the event alone, so the replay judges exactly the drawn events."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import msgspec

from routerscope.contract.events import DecisionEvent

BUCKET_EDGES = (0.0, 0.45, 0.65, 0.85, 1.0)  # docs/metrics.md §6


def unit(key: str, request_id: str) -> float:
    """A uniform draw in [0, 1) fixed by `key` and the request id."""
    digest = hashlib.sha256(f"{key}\0{request_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def bucket(confidence: float | None, edges: tuple[float, ...] = BUCKET_EDGES) -> int:
    """§6's bucket of a confidence (-1 for none); the last bucket is closed."""
    if confidence is None:
        return -1
    return min(sum(confidence >= e for e in edges[1:-1]), len(edges) - 2)


@dataclass(frozen=True)
class LabelDesign:
    design_id: str = "ld1-near0.10-pi1-far0.1-h0.05"
    near: float = 0.10
    pi_near: float = 1.0
    pi_far: float = 0.1
    human_pi: float = 0.05
    overrides: dict[tuple[str, int], float] = field(default_factory=dict)  # (task type, bucket) → π

    def __post_init__(self):
        for p in (self.pi_near, self.pi_far, self.human_pi, *self.overrides.values()):
            if not 0.0 < p <= 1.0:
                raise ValueError(f"an inclusion probability must be in (0, 1], got {p}")
        if not 0 < len(self.design_id) <= 64:
            raise ValueError("a design id is 1 to 64 characters")

    def pi(self, task_type: str, confidence: float | None, threshold: float | None) -> float:
        """π_h of the stratum of (task type, confidence), given the task type's threshold."""
        b = bucket(confidence)
        if (task_type, b) in self.overrides:
            return self.overrides[task_type, b]
        if b < 0 or threshold is None:
            return self.pi_far
        low, high = BUCKET_EDGES[b], BUCKET_EDGES[b + 1]
        closed_high = b == len(BUCKET_EDGES) - 2
        meets = low <= threshold + self.near and (
            threshold - self.near < high or (closed_high and threshold - self.near <= high)
        )
        return self.pi_near if meets else self.pi_far

    def stamp(self, event: DecisionEvent) -> DecisionEvent:
        """The event with its stratum's `label_pi` and this design's id (live events of contract v2 only; others
        as they are)."""
        if event.mode != "live" or event.schema_version < 2:
            return event
        pi = self.pi(event.task_type, event.confidence, event.threshold)
        return msgspec.structs.replace(event, label_pi=pi, label_design_id=self.design_id)


def drawn(request_id: str, label_pi: float | None, design_id: str | None) -> bool:
    """Whether the design drew the request into the judge's sample (False for an event without a design)."""
    if label_pi is None or not design_id:
        return False
    return unit(design_id, request_id) < label_pi


def for_review(request_id: str, label_pi: float | None, design_id: str | None, human_pi: float) -> bool:
    """Whether a drawn request is in the uniform share queued for a person."""
    return drawn(request_id, label_pi, design_id) and unit(f"human\0{design_id}", request_id) < human_pi


DEFAULT_DESIGN = LabelDesign()
DESIGNS = {DEFAULT_DESIGN.design_id: DEFAULT_DESIGN}  # the designs the replay knows by id (their human_pi)
