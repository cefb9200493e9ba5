"""Propose and evaluate a candidate threshold for one task type (docs/loop.md#propose, #evaluate).

**Propose.** Over the thresholds within the trust region around today's (± `trust_region`, in steps of 0.01),
re-scored by the what-if (`routerscope.warehouse.analytics.whatif.sweep`), the lowest threshold (the most
offload) that passes every check:

* the missed-fallback estimate's upper bound meets the target (`quality_estimate`: today the population
  estimate of docs/metrics.md §3c; the one place to point at prediction-powered estimates, §3d);
* its label coverage ≥ 0.8;
* the requests the candidate moves to the device (a looser threshold serves the confidence band between the
  two) pass at a rate whose Wilson lower bound is at least 1 − target: the candidate never reaches into a
  confidence band that fails (our reading of "never inside a failing confidence bucket": the moved band is
  exactly the buckets the candidate newly serves). Unlabeled moved requests leave it unknown: not proposed;
* no alert rule of the task type would fire on the candidate's what-if (every per-task-type rule whose metric
  the what-if block carries: fallback rate, cloud calls, cost).

Every threshold's checks are kept, so `evaluation.json` shows why each was or was not chosen.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Mapping
from typing import Any

from routerscope.warehouse.analytics import whatif
from routerscope.warehouse.analytics.loop import evaluate
from routerscope.warehouse.queries import decisions as decision_queries
from routerscope.warehouse.queries import loop as loop_queries
from routerscope.warehouse.sql import QueryWindow

MIN_COVERAGE = 0.8
OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}


def quality_estimate(block: Mapping[str, Any]) -> dict:
    """The candidate's missed-fallback estimate {rate, ci, n_eff, coverage}: docs/metrics.md §3c's population
    estimate today. The loop reads quality through this function only."""
    return dict(block["missed_fallback_est"])


def grid(today: float, trust_region: float, step: float = 0.01) -> list[float]:
    """Thresholds within the trust region, on a 0.01 grid, inside [0, 1], today's included."""
    k = int(math.floor(trust_region / step + 1e-9))
    return sorted({round(min(1.0, max(0.0, today + i * step)), 4) for i in range(-k, k + 1)})


def checks(task: Mapping[str, Any], target: float, alert_rules: Iterable = (), task_type: str = "") -> dict:
    """Each check of one threshold's what-if: True, False, or None (unknown: counts as not passed)."""
    if "candidate" not in task:
        return {"data": False}
    block = task["candidate"]
    est = quality_estimate(block)
    ci = est.get("ci")
    out: dict[str, Any] = {
        "missed_fallback_upper": None if ci is None else ci[1] <= target,
        "coverage": None if est.get("coverage") is None else est["coverage"] >= MIN_COVERAGE,
    }
    to_device = task["moved"]["to_device"]
    if to_device["n"] == 0:
        out["moved_band"] = True
    else:
        out["moved_band"] = None if to_device["ci"] is None else to_device["ci"][0] >= 1 - target
    breaches = []
    for rule in alert_rules:
        if getattr(rule, "scope", "") != "per_task_type" or rule.metric not in block or rule.op not in OPS:
            continue
        value, limit = block[rule.metric], rule.limit_for(task_type)
        if value is not None and OPS[rule.op](value, limit):
            breaches.append(f"{rule.name}: {rule.metric} {value:.4g} {rule.op} {limit}")
    out["alert_limits"] = not breaches
    out["breaches"] = breaches
    return out


def passed(check: Mapping[str, Any]) -> bool:
    return all(v is True for k, v in check.items() if k != "breaches")


def choose(sweep: Mapping[float, Mapping[str, Any]], today: float, target: float, alert_rules=(), task_type="") -> dict:
    """The lowest threshold of `sweep` that passes every check (None when none does), with every threshold's
    checks."""
    table = {x: checks(task, target, alert_rules, task_type) for x, task in sorted(sweep.items())}
    eligible = [x for x, c in table.items() if passed(c)]
    chosen = min(eligible) if eligible else None
    return {
        "today": today,
        "target": target,
        "chosen": chosen,
        "moves": chosen is not None and not math.isclose(chosen, today),
        "checks": {f"{x:.2f}": c for x, c in table.items()},
    }


def propose(
    client, window: QueryWindow, task_type: str, today: float, *, target: float, trust_region: float, alert_rules=()
) -> dict:
    """`choose` over the what-if of every threshold in the trust region, on the window's own traffic."""
    values = grid(today, trust_region)
    return choose(whatif.sweep(client, window, task_type, values), today, target, alert_rules, task_type)


def _pairs(rows, y: str, x: str) -> list[tuple[float, float]]:
    return [(float(r[y]), float(r[x])) for r in rows if float(r[x]) > 0]


def evaluate_candidate(
    client,
    window: QueryWindow,
    task_type: str,
    candidate: float,
    *,
    planned_sessions: int,
    ledger: Iterable[dict] = (),
    resamples: int = 400,
    seed: int = 0,
) -> dict:
    """The offline evaluation of `evaluation.json`: per figure (offload = device-served over requests, fallback
    rate over device-entered, cloud calls per session) the candidate's value with its session-cluster bootstrap
    interval beside today's, the quality estimate, and the offload prediction at the canary's planned size,
    widened by the calibration ledger's factor."""
    with decision_queries.materialized_window(client, window, (task_type,)):
        per = loop_queries.sessions(client, task_type, candidate)
        quality = whatif.sweep(client, window, task_type, [candidate]).get(float(candidate), {})
    ledger_state = evaluate.ledger_factor(list(ledger))
    figures = {}
    for name, y, x in (("offload", "served", "requests"), ("fallback_rate", "fallbacks", "device_entered")):
        figures[name] = {
            side: evaluate.session_bootstrap(_pairs(per[side], y, x), resamples, seed)
            for side in ("current", "candidate")
        }
    figures["cloud_calls_per_session"] = {
        side: evaluate.session_bootstrap([(float(r["calls"]), 1.0) for r in per[side]], resamples, seed)
        for side in ("current", "candidate")
    }
    offload_pairs = _pairs(per["candidate"], "served", "requests")
    return {
        "task_type": task_type,
        "threshold": candidate,
        "sessions": len(per["candidate"]),
        "figures": figures,
        "quality": quality_estimate(quality["candidate"]) if "candidate" in quality else None,
        "offload_prediction": evaluate.prediction_record(
            offload_pairs, planned_sessions, figures["offload"]["candidate"], ledger_state["factor"]
        ),
        "calibration_ledger": ledger_state,
        "bootstrap": {"resamples": resamples, "seed": seed, "unit": "session"},
    }
