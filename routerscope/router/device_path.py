"""The device path (docs/router.md, "The degrade chain"): L0, its answer judged against the task type's declared
answer and its calibrated threshold; L1 (degraded) once on a quality miss; then the cloud path, or L4 when the cloud
is not allowed. A streaming L0 is re-judged at the decision point; an answer streamed past the commit point is
never taken over, and served up to its last complete sentence if the budget cuts it. Nothing reaches the user
unvalidated (docs/router.md, "Nothing unvalidated reaches a user")."""

from __future__ import annotations

from routerscope.router.admission import DeviceSlots
from routerscope.router.answers import check as check_answer
from routerscope.router.backends import DeviceResult, complete_sentences
from routerscope.router.breaker_triggers import FallbackRateTrigger
from routerscope.router.cloud_path import CloudPath
from routerscope.router.context import RequestContext
from routerscope.router.device_call import DeviceCall, DeviceCaller
from routerscope.router.latency import MIN_LEVEL_MS, cut_at_l0, device_estimates, device_fits
from routerscope.router.request import Response


class DevicePath:
    """The device's turn of a live request that holds a device slot (`slots`); its fallbacks feed `fallbacks`."""

    def __init__(self, caller: DeviceCaller, slots: DeviceSlots, fallbacks: FallbackRateTrigger, cloud: CloudPath):
        self.caller, self.slots, self.fallbacks, self.cloud = caller, slots, fallbacks, cloud

    def run(
        self,
        ctx: RequestContext,
        fit: int,
        *,
        allow_cloud: bool,
        judge_midway: bool = True,
        prompt: str | None = None,
        cut_at: int | None = None,
    ) -> tuple[Response, str, str | None]:
        """L0, judged; L1 once on a quality miss; then the cloud chain (or L4 when the cloud is not allowed), all
        for `fit` output tokens. `prompt`: the input already cut to the device's window, which starts at L1 (a
        context cut) with L0's share of the budget. `cut_at`: the lowered output cap of a truncated request (an
        answer that reaches it is partial). The caller holds a device slot; it is released when the device's turn
        ends, or, for a call the router abandoned, when that call really ends. Nothing reaches the user
        unvalidated: a structured answer is served whole and valid or not at all; a partial free-text answer only
        up to its last complete sentence (docs/router.md, "Nothing unvalidated reaches a user"). Returns the
        response, the fallback type and the reason: the first device miss's, `truncated` for a partial answer
        served, None when the device served in full."""
        levels = [1] if prompt is not None else [0, 1] if ctx.policy.l1_enabled else [0]
        miss: tuple[str, str] | None = None  # (fallback_type, reason) of the first device miss
        served: Response | None = None
        handed_off = False  # an abandoned call holds the slot until it really ends
        try:
            for level in levels:
                call = self._call_for(ctx, level, fit, allow_cloud and judge_midway, prompt)
                if call is None:  # no time left for another device try
                    break
                result, latency_ms, abandoned = self.caller.run(ctx.trace, ctx.req, ctx.budget, call)
                handed_off = abandoned
                if result.outcome != "ok":
                    served, this = self._miss(ctx, level, result, latency_ms, abandoned)
                    miss = miss or this
                    break  # timeouts and errors go straight to the cloud (L0 → L2)
                cap_out = (
                    None if cut_at is None else cut_at if level == 0 or prompt is not None else max(1, cut_at // 2)
                )
                asked = call.max_tokens if level == 0 or prompt is not None else max(1, call.max_tokens // 2)
                served, this = self.judge(ctx, level, result, latency_ms, cap_out, asked)
                miss = miss or this
                if served is not None or this is None or this[0] != "quality":
                    break  # served, or cut to nothing; a quality miss: L1 once may fix it
        finally:
            if not handed_off:
                self.slots.release()
            if ctx.req.task_type not in ctx.policy.shadow:
                self.fallbacks.record(served is None)
        if served is not None:
            return served, "none", "truncated" if served.partial else None
        fallback_type, reason = miss or ("timeout", "device_timeout")
        return self.cloud.or_l4(ctx, allow_cloud, max_tokens=fit), fallback_type, reason

    def _call_for(
        self, ctx: RequestContext, level: int, fit: int, midway: bool, prompt: str | None
    ) -> DeviceCall | None:
        """A live device try at `level`; None when its share of the budget is too small to start one. `midway`: a
        streaming L0 is re-judged at the decision point (only with a cloud to move to)."""
        share_level = 0 if prompt is not None else level
        budget = ctx.budget
        if budget.timeout_ms(share_level) < MIN_LEVEL_MS:
            return None
        decide = None
        if level == 0 and midway:
            # judged against L0's own cut: an answer served whole is cut at L0's share, so the rest must fit in
            # what is left of it (docs/router.md, "The decision point and the commit point")
            l0_cut = budget.timeout_ms(0) if cut_at_l0(ctx.cap) else None

            def decide(elapsed_ms: float, tokens: int, ttft_ms: float) -> bool:
                left = budget.remaining_ms()
                if l0_cut is not None:
                    left = min(left, l0_cut - elapsed_ms)
                return device_fits(left, elapsed_ms, tokens, ttft_ms, fit, device_estimates(self.caller.device)[1])

        return DeviceCall(
            level,
            fit,
            ctx.policy.commit_tokens,
            decide,
            prompt,
            None,
            ctx.cap.whole,
            share_level,
            None,
            self.slots.release,
        )

    def judge(
        self,
        ctx: RequestContext,
        level: int,
        result: DeviceResult,
        latency_ms: float,
        cap_out: int | None,
        asked: int | None = None,
    ) -> tuple[Response | None, tuple[str, str] | None]:
        """A device answer judged: the response to serve, or the miss (a quality miss, or a truncated answer cut
        to nothing). `cap_out`: the lowered output cap an answer that reaches may be cut at; `asked`: the output
        cap the device was given (an answer that reaches it may be cut: never served as complete code)."""
        cap, trace = ctx.cap, ctx.trace
        text, cut = result.text, False
        if cap_out is not None and result.tokens_out >= cap_out:  # stopped at the lowered cap: may be cut
            # structured: whole or nothing, so never served; free text: only whole sentences
            text = "" if cap.whole else complete_sentences(text)
            cut = text != result.text.strip()
            if not text:
                trace.add(level, "timeout", latency_ms)
                return None, ("timeout", "device_timeout")
        trace.device_text = trace.device_text or text
        failed = check_answer(cap, text, ctx.req.tools, asked is not None and result.tokens_out >= asked)
        if failed is not None:  # docs/router.md, "Only a declared answer is served"
            trace.add(level, "validator_failed", latency_ms)
            trace.answer_check = trace.answer_check or failed.check
            return None, ("quality", "validator_failed")
        if result.confidence is not None and result.confidence < cap.threshold:
            trace.add(level, "low_confidence", latency_ms)
            return None, ("quality", "low_confidence")
        trace.add(level, "ok", latency_ms)
        return Response(text, level, "device", partial=cut), None

    def _miss(
        self, ctx: RequestContext, level: int, result: DeviceResult, latency_ms: float, abandoned: bool
    ) -> tuple[Response | None, tuple[str, str] | None]:
        """A device try that timed out or failed: logged; the partial answer of one streamed past the commit point
        served, else the miss."""
        cap = ctx.cap
        ctx.trace.add(level, result.outcome, latency_ms, abandoned)
        if result.outcome == "timeout" and result.committed and not result.preempted and not cap.whole:
            # past the commit point: never taken over mid-stream; the partial answer is served up to its
            # last complete sentence, flagged as truncated, its attempt logged as the timeout it was
            # (docs/sources.md#seed-000 "宁可让端侧跑完"); with no complete sentence it falls back
            partial = complete_sentences(result.text)
            failed = check_answer(cap, partial, ctx.req.tools) if partial else None
            if partial and failed is None:
                return Response(partial, level, "device", partial=True), None
            if failed is not None:
                ctx.trace.answer_check = ctx.trace.answer_check or failed.check
        if result.preempted:
            return None, ("timeout", "latency_pressure")
        return None, (("timeout", "device_timeout") if result.outcome == "timeout" else ("error", "device_error"))
