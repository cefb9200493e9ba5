"""The weekly review at a glance: one row per task type — its threshold now and the one recommended with the
band the move would cross, its false fallbacks (quality) as the population estimate (docs/metrics.md §3c) with
the labeled share beside it, the grading tier, the readiness verdict, the rollout stage and its recommendation,
and the rollback recommendation of the range in the words every page says it in
(`routerscope.warehouse.analytics.rollback`) — sorted by what needs action first, with the verdicts reconciled in words
where they disagree. Pure: it reads the metric set (`routerscope.warehouse.analytics.metrics.compute`) and the review
(`routerscope.dashboards.data.review`), and tests call it without Streamlit."""

from __future__ import annotations

from typing import Any

from routerscope.core.text import verdict
from routerscope.dashboards import words
from routerscope.warehouse.analytics.rollback import NONE_WORDS
from routerscope.warehouse.analytics.stats import LOW_COVERAGE

# Why a row needs attention, most urgent first (the row's `priority` is the index of its first reason).
PRIORITIES = (
    "rollback recommended",
    "threshold to move",
    "verdicts disagree",
    "stage ready to advance",
    "no action",
)
CLOUD_TIERS = ("keep-cloud",)  # grading tiers that keep a task type in the cloud (docs/metrics.md §12)
ON_DEVICE_STAGES = ("canary", "full")  # rollout stages that serve users from the device (docs/sources.md#seed-004-7)


def _pct(value) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def _ci(ci) -> str:
    return "" if not ci else f" [{_pct(ci[0])}, {_pct(ci[1])}]"


def _false_fallbacks(group: dict) -> str:
    """The quality fallbacks that were unnecessary (docs/metrics.md §3 by type): the §3c estimate with its interval
    and the labeled share beside it, `⚠ coverage 62%` below 0.8; the labeled share alone where the metric set has
    no estimate, and all judged fallbacks where it has no by-type figure (the note says so)."""
    by_type = group.get("false_fallback_by_type") or {}
    labeled_q = by_type.get("quality")
    if labeled_q is not None:
        rate, labeled, ci, note = labeled_q.get("rate"), int(labeled_q.get("labeled") or 0), labeled_q.get("ci"), ""
    else:
        rate, labeled, ci, note = (
            group.get("false_fallback_rate"),
            int(group.get("false_fallback_labeled") or 0),
            group.get("false_fallback_ci"),
            " (all types)",
        )
    if not labeled:
        return "— (none labeled)"
    est = by_type.get("quality_est") if labeled_q is not None else group.get("false_fallback_est")
    if not est or est.get("rate") is None:
        return f"{_pct(rate)}{_ci(ci)} of {labeled}{note}"
    warn = f" ⚠ coverage {_pct(est['coverage'])}" if est["coverage"] < LOW_COVERAGE else ""
    return f"est. {_pct(est['rate'])}{_ci(est['ci'])}{warn} · labeled {_pct(rate)} of {labeled}{note}"


def _threshold(calibration: dict | None) -> tuple[str, str, bool]:
    """('0.70', '0.70 → 0.80 (band [0.70, 0.80): n = 55, pass 33.0%)', whether a move is recommended)."""
    if not calibration:
        return "—", "no labeled attempts", False
    # the recommendation on §3c's estimate of what the threshold serves, where the metric set has it (docs/metrics.md)
    estimated = "recommended_threshold_est" in calibration
    now = calibration.get("current_threshold")
    to = calibration.get("recommended_threshold_est" if estimated else "recommended_threshold")
    current = "—" if now is None else f"{now:.2f}"
    if to is None:
        return current, "none qualifies (too few labels or no threshold meets the target)", False
    if now is not None and abs(to - now) < 1e-9:
        return current, f"keep {to:.2f}", False
    change = calibration.get("threshold_change_est" if estimated else "threshold_change") or {}
    band = change.get("band") or {}
    crossing = (
        f" (band [{band['low']:.2f}, {band['high']:.2f}): n = {band.get('n', 0)}, pass {_pct(band.get('pass_rate'))})"
        if band.get("low") is not None and band.get("high") is not None
        else ""
    )
    return current, f"{current} → {to:.2f}{crossing}", True


def _value_words(metric: str, value) -> str:
    return words.value(metric, value)


def move_check(task_type: str, whatif: dict | None, rules: list) -> tuple[bool, str]:
    """Whether a recommended threshold may be offered, and its what-if in words. A move whose what-if (the week's
    own traffic re-scored under it, `routerscope.warehouse.analytics.whatif`) breaches an alert limit of the task
    type is withheld, naming the limit: the page recommended short_reply 0.60 → 0.90 while the what-if put 0.90 at
    an 86.4 % fallback rate, above the task type's 50 % limit. `rules`: the alert rules the warehouse is judged
    with; a rule whose metric the what-if computes (a per task type rule on `fallback_rate`, …) is checked with
    the limit that applies to the task type, its minimum sample included."""
    if not whatif or "candidate" not in whatif:
        return False, "no what-if (no live traffic of this task type in the range): not offered"
    now, cand = whatif["current"], whatif["candidate"]
    said = (
        f"what-if: fallback rate {_value_words('fallback_rate', now.get('fallback_rate'))} → "
        f"{_value_words('fallback_rate', cand.get('fallback_rate'))} of {int(cand.get('device_entered') or 0):,} "
        "device-entered"
    )
    for rule in rules:
        if rule.scope != "per_task_type" or rule.metric not in cand:
            continue
        value = cand.get(rule.metric)
        n = cand.get(rule.denominator) if rule.denominator else None
        if rule.breaches(value, n if isinstance(n, int) else None, None, task_type):
            limit = words.limit(rule.metric, rule.limit_for(task_type))
            return False, (
                f"withheld: its {said.removeprefix('what-if: ')} breaches the alert limit "
                f"{words.metric_name(rule.metric)} {words.OPS.get(rule.op, rule.op)} {limit} "
                f"({words.rule_name(rule.name)}, `{rule.name}`)"
            )
    return True, said


def reconcile(grading: dict | None, readiness: dict | None, rollout: dict | None) -> str:
    """Where the three verdicts disagree, what it means and what to do, in words ('' when they agree)."""
    notes = []
    tier = (grading or {}).get("tier")
    verdict = (readiness or {}).get("verdict")
    stage = (rollout or {}).get("stage")
    if tier in CLOUD_TIERS and stage in ON_DEVICE_STAGES:
        why = words.reason((grading or {}).get("reason", ""))
        notes.append(
            f"grading keeps it in the cloud ({why}) while it serves users from the device at stage {stage}: "
            "roll it back to shadow, or re-grade it with evidence that the error cost is lower"
        )
    if verdict == "not_ready" and stage in ON_DEVICE_STAGES:
        failed = [
            g.removeprefix("gate_")
            for g, r in ((readiness or {}).get("gates") or {}).items()
            if r.get("status") == "fail"
        ]
        listed = ", ".join(failed[:-1]) + " and " + failed[-1] if len(failed) > 1 else "".join(failed)
        gates = f"the {listed} gate{'s' if len(failed) > 1 else ''}" if failed else "a gate"
        notes.append(f"readiness fails {gates} while at stage {stage}: fix the gate or step back")
    if tier in ("offload", "shadow") and verdict == "not_ready" and stage not in ON_DEVICE_STAGES:
        notes.append("grading would try it on the device but readiness stops it at the door: the failing gate decides")
    if tier in CLOUD_TIERS and verdict == "ready":
        notes.append("readiness passes but grading keeps it in the cloud: the error cost decides, keep it there")
    return "; ".join(notes)


def rows(
    metrics: dict, review: dict, whatifs: dict[str, dict] | None = None, rules: list | None = None
) -> list[dict[str, Any]]:
    """One row per task type with live traffic or a review entry, most urgent first. `review` holds the
    grading, readiness and rollout reports (`routerscope.warehouse.analytics.review`: each `{"task_types": {...}}`; the
    rollout's `rollback` is the range's rollback state, `routerscope.warehouse.analytics.rollback`). `whatifs`: task
    type → the what-if of its recommended threshold (`recommended_moves` names them); with them, a move comes
    with its what-if and one that breaches an alert limit of `rules` is withheld (`move_check`)."""
    by_task = metrics.get("by_task_type") or {}
    grading, readiness, rollout = (
        (review.get(report) or {}).get("task_types") or {} for report in ("grading", "readiness", "rollout")
    )
    names = sorted(set(by_task) | set(grading) | set(readiness) | set(rollout))
    out = []
    for task_type in names:
        group = by_task.get(task_type) or {}
        g, r, s = grading.get(task_type), readiness.get(task_type), rollout.get(task_type)
        current, move, to_move = _threshold((metrics.get("calibration") or {}).get(task_type))
        if to_move and whatifs is not None:
            offered, said = move_check(task_type, whatifs.get(task_type), rules or [])
            move, to_move = f"{move}; {said}", offered
        disagreement = reconcile(g, r, s)
        rollback = (s or {}).get("rollback") or {}
        recommendation = (s or {}).get("recommendation") or "—"
        reasons = [
            bool(rollback.get("recommended")),
            to_move,
            bool(disagreement),
            recommendation == "advance",
            True,
        ]
        out.append(
            {
                "task type": task_type,
                "needs": PRIORITIES[reasons.index(True)],
                "threshold": current,
                "recommended threshold": move,
                "false fallbacks (quality)": _false_fallbacks(group),
                "grading": (g or {}).get("tier") or "—",
                "readiness": verdict((r or {}).get("verdict")),
                "stage": (s or {}).get("stage") or "—",
                "recommendation": recommendation,
                "rollback": rollback.get("words") or NONE_WORDS,
                "where they disagree": disagreement,
                "priority": reasons.index(True),
            }
        )
    return sorted(out, key=lambda row: (row["priority"], row["task type"]))


def recommended_moves(metrics: dict) -> dict[str, float]:
    """Task type → the threshold the calibration recommends moving to (only where it is a move)."""
    out = {}
    for task_type, calibration in (metrics.get("calibration") or {}).items():
        estimated = "recommended_threshold_est" in (calibration or {})
        to = (calibration or {}).get("recommended_threshold_est" if estimated else "recommended_threshold")
        now = (calibration or {}).get("current_threshold")
        if to is not None and (now is None or abs(to - now) >= 1e-9):
            out[task_type] = float(to)
    return out
