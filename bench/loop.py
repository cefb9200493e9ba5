"""The closed loop's operating characteristics, simulated: prints JSON over `--runs` runs per scenario.

    .venv/bin/python bench/loop.py [--runs 300] [--task-type intent_classify] [--sessions-per-hour 150]
                                   [--label-share 1.0] [--seed 1]

Traffic is drawn from the demo's own distributions (`routerscope.router.sim.texts`: the task type's share
of the fleet's requests, its confidence buckets and its pass curve; a session's requests of the task type
are Poisson with the demo's mean, 20,000 requests over 400 sessions times the task type's share). A
request is served on the device when its first-try confidence reaches the arm's threshold (the confidence
gate alone: no latency gate, no breaker), a served answer is a missed fallback when it is not acceptable,
every fallback is one cloud call. Each canary session is assigned by the router's rule (the arm is drawn
with the stage's share), its sums go to `routerscope.warehouse.analytics.loop.sequential`, and a look every
`--look-sessions` sessions is judged by `routerscope.warehouse.analytics.loop.rules.decide` under the
default `LoopPolicy` (margin 1 point, 24 h and 200 candidate sessions per stage, 7 days at most).

Candidates are thresholds below today's chosen so that the expected missed-fallback rate (computed exactly
from the distributions) is worse by the scenario's amount. The offline prediction of the candidate's offload
comes from a simulated past window of control sessions, re-scored (the what-if) with a session-cluster
bootstrap, widened for the canary's planned size (`routerscope.warehouse.analytics.loop.evaluate`).

Scenarios: `harmful` (+3 points), `good` (+0.3), `at_margin` (+1: any promotion is a false one),
`inconclusive` (+1 point at a tenth of the traffic: 7 days cannot decide), `no_labels` (sessions but no
judged answer: no data), `srm` (a good candidate whose arm loses 30 % of its sessions in logging), and
`null` (the candidate is today's policy: the sequence's coverage of Δ = 0 over every look).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from routerscope.router.policy import default_policy  # noqa: E402
from routerscope.router.sim import texts  # noqa: E402
from routerscope.warehouse.analytics.loop import evaluate, rules  # noqa: E402
from routerscope.warehouse.analytics.loop.sequential import (  # noqa: E402
    ArmSums,
    MeanSums,
    RatioDifference,
    mean_difference,
    ratio_interval,
    rho_for,
    srm_sequential_p,
)

DEMO_REQUESTS_PER_SESSION = 20_000 / 400  # `routerscope demo`'s defaults: requests over the fleet's sessions
GRID = np.linspace(0.0, 1.0, 20001)


def pass_curve(task_type: str):
    """The task type's pass probability as a vectorized function (texts.pass_rate, checked on a grid)."""
    values = np.array([texts.pass_rate(task_type, c) for c in GRID])
    return lambda c: np.interp(c, GRID, values)


def draw_confidence(rng: np.random.Generator, task_type: str, n: int) -> np.ndarray:
    weights, _ = texts.CONFIDENCE[texts.TASKS[task_type][1]]
    k = rng.choice(4, size=n, p=np.array(weights) / sum(weights))
    lo, hi = np.array(texts.BUCKETS[:-1])[k], np.array(texts.BUCKETS[1:])[k]
    return rng.uniform(lo, hi)


def expected_missed(task_type: str, threshold: float) -> float:
    """E[not acceptable | served] at `threshold`, exact over the bucket-uniform confidence."""
    weights, _ = texts.CONFIDENCE[texts.TASKS[task_type][1]]
    density = np.zeros_like(GRID)
    for k, w in enumerate(weights):
        lo, hi = texts.BUCKETS[k], texts.BUCKETS[k + 1]
        density += np.where((GRID >= lo) & (GRID < hi) if hi < 1 else (GRID >= lo), w / (hi - lo), 0.0)
    fail = 1 - np.array([texts.pass_rate(task_type, c) for c in GRID])
    served = GRID >= threshold
    return float((density * fail * served).sum() / (density * served).sum())


def threshold_for(task_type: str, today: float, worse_by: float) -> float:
    """The threshold below today's whose expected missed-fallback rate is `worse_by` higher (bisection)."""
    target = expected_missed(task_type, today) + worse_by
    lo, hi = max(0.0, today - 0.5), today
    for _ in range(60):
        mid = (lo + hi) / 2
        if expected_missed(task_type, mid) > target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


class Traffic:
    def __init__(self, task_type: str, label_share: float):
        self.task_type, self.label_share = task_type, label_share
        self.mean = DEMO_REQUESTS_PER_SESSION * texts.TASKS[task_type][0]
        self.passes = pass_curve(task_type)

    def sessions(self, rng: np.random.Generator, n: int, threshold: np.ndarray) -> dict[str, np.ndarray]:
        """Per-session sums of n sessions, each under its own threshold."""
        k = rng.poisson(self.mean, size=n)
        owner = np.repeat(np.arange(n), k)
        c = draw_confidence(rng, self.task_type, int(k.sum()))
        served = c >= threshold[owner]
        bad = rng.random(c.size) >= self.passes(c)
        labeled = rng.random(c.size) < self.label_share
        judged = served & labeled

        def per(values):
            return np.bincount(owner, weights=values.astype(float), minlength=n)

        return {
            "requests": k.astype(float),
            "served": per(served),
            "judged": per(judged),
            "missed": per(judged & bad),
            "cloud": per(~served),
            "confidence": per(c) / np.maximum(k, 1),
            "has_requests": k > 0,
        }


def arm_sums(y: np.ndarray, x: np.ndarray, propensity: np.ndarray) -> ArmSums:
    """The same sums `ArmSums.add` keeps, for a batch at once."""
    w = 1.0 / propensity
    return ArmSums(
        sessions=int(y.size),
        w=float(w.sum()),
        wy=float((w * y).sum()),
        wx=float((w * x).sum()),
        w2yy=float((w * w * y * y).sum()),
        w2xy=float((w * w * x * y).sum()),
        w2xx=float((w * w * x * x).sum()),
        y=float(y.sum()),
        x=float(x.sum()),
    )


def mean_sums(values: np.ndarray) -> MeanSums:
    return MeanSums(int(values.size), float(values.sum()), float((values * values).sum()))


def offline_prediction(rng, traffic: Traffic, today: float, candidate: float, planned: int, window: int) -> dict:
    """The candidate's offload predicted from a past window of control traffic, re-scored (the what-if)."""
    s = traffic.sessions(rng, window, np.full(window, today))
    # the what-if: the same sessions' requests, re-scored at the candidate's threshold (a fresh draw of the
    # window under the candidate's gate; the confidences are the same distribution)
    again = traffic.sessions(rng, window, np.full(window, candidate))
    pairs = [(float(a), float(b)) for a, b in zip(again["served"], again["requests"], strict=True) if b > 0]
    del s
    return evaluate.prediction_record(pairs, planned, session_bootstrap(rng, pairs))


def session_bootstrap(rng, pairs, resamples: int = 200) -> dict:
    """`evaluate.session_bootstrap`'s method (sessions drawn with replacement, the ratio recomputed, the 2.5th
    and 97.5th percentiles and the standard error of the draws), vectorized: the pure-Python one took most of
    the bench's time."""
    ys, xs = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    drawn = rng.integers(len(pairs), size=(resamples, len(pairs)))
    draws = np.sort(ys[drawn].sum(axis=1) / xs[drawn].sum(axis=1))
    return {
        "estimate": float(ys.sum() / xs.sum()),
        "se": float(draws.std(ddof=1)),
        "ci": [float(draws[int(0.025 * (resamples - 1))]), float(draws[int(np.ceil(0.975 * (resamples - 1)))])],
        "n": len(pairs),
    }


def run_once(rng, traffic: Traffic, today: float, candidate: float, prediction, policy, sph: float, drop=0.0) -> dict:
    """One canary from its first session to its verdict (or the maximum duration)."""
    rho = rho_for(policy.planned_sessions, policy.alpha)
    missed, cloud, offload = RatioDifference(), RatioDifference(), ArmSums()
    balance = [MeanSums(), MeanSums()]
    expected_candidate, assignment_variance = 0.0, 0.0
    stage, stage_hours, total_hours, stage_candidates = 0, 0.0, 0.0, 0
    first_advance = None
    while True:
        share = rules.STAGES[stage]
        n = policy.look_sessions
        arm = rng.random(n) < share
        lost = arm & (rng.random(n) < drop)  # the srm scenario: the logging loses some candidate sessions
        s = traffic.sessions(rng, n, np.where(arm, candidate, today))
        logged = ~lost & s["has_requests"]
        expected_candidate += share * float((s["has_requests"]).sum())
        assignment_variance += share * (1 - share) * float((s["has_requests"]).sum())
        for a, target in ((0, "control"), (1, "candidate")):
            sel = logged & (arm == bool(a))
            p = np.full(int(sel.sum()), share if a else 1 - share)
            getattr(missed, target).merge(arm_sums(s["missed"][sel], s["judged"][sel], p))
            getattr(cloud, target).merge(arm_sums(s["cloud"][sel], np.ones(int(sel.sum())), p))
            balance[a].merge(mean_sums(s["confidence"][sel]))
        cand = logged & arm
        offload.merge(arm_sums(s["served"][cand], s["requests"][cand], np.ones(int(cand.sum()))))
        stage_hours += n / sph
        total_hours += n / sph
        stage_candidates += int(cand.sum())
        d = missed.interval(rho, policy.alpha, one_sided=True)  # as runner.build_look
        look = rules.Look(
            stage=stage,
            stage_hours=stage_hours,
            total_hours=total_hours,
            stage_candidate_sessions=stage_candidates,
            candidate_sessions=missed.candidate.sessions,
            control_sessions=missed.control.sessions,
            missed=d,
            guardrails={"cloud_calls_per_session": cloud.interval(rho, policy.alpha, one_sided=True)},
            offload=ratio_interval(offload, rho, policy.alpha),
            prediction=_tuple(evaluate.prediction_at(prediction, offload.sessions)),
            srm_p=srm_sequential_p(missed.candidate.sessions, expected_candidate, assignment_variance, rho),
            balance=mean_difference(balance[0], balance[1], rho, rules.CHECK_ALPHA),
        )
        verdict = rules.decide(look, policy)
        if verdict.action == "advance":
            first_advance = first_advance or missed.candidate.sessions
            stage, stage_hours, stage_candidates = stage + 1, 0.0, 0
            continue
        if verdict.action != "continue":
            return {
                "action": verdict.action,
                "reason": verdict.reason,
                "candidate_sessions": missed.candidate.sessions,
                "first_advance": first_advance,
                "hours": total_hours,
                "offload_measured": look.offload.estimate,
                "offload_predicted": prediction.get("estimate") if prediction else None,
                "offload_interval": look.prediction,
            }


def _tuple(interval):
    return tuple(interval) if interval else None


def null_coverage(rng, traffic: Traffic, today: float, policy, looks: int) -> tuple[bool, bool]:
    """Today's policy against itself over `looks` looks at 5 %, the one-sided bounds the rules read: did the upper
    bound ever fall below Δ = 0 (a promotion's error), did the lower bound ever rise above it (a rollback's)?"""
    rho = rho_for(policy.planned_sessions, policy.alpha)
    missed = RatioDifference()
    below = above = False
    for _ in range(looks):
        n = policy.look_sessions
        arm = rng.random(n) < rules.STAGES[0]
        s = traffic.sessions(rng, n, np.full(n, today))
        for a, target in ((0, "control"), (1, "candidate")):
            sel = s["has_requests"] & (arm == bool(a))
            p = np.full(int(sel.sum()), rules.STAGES[0] if a else 1 - rules.STAGES[0])
            getattr(missed, target).merge(arm_sums(s["missed"][sel], s["judged"][sel], p))
        d = missed.interval(rho, policy.alpha, one_sided=True)
        if d.known:
            below, above = below or d.high < 0, above or d.low > 0
    return below, above


def summary(results: list[dict], runs: int) -> dict:
    def share(action):
        return round(sum(r["action"] == action for r in results) / runs, 4)

    out = {a: share(a) for a in ("rollback", "promote", "await_approval", "halt", "hold")}
    out["promoted"] = round(out["promote"] + out["await_approval"], 4)
    reasons: dict[str, int] = {}
    for r in results:
        key = f"{r['action']}:{r['reason']}"
        reasons[key] = reasons.get(key, 0) + 1
    out["verdicts"] = dict(sorted(reasons.items()))
    # promotion over every run, a run never promoted counting as never (infinite): the median a user waits
    waits = sorted(
        r["candidate_sessions"] if r["action"] in ("promote", "await_approval") else float("inf") for r in results
    )
    if waits:
        middle = waits[(len(waits) - 1) // 2]
        out["median_candidate_sessions_to_promote_all_runs"] = None if middle == float("inf") else middle
    for action, key in (("rollback", "rollback"), ("promoted", "promote")):
        n = [
            r["candidate_sessions"]
            for r in results
            if r["action"] == action or (action == "promoted" and r["action"] in ("promote", "await_approval"))
        ]
        if n:
            out[f"median_candidate_sessions_to_{key}"] = statistics.median(n)
    # predicted vs measured offload at the verdict (the calibration ledger's entry): how far apart, how often the
    # 95 % interval (restated at the measured size) held the measurement
    pairs = [r for r in results if r.get("offload_measured") is not None and r.get("offload_interval")]
    if pairs:
        gaps = sorted(abs(r["offload_measured"] - r["offload_predicted"]) for r in pairs)
        out["offload_gap_median_pts"] = round(100 * statistics.median(gaps), 3)
        out["offload_gap_max_pts"] = round(100 * gaps[-1], 3)
        out["offload_interval_coverage"] = round(
            sum(r["offload_interval"][0] <= r["offload_measured"] <= r["offload_interval"][1] for r in pairs)
            / len(pairs),
            4,
        )
    firsts = [r["first_advance"] for r in results if r.get("first_advance")]
    if firsts:
        out["median_candidate_sessions_to_first_advance"] = statistics.median(firsts)
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--task-type", default="intent_classify", choices=sorted(texts.TASKS))
    parser.add_argument("--sessions-per-hour", type=float, default=150.0)
    parser.add_argument("--label-share", type=float, default=1.0)
    parser.add_argument("--window-sessions", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--minimums",
        choices=("ramp", "stage", "canary"),
        default="ramp",
        help="where the 24 h and the 200 candidate sessions are counted (rules.LoopPolicy.minimums; default ramp)",
    )
    parser.add_argument("--scenarios", default="harmful,good,at_margin,inconclusive,no_labels,srm,null")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    policy = rules.LoopPolicy(
        auto_promote=True, planned_sessions=int(args.sessions_per_hour * 24 * 3), minimums=args.minimums
    )
    today = default_policy().capabilities[args.task_type].threshold
    traffic = Traffic(args.task_type, args.label_share)
    grid = np.linspace(0, 1, 101)
    assert np.allclose(traffic.passes(grid), [texts.pass_rate(args.task_type, c) for c in grid], atol=1e-3)
    base = expected_missed(args.task_type, today)
    out: dict = {
        "runs": args.runs,
        "task_type": args.task_type,
        "today_threshold": today,
        "today_missed_fallback": round(base, 4),
        "requests_per_session": traffic.mean,
        "sessions_per_hour": args.sessions_per_hour,
        "label_share": args.label_share,
        "policy": {
            "margin": policy.margin,
            "stages": list(rules.STAGES),
            "min_stage_hours": policy.min_stage_hours,
            "min_stage_sessions": policy.min_stage_sessions,
            "max_hours": policy.max_hours,
            "look_sessions": policy.look_sessions,
            "alpha": policy.alpha,
            "planned_sessions": policy.planned_sessions,
            "auto_promote": policy.auto_promote,
            "minimums": policy.minimums,
        },
        "scenarios": {},
    }
    planned = int(policy.planned_sessions * 0.1)
    specs = {
        "harmful": (0.03, args.sessions_per_hour, args.label_share, 0.0),
        "good": (0.003, args.sessions_per_hour, args.label_share, 0.0),
        "at_margin": (0.01, args.sessions_per_hour, args.label_share, 0.0),
        "inconclusive": (0.01, args.sessions_per_hour / 10, args.label_share, 0.0),
        "no_labels": (0.003, args.sessions_per_hour, 0.0, 0.0),
        "srm": (0.003, args.sessions_per_hour, args.label_share, 0.3),
    }
    for name in args.scenarios.split(","):
        if name == "null":
            sides = [null_coverage(rng, traffic, today, policy, looks=200) for _ in range(args.runs)]
            out["scenarios"]["null"] = {
                "looks": 200,
                "upper_bound_ever_below_0": round(sum(b for b, _ in sides) / args.runs, 4),
                "lower_bound_ever_above_0": round(sum(a for _, a in sides) / args.runs, 4),
            }
            continue
        worse, sph, labels, drop = specs[name]
        candidate = threshold_for(args.task_type, today, worse)
        scenario_traffic = Traffic(args.task_type, labels)
        results = []
        for _ in range(args.runs):
            prediction = offline_prediction(rng, traffic, today, candidate, planned, args.window_sessions)
            results.append(run_once(rng, scenario_traffic, today, candidate, prediction, policy, sph, drop))
        out["scenarios"][name] = {
            "worse_by": worse,
            "candidate_threshold": round(candidate, 4),
            "candidate_missed_fallback": round(expected_missed(args.task_type, candidate), 4),
            "sessions_per_hour": sph,
            "label_share": labels,
            "lost_candidate_sessions": drop,
            **summary(results, args.runs),
        }
    out["seconds"] = round(time.perf_counter() - started, 1)
    return out


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
