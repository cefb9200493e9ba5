"""The cloud path (docs/router.md, "The degrade chain"): L2 (cloud small), then L3 (cloud large), each under its share
of the budget remaining, every answer checked as the device's is before it is handed on, then L4, the canned
answer, which ends the chain. A cloud breaker open for slowness, not failures, still lets a request with nowhere
else to go through while the cloud's recent p90 fits a level's timeout."""

from __future__ import annotations

from collections.abc import Callable

from routerscope.router.answers import check as check_answer
from routerscope.router.backends import CloudBackend, CloudResult
from routerscope.router.breaker_triggers import CloudLatencyTrigger
from routerscope.router.context import RequestContext
from routerscope.router.device_call import LATE_MS
from routerscope.router.guard import ABANDONED, DONE, Guard, honours_deadline
from routerscope.router.latency import L4_MS, MIN_LEVEL_MS, Budget
from routerscope.router.request import Response
from routerscope.router.sanity import sane_cloud_result
from routerscope.router.trace import Trace

CANNED = "Sorry, I can't answer that right now."


class CloudPath:
    """Calls `cloud` for the router; its outcomes go to the cloud breaker through `trigger`. `enforce`: hold every
    call to its timeout on the router's clock (a backend without `honours_deadline` then runs on `guard`)."""

    def __init__(
        self, cloud: CloudBackend, trigger: CloudLatencyTrigger, guard: Guard, clock: Callable[[], float], enforce: bool
    ):
        self.cloud, self.trigger, self.guard, self._clock = cloud, trigger, guard, clock
        self.guarded = enforce and not honours_deadline(cloud)

    def or_l4(
        self, ctx: RequestContext, allowed: bool = True, budget: Budget | None = None, max_tokens: int | None = None
    ) -> Response:
        """The cloud chain when `allowed` (on `budget`, default the request's, for `max_tokens`, default the
        request's cap), else, or when it fails, L4."""
        return (self.chain(ctx, budget, max_tokens) if allowed else None) or self.l4(ctx.trace)

    def chain(
        self, ctx: RequestContext, budget: Budget | None = None, max_tokens: int | None = None
    ) -> Response | None:
        """L2 then L3; None when both failed or no time is left (the caller goes to L4)."""
        budget = ctx.budget if budget is None else budget
        max_tokens = ctx.max_tokens if max_tokens is None else max_tokens
        trace = ctx.trace
        for level in (2, 3):
            timeout_ms = budget.timeout_ms(level)
            if timeout_ms < MIN_LEVEL_MS:
                return None
            bypass = False
            if not self.trigger.breaker.allow():
                # open for slowness, not failures: a request with nowhere else to go than the canned answer
                # still gets the cloud when its recent p90 fits a level's timeout (docs/router.md)
                if not self.trigger.open_for_latency:
                    return None
                if self.trigger.latency.p90() > timeout_ms:
                    continue  # L3's larger share may hold it
                bypass = True
            result, latency_ms, abandoned = self._call(ctx, level, timeout_ms, max_tokens, bypass)
            if result.outcome == "ok":
                trace.charge(self.cloud.model_for(level), result.tokens_out)  # paid, served or not
                # the cloud's answer is checked as the device's is before it is handed on (docs/router.md)
                cut = result.tokens_out >= max_tokens
                failed = (
                    check_answer(ctx.cap, result.text, ctx.req.tools, cut)
                    if ctx.cap.answer or ctx.cap.validator
                    else None
                )
                if failed is not None:
                    trace.add(level, "validator_failed", latency_ms, abandoned)
                    trace.answer_check = trace.answer_check or failed.check
                    continue
            trace.add(level, result.outcome, latency_ms, abandoned)
            if result.outcome == "ok":
                trace.cloud_model = self.cloud.model_for(level)
                trace.output_tokens = result.tokens_out or trace.output_tokens
                return Response(result.text, level, "cloud")
        return None

    def _call(
        self, ctx: RequestContext, level: int, timeout_ms: float, max_tokens: int, bypass: bool = False
    ) -> tuple[CloudResult, float, bool]:
        """One cloud call under its level's timeout: the result, its latency on the router's clock, and
        whether the router abandoned it (docs/router.md). `bypass`: a call past a breaker open for slowness
        (its latency is kept; it is no trial)."""
        ctx.trace.cloud_calls += 1
        started = self._clock()
        abandoned = False
        text = ctx.req.text

        def call():
            return self.cloud.complete(text, level=level, max_tokens=max_tokens, timeout_ms=timeout_ms)

        if self.guarded:
            state, value = self.guard.run(call, timeout_ms / 1000)
            if state == DONE and isinstance(value, CloudResult):
                result = value
            elif state == ABANDONED:
                abandoned = True
                result = CloudResult("", (self._clock() - started) * 1000, "timeout")
            else:  # raised, not a result, or the guard full of late calls: an error attempt
                result = CloudResult("", 0.0, "error")
        else:
            try:
                result = call()
            except Exception:  # a cloud backend's failure is an error attempt, never an exception out of route()
                result = CloudResult("", 0.0, "error")
        result = sane_cloud_result(result)
        latency_ms = (self._clock() - started) * 1000
        if result.outcome == "ok" and latency_ms > timeout_ms + LATE_MS:  # too late: dropped, never served
            result = CloudResult("", latency_ms, "timeout")
        if bypass:
            self.trigger.record_bypass(result, latency_ms)
        else:
            self.trigger.record(result, latency_ms)
        return result, latency_ms, abandoned

    def l4(self, trace: Trace) -> Response:
        """L4 ends the chain: the canned answer, logged with its real latency, bounded by L4_MS."""
        started = self._clock()
        response = Response(CANNED, 4, "fallback")
        trace.add(4, "ok", min(L4_MS, (self._clock() - started) * 1000))
        return response
