"""Offline replay: re-run sampled fallbacks through the current device model and judge each answer,
producing `offline_replay` labels (docs/metrics.md §3 ranks them above validator and shadow labels).

The text of a request comes from the request-text store (`routerscope.router.request_store`), never from the
events; so does the device's first answer, when the router's side kept it (`RequestTextStore.add_answer`):
that is the answer the threshold turned down, and it is what gets judged. Without it the device answers
afresh. Either way the verdict is `routerscope.router.judge`'s, which checks meaning, not form (the declared labels,
fields grounded in the request, a whitelisted tool with its declared arguments, code that parses, or
agreement with the cloud's answer for free text), and gives no verdict — no label — rather than a default.
The label's `labeler` names the method, the judge's version, whether the kept answer or a re-generation
was judged, the device model and, when not acceptable, a short reason.
Replay runs offline, so it is judged without the live deadline: the question is whether the device's
answer would have done, not whether it was fast.

Determinism (docs/sources.md#seed-004-2 "同一输入重跑多次看结论是否落在同一枚举内"; docs/metrics.md §12): `rerun` sends
one sampled request through the device `RERUNS` times, sampling (temperature `RERUN_TEMPERATURE`, where the
backend takes one) as a deployed model would, and the group agrees when every run answered and all the
answers are equal after the shadow's normalisation. Only the answers' hashes leave this module."""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from routerscope.contract.events import LABEL_SOURCE_OFFLINE_REPLAY, LabelEvent
from routerscope.router.backends import CloudBackend, DeviceBackend, Prompt, validate
from routerscope.router.engine import accepts_keyword, answer_hash
from routerscope.router.judge import JUDGE_VERSION, judge_answer, needs_reference, wants_reference
from routerscope.router.policy import Policy

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
    kwargs: dict[str, Any] = dict(
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
    acceptable: bool | None  # None: no verdict (routerscope.router.judge found none)
    outcome: str  # the device's outcome: ok | timeout | error
    answer: str  # kept in memory for the caller (tests, logs at debug); never published
    judged_by: str = "none"  # routerscope.router.judge's method (labels | fields | tools | language | cloud_agreement |
    # cloud_rubric | validator | none)
    reason: str = ""  # why not acceptable (or no verdict), short; goes into the label's labeler
    kept: bool = False  # the device's first (thresholded) answer, kept by the router, rather than a re-generation
    reference_calls: int = 0  # cloud calls made to fetch the reference (its cost: the run's figures count them)
    reference_tokens: int = 0  # the output tokens those calls returned
    reference: str | None = None  # the cloud's answer it was judged against (in memory, for the review queue)


def judge(
    device: DeviceBackend,
    policy: Policy,
    request_id: str,
    task_type: str,
    text: str,
    cloud: CloudBackend | None = None,
    first_answer: str | None = None,
    rubric: bool = True,
    cloud_answer: str | None = None,
) -> Verdict:
    """The device's answer to `text`, judged for meaning (`routerscope.router.judge`). `first_answer`: the answer the
    router's threshold actually turned down, when the request store kept it — judged instead of a fresh
    re-generation (which would judge another answer than the one the route was decided on). The cloud (level
    2) is asked only where its answer helps (`routerscope.router.judge.wants_reference`); for free text its answer does
    not
    settle, the cloud model judges by the rubric unless `rubric` is False (`routerscope.router.judge.RUBRIC`).
    `cloud_answer`: the cloud's answer the request already got (a fallback), used as the reference; without it the
    cloud is asked once (`reference_calls`), since a structured answer is accepted only on a match with it."""
    cap = policy.capability(task_type)
    max_tokens = min(cap.max_output_tokens or REPLAY_MAX_TOKENS, REPLAY_MAX_TOKENS)
    if first_answer is not None:
        outcome, answer = "ok", first_answer
    else:
        result = device.generate(
            text, max_tokens=max_tokens, timeout_ms=REPLAY_TIMEOUT_MS, degraded=False, commit_tokens=10**9
        )
        outcome, answer = result.outcome, result.text
    kept = first_answer is not None
    if outcome != "ok" or not answer.strip():  # no answer is acceptable as anything
        method = "none" if needs_reference(cap) and cloud is None else "device"
        if method == "none":
            return Verdict(request_id, task_type, None, outcome, answer, "none", "no_reference", kept)
        return Verdict(request_id, task_type, False, outcome, answer, "device", f"no_answer:{outcome}", kept)
    reference, calls, tokens = cloud_answer, 0, 0
    if (
        reference is None
        and wants_reference(cap)
        and cloud is not None
        and not (cap.validator and not validate(cap.validator, answer, cap.pattern))
    ):
        calls = 1
        try:
            ref = cloud.complete(text, level=2, max_tokens=max_tokens, timeout_ms=REPLAY_TIMEOUT_MS)
            reference, tokens = (ref.text if ref.outcome == "ok" else None), ref.tokens_out
        except Exception:  # a cloud that cannot answer gives no verdict, not a crash of the weekly job
            reference = None
    ask = rubric_asker(cloud) if rubric and cloud is not None and needs_reference(cap) else None
    j = judge_answer(cap, text, answer, reference, validate, ask)
    return Verdict(
        request_id, task_type, j.acceptable, outcome, answer, j.method, j.reason, kept, calls, tokens, reference
    )


RUBRIC_MAX_TOKENS = 4  # one word (`ACCEPTABLE`, `UNACCEPTABLE`) and room for a stray mark before it


def rubric_asker(cloud: CloudBackend, level: int = 2, timeout_ms: float = REPLAY_TIMEOUT_MS):
    """`ask(messages) -> text | None` for `routerscope.router.judge`'s rubric: the cloud model at `level`, through the
    same
    OpenAI-compatible client the router uses (the demo's stand-in cloud serves it); None when it did not answer."""

    def ask(messages: list[dict]) -> str | None:
        result = cloud.complete(Prompt(messages), level=level, max_tokens=RUBRIC_MAX_TOKENS, timeout_ms=timeout_ms)
        return result.text if result.outcome == "ok" else None

    return ask


def route_correct(fallback_type: str, acceptable: bool) -> bool:
    """The verdict on a route given the device answer's acceptability: serving on the device was
    right when the answer was acceptable, a quality fallback when it was not; a timeout or error
    fallback was forced (no answer within the deadline), so it was right either way. Shared by the
    replay and the simulator's reviewers."""
    if fallback_type in ("timeout", "error"):
        return True
    return (fallback_type == "none") == acceptable


def labeler(verdict: Verdict, device_model: str) -> str:
    """`offline-replay:<method>:judge-<version>:<kept|rerun>:<device model>[:<reason>]`, at most 128 characters
    (the contract's limit; the label has no other field for a reason). The method stays the second part."""
    text = f"offline-replay:{verdict.judged_by}:judge-{JUDGE_VERSION}:{'kept' if verdict.kept else 'rerun'}"
    text += f":{device_model}"[: 128 - len(text) - (len(verdict.reason) + 1 if verdict.reason else 0)]
    return (text + (f":{verdict.reason}" if verdict.reason else ""))[:128]


def label_for(verdict: Verdict, fallback_type: str, now: datetime, device_model: str) -> LabelEvent | None:
    """The offline_replay label of a replayed fallback of `fallback_type` (None when there is no verdict);
    its labeler names how it was judged, by which judge version, and why not acceptable (`labeler`)."""
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
        labeler=labeler(verdict, device_model),
    )


BUCKET_EDGES = (0.0, 0.45, 0.65, 0.85, 1.0)  # docs/metrics.md §6 (the strata of §3c); bucket -1: no confidence


def stratum_name(task_type: str, bucket: int, edges: tuple[float, ...] = BUCKET_EDGES) -> str:
    """`intent_classify [0.45, 0.65)`; `… no confidence` for bucket -1; the last bucket is closed."""
    if bucket < 0:
        return f"{task_type} no confidence"
    close = "]" if bucket == len(edges) - 2 else ")"
    return f"{task_type} [{edges[bucket]:.2f}, {edges[bucket + 1]:.2f}{close}"


def allocate(candidates: list[tuple], size: int) -> list[tuple]:
    """The replay's sample over strata: `candidates` are (request_id, task_type, fallback_type, bucket, ...) in
    each stratum's sampling order; one from each stratum in turn (task type, then bucket) until `size` are taken
    or every stratum is used up. Equal allocation: a small stratum gets its labels however few fallbacks it holds,
    and §3c's estimates weight each stratum by its own size afterwards."""
    strata: dict[tuple[str, int], list[tuple]] = {}
    for c in candidates:
        strata.setdefault((c[1], c[3]), []).append(c)
    queues = [list(reversed(v)) for _, v in sorted(strata.items())]
    chosen: list[tuple] = []
    while len(chosen) < size and any(queues):
        for q in queues:
            if q and len(chosen) < size:
                chosen.append(q.pop())
    return chosen


class FirstAnswers:
    """A device backend that passes every call through and keeps the first answer of the current request — the
    one the router's threshold judged — for the request-text store (`RequestTextStore.add_answer`), so the replay
    judges that answer rather than a re-generation. Sequential use only: `take()` after each request returns its
    first answer (None when the first call gave none) and starts the next request."""

    def __init__(self, device: DeviceBackend):
        self.device = device
        self._request, self._called, self._first = 0, False, None
        inner = device.generate

        @functools.wraps(inner)  # the router offers optional keywords by the backend's own signature
        def generate(text, **kwargs):
            request, first = self._request, not self._called
            self._called = True
            result = inner(text, **kwargs)
            # (a call the router abandoned at its deadline may return after its request: it is not the next one's)
            if first and request == self._request:
                self._first = result.text if result.outcome == "ok" and result.text.strip() else None
            return result

        self.generate = generate

    def __getattr__(self, name):
        return getattr(self.device, name)

    def take(self) -> str | None:
        first = self._first
        self._request, self._called, self._first = self._request + 1, False, None
        return first
