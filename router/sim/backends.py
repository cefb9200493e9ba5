"""Simulated backends (SIMULATED): the statistical device and cloud the fleet drives the real router with,
and instant backends with fixed results (the decision-overhead benchmark, decision-logic tests).

* `StatDevice`: per task type, confidence ~ Beta; time to first token and decode speed by device tier,
  slowed by load; during a thermal episode decode speed drops to a third and long answers time out. The
  device ledger's draws (prefill rate, peak memory, cold starts, swapping) come from the fleet
  (`Fleet.draw_ledger`, `Fleet.measure`).
* `StatCloud`: log-normal latency and a small error rate; every call fails during a cloud outage.
"""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING

from router.backends import CloudResult, DeviceResult
from router.sim.texts import SHADOW_TASKS, TASKS, shadow_agreement

if TYPE_CHECKING:
    from router.sim.fleet import Fleet

TIERS = {"high": (80.0, 90.0), "mid": (120.0, 60.0), "low": (200.0, 35.0)}  # ttft ms, tokens/s
# Decode speed under background load, as a share of the tier's; the device reports the slow end to the
# latency gate (a measured device knows its range), so an unloaded device is not admitted on hope.
LOAD_RANGE = (0.7, 1.1)


class StatDevice:
    model = "sim-gemma-270m"
    honours_deadline = True  # simulated: it stops at its timeout by construction
    context_tokens = 2048  # the model's window (as LlamaDevice's default n_ctx): longer PII inputs are cut to it

    def __init__(self, rng: random.Random, fleet: Fleet):
        self.rng, self.fleet = rng, fleet

    # The router's latency gate reads these estimates: the current device's tier (a real device
    # would measure them; the simulation knows them, but not the thermal slowdown in advance).
    @property
    def ttft_ms(self) -> float:
        return TIERS[self.fleet.current.device_tier][0] + (self.fleet.pending["load_ms"] or 0.0)

    @property
    def tps(self) -> float:
        return TIERS[self.fleet.current.device_tier][1] * LOAD_RANGE[0] * self.fleet.pending["swap"]

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
    ) -> DeviceResult:
        """A simulated stream: the router's clock advances by the time it takes (to the decision point,
        the timeout, or the end), so events carry simulated latencies."""
        req, clock = self.fleet.current, self.fleet.clock
        started = clock.t
        ttft, tps = TIERS[req.device_tier]
        if self.fleet.thermal:
            tps /= 3.0
        tps *= self.rng.uniform(*LOAD_RANGE)  # background load
        stats, tps, ttft = self.fleet.measure(tps, ttft)
        if req.text and len(prompt) < len(req.text):  # the router cut the input to the window: a smaller KV cache
            kv_mb = 0.9 * (req.input_tokens or 0) * (1 - len(prompt) / len(req.text))
            stats = {**stats, "peak_mem_mb": round(max(100.0, stats["peak_mem_mb"] - kv_mb), 1)}
        tokens = max(1, int(max_tokens * (0.5 if degraded else 1.0)))
        latency = ttft + tokens / tps * 1000
        a, b = TASKS[req.task_type][1]
        confidence = self.rng.betavariate(a + (1 if degraded else 0), b)
        if self.rng.random() < 0.003:
            clock.t = started + ttft / 1000
            return DeviceResult("", None, "none", 0, ttft, ttft, "error", stats={**stats, "decode_tps": None})
        if decide is not None:  # the first token at or after the decision point, if the stream gets there
            at = max(decision_at_ms, ttft)
            so_far = 1 + int((at - ttft) * tps / 1000)
            if at < min(latency, timeout_ms) and so_far < commit_tokens:
                clock.t = started + at / 1000
                if not decide(at, so_far, ttft):
                    return DeviceResult(
                        "partial", confidence, "logprob", so_far, ttft, at, "timeout", preempted=True, stats=stats
                    )
        if latency > timeout_ms:
            committed = tokens >= commit_tokens and self.rng.random() < 0.2  # streamed past the commit point
            if committed and commit_timeout_ms is not None:  # past it: it may run to the end of the budget
                timeout_ms = max(timeout_ms, commit_timeout_ms)
        if latency > timeout_ms:
            clock.t = started + max(0.0, timeout_ms) / 1000
            return DeviceResult(
                "partial", confidence, "logprob", tokens, ttft, timeout_ms, "timeout", committed, stats=stats
            )
        clock.t = started + latency / 1000
        text = {"slot_extract": '{"slot": "value"}', "tool_call": '{"tool": "lookup"}', "intent_classify": "play_music"}
        return DeviceResult(
            text.get(req.task_type, "a plain answer."), confidence, "logprob", tokens, ttft, latency, "ok", stats=stats
        )


class StatCloud:
    honours_deadline = True

    def __init__(self, rng: random.Random, fleet: Fleet):
        self.rng, self.fleet = rng, fleet

    def model_for(self, level: int) -> str:
        return {2: "cloud-small", 3: "cloud-large"}[level]

    def complete(self, prompt, *, level, max_tokens, timeout_ms) -> CloudResult:
        latency = self.rng.lognormvariate(math.log(600 if level == 2 else 1100), 0.35)
        clock = self.fleet.clock
        if self.fleet.cloud_down or self.rng.random() < 0.01:
            clock.t += min(latency, timeout_ms) / 1000
            return CloudResult("", min(latency, timeout_ms), "error")
        if latency > timeout_ms:
            clock.t += max(0.0, timeout_ms) / 1000
            return CloudResult("", timeout_ms, "timeout")
        clock.t += latency / 1000
        req = self.fleet.current
        if req.task_type in SHADOW_TASKS and self.rng.random() < shadow_agreement(req.input_tokens):
            return CloudResult("a plain answer.", latency, "ok", max_tokens // 2)  # the device's answer
        return CloudResult("cloud answer", latency, "ok", max_tokens // 2)


# -- instant backends (benchmark, decision-logic tests) --------------------------------------------
class InstantDevice:
    """Answers at once with one fixed result."""

    model = "instant-device"
    honours_deadline = True  # answers at once

    def __init__(self, result: DeviceResult | None = None, ttft_ms: float = 100.0, tps: float = 50.0):
        self.result = result or DeviceResult("ok", 0.9, "logprob", 5, 1.0, 2.0, "ok")
        self.ttft_ms, self.tps = ttft_ms, tps

    def generate(
        self, prompt, *, max_tokens, timeout_ms, degraded, commit_tokens, decide=None, decision_at_ms=0.0
    ) -> DeviceResult:
        return self.result


class InstantCloud:
    """Answers at once with one fixed result."""

    honours_deadline = True

    def __init__(self, result: CloudResult | None = None):
        self.result = result or CloudResult("ok", 5.0, "ok", 5)

    def model_for(self, level: int) -> str:
        return {2: "cloud-small", 3: "cloud-large"}[level]

    def complete(self, prompt, *, level, max_tokens, timeout_ms) -> CloudResult:
        return self.result
