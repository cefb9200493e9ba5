"""What the loop page and `routerscope loop status` show of a candidate, from its directory alone
(docs/loop.md#what-a-user-sees): state, candidate beside today's threshold, predicted vs measured offload with
intervals, the sequence's band over the candidate sessions against the margin, sessions to the next decision,
and the calibration ledger."""

from __future__ import annotations

import math
from pathlib import Path

from routerscope.warehouse.analytics.loop import evaluate, lifecycle
from routerscope.warehouse.analytics.loop.evidence import Candidate, candidates


def bands(c: Candidate) -> list[dict]:
    """One row per look: candidate sessions, Δ missed fallbacks and its interval, the margin, the verdict."""
    rows = []
    for look in c.looks():
        m = look["measured"]["missed_fallback_delta"]
        ci = m.get("ci") or [None, None]
        rows.append(
            {
                "candidate_sessions": look["sums"]["missed"]["candidate"]["sessions"],
                "estimate": m.get("estimate"),
                "low": ci[0],
                "high": ci[1],
                "margin": look["parameters"]["margin"],
                "verdict": look["verdict"]["action"],
            }
        )
    return rows


def task_view(c: Candidate) -> dict:
    looks = c.looks()
    last = looks[-1] if looks else None
    evaluation = c.evaluation() or {}
    prediction = evaluation.get("offload_prediction") or {}
    measured = last["measured"]["offload"] if last else None
    band = bands(c)
    to_next = None
    if last and band and band[-1]["low"] is not None:
        row = band[-1]
        half = (row["high"] - row["low"]) / 2
        gap = abs(row["margin"] - row["estimate"])
        total = last["sums"]["missed"]["candidate"]["sessions"] + last["sums"]["missed"]["control"]["sessions"]
        if gap > 0 and half > gap:
            to_next = max(0, math.ceil(total * (half / gap) ** 2) - total)
    candidate = c.candidate()
    return {
        "task_type": c.task_type,
        "policy_id": c.policy_id,
        "state": c.state(),
        "live": c.state() in lifecycle.LIVE,
        "threshold": candidate.get("threshold"),
        "today_threshold": candidate.get("parent_threshold"),
        "predicted_offload": prediction.get("estimate"),
        "predicted_interval": evaluate.prediction_at(prediction, measured["n"])
        if prediction and measured
        else prediction.get("interval"),
        "measured_offload": measured.get("estimate") if measured else None,
        "measured_interval": measured.get("ci") if measured else None,
        "bands": band,
        "sessions_to_next_decision": to_next,
        "last_verdict": last["verdict"] if last else None,
    }


def ledger(root: Path, task_type: str) -> list[dict]:
    """The calibration ledger of a task type, derived from its candidates: each canary that ended (any state
    past its looks) with its prediction at the size it was measured at, beside the measurement."""
    out = []
    for c in candidates(root, task_type):
        looks = c.look_files()
        if not looks or c.state() in lifecycle.CANARY:
            continue
        v = task_view(c)
        if v["predicted_offload"] is None or v["measured_offload"] is None or not v["predicted_interval"]:
            continue
        low, high = v["predicted_interval"]
        out.append(
            {
                "policy_id": c.policy_id,
                "state": v["state"],
                "predicted": v["predicted_offload"],
                "interval": [low, high],
                "measured": v["measured_offload"],
                "covered": low <= v["measured_offload"] <= high,
            }
        )
    return out
