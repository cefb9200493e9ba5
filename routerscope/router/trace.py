"""A request's record as the router serves it (`Trace`): the attempts, the cloud calls and their cost, the
confidence the threshold judged first (an L1 retry never mixes its confidence into calibration), what the device
measured, and the first check an answer failed. The decision event is built from it
(`routerscope.router.decision_event`); no request or answer text ever leaves it for an event."""

from __future__ import annotations

from dataclasses import dataclass, field

from routerscope.contract.events import Attempt, Outcome
from routerscope.router import experiment
from routerscope.router.sanity import finite


@dataclass
class Trace:
    attempts: list[Attempt] = field(default_factory=list)
    cloud_calls: int = 0
    confidence: float | None = None
    confidence_source: str = "none"
    device_judged: bool = False  # the first device attempt has set confidence
    ttft_ms: float | None = None
    output_tokens: int = 0
    cloud_model: str | None = None
    input_tokens: int = 0
    prices: dict | None = None  # the policy's cloud prices (USD per 1k tokens); None: cost not reported
    cost_usd: float = 0.0
    device_stats: dict | None = None  # merged over the request's device attempts
    device_text: str | None = None  # the device's answer that a quality miss discarded (divergence samples)
    request_id: str = ""
    assignment: experiment.Assignment | None = None  # the closed loop's canary arm (routerscope.router.experiment)
    answer_check: str | None = None  # the first serve-time check an answer failed (docs/router.md)
    device_input_tokens: int | None = None  # the input's size the router judged the device's window by

    def measure(self, stats: dict | None) -> None:
        """Merge one device attempt's ledger: the highest peak memory, a cold start if any attempt had one,
        the latest rates and thermal state."""
        if not stats:
            return
        merged = dict(self.device_stats or {})
        for key, value in stats.items():
            if value is None and key in merged:
                continue
            merged[key] = value
        if self.device_stats:
            peaks = [
                v
                for v in (finite(self.device_stats.get("peak_mem_mb"), -1.0), finite(stats.get("peak_mem_mb"), -1.0))
                if v >= 0
            ]
            merged["peak_mem_mb"] = max(peaks) if peaks else None
            if self.device_stats.get("cold_start"):
                merged["cold_start"], merged["load_ms"] = True, self.device_stats.get("load_ms")
        self.device_stats = merged

    def charge(self, model: str, tokens_out: int) -> None:
        """A completed cloud call costs its input plus output tokens at the model's price."""
        if self.prices is not None:
            self.cost_usd += self.prices.get(model, 0.0) * (self.input_tokens + tokens_out) / 1000

    def add(self, level: int, outcome: Outcome, latency_ms: float, abandoned: bool = False) -> None:
        latency = max(0.0, float(latency_ms))
        if abandoned:  # the router gave up on the call at its timeout (docs/router.md, "abandoned")
            self.attempts.append(Attempt(level=level, outcome=outcome, latency_ms=latency, abandoned=True))
        else:
            self.attempts.append(Attempt(level=level, outcome=outcome, latency_ms=latency))
