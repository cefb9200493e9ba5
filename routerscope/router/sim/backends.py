"""Simulated backends (SIMULATED): the statistical device and cloud the fleet drives the real router with,
and instant backends with fixed results (the decision-overhead benchmark, decision-logic tests).

* `StatDevice`: TTFT = the tier's fixed time + input / prefill rate (load first when cold); decode by tier
  under background load with a slow tail, halved when the SoC throttles; confidence from the task type's
  shape (`routerscope.router.sim.texts`). The ledger's draws come from the fleet (`Fleet.draw_ledger`, `Fleet.measure`).
* `StatCloud`: RTT(network) + queue + prefill + output / the model's rate, log-normal noise, a small
  error rate; every call fails during a cloud outage.
Both sleep on the fleet's simulated clock for the time they take (`routerscope.router.sim.fleet.SimClock`).
"""

from __future__ import annotations

import random
from typing import Protocol

from routerscope.router.backends import CloudResult, DeviceResult
from routerscope.router.engine import Request
from routerscope.router.sim.texts import SHADOW_TASKS, draw_confidence, shadow_agreement


class Clock(Protocol):
    """The fleet's simulated clock as the backends use it (`routerscope.router.sim.fleet.SimClock`)."""

    @property
    def t(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...

    def sleep_until(self, t: float) -> None: ...


class Fleet(Protocol):
    """What the simulated backends read of the fleet (`routerscope.router.sim.fleet.Fleet`): the request running
    now, its phone's drawn state, the clock, the cloud's outage and the phone's heat. A protocol, so this module
    stays below the fleet that builds its backends."""

    @property
    def clock(self) -> Clock: ...

    @property
    def running(self) -> Request: ...

    @property
    def pending(self) -> dict: ...

    @property
    def cloud_down(self) -> bool: ...

    def measure(self, tps: float, ttft: float) -> tuple[dict, float, float]: ...

    def warm(self, device: str, busy_s: float) -> None: ...


# What the simulated device and cloud answer, in the form the default policy declares for each task type (its
# `answer:` section, checked before anything is served: docs/router.md, "Only a declared answer is served"). The
# device and the cloud answer differently, so a canary's replaced answer is a divergence sample.
DEVICE_ANSWERS = {
    "intent_classify": "play_music",
    "slot_extract": '{"city": "Paris", "day": "Friday"}',
    "code_snippet": "xs.reverse()",
}
CLOUD_ANSWERS = {
    "intent_classify": "weather",
    "slot_extract": '{"city": "Paris", "day": "today"}',
    "code_snippet": "xs = xs[::-1]",
}
TOOL_CALLS = {  # a call of the request's declared tool, with its declared arguments
    "lookup": '{"tool": "lookup", "query": "museum hours"}',
    "weather": '{"tool": "weather", "city": "Oslo"}',
    "set_timer": '{"tool": "set_timer", "minutes": 10}',
    "set_alarm": '{"tool": "set_alarm", "time": "07:00"}',
}


def answer(req: Request, cloud: bool = False) -> str:
    """The simulated answer to `req`: its task type's declared form (a tool call of its declared tool)."""
    if req.task_type == "tool_call":
        tool = req.tools[0] if req.tools else "lookup"
        text = TOOL_CALLS.get(tool, TOOL_CALLS["lookup"])
        return text.replace("museum hours", "opening hours") if cloud else text
    if cloud:
        return CLOUD_ANSWERS.get(req.task_type, "cloud answer")
    return DEVICE_ANSWERS.get(req.task_type, "a plain answer.")


def tier(req: Request) -> str:
    """A simulated request's device tier: the fleet gives every request one."""
    if req.device_tier is None:
        raise ValueError("a simulated request without a device tier")
    return req.device_tier


TIERS = {"high": (40.0, 90.0), "mid": (60.0, 60.0), "low": (100.0, 35.0)}  # fixed ms before prefill, decode tokens/s
# Decode speed under background load, as a share of the tier's; the device reports the slow end to the
# latency gate (a measured device knows its range), so an unloaded device is not admitted on hope.
LOAD_RANGE = (0.7, 1.1)
ESTIMATE_SHARE = 0.55  # the decode rate the device reports: its slow end (p10, the slow tail and jitter included)
# a throttled SoC's share of its prefill and decode rates (docs/sources.md#seed-003: the second call's latency doubles)
THROTTLE = 0.5
SLOW_TAIL = (0.05, 0.45)  # 5 % of calls decode at 45 % of the tier's rate (another app busy): the p5 tail
# The cloud (the latency table of docs/sources.md#seed-000: ~1.2 / 1.6 / 2.8 s for <100 / 100-400 / >400 output
# tokens): the network's round trip, the provider's queue, prefill at 2,000 tokens/s, then decode at each model's rate.
RTT_MS = {"wifi": 300.0, "cellular": 500.0, "weak": 1000.0}
CLOUD_QUEUE_MS, CLOUD_PREFILL_TPS = 450.0, 20000.0
CLOUD_DECODE_TPS = {2: 350.0, 3: 220.0}  # cloud-small, cloud-large


class StatDevice:
    model = "sim-gemma-270m"
    honours_deadline = True  # simulated: it stops at its timeout by construction
    context_tokens = 2048  # the model's window (as LlamaDevice's default n_ctx): longer PII inputs are cut to it

    def __init__(self, rng: random.Random, fleet: Fleet):
        self.rng, self.fleet = rng, fleet

    # The router's latency gate reads these estimates for the current request's device: the fixed time
    # before prefill (plus the model's load on a cold start), the prefill rate it measured (the router adds
    # `input_tokens / prefill_tps`), the slow end of the decode rate (swapping included: a device knows its
    # memory pressure). Throttling is not foreseen: the rates are the cool SoC's, so a throttled call runs
    # past its estimate (the thermal episode's timeouts).
    @property
    def ttft_ms(self) -> float:
        return TIERS[tier(self.fleet.running)][0] + (self.fleet.pending["load_ms"] or 0.0)

    @property
    def prefill_tps(self) -> float:
        pending = self.fleet.pending
        return pending["prefill_tps"] / (THROTTLE if pending.get("throttled") else 1.0)

    @property
    def tps(self) -> float:
        return TIERS[tier(self.fleet.running)][1] * ESTIMATE_SHARE * self.fleet.pending["swap"]

    def generate(
        self,
        prompt,
        *,
        max_tokens,
        timeout_ms,
        degraded,
        commit_tokens,
        decide=None,
        decision_at_ms=0.0,
        commit_timeout_ms=None,
        cancel=None,
    ) -> DeviceResult:
        """A simulated stream: the request sleeps on the simulated clock for the time it takes (to the
        decision point, the timeout, or the end), so events carry simulated latencies. TTFT is the fixed
        time plus the input's prefill (`input / prefill_tps`, the model's load first on a cold start). A
        `cancel` set while it slept (a shadow run yielding to a live request on the same simulated phone)
        ends it as a timeout when it wakes."""
        req, clock, fleet = self.fleet.running, self.fleet.clock, self.fleet
        started = clock.t
        fixed, tps = TIERS[tier(req)]
        throttled = fleet.pending.get("throttled", False)
        if throttled:
            tps *= THROTTLE
        tps *= self.rng.uniform(*LOAD_RANGE)  # background load
        if self.rng.random() < SLOW_TAIL[0]:
            tps *= SLOW_TAIL[1]
        input_tokens = req.input_tokens or max(1, len(prompt) // 4)
        if req.text and len(prompt) < len(req.text):
            input_tokens = max(1, int(input_tokens * len(prompt) / len(req.text)))
        ttft = fixed + input_tokens / fleet.pending["prefill_tps"] * 1000
        stats, tps, ttft = fleet.measure(tps, ttft)
        if req.text and len(prompt) < len(req.text):  # the router cut the input to the window: a smaller KV cache
            kv_mb = 0.9 * (req.input_tokens or 0) * (1 - len(prompt) / len(req.text))
            stats = {**stats, "peak_mem_mb": round(max(100.0, stats["peak_mem_mb"] - kv_mb), 1)}
        tokens = max(1, int(max_tokens * (0.5 if degraded else 1.0)))
        latency = ttft + tokens / tps * 1000
        confidence = draw_confidence(self.rng, req.task_type, fleet.pending, degraded)
        try:
            if self.rng.random() < 0.003:
                clock.sleep_until(started + ttft / 1000)
                return DeviceResult("", None, "none", 0, ttft, ttft, "error", stats={**stats, "decode_tps": None})
            if decide is not None:  # the first token at or after the decision point, if the stream gets there
                at = max(decision_at_ms, ttft)
                so_far = 1 + int((at - ttft) * tps / 1000)
                if at < min(latency, timeout_ms) and so_far < commit_tokens:
                    clock.sleep_until(started + at / 1000)
                    if not decide(at, so_far, ttft):
                        return DeviceResult(
                            "partial", confidence, "logprob", so_far, ttft, at, "timeout", preempted=True, stats=stats
                        )
            if latency > timeout_ms:
                committed = tokens >= commit_tokens and self.rng.random() < 0.2  # streamed past the commit point
                if committed and commit_timeout_ms is not None:  # past it: it may run to the end of the budget
                    timeout_ms = max(timeout_ms, commit_timeout_ms)
            if latency > timeout_ms:
                clock.sleep_until(started + max(0.0, timeout_ms) / 1000)
                return DeviceResult(
                    "partial", confidence, "logprob", tokens, ttft, timeout_ms, "timeout", committed, stats=stats
                )
            clock.sleep_until(started + latency / 1000)
            if cancel is not None and cancel.is_set():
                return DeviceResult("", confidence, "logprob", 0, ttft, latency, "timeout", stats=stats)
        finally:
            fleet.warm(req.session_id, clock.t - started)
        # a whole answer ends before the output cap (one that reaches it was cut: cut code is never served)
        whole = max(1, tokens - 1)  # `tokens` is this call's cap (halved at L1)
        return DeviceResult(answer(req), confidence, "logprob", whole, ttft, latency, "ok", stats=stats)


class StatCloud:
    honours_deadline = True

    def __init__(self, rng: random.Random, fleet: Fleet):
        self.rng, self.fleet = rng, fleet

    def model_for(self, level: int) -> str:
        return {2: "cloud-small", 3: "cloud-large"}[level]

    def complete(self, prompt, *, level, max_tokens, timeout_ms) -> CloudResult:
        """RTT(network) + queue + input / prefill rate + output / the model's decode rate, with noise."""
        req, clock = self.fleet.running, self.fleet.clock
        # a whole answer ends before the output cap (one that reaches it was cut, and the router never serves
        # cut code: docs/router.md); the same draw as before, so a seed's traffic stays what it was
        tokens_out = max(1, min(max_tokens - 1, round(max_tokens * self.rng.uniform(0.6, 1.0))))
        input_tokens = req.input_tokens or max(1, len(prompt) // 4)
        base = RTT_MS.get(req.network, RTT_MS["cellular"]) + CLOUD_QUEUE_MS + input_tokens / CLOUD_PREFILL_TPS * 1000
        latency = (base + tokens_out / CLOUD_DECODE_TPS[level] * 1000) * self.rng.lognormvariate(0, 0.15)
        if self.fleet.cloud_down or self.rng.random() < 0.01:
            clock.sleep(min(latency, timeout_ms) / 1000)
            return CloudResult("", min(latency, timeout_ms), "error")
        if latency > timeout_ms:
            clock.sleep(max(0.0, timeout_ms) / 1000)
            return CloudResult("", timeout_ms, "timeout")
        clock.sleep(latency / 1000)
        if req.task_type in SHADOW_TASKS and self.rng.random() < shadow_agreement(req.input_tokens or 0):
            return CloudResult(answer(req), latency, "ok", tokens_out)  # the device's answer
        return CloudResult(answer(req, cloud=True), latency, "ok", tokens_out)


# -- instant backends (benchmark, decision-logic tests) --------------------------------------------
class InstantDevice:
    """Answers at once with one fixed result."""

    model = "instant-device"
    honours_deadline = True  # answers at once

    def __init__(self, result: DeviceResult | None = None, ttft_ms: float = 100.0, tps: float = 50.0):
        self.result = result or DeviceResult("ok", 0.9, "logprob", 5, 1.0, 2.0, "ok")
        self.ttft_ms, self.tps = ttft_ms, tps

    def generate(
        self, prompt, *, max_tokens, timeout_ms, degraded, commit_tokens, decide=None, decision_at_ms=0.0, cancel=None
    ) -> DeviceResult:
        return self.result  # at once: it never holds the device long enough to be asked to yield


class InstantCloud:
    """Answers at once with one fixed result."""

    honours_deadline = True

    def __init__(self, result: CloudResult | None = None):
        self.result = result or CloudResult("ok", 5.0, "ok", 5)

    def model_for(self, level: int) -> str:
        return {2: "cloud-small", 3: "cloud-large"}[level]

    def complete(self, prompt, *, level, max_tokens, timeout_ms) -> CloudResult:
        return self.result
