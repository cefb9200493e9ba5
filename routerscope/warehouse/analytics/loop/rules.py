"""The verdict of one canary look (docs/loop.md#decision-rules), a pure function of what the look measured.

In order, the first that applies:

1. **halt** (`srm`) when the sample-ratio check fails (p < 0.001): the arms are not what the assignment made
   them, so no difference between them can be trusted;
2. **halt** (`imbalance`) when the arms' first-try confidence (a pre-treatment value) differs beyond its
   confidence sequence at α = 0.001 (`CHECK_ALPHA`);
3. **roll back** (`harm`) when the lower bound of Δ missed fallbacks is above the margin, or (`guardrail:<name>`)
   the lower bound of a guardrail's Δ is above that guardrail's margin;
4. **halt** (`prediction_miss`) when the candidate's measured offload (its confidence sequence) lies wholly
   outside the offline prediction: the evaluator or the logging is wrong;
5. **advance** (`inside_margin`) when the upper bound of Δ missed fallbacks is below the margin, the stage has
   seen at least `min_stage_sessions` candidate sessions and the canary has run `min_stage_hours` (where each is
   counted: `LoopPolicy.minimums`), and the measured offload lies
   inside the prediction; from the last canary stage to `full` only under `auto_promote`, else
   **await approval**;
6. **hold** (`inconclusive`, or `no_data` when the candidate arm never saw a session) at the maximum duration;
7. else **continue**.

Nothing promotes without a known interval: an unknown bound (no data) never satisfies a rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from routerscope.warehouse.analytics.loop.sequential import SRM_P, Interval

CHECK_ALPHA = 0.001  # the balance check's sequence: a halt needs the evidence a sample-ratio halt needs
# A difference of mean confidence smaller than this is rounding, not imbalance: identical confidences in both arms
# gave a zero-width interval that missed 0 by 4e-14 and halted a sound canary.
BALANCE_TOLERANCE = 1e-9

STAGES = (0.05, 0.10, 0.25)  # the canary's shares, in order; then `full`


@dataclass(frozen=True)
class LoopPolicy:
    """A task type's loop settings (docs/loop.md#settings)."""

    margin: float = 0.01  # the missed-fallback harm a candidate may cost, as a share (1 point)
    guardrails: dict[str, float] = field(
        default_factory=lambda: {"timeouts": 0.01, "canned": 0.005, "cloud_calls_per_session": 0.25}
    )
    min_stage_hours: float = 24.0
    min_stage_sessions: int = 200
    max_hours: float = 7 * 24.0
    auto_promote: bool = False
    alpha: float = 0.05
    planned_sessions: int = 4000  # t* of the confidence sequences: the canary's planned size (both arms)
    trust_region: float = 0.10  # the largest weekly move of a threshold
    look_sessions: int = 100  # a look every this many sessions, or every hour
    # where the 24 h and the 200 candidate sessions are counted (docs/loop.md#decision-rules): "ramp" (the day since
    # the canary started, the sessions in each stage: a full day seen once, every stage watched at its load),
    # "stage" (both in each stage anew) or "canary" (both since the canary started)
    minimums: str = "ramp"


@dataclass
class Look:
    """What a look measured (each field says what it stands on)."""

    stage: int  # index into STAGES
    stage_hours: float
    total_hours: float
    stage_candidate_sessions: int
    candidate_sessions: int
    control_sessions: int
    missed: Interval  # Δ missed-fallback rate, candidate − control
    guardrails: dict[str, Interval]
    offload: Interval  # the candidate arm's measured offload
    prediction: tuple[float, float] | None  # the offline prediction's interval at the canary's size
    srm_p: float | None
    balance: Interval  # Δ mean first-try confidence


@dataclass(frozen=True)
class Verdict:
    action: str  # continue | rollback | advance | await_approval | promote | halt | hold
    reason: str

    def to_dict(self) -> dict:
        return {"action": self.action, "reason": self.reason}


def decide(look: Look, policy: LoopPolicy) -> Verdict:
    """The verdict of one look (module docstring)."""
    if look.srm_p is not None and look.srm_p < SRM_P:
        return Verdict("halt", "srm")
    if look.balance.known and (
        look.balance.low > BALANCE_TOLERANCE or look.balance.high < -BALANCE_TOLERANCE  # type: ignore[operator]
    ):
        return Verdict("halt", "imbalance")
    if look.missed.known and look.missed.low > policy.margin:  # type: ignore[operator]
        return Verdict("rollback", "harm")
    for name, interval in sorted(look.guardrails.items()):
        limit = policy.guardrails.get(name)
        if limit is not None and interval.known and interval.low > limit:  # type: ignore[operator]
            return Verdict("rollback", f"guardrail:{name}")
    prediction = look.prediction
    if prediction is not None and look.offload.known:
        low, high = prediction
        if look.offload.high < low or look.offload.low > high:  # type: ignore[operator]
            return Verdict("halt", "prediction_miss")
    offload_inside = (
        prediction is not None
        and look.offload.estimate is not None
        and prediction[0] <= look.offload.estimate <= prediction[1]
    )
    if (
        look.missed.known
        and look.missed.high < policy.margin  # type: ignore[operator]
        and (look.stage_hours if policy.minimums == "stage" else look.total_hours) >= policy.min_stage_hours
        and (look.candidate_sessions if policy.minimums == "canary" else look.stage_candidate_sessions)
        >= policy.min_stage_sessions
        and offload_inside
    ):
        if look.stage + 1 < len(STAGES):
            return Verdict("advance", "inside_margin")
        return Verdict("promote" if policy.auto_promote else "await_approval", "inside_margin")
    if look.total_hours >= policy.max_hours:
        return Verdict("hold", "no_data" if look.candidate_sessions == 0 else "inconclusive")
    return Verdict("continue", "no_data" if look.candidate_sessions == 0 else "collecting")
