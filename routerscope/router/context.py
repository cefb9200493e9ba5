"""One request's context through the router's paths (`RequestContext`): what the decision reads (the request,
its policy and capability, budget, sizes, stage and mode) and what it sets as it goes (`entered`, `fallback_type`,
`reason`), with the request's trace and a shadow request's device side."""

from __future__ import annotations

from dataclasses import dataclass

from routerscope.router.backends import Cancel, DeviceResult
from routerscope.router.latency import Budget
from routerscope.router.policy import Capability, Policy
from routerscope.router.request import Request
from routerscope.router.trace import Trace


@dataclass(slots=True)
class ShadowSide:
    """A shadow request's device side: its slot (or why it has none), its own trace and how its call ended."""

    slot: Cancel | str
    dev: Trace
    device_timeout_ms: float
    result: DeviceResult | None = None
    latency_ms: float = 0.0
    abandoned: bool = False

    @property
    def blocked(self) -> str | None:
        """Why the device could not run beside the cloud (`device_busy`, `device_unavailable`), None when it ran."""
        return self.slot if isinstance(self.slot, str) else None


@dataclass(slots=True)
class RequestContext:
    """One request's context through the router's paths (gate, device, degrade chain, shadow, canary, commit, L4):
    the request, its policy and capability, its budget clock, the attempts so far (`trace`), the decision's
    fields as they are set (`entered`, `fallback_type`, `reason`) and a shadow request's device side."""

    req: Request
    policy: Policy
    cap: Capability
    budget: Budget
    trace: Trace
    counted: int | None  # the input in the device model's own tokens, when counted
    input_tokens: int
    expected_out: int
    max_tokens: int
    stage: str
    pinned: bool
    mode: str
    no_time: bool  # not even L0 fits before L4's 50 ms
    entered: bool = False
    fallback_type: str = "none"
    reason: str = "default"
    shadow: ShadowSide | None = None
