"""Offline replay: re-run sampled fallbacks through the current device model and judge each answer,
producing `offline_replay` labels (docs/metrics.md §3 ranks them above validator and shadow labels).

The text of a request comes from the request-text store (`router.request_store`), never from the
events. A replayed answer is judged, and the label's `labeler` says how:
* `validator` — the task has an output validator (`router.backends.validate`: JSON, a single label, a
  regex): acceptable when the device finished (no timeout or error), said something, and the validator
  accepts it;
* `cloud_agreement` — free text: a non-empty answer proves nothing, so it is acceptable when it agrees
  with the cloud's answer to the same request after normalisation, as the shadow compares;
* no verdict — free text with no cloud to compare with (or the cloud did not answer): no label.
Replay runs offline, so it is judged without the live deadline: the question is whether the device's
answer would have done, not whether it was fast.

Determinism (docs/sources.md#seed-004-2 "同一输入重跑多次看结论是否落在同一枚举内"; docs/metrics.md §12): `rerun` sends
one sampled request through the device `RERUNS` times, sampling (temperature `RERUN_TEMPERATURE`, where the
backend takes one) as a deployed model would, and the group agrees when every run answered and all the
answers are equal after the shadow's normalisation. Only the answers' hashes leave this module."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from instrumentation.events import LABEL_SOURCE_OFFLINE_REPLAY, LabelEvent
from router.backends import CloudBackend, DeviceBackend, validate
from router.engine import accepts_keyword, answer_hash, normalise
from router.policy import Policy

REPLAY_TIMEOUT_MS = 60_000
REPLAY_MAX_TOKENS = 48
RERUNS = 3
RERUN_TEMPERATURE = 0.7


@dataclass(frozen=True)
class RerunGroup:
    request_id: str
    task_type: str
    runs: int
    agree: bool
    answer_hashes: list[str]  # '' for a run that did not answer (timeout, error)


def rerun(
    device: DeviceBackend,
    policy: Policy,
    request_id: str,
    task_type: str,
    text: str,
    runs: int = RERUNS,
    temperature: float = RERUN_TEMPERATURE,
) -> RerunGroup:
    """One determinism group: `runs` answers of the device to `text`; they agree when all answered and all
    normalise to the same answer. A run that fails counts against agreement (no answer agrees)."""
    cap = policy.capability(task_type)
    kwargs = dict(
        max_tokens=min(cap.max_output_tokens or REPLAY_MAX_TOKENS, REPLAY_MAX_TOKENS),
        timeout_ms=REPLAY_TIMEOUT_MS,
        degraded=False,
        commit_tokens=10**9,
    )
    if accepts_keyword(device.generate, "temperature"):
        kwargs["temperature"] = temperature
    hashes = []
    for _ in range(runs):
        result = device.generate(text, **kwargs)
        hashes.append(answer_hash(result.text) if result.outcome == "ok" and result.text.strip() else "")
    return RerunGroup(request_id, task_type, runs, all(hashes) and len(set(hashes)) == 1, hashes)


@dataclass(frozen=True)
class Verdict:
    request_id: str
    task_type: str
    acceptable: bool | None  # None: no verdict (free text with no cloud answer to compare with)
    outcome: str  # the device's outcome: ok | timeout | error
    answer: str  # kept in memory for the caller (tests, logs at debug); never published
    judged_by: str = "validator"  # validator | cloud_agreement | none


def judge(
    device: DeviceBackend, policy: Policy, request_id: str, task_type: str, text: str, cloud: CloudBackend | None = None
) -> Verdict:
    """The device's answer to `text`, judged by the task's validator or, for free text, by agreement with
    `cloud`'s answer (level 2)."""
    cap = policy.capability(task_type)
    max_tokens = min(cap.max_output_tokens or REPLAY_MAX_TOKENS, REPLAY_MAX_TOKENS)
    result = device.generate(
        text, max_tokens=max_tokens, timeout_ms=REPLAY_TIMEOUT_MS, degraded=False, commit_tokens=10**9
    )
    finished = result.outcome == "ok" and bool(result.text.strip())
    if cap.validator is not None:
        return Verdict(
            request_id,
            task_type,
            finished and validate(cap.validator, result.text, cap.pattern),
            result.outcome,
            result.text,
            "validator",
        )
    if cloud is None:
        return Verdict(request_id, task_type, None, result.outcome, result.text, "none")
    if not finished:  # no answer agrees with anything
        return Verdict(request_id, task_type, False, result.outcome, result.text, "cloud_agreement")
    try:
        reference = cloud.complete(text, level=2, max_tokens=max_tokens, timeout_ms=REPLAY_TIMEOUT_MS)
    except Exception:  # a cloud that cannot answer gives no verdict, not a crash of the weekly job
        return Verdict(request_id, task_type, None, result.outcome, result.text, "none")
    if reference.outcome != "ok" or not reference.text.strip():
        return Verdict(request_id, task_type, None, result.outcome, result.text, "none")
    return Verdict(
        request_id,
        task_type,
        normalise(result.text) == normalise(reference.text),
        result.outcome,
        result.text,
        "cloud_agreement",
    )


def route_correct(fallback_type: str, acceptable: bool) -> bool:
    """The verdict on a route given the device answer's acceptability: serving on the device was
    right when the answer was acceptable, a quality fallback when it was not; a timeout or error
    fallback was forced (no answer within the deadline), so it was right either way. Shared by the
    replay and the simulator's reviewers."""
    if fallback_type in ("timeout", "error"):
        return True
    return (fallback_type == "none") == acceptable


def label_for(verdict: Verdict, fallback_type: str, now: datetime, device_model: str) -> LabelEvent | None:
    """The offline_replay label of a replayed fallback of `fallback_type` (None when there is no verdict);
    its labeler names how it was judged: `offline-replay:<validator|cloud_agreement>:<device model>`."""
    if verdict.acceptable is None:
        return None
    return LabelEvent(
        schema_version=1,
        label_id=str(uuid.uuid4()),
        event_time=now,
        request_id=verdict.request_id,
        source=LABEL_SOURCE_OFFLINE_REPLAY,
        device_acceptable=verdict.acceptable,
        route_correct=route_correct(fallback_type, verdict.acceptable),
        labeler=f"offline-replay:{verdict.judged_by}:{device_model}"[:128],
    )
