"""`routerscope report grading|readiness|rollout`: the weekly review's reports (METRICS.md §12, §13 and
the stage tracker of seed 004 §7), as JSON (the contract) or readable tables.

The routing policy read is the router's own (`ROUTERSCOPE_POLICY`, else the default policy): the review
judges task types against the capability matrix, error costs, device tiers and stages actually in force."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from routerscope.core.settings import Settings
from routerscope.core.text import num as _num
from routerscope.core.text import pct as _pct

KINDS = ("grading", "readiness", "rollout")


def build(kind: str, settings: Settings, days: float = 7.0, end: datetime | None = None) -> dict[str, Any]:
    """The report of `kind` over the review window (`days` full days ending at `end`, by default at the
    end of the newest live event's day): one part of the weekly review the tuning page shows
    (`warehouse.analytics.review.weekly_review`)."""
    from router.policy import PolicyStore
    from warehouse.analytics import review
    from warehouse.client import open_warehouse

    policy = PolicyStore().current()
    with open_warehouse(settings, purpose=f"report {kind}", migrated=True) as client:
        week = review.weekly_review(client, policy, review.review_window(client, days, end), settings.home)
    if kind == "grading":
        return week["grading"]
    if kind == "readiness":
        return {**week["readiness"], "beside_grading": week["side_by_side"]}
    return {**week["rollout"], "divergence_samples": week["divergences"]}


def render(kind: str, report: dict[str, Any]) -> str:
    w = report["window"]
    observed = (
        f"; live events in {24 * w['days_observed']:g} hours: per-day figures over {w['days_observed']:.3g} days"
        if w.get("days_observed") is not None
        else ""
    )
    lines = [
        f"review window {w['start']} → {w['end']} ({w['days']:g} day{'' if w['days'] == 1 else 's'}, "
        f"live events{observed})"
    ]
    rows = report["task_types"]
    if not rows:
        return "\n".join(lines + ["  no task types with live events in the window"])
    if kind == "grading":
        lines.append(
            f"  {'task type':<18} {'input p50/p95':>14} {'tail':>4} {'calls/day':>10} {'determ.':>8} "
            f"{'err cost':>8} {'score':>6}  tier (reason)"
        )
        for t, g in rows.items():
            lines.append(
                f"  {t:<18} {_num(g['input_tokens']['p50'], 0):>6}/{_num(g['input_tokens']['p95'], 0):<7} "
                f"{'yes' if g['long_tail'] else 'no':>4} {_num(g['daily_calls'], 1):>10} {_pct(g['determinism']):>8} "
                f"{g['error_cost']:>8.2f} {g['score']:>6.3f}  {g['tier']} ({g['reason']})"
            )
        lines.append("  the error-cost veto (error_cost > 0.7) is decided before any score (seed 004 §2)")
    elif kind == "readiness":
        beside = report.get("beside_grading") or {}
        lines.append(
            f"  {'task type':<18} {'memory':>8} {'duration':>9} {'quality':>8} {'score':>6}  verdict / grading tier"
        )
        for t, r in rows.items():
            g = r["gates"]
            side = beside.get(t) or {}
            flag = "  ← the seeds disagree" if side.get("disagree") else ""
            score = "  —" if r["score_003"] is None else f"{r['score_003']:>3}"
            lines.append(
                f"  {t:<18} {g['gate_memory']['status']:>8} {g['gate_duration']['status']:>9} "
                f"{g['gate_quality']['status']:>8} {score}/30  {r['verdict']} / "
                f"{side.get('grading_tier') or '—'}{flag}"
            )
            if r["reasons"]:
                screen = r.get("token_screen") or {}
                named = [
                    f"token_screen (p50 {screen['value']:g} > {screen['limit']} tokens)"
                    if why == "token_screen"
                    else why
                    for why in r["reasons"]
                ]
                lines.append(f"  {'':<18}   because: {', '.join(named)}")
        lines.append(
            "  seed 003: first the token screen (p50 input + output <= 400 tokens, else not scored); gates: peak "
            "memory <= 40 % and resident <= 25 % of the smallest tier, device p95 <= 10 s and streamable or "
            "asynchronous, missed <= 3 % with >= 90 % of bad answers caught; then a score >= 12 of 30"
        )
    else:
        samples = report.get("divergence_samples") or {}
        for t, r in rows.items():
            stage = r["stage"] + (f" {r['percent']:g}% of sessions" if r.get("percent") else "")
            move = {
                "advance": f"ADVANCE to {r['to']}",
                "rollback": f"ROLL BACK to {r['to']} ({', '.join(r['rollback_signals'])})",
                "hold": "hold",
            }[r["recommendation"]]
            kept = sum((samples.get(t) or {}).values())
            lines.append(f"  {t:<18} {stage:<26} → {move}" + (f"   [{kept} divergence samples]" if kept else ""))
            for c in r["conditions"]:
                value = "—" if c["value"] is None else f"{c['value']:.3f}"
                note = f" ({c['note']})" if c.get("note") else ""
                lines.append(
                    f"      {'ok ' if c['met'] else 'NO '} {c['condition']}: {value} vs {c['limit']} (n={c['n']}){note}"
                )
        lines.append(
            "  the tracker recommends; it does not edit the policy (the cloud stays the fallback in every stage)"
        )
    return "\n".join(lines)
