"""The demo's closed-loop cycle (docs/loop.md#the-demos-cycle): one week of canary traffic, compressed into half a
minute, in which a good candidate is promoted and a harmful one rolled back.

SIMULATED traffic through the real router: every hour of the simulated week, `SESSIONS_PER_HOUR` short sessions,
each with requests of the two task types under test; the device's first-try confidence and the answers' ground
truth are drawn from the demo's own distributions (`routerscope.router.sim.texts`), every device-served answer is
judged. The decisions (with their experiment fields) and the labels go through Kafka and the loader into the
warehouse, like the demo's fleet; every look is `runner.step` on the warehouse, every transition a file under the
home and an event on Kafka. The week ends where the demo's span starts, so the cycle never moves the span's
metrics and alerts, and the day before it is the offline evaluation's window (today's policy only).

The candidates carry the demo's loop settings (`DEMO_LOOP`, in their `candidate.yaml`): a small fleet's week
(60 sessions an hour) cannot show 200 candidate sessions per stage at 5 %, so a stage needs 30, and the margin is
5 points; `bench/loop.py` measures the defaults' operating characteristics.
"""

from __future__ import annotations

import hashlib
import random
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from routerscope.core import names
from routerscope.core.kafka import check_reachable, producer_config
from routerscope.core.settings import Settings
from routerscope.instrumentation.emitter import KafkaEmitter
from routerscope.instrumentation.telemetry import Telemetry
from routerscope.router.engine import Request, Router
from routerscope.router.experiment import Experiment
from routerscope.router.policy import PolicyStore, default_policy
from routerscope.router.sim import texts
from routerscope.router.sim.cycle import CycleCloud, CycleDevice, poisson, texts_label
from routerscope.warehouse.analytics.loop import lifecycle, propose, rules, runner, view
from routerscope.warehouse.analytics.loop.evidence import Candidate, policies_root, policy_id
from routerscope.warehouse.analytics.loop.notify import Notifying
from routerscope.warehouse.analytics.loop.publish import KafkaPublisher
from routerscope.warehouse.client import open_warehouse
from routerscope.warehouse.ingest.loader import load
from routerscope.warehouse.sql import QueryWindow

SESSIONS_PER_HOUR = 60
REQUESTS_PER_SESSION = 6  # per task type under test: 1 + Poisson(5)
WEEK = timedelta(days=7)
DEMO_LOOP: dict[str, Any] = {  # the candidates' loop settings (module docstring); the rest are LoopPolicy's defaults
    "margin": 0.05,
    "min_stage_sessions": 30,
    "planned_sessions": 4000,
    "auto_promote": True,
}


@dataclass(frozen=True)
class Spec:
    name: str  # what the demo calls it
    task_type: str
    threshold: float


# By the confidence gate alone (bench/loop.py's `expected_missed`): intent_classify 0.70 → 0.69 costs about +0.5
# points of missed fallbacks for more offload (good); short_reply 0.60 → 0.30 about +13 points (harmful: beyond the
# margin), as a hand-written candidate might
CANDIDATES = (Spec("good", "intent_classify", 0.69), Spec("harmful", "short_reply", 0.30))


class Traffic:
    """The week's requests through one router, into Kafka (decisions and their labels)."""

    def __init__(self, settings: Settings, seed: int, experiments):
        self.rng = random.Random(seed)
        self.device = CycleDevice(random.Random(seed + 1))
        self.now = datetime.min
        self.emitter = KafkaEmitter(producer_config(settings), settings.spool_path, block_when_full=True)
        self.tel = Telemetry(self.emitter)
        self.router = Router(
            self.device,
            CycleCloud(self.device),
            policy=PolicyStore(),
            instance_id="loop-cycle-router",
            now=lambda: self.now,
            on_event=self._decided,
        )
        self.router.experiments = experiments
        self._salt = hashlib.sha256(f"loop-cycle:{seed}".encode()).hexdigest()[:12]
        self.sessions = self.requests = self.labels = 0

    def _decided(self, event) -> None:
        self.tel.send(names.TOPIC_DECISIONS, event.session_id, event)
        served = event.entered_device and event.fallback_type == "none" and event.degrade_level in (0, 1)
        if not served or event.confidence is None:
            return
        ok = self.rng.random() < texts.pass_rate(event.task_type, event.confidence)
        self.labels += 1
        self.tel.send(
            names.TOPIC_LABELS,
            event.request_id,
            texts_label(self.rng, event, ok),
        )

    def hour(self, start: datetime) -> None:
        """One hour's sessions, each a few minutes long (its arm is sticky, and it never straddles a stage)."""
        for _ in range(SESSIONS_PER_HOUR):
            self.sessions += 1
            session = f"loop-session-{self._salt}-{self.sessions}"
            begin = start + timedelta(seconds=self.rng.uniform(0, 3300))
            asks = [t for spec in CANDIDATES for t in [spec.task_type] * (1 + poisson(self.rng, 5))]
            self.rng.shuffle(asks)
            for k, task_type in enumerate(asks):
                self.requests += 1
                self.now = begin + timedelta(seconds=20 * k)
                request = Request(
                    task_type=task_type,
                    text=texts.request_text(self.rng, task_type),
                    session_id=session,
                    request_id=f"loop-req-{self._salt}-{self.requests}",
                    app_id="loop-cycle",
                )
                self.device.request, self.device.pending = request, {}
                self.router.route(request)

    def flush(self) -> None:
        self.emitter.flush(120)

    def close(self) -> None:
        self.emitter.flush(120)
        self.emitter.close()


def _say(show: bool, line: str) -> None:
    if show:
        print(f"  {line}", file=sys.stderr, flush=True)


def run_cycle(settings: Settings, *, start: datetime, seed: int, show: bool = True) -> dict:
    """The demo's cycle over the week before `start` (module docstring): the baseline day, both candidates
    proposed and evaluated on it, canaried together, a look every 100 sessions (or at the week's end), until both
    are decided. Returns each candidate's id, final state and verdicts, and the traffic's counts. A home that ran
    the cycle already keeps its candidates (their ids are their contents' hashes): nothing is run again."""
    root = policies_root(settings.home)
    week_start = start - WEEK
    baseline = QueryWindow(week_start - timedelta(days=1), week_start)
    check_reachable(settings)
    kafka = KafkaPublisher(settings)
    live: dict[str, Candidate] = {}
    # the running experiments, read from the directory after each transition (a look, the canary's start) and
    # kept: read for every request, the directory's YAML and listings took most of the cycle's time
    running: dict[str, Experiment | None] = {}
    traffic = Traffic(settings, seed, running.get)
    try:
        existing = [_candidate_of(root, spec) for spec in CANDIDATES]
        if all(c is not None and c.state() not in ("proposed",) for c in existing):
            _say(show, "the loop's demo cycle ran in this home already: its candidates are kept as they are")
            return _result(root, traffic, existing)
        _say(show, "the closed loop: a week of canary traffic (SIMULATED), compressed …")
        _hours(traffic, baseline.start, baseline.end)
        traffic.flush()
        load(settings, idle_timeout_s=0.5)
        today = default_policy()
        with open_warehouse(settings, purpose="loop demo", migrated=True) as client:
            for spec in CANDIDATES:
                policy = rules.LoopPolicy(**DEMO_LOOP)
                evaluation = propose.evaluate_candidate(
                    client,
                    baseline,
                    spec.task_type,
                    spec.threshold,
                    planned_sessions=int(policy.planned_sessions * 0.1),
                    ledger=view.ledger(root, spec.task_type),
                    seed=seed,
                )
                live[spec.task_type] = _start_canary(
                    settings, root, spec, evaluation, baseline, today.capabilities[spec.task_type].threshold, kafka
                )
        running.update(_experiments(live))
        clock, since_look = week_start, 0
        while clock < start and any(c.state() in lifecycle.CANARY for c in live.values()):
            _hours(traffic, clock, clock + timedelta(hours=1))
            clock += timedelta(hours=1)
            since_look += SESSIONS_PER_HOUR
            if since_look >= rules.LoopPolicy(**DEMO_LOOP).look_sessions or clock >= start:
                since_look = 0
                _look(settings, traffic, live, clock, kafka, show)
                running.update(_experiments(live))
        return _result(root, traffic, list(live.values()))
    finally:
        traffic.close()
        kafka.close()


def _hours(traffic: Traffic, start: datetime, end: datetime) -> None:
    hour = start
    while hour < end:
        traffic.hour(hour)
        hour += timedelta(hours=1)


def _experiments(live: dict[str, Candidate]) -> dict[str, Experiment | None]:
    """Each task type's experiment while its candidate is in a canary stage; None after (today's policy again)."""
    return {t: runner.experiment_of(c) if c.state() in lifecycle.CANARY else None for t, c in live.items()}


def _body(spec: Spec, today: float) -> dict:
    return {
        "task_type": spec.task_type,
        "threshold": spec.threshold,
        "parent_threshold": today,
        "loop": DEMO_LOOP,
    }


def _candidate_of(root, spec: Spec) -> Candidate | None:
    today = default_policy().capabilities[spec.task_type].threshold
    c = Candidate(root, spec.task_type, policy_id(_body(spec, today)))
    return c if (c.dir / "candidate.yaml").exists() else None


def _start_canary(settings, root, spec: Spec, evaluation: dict, window: QueryWindow, today: float, kafka) -> Candidate:
    """The candidate's file, its evaluation, and `proposed → evaluated → shadow → canary_5` at the week's start."""
    now = window.end
    policy = rules.LoopPolicy(**DEMO_LOOP)
    c = Candidate.propose(
        root,
        spec.task_type,
        _body(spec, today),
        parent=hashlib.sha256(default_policy().version.encode()).hexdigest(),
        window={"start": window.start.isoformat(), "end": window.end.isoformat()},
        parameters=runner.policy_dict(policy),
        publish=kafka,
        actor="demo",
        now=now,
    )
    publish = Notifying(kafka, settings, c.dir)
    c.publish_pending(publish)
    if c.state() == "proposed":
        name = c.write_evaluation({"proposal": {"by": "demo", "scenario": spec.name}, **evaluation})
        for a, b in (("proposed", "evaluated"), ("evaluated", "shadow"), ("shadow", "canary_5")):
            c.transition(
                a, b, "passed" if b == "evaluated" else "canary_requested", name, publish, actor="demo", now=now
            )
    return c


def _look(settings, traffic: Traffic, live: dict[str, Candidate], now: datetime, kafka, show: bool) -> None:
    """Everything routed so far into the warehouse, then one look at each candidate still in a canary stage."""
    traffic.flush()
    load(settings, idle_timeout_s=0.5)
    with open_warehouse(settings, purpose="loop demo", migrated=True) as client:
        for c in live.values():
            if c.state() not in lifecycle.CANARY:
                continue
            before = c.state()
            publish = Notifying(kafka, settings, c.dir)
            policy = rules.LoopPolicy(**(c.candidate().get("loop") or {}))
            verdict, moved, _ = runner.step(client, c, policy, now=now, publish=publish)
            if moved:
                hours = (now - runner.stages_of(c)[0][0]).total_seconds() / 3600
                _say(show, f"{c.task_type} {c.policy_id}: {before} → {moved} ({verdict.reason}) after {hours:.0f} h")


def _result(root, traffic: Traffic, found: list[Candidate | None]) -> dict:
    out: dict[str, Any] = {
        "sessions": traffic.sessions,
        "requests": traffic.requests,
        "labels": traffic.labels,
        "candidates": {},
    }
    for spec, c in zip(CANDIDATES, found, strict=True):
        if c is None:
            continue
        looks = c.looks()
        out["candidates"][spec.name] = {
            "task_type": c.task_type,
            "policy_id": c.policy_id,
            "state": c.state(),
            "looks": len(looks),
            "last_verdict": looks[-1]["verdict"] if looks else None,
            "ledger": view.ledger(root, c.task_type),
        }
    return out
