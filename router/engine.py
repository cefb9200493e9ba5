"""The decision engine (DESIGN §1): a short-circuit decision, a finite degrade chain, breakers.

Order: PII hard constraint → capability admission → device breaker → latency gate → device
attempt judged against the task type's calibrated threshold (or its output validator) → default.
`fallback_type` and `reason` are set where the decision is taken. Levels: L0 device (0.7 × budget)
→ L1 device degraded, once (0.3 ×) → L2 cloud small (0.5 ×) → L3 cloud large (0.8 ×) → L4 canned
answer (50 ms). A device answer streamed past the commit point is never taken over. A PII-pinned
request never reaches the cloud: its fallback is L4. An open cloud breaker keeps traffic on the
device (its fallback is L4 too); an open device breaker sends traffic to the cloud with
`reason = device_unavailable`.

`Router.route(request)` returns the response and the decision event (`instrumentation.events`);
events also go to `on_event`, breaker transitions to `on_breaker_event`. No request or answer text
ever enters an event.
"""

from __future__ import annotations

import bisect
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

from msgspec import UNSET

from instrumentation.events import Attempt, BreakerEvent, BreakerStates, DecisionEvent
from router.backends import CloudBackend, DeviceBackend, DeviceResult, validate
from router.breaker import CircuitBreaker, Transition
from router.policy import PolicyStore

LEVEL_BUDGET = {0: 0.7, 1: 0.3, 2: 0.5, 3: 0.8}
L4_MS = 50.0
CANNED = "Sorry, I can't answer that right now."
GATE_SHARE = 0.9  # stay on device if its ETA fits in 90 % of the remaining budget
CLOUD_WINDOW_S = 300.0
DEFAULT_CLOUD_P90_MS = 800.0


@dataclass(frozen=True)
class Request:
    task_type: str
    text: str
    session_id: str
    deadline_ms: int = 8000
    elapsed_ms: int = 0
    has_pii: bool = False
    network: str = "wifi"
    device_tier: str | None = None
    input_tokens: int | None = None
    expected_output_tokens: int | None = None  # the gateway's estimate; None: the task's output cap
    request_id: str | None = None
    app_id: str | None = None
    messages: tuple[dict, ...] | list[dict] | None = None  # chat messages (system prompt + history); `text` becomes them

    def __post_init__(self):
        if self.messages is not None:  # the backends send the messages; everything else reads them as text
            from router.backends import Prompt

            object.__setattr__(self, "text", Prompt(self.messages))


@dataclass(frozen=True)
class Response:
    text: str
    level: int
    served_by: str  # device | cloud | fallback


class SlidingP90:
    """p90 of cloud latencies over the last `window_s` seconds (DESIGN §1)."""

    def __init__(self, window_s: float = CLOUD_WINDOW_S, clock: Callable[[], float] = time.monotonic):
        self.window_s, self._clock = window_s, clock
        self._samples: deque[tuple[float, float]] = deque()
        self._sorted: list[float] = []

    def add(self, ms: float) -> None:
        now = self._clock()
        self._samples.append((now, ms))
        bisect.insort(self._sorted, ms)
        self._trim(now)

    def _trim(self, now: float) -> None:
        while self._samples and self._samples[0][0] < now - self.window_s:
            _, old = self._samples.popleft()
            del self._sorted[bisect.bisect_left(self._sorted, old)]

    def p90(self, default: float = DEFAULT_CLOUD_P90_MS) -> float:
        self._trim(self._clock())
        if not self._sorted:
            return default
        return self._sorted[min(len(self._sorted) - 1, int(0.9 * len(self._sorted)))]


def latency_gate(remaining_ms: float, device_eta_ms: float, cloud_p90_ms: float) -> str:
    """device if its ETA fits in 90 % of what is left; else cloud if its p90 fits; else truncate."""
    if device_eta_ms <= GATE_SHARE * remaining_ms:
        return "device"
    if cloud_p90_ms <= remaining_ms:
        return "cloud"
    return "truncate"


def device_eta_ms(ttft_ms: float, expected_output_tokens: int, tps: float) -> float:
    return ttft_ms + expected_output_tokens / max(tps, 1e-6) * 1000


def _iso_now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class _Trace:
    attempts: list[Attempt] = field(default_factory=list)
    cloud_calls: int = 0
    confidence: float | None = None
    confidence_source: str = "none"
    ttft_ms: float | None = None
    output_tokens: int = 0
    cloud_model: str | None = None
    input_tokens: int = 0
    prices: dict | None = None  # the policy's cloud prices (USD per 1k tokens); None: cost not reported
    cost_usd: float = 0.0

    def charge(self, model: str, tokens_out: int) -> None:
        """A completed cloud call costs its input plus output tokens at the model's price."""
        if self.prices is not None:
            self.cost_usd += self.prices.get(model, 0.0) * (self.input_tokens + tokens_out) / 1000

    def add(self, level: int, outcome: str, latency_ms: float) -> None:
        self.attempts.append(Attempt(level=level, outcome=outcome, latency_ms=max(0.0, float(latency_ms))))


class Router:
    def __init__(self, device: DeviceBackend, cloud: CloudBackend, *, policy: PolicyStore | None = None,
                 instance_id: str = "router-1", clock: Callable[[], float] = time.monotonic,
                 now: Callable[[], datetime] = _iso_now,
                 on_event: Callable[[DecisionEvent], None] | None = None,
                 on_breaker_event: Callable[[BreakerEvent], None] | None = None):  # fmt: skip
        self.device, self.cloud = device, cloud
        self.policy = policy or PolicyStore()
        self.instance_id = instance_id
        self._now = now
        self.on_event = on_event or (lambda e: None)
        self.on_breaker_event = on_breaker_event or (lambda e: None)
        p = self.policy.current()
        self.device_breaker = CircuitBreaker("device", p.breakers["device"], clock=clock, on_transition=self._transition)
        self.cloud_breaker = CircuitBreaker("cloud", p.breakers["cloud"], clock=clock, on_transition=self._transition)
        self.cloud_latency = SlidingP90(clock=clock)

    def _transition(self, t: Transition) -> None:
        self.on_breaker_event(BreakerEvent(
            schema_version=1, event_id=str(uuid.uuid4()), event_time=self._now(), instance_id=self.instance_id,
            boundary=t.boundary, from_state=t.from_state, to_state=t.to_state,
            failure_rate=min(1.0, max(0.0, t.failure_rate)), window_s=t.window_s, trigger=t.trigger[:64],
        ))  # fmt: skip

    # -- the chain pieces --------------------------------------------------------------------------
    def _device(self, trace: _Trace, req: Request, level: int, budget_ms: float, max_tokens: int, commit_tokens: int) -> DeviceResult:
        result = self.device.generate(req.text, max_tokens=max_tokens, timeout_ms=LEVEL_BUDGET[level] * budget_ms,
                                      degraded=level == 1, commit_tokens=commit_tokens)  # fmt: skip
        self.device_breaker.record(result.outcome != "ok", trigger="device_" + result.outcome)
        if trace.ttft_ms is None:
            trace.ttft_ms = result.ttft_ms
        trace.confidence, trace.confidence_source = result.confidence, result.confidence_source
        trace.output_tokens = result.tokens_out
        return result

    def _cloud_chain(self, trace: _Trace, req: Request, budget_ms: float, max_tokens: int) -> Response | None:
        """L2 then L3; None when both failed (the caller goes to L4)."""
        for level in (2, 3):
            if not self.cloud_breaker.allow():
                return None
            trace.cloud_calls += 1
            result = self.cloud.complete(req.text, level=level, max_tokens=max_tokens, timeout_ms=LEVEL_BUDGET[level] * budget_ms)
            failed = result.outcome != "ok"
            self.cloud_breaker.record(failed, trigger="cloud_" + result.outcome if failed else "")
            if not failed:
                self.cloud_latency.add(result.latency_ms)
            trace.add(level, result.outcome, result.latency_ms)
            if not failed:
                trace.cloud_model = self.cloud.model_for(level)
                trace.charge(trace.cloud_model, result.tokens_out)
                trace.output_tokens = result.tokens_out or trace.output_tokens
                return Response(result.text, level, "cloud")
        return None

    @staticmethod
    def _l4(trace: _Trace) -> Response:
        trace.add(4, "ok", 0.0)
        return Response(CANNED, 4, "fallback")

    # -- the decision ------------------------------------------------------------------------------
    def route(self, req: Request) -> tuple[Response, DecisionEvent]:
        started = time.perf_counter()
        policy = self.policy.current()
        cap = policy.capability(req.task_type)
        input_tokens = req.input_tokens if req.input_tokens is not None else max(1, len(req.text) // 4)
        budget = max(1.0, float(req.deadline_ms - req.elapsed_ms))
        expected_out = req.expected_output_tokens if req.expected_output_tokens is not None else cap.max_output_tokens
        # generate what the gateway expects, never past the task's cap
        limits = [x for x in (cap.max_output_tokens, req.expected_output_tokens) if x]
        max_tokens = min(limits) if limits else 64
        trace = _Trace(input_tokens=input_tokens, prices=policy.cloud_prices or None)
        entered, fallback_type, reason = False, "none", "default"
        mode = "shadow" if req.task_type in policy.shadow else "live"
        shadow_agree = None

        if req.has_pii and not policy.pii_to_cloud:
            # 1. Hard constraint: the device or a conservative answer, never the cloud.
            reason = "pii_pin"
            entered = True
            response, fallback_type, _ = self._device_path(trace, req, policy, cap, budget, max_tokens, allow_cloud=False)
        elif not cap.admits(input_tokens, expected_out):
            # 2. Capability admission: never enters the device.
            fallback_type, reason = "capability", "capability_miss"
            response = self._cloud_chain(trace, req, budget, max_tokens) or self._l4(trace)
        elif mode == "shadow":
            entered = True
            response, shadow_agree = self._shadow(trace, req, policy, budget, max_tokens)
        elif not self.device_breaker.allow():
            # Device unavailable (breaker open): everything to the cloud.
            reason = "device_unavailable"
            response = self._cloud_chain(trace, req, budget, max_tokens) or self._l4(trace)
        else:
            # 3. Latency gate, judged before the device starts.
            eta = device_eta_ms(self.device.ttft_ms, expected_out, self.device.tps)
            gate = latency_gate(budget, eta, self.cloud_latency.p90())
            cloud_ok = self.cloud_breaker.state != "open"
            if gate == "cloud" and cloud_ok:
                reason = "latency_pressure"
                response = self._cloud_chain(trace, req, budget, max_tokens) or self._l4(trace)
            else:
                entered = True
                response, fallback_type, miss = self._device_path(trace, req, policy, cap, budget, max_tokens,
                                                                  allow_cloud=cloud_ok, start_degraded=gate == "truncate")  # fmt: skip
                reason = miss or "default"

        level = trace.attempts[-1].level
        event = DecisionEvent(
            schema_version=1,
            event_id=str(uuid.uuid4()),
            event_time=self._now(),
            request_id=req.request_id or str(uuid.uuid4()),
            session_id=req.session_id,
            task_type=req.task_type,
            mode=mode,
            entered_device=entered,
            fallback_type=fallback_type,
            reason=reason,
            degrade_level=level,
            attempts=trace.attempts,
            cloud_calls=trace.cloud_calls,
            confidence=trace.confidence,
            threshold=cap.threshold if entered else None,
            deadline_ms=max(1, int(req.deadline_ms)),
            elapsed_ms=max(0, int(req.elapsed_ms)),
            latency_ms=(time.perf_counter() - started) * 1000,
            input_tokens=input_tokens,
            output_tokens=trace.output_tokens,
            policy_version=policy.version,
            app_id=req.app_id,
            confidence_source=trace.confidence_source,
            ttft_ms=trace.ttft_ms,
            network=req.network,
            device_tier=req.device_tier,
            has_pii=req.has_pii,
            device_model=self.device.model if entered else None,
            cloud_model=trace.cloud_model,
            shadow_agree=shadow_agree,
            breaker=BreakerStates(device=self.device_breaker.state, cloud=self.cloud_breaker.state),
            cost_usd=trace.cost_usd if trace.prices is not None else UNSET,
        )
        self.on_event(event)
        return response, event

    def _device_path(self, trace: _Trace, req: Request, policy, cap, budget: float, max_tokens: int,
                     allow_cloud: bool, start_degraded: bool = False) -> tuple[Response, str, str | None]:  # fmt: skip
        """L0 (or L1 when the gate said truncate), judged; L1 once on a quality miss; then the cloud
        chain (or L4 when the cloud is not allowed). Returns the response, the fallback type and the
        reason of the device miss that ended the device's turn (None when the device served)."""
        levels = [1] if start_degraded else ([0, 1] if policy.l1_enabled else [0])
        miss: tuple[str, str] | None = None  # (fallback_type, reason) of the latest device miss
        for level in levels:
            result = self._device(trace, req, level, budget, max_tokens, policy.commit_tokens)
            if result.outcome == "ok":
                if not validate(cap.validator, result.text, cap.pattern):
                    trace.add(level, "validator_failed", result.latency_ms)
                    miss = ("quality", "validator_failed")
                    continue  # a quality miss: L1 once may fix it
                if result.confidence is not None and result.confidence < cap.threshold:
                    trace.add(level, "low_confidence", result.latency_ms)
                    miss = ("quality", "low_confidence")
                    continue
                trace.add(level, "ok", result.latency_ms)
                return Response(result.text, level, "device"), "none", None
            if result.committed:  # past the commit point: never taken over mid-stream
                trace.add(level, "ok", result.latency_ms)
                return Response(result.text, level, "device"), "none", None
            trace.add(level, result.outcome, result.latency_ms)
            miss = ("timeout", "device_timeout") if result.outcome == "timeout" else ("error", "device_error")
            break  # timeouts and errors go straight to the cloud (L0 → L2)
        fallback_type, reason = miss
        response = (self._cloud_chain(trace, req, budget, max_tokens) if allow_cloud else None) or self._l4(trace)
        return response, fallback_type, reason

    def _shadow(self, trace: _Trace, req: Request, policy, budget: float, max_tokens: int) -> tuple[Response, bool | None]:
        """Device runs (recorded as the L0 attempt); the cloud's answer is returned; both compared."""
        result = self._device(trace, req, 0, budget, max_tokens, policy.commit_tokens)
        trace.add(0, result.outcome, result.latency_ms)
        cloud = self.cloud.complete(req.text, level=2, max_tokens=max_tokens, timeout_ms=LEVEL_BUDGET[2] * budget)
        trace.cloud_calls += 1
        if cloud.outcome != "ok":
            return Response(result.text, 0, "device"), None
        trace.cloud_model = self.cloud.model_for(2)
        trace.charge(trace.cloud_model, cloud.tokens_out)
        agree = _normalise(result.text) == _normalise(cloud.text) if result.outcome == "ok" else None
        return Response(cloud.text, 2, "cloud"), agree


def _normalise(text: str) -> str:
    return " ".join(text.lower().strip().strip(".!?").split())
