"""The simulated fleet (clearly labelled SIMULATED wherever it shows): statistical device and cloud
behaviours driving the **real** router code, labels the way a review process would produce them,
and scripted incidents on a timeline.

Calibration targets (what a seeded 20k demo reproduces, calm = outside the three incidents; checked row by
row with plain SQL in `tests/e2e/test_sim_calibration.py`; source: the section of docs/sources.md):

| figure (calm) | target | source | set by |
|---|---|---|---|
| fallbacks / device-entered | 20-40 % | #seed-000 "回退率 30%" | `texts.CONFIDENCE` shares |
| false fallbacks / labeled quality ones | 15-30 %, >= 100 labeled | #seed-000 "通常 15%~30%" | pass curves, labels |
| QA-like task (short_reply) by bucket | 18/27/34/21 %, pass 11/58/89/97 % | #seed-000 | `CONFIDENCE["qa"]` |
| over-confident top bucket | short_summary: 65 % pass >= 0.85 | the calibration lesson | `texts.OVERCONFIDENT` |
| device TTFT | fixed + input / prefill_tps (+ load) | #seed-003 (0.72 s/40, 5.05 s/300 tok) | `TIERS`, `TIER_LEDGER` |
| decode | 90/60/35 tok/s by tier, a 5 % slow tail | #seed-003 (ledger p5) | `TIERS`, `SLOW_TAIL` |
| thermal | throttled: prefill and decode halve | #seed-003 "二次调用延迟直接翻倍" | `THROTTLE`, heat budget |
| cloud by output tokens | 1.2/1.6/2.8 s (<100/100-400/>400) +-25 % | #seed-000's latency table | `RTT_MS`, `CLOUD_*` |
| time | monotone per router instance | - | `SimClock` |
| concurrency | overlapping requests, `device_busy` | #seed-004-6 | `arrivals`, `FleetRouter` |

The fleet's alert limits (`routerscope/router/sim/alert_rules.yaml`, what the demo evaluates unless
ROUTERSCOPE_ALERT_RULES
names another file): the shipped rules with per task type `limits` set from the calm baseline above
(`routerscope.router.sim.baseline`, pooled over seeds 1-5 and 11), each the calm rate moved by a margin and rounded away
from it to the next 0.05 (docs/metrics.md §3b: a confidence-gated task type falls back by design):

| rule (calm rate, margin) | intent_classify | short_reply | short_summary | slot_extract | tool_call |
|---|---|---|---|---|---|
| fallback_rate_high (fallback rate, +0.15) | 0.20 → 0.40 | 0.35 → 0.50 | 0.44 → 0.60 | 0.25 → 0.45 | 0.33 → 0.50 |
| rollback_degrade_trigger (interval low, +0.10) | 0.20 → 0.30 | 0.34 → 0.45 | 0.42 → 0.55 | 0.24 → 0.35 | 0.32 → 0.45 |
| rollback_route_accuracy (interval high, −0.05) | 0.90 → 0.80 | 0.81 → 0.75 | 0.76 → 0.70 | 0.88 → 0.80 | 0.86 → 0.80 |
| false_fallback_high (daily, +0.10) | 0.13 → 0.25 | 0.33 → 0.45 | 0.31 → 0.45 | 0.19 → 0.30 | 0.16 → 0.30 |

With them the calm windows raise no rollback, and the push raises `short_reply`'s (degrade trigger 0.80
against 0.45, route accuracy 0.49 against 0.75).

* Device: per task type, confidence from its shape's buckets (`routerscope.router.sim.texts.CONFIDENCE`); a degraded
  L1 retry scores near the first try. Whether an answer is acceptable follows the shape's pass curve, except
  that short_summary's top confidence bucket is deliberately over-confident.
* Device latency from physics: TTFT = the tier's fixed time + `input_tokens / prefill_tps` (the model's
  load first on a cold start); decode at the tier's rate under background load with a slow tail. The device
  reports its `prefill_tps` so the router's ETA includes the prefill, and the slow end of its decode rate.
* Heat: each device keeps a heat budget (busy seconds, dissipating over a minute); past it, or during the
  **thermal episode** (a hot afternoon: every device), the SoC throttles: prefill and decode halve and the
  thermal state reads `serious`/`critical`.
* Device ledger (docs/sources.md#seed-003; contract v2 `device_stats`): per tier a prefill rate, a peak memory that
  grows with the input (KV cache) plus runtime overhead, cold starts (the OS reclaimed the model; more
  often on the low tier, whose loads are slower), the decode rate actually used, and the thermal state. The
  low tier also swaps now and then (its decode rate drops to 15 % on ~10 % of requests): its p5 decode rate
  collapses in the ledger. A device knows when it is swapping or must first load its model, so the
  estimates the latency gate reads include both. These draws use their own random stream.
* Cloud: RTT of the session's network + queue + prefill + output tokens at the model's decode rate, with
  log-normal noise and a small error rate; during a **cloud outage** every call fails, so the cloud breaker
  opens and traffic stays on the device.
* Time and concurrency: arrivals are a Poisson process over the span (each to a random device, a few an
  app's follow-up call on the same device within a second); each request runs in its own greenlet on one
  simulated clock (`SimClock`) that only moves forward, so requests overlap, a device at its cap sends the
  excess to the cloud (`device_busy`), and every event and breaker transition is stamped in order.
* A **bad threshold push**: while the push window is open on the clock the router's policy is one with a
  much stricter threshold for `short_reply` (a `Policy` derived from the simulated one, with its own
  policy_version); false fallbacks jump until it is rolled back.
* The weekly replay's determinism groups (docs/sources.md#seed-004-2), simulated: `simulated_reruns` re-runs a
  sample of each task type's device-entered requests 3 times; a group agrees with the task type's
  `DETERMINISM` probability (classification and structured output agree more than free text).
* Labels for a sampled share of device-judged requests, from mixed sources, some days late.
* With a `recorder` (the demo's), every decision, breaker transition and label is recorded through the SDK
  (`InstrumentedRouter`, `Recorder.label`), as in a deployment: a span per decision, its trace ids in the event,
  ids pseudonymised; the design's judge draws from the events as recorded. Without one, the events go to the
  `on_event`, `on_breaker_event` and `on_label` callbacks as the router builds them.
* `corrupt` malformed messages are produced as they are, for the loader to quarantine.

The statistical backends are in `routerscope.router.sim.backends`, the requests and their ground truth in
`routerscope.router.sim.texts`. The default policy is read on first use, never at import.
"""

from __future__ import annotations

import functools
import hashlib
import heapq
import math
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import cast

import greenlet
import msgspec

from routerscope.contract.events import LABEL_SOURCES, LabelEvent, LabelSource
from routerscope.instrumentation.sdk import InstrumentedRouter, Recorder
from routerscope.router.admission import DeviceSlots
from routerscope.router.engine import Request, Router
from routerscope.router.label_design import drawn, for_review
from routerscope.router.policy import Policy, default_policy
from routerscope.router.replay import route_correct
from routerscope.router.sim.backends import THROTTLE, TIERS, StatCloud, StatDevice, tier
from routerscope.router.sim.texts import (
    DEADLINES,
    DEFAULT_DEADLINES,
    DETERMINISM,
    SHADOW_TASKS,
    TASKS,
    acceptable,
    input_tokens,
    pass_rate,
    request_text,
)

UTC = timezone.utc  # noqa: UP017 (datetime.UTC is Python 3.11+; routerscope.router runs on 3.10 too)

# tier: (prefill tokens/s, extra peak memory MB, cold-start probability, load ms median, swap probability)
TIER_LEDGER = {
    "high": (420.0, 0.0, 0.01, 600.0, 0.0),
    "mid": (240.0, 60.0, 0.02, 900.0, 0.0),
    "low": (110.0, 140.0, 0.05, 1800.0, 0.10),
}
SWAP_SLOWDOWN = 0.15  # the low tier's decode rate while the OS swaps the runtime out
NETWORKS = ("wifi", "wifi", "cellular", "weak")
HEAT_BUDGET_S = 8.0  # busy seconds of recent device inference a phone takes before it throttles
HEAT_DECAY_S = 60.0  # how fast that heat dissipates (an exponential time constant)
BURST = 0.06  # share of requests that are an app's follow-up call on the same device within a second

PUSHED_THRESHOLD = ("short_reply", 0.93)  # the bad push: this task type's threshold (0.60 by default)


CLOUD_USUAL_P90_MS = (
    2000.0  # the simulated cloud's usual p90 (docs/sources.md#seed-000's table: 1.2-2.8 s by output length)
)


def simulated_policy() -> Policy:
    """The fleet's policy: the default one with the simulated shadow task types in shadow mode, and the cloud
    breaker's p90 floor set to the simulated cloud's usual p90 (the shipped 800 ms floor would read seed
    000's normal 1.2-2.8 s latencies as a spike before the router has learned its own baseline)."""
    base = default_policy()
    cloud = msgspec.structs.replace(base.breakers["cloud"], p90_baseline_ms=CLOUD_USUAL_P90_MS)
    return base.with_(shadow=frozenset(SHADOW_TASKS), breakers={**base.breakers, "cloud": cloud})


def pushed_policy(base: Policy) -> Policy:
    """The bad threshold push: `base` with a much stricter threshold for one task type (version `…-pushed+…`)."""
    task_type, threshold = PUSHED_THRESHOLD
    capabilities = {
        **base.capabilities,
        task_type: msgspec.structs.replace(base.capabilities[task_type], threshold=threshold),
    }
    return base.with_("pushed", capabilities=capabilities)


SIM_TOOLS = ("lookup", "weather", "set_timer", "set_alarm")  # the default policy's tool whitelist


def declared(req: Request) -> Request:
    """What an app declares with a request the capability matrix asks about (docs/router.md): a tool call names
    its one tool, a code request its one file of context. Drawn from the request id (no extra random draw, so
    a seed's traffic stays the traffic it was)."""
    if req.task_type == "tool_call":
        pick = int(hashlib.sha256(str(req.request_id).encode()).hexdigest()[:8], 16) % len(SIM_TOOLS)
        return replace(req, tools=(SIM_TOOLS[pick],))
    if req.task_type == "code_snippet":
        return replace(req, files=1)
    return req


class SimPolicy:
    """The router's policy source in the fleet: the simulated policy, or the pushed one while `pushed`."""

    def __init__(self, base: Policy, fleet: Fleet | None = None):
        self.base, self.pushed_to, self.pushed, self.fleet = base, pushed_policy(base), False, fleet

    def current(self) -> Policy:
        """The pushed policy while the push window is open on the fleet's clock (or while `pushed`)."""
        if self.fleet is not None and Incidents.active(self.fleet.incidents.bad_threshold, self.fleet._progress()):
            return self.pushed_to
        return self.pushed_to if self.pushed else self.base


@dataclass(frozen=True)
class Incidents:
    """Incident windows as fractions of the simulated span, [start, end)."""

    cloud_outage: tuple[float, float] = (0.20, 0.30)
    thermal: tuple[float, float] = (0.45, 0.65)
    bad_threshold: tuple[float, float] = (0.75, 0.90)

    @staticmethod
    def active(window: tuple[float, float], progress: float) -> bool:
        return window[0] <= progress < window[1]


class SimClock:
    """Simulated time for one router instance: monotone, and shared by every request in flight.

    Each request runs in its own greenlet; a backend that takes time calls `sleep`, which parks the
    request until the clock reaches its wake-up time. The fleet's loop (`advance_to`) wakes the parked
    requests in time order before each arrival, so requests overlap as a fleet's do while the clock,
    every event time and every breaker transition only move forward. Called outside a request greenlet
    (a backend used on its own), `sleep` simply moves the clock on."""

    def __init__(self, start: datetime):
        self.start, self.t = start, 0.0
        self._parked: list = []  # (wake-up time, order, greenlet)
        self._order = 0
        self._loop: greenlet.greenlet | None = None

    def monotonic(self) -> float:
        return self.t

    def now(self) -> datetime:
        return self.start + timedelta(seconds=self.t)

    def sleep(self, seconds: float) -> None:
        wake = self.t + max(0.0, seconds)
        current = greenlet.getcurrent()
        if self._loop is None or current is self._loop:
            self.t = wake
            return
        self._order += 1
        heapq.heappush(self._parked, (wake, self._order, current))
        self._loop.switch()

    def sleep_until(self, t: float) -> None:
        self.sleep(t - self.t)

    def spawn(self, fn: Callable, *args) -> None:
        """Start `fn(*args)` as a request at the current time; it runs until it first sleeps or ends."""
        self._loop = greenlet.getcurrent()
        greenlet.greenlet(fn, parent=self._loop).switch(*args)

    def advance_to(self, t: float) -> None:
        """Wake every parked request due by `t`, in time order, then move the clock to `t`."""
        while self._parked and self._parked[0][0] <= t:
            wake, _, parked = heapq.heappop(self._parked)
            self.t = max(self.t, wake)
            parked.switch()
        self.t = max(self.t, t)

    def drain(self) -> None:
        while self._parked:
            self.advance_to(self._parked[0][0])


class FleetSlots(DeviceSlots):
    """The device concurrency cap counted per simulated device (SIMULATED: each phone has its own device and its
    own cap, docs/sources.md#seed-004-6): the running request's phone's counts are swapped in around each step."""

    def __init__(self, fleet: Fleet, breaker, *, cancels: bool, enforce: bool):
        super().__init__(breaker, cancels=cancels, enforce=enforce)
        self._fleet = fleet
        self._per_device_in_flight: dict[str, int] = {}
        self._per_device_shadow: dict[str, int] = {}
        self._per_device_cancels: dict[str, set] = {}

    def enter(self, policy) -> str | None:
        device = self._fleet.running.session_id
        self.device_in_flight = self._per_device_in_flight.get(device, 0)
        self.shadow_in_flight = self._per_device_shadow.get(device, 0)
        self._shadow_cancels = self._per_device_cancels.setdefault(device, set())  # only this phone's shadow yields
        blocked = super().enter(policy)
        self._per_device_in_flight[device] = self.device_in_flight
        return blocked

    def release(self) -> None:
        device = self._fleet.running.session_id
        self.device_in_flight = self._per_device_in_flight.get(device, 0)
        super().release()
        self._per_device_in_flight[device] = self.device_in_flight

    def enter_shadow(self, policy):
        device = self._fleet.running.session_id
        self.device_in_flight = self._per_device_in_flight.get(device, 0)
        self.shadow_in_flight = self._per_device_shadow.get(device, 0)
        self._shadow_cancels = self._per_device_cancels.setdefault(device, set())
        slot = super().enter_shadow(policy)
        self._per_device_shadow[device] = self.shadow_in_flight
        return slot

    def release_shadow(self, cancel) -> None:
        device = self._fleet.running.session_id
        self.shadow_in_flight = self._per_device_shadow.get(device, 0)
        self._shadow_cancels = self._per_device_cancels.setdefault(device, set())
        super().release_shadow(cancel)
        self._per_device_shadow[device] = self.shadow_in_flight


class FleetRouter(Router):
    """The real router, with the device concurrency cap counted per simulated device (SIMULATED: one router
    instance stands in for the fleet's, so its breakers and cloud latency window are shared, but each phone
    has its own device and its own cap, docs/sources.md#seed-004-6)."""

    def __init__(self, fleet: Fleet, *args, **kwargs):
        self._fleet = fleet  # before the router's own set-up, which asks for the slots
        super().__init__(*args, **kwargs)

    def _device_slots(self) -> DeviceSlots:
        return FleetSlots(self._fleet, self.device_breaker, cancels=self.caller.cancels, enforce=self.enforce)


class Fleet:
    def __init__(
        self,
        *,
        seed: int,
        start: datetime,
        span: timedelta,
        incidents: Incidents = Incidents(),
        sessions: int = 400,
        instance_id: str = "sim-router-1",
        on_event: Callable = lambda e: None,
        on_breaker_event: Callable = lambda e: None,
        on_label: Callable = lambda e: None,
        label_share: float = 0.25,
        texts=None,
        design=None,
        judge_errors: tuple[float, float] = (0.2, 0.03),
        run: str = "",
        recorder: Recorder | None = None,
    ):
        # `run` names one run of the fleet (the demo passes its span's start): request, label and session ids are
        # drawn from the seed as before, then moved into the run's own id space, so two runs with the same seed
        # never share an id (a re-run reused the first run's label ids and failed the day's uniqueness check).
        # '' keeps the ids the seed alone gives. No draw depends on it: the decisions are the seed's either way.
        self.run_id = run
        self._salt = int.from_bytes(hashlib.sha256(run.encode()).digest()[:16], "big") if run else 0
        self.rng = random.Random(seed)
        self.text_rng = random.Random(seed + 1)  # its own stream: storing texts changes no decision
        self.ledger_rng = random.Random(seed + 2)  # the device ledger's draws: their own stream too
        self.rerun_rng = random.Random(seed + 3)  # the simulated replay's
        self._entered: dict[str, list] = {}
        self.texts = texts  # a RequestTextStore, or None
        self.clock = SimClock(start)
        self.span, self.incidents = span, incidents
        self.policy = SimPolicy(simulated_policy(), self)
        self.router = FleetRouter(
            self,
            StatDevice(self.rng, self),
            StatCloud(self.rng, self),
            policy=self.policy,
            instance_id=instance_id,
            clock=self.clock.monotonic,
            now=self.clock.now,
            on_event=on_event,
            on_breaker_event=on_breaker_event,
            on_divergence=self._keep_divergence,
        )
        self.route = self.router.route
        if recorder is not None:
            # What a deployment has (docs/sdk.md): the SDK records every decision (its span, scrubbed ids, the
            # trace ids in the event), breaker transition and label; `on_event`, `on_breaker_event` and
            # `on_label` are then not called. The design's inclusion probability is stamped at decision time.
            self.route = InstrumentedRouter(self.router, recorder.telemetry, design.stamp if design else None).route
            on_label = functools.partial(record_label, recorder)
        self.on_label, self.label_share = on_label, label_share
        prefix = f"sim-session-{self._salt:032x}"[:24] + "-" if run else "sim-session-"
        # the labeling design (docs/metrics.md §3d, routerscope.router.label_design): with one, the events it draws
        # get a SIMULATED judge's label (it accepts a bad answer and rejects a good one at `judge_errors`), and its
        # human share a SIMULATED reviewer's, who answers from this world's ground truth; other labels keep to the
        # validator and shadow sources. Its own random stream: the fleet's decisions do not move.
        self.design, self.judge_errors = design, judge_errors
        self.label_rng = random.Random(seed + 4)
        self.sessions = [
            (f"{prefix}{i}", self.rng.choice(list(TIERS)), self.rng.choice(NETWORKS)) for i in range(sessions)
        ]
        self.heat: dict[str, tuple[float, float]] = {}  # device: (heat in busy seconds, as of clock time)
        self._requests: dict = {}  # greenlet -> its request's state (`current`, `pending`)
        self._outside: dict = {"current": None, "pending": {"swap": 1.0, "load_ms": None}}
        self.stats = {"requests": 0, "labels": 0}

    def new_id(self) -> str:
        """A UUID from the seeded stream, in this run's id space (`run_id`)."""
        return str(uuid.UUID(int=self.rng.getrandbits(128) ^ self._salt))

    # -- the state of the request running now (each request runs in its own greenlet) --------------------
    def _state(self) -> dict:
        return self._requests.get(greenlet.getcurrent(), self._outside)

    @property
    def current(self) -> Request | None:
        return self._state()["current"]

    @current.setter
    def current(self, req: Request | None) -> None:
        self._state()["current"] = req

    @property
    def running(self) -> Request:
        """The request running now: the simulated backends are called only inside one."""
        req = self._state()["current"]
        if req is None:
            raise RuntimeError("no simulated request is running")
        return req

    @property
    def pending(self) -> dict:
        return self._state()["pending"]

    @pending.setter
    def pending(self, value: dict) -> None:
        self._state()["pending"] = value

    def _progress(self) -> float:
        return self.clock.t / max(1e-9, self.span.total_seconds())

    @property
    def cloud_down(self) -> bool:
        return Incidents.active(self.incidents.cloud_outage, self._progress())

    @property
    def thermal(self) -> bool:
        """The thermal episode (a hot afternoon): every device runs throttled."""
        return Incidents.active(self.incidents.thermal, self._progress())

    # -- heat: a budget per device (docs/sources.md#seed-003: the SoC throttles after sustained load) -------
    def _heat_now(self, device: str) -> float:
        heat, since = self.heat.get(device, (0.0, self.clock.t))
        return heat * math.exp(-(self.clock.t - since) / HEAT_DECAY_S)

    def throttled(self, device: str) -> bool:
        return self.thermal or self._heat_now(device) > HEAT_BUDGET_S

    def warm(self, device: str, busy_s: float) -> None:
        self.heat[device] = (self._heat_now(device) + busy_s, self.clock.t)

    def draw_ledger(self, req: Request) -> dict:
        """What the device will measure for this request (the ledger of docs/sources.md#seed-003), drawn before
        routing: a swapping low-tier device decodes at 15 % speed; a cold start must load the model first; a
        throttled SoC prefills and decodes at half speed (the second call's latency doubles)."""
        rng = self.ledger_rng
        prefill, extra_mem, cold_p, load_median, swap_p = TIER_LEDGER[tier(req)]
        swap = SWAP_SLOWDOWN if rng.random() < swap_p else 1.0
        cold = rng.random() < cold_p
        load_ms = load_median * rng.lognormvariate(0, 0.3) if cold else None
        throttled = self.throttled(req.session_id)
        if throttled:
            thermal, prefill = ("critical" if rng.random() < 0.3 else "serious"), prefill * THROTTLE
        else:
            thermal = "fair" if rng.random() < 0.15 else "nominal"
        # runtime + weights ~900 MB, KV cache ~0.9 MB a token of context, allocator noise
        peak = 900.0 + extra_mem + 0.9 * (req.input_tokens or 0) + rng.gauss(0, 40)
        # idle with the model loaded: the weights mapped and the runtime, no KV cache; the tier's extra
        # overhead half resident (SIMULATED, no draw: the ledger's random stream is unchanged)
        resident = 850.0 + extra_mem / 2
        return {
            "swap": swap,
            "throttled": throttled,
            "cold_start": cold,
            "load_ms": load_ms,
            "thermal_state": thermal,
            "prefill_tps": round(prefill * rng.uniform(0.8, 1.1), 1),
            "peak_mem_mb": round(max(peak, 100.0), 1),
            "resident_mem_mb": resident,
        }

    def measure(self, tps: float, ttft: float) -> tuple[dict, float, float]:
        """One device call's measurements and the decode rate and TTFT they imply; the model is loaded once
        per request (an L1 retry finds it warm)."""
        pending = self.pending
        tps *= pending["swap"]
        ttft += pending["load_ms"] or 0.0
        stats = {
            "peak_mem_mb": pending["peak_mem_mb"],
            "thermal_state": pending["thermal_state"],
            "decode_tps": round(tps, 2),
            "prefill_tps": pending["prefill_tps"],
            "cold_start": pending["cold_start"],
            "load_ms": pending["load_ms"],
            "resident_mem_mb": pending["resident_mem_mb"],
        }
        self.pending = {**pending, "cold_start": False, "load_ms": None}
        return stats, tps, ttft

    def simulated_reruns(self, per_task: int = 20, runs: int = 3) -> list[tuple]:
        """SIMULATED determinism groups for up to `per_task` device-entered requests of each task type, as the
        weekly replay would store them (`routerscope.warehouse.queries.review.RERUN_COLUMNS`)."""
        rng, groups = self.rerun_rng, []
        for task_type, seen in sorted(self._entered.items()):
            for request_id, event_time in rng.sample(seen, min(per_task, len(seen))):
                agree = rng.random() < DETERMINISM.get(task_type, 0.5)
                hashes = ["sim-a"] * runs if agree else ["sim-a"] * (runs - 1) + ["sim-b"]
                groups.append(
                    (request_id, task_type, event_time, runs, agree, hashes, f"{StatDevice.model} (SIMULATED)")
                )
        return groups

    def _keep_divergence(self, d) -> None:
        """docs/sources.md#seed-004-5: disagreements are kept as samples beside the request texts (never in events)."""
        self.stats["divergences"] = self.stats.get("divergences", 0) + 1
        if self.texts is not None and hasattr(self.texts, "add_divergence"):
            self.texts.add_divergence(d, self.clock.now())

    def arrivals(self, requests: int) -> list[tuple[float, int]]:
        """(time in seconds, session index) of each request, in time order: a Poisson process over the span
        (n arrivals of a Poisson process over a span are n uniform times), each to a random device, so each
        device's arrivals are a Poisson process too; `BURST` of them are an app's follow-up call on the same
        device within a second (a device at its cap sends it to the cloud: `device_busy`)."""
        span, rng = self.span.total_seconds(), self.rng
        out: list[tuple[float, int]] = []
        times = sorted(rng.uniform(0, span) for _ in range(requests))
        for t in times:
            if out and rng.random() < BURST:
                prev_t, prev_session = out[-1]
                out.append((min(span, max(t, prev_t + rng.uniform(0.05, 1.0))), prev_session))
            else:
                out.append((t, rng.randrange(len(self.sessions))))
        return sorted(out, key=lambda a: a[0])

    def run(self, requests: int, progress: Callable[[int], None] = lambda n: None) -> dict:
        for at, session in self.arrivals(requests):
            self.clock.advance_to(at)
            self.clock.spawn(self._request, session, progress)
        self.clock.drain()
        self.policy.pushed = False
        return dict(self.stats)

    def _request(self, session_index: int, progress: Callable[[int], None]) -> None:
        names = list(TASKS)
        weights = [TASKS[t][0] for t in names]
        me = greenlet.getcurrent()
        self._requests[me] = {"current": None, "pending": {}}
        try:
            session, tier, network = self.sessions[session_index]
            task_type = self.rng.choices(names, weights)[0]
            text = request_text(self.text_rng, task_type)
            req = Request(
                task_type=task_type,
                text=text,
                session_id=session,
                deadline_ms=self.rng.choice(DEADLINES.get(task_type, DEFAULT_DEADLINES)),
                elapsed_ms=self.rng.randint(20, 400),
                has_pii=self.rng.random() < 0.02,
                network=network,
                device_tier=tier,
                input_tokens=input_tokens(self.rng, task_type),
                expected_output_tokens=self.rng.randint(*TASKS[task_type][2]),
                request_id=f"sim-req-{self.new_id()}",
                app_id="sim-app",
            )
            req = declared(req)
            self.current = req
            self.pending = self.draw_ledger(req)
            if self.texts is not None:
                self.texts.add(req.request_id, task_type, text)
            _, event = self.route(req)
            if event is not None and event.mode == "live" and event.entered_device:
                # the event as recorded (through the SDK: ids pseudonymised), so the reruns join the stored decision
                self._entered.setdefault(event.task_type, []).append((event.request_id, event.event_time))
            self.stats["requests"] += 1
            progress(1)
            if event is not None:
                self._maybe_label(event)
        finally:
            del self._requests[me]

    def _designed_labels(self, event) -> bool | None:
        """The design's labels of a drawn event (a judge's, and a reviewer's for the human share); its ground truth,
        or None when the design did not draw it. Drawn from the event as recorded (through the SDK, by its
        pseudonymised request id), as the replay job draws from the warehouse."""
        design = self.design
        answered = event.fallback_type in ("quality", "timeout") or (
            event.fallback_type == "none" and event.degrade_level in (0, 1)
        )
        if design is None or event.mode != "live" or not event.entered_device or not answered:
            return None
        pi = design.pi(event.task_type, event.confidence, event.threshold)
        if not drawn(event.request_id, pi, design.design_id):
            return None
        truth = self.label_rng.random() < pass_rate(event.task_type, event.confidence or 0.0)
        accept_bad, reject_good = self.judge_errors
        wrong = self.label_rng.random() < (reject_good if truth else accept_bad)
        verdicts = [("offline_replay", truth != wrong, "sim-judge", 2)]
        if for_review(event.request_id, pi, design.design_id, design.human_pi):
            verdicts.append(("human_review", truth, "sim-reviewer", 30))
        for source, ok, who, hours in verdicts:
            self.stats["labels"] += 1
            self.on_label(
                LabelEvent(
                    schema_version=1,
                    label_id=str(uuid.UUID(int=self.label_rng.getrandbits(128) ^ self._salt)),  # this run's ids
                    event_time=event.event_time + timedelta(hours=hours),
                    request_id=event.request_id,
                    source=cast(LabelSource, source),
                    device_acceptable=ok,
                    route_correct=route_correct(event.fallback_type, ok),
                    labeler=who,
                )
            )
        return truth

    def _maybe_label(self, event) -> None:
        truth = self._designed_labels(event)
        if not event.entered_device or event.confidence is None or self.rng.random() >= self.label_share:
            return
        ok = acceptable(self.rng, event.task_type, event.confidence)
        ok = ok if truth is None else truth  # one ground truth per request
        # weights in LABEL_SOURCES order (the contract's LabelSource values)
        source = cast(LabelSource, self.rng.choices(LABEL_SOURCES, (0.3, 0.3, 0.3, 0.1))[0])
        delay = timedelta(hours=self.rng.choice((1, 6, 30)))
        label_id = self.new_id()  # drawn whatever follows: the stream stays put
        if self.design is not None and source in ("human_review", "offline_replay"):
            if truth is not None:
                return  # the design labeled it
            source = "validator" if source == "offline_replay" else "shadow_compare"  # the design's sources only
        label = LabelEvent(
            schema_version=1,
            label_id=label_id,
            event_time=event.event_time + delay,
            request_id=event.request_id,
            source=source,
            device_acceptable=ok,
            route_correct=route_correct(event.fallback_type, ok),
            labeler=f"sim-{source}",
        )
        self.stats["labels"] += 1
        self.on_label(label)


def record_label(recorder: Recorder, label: LabelEvent) -> None:
    """`label` through the SDK's `Recorder.label`, with its seeded id: its request id and labeler pseudonymised
    as the SDK does for every labeler."""
    recorder.label(
        label.request_id,
        device_acceptable=label.device_acceptable,
        source=label.source,
        route_correct=label.route_correct,
        labeler=label.labeler,
        event_time=label.event_time,
        label_id=label.label_id,
    )


def span_end(now: datetime | None = None) -> datetime:
    """Where a simulated span that ends "now" ends: the latest 5-minute boundary, so the data looks live and the
    metric windows (5-minute partitions) cut the scripted timeline the same way on every run: minute-aligned, a
    run's alerts depended on the minute it started (an episode near a limit breached three windows in a row in
    some runs)."""
    now = (now or datetime.now(UTC)).replace(second=0, microsecond=0)
    return now - timedelta(minutes=now.minute % 5)


def default_start(span: timedelta) -> datetime:
    """The start of a span of `span` that ends at `span_end()`."""
    return span_end() - span
