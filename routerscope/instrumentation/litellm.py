"""routerscope for LiteLLM: `RouterscopeCallback`, a LiteLLM `CustomLogger` (`pip install routerscope[litellm]`).

    callback = RouterscopeCallback(device_models=["device"])   # model groups (or models) that run on the device
    litellm.callbacks = [callback]
    router = litellm.Router(model_list=[...], fallbacks=[{"device": ["cloud-small", "cloud-large"]}])
    router.completion(model="device", messages=..., metadata={"session_id": "s-1", "task_type": "short_reply"})
    callback.flush()                                           # events delivered or spooled

Each LiteLLM request (one `litellm_trace_id`: the call and every retry and fallback the Router made for
it) becomes one decision event, recorded through `routerscope.instrumentation.sdk`, so it carries the same span,
attempt spans, contract checks and emitter as our own router:

* attempts in order of start: a deployment named in `device_models` (by model group or by model) is
  level 0; the first cloud model group of the request is level 2, any later cloud group level 3;
  a request in which no model answered ends with a level-4 attempt (LiteLLM raised to the application);
* the device's failure, from LiteLLM's own exception classes: `Timeout` → `timeout` / `device_timeout`;
  `ContextWindowExceededError` → `capability` / `capability_miss` (the device was not able to take
  the request: it never entered it, and its attempt is not recorded); anything else → `error` /
  `device_error`. A device that answers serves with `none` / `default`; a request sent to a cloud
  group directly is `none` / `policy_cloud` (`cloud_unavailable` when no cloud model answered);
* `cloud_calls` counts every cloud deployment call; tokens and latency come from LiteLLM's logging
  payload, `cost_usd` is the sum of LiteLLM's own `response_cost` over the calls;
* `session_id` and `task_type` come from the request's `metadata`; a missing one is recorded as
  `unknown` and counted in `stats`. `metadata` may also carry `request_id`, `deadline_ms`,
  `elapsed_ms`, `network`, `device_tier`, `app_id`, `app_version`, `has_pii`;
* `request_id` is `metadata["request_id"]` when given, else the id of the response LiteLLM returned
  (`response.id`), else the request's `litellm_trace_id`. Labels for it: `callback.label(response.id, …)`.

LiteLLM logs each deployment call in the background, so a request is recorded once it has an answer,
every call it started has been logged and nothing more was logged for it for `settle_s` (0.2 s), or,
when no call answered, after `failure_settle_s` (30 s) of silence; `flush()` (or `await aflush()` in async code) records
everything pending and waits until the events are delivered or spooled.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import threading
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Protocol

from routerscope.core.extras import require

require("routerscope.instrumentation.litellm", "litellm", "litellm")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # LiteLLM otherwise fetches its price table

import litellm  # noqa: E402
from litellm.integrations.custom_logger import CustomLogger  # noqa: E402

from routerscope.contract.events import NETWORKS  # noqa: E402
from routerscope.instrumentation.pii import hashed_id  # noqa: E402
from routerscope.instrumentation.sdk import InvalidDecision, Recorder  # noqa: E402


class _RecordAttempt(Protocol):
    """What `Decision.device_attempt` and `Decision.cloud_attempt` share: the arguments a LiteLLM call fills."""

    def __call__(
        self,
        *,
        level: int,
        outcome: str,
        latency_ms: float,
        model: str | None,
        provider: str | None,
        output_tokens: int | None,
        start_time: datetime | float | None,
    ) -> None: ...


log = logging.getLogger("routerscope.instrumentation.litellm")

UNKNOWN = "unknown"
TASK_TYPE = re.compile(r"[a-z][a-z0-9_]{0,63}")
DEFAULT_DEADLINE_MS = 600_000  # LiteLLM's own default request timeout
MAX_ATTEMPTS = 5
MAX_ID = 128  # the contract's longest request or session id: a longer one is replaced by its keyed hash
MAX_MS = 86_400_000  # the contract's longest deadline, elapsed time and latency: longer ones are clamped
# `flush()` waits for calls LiteLLM started to be logged; a call it never logs (a request that failed on
# every deployment can leave one) holds the flush only until nothing was logged for this long.
PENDING_GRACE_S = 2.0


@dataclass
class _Call:
    call_id: str
    group: str | None
    model: str | None
    provider: str | None
    start: datetime | None
    end: datetime | None
    ok: bool
    exception: BaseException | None = None
    error_class: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    response_id: str | None = None


@dataclass
class _Request:
    trace_id: str
    calls: dict[str, _Call] = field(default_factory=dict)
    metadata: dict = field(default_factory=dict)
    original_group: str | None = None
    original_exception: BaseException | None = None
    timeout_s: float | None = None
    answered: bool = False
    pending: set[str] = field(default_factory=set)  # calls LiteLLM started but has not logged yet
    last_seen: float = field(default_factory=time.monotonic)


def _as_datetime(t) -> datetime | None:
    if t is None:
        return None
    if isinstance(t, datetime):
        return t.astimezone(timezone.utc) if t.tzinfo else t.astimezone().astimezone(timezone.utc)
    return datetime.fromtimestamp(float(t), timezone.utc)


def _fallback(
    capability: bool,
    cloud_first: bool,
    device_tried: bool,
    served: _Call | None,
    device_failed_it: bool,
    last_device_failure: _Call | None,
) -> tuple[str, str]:
    """(fallback_type, reason) of a request: a capability miss; a cloud group first (its own choice, or the cloud
    unavailable and the device tried after it, whose failure then names the fallback); the device's last failure
    when the device was entered and did not serve it (`device_failed_it`); else none."""
    if capability:
        return "capability", "capability_miss"
    if cloud_first:
        if device_tried and served is None and last_device_failure is not None:
            kind = _outcome(last_device_failure.exception, last_device_failure.error_class)
            return (kind, "device_timeout") if kind == "timeout" else ("error", "device_error")
        return "none", ("cloud_unavailable" if device_tried or served is None else "policy_cloud")
    if device_failed_it and last_device_failure is not None:
        kind = _outcome(last_device_failure.exception, last_device_failure.error_class)
        return ("timeout", "device_timeout") if kind == "timeout" else ("error", "device_error")
    return "none", "default"


def _outcome(exc: BaseException | None, error_class: str | None) -> str:
    """`timeout`, `capability` (context window) or `error`, from LiteLLM's exception classes."""
    if isinstance(exc, litellm.ContextWindowExceededError) or error_class == "ContextWindowExceededError":
        return "capability"
    if isinstance(exc, litellm.Timeout) or error_class in ("Timeout", "APITimeoutError"):
        return "timeout"
    return "error"


class RouterscopeCallback(CustomLogger):
    """One decision event per LiteLLM request (see the module docstring)."""

    def __init__(
        self,
        device_models,
        *,
        recorder: Recorder | None = None,
        env: dict | None = None,
        policy_version: str = "litellm",
        app_id: str | None = None,
        settle_s: float = 0.2,
        failure_settle_s: float = 30.0,
    ):
        super().__init__()
        # LiteLLM keeps one callback per class and public str/int attributes: this one tells instances apart
        self.instance = f"routerscope-{id(self):x}"
        self.device_models = frozenset(device_models)
        if not self.device_models:
            raise ValueError("RouterscopeCallback needs device_models: the model groups or models on the device")
        self.recorder = recorder or Recorder.from_env(env, policy_version=policy_version, app_id=app_id)
        self.settle_s, self.failure_settle_s = settle_s, failure_settle_s
        self.stats: Counter[str] = Counter()  # recorded, missing_session_id, missing_task_type, rejected, late_calls
        self._lock = threading.Lock()
        self._requests: dict[str, _Request] = {}
        self._recorded: OrderedDict[str, None] = OrderedDict()  # recently recorded trace ids: late calls are dropped
        self._last_event = 0.0
        self._pending = 0  # calls started and not logged yet, over all open requests
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="routerscope-litellm", daemon=True)
        self._thread.start()

    # -- LiteLLM's hooks -----------------------------------------------------------------------------
    def log_pre_api_call(self, model, messages, kwargs):
        """Called in the request's own thread before each deployment call (sync and async): so a
        request is not recorded, nor `flush()` done, while LiteLLM still has to log one of its calls."""
        try:
            params = kwargs.get("litellm_params") or {}
            call_id = kwargs.get("litellm_call_id")
            if call_id:
                with self._lock:
                    trace_id = params.get("litellm_trace_id") or kwargs.get("litellm_trace_id") or call_id
                    request = self._request(str(trace_id))
                    if request is not None:
                        request.pending.add(str(call_id))
                        self._pending += 1
        except Exception:
            log.exception("routerscope: could not read a LiteLLM pre-call event")

    def log_success_event(self, kwargs, response_obj, start_time, end_time):
        self._on_call(kwargs, start_time, end_time, ok=True)

    def log_failure_event(self, kwargs, response_obj, start_time, end_time):
        self._on_call(kwargs, start_time, end_time, ok=False)

    async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
        self._on_call(kwargs, start_time, end_time, ok=True)

    async def async_log_failure_event(self, kwargs, response_obj, start_time, end_time):
        self._on_call(kwargs, start_time, end_time, ok=False)

    async def log_success_fallback_event(self, original_model_group, kwargs, original_exception):
        self._on_fallback(original_model_group, kwargs, original_exception)

    async def log_failure_fallback_event(self, original_model_group, kwargs, original_exception):
        self._on_fallback(original_model_group, kwargs, original_exception)

    # -- collecting ----------------------------------------------------------------------------------
    def _request(self, trace_id: str) -> _Request | None:
        """The open request for a trace id (created on first sight); None when it was already recorded."""
        if trace_id in self._recorded:
            self.stats["late_calls"] += 1
            return None
        request = self._requests.get(trace_id)
        if request is None:
            request = self._requests[trace_id] = _Request(trace_id)
        request.last_seen = self._last_event = time.monotonic()
        return request

    def _on_call(self, kwargs: dict, start_time, end_time, ok: bool) -> None:
        try:
            params = kwargs.get("litellm_params") or {}
            metadata = params.get("metadata") or kwargs.get("metadata") or {}
            payload = kwargs.get("standard_logging_object") or {}
            call_id = str(kwargs.get("litellm_call_id") or payload.get("id") or id(kwargs))
            trace_id = str(params.get("litellm_trace_id") or kwargs.get("litellm_trace_id") or call_id)
            error = payload.get("error_information") or {}
            call = _Call(
                call_id=call_id,
                group=metadata.get("model_group") or payload.get("model_group") or kwargs.get("model"),
                model=metadata.get("deployment") or payload.get("model") or kwargs.get("model"),
                provider=payload.get("custom_llm_provider") or params.get("custom_llm_provider"),
                start=_as_datetime(start_time),
                end=_as_datetime(end_time),
                ok=ok,
                exception=None if ok else kwargs.get("exception"),
                error_class=None if ok else (error.get("error_class") or None),
                prompt_tokens=int(payload.get("prompt_tokens") or 0),
                completion_tokens=int(payload.get("completion_tokens") or 0) if ok else 0,
                cost_usd=payload.get("response_cost", kwargs.get("response_cost")),
                response_id=payload.get("id") if ok else None,
            )
            with self._lock:
                request = self._request(trace_id)
                if request is None:
                    return
                request.calls.setdefault(call_id, call)  # LiteLLM may log a call from sync and async paths
                if call_id in request.pending:
                    request.pending.discard(call_id)
                    self._pending -= 1
                request.metadata = {**metadata, **request.metadata}
                request.original_group = request.original_group or metadata.get("original_model_group")
                request.answered |= ok
                timeout = params.get("timeout") or kwargs.get("timeout")
                if request.timeout_s is None and isinstance(timeout, (int, float)):
                    request.timeout_s = float(timeout)
        except Exception:  # never break the application's LLM call
            log.exception("routerscope: could not read a LiteLLM log event")

    def _on_fallback(self, original_model_group, kwargs: dict, original_exception) -> None:
        try:
            trace_id = kwargs.get("litellm_trace_id") or (kwargs.get("litellm_params") or {}).get("litellm_trace_id")
            if not trace_id:
                return
            with self._lock:
                request = self._request(str(trace_id))
                if request is None:
                    return
                request.metadata = {**(kwargs.get("metadata") or {}), **request.metadata}
                request.original_group = request.original_group or original_model_group
                if request.original_exception is None:
                    request.original_exception = original_exception
        except Exception:
            log.exception("routerscope: could not read a LiteLLM fallback event")

    # -- recording -----------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self._record_ready(force=False)

    def _record_ready(self, force: bool) -> int:
        now = time.monotonic()
        with self._lock:
            ready = [
                r
                for r in self._requests.values()
                if force
                or (r.answered and not r.pending and now - r.last_seen >= self.settle_s)
                or now - r.last_seen >= self.failure_settle_s
            ]
            for request in ready:
                self._pending -= len(request.pending)
                del self._requests[request.trace_id]
                self._recorded[request.trace_id] = None
            while len(self._recorded) > 100_000:
                self._recorded.popitem(last=False)
        for request in ready:
            try:
                self._record(request)
            except InvalidDecision as exc:
                self._count("rejected")
                log.warning("routerscope: LiteLLM request %s not recorded: %s", request.trace_id, exc)
            except Exception:
                self._count("rejected")
                log.exception("routerscope: LiteLLM request %s not recorded", request.trace_id)
        return len(ready)

    def _is_device(self, call: _Call) -> bool:
        return call.group in self.device_models or call.model in self.device_models

    def _record(self, request: _Request) -> None:
        md = request.metadata
        calls = sorted(request.calls.values(), key=lambda c: c.start or datetime.max.replace(tzinfo=timezone.utc))
        original = request.original_group or (calls[0].group if calls else None)
        original_on_device = original in self.device_models or (bool(calls) and self._is_device(calls[0]))
        if not calls and request.original_exception is None:
            return
        # The device group failed before any deployment call was logged (e.g. mock_testing_fallbacks):
        # its failure is the fallback's original exception.
        if original_on_device and not any(self._is_device(c) for c in calls) and request.original_exception is not None:
            at = calls[0].start if calls else datetime.now(timezone.utc)
            calls.insert(
                0,
                _Call(
                    "fallback-origin", original, original, None, at, at, ok=False, exception=request.original_exception
                ),
            )
        device = [c for c in calls if self._is_device(c)]
        capability = any(_outcome(c.exception, c.error_class) == "capability" for c in device if not c.ok)
        cloud_first = bool(calls) and not self._is_device(calls[0])
        if capability:
            attempts = [c for c in calls if not self._is_device(c)]
        elif cloud_first and device:  # a cloud group fell back to the device: levels cannot go back down
            attempts = device
        else:
            attempts = calls
        entered = any(self._is_device(c) for c in attempts)
        served = next((c for c in reversed(attempts) if c.ok), None)
        last_device_failure = next((c for c in reversed(attempts) if self._is_device(c) and not c.ok), None)
        fallback_type, reason = _fallback(
            capability,
            cloud_first,
            bool(device),
            served,
            entered and (served is None or not self._is_device(served)),
            last_device_failure,
        )
        if len(attempts) > MAX_ATTEMPTS - (served is None):  # the contract holds at most five attempts
            keep = MAX_ATTEMPTS - 1 - (served is None)
            attempts = attempts[:keep] + [attempts[-1]]

        session_id, task_type = self._session_and_task(md)
        starts = [c.start for c in calls if c.start] or [datetime.now(timezone.utc)]
        ends = [c.end for c in calls if c.end] or starts
        latency_ms = max(0.0, (max(ends) - min(starts)).total_seconds() * 1000)
        deadline_ms = md.get("deadline_ms")
        if not isinstance(deadline_ms, int) or deadline_ms < 1:
            deadline_ms = int(request.timeout_s * 1000) if request.timeout_s else DEFAULT_DEADLINE_MS
        elapsed_ms = md.get("elapsed_ms") if isinstance(md.get("elapsed_ms"), int) and md["elapsed_ms"] >= 0 else 0
        deadline_ms, elapsed_ms, latency_ms = (self._clamp(v) for v in (deadline_ms, elapsed_ms, latency_ms))
        costs = [c.cost_usd for c in calls if isinstance(c.cost_usd, (int, float))]
        request_id = md.get("request_id") if isinstance(md.get("request_id"), str) and md.get("request_id") else None
        request_id = self._fit_id(request_id or (served.response_id if served else None) or request.trace_id)
        cloud_groups: list[str | None] = []

        with (
            self.recorder.decision(
                task_type=task_type,
                session_id=session_id,
                deadline_ms=max(1, deadline_ms),
                elapsed_ms=elapsed_ms,
                request_id=request_id,
                input_tokens=max((c.prompt_tokens for c in calls), default=0),
                has_pii=md.get("has_pii") is True,
                pii_to_cloud=True,  # a record of what happened, not a policy check
                network=md.get("network") if md.get("network") in NETWORKS else None,
                device_tier=str(md["device_tier"])[:32] if md.get("device_tier") else None,
                app_id=str(md["app_id"])[:128] if md.get("app_id") else None,
                app_version=str(md["app_version"])[:64] if md.get("app_version") else None,
                start_time=min(starts),
            ) as d
        ):
            if capability:
                d.capability_miss()
            for c in attempts:
                kind = _outcome(c.exception, c.error_class)
                outcome = "ok" if c.ok else ("timeout" if kind == "timeout" else "error")
                latency = self._clamp(
                    max(0.0, ((c.end - c.start).total_seconds() * 1000) if c.start and c.end else 0.0)
                )
                model = (c.model or c.group or "")[:128] or None
                record: _RecordAttempt
                if self._is_device(c):
                    record, level = d.device_attempt, 0
                else:
                    if c.group not in cloud_groups:
                        cloud_groups.append(c.group)
                    record, level = d.cloud_attempt, 2 if cloud_groups.index(c.group) == 0 else 3
                record(
                    level=level,
                    outcome=outcome,
                    latency_ms=latency,
                    model=model,
                    provider=c.provider,
                    output_tokens=c.completion_tokens if c.ok else None,
                    start_time=c.start,
                )
            if served is None:
                d.canned_answer(outcome="error")
            cloud_calls = sum(1 for c in calls if not self._is_device(c))
            d.served(
                fallback_type=fallback_type,
                reason=reason,
                latency_ms=latency_ms,
                cloud_calls=cloud_calls,
                output_tokens=served.completion_tokens if served else 0,
                cost_usd=sum(costs) if costs else None,
            )
        self._count("recorded")

    def _session_and_task(self, md: dict) -> tuple[str, str]:
        """The request's session id and task type from its metadata, UNKNOWN (and counted) where missing or,
        for a task type, not one the contract takes once normalised."""
        session_id = md.get("session_id")
        if not isinstance(session_id, str) or not session_id:
            session_id = UNKNOWN
            self._count("missing_session_id")
        task_type = md.get("task_type")
        if isinstance(task_type, str):
            task_type = re.sub(r"[^a-z0-9_]+", "_", task_type.strip().lower()).strip("_")
        if not isinstance(task_type, str) or not TASK_TYPE.fullmatch(task_type):
            task_type = UNKNOWN
            self._count("missing_task_type")
        return self._fit_id(session_id), task_type

    def _fit_id(self, value: str) -> str:
        """An id the contract takes: one longer than MAX_ID characters is replaced by its keyed hash (the
        same id always gives the same hash, so sessions still group), and counted in `stats['hashed_ids']`."""
        if len(value) <= MAX_ID:
            return value
        self._count("hashed_ids")
        return hashed_id(value)

    def _clamp(self, ms):
        """A duration within the contract's range (at most a day): a longer one is clamped and counted in
        `stats['clamped']`, and the decision is recorded all the same."""
        if ms > MAX_MS:
            self._count("clamped")
            return type(ms)(MAX_MS)
        return ms

    def _count(self, key: str) -> None:
        with self._lock:  # requests are recorded by the background thread and by flush()
            self.stats[key] += 1

    # -- labels, flushing ----------------------------------------------------------------------------
    def label(self, request_id: str, **fields):
        """Ground truth for a request (its `response.id`, or the `request_id` you put in `metadata`), with
        the fields of `Recorder.label`: `device_acceptable=` (required), `source=`, `route_correct=`, `labeler=`."""
        return self.recorder.label(request_id, **fields)

    def _quiet(self, since: float) -> bool:
        """Every started call logged, and nothing new for `settle_s` (LiteLLM logs in the background); or
        nothing new for PENDING_GRACE_S, whatever is still pending (a call LiteLLM never logs)."""
        silent = time.monotonic() - max(self._last_event, since)
        return (self._pending <= 0 and silent >= self.settle_s) or silent >= max(PENDING_GRACE_S, self.settle_s)

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Record every request seen so far (once LiteLLM's background logging has gone quiet for
        `settle_s`, at most PENDING_GRACE_S after its last log event) and wait until the events are
        delivered or spooled; returns within `timeout_s` whatever happens (False: not everything was).
        From a thread, not from inside a running event loop: there, `await aflush()`."""
        since = time.monotonic()
        deadline = since + timeout_s
        while not self._quiet(since) and time.monotonic() < deadline:
            time.sleep(0.02)
        self._record_ready(force=True)
        return self.recorder.flush(max(0.0, deadline - time.monotonic()))

    async def aflush(self, timeout_s: float = 30.0) -> bool:
        """`flush()` for async code: lets LiteLLM's logging tasks on this loop run while it waits."""
        since = time.monotonic()
        deadline = since + timeout_s
        while not self._quiet(since) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        self._record_ready(force=True)
        return await asyncio.to_thread(self.recorder.flush, max(0.0, deadline - time.monotonic()))

    def close(self, timeout_s: float = 10.0) -> None:
        """Record what is pending, stop listening to LiteLLM, and close the emitter."""
        litellm.logging_callback_manager.remove_callback_from_all_lists(self)
        self.flush(timeout_s)
        self._stop.set()
        self._thread.join(timeout=1.0)
        self.recorder.close(timeout_s)
