"""The simulated fleet (clearly labelled SIMULATED wherever it shows): statistical device and cloud
behaviours driving the **real** router code, labels the way a review process would produce them,
and scripted incidents on a timeline.

* Device: per task type, confidence ~ Beta; time to first token and decode speed by device tier,
  slowed by load; during a **thermal episode** decode speed drops to a third and long answers time
  out. Whether an answer is acceptable depends on its confidence (calibrated), except that one task
  type's top confidence bucket is deliberately over-confident (`short_summary`).
* Device ledger (seed 003; contract v2 `device_stats`): per tier a prefill rate, a peak memory that
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
* A **bad threshold push**: the policy file is rewritten mid-run with a much stricter threshold for
  `short_reply` (hot reload, new policy_version); false fallbacks jump until it is rolled back.
* The weekly replay's determinism groups (seed 004 §2), simulated: `simulated_reruns` re-runs a
  sample of each task type's device-entered requests 3 times; a group agrees with the task type's
  `DETERMINISM` probability (classification and structured output agree more than free text).
* Labels for a sampled share of device-judged requests, from mixed sources, some days late.
* `corrupt` malformed messages are produced as they are, for the loader to quarantine.

Simulated time runs from `start` over `span`; the router's clock and event times follow it: each
request starts at its slot of the span and the simulated backends advance the clock by the time they
take, so events carry simulated latencies (the fleet's requests overlap, as a fleet's do).
"""

from __future__ import annotations

import math
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from instrumentation.events import LabelEvent
from router.backends import CloudResult, DeviceResult
from router.engine import Request, Router
from router.policy import DEFAULT_POLICY, PolicyStore, parse
from router.replay import route_correct

TASKS = {  # task type: (share of traffic, confidence Beta(a, b), expected output tokens)
    "intent_classify": (0.30, (14, 2), 4),
    "short_reply": (0.25, (12, 2.5), 40),
    "short_summary": (0.15, (12, 2), 120),
    "slot_extract": (0.10, (14, 2), 30),
    "long_summary": (0.10, (2, 2), 400),
    "multi_step_tools": (0.05, (2, 2), 200),
    "tool_call": (0.05, (16, 2), 60),
    "code_snippet": (0.05, (10, 3), 40),  # in shadow mode: the cloud answers, the device is compared
}
SHADOW_TASKS = ("code_snippet",)
# The confidence above which the device's answers are mostly acceptable: the default policy's thresholds.
TRUE_THRESHOLDS = {
    task: cap.threshold for task, cap in parse(DEFAULT_POLICY.read_text()).capabilities.items() if cap.supported
}
INPUT_TOKENS = {"long_summary": (9000, 9000), "code_snippet": (20, 1000)}  # others: 20-480
# What the simulated users ask, per task type: kept in the request-text store (never in events) so
# the offline replay can re-run a request through the real device model.
TEXTS = {
    "intent_classify": (
        "Classify the intent of this message with one word (play_music, set_alarm, weather, call, other): {}",
        ("play some jazz", "wake me up at seven", "will it rain tomorrow", "call my sister", "turn it up"),
    ),
    "slot_extract": (
        'Extract the city and the day as a JSON object with keys "city" and "day". Output only JSON: {}',
        ("a table in Paris on Friday", "flights to Tokyo next Monday", "weather in Oslo today"),
    ),
    "short_reply": ("Reply in one short sentence: {}", ("thanks for the help!", "are you free later?", "good morning")),
    "short_summary": (
        "Summarise in one sentence: {}",
        (
            "The meeting moved to Thursday because the room was booked; bring the budget draft.",
            "The package left the warehouse this morning and should arrive in two days.",
        ),
    ),
    "tool_call": (
        'Output only a JSON object with keys "tool" and "query" to look up: {}',
        ("the opening hours of the museum", "the exchange rate of the euro", "tomorrow's first train"),
    ),
    "code_snippet": ("Write one line of Python that {}.", ("reverses a list named xs", "sums the numbers 1 to 10")),
    "long_summary": ("Summarise this long report: {}", ("(a long quarterly report)",)),
    "multi_step_tools": ("Plan the tools and steps to {}.", ("book a trip and tell my team",)),
}
TIERS = {"high": (80.0, 90.0), "mid": (120.0, 60.0), "low": (200.0, 35.0)}  # ttft ms, tokens/s
# tier: (prefill tokens/s, extra peak memory MB, cold-start probability, load ms median, swap probability)
TIER_LEDGER = {
    "high": (420.0, 0.0, 0.01, 600.0, 0.0),
    "mid": (240.0, 60.0, 0.02, 900.0, 0.0),
    "low": (110.0, 140.0, 0.05, 1800.0, 0.10),
}
SWAP_SLOWDOWN = 0.15  # the low tier's decode rate while the OS swaps the runtime out
NETWORKS = ("wifi", "wifi", "cellular", "weak")
# Decode speed under background load, as a share of the tier's; the device reports the slow end to the
# latency gate (a measured device knows its range), so an unloaded device is not admitted on hope.
LOAD_RANGE = (0.7, 1.1)
LABEL_SOURCES = ("human_review", "offline_replay", "validator", "shadow_compare")
# The chance that 3 sampled re-runs of one request agree (SIMULATED determinism, seed 004 §2).
DETERMINISM = {
    "intent_classify": 0.97,
    "slot_extract": 0.93,
    "tool_call": 0.9,
    "short_reply": 0.55,
    "short_summary": 0.6,
    "code_snippet": 0.7,
    "long_summary": 0.3,
    "multi_step_tools": 0.3,
}


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


class StatDevice:
    model = "sim-gemma-270m"

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
        self, prompt, *, max_tokens, timeout_ms, degraded, commit_tokens, decide=None, decision_at_ms=0.0
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
            clock.t = started + max(0.0, timeout_ms) / 1000
            committed = tokens >= commit_tokens and self.rng.random() < 0.2  # streamed past the commit point
            return DeviceResult(
                "partial", confidence, "logprob", tokens, ttft, timeout_ms, "timeout", committed, stats=stats
            )
        clock.t = started + latency / 1000
        text = {"slot_extract": '{"slot": "value"}', "tool_call": '{"tool": "lookup"}', "intent_classify": "play_music"}
        return DeviceResult(
            text.get(req.task_type, "a plain answer."), confidence, "logprob", tokens, ttft, latency, "ok", stats=stats
        )


class StatCloud:
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


def request_text(rng: random.Random, task_type: str) -> str:
    template, subjects = TEXTS[task_type]
    return template.format(rng.choice(subjects))


def shadow_agreement(input_tokens: int) -> float:
    """How often the device's shadow answer matches the cloud's: worse on longer inputs."""
    return 0.93 if input_tokens < 128 else 0.82 if input_tokens < 512 else 0.58


def acceptable(rng: random.Random, task_type: str, confidence: float) -> bool:
    """Ground truth: acceptability rises steeply with confidence around (just below) the task type's
    default threshold, so the default policy is well tuned; except that short_summary's top bucket
    is over-confident (the calibration view flags it)."""
    p = 1 / (1 + math.exp(-40 * (confidence - (TRUE_THRESHOLDS.get(task_type, 0.7) - 0.02))))
    if task_type == "short_summary" and confidence >= 0.85:
        p = 0.72
    return rng.random() < p


class Fleet:
    def __init__(
        self,
        *,
        seed: int,
        start: datetime,
        span: timedelta,
        policy_path: Path,
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
        self.policy_path = policy_path
        self._base_policy = DEFAULT_POLICY.read_text().replace("shadow: []", f"shadow: [{', '.join(SHADOW_TASKS)}]")
        policy_path.write_text(self._base_policy)
        self.policy = PolicyStore(policy_path, check_every_s=1.0, clock=self.clock.monotonic)
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
        self.cloud_down = self.thermal = self.bad_threshold = False
        self.current: Request | None = None
        self.pending: dict = {"swap": 1.0, "load_ms": None}
        self.stats = {"requests": 0, "labels": 0}

    def draw_ledger(self, req: Request) -> dict:
        """What the device will measure for this request (seed 003's ledger), drawn before routing: a
        swapping low-tier device decodes at 15 % speed; a cold start must load the model first."""
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
        return {
            "swap": swap,
            "cold_start": cold,
            "load_ms": load_ms,
            "thermal_state": thermal,
            "prefill_tps": round(prefill * rng.uniform(0.8, 1.1), 1),
            "peak_mem_mb": round(max(peak, 100.0), 1),
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
        """Seed 004 §5: disagreements are kept as samples beside the request texts (never in events)."""
        self.stats["divergences"] = self.stats.get("divergences", 0) + 1
        if self.texts is not None and hasattr(self.texts, "add_divergence"):
            self.texts.add_divergence(d, self.clock.now())

    def _set_threshold_push(self, on: bool) -> None:
        if on == self.bad_threshold:
            return
        self.bad_threshold = on
        text = self._base_policy
        if on:
            text = text.replace("threshold: 0.60", "threshold: 0.93").replace(
                'version: "2026-11-30.1"', 'version: "2026-11-30.1-pushed"'
            )
        self.policy_path.write_text(text)

    def run(self, requests: int, progress: Callable[[int], None] = lambda n: None) -> dict:
        names = list(TASKS)
        weights = [TASKS[t][0] for t in names]
        step = self.span.total_seconds() / max(1, requests)
        for i in range(requests):
            self.clock.t = i * step
            frac = i / max(1, requests)
            self.cloud_down = Incidents.active(self.incidents.cloud_outage, frac)
            self.thermal = Incidents.active(self.incidents.thermal, frac)
            self._set_threshold_push(Incidents.active(self.incidents.bad_threshold, frac))
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
        self._set_threshold_push(False)
        return dict(self.stats)

    def _maybe_label(self, event) -> None:
        if not event.entered_device or event.confidence is None or self.rng.random() >= self.label_share:
            return
        ok = acceptable(self.rng, event.task_type, event.confidence)
        source = self.rng.choices(LABEL_SOURCES, (0.3, 0.3, 0.3, 0.1))[0]
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
