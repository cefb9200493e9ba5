"""Shadow mode (docs/sources.md#seed-004-5, docs/router.md "Shadow mode"): the cloud serves the user with the whole
budget, as if the task were cloud-only; the device runs beside it in a shadow slot (`DeviceSlots.enter_shadow`), off
the user's path, and its answer is only compared after normalisation (a disagreement is a `Divergence` sample).
With the cloud's breaker open the device's answer serves. A device still running when the user was served sends
its event when it ends, to `on_event` and `on_shadow_event`."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Protocol

from routerscope.contract.events import Attempt, DecisionEvent
from routerscope.router.admission import DeviceSlots
from routerscope.router.answers import check as check_answer
from routerscope.router.backends import Cancel, DeviceResult
from routerscope.router.breaker import OPEN, CircuitBreaker
from routerscope.router.cloud_path import CloudPath
from routerscope.router.context import RequestContext, ShadowSide
from routerscope.router.decision_event import Events, send
from routerscope.router.device_call import DeviceCall, DeviceCaller
from routerscope.router.divergence import Divergence, normalise
from routerscope.router.latency import Budget, level_timeout_ms
from routerscope.router.request import Response
from routerscope.router.trace import Trace

log = logging.getLogger("routerscope.router")


class Sinks(Protocol):
    """Where a shadow request's event and samples go (the router's sinks, read when they are sent)."""

    on_event: Callable[[DecisionEvent], None]
    on_divergence: Callable[[Divergence], None]
    on_shadow_event: Callable[[DecisionEvent], None] | None


def device_attempt(shadow: ShadowSide) -> Attempt:
    """The shadow device's own attempt (level 0), as it ended."""
    outcome = shadow.result.outcome if shadow.result is not None else "error"
    latency = max(0.0, float(shadow.latency_ms))
    if shadow.abandoned:
        return Attempt(level=0, outcome=outcome, latency_ms=latency, abandoned=True)
    return Attempt(level=0, outcome=outcome, latency_ms=latency)


class ShadowRunner:
    """Serves the router's shadow requests. `enforce`: the real clock, where the device runs on a thread of its own
    beside the cloud; on a simulated clock the device runs first and the cloud gets a fresh budget after it."""

    def __init__(
        self,
        slots: DeviceSlots,
        caller: DeviceCaller,
        cloud: CloudPath,
        cloud_breaker: CircuitBreaker,
        events: Events,
        sinks: Sinks,
        clock: Callable[[], float],
        enforce: bool,
    ):
        self.slots, self.caller, self.cloud, self.cloud_breaker = slots, caller, cloud, cloud_breaker
        self.events, self.sinks, self._clock, self.enforce = events, sinks, clock, enforce

    def serve(self, ctx: RequestContext) -> tuple[Response, DecisionEvent | None]:
        """docs/sources.md#seed-004-5 shadow traffic: the cloud serves the user with the whole budget, as if the task
        were cloud-only; the device runs beside it (its own attempt, within the concurrency cap), off the user's
        path, its answer only compared after normalisation. With the cloud's breaker open the device serves
        (docs/sources.md#seed-000: everything stays on the device). On a simulated clock the device runs first and the
        cloud gets a fresh budget after it; the event's latency is the user's either way."""
        slot = self.slots.enter_shadow(ctx.policy)
        cloud_open = self.cloud_breaker.state == OPEN
        shadow = ctx.shadow = ShadowSide(
            slot,
            Trace(input_tokens=ctx.input_tokens, request_id=ctx.trace.request_id),
            level_timeout_ms(0, ctx.budget.remaining_ms()),
        )
        if shadow.blocked is None and (cloud_open or not self.enforce):
            self._device(ctx)  # on the user's path only when there is no cloud; else a simulated clock's turn
        if cloud_open:
            return self._on_device(ctx)
        user = ctx.budget if self.enforce else Budget(self._clock, ctx.req.deadline_ms, ctx.req.elapsed_ms)
        done = threading.Event()
        if shadow.blocked is None and self.enforce:

            def beside() -> None:
                try:
                    self._device(ctx)
                finally:
                    done.set()

            threading.Thread(target=beside, name="routerscope-shadow", daemon=True).start()
        else:
            done.set()
        response = self.cloud.or_l4(ctx, budget=user)
        latency_ms = user.spent_ms()
        if done.is_set():
            event = self._finish(ctx, response, latency_ms)
            send(self.sinks.on_event, event)
            return response, event
        self._later(ctx, response, user, done)
        return response, None

    def _device(self, ctx: RequestContext) -> None:
        """The shadow's device run, in its slot (released when it ends, or, abandoned, when the call really
        ends); nothing the device does reaches the user's path."""
        shadow = ctx.shadow
        assert shadow is not None and isinstance(shadow.slot, Cancel)
        slot = shadow.slot
        handed_off = False
        try:
            call = DeviceCall(
                0,
                ctx.max_tokens,
                ctx.policy.commit_tokens,
                timeout_ms=shadow.device_timeout_ms,
                whole=ctx.cap.whole,
                cancel=slot,
                on_late_end=lambda: self.slots.release_shadow(slot),
                shadow=True,
            )
            shadow.result, shadow.latency_ms, shadow.abandoned = self.caller.run(shadow.dev, ctx.req, ctx.budget, call)
            handed_off = shadow.abandoned
        except Exception:  # nothing the device does may reach the user's path
            shadow.result = DeviceResult("", None, "none", 0, 0.0, 0.0, "error")
            shadow.latency_ms, shadow.abandoned = 0.0, False
        finally:
            if not handed_off:
                self.slots.release_shadow(slot)

    def _on_device(self, ctx: RequestContext) -> tuple[Response, DecisionEvent]:
        """The cloud's breaker is open: the device's shadow answer serves the user, validated like any device
        answer, else L4."""
        shadow, cap = ctx.shadow, ctx.cap
        assert shadow is not None
        result = shadow.result
        failed = None
        if result is not None and result.outcome == "ok":
            failed = check_answer(cap, result.text, ctx.req.tools, result.tokens_out >= ctx.max_tokens)
            ctx.trace.answer_check = None if failed is None else failed.check
        if result is not None and result.outcome == "ok" and failed is None:
            response = Response(result.text, 0, "device")
        else:
            response = self.cloud.l4(ctx.trace)
        event = self._finish(ctx, response, ctx.budget.spent_ms())
        send(self.sinks.on_event, event)
        return response, event

    def _finish(self, ctx: RequestContext, response: Response, latency_ms: float) -> DecisionEvent:
        """The shadow request's event, once both sides ended: the device's attempt first, agreement of the two
        answers (a disagreement goes to `on_divergence` as a sample)."""
        shadow, trace = ctx.shadow, ctx.trace
        assert shadow is not None
        ctx.entered = shadow.blocked is None
        ctx.reason = shadow.blocked or "default"
        if ctx.entered:
            dev = shadow.dev
            trace.attempts.insert(0, device_attempt(shadow))
            trace.confidence, trace.confidence_source = dev.confidence, dev.confidence_source
            trace.ttft_ms, trace.device_stats = dev.ttft_ms, dev.device_stats
        result = shadow.result
        agree = None
        if response.served_by == "cloud" and result is not None and result.outcome == "ok":
            agree = normalise(result.text) == normalise(response.text)
            if not agree:
                try:
                    self.sinks.on_divergence(
                        Divergence(
                            trace.request_id, ctx.req.task_type, ctx.stage, ctx.input_tokens, result.text, response.text
                        )
                    )
                except Exception:  # a failing sample sink (maybe on the device's thread) never loses the event
                    log.exception("shadow divergence sample not kept for request %s", trace.request_id)
        if response.served_by == "device" and result is not None:
            trace.output_tokens = result.tokens_out
        return self.events.decision(ctx, response.level, agree, latency_ms)

    def _later(self, ctx: RequestContext, response: Response, user: Budget, done: threading.Event) -> None:
        """The device ends after the user was served: its event leaves then (to `on_event` and
        `on_shadow_event`), with the user's latency: until route() returns."""
        returned: dict = {}
        left = threading.Event()

        def later() -> None:
            done.wait()
            left.wait()
            try:
                event = self._finish(ctx, response, returned["ms"])
                self.sinks.on_event(event)
                if self.sinks.on_shadow_event is not None:
                    self.sinks.on_shadow_event(event)
            except Exception:  # nothing to raise to on this thread: said, never silent
                log.exception("the shadow event of request %s was not sent", ctx.trace.request_id)

        threading.Thread(target=later, name="routerscope-shadow-event", daemon=True).start()
        returned["ms"] = user.spent_ms()
        left.set()
