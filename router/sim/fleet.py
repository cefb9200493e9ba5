"""The simulated fleet (clearly labelled SIMULATED wherever it shows): statistical device and cloud
behaviours driving the **real** router code, labels the way a review process would produce them,
and scripted incidents on a timeline.

* Device: per task type, confidence ~ Beta; time to first token and decode speed by device tier,
  slowed by load; during a **thermal episode** decode speed drops to a third and long answers time
  out. Whether an answer is acceptable depends on its confidence (calibrated), except that one task
  type's top confidence bucket is deliberately over-confident (`short_summary`).
* Device ledger (docs/sources.md#seed-003; contract v2 `device_stats`): per tier a prefill rate, a peak memory that
  grows with the input (KV cache) plus runtime overhead, cold starts (the OS reclaimed the model; more
  often on the low tier, whose loads are slower), the decode rate actually used, and a thermal state that
  turns `serious`/`critical` during the thermal episode. The low tier also swaps now and then (its
  decode rate drops to 15 % on ~10 % of requests): its p5 decode rate collapses in the ledger. A
  device knows when it is swapping or must first load its model, so the estimates the latency gate
  reads include both: such requests mostly go to the cloud before entering the device (only short
  answers still fit), rather than timing out on it. These draws use their own random stream, so
  the ledger leaves the other draws of a seed unchanged.
* Cloud: log-normal latency and a small error rate; during a **cloud outage** every call fails, so
  the cloud breaker opens and traffic stays on the device.
* A **bad threshold push**: mid-run the router's policy becomes one with a much stricter threshold for
  `short_reply` (a `Policy` derived from the simulated one, with its own policy_version); false fallbacks
  jump until it is rolled back.
* The weekly replay's determinism groups (docs/sources.md#seed-004-2), simulated: `simulated_reruns` re-runs a
  sample of each task type's device-entered requests 3 times; a group agrees with the task type's
  `DETERMINISM` probability (classification and structured output agree more than free text).
* Labels for a sampled share of device-judged requests, from mixed sources, some days late.
* `corrupt` malformed messages are produced as they are, for the loader to quarantine.

The statistical backends are in `router.sim.backends`, the requests and their ground truth in
`router.sim.texts`. The default policy is read on first use, never at import.

Simulated time runs from `start` over `span`; the router's clock and event times follow it: each
request starts at its slot of the span and the simulated backends advance the clock by the time they
take, so events carry simulated latencies (the fleet's requests overlap, as a fleet's do).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from instrumentation.events import LABEL_SOURCES, LabelEvent
from router.engine import Request, Router
from router.policy import Policy, default_policy
from router.replay import route_correct
from router.sim.backends import TIERS, StatCloud, StatDevice
from router.sim.texts import DETERMINISM, INPUT_TOKENS, SHADOW_TASKS, TASKS, acceptable, request_text

# tier: (prefill tokens/s, extra peak memory MB, cold-start probability, load ms median, swap probability)
TIER_LEDGER = {
    "high": (420.0, 0.0, 0.01, 600.0, 0.0),
    "mid": (240.0, 60.0, 0.02, 900.0, 0.0),
    "low": (110.0, 140.0, 0.05, 1800.0, 0.10),
}
SWAP_SLOWDOWN = 0.15  # the low tier's decode rate while the OS swaps the runtime out
NETWORKS = ("wifi", "wifi", "cellular", "weak")

PUSHED_THRESHOLD = ("short_reply", 0.93)  # the bad push: this task type's threshold (0.60 by default)


def simulated_policy() -> Policy:
    """The fleet's policy: the default one with the simulated shadow task types in shadow mode."""
    return default_policy().with_(shadow=frozenset(SHADOW_TASKS))


def pushed_policy(base: Policy) -> Policy:
    """The bad threshold push: `base` with a much stricter threshold for one task type (version `…-pushed+…`)."""
    task_type, threshold = PUSHED_THRESHOLD
    capabilities = {**base.capabilities, task_type: replace(base.capabilities[task_type], threshold=threshold)}
    return base.with_("pushed", capabilities=capabilities)


class SimPolicy:
    """The router's policy source in the fleet: the simulated policy, or the pushed one while `pushed`."""

    def __init__(self, base: Policy):
        self.base, self.pushed_to, self.pushed = base, pushed_policy(base), False

    def current(self) -> Policy:
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
    def __init__(self, start: datetime):
        self.start, self.t = start, 0.0

    def monotonic(self) -> float:
        return self.t

    def now(self) -> datetime:
        return self.start + timedelta(seconds=self.t)


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
    ):
        self.rng = random.Random(seed)
        self.text_rng = random.Random(seed + 1)  # its own stream: storing texts changes no decision
        self.ledger_rng = random.Random(seed + 2)  # the device ledger's draws: their own stream too
        self.rerun_rng = random.Random(seed + 3)  # the simulated replay's
        self._entered: dict[str, list] = {}
        self.texts = texts  # a RequestTextStore, or None
        self.clock = SimClock(start)
        self.span, self.incidents = span, incidents
        self.policy = SimPolicy(simulated_policy())
        self.router = Router(
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
        self.on_label, self.label_share = on_label, label_share
        self.sessions = [
            (f"sim-session-{i}", self.rng.choice(list(TIERS)), self.rng.choice(NETWORKS)) for i in range(sessions)
        ]
        self.cloud_down = self.thermal = False
        self.current: Request | None = None
        self.pending: dict = {"swap": 1.0, "load_ms": None}
        self.stats = {"requests": 0, "labels": 0}

    def draw_ledger(self, req: Request) -> dict:
        """What the device will measure for this request (the ledger of docs/sources.md#seed-003), drawn before
        routing: a swapping low-tier device decodes at 15 % speed; a cold start must load the model first."""
        rng = self.ledger_rng
        prefill, extra_mem, cold_p, load_median, swap_p = TIER_LEDGER[req.device_tier]
        swap = SWAP_SLOWDOWN if rng.random() < swap_p else 1.0
        cold = rng.random() < cold_p
        load_ms = load_median * rng.lognormvariate(0, 0.3) if cold else None
        if self.thermal:
            thermal, prefill = ("critical" if rng.random() < 0.3 else "serious"), prefill / 3
        else:
            thermal = "fair" if rng.random() < 0.15 else "nominal"
        # runtime + weights ~900 MB, KV cache ~0.9 MB a token of context, allocator noise
        peak = 900.0 + extra_mem + 0.9 * (req.input_tokens or 0) + rng.gauss(0, 40)
        # idle with the model loaded: the weights mapped and the runtime, no KV cache; the tier's extra
        # overhead half resident (SIMULATED, no draw: the ledger's random stream is unchanged)
        resident = 850.0 + extra_mem / 2
        return {
            "swap": swap,
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
        weekly replay would store them (`warehouse.queries.review.RERUN_COLUMNS`)."""
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

    def run(self, requests: int, progress: Callable[[int], None] = lambda n: None) -> dict:
        names = list(TASKS)
        weights = [TASKS[t][0] for t in names]
        step = self.span.total_seconds() / max(1, requests)
        for i in range(requests):
            self.clock.t = i * step
            frac = i / max(1, requests)
            self.cloud_down = Incidents.active(self.incidents.cloud_outage, frac)
            self.thermal = Incidents.active(self.incidents.thermal, frac)
            self.policy.pushed = Incidents.active(self.incidents.bad_threshold, frac)
            session, tier, network = self.rng.choice(self.sessions)
            task_type = self.rng.choices(names, weights)[0]
            expected = TASKS[task_type][2]
            text = request_text(self.text_rng, task_type)
            req = Request(
                task_type=task_type,
                text=text,
                session_id=session,
                deadline_ms=self.rng.choice((3000, 5000, 8000)),
                elapsed_ms=self.rng.randint(20, 400),
                has_pii=self.rng.random() < 0.02,
                network=network,
                device_tier=tier,
                input_tokens=self.rng.randint(*INPUT_TOKENS.get(task_type, (20, 480))),
                expected_output_tokens=expected,
                request_id=f"sim-req-{uuid.UUID(int=self.rng.getrandbits(128))}",
                app_id="sim-app",
            )
            self.current = req
            self.pending = self.draw_ledger(req)
            if self.texts is not None:
                self.texts.add(req.request_id, task_type, text)
            _, event = self.router.route(req)
            if event.mode == "live" and event.entered_device:
                self._entered.setdefault(event.task_type, []).append((event.request_id, event.event_time))
            self.stats["requests"] += 1
            progress(1)
            self._maybe_label(event)
        self.policy.pushed = False
        return dict(self.stats)

    def _maybe_label(self, event) -> None:
        if not event.entered_device or event.confidence is None or self.rng.random() >= self.label_share:
            return
        ok = acceptable(self.rng, event.task_type, event.confidence)
        source = self.rng.choices(LABEL_SOURCES, (0.3, 0.3, 0.3, 0.1))[0]  # weights in LABEL_SOURCES order
        delay = timedelta(hours=self.rng.choice((1, 6, 30)))
        label = LabelEvent(
            schema_version=1,
            label_id=str(uuid.UUID(int=self.rng.getrandbits(128))),
            event_time=event.event_time + delay,
            request_id=event.request_id,
            source=source,
            device_acceptable=ok,
            route_correct=route_correct(event.fallback_type, ok),
            labeler=f"sim-{source}",
        )
        self.stats["labels"] += 1
        self.on_label(label)


def default_start(span: timedelta) -> datetime:
    """The simulated span ends now (minute-aligned), so the data looks live."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    return now - span
