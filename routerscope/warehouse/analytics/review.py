"""The weekly review's reports: task grading (docs/sources.md#seed-004-2, docs/metrics.md §12), offload readiness
(docs/sources.md#seed-003, §13) and the rollout stage tracker (docs/sources.md#seed-004-7).

Pure rules first (`grade`, `readiness`, `evaluate_stage`: numbers in, verdicts out, tested as tables),
then the reports that feed them from the warehouse (`routerscope.warehouse.queries.review`) and the policy. The
tracker recommends; it never edits the policy."""

from __future__ import annotations

import math
from collections.abc import Mapping
from contextlib import nullcontext
from datetime import datetime, timedelta
from typing import Any

from routerscope.contract.policy import Policy, RolloutLimits
from routerscope.core.text import ci as _ci
from routerscope.core.text import pct as _pct
from routerscope.core.timeutil import UTC
from routerscope.router import answers
from routerscope.router.policy import load_yaml, read_policy_file
from routerscope.router.request_store import RequestTextStore, store_path
from routerscope.warehouse.analytics import metrics, ppi, rollback, stats
from routerscope.warehouse.analytics.metrics import iso
from routerscope.warehouse.analytics.stats import ratio
from routerscope.warehouse.queries import decisions
from routerscope.warehouse.queries import review as review_queries
from routerscope.warehouse.queries.decisions import INPUT_LENGTH_BUCKETS
from routerscope.warehouse.sql import QueryWindow

VETO_ERROR_COST = 0.7  # docs/sources.md#seed-004-2: "错误代价是唯一否决项", decided before any score
DEFAULT_ERROR_COST = 0.5
OFFLOAD_SCORE, SHADOW_SCORE = 0.75, 0.5
MEMORY_SHARE = 0.4  # docs/sources.md#seed-003: peak <= 40 % of the lowest target tier's available memory
RESIDENT_SHARE = 0.25  # docs/sources.md#seed-003: resident (model loaded, idle) <= 25 % of it
TOKEN_SCREEN = 400  # docs/sources.md#seed-003: a p90 of input + output tokens over 400 is screened out before any gate
DURATION_MS = 10_000  # docs/sources.md#seed-003: one inference <= 10 s
MIN_DEVICE_ATTEMPTS = 30  # docs/metrics.md §13: gate_duration needs at least this many device attempts
MIN_MEMORY_EVENTS = 30  # §13: gate_memory passes only on at least this many events with a peak on the tier
SHORT_ANSWER_TOKENS = 32  # §13: an answer capped at this many tokens arrives whole at once: nothing to stream
CENSORED_SHARE = 0.05  # §13: more timed-out attempts than this share and the p95 is not known
# docs/sources.md#seed-003: loss <= 3 %, >= 90 % of failures caught automatically
MISSED_LIMIT, AUTO_DETECTED_MIN = 0.03, 0.9
READY_SCORE = 12  # docs/sources.md#seed-003: weighted score >= 12 of 30
# docs/sources.md#seed-000 (criterion three: "multi-step tool orchestration no") and #seed-004-4 (long-chain
# planning stays in the cloud): task types the seeds keep off the device whatever the policy says.
KEPT_OFF_DEVICE = {"multi_step_tools": "docs/sources.md#seed-000: multi-step tool orchestration stays in the cloud"}


def _clip(x: float, lo: float = 0.0, hi: float = 1.0) -> float:
    return max(lo, min(hi, x))


# -- §12 task grading --------------------------------------------------------------------------------
def grade(
    input_p50: float | None,
    input_p95: float | None,
    daily_calls: float,
    determinism: float | None,
    error_cost: float | None,
    determinism_ci: list[float] | None = None,
) -> dict[str, Any]:
    """docs/metrics.md §12 for one task type: the error-cost veto first, then the renormalised weighted score.
    `tier_settled`: the tier is the same with the determinism at either end of `determinism_ci` (no interval —
    no re-run group — is read as [0, 1]: nothing is known about it); else a `note` says the tier rests on few
    re-run groups."""
    tier = _grade(input_p50, input_p95, daily_calls, determinism, error_cost)
    low, high = determinism_ci or (0.0, 1.0)
    ends = {_grade(input_p50, input_p95, daily_calls, d, error_cost)["tier"] for d in (low, high)}
    settled = ends == {tier["tier"]}
    return {**tier, "tier_settled": settled, **({} if settled else {"note": "few re-run groups"})}


def _grade(
    input_p50: float | None,
    input_p95: float | None,
    daily_calls: float,
    determinism: float | None,
    error_cost: float | None,
) -> dict[str, Any]:
    error_cost = DEFAULT_ERROR_COST if error_cost is None else error_cost
    long_tail = input_p50 is not None and input_p95 is not None and input_p95 > 4 * input_p50
    input_score = 0.0 if input_p95 is None else _clip((2048 - input_p95) / 1792) * (0.5 if long_tail else 1.0)
    frequency = _clip(math.log10(daily_calls) / 5) if daily_calls > 0 else 0.0
    scores = {"input_length": input_score, "determinism": determinism or 0.0, "frequency": frequency}
    score = round(0.4 * scores["input_length"] + 0.4 * scores["determinism"] + 0.2 * scores["frequency"], 3)
    if error_cost > VETO_ERROR_COST:
        tier, reason = "keep-cloud", "error_cost_veto"
    elif score >= OFFLOAD_SCORE:
        tier, reason = "offload", "score >= 0.75"
    elif score >= SHADOW_SCORE:
        tier, reason = "shadow", "0.5 <= score < 0.75"
    else:
        tier, reason = "keep-cloud", "score < 0.5"
    return {
        "long_tail": long_tail,
        "error_cost": error_cost,
        "scores": scores,
        "score": score,
        "tier": tier,
        "reason": reason,
    }


# -- §13 offload readiness ---------------------------------------------------------------------------
def _points(value, three, one) -> int:
    return 3 if three(value) else 1 if one(value) else 0


def factors(
    *,
    calls_per_session_day: float | None,
    token_budget_p90: float | None,
    privacy: str,
    has_validator: bool,
    error_cost: float | None,
    weak_network_share: float | None,
    iteration: str,
) -> dict[str, dict]:
    """The six factors of docs/sources.md#seed-003: each 0, 1 or 3 points with its weight (docs/metrics.md
    §13's table)."""
    error_cost = DEFAULT_ERROR_COST if error_cost is None else error_cost
    c, t, n = calls_per_session_day, token_budget_p90, weak_network_share
    return {
        "calls_per_session_day": {
            "value": c,
            "weight": 2,
            "points": 0 if c is None else _points(c, lambda v: v > 20, lambda v: v >= 2),
        },
        "token_budget_p90": {
            "value": t,
            "weight": 2,
            "points": 0 if t is None else _points(t, lambda v: v < 100, lambda v: v <= 400),
        },
        "privacy": {"value": privacy, "weight": 2, "points": {"strict": 3, "redactable": 1}.get(privacy, 0)},
        "error_cost": {
            "value": "validator" if has_validator else error_cost,
            "weight": 2,
            "points": 3 if has_validator else 1 if error_cost <= 0.3 else 0,
        },
        "network": {
            "value": n,
            "weight": 1,
            "points": 0 if n is None else _points(n, lambda v: v >= 0.30, lambda v: v >= 0.05),
        },
        "iteration": {"value": iteration, "weight": 1, "points": {"quarterly": 3, "monthly": 1}.get(iteration, 0)},
    }


def lowest_target_tier(device_tiers: Mapping[str, Mapping[str, Any]]) -> tuple[str, float] | None:
    """docs/metrics.md §13: the policy's lowest target tier — the declared tier with the smallest `memory_mb`
    among those not set `target: false` — and its `available_mb` (default `memory_mb`); None when none is
    declared."""
    targets = {t: v for t, v in device_tiers.items() if v.get("target", True) is not False}
    if not targets:
        return None
    tier = min(targets, key=lambda t: (float(targets[t]["memory_mb"]), t))
    available = targets[tier].get("available_mb")
    return tier, float(targets[tier]["memory_mb"] if available is None else available)


def gate_memory(
    memory_by_tier: Mapping[str, Mapping[str, Any]],
    device_tiers: Mapping[str, Mapping[str, Any]],
    min_n: int = MIN_MEMORY_EVENTS,
) -> dict[str, Any]:
    """docs/sources.md#seed-003 "最低目标机型可用内存 … 常驻 ≤ 25%、峰值 ≤ 40%", on the policy's lowest target
    tier whether or not it has data (a task type measured only on bigger devices says nothing about the
    smallest one): the peak (max of the per-request peaks, never a p95) <= 40 % and the max resident memory
    <= 25 % of its `available_mb`. A failing part fails; a part without data, or no data on that tier at all,
    is `unknown`. `n`: the events with a peak figure on that tier; a pass needs at least `min_n` of them (one
    event over a limit is a failure on its own: the max is over it)."""
    lowest = lowest_target_tier(device_tiers)
    if lowest is None:
        return {
            "status": "unknown",
            "tier": None,
            "available_mb": None,
            "value": None,
            "limit": None,
            "resident": None,
            "resident_limit": None,
            "n": 0,
            "note": "no device tier declared in the policy",
        }
    tier, available = lowest
    m = memory_by_tier.get(tier) or {}
    peak, resident = m.get("peak"), m.get("resident")
    limit, resident_limit = MEMORY_SHARE * available, RESIDENT_SHARE * available
    parts = [None if peak is None else peak <= limit, None if resident is None else resident <= resident_limit]
    n = int(m.get("n") or 0)
    status = _status(parts)
    if status == "pass" and n < min_n:  # within the limits on too few events: unknown, never a pass
        status = "unknown"
    out = {
        "status": status,
        "tier": tier,
        "available_mb": available,
        "value": peak,
        "limit": limit,
        "resident": resident,
        "resident_limit": resident_limit,
        "n": n,
    }
    if peak is None and resident is None:
        out["note"] = f"no memory figures from the {tier} tier"
    elif status == "unknown" and n < min_n:
        out["note"] = f"too few events with memory figures on {tier} ({n} < {min_n})"
    return out


def gate_duration(
    attempts: int,
    timed_out: int,
    timed_out_past_limit: int,
    p95_ms: float | None,
    streamable: bool,
    errors: int = 0,
) -> dict[str, Any]:
    """docs/sources.md#seed-003 "单次推理 ≤ 10s,且可流式或可异步", with timeouts as censored observations
    (docs/metrics.md §13). A timed-out attempt was cut at its deadline: its duration is only known to be at
    least the cut, so a p95 over a sample with many of them is a floor the router itself set. Over the device
    attempts (levels 0, 1):

    * fewer than 30: `unknown` ("too few device attempts");
    * more than 5 % timed out: the p95 is not known. `fail` when the attempts cut at or past 10 s alone are
      more than 5 % of all (then more than one in twenty took longer than 10 s: the p95 is over it), else
      `unknown` ("the device did not finish often enough to measure");
    * more than 5 % errored (`errors`): an error is a failure, not a duration (an attempt that failed in 0 ms
      says nothing about how long an answer takes, and `p95_ms` leaves errors out): `unknown` ("the device did
      not finish often enough"), unless the timeouts past 10 s fail it;
    * else the p95 of the attempts' latency (timeouts at their cut, errors left out) `<= 10000`.

    And the task type streamable or asynchronous; a failing part fails, an unknown one leaves it unknown."""
    note = ""
    if attempts < MIN_DEVICE_ATTEMPTS:
        timed = None
        note = f"too few device attempts ({attempts} < {MIN_DEVICE_ATTEMPTS})"
    elif timed_out > CENSORED_SHARE * attempts:
        if timed_out_past_limit > CENSORED_SHARE * attempts:
            timed = False
            note = f"{timed_out_past_limit} of {attempts} attempts cut at or past {DURATION_MS} ms"
        else:
            timed = None
            note = f"{timed_out} of {attempts} attempts timed out: the device did not finish often enough to measure"
    elif timed_out + errors > CENSORED_SHARE * attempts:
        timed = None
        note = f"{errors} of {attempts} attempts errored and {timed_out} timed out: too few finished to measure"
    else:
        timed = None if p95_ms is None else p95_ms <= DURATION_MS
    out = {
        "status": _status([timed, streamable]),
        "value": p95_ms if timed is not None else None,
        "limit": DURATION_MS,
        "n": attempts,
        "timed_out": timed_out,
        "errors": errors,
        "streamable": streamable,
    }
    if note:
        out["note"] = note
    return out


def gate_quality(
    missed_est: Mapping[str, Any],
    labeled: int,
    caught: int,
    missed: int,
    min_n: int,
    estimate: str = "missed_fallback_est",
    judge_warning: str | None = None,
) -> dict[str, Any]:
    """docs/sources.md#seed-003 (loss <= 3 %, >= 90 % of bad answers caught automatically) on evidence
    (docs/metrics.md §13): from the missed-fallback estimate named by `estimate` — §3d's `missed_fallback_ppi`
    where the judge is audited, else §3c's `missed_fallback_est` — and the Wilson interval of `auto_detected` =
    caught / (caught + missed). With fewer than `min_n` labeled device-served requests it is `unknown`; else
    `pass` when the estimate's interval ends at or below 3 % and auto_detected's starts at or above 0.9,
    `fail` when the estimate's starts above 3 % or auto_detected's ends below 0.9, `unknown` otherwise.
    `judge_warning`: what §3d says of the task type's judge (unaudited, or below 0.9 agreement), kept beside."""
    auto_ci = stats.wilson(caught, caught + missed)
    ci = missed_est.get("ci")
    if labeled < min_n:
        status = "unknown"
    elif (ci is not None and ci[0] > MISSED_LIMIT) or (auto_ci is not None and auto_ci[1] < AUTO_DETECTED_MIN):
        status = "fail"
    elif ci is not None and ci[1] <= MISSED_LIMIT and auto_ci is not None and auto_ci[0] >= AUTO_DETECTED_MIN:
        status = "pass"
    else:
        status = "unknown"
    out = {
        "status": status,
        "missed_fallback_rate": stats.ratio(missed, labeled),
        "estimate": estimate,  # the estimate the gate read (docs/metrics.md §3d: the _ppi one where it exists)
        estimate: dict(missed_est),
        "judge_warning": judge_warning,
        "missed_limit": MISSED_LIMIT,
        "n": labeled,
        "min_n": min_n,
        "auto_detected": stats.ratio(caught, caught + missed),
        "auto_detected_ci": auto_ci,
        "auto_detected_n": caught + missed,
        "auto_detected_min": AUTO_DETECTED_MIN,
    }
    if labeled < min_n:
        out["note"] = f"too few labels ({labeled} < {min_n})"
    return out


def gates(*, memory: dict, duration: dict, quality: dict) -> dict[str, dict]:
    """The three hard gates of docs/sources.md#seed-003, each `pass` / `fail` / `unknown` with the evidence it
    stood on (`gate_memory`, `gate_duration`, `gate_quality` above)."""
    return {"gate_memory": memory, "gate_duration": duration, "gate_quality": quality}


def _status(parts: list[bool | None]) -> str:
    """A gate of several conditions: `fail` when one fails, else `unknown` when one has no data, else `pass`."""
    if any(p is False for p in parts):
        return "fail"
    return "unknown" if any(p is None for p in parts) else "pass"


def token_screen(token_budget_p90: float | None, over_share: float | None = None) -> dict[str, Any]:
    """The coarse screen of docs/sources.md#seed-003 ("落地建议" 1): a **p90** of input + output tokens over 400
    is `not_ready` before any gate or score is considered (one request in ten beyond 400 tokens is not a
    short-context task; a median lets a heavy tail through); without data the screen does not apply.
    `over_share`: the share of requests over 400, shown beside it."""
    status = "unknown" if token_budget_p90 is None else "pass" if token_budget_p90 <= TOKEN_SCREEN else "fail"
    return {"status": status, "value": token_budget_p90, "limit": TOKEN_SCREEN, "over_share": over_share}


def evidence(g: dict[str, Any]) -> str:
    """What each readiness gate stood on: its n, its interval and why it could not judge."""
    m, d, q = g["gate_memory"], g["gate_duration"], g["gate_quality"]
    est = q.get(q.get("estimate") or "missed_fallback_est") or {}
    parts = [
        f"memory on {m.get('tier') or '—'} (n {m.get('n', 0)}){'; ' + m['note'] if m.get('note') else ''}",
        f"duration n {d.get('n', 0)}, {d.get('timed_out', 0)} timed out, {d.get('errors', 0)} errored"
        f"{'; ' + d['note'] if d.get('note') else ''}{'' if d.get('streamable', True) else '; not streamable'}",
        f"quality n {q.get('n', 0)}, {q.get('estimate') or 'missed_fallback_est'} {_pct(est.get('rate'))}"
        f"{_ci(est.get('ci'))}"
        + (f" (labeled {_pct(q['missed_fallback_rate'])})" if q.get("missed_fallback_rate") is not None else "")
        + (
            f" ⚠ coverage {_pct(est['coverage'])}"
            if est.get("coverage") is not None and est["coverage"] < stats.LOW_COVERAGE
            else ""
        )
        + (f" ⚠ {q['judge_warning']}" if q.get("judge_warning") else "")
        + ", auto-detected "
        f"{_pct(q.get('auto_detected'))}{_ci(q.get('auto_detected_ci'))}"
        f"{'; ' + q['note'] if q.get('note') else ''}",
    ]
    return " | ".join(parts)


def readiness(
    gate_results: dict[str, dict],
    factor_results: dict[str, dict],
    screen: dict[str, Any] | None = None,
    task_type: str | None = None,
) -> dict[str, Any]:
    """`ready` when the token screen lets the task type through, every gate passes and the weighted score
    reaches 12 of 30; otherwise the reasons. A task type the screen stops is not scored (`score_003` null).
    A task type the seeds keep off the device (`KEPT_OFF_DEVICE`) is never ready, whatever the policy says."""
    screen = screen or token_screen(None)
    if screen["status"] == "fail":
        return {
            "token_screen": screen,
            "gates": gate_results,
            "factors": factor_results,
            "score_003": None,
            "verdict": "not_ready",
            "reasons": ["token_screen"],
        }
    score = sum(f["points"] * f["weight"] for f in factor_results.values())
    reasons = [f"{name} {g['status']}" for name, g in gate_results.items() if g["status"] != "pass"]
    if score < READY_SCORE:
        reasons.append(f"score_003 {score} < {READY_SCORE}")
    if task_type in KEPT_OFF_DEVICE:
        reasons.append(f"kept_off_device ({KEPT_OFF_DEVICE[task_type]})")
    return {
        "token_screen": screen,
        "gates": gate_results,
        "factors": factor_results,
        "score_003": score,
        "verdict": "not_ready" if reasons else "ready",
        "reasons": reasons,
    }


# -- docs/sources.md#seed-004-7: the stage tracker --------------------------------------------------------------------
def _cond(name: str, value, limit, met: bool | None, n: int | None = None, note: str = "") -> dict[str, Any]:
    return {"condition": name, "value": value, "limit": limit, "met": met, "n": n, **({"note": note} if note else {})}


def _at_most(name: str, value: float | None, limit: float, n: int, min_n: int) -> dict[str, Any]:
    """A condition `value <= limit` that needs `min_n` cases before it can be met."""
    if n < min_n:
        return _cond(name, value, limit, False, n, "not enough sample")
    if value is None:  # cases enough, but no figure (an estimate without strata): nothing shows it is met
        return _cond(name, value, limit, False, n, "no estimate")
    return _cond(name, value, limit, value <= limit + 1e-12, n)


def evaluate_stage(stage: str, numbers: dict[str, Any], limits: RolloutLimits) -> dict[str, Any]:
    """The exit condition of `stage` with its numbers, and the recommendation: `rollback` (a rollback signal
    of docs/metrics.md §3b fires: back to the cloud, any stage), `advance` (every condition met), or `hold`.

    shadow → canary: agreement >= `limits.agreement` in every input-length bucket that has traffic, each
    with >= `min_n` compared; the device's error rate in the second half of the task's shadow traffic at
    most `error_rate_drift` above the first half, each half with >= `min_n` attempts.
    canary → full: the canary cohort's fallback, false-fallback and offload-failure rates within their
    limits (each denominator >= `min_n`), and its canned-answer (L4) share at most `l4_margin` above the
    cloud cohort's (both cohorts >= `min_n` requests)."""
    conditions: list[dict[str, Any]] = []
    target = {"shadow": "canary", "canary": "full"}.get(stage)
    if stage == "shadow":
        buckets = numbers.get("buckets") or {}
        for bucket in INPUT_LENGTH_BUCKETS:
            n, agreed = buckets.get(bucket, (0, 0))
            if not n:
                continue
            rate = agreed / n
            if n < limits.min_n:
                conditions.append(_cond(f"agreement {bucket}", rate, limits.agreement, False, n, "not enough sample"))
            else:
                conditions.append(_cond(f"agreement {bucket}", rate, limits.agreement, rate >= limits.agreement, n))
        if not conditions:
            conditions.append(_cond("agreement", None, limits.agreement, False, 0, "no shadow comparisons"))
        (n1, e1), (n2, e2) = numbers.get("errors") or [(0, 0), (0, 0)]
        r1, r2 = ratio(e1, n1), ratio(e2, n2)
        drift = None if r1 is None or r2 is None else r2 - r1
        conditions.append(
            _at_most("device error rate stable", drift, limits.error_rate_drift, min(n1, n2), limits.min_n)
        )
    elif stage == "canary":
        cohorts = numbers.get("cohorts") or {}
        canary, cloud = cohorts.get("canary") or {}, cohorts.get("cloud_only") or {}
        for name, num, den, limit in (
            ("fallback rate", "fallbacks", "device_entered", limits.fallback_rate),
            ("false fallback rate", "false_fallbacks", "false_fallback_labeled", limits.false_fallback_rate),
            ("offload failure rate", "offload_failures", "device_attempts", limits.offload_failure_rate),
        ):
            n = canary.get(den, 0)
            labeled_share = ratio(canary.get(num, 0), n)
            if num == "false_fallbacks" and canary.get("false_fallback_strata"):
                # labels are no random sample (docs/metrics.md §3c): judged on the estimate, the labeled share beside
                est = stats.post_stratified(canary["false_fallback_strata"])
                cond = _at_most(f"{name} (estimate)", est["rate"], limit, n, limits.min_n)
                cond.update(labeled_share=labeled_share, ci=est["ci"], coverage=est["coverage"])
                if est["coverage"] < stats.LOW_COVERAGE:
                    warn = f"labels cover strata holding {_pct(est['coverage'])} of the fallbacks"
                    cond["note"] = f"{cond['note']}; {warn}" if cond.get("note") else warn
                conditions.append(cond)
                continue
            conditions.append(_at_most(name, labeled_share, limit, n, limits.min_n))
        c_n, k_n = canary.get("requests", 0), cloud.get("requests", 0)
        c_l4, k_l4 = ratio(canary.get("l4", 0), c_n), ratio(cloud.get("l4", 0), k_n)
        margin = None if c_l4 is None or k_l4 is None else c_l4 - k_l4
        conditions.append(
            _at_most("canned answers vs cloud cohort", margin, limits.l4_margin, min(c_n, k_n), limits.min_n)
        )
    rollback = list(numbers.get("rollback") or [])
    if rollback and stage != "cloud_only":
        recommendation, to = "rollback", "cloud_only"
    elif target and conditions and all(c["met"] for c in conditions):
        recommendation, to = "advance", target
    else:
        recommendation, to = "hold", stage
    return {
        "stage": stage,
        "recommendation": recommendation,
        "to": to,
        "conditions": conditions,
        "rollback_signals": rollback,
    }


# -- the reports -------------------------------------------------------------------------------------
def review_window(client, days: float, end: datetime | None = None) -> QueryWindow:
    """The review window: `days` full UTC days ending at `end`, by default at the end of the newest live
    event's day (so a week that ended quietly is still reviewed); today's end on an empty warehouse."""
    if end is None:
        base = decisions.newest_event(client, live_only=True) or datetime.now(UTC)
        end = base.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    return QueryWindow(end - timedelta(days=days), end)


def _window(window: QueryWindow, days: float, observed: float | None = None) -> dict[str, Any]:
    """The report's window; `days_observed` (§12: the span of the live events, in days) where per-day
    figures use it."""
    out = {"start": iso(window.start), "end": iso(window.end), "days": days}
    if observed is not None:
        out["days_observed"] = observed
    return out


def grading_report(
    client, policy: Policy, window: QueryWindow, rows: dict | None = None, from_window: bool = False
) -> dict[str, Any]:
    """docs/metrics.md §12 per task type with live events in the window. `rows`: `task_review`'s, when the
    caller already read them (grading and readiness side by side read them once); `from_window`: over the
    review's materialized window (`weekly_review`)."""
    days = (window.end - window.start).total_seconds() / 86400
    observed = review_queries.days_observed(client, window, from_window)
    rows = _task_rows(client, window, from_window) if rows is None else rows
    out = {}
    for task_type in sorted(rows):
        r = rows[task_type]
        groups = r["determinism_groups"]
        determinism = r["determinism_agreeing"] / groups if groups else None
        determinism_ci = stats.wilson(r["determinism_agreeing"], groups)
        daily = r["requests"] / observed  # a task type with live events: observed > 0
        g = grade(
            float(r["input_p50"]),
            float(r["input_p95"]),
            daily,
            determinism,
            policy.capability(task_type).error_cost,
            determinism_ci,
        )
        out[task_type] = {
            "input_tokens": {"p50": float(r["input_p50"]), "p95": float(r["input_p95"])},
            "daily_calls": daily,
            "determinism": determinism,
            "determinism_groups": groups,
            "determinism_ci": determinism_ci,
            **g,
        }
    return {"window": _window(window, days, observed), "task_types": out}


def _task_rows(client, window: QueryWindow, from_window: bool = False) -> dict:
    return review_queries.task_review(client, window, DURATION_MS, TOKEN_SCREEN, from_window)


def streamable(cap, declared: bool | None) -> bool:
    """§13's `streamable`: what the policy file declares, else false for a task type whose answer is checked
    whole (a validator, a tool schema, a declared answer: it is never served cut, so it cannot stream) unless
    that answer is short (`max_output_tokens <= SHORT_ANSWER_TOKENS`: it arrives at once, nothing to stream,
    docs/review.md), and true otherwise."""
    if declared is not None:
        return declared
    return not cap.whole or 0 < cap.max_output_tokens <= SHORT_ANSWER_TOKENS


def declared_streamable(path) -> dict[str, bool]:
    """task type → the `streamable` its capability entry in the policy file at `path` sets explicitly (the
    parsed policy cannot tell an explicit `true` from the default); {} when the file cannot be read."""
    try:
        doc = load_yaml(read_policy_file(path), str(path))
    except Exception:  # noqa: BLE001 (the router refuses such a file on its own; here: nothing declared)
        return {}
    caps = doc.get("capabilities") if isinstance(doc, dict) else None
    return {
        str(t): c["streamable"]
        for t, c in (caps or {}).items()
        if isinstance(c, dict) and isinstance(c.get("streamable"), bool)
    }


def readiness_report(
    client,
    policy: Policy,
    window: QueryWindow,
    rows: dict | None = None,
    declared: Mapping[str, bool] | None = None,
    from_window: bool = False,
    audited: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """docs/metrics.md §13 per task type with live events in the window (`rows`: as in `grading_report`;
    `declared`: the `streamable` values the policy file sets explicitly, `declared_streamable`; `from_window`:
    over the review's materialized window, `weekly_review`; `audited`: §3d of the window, `ppi.ppi_estimates`'s,
    when already read)."""
    days = (window.end - window.start).total_seconds() / 86400
    observed = review_queries.days_observed(client, window, from_window)
    rows = _task_rows(client, window, from_window) if rows is None else rows
    declared = declared or {}
    if audited is None:
        audited = ppi.ppi_estimates(client, window.start, window.end, from_window)
    audited = audited["by_task_type"]  # §3d
    out = {}
    for task_type in sorted(rows):
        r = rows[task_type]
        cap = policy.capability(task_type)
        caught, missed_n = int(r["caught_bad"]), int(r["missed_fallbacks"])
        estimate, judge_warning = _estimate_name(audited.get(task_type))
        g = gates(
            memory=gate_memory(
                {
                    t: {"peak": v["max"], "resident": v["resident_max"], "n": v["n"]}
                    for t, v in r["peak_by_tier"].items()
                },
                policy.device_tiers,
            ),
            duration=gate_duration(
                int(r["device_attempts"]),
                int(r["device_timeouts"]),
                int(r["device_timeouts_past_limit"]),
                r["device_p95_ms"],
                streamable(cap, declared.get(task_type)),
                int(r.get("device_errors") or 0),
            ),
            quality=gate_quality(
                *_missed_estimate(audited.get(task_type), stats.post_stratified(r["missed_strata"])),
                int(r["missed_fallback_labeled"]),
                caught,
                missed_n,
                policy.rollout_limits.min_n,
                estimate,
                judge_warning,
            ),
        )
        budget = float(r["token_budget_p90"])
        f = factors(
            calls_per_session_day=r["requests"] / r["sessions"] / observed if r["sessions"] else None,
            token_budget_p90=budget,
            privacy=cap.privacy,
            has_validator=cap.validator is not None,
            error_cost=cap.error_cost,
            weak_network_share=float(r["weak_network_share"]),
            iteration=cap.iteration,
        )
        out[task_type] = readiness(g, f, token_screen(budget, float(r["token_budget_over_share"])), task_type)
        # the serve-time check of its answers (docs/router.md): `unchecked` when the policy declares nothing
        out[task_type]["answer_check"] = answers.declared(cap) or "unchecked"
        # §3d: how far the task type's judge agrees with people, said where its estimates are read
        found = audited.get(task_type) or ppi.block(None)
        out[task_type]["judge_agreement"] = found["judge_agreement"]
        out[task_type]["judge_warning"] = _estimate_name(audited.get(task_type))[1]
    return {"window": _window(window, days, observed), "task_types": out}


def _missed_estimate(block: Mapping[str, Any] | None, est: Mapping[str, Any]) -> tuple[Mapping[str, Any]]:
    """The missed-fallback estimate the quality gate reads: §3d's where it exists, else §3c's `est`."""
    return ((block or {}).get("missed_fallback_ppi") or est,)


def _estimate_name(block: Mapping[str, Any] | None) -> tuple[str, str | None]:
    """(the name of the estimate `_missed_estimate` gave, the §3d judge warning of the task type)."""
    block = block or {}
    name = "missed_fallback_ppi" if block.get("missed_fallback_ppi") else "missed_fallback_est"
    warning = block.get("judge_warning") if block else f"{ppi.UNAUDITED} (0 of {ppi.MIN_AUDITED} human verdicts)"
    return name, warning


def side_by_side(grading: dict[str, Any], ready: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The two seeds' verdicts per task type, and whether they disagree (offload/shadow vs not_ready, or
    keep-cloud vs ready)."""
    out = {}
    for task_type in sorted(set(grading["task_types"]) | set(ready["task_types"])):
        g, r = grading["task_types"].get(task_type), ready["task_types"].get(task_type)
        tier, verdict = (g or {}).get("tier"), (r or {}).get("verdict")
        disagree = (tier in ("offload", "shadow") and verdict == "not_ready") or (
            tier == "keep-cloud" and verdict == "ready"
        )
        out[task_type] = {
            "grading_tier": tier,
            "grading_reason": (g or {}).get("reason"),
            "readiness": verdict,
            "readiness_reasons": (r or {}).get("reasons", []),
            "disagree": disagree,
        }
    return out


def rollout_report(
    client, policy: Policy, window: QueryWindow, task_types: list[str] | None = None, from_window: bool = False
) -> dict[str, Any]:
    """Every task type of the policy (and any seen in the window): its stage and the tracker's verdict. The
    rollback recommendation is the window's (`routerscope.warehouse.analytics.rollback`, the reading On-call and the
    tuning
    page share), under `rollback` with its words."""
    days = (window.end - window.start).total_seconds() / 86400
    numbers = review_queries.rollout_numbers(client, window, from_window)
    rollbacks = rollback.rollback_states(client, window.start, window.end)
    names = sorted(
        set(task_types or ()) | set(policy.capabilities) | set(policy.rollout) | set(numbers) | set(rollbacks)
    )
    out = {}
    for task_type in names:
        stage = policy.stage(task_type)
        state = rollback.state_of(rollbacks, task_type)
        verdict = evaluate_stage(
            stage.stage, {**(numbers.get(task_type) or {}), "rollback": list(state.signals)}, policy.rollout_limits
        )
        verdict["rollback"] = state.public()
        if stage.stage == "canary":
            verdict["percent"] = stage.percent
        out[task_type] = verdict
    return {"window": _window(window, days), "policy_version": policy.version, "task_types": out}


def divergence_counts(home) -> dict[str, dict[str, int]]:
    """Divergence samples kept in the request-text store under `home`, per task type and stage ({} without a
    store)."""
    path = store_path(home)
    if not path.exists():
        return {}
    with RequestTextStore(path) as store:
        counts = store.divergence_counts()
    found: dict[str, dict[str, int]] = {}
    for (task_type, stage), n in counts.items():
        found.setdefault(task_type, {})[stage] = n
    return found


def week_and_review(
    client, policy: Policy, window: QueryWindow, home, declared: Mapping[str, bool] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The metric set (`metrics.compute`, its defaults) and the weekly review of the same window from one read of
    it: the tuning page shows both, and each read the week on its own before."""
    with decisions.materialized_window(client, window, wide=True):
        week, audited = metrics.compute_and_audit(client, window.start, window.end, materialized=True)
        review = weekly_review(client, policy, window, home, declared, materialized=True, audited=audited)
    return week, review


def weekly_review(
    client,
    policy: Policy,
    window: QueryWindow,
    home,
    declared: Mapping[str, bool] | None = None,
    materialized: bool = False,
    audited: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The weekly review over `window`, the one builder behind `routerscope report` and the tuning page: the
    device ledger and the all-cloud saving, grading, readiness and the two side by side, the rollout stage
    tracker and the divergence samples kept under `home`. The task rows are read once for both reports.
    `materialized`: the caller holds the window's wide materialization; `audited`: §3d of the window as
    `ppi.ppi_estimates` gives it, already read (`week_and_review`)."""
    # the week read once, not once per statement
    with nullcontext() if materialized else decisions.materialized_window(client, window, wide=True):
        rows = _task_rows(client, window, from_window=True)
        grading = grading_report(client, policy, window, rows, from_window=True)
        ready = readiness_report(client, policy, window, rows, declared, from_window=True, audited=audited)
        ledger = review_queries.device_ledger(client, window, from_window=True)
        cost = review_queries.all_cloud_cost(client, window, from_window=True)
        rollout = rollout_report(client, policy, window, from_window=True)
    return {
        "window": {"start": iso(window.start), "end": iso(window.end)},
        "ledger": ledger,
        "cost": cost,
        "grading": grading,
        "readiness": ready,
        "side_by_side": side_by_side(grading, ready),
        "rollout": rollout,
        "tier_memory_mb": {t: v["memory_mb"] for t, v in policy.device_tiers.items()},
        "divergences": divergence_counts(home),
    }
