"""The closed loop's demo cycle (routerscope/cli/loop_cycle.py, docs/loop.md#the-demos-cycle), its SIMULATED
parts: a device whose first-try confidence and a cloud whose answers come from the demo's own distributions
(`routerscope.router.sim.texts`), both answering at once, and the simulated reviewer's label of a served answer."""

from __future__ import annotations

import math
import random
import uuid
from datetime import timedelta

from routerscope.contract.events import LabelEvent
from routerscope.router.backends import CloudResult, DeviceResult
from routerscope.router.engine import Request
from routerscope.router.replay import route_correct
from routerscope.router.sim import texts
from routerscope.router.sim.backends import answer


class CycleDevice:
    """The device of the cycle: a first try's confidence from the task type's buckets, a degraded retry's near it
    (`texts.draw_confidence`), the simulated fleet's answer of the task type's form; at once."""

    model = "sim-gemma-270m"
    honours_deadline = True
    ttft_ms, tps = 100.0, 50.0

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.request = Request(task_type="", text="", session_id="")  # the request being routed (`Traffic.hour`)
        self.pending: dict = {}

    def generate(
        self, prompt, *, max_tokens, timeout_ms, degraded, commit_tokens, decide=None, decision_at_ms=0.0, cancel=None
    ) -> DeviceResult:
        confidence = texts.draw_confidence(self.rng, self.request.task_type, self.pending, degraded)
        return DeviceResult(answer(self.request), confidence, "logprob", 5, 100.0, 200.0, "ok")


class CycleCloud:
    """The cloud of the cycle: the simulated fleet's cloud answer, at once."""

    honours_deadline = True

    def __init__(self, device: CycleDevice):
        self.device = device

    def model_for(self, level: int) -> str:
        return {2: "cloud-small", 3: "cloud-large"}[level]

    def complete(self, prompt, *, level, max_tokens, timeout_ms) -> CloudResult:
        return CloudResult(answer(self.device.request, cloud=True), 300.0, "ok", 5)


def poisson(rng: random.Random, mean: float) -> int:
    """A Poisson draw (Knuth's product of uniforms: the means here are small)."""
    limit, k, p = math.exp(-mean), 0, rng.random()
    while p > limit:
        k += 1
        p *= rng.random()
    return k


def texts_label(rng: random.Random, event, ok: bool):
    """A SIMULATED reviewer's label of a served answer, ten minutes after it (the ground truth of `texts`)."""
    return LabelEvent(
        schema_version=1,
        label_id=str(uuid.UUID(int=rng.getrandbits(128))),
        event_time=event.event_time + timedelta(minutes=10),
        request_id=event.request_id,
        source="human_review",
        device_acceptable=ok,
        route_correct=route_correct(event.fallback_type, ok),
        labeler="sim-reviewer",
    )
