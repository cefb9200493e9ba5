"""Offline replay: re-run sampled fallbacks through the current device model and judge each answer
with the task's validator, producing `offline_replay` labels (METRICS.md §3 ranks them above
validator and shadow labels).

The text of a request comes from the request-text store (`router.request_store`), never from the
events. A replayed answer is *acceptable* when the device finished (no timeout or error), said
something, and the task's validator (`router.backends.validate`: JSON, a single label, a regex; none
for free text) accepts it. Replay runs offline, so it is judged without the live deadline: the
question is whether the device's answer would have done, not whether it was fast."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from instrumentation.events import LabelEvent
from router.backends import DeviceBackend, validate
from router.policy import Policy

REPLAY_TIMEOUT_MS = 60_000
REPLAY_MAX_TOKENS = 48


@dataclass(frozen=True)
class Verdict:
    request_id: str
    task_type: str
    acceptable: bool
    outcome: str  # the device's outcome: ok | timeout | error
    answer: str  # kept in memory for the caller (tests, logs at debug); never published


def judge(device: DeviceBackend, policy: Policy, request_id: str, task_type: str, text: str) -> Verdict:
    cap = policy.capability(task_type)
    max_tokens = min(cap.max_output_tokens or REPLAY_MAX_TOKENS, REPLAY_MAX_TOKENS)
    result = device.generate(text, max_tokens=max_tokens, timeout_ms=REPLAY_TIMEOUT_MS, degraded=False, commit_tokens=10**9)
    ok = result.outcome == "ok" and bool(result.text.strip()) and validate(cap.validator, result.text, cap.pattern)
    return Verdict(request_id, task_type, ok, result.outcome, result.text)


def route_correct(fallback_type: str, acceptable: bool) -> bool:
    """The verdict on a route given the device answer's acceptability: serving on the device was
    right when the answer was acceptable, a quality fallback when it was not; a timeout or error
    fallback was forced (no answer within the deadline), so it was right either way. Shared by the
    replay and the simulator's reviewers."""
    if fallback_type in ("timeout", "error"):
        return True
    return (fallback_type == "none") == acceptable


def label_for(verdict: Verdict, fallback_type: str, now: datetime, device_model: str) -> LabelEvent:
    """The offline_replay label of a replayed fallback of `fallback_type`."""
    return LabelEvent(schema_version=1, label_id=str(uuid.uuid4()), event_time=now, request_id=verdict.request_id,
                      source="offline_replay", device_acceptable=verdict.acceptable,
                      route_correct=route_correct(fallback_type, verdict.acceptable),
                      labeler=f"offline-replay:{device_model}"[:64])  # fmt: skip
