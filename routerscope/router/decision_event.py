"""The router's events (`routerscope.contract.events`): the decision event built from a request's context and trace
(every value clamped into the contract's ranges, never an event the loader must refuse; no request or answer
text), the breaker event of a transition, and `send`, which hands either to a caller's sink."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from datetime import datetime

from msgspec import UNSET, UnsetType

from routerscope.contract.events import (
    DECISION_SCHEMA_VERSIONS,
    THERMAL_STATES,
    BreakerEvent,
    BreakerStates,
    DecisionEvent,
    DeviceStats,
    new_decision,
)
from routerscope.contract.validation import DEVICE_STATS_MAXIMA
from routerscope.router import experiment
from routerscope.router.backends import CloudBackend, DeviceBackend
from routerscope.router.breaker import CircuitBreaker, Transition
from routerscope.router.context import RequestContext
from routerscope.router.sanity import DAY_MS, MAX_TOKENS, finite

log = logging.getLogger("routerscope.router")
SCHEMA_VERSION = DECISION_SCHEMA_VERSIONS[-1]  # the contract the router emits (v2: device_busy, truncated, abandoned)


def send(sink, event) -> None:
    """Hand an event to a sink the caller gave; a sink that raises is logged, never a failed request (nor a
    slot released twice on the way out)."""
    try:
        sink(event)
    except Exception:
        log.exception("an event sink failed; routing goes on")


class Events:
    """Builds the events of one router (`instance_id`, its backends and breakers, its wall clock `now`)."""

    def __init__(
        self,
        instance_id: str,
        device: DeviceBackend,
        cloud: CloudBackend,
        breakers: tuple[CircuitBreaker, CircuitBreaker],
        now: Callable[[], datetime],
    ):
        self.instance_id, self.device, self.cloud, self.breakers, self._now = instance_id, device, cloud, breakers, now

    def breaker(self, t: Transition) -> BreakerEvent:
        return BreakerEvent(
            schema_version=1,
            event_id=str(uuid.uuid4()),
            event_time=self._now(),
            instance_id=self.instance_id,
            boundary=t.boundary,
            from_state=t.from_state,
            to_state=t.to_state,
            failure_rate=min(1.0, max(0.0, t.failure_rate)),
            window_s=t.window_s,
            trigger=t.trigger[:64],
            seq=t.seq,
        )

    def decision(self, ctx: RequestContext, level: int, shadow_agree: bool | None, latency_ms: float) -> DecisionEvent:
        req, trace, entered = ctx.req, ctx.trace, ctx.entered
        all_cloud: float | UnsetType = UNSET
        # docs/sources.md#seed-003 and #seed-004: what the request would have cost served by the cloud alone
        if trace.prices is not None:
            all_cloud = (
                trace.prices.get(self.cloud.model_for(2), 0.0) * (trace.input_tokens + trace.output_tokens) / 1000
            )
        # the contract's ranges; values are checked before they are clamped (the common case costs no call)
        d, e, i, o, ttft = req.deadline_ms, req.elapsed_ms, trace.input_tokens, trace.output_tokens, trace.ttft_ms
        return new_decision(
            schema_version=SCHEMA_VERSION,
            event_time=self._now(),
            request_id=trace.request_id,
            session_id=req.session_id,
            task_type=req.task_type,
            mode=ctx.mode,
            entered_device=entered,
            fallback_type=ctx.fallback_type,
            reason=ctx.reason,
            degrade_level=level,
            attempts=trace.attempts,
            cloud_calls=trace.cloud_calls,
            confidence=trace.confidence,
            threshold=ctx.cap.threshold if entered else None,
            deadline_ms=d if type(d) is int and 1 <= d <= DAY_MS else min(DAY_MS, max(1, int(d))),
            # what the gateway sent, when `deadline_ms` (at least 1) cannot hold it (the contract's range: a day)
            gateway_deadline_ms=max(-DAY_MS, int(d)) if d < 1 else None,
            elapsed_ms=e if type(e) is int and 0 <= e <= DAY_MS else min(DAY_MS, max(0, int(e))),
            latency_ms=latency_ms if 0.0 <= latency_ms <= DAY_MS else min(float(DAY_MS), max(0.0, latency_ms)),
            input_tokens=i if 0 <= i <= MAX_TOKENS else min(MAX_TOKENS, max(0, i)),
            output_tokens=o if 0 <= o <= MAX_TOKENS else min(MAX_TOKENS, max(0, o)),
            policy_version=ctx.policy.version,
            app_id=req.app_id,
            confidence_source=trace.confidence_source,
            ttft_ms=ttft
            if ttft is None or (type(ttft) is float and 0.0 <= ttft <= DAY_MS)
            else min(float(DAY_MS), max(0.0, finite(ttft, 0.0))),
            network=req.network,
            device_tier=req.device_tier,
            has_pii=req.has_pii,
            device_model=self.device.model if entered else None,
            cloud_model=trace.cloud_model,
            shadow_agree=shadow_agree,
            breaker=BreakerStates(device=self.breakers[0].state, cloud=self.breakers[1].state),
            cost_usd=trace.cost_usd if trace.prices is not None else UNSET,
            device_stats=device_stats(trace.device_stats) if entered else None,
            all_cloud_cost_usd=all_cloud,
            rollout_stage=ctx.stage,
            **experiment.event_fields(trace.assignment),
            answer_check=trace.answer_check or UNSET,
            device_input_tokens=UNSET
            if trace.device_input_tokens is None
            else min(MAX_TOKENS, max(0, trace.device_input_tokens)),
        )


def device_stats(stats: dict | None) -> DeviceStats | None:
    """The contract's `device_stats` from a backend's measurements (None: the backend measured nothing); a value
    out of the contract's type or range is left out (unknown), never an event the loader must refuse."""
    if not stats or not isinstance(stats, dict):
        return None

    def number(key: str):
        value = finite(stats.get(key), -1.0)
        return value if 0.0 <= value <= DEVICE_STATS_MAXIMA[key] else None

    optional = {}
    if number("peak_mem_mb") is not None:
        optional["peak_mem_mb"] = number("peak_mem_mb")
    if stats.get("thermal_state") in THERMAL_STATES:
        optional["thermal_state"] = stats["thermal_state"]
    if isinstance(stats.get("cold_start"), bool):
        optional["cold_start"] = stats["cold_start"]
    return DeviceStats(
        **optional,
        decode_tps=number("decode_tps"),
        prefill_tps=number("prefill_tps"),
        load_ms=number("load_ms") if stats.get("cold_start") is True else None,
        resident_mem_mb=number("resident_mem_mb"),
    )
