"""The decision engine (docs/sources.md#seed-000; the rules and their reasons: docs/router.md): a short-circuit
decision, a finite degrade chain, breakers.

Order: PII hard constraint → capability admission → device breaker → latency gate → device
concurrency cap → device attempt judged against the task type's declared answer (or its output validator,
`routerscope.router.answers`) and its calibrated threshold → default; every cloud answer is checked the same way
before it is handed on. `fallback_type` and `reason` are set where the decision is taken.

The budget only subtracts (docs/sources.md#seed-000: "路由层只做减法"): every level's timeout is its share of the budget
*remaining when it starts* — L0 device 0.7, L1 device degraded (once) 0.3, L2 cloud small 0.5, L3
cloud large 0.8 — and never more than what remains minus L4's 50 ms, so a request takes at most
`deadline_ms - elapsed_ms + 50 ms` whatever the backends do: the router enforces it (a backend that
does not declare `honours_deadline` runs on a bounded guard pool and is abandoned at its timeout,
`routerscope.router.guard`). L4 (the canned answer) ends the chain and is bounded by 50 ms. The device's ETA
includes prefill; when neither the device nor the cloud fits, the output cap is lowered to what fits
(`reason = truncated`) before L4. At 30 % of the deadline spent, while the device streams L0 and
before the commit point, the device's finish is re-estimated from its observed TTFT and token rate;
if it no longer fits 90 % of what remains (of what remains of L0's own share, for an answer served whole, as
at the gate), the device is stopped and the cloud takes over (`fallback_type = timeout`,
`reason = latency_pressure`). A device answer streamed past the commit
point is never taken over and may run to the end of the remaining budget; if that cuts it, the
partial answer is served (`reason = truncated`) and its attempt logged as the `timeout` it was.

Every latency (the event's and each attempt's) is read from the router's injected clock, so a
simulated fleet's events carry simulated time. The event's `confidence` is the first device
attempt's (the one the threshold judged first), and the fallback's type and reason are that first
miss's: an L1 retry never mixes its confidence into calibration.

A PII-pinned request never reaches the cloud: its fallback is L4; over the device's window its input is
cut to it and it runs at L1. An open cloud breaker keeps
traffic on the device (its fallback is L4 too); an open device breaker sends traffic to the cloud
with `reason = device_unavailable`; a device at its concurrency cap sends the excess to the cloud
with `reason = device_busy`, never into a queue (docs/sources.md#seed-004-6). The cloud breaker also opens on a
p90 spike; the device breaker on a model load failure, out-of-memory, or a fallback rate over its
limit for consecutive windows; the p90 is judged against the cloud's learned usual p90 (the configured
baseline its floor), and a breaker that closes starts a fresh window. Breaker settings hot-reload with
the policy. In shadow mode the cloud serves the user with the whole budget while the device runs beside
it within the cap (docs/sources.md#seed-004-5); a PII request of a shadow task type is a live, pinned event.

Rollout stages (docs/sources.md#seed-004-7, `routerscope.router.policy`): a task type in `shadow` runs as above; in
`canary`
only the sessions of its cohort (a stable hash of the session id) may enter the device, the others go
to the cloud with `reason = policy_cloud`, as does every request of a `cloud_only` task; `full` is the
chain above. The hard constraint and the capability matrix still come first, and the cloud remains the
fallback in every stage. Each event records the request's `rollout_stage` (`cloud_only` for a session
outside a canary cohort), what the device measured (`device_stats`, from the backend) and what the
request would have cost served by the cloud alone (`all_cloud_cost_usd`: input plus output tokens at
the L2 model's price, when the policy has prices). Shadow disagreements, and canary requests whose
device answer the cloud replaced with a different one, go to `on_divergence` as `Divergence` samples
with both texts: the caller keeps them with the request texts (docs/sources.md#seed-004-5), never in events.

`Router.route(request)` returns the response and the decision event (`routerscope.contract.events`);
events also go to `on_event`, breaker transitions to `on_breaker_event`. No request or answer text
ever enters an event.

`Router` decides; each concern it coordinates is a module of its own (docs/architecture.md, "The router"):
`latency` (the budget, the ETA and the gate), `window` (the device's context window), `admission` (the breaker's
verdict and the concurrency cap), `device_call` and `device_path` (one device call; L0 → L1 judged),
`cloud_path` (L2 → L3 → L4), `breaker_triggers` and `p90` (what opens a breaker besides failures), `shadow` and
`divergence` (shadow runs, canary samples), `decision_event` (the events), `trace` and `context` (a request's
record and state), `sanity` (nothing handed to the router is trusted).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone

from routerscope.contract.events import BreakerEvent, DecisionEvent
from routerscope.router import experiment
from routerscope.router.admission import YIELD_S, DeviceSlots
from routerscope.router.backends import CloudBackend, DeviceBackend
from routerscope.router.breaker import OPEN, CircuitBreaker, Transition
from routerscope.router.breaker_triggers import CloudLatencyTrigger, FallbackRateTrigger
from routerscope.router.cloud_path import CANNED, CloudPath
from routerscope.router.context import RequestContext
from routerscope.router.decision_event import SCHEMA_VERSION, Events, send
from routerscope.router.device_call import LATE_MS, DeviceCaller, accepts_keyword
from routerscope.router.device_path import DevicePath
from routerscope.router.divergence import Divergence, answer_hash, canary_divergence, normalise
from routerscope.router.guard import Guard
from routerscope.router.latency import (
    GATE_SHARE,
    L4_MS,
    LEVEL_BUDGET,
    MIN_LEVEL_MS,
    Budget,
    cut_at_l0,
    device_estimates,
    device_eta_ms,
    device_fits,
    latency_gate,
    level_timeout_ms,
    prefill_ms,
    tokens_that_fit,
)
from routerscope.router.p90 import BaselineP90, SlidingP90
from routerscope.router.policy import PolicySource, PolicyStore
from routerscope.router.request import Request, Response
from routerscope.router.sanity import finite, sane_request
from routerscope.router.shadow import ShadowRunner
from routerscope.router.trace import Trace
from routerscope.router.window import MAX_COUNTED_CHARS, DeviceWindow, token_bound

__all__ = [  # the router's public names, where its callers have always imported them from
    "CANNED",
    "GATE_SHARE",
    "L4_MS",
    "LATE_MS",
    "LEVEL_BUDGET",
    "MAX_COUNTED_CHARS",
    "SCHEMA_VERSION",
    "YIELD_S",
    "BaselineP90",
    "Divergence",
    "Request",
    "Response",
    "Router",
    "SlidingP90",
    "accepts_keyword",
    "answer_hash",
    "device_eta_ms",
    "device_fits",
    "finite",
    "latency_gate",
    "level_timeout_ms",
    "normalise",
    "prefill_ms",
    "token_bound",
    "tokens_that_fit",
]

UTC = timezone.utc  # noqa: UP017 (datetime.UTC is Python 3.11+; routerscope.router runs on 3.10 too)

log = logging.getLogger("routerscope.router")


def _iso_now() -> datetime:
    return datetime.now(UTC)


class Router:
    def __init__(
        self,
        device: DeviceBackend,
        cloud: CloudBackend,
        *,
        policy: PolicySource | None = None,
        instance_id: str = "router-1",
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = _iso_now,
        on_event: Callable[[DecisionEvent], None] | None = None,
        on_breaker_event: Callable[[BreakerEvent], None] | None = None,
        on_divergence: Callable[[Divergence], None] | None = None,
        enforce: bool | None = None,
        guard_workers: int = 8,
        max_late: int = 4,
    ):
        """`enforce`: hold every backend call to its level's timeout on the router's clock (default: when
        the clock is the real `time.monotonic`; a simulated clock is moved by its backends instead). A
        backend without `honours_deadline = True` then runs on a guard pool of `guard_workers` threads and
        is abandoned at its timeout; past `max_late` abandoned calls still running, new calls to that
        backend fail at once (docs/router.md)."""
        self.device, self.cloud = device, cloud
        self.policy = policy or PolicyStore()
        self.instance_id = instance_id
        self._clock = clock
        self._now = now
        self.on_event = on_event or (lambda e: None)
        self.on_breaker_event = on_breaker_event or (lambda e: None)
        self.on_divergence = on_divergence or (lambda d: None)
        p = self.policy.current()
        self.device_breaker = CircuitBreaker(
            "device", p.breakers["device"], clock=clock, on_transition=self._transition
        )
        self.cloud_breaker = CircuitBreaker("cloud", p.breakers["cloud"], clock=clock, on_transition=self._transition)
        self.enforce = clock is time.monotonic if enforce is None else bool(enforce)
        self.device_guard = Guard("device", guard_workers, max_late)
        self.cloud_guard = Guard("cloud", guard_workers, max_late)
        self.on_shadow_event: Callable[[DecisionEvent], None] | None = None
        self.experiments: experiment.ExperimentSource | None = None  # the closed loop's canary (docs/loop.md)
        # the collaborators, one concern each (docs/architecture.md, "The router")
        self.cloud_trigger = CloudLatencyTrigger(self.cloud_breaker, clock)
        self.fallbacks = FallbackRateTrigger(self.device_breaker, clock)
        self.window = DeviceWindow(device)
        self.caller = DeviceCaller(device, self.device_breaker, self.device_guard, self.policy, clock, self.enforce)
        self.slots = self._device_slots()
        self.cloud_path = CloudPath(cloud, self.cloud_trigger, self.cloud_guard, clock, self.enforce)
        self.device_path = DevicePath(self.caller, self.slots, self.fallbacks, self.cloud_path)
        self.events = Events(instance_id, device, cloud, (self.device_breaker, self.cloud_breaker), now)
        self.shadow = ShadowRunner(
            self.slots, self.caller, self.cloud_path, self.cloud_breaker, self.events, self, clock, self.enforce
        )

    def _device_slots(self) -> DeviceSlots:
        """The device's slots (a simulated fleet counts them per phone, `routerscope.router.sim.fleet`)."""
        return DeviceSlots(self.device_breaker, cancels=self.caller.cancels, enforce=self.enforce)

    # -- what callers read of the collaborators, under the names they always had ----------------------------
    @property
    def enforce(self) -> bool:
        """Whether backend calls are held to their timeouts on the real clock (a live request then also waits for
        a yielding shadow run, and a shadow's device runs on a thread of its own)."""
        return self._enforce

    @enforce.setter
    def enforce(self, value: bool) -> None:
        self._enforce = value
        for part in (getattr(self, "slots", None), getattr(self, "shadow", None)):
            if part is not None:
                part.enforce = value

    @property
    def device_in_flight(self) -> int:
        """Live device calls running, an abandoned one until it really ends."""
        return self.slots.device_in_flight

    @property
    def shadow_in_flight(self) -> int:
        """Shadow runs on the device now."""
        return self.slots.shadow_in_flight

    @property
    def cloud_latency(self) -> SlidingP90:
        """The cloud's p90 over the last five minutes (the gate's and the p90 spike's)."""
        return self.cloud_trigger.latency

    def cloud_baseline_ms(self) -> float:
        """What a p90 spike is measured against (docs/router.md, "p90 spike")."""
        return self.cloud_trigger.baseline_ms()

    @property
    def abandoned_total(self) -> int:
        """Backend calls abandoned at their timeout since the router started (both boundaries)."""
        return self.device_guard.abandoned_total + self.cloud_guard.abandoned_total

    @property
    def abandoned_running(self) -> int:
        """Abandoned backend calls still running now (bounded by `max_late` per boundary)."""
        return self.device_guard.late + self.cloud_guard.late

    def _transition(self, t: Transition) -> None:
        if t.boundary == "cloud":
            self.cloud_trigger.transition(t)
        send(self.on_breaker_event, self.events.breaker(t))

    def device_failed(self, kind: str) -> None:
        """The device cannot serve (`load_failure`, `oom`): open its breaker at once (docs/sources.md#seed-000:
        "端侧不可用" is a far more serious failure than a high fallback rate). For the app that loads the model."""
        self.device_breaker.force_open(f"device_{kind}")

    # -- the decision ------------------------------------------------------------------------------
    def route(self, req: Request) -> tuple[Response, DecisionEvent | None]:
        """Decide and serve one request: the response and its decision event (also given to `on_event`).
        A shadow request whose device is still running when the cloud has served returns None for the
        event: the device runs on, off the user's path, and its event goes to `on_event` and
        `on_shadow_event` when it ends (docs/router.md, "Shadow mode")."""
        ctx = self._context(sane_request(req))
        response = self._decide(ctx)
        if response is None:
            return self.shadow.serve(ctx)
        return self._commit(ctx, response)

    def _context(self, req: Request) -> RequestContext:
        """The request's context: its policy (breaker settings hot-reload with it), input size, output cap, budget
        and stage."""
        budget = Budget(self._clock, req.deadline_ms, req.elapsed_ms)  # the router's own time counts too
        policy = self.policy.current()
        self.device_breaker.set_policy(policy.breakers["device"])  # breaker settings hot-reload too
        self.cloud_breaker.set_policy(policy.breakers["cloud"])
        cap, assignment = experiment.apply(
            self.experiments, req.task_type, req.session_id, policy.capability(req.task_type)
        )
        counted = self.window.count(req.text) if req.input_tokens is None or req.has_pii else None
        if req.input_tokens is not None:
            input_tokens = req.input_tokens
        else:  # the device model's own count where it has a tokenizer, else the usual 4-characters estimate
            input_tokens = counted if counted is not None else max(1, len(req.text) // 4)
        expected_out = req.expected_output_tokens if req.expected_output_tokens is not None else cap.max_output_tokens
        # generate what the gateway expects, never past the task's cap
        limits = [x for x in (cap.max_output_tokens, req.expected_output_tokens) if x]
        trace = Trace(
            input_tokens=input_tokens,
            prices=policy.cloud_prices or None,
            request_id=req.request_id or str(uuid.uuid4()),
            assignment=assignment,
        )
        stage = policy.stage_for(req.task_type, req.session_id)
        pinned = req.has_pii and not policy.pii_to_cloud
        # docs/sources.md#seed-004 / docs/router.md: a PII request of a shadow task type is pinned to the device, a
        # live event
        mode = "shadow" if stage == "shadow" and not pinned else "live"
        no_time = budget.timeout_ms(0) < MIN_LEVEL_MS  # not even L0 fits before L4's 50 ms: the canned answer
        max_tokens = min(limits) if limits else 64
        # positional: the request path's one allocation of it costs a third of a keyword call
        return RequestContext(
            req,
            policy,
            cap,
            budget,
            trace,
            counted,
            input_tokens,
            expected_out,
            max_tokens,
            stage,
            pinned,
            mode,
            no_time,
        )

    def _decide(self, ctx: RequestContext) -> Response | None:
        """The short-circuit decision, in order; the response, or None for a shadow request (`ShadowRunner.serve`
        serves it). Sets the context's `fallback_type`, `reason` and `entered` where the decision is taken."""
        req = ctx.req
        if ctx.pinned:
            return self._pinned(ctx)  # 1. Hard constraint: the device or a conservative answer, never the cloud.
        if not ctx.cap.admits(ctx.input_tokens, ctx.expected_out, req.tools, req.files):
            # 2. Capability admission: never enters the device.
            ctx.fallback_type, ctx.reason = "capability", "capability_miss"
            return self.cloud_path.or_l4(ctx)
        if ctx.stage == "cloud_only":
            # Rollout: rolled back, or a session outside the task's canary cohort (docs/sources.md#seed-004-7).
            ctx.reason = "policy_cloud"
            return self.cloud_path.or_l4(ctx)
        if ctx.no_time:
            ctx.reason = "latency_pressure"
            return self.cloud_path.l4(ctx.trace)
        if ctx.mode == "shadow":
            return None
        if self.device_breaker.state == OPEN:
            # Device unavailable (breaker open): everything to the cloud.
            ctx.reason = "device_unavailable"
            return self.cloud_path.or_l4(ctx)
        return self._gated(ctx)

    def _pinned(self, ctx: RequestContext) -> Response:
        """A PII-pinned request: the device or L4. Over the device's window (its context less the output budget)
        the input is cut to fit, counted in the model's own tokens where it can, and runs as L1 with L0's share
        of the budget, never the cloud."""
        req, budget, max_tokens = ctx.req, ctx.budget, ctx.max_tokens
        ctx.reason = "pii_pin"
        device_ttft, device_tps, device_prefill_tps = device_estimates(self.device)
        room = self.window.room(ctx.cap, max_tokens)
        prompt = None
        device_input = self.window.size(req.text, ctx.counted, ctx.input_tokens)
        ctx.trace.device_input_tokens = device_input  # the figure the window was judged by (the event carries it)
        if room is not None and device_input > room:
            prompt, device_input = self.window.cut(req.text, room, device_input)
        too_big = room is not None and device_input > room  # not even cut does it fit (a huge system prompt)
        fit = min(
            max_tokens,
            tokens_that_fit(
                budget.remaining_ms(), device_ttft, prefill_ms(device_input, device_prefill_tps), device_tps
            ),
        )
        if ctx.no_time or too_big or fit < 1 or self.slots.enter(ctx.policy) is not None:
            return self.cloud_path.l4(ctx.trace)  # nothing fits even truncated, or the device cannot take it
        ctx.entered = True
        response, ctx.fallback_type, _ = self.device_path.run(
            ctx, fit, allow_cloud=False, prompt=prompt, cut_at=fit if fit < max_tokens else None
        )
        return response

    def _gated(self, ctx: RequestContext) -> Response:
        """3. The latency gate, judged before the device starts (the device's ETA includes its prefill); then the
        device's slot, and the device path."""
        max_tokens = ctx.max_tokens
        device_ttft, device_tps, device_prefill_tps = device_estimates(self.device)
        remaining = ctx.budget.remaining_ms()
        prefill = prefill_ms(ctx.input_tokens, device_prefill_tps)
        eta = device_eta_ms(device_ttft, ctx.expected_out, device_tps, prefill)
        cut = level_timeout_ms(0, remaining) if cut_at_l0(ctx.cap) else None
        gate = latency_gate(remaining, eta, self.cloud_latency.p90(), cut)
        cloud_ok = self.cloud_breaker.state != OPEN
        fit = max_tokens
        if gate != "device" and not (gate == "cloud" and cloud_ok):
            # neither fits (or the cloud's breaker is open): truncate first (docs/sources.md#seed-000 "裁剪输出")
            fit = min(max_tokens, tokens_that_fit(remaining, device_ttft, prefill, device_tps))
        if gate == "cloud" and cloud_ok:
            ctx.reason = "latency_pressure"
            return self.cloud_path.or_l4(ctx)
        if fit < 1:  # not even a truncated answer fits on the device (its prefill alone does not)
            ctx.reason = "latency_pressure"
            return self.cloud_path.or_l4(ctx, cloud_ok)
        blocked = self.slots.enter(ctx.policy)  # the breaker's verdict or the concurrency cap
        if blocked:
            ctx.reason = blocked
            return self.cloud_path.or_l4(ctx, cloud_ok)
        ctx.entered = True
        truncated = fit < max_tokens
        response, ctx.fallback_type, miss = self.device_path.run(
            ctx, fit, allow_cloud=cloud_ok, judge_midway=not truncated, cut_at=fit if truncated else None
        )
        # a truncated request is recorded as such whichever way it ends (docs/router.md)
        ctx.reason = "truncated" if truncated else (miss or "default")
        return response

    def _commit(self, ctx: RequestContext, response: Response) -> tuple[Response, DecisionEvent]:
        """The live request's end: a canary's divergence sample, its decision event, handed to `on_event`."""
        sample = canary_divergence(ctx, response)
        if sample is not None:
            self.on_divergence(sample)
        event = self.events.decision(ctx, ctx.trace.attempts[-1].level, None, ctx.budget.spent_ms())
        send(self.on_event, event)
        return response, event
