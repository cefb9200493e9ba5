"""The weekly review at a glance: one row per task type — its threshold now and the one recommended with the
band the move would cross, its false fallbacks (quality) with their interval, the grading tier, the
readiness verdict, the rollout stage and its recommendation — sorted by what needs action first, with the
verdicts reconciled in words where they disagree. Pure: it reads the metric set (`warehouse.analytics.metrics.compute`)
and the review (`dashboards.data.review`), and tests call it without Streamlit."""

from __future__ import annotations

from typing import Any

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


def _false_fallbacks(group: dict) -> tuple[float | None, int, Any, str]:
    """(rate, labeled, ci, note) of the quality fallbacks that were unnecessary (docs/metrics.md §3 by type), or of
    all judged fallbacks where the by-type figure is not there (the note says so)."""
    by_type = (group.get("false_fallback_by_type") or {}).get("quality")
    if by_type is not None:
        return by_type.get("rate"), int(by_type.get("labeled") or 0), by_type.get("ci"), ""
    return (
        group.get("false_fallback_rate"),
        int(group.get("false_fallback_labeled") or 0),
        group.get("false_fallback_ci"),
        " (all types)",
    )


def _threshold(calibration: dict | None) -> tuple[str, str, bool]:
    """('0.70', '0.70 → 0.80 (band [0.70, 0.80): n = 55, pass 33.0%)', whether a move is recommended)."""
    if not calibration:
        return "—", "no labeled attempts", False
    now, to = calibration.get("current_threshold"), calibration.get("recommended_threshold")
    current = "—" if now is None else f"{now:.2f}"
    if to is None:
        return current, "none qualifies (too few labels or no threshold meets the target)", False
    if now is not None and abs(to - now) < 1e-9:
        return current, f"keep {to:.2f}", False
    change = calibration.get("threshold_change") or {}
    band = change.get("band") or {}
    crossing = (
        f" (band [{band['low']:.2f}, {band['high']:.2f}): n = {band.get('n', 0)}, pass {_pct(band.get('pass_rate'))})"
        if band.get("low") is not None and band.get("high") is not None
        else ""
    )
    return current, f"{current} → {to:.2f}{crossing}", True


def reconcile(grading: dict | None, readiness: dict | None, rollout: dict | None) -> str:
    """Where the three verdicts disagree, what it means and what to do, in words ('' when they agree)."""
    notes = []
    tier = (grading or {}).get("tier")
    verdict = (readiness or {}).get("verdict")
    stage = (rollout or {}).get("stage")
    if tier in CLOUD_TIERS and stage in ON_DEVICE_STAGES:
        why = (grading or {}).get("reason", "")
        notes.append(
            f"grading keeps it in the cloud ({why}) while it serves users from the device at stage {stage}: "
            "roll it back to shadow, or re-grade it with evidence that the error cost is lower"
        )
    if verdict == "not_ready" and stage in ON_DEVICE_STAGES:
        failed = [g for g, r in ((readiness or {}).get("gates") or {}).items() if r.get("status") == "fail"]
        notes.append(
            f"readiness fails {', '.join(failed) or 'a gate'} while at stage {stage}: fix the gate or step back"
        )
    if tier in ("offload", "shadow") and verdict == "not_ready" and stage not in ON_DEVICE_STAGES:
        notes.append("grading would try it on the device but readiness stops it at the door: the failing gate decides")
    if tier in CLOUD_TIERS and verdict == "ready":
        notes.append("readiness passes but grading keeps it in the cloud: the error cost decides, keep it there")
    if (rollout or {}).get("rollback_signals"):
        notes.append(f"rollback signals: {', '.join(rollout['rollback_signals'])}")
    return "; ".join(notes)


def rows(metrics: dict, review: dict, rollback_alerts: dict[str, list[str]] | None = None) -> list[dict[str, Any]]:
    """One row per task type with live traffic or a review entry, most urgent first. `review` holds the
    grading, readiness and rollout reports (`warehouse.analytics.review`: each `{"task_types": {...}}`);
    `rollback_alerts`: per task type, the rollback-recommendation alerts of the range (rule names)."""
    rollback_alerts = rollback_alerts or {}
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
        rate, labeled, ci, note = _false_fallbacks(group)
        disagreement = reconcile(g, r, s)
        alerted = sorted(set(rollback_alerts.get(task_type, [])))
        if alerted:
            disagreement = "; ".join(
                [
                    f"the alerts recommended a rollback in the range ({', '.join(alerted)})",
                    *filter(None, [disagreement]),
                ]
            )
        recommendation = (s or {}).get("recommendation") or "—"
        reasons = [
            recommendation == "rollback" or bool((s or {}).get("rollback_signals")) or bool(alerted),
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
                "false fallbacks (quality)": f"{_pct(rate)}{_ci(ci)} of {labeled}{note}"
                if labeled
                else "— (none labeled)",
                "grading": (g or {}).get("tier") or "—",
                "readiness": (r or {}).get("verdict") or "—",
                "stage": (s or {}).get("stage") or "—",
                "recommendation": recommendation,
                "where they disagree": disagreement,
                "priority": reasons.index(True),
            }
        )
    return sorted(out, key=lambda row: (row["priority"], row["task type"]))
