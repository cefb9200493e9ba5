"""One step of the loop on one candidate (docs/loop.md#a-look): judge a canary look from its running sums,
write the look file, and make the transition its verdict calls for.

A look file stores everything its verdict stood on: the running sums of every sequence (not only the
intervals), the stage and its clock, the prediction record, and the loop's settings, so
`recompute(look_file)` rebuilds the same `Look` and the same verdict from the file alone.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from routerscope.core.kafka import check_reachable
from routerscope.core.timeutil import utc
from routerscope.router.experiment import Experiment
from routerscope.warehouse.analytics.loop import evaluate, lifecycle, propose, rules, view
from routerscope.warehouse.analytics.loop.evidence import Candidate, candidates, policies_root
from routerscope.warehouse.analytics.loop.notify import Notifying
from routerscope.warehouse.analytics.loop.publish import KafkaPublisher
from routerscope.warehouse.analytics.loop.sequential import (
    ArmSums,
    MeanSums,
    RatioDifference,
    mean_difference,
    ratio_interval,
    rho_for,
    srm_sequential_p,
)
from routerscope.warehouse.client import open_warehouse
from routerscope.warehouse.queries import loop as loop_queries
from routerscope.warehouse.sql import QueryWindow

# verdict → the state it moves to (None: stays)
MOVES = {
    "rollback": "rolled_back",
    "halt": "halted",
    "hold": "held",
    "promote": "full",
    "advance": None,  # the next canary stage (lifecycle.next_stage)
    "await_approval": None,
    "continue": None,
}


@dataclass
class CanarySums:
    """The running sums of a canary (both arms, every sequence), cumulative over its stages."""

    missed: RatioDifference = field(default_factory=RatioDifference)
    guardrails: dict[str, RatioDifference] = field(default_factory=dict)
    offload: ArmSums = field(default_factory=ArmSums)
    confidence: tuple[MeanSums, MeanSums] = field(default_factory=lambda: (MeanSums(), MeanSums()))
    expected_candidate: float = 0.0  # Σ π_i over the sessions
    assignment_variance: float = 0.0  # Σ π_i (1 − π_i)

    def add_session(
        self,
        arm: int,
        share: float,
        *,
        requests: float,
        served: float,
        judged: float,
        missed: float,
        confidence: float | None,
        guardrails: dict[str, tuple[float, float]] | None = None,
    ) -> None:
        """One session's figures (its arm, the share it was assigned at)."""
        self.expected_candidate += share
        self.assignment_variance += share * (1 - share)
        self.missed.add(arm, missed, judged, share)
        for name, (y, x) in (guardrails or {}).items():
            self.guardrails.setdefault(name, RatioDifference()).add(arm, y, x, share)
        if arm:
            self.offload.add(served, requests, 1.0)
        if confidence is not None and not math.isnan(confidence):
            self.confidence[arm].add(confidence)

    def to_dict(self) -> dict:
        return {
            "missed": self.missed.to_dict(),
            "guardrails": {k: v.to_dict() for k, v in sorted(self.guardrails.items())},
            "offload": self.offload.to_dict(),
            "confidence": [m.to_dict() for m in self.confidence],
            "expected_candidate": self.expected_candidate,
            "assignment_variance": self.assignment_variance,
        }

    @classmethod
    def from_dict(cls, data: dict) -> CanarySums:
        return cls(
            RatioDifference.from_dict(data["missed"]),
            {k: RatioDifference.from_dict(v) for k, v in data["guardrails"].items()},
            ArmSums.from_dict(data["offload"]),
            (MeanSums.from_dict(data["confidence"][0]), MeanSums.from_dict(data["confidence"][1])),
            float(data["expected_candidate"]),
            float(data["assignment_variance"]),
        )


def share_at(stages: list[tuple[datetime, float]], when: datetime) -> float | None:
    """The share in force at `when`: the last stage (start time, share) started at or before it; None before
    the first."""
    starts = [utc(t) for t, _ in stages]
    i = bisect.bisect_right(starts, utc(when)) - 1
    return stages[i][1] if i >= 0 else None


def sums_from_sessions(rows: list[dict], stages: list[tuple[datetime, float]]) -> tuple[CanarySums, dict]:
    """A canary's sums from its sessions as the warehouse gives them (`queries.loop.canary_sessions`): each
    session at the share in force when it was first seen. Sessions seen in both arms (a broken assignment) or
    before the canary began are left out and counted; the sample-ratio check sees what remains."""
    sums = CanarySums()
    left_out = {"both_arms": 0, "before_canary": 0}
    for r in rows:
        arms = set(r["arms"])
        if len(arms) != 1:
            left_out["both_arms"] += 1
            continue
        share = share_at(stages, r["first_seen"])
        if share is None or not 0 < share < 1:
            left_out["before_canary"] += 1
            continue
        requests = float(r["requests"])
        sums.add_session(
            int(arms == {"candidate"}),
            share,
            requests=requests,
            served=float(r["served"]),
            judged=float(r["judged"]),
            missed=float(r["missed"]),
            confidence=None if r["confidence"] is None else float(r["confidence"]),
            guardrails={
                "timeouts": (float(r["timeouts"]), requests),
                "canned": (float(r["canned"]), requests),
                "cloud_calls_per_session": (float(r["calls"]), 1.0),
            },
        )
    return sums, left_out


def policy_dict(policy: rules.LoopPolicy) -> dict:
    return dataclasses.asdict(policy)


def policy_from(data: dict) -> rules.LoopPolicy:
    return rules.LoopPolicy(**data)


def build_look(
    sums: CanarySums,
    policy: rules.LoopPolicy,
    *,
    stage: int,
    stage_hours: float,
    total_hours: float,
    stage_candidate_sessions: int,
    prediction: dict | None,
) -> rules.Look:
    rho = rho_for(policy.planned_sessions, policy.alpha)
    interval = evaluate.prediction_at(prediction, sums.offload.sessions) if prediction else None
    return rules.Look(
        stage=stage,
        stage_hours=stage_hours,
        total_hours=total_hours,
        stage_candidate_sessions=stage_candidate_sessions,
        candidate_sessions=sums.missed.candidate.sessions,
        control_sessions=sums.missed.control.sessions,
        # the rules read one bound of these at a time (rules.decide): each bound a one-sided sequence at α
        missed=sums.missed.interval(rho, policy.alpha, one_sided=True),
        guardrails={k: v.interval(rho, policy.alpha, one_sided=True) for k, v in sums.guardrails.items()},
        offload=ratio_interval(sums.offload, rho, policy.alpha),
        prediction=tuple(interval) if interval else None,  # type: ignore[arg-type]
        srm_p=srm_sequential_p(sums.missed.candidate.sessions, sums.expected_candidate, sums.assignment_variance, rho),
        balance=mean_difference(sums.confidence[0], sums.confidence[1], rho, rules.CHECK_ALPHA),
    )


def look_body(
    look: rules.Look,
    verdict: rules.Verdict,
    sums: CanarySums,
    policy: rules.LoopPolicy,
    clock: dict,
    prediction: dict | None,
    window: dict,
) -> dict:
    return {
        "window": window,
        "parameters": {**policy_dict(policy), "rho": rho_for(policy.planned_sessions, policy.alpha)},
        "clock": clock,
        "prediction": prediction,
        "sums": sums.to_dict(),
        "measured": {
            "missed_fallback_delta": look.missed.to_dict(),
            "guardrails": {k: v.to_dict() for k, v in look.guardrails.items()},
            "offload": look.offload.to_dict(),
            "offload_prediction": list(look.prediction) if look.prediction else None,
            "srm_p": look.srm_p,
            "confidence_balance": look.balance.to_dict(),
        },
        "verdict": verdict.to_dict(),
    }


def recompute(record: dict) -> rules.Verdict:
    """The verdict of a stored look file, from its stored sums, clock, prediction and settings alone."""
    parameters = {k: v for k, v in record["parameters"].items() if k != "rho"}
    policy = policy_from(parameters)
    look = build_look(CanarySums.from_dict(record["sums"]), policy, prediction=record["prediction"], **record["clock"])
    return rules.decide(look, policy)


def judge(
    candidate: Candidate,
    sums: CanarySums,
    policy: rules.LoopPolicy,
    *,
    clock: dict,
    window: dict,
    publish: Callable[[dict], None],
    now: datetime | None = None,
    experiment_id: str | None = None,
    after_file: Callable[[], None] | None = None,
) -> tuple[rules.Verdict, str | None]:
    """One look: write its file, then the transition its verdict calls for. Returns the verdict and the new
    state (None when the state stays). `clock`: stage, stage_hours, total_hours, stage_candidate_sessions."""
    state = candidate.state()
    if state not in lifecycle.CANARY:
        raise lifecycle.TransitionRefused(f"{candidate.policy_id} is {state}: only a canary stage is judged")
    clock = {**clock, "stage": lifecycle.CANARY.index(state)}
    evaluation = candidate.evaluation() or {}
    prediction = evaluation.get("offload_prediction")
    look = build_look(sums, policy, prediction=prediction, **clock)
    verdict = rules.decide(look, policy)
    name = candidate.write_look(look_body(look, verdict, sums, policy, clock, prediction, window))
    target = MOVES[verdict.action]
    if verdict.action == "advance":
        target = lifecycle.next_stage(state)
    if target is None:
        return verdict, None
    metrics = {"missed_fallback_delta": look.missed.to_dict(), "offload": look.offload.to_dict(), "srm_p": look.srm_p}
    candidate.transition(
        state,
        target,
        verdict.reason,
        name,
        publish,
        metrics=metrics,
        now=now,
        experiment_id=experiment_id,
        after_file=after_file,
    )
    return verdict, target


def stages_of(candidate: Candidate) -> list[tuple[datetime, float]]:
    """(start, share) of each canary stage the candidate entered, from its transitions."""
    out = []
    for record in candidate.transitions():
        event = record["event"]
        if event["to_state"] in lifecycle.CANARY:
            out.append(
                (
                    utc(datetime.fromisoformat(event["event_time"].replace("Z", "+00:00"))),
                    lifecycle.SHARES[event["to_state"]],
                )
            )
    return out


def experiment_of(candidate: Candidate):
    """The router's experiment for a candidate in a canary stage or `full` (share 1); None otherwise. The
    experiment's id and salt are the policy id: each candidate draws its own arms."""
    state = candidate.state()
    if state not in (*lifecycle.CANARY, "full"):
        return None
    return Experiment(
        experiment_id=candidate.policy_id,
        policy_id=candidate.policy_id,
        task_type=candidate.task_type,
        salt=candidate.policy_id,
        share=lifecycle.SHARES[state],
        candidate_threshold=float(candidate.candidate()["threshold"]),
    )


def step(
    client,
    candidate: Candidate,
    policy: rules.LoopPolicy,
    *,
    now: datetime,
    publish: Callable[[dict], None],
) -> tuple[rules.Verdict, str | None, dict]:
    """One look at a live canary from the warehouse: its sessions since the canary began, each at its share,
    the stage's clock, the verdict and its transition. Returns the verdict, the new state and what was left out."""
    stages = stages_of(candidate)
    if not stages:
        raise lifecycle.TransitionRefused(f"{candidate.policy_id} never entered a canary stage")
    canary_start, stage_start = stages[0][0], stages[-1][0]
    now = utc(now)
    rows = loop_queries.canary_sessions(client, candidate.policy_id, QueryWindow(canary_start, now))
    sums, left_out = sums_from_sessions(rows, stages)
    in_stage = sum(1 for r in rows if set(r["arms"]) == {"candidate"} and utc(r["first_seen"]) >= stage_start)
    clock = {
        "stage_hours": (now - stage_start).total_seconds() / 3600,
        "total_hours": (now - canary_start).total_seconds() / 3600,
        "stage_candidate_sessions": in_stage,
    }
    window = {"start": canary_start.isoformat(), "end": now.isoformat(), "left_out": left_out}
    verdict, moved = judge(
        candidate, sums, policy, clock=clock, window=window, publish=publish, now=now, experiment_id=candidate.policy_id
    )
    return verdict, moved, left_out


def step_all(settings, *, now: datetime, task_type: str | None = None) -> list[dict]:
    """`step` on every candidate in a canary stage under the home (what `routerscope loop step` and the hourly
    schedule run): the broker checked first, what a crash left unsent published, each look's transition
    published and sent to the alert channels. A candidate's `loop:` settings in `candidate.yaml` override the
    defaults of `LoopPolicy`."""
    live = [c for c in candidates(policies_root(settings.home), task_type) if c.state() in lifecycle.CANARY]
    if not live:
        return []
    check_reachable(settings)
    kafka = KafkaPublisher(settings)
    results = []
    try:
        with open_warehouse(settings, purpose="loop step", migrated=True) as client:
            for c in live:
                publish = Notifying(kafka, settings, c.dir)
                c.publish_pending(publish)
                policy = rules.LoopPolicy(**(c.candidate().get("loop") or {}))
                before = c.state()
                verdict, moved, left_out = step(client, c, policy, now=now, publish=publish)
                results.append(
                    {
                        "policy_id": c.policy_id,
                        "task_type": c.task_type,
                        "from": before,
                        "to": moved,
                        "verdict": verdict.to_dict(),
                        "left_out": left_out,
                    }
                )
    finally:
        kafka.close()
    return results


def propose_candidate(
    settings,
    *,
    task_type: str,
    window: QueryWindow,
    today: float,
    policy_version: str,
    target: float,
    loop: dict | None = None,
    alert_rules=(),
    start_canary: bool = False,
    actor: str = "auto",
    now: datetime | None = None,
) -> dict:
    """The weekly step of one task type (docs/loop.md#propose): the lowest threshold in the trust region that
    passes every check, written as a candidate with its evaluation; `proposed → evaluated`, or `→ rejected` when
    no threshold passes or the one chosen is today's. With `start_canary` an evaluated candidate moves on through
    `shadow` to `canary_5` (the router's shadow comparison of a candidate is not built: shadow is a state only)."""
    policy = rules.LoopPolicy(**(loop or {}))
    check_reachable(settings)
    kafka = KafkaPublisher(settings)
    try:
        with open_warehouse(settings, purpose="loop propose", migrated=True) as client:
            proposal = propose.propose(
                client,
                window,
                task_type,
                today,
                target=target,
                trust_region=policy.trust_region,
                alert_rules=alert_rules,
            )
            threshold = proposal["chosen"] if proposal["moves"] else today
            ledger = view.ledger(policies_root(settings.home), task_type)
            evaluation = propose.evaluate_candidate(
                client, window, task_type, threshold, planned_sessions=int(policy.planned_sessions * 0.1), ledger=ledger
            )
        body = {"task_type": task_type, "threshold": threshold, "parent_threshold": today, "target": target}
        if loop:
            body["loop"] = loop
        parameters = {**policy_dict(policy), "target": target}
        window_record = {"start": window.start.isoformat(), "end": window.end.isoformat()}
        c = Candidate.propose(
            policies_root(settings.home),
            task_type,
            body,
            parent=hashlib.sha256(policy_version.encode()).hexdigest(),
            window=window_record,
            parameters=parameters,
            publish=kafka,
            actor=actor,
            now=now,
        )
        publish = Notifying(kafka, settings, c.dir)
        c.publish_pending(publish)
        if c.state() != "proposed":
            return {"policy_id": c.policy_id, "state": c.state(), "new": False}
        name = c.write_evaluation({"proposal": proposal, **evaluation})
        if proposal["moves"]:
            c.transition("proposed", "evaluated", "passed", name, publish, actor=actor, now=now)
            if start_canary:
                c.transition("evaluated", "shadow", "canary_requested", name, publish, actor=actor, now=now)
                c.transition("shadow", "canary_5", "canary_requested", name, publish, actor=actor, now=now)
        else:
            reason = "no_threshold_passes" if proposal["chosen"] is None else "today_is_best"
            c.transition("proposed", "rejected", reason, name, publish, actor=actor, now=now)
        return {
            "policy_id": c.policy_id,
            "state": c.state(),
            "new": True,
            "threshold": threshold,
            "chosen": proposal["chosen"],
        }
    finally:
        kafka.close()
