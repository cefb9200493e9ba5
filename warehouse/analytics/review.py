"""The weekly review's reports: task grading (docs/sources.md#seed-004-2, docs/metrics.md §12), offload readiness
(docs/sources.md#seed-003, §13) and the rollout stage tracker (docs/sources.md#seed-004-7).

Pure rules first (`grade`, `readiness`, `evaluate_stage`: numbers in, verdicts out, tested as tables),
then the reports that feed them from the warehouse (`warehouse.queries.review`) and the policy. The
tracker recommends; it never edits the policy."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

from router.policy import Policy, RolloutLimits
from warehouse.analytics.metrics import iso
from warehouse.analytics.stats import ratio
from warehouse.queries import decisions
from warehouse.queries import review as review_queries
from warehouse.queries.common import QueryWindow
from warehouse.queries.decisions import INPUT_LENGTH_BUCKETS

VETO_ERROR_COST = 0.7  # docs/sources.md#seed-004-2: "错误代价是唯一否决项", decided before any score
DEFAULT_ERROR_COST = 0.5
OFFLOAD_SCORE, SHADOW_SCORE = 0.75, 0.5
MEMORY_SHARE = 0.4  # docs/sources.md#seed-003: peak <= 40 % of the smallest tier's memory
RESIDENT_SHARE = 0.25  # docs/sources.md#seed-003: resident (model loaded, idle) <= 25 % of it
TOKEN_SCREEN = 400  # docs/sources.md#seed-003: p50 of input + output tokens over 400 is screened out before any gate
DURATION_MS = 10_000  # docs/sources.md#seed-003: one inference <= 10 s
# docs/sources.md#seed-003: loss <= 3 %, >= 90 % of failures caught automatically
MISSED_LIMIT, AUTO_DETECTED_MIN = 0.03, 0.9
READY_SCORE = 12  # docs/sources.md#seed-003: weighted score >= 12 of 30


def _clip(x: float, lo: float = 0.0, hi: float = 1.0) -> float:
    return max(lo, min(hi, x))


# -- §12 task grading --------------------------------------------------------------------------------
def grade(
    input_p50: float | None,
    input_p95: float | None,
    daily_calls: float,
    determinism: float | None,
    error_cost: float | None,
) -> dict[str, Any]:
    """docs/metrics.md §12 for one task type: the error-cost veto first, then the renormalised weighted score."""
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
    token_budget_p50: float | None,
    privacy: str,
    has_validator: bool,
    error_cost: float | None,
    weak_network_share: float | None,
    iteration: str,
) -> dict[str, dict]:
    """The six factors of docs/sources.md#seed-003: each 0, 1 or 3 points with its weight (docs/metrics.md
    §13's table)."""
    error_cost = DEFAULT_ERROR_COST if error_cost is None else error_cost
    c, t, n = calls_per_session_day, token_budget_p50, weak_network_share
    return {
        "calls_per_session_day": {
            "value": c,
            "weight": 2,
            "points": 0 if c is None else _points(c, lambda v: v > 20, lambda v: v >= 2),
        },
        "token_budget_p50": {
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


def gates(
    *,
    memory_by_tier: dict[str, dict[str, float | None]],
    tier_memory_mb: dict[str, float],
    device_p95_ms: float | None,
    streamable: bool,
    missed_fallback_rate: float | None,
    auto_detected: float | None,
) -> dict[str, dict]:
    """The three hard gates of docs/sources.md#seed-003, each `pass` / `fail` / `unknown` (no data) with its
    values and limits.

    `memory_by_tier`: tier → {"peak": the max of the per-request peaks, "resident": the max resident memory
    with the model loaded and idle}; the gate reads the tier with the smallest memory that has data: peak
    <= 40 % and resident <= 25 % of its memory ("常驻 ≤ 25%、峰值 ≤ 40%"). A failing part fails the gate; a
    part without data leaves it unknown. Duration: p95 <= 10 s and the task streamable or asynchronous."""
    measured = {
        t: m
        for t, m in memory_by_tier.items()
        if t in tier_memory_mb and (m.get("peak") is not None or m.get("resident") is not None)
    }
    if measured:
        tier = min(measured, key=lambda t: (tier_memory_mb[t], t))
        peak, resident = measured[tier].get("peak"), measured[tier].get("resident")
        limit, resident_limit = MEMORY_SHARE * tier_memory_mb[tier], RESIDENT_SHARE * tier_memory_mb[tier]
        parts = [None if peak is None else peak <= limit, None if resident is None else resident <= resident_limit]
        memory = {
            "status": _status(parts),
            "tier": tier,
            "value": peak,
            "limit": limit,
            "resident": resident,
            "resident_limit": resident_limit,
        }
    else:
        memory = {
            "status": "unknown",
            "tier": None,
            "value": None,
            "limit": None,
            "resident": None,
            "resident_limit": None,
        }
    duration = {
        "status": _status([None if device_p95_ms is None else device_p95_ms <= DURATION_MS, streamable]),
        "value": device_p95_ms,
        "limit": DURATION_MS,
        "streamable": streamable,
    }
    if missed_fallback_rate is None or auto_detected is None:
        quality = "unknown"
    else:
        quality = "pass" if missed_fallback_rate <= MISSED_LIMIT and auto_detected >= AUTO_DETECTED_MIN else "fail"
    return {
        "gate_memory": memory,
        "gate_duration": duration,
        "gate_quality": {
            "status": quality,
            "missed_fallback_rate": missed_fallback_rate,
            "missed_limit": MISSED_LIMIT,
            "auto_detected": auto_detected,
            "auto_detected_min": AUTO_DETECTED_MIN,
        },
    }


def _status(parts: list[bool | None]) -> str:
    """A gate of several conditions: `fail` when one fails, else `unknown` when one has no data, else `pass`."""
    if any(p is False for p in parts):
        return "fail"
    return "unknown" if any(p is None for p in parts) else "pass"


def token_screen(token_budget_p50: float | None) -> dict[str, Any]:
    """The coarse screen of docs/sources.md#seed-003 ("落地建议" 1): a p50 of input + output tokens over 400 is
    `not_ready` before any gate or score is considered; without data the screen does not apply."""
    status = "unknown" if token_budget_p50 is None else "pass" if token_budget_p50 <= TOKEN_SCREEN else "fail"
    return {"status": status, "value": token_budget_p50, "limit": TOKEN_SCREEN}


def readiness(
    gate_results: dict[str, dict], factor_results: dict[str, dict], screen: dict[str, Any] | None = None
) -> dict[str, Any]:
    """`ready` when the token screen lets the task type through, every gate passes and the weighted score
    reaches 12 of 30; otherwise the reasons. A task type the screen stops is not scored (`score_003` null)."""
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
            conditions.append(_at_most(name, ratio(canary.get(num, 0), n), limit, n, limits.min_n))
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
    """The report's window; `days_observed` (§12: hours with live events / 24) where per-day figures use it."""
    out = {"start": iso(window.start), "end": iso(window.end), "days": days}
    if observed is not None:
        out["days_observed"] = observed
    return out


def grading_report(client, policy: Policy, window: QueryWindow, rows: dict | None = None) -> dict[str, Any]:
    """docs/metrics.md §12 per task type with live events in the window. `rows`: `task_review`'s, when the
    caller already read them (grading and readiness side by side read them once)."""
    days = (window.end - window.start).total_seconds() / 86400
    observed = review_queries.days_observed(client, window)
    rows = review_queries.task_review(client, window) if rows is None else rows
    out = {}
    for task_type in sorted(rows):
        r = rows[task_type]
        groups = r["determinism_groups"]
        determinism = r["determinism_agreeing"] / groups if groups else None
        daily = r["requests"] / observed  # a task type with live events: observed > 0
        g = grade(
            float(r["input_p50"]), float(r["input_p95"]), daily, determinism, policy.capability(task_type).error_cost
        )
        out[task_type] = {
            "input_tokens": {"p50": float(r["input_p50"]), "p95": float(r["input_p95"])},
            "daily_calls": daily,
            "determinism": determinism,
            "determinism_groups": groups,
            **g,
        }
    return {"window": _window(window, days, observed), "task_types": out}


def readiness_report(client, policy: Policy, window: QueryWindow, rows: dict | None = None) -> dict[str, Any]:
    """docs/metrics.md §13 per task type with live events in the window (`rows`: as in `grading_report`)."""
    days = (window.end - window.start).total_seconds() / 86400
    observed = review_queries.days_observed(client, window)
    rows = review_queries.task_review(client, window) if rows is None else rows
    memory = {t: float(v["memory_mb"]) for t, v in policy.device_tiers.items()}
    out = {}
    for task_type in sorted(rows):
        r = rows[task_type]
        cap = policy.capability(task_type)
        missed = ratio(int(r["missed_fallbacks"]), int(r["missed_fallback_labeled"]))
        caught, missed_n = int(r["caught_bad"]), int(r["missed_fallbacks"])
        g = gates(
            memory_by_tier={t: {"peak": v["max"], "resident": v["resident_max"]} for t, v in r["peak_by_tier"].items()},
            tier_memory_mb=memory,
            device_p95_ms=r["device_p95_ms"],
            streamable=cap.streamable,
            missed_fallback_rate=missed,
            auto_detected=ratio(caught, caught + missed_n),
        )
        budget = float(r["token_budget_p50"])
        f = factors(
            calls_per_session_day=r["requests"] / r["sessions"] / observed if r["sessions"] else None,
            token_budget_p50=budget,
            privacy=cap.privacy,
            has_validator=cap.validator is not None,
            error_cost=cap.error_cost,
            weak_network_share=float(r["weak_network_share"]),
            iteration=cap.iteration,
        )
        out[task_type] = readiness(g, f, token_screen(budget))
    return {"window": _window(window, days, observed), "task_types": out}


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


def rollout_report(client, policy: Policy, window: QueryWindow, task_types: list[str] | None = None) -> dict[str, Any]:
    """Every task type of the policy (and any seen in the window): its stage and the tracker's verdict."""
    days = (window.end - window.start).total_seconds() / 86400
    numbers = review_queries.rollout_numbers(client, window)
    names = sorted(set(task_types or ()) | set(policy.capabilities) | set(policy.rollout) | set(numbers))
    out = {}
    for task_type in names:
        stage = policy.stage(task_type)
        verdict = evaluate_stage(stage.stage, numbers.get(task_type) or {}, policy.rollout_limits)
        if stage.stage == "canary":
            verdict["percent"] = stage.percent
        out[task_type] = verdict
    return {"window": _window(window, days), "policy_version": policy.version, "task_types": out}


def divergence_counts(home) -> dict[str, dict[str, int]]:
    """Divergence samples kept in the request-text store under `home`, per task type and stage ({} without a
    store)."""
    from router.request_store import RequestTextStore, store_path

    path = store_path(home)
    if not path.exists():
        return {}
    with RequestTextStore(path) as store:
        counts = store.divergence_counts()
    found: dict[str, dict[str, int]] = {}
    for (task_type, stage), n in counts.items():
        found.setdefault(task_type, {})[stage] = n
    return found


def weekly_review(client, policy: Policy, window: QueryWindow, home) -> dict[str, Any]:
    """The weekly review over `window`, the one builder behind `routerscope report` and the tuning page: the
    device ledger and the all-cloud saving, grading, readiness and the two side by side, the rollout stage
    tracker and the divergence samples kept under `home`. The task rows are read once for both reports."""
    rows = review_queries.task_review(client, window)
    grading = grading_report(client, policy, window, rows)
    ready = readiness_report(client, policy, window, rows)
    return {
        "window": {"start": iso(window.start), "end": iso(window.end)},
        "ledger": review_queries.device_ledger(client, window),
        "cost": review_queries.all_cloud_cost(client, window),
        "grading": grading,
        "readiness": ready,
        "side_by_side": side_by_side(grading, ready),
        "rollout": rollout_report(client, policy, window),
        "tier_memory_mb": {t: v["memory_mb"] for t, v in policy.device_tiers.items()},
        "divergences": divergence_counts(home),
    }
