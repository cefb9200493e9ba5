"""Readable terminal renderings of command results, all of them here: the metric set (`routerscope metrics`),
the weekly review's reports (`routerscope report`) and the what-if (`routerscope whatif`). The `--json` forms
are the contract; numbers read as `routerscope.core.text` writes them."""

from __future__ import annotations

from typing import Any

from routerscope.core.text import ci as _ci_pct
from routerscope.core.text import num as _num_grouped
from routerscope.core.text import pct as _pct
from routerscope.core.text import verdict
from routerscope.warehouse.analytics import review as _review
from routerscope.warehouse.analytics import whatif as _whatif


def _num(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _ci(ci: list[float] | None) -> str:
    """The interval to the value's own precision, as the pages write it: `0.3% [0.1%, 0.9%]` (it read
    `0.3% [0–0%]`, rounded to whole percents beside a value to a tenth)."""
    return _ci_pct(ci)


def _estimate(g: dict[str, Any], key: str) -> str:
    """A §3c estimate: `31.5% [29.4%, 33.7%] n_eff 1,204, coverage 100%` (the quality one sits in
    `false_fallback_by_type`); `(low)` after a coverage under 0.8."""
    est = g["false_fallback_by_type"].get(key) if key == "quality_est" else g.get(key)
    if not est or est["rate"] is None:
        return _pct(None)
    low = " (low)" if est["coverage"] < _whatif.LOW_ESTIMATE_COVERAGE else ""
    return f"{_pct(est['rate'])}{_ci(est['ci'])} n_eff {_num(est['n_eff'], 0)}, coverage {_pct(est['coverage'])}{low}"


def _ppi(g: dict[str, Any], key: str) -> str:
    """A §3d estimate: `30.0% [17.7%, 42.3%] judged 150, human 60`; `—` (with why) when the judge is not audited."""
    est = g.get(key)
    if not est:
        return f"{_pct(None)} ({g.get('judge_warning') or 'nothing judged'})"
    return f"{_pct(est['rate'])}{_ci(est['ci'])} judged {est['n_judged']:,}, human {est['n_human']:,}"


def _judge(g: dict[str, Any]) -> str:
    """§3d's audit: `80.0% [68.2%, 88.2%] of 60, accepts 75.0% of bad, rejects 0.0% of good ⚠ …`."""
    a = g.get("judge_agreement") or {}
    if not a.get("n_human"):
        return f"{_pct(None)} ({g.get('judge_warning') or 'no human verdicts'})"
    warn = f" ⚠ {g['judge_warning']}" if g.get("judge_warning") else ""
    return (
        f"{_pct(a['agreement'])}{_ci(a['ci'])} of {a['n_human']}, accepts {_pct(a['accept_bad'])} of bad, "
        f"rejects {_pct(a['reject_good'])} of good{warn}"
    )


ROWS = (
    ("requests", lambda g: str(g["requests"])),
    ("entered device", lambda g: str(g["device_entered"])),
    ("sessions", lambda g: str(g["sessions"])),
    ("fallback rate (of entered)", lambda g: _pct(g["fallback_rate"])),
    (
        "  quality / timeout / error",
        lambda g: " / ".join(
            _pct(g[k]) for k in ("quality_fallback_rate", "timeout_fallback_rate", "error_fallback_rate")
        ),
    ),
    ("naive fallback rate (wrong)", lambda g: _pct(g["naive_fallback_rate"])),
    ("capability rejects", lambda g: _pct(g["capability_reject_rate"])),
    ("device bypass", lambda g: _pct(g["device_bypass_rate"])),
    (
        "false fallbacks",
        lambda g: f"{_pct(g['false_fallback_rate'])}{_ci(g['false_fallback_ci'])} of {g['false_fallback_labeled']}",
    ),
    # docs/sources.md#seed-000: never mixed — quality (the threshold) and timeout (latency) apart
    *(
        (
            f"  {kind} (labeled)",
            lambda g, kind=kind: (
                f"{_pct(g['false_fallback_by_type'][kind]['rate'])}{_ci(g['false_fallback_by_type'][kind]['ci'])} "
                f"of {g['false_fallback_by_type'][kind]['labeled']}"
            ),
        )
        for kind in ("quality", "timeout")
    ),
    (
        "missed fallbacks",
        lambda g: f"{_pct(g['missed_fallback_rate'])}{_ci(g['missed_fallback_ci'])} of {g['missed_fallback_labeled']}",
    ),
    # docs/metrics.md §3c: what holds for the whole population, post-stratified, with how much of it the labels cover
    *(
        (f"{name}, population est.", lambda g, key=key: _estimate(g, key))
        for name, key in (
            ("false fallbacks", "false_fallback_est"),
            ("  quality", "quality_est"),
            ("missed fallbacks", "missed_fallback_est"),
        )
    ),
    (
        "route accuracy",
        lambda g: f"{_pct(g['route_accuracy'])}{_ci(g['route_accuracy_ci'])} of {g.get('route_labeled', 0)}",
    ),
    ("route accuracy, population est.", lambda g: _estimate(g, "route_accuracy_est")),  # what the rollback rule reads
    # docs/metrics.md §3d: the judge's verdicts corrected by people's, and how far the judge agrees with them
    ("false fallbacks, corrected", lambda g: _ppi(g, "false_fallback_ppi")),
    ("missed fallbacks, corrected", lambda g: _ppi(g, "missed_fallback_ppi")),
    ("route accuracy, corrected", lambda g: _ppi(g, "route_accuracy_ppi")),
    ("judge agreement with people", _judge),
    (
        "offload failure / degrade trigger",
        lambda g: (
            f"{_pct(g.get('offload_failure_rate'))}{_ci(g['offload_failure_ci'])} / "
            f"{_pct(g.get('degrade_trigger_rate'))}{_ci(g['degrade_trigger_ci'])}"
        ),
    ),
    (
        "cloud calls/session mean p50 p95",
        lambda g: " ".join(_num(g["cloud_calls_per_session"][k]) for k in ("mean", "p50", "p95")),
    ),
    ("L0 L1 L2 L3 L4", lambda g: " ".join(_pct(g["degrade_share"][k]) for k in ("L0", "L1", "L2", "L3", "L4"))),
    ("L2+L3 share", lambda g: _pct(g["l2_l3_share"])),
    (
        "L2/L3 drift pp / z / psi",
        lambda g: (
            f"{_num(g['l2_l3_drift']['delta_pp'], 1)} / {_num(g['l2_l3_drift']['z'])} / "
            f"{_num(g['l2_l3_drift']['psi'], 3)}" + ("  DRIFTING" if g["l2_l3_drift"]["drifting"] else "")
        ),
    ),
    ("shadow agreement", lambda g: _pct(g["shadow_agreement_rate"])),
)


def metrics_table(result: dict[str, Any]) -> str:
    groups = [("overall", result["overall"]), *result["by_task_type"].items()]
    width = max(len(label) for label, _ in ROWS) + 2
    lines = [
        f"window {result['window']['start']} → {result['window']['end']} "
        "(live events; rates over their own denominators)"
    ]
    for name, group in groups:
        lines.append("")
        lines.append(f"== {name}")
        lines.extend(f"  {label:<{width}}{render(group)}" for label, render in ROWS)
    versions = result["overall"].get("by_policy_version") or {}
    if len(versions) > 1:
        lines.append("")
        lines.append("== by policy version (overall)")
        for version, v in versions.items():
            lines.append(
                f"  {version}: {v['requests']} requests, fallback rate {_pct(v['fallback_rate'])}, false fallbacks "
                f"{_pct(v['false_fallback_rate'])} of {v['false_fallback_labeled']}, "
                f"route accuracy {_pct(v['route_accuracy'])}"
            )
    for task_type, cal in result["calibration"].items():
        lines.append("")
        lines.append(f"== calibration: {task_type}")
        for b in cal["buckets"]:
            lines.append(f"  [{b['low']:.2f}, {b['high']:.2f})  n={b['n']:<6} pass {_pct(b['pass_rate'])}")
        flag = "monotonic" if cal["monotonic"] else f"NOT monotonic at buckets {cal['non_monotonic_buckets']}"
        lines.append(
            f"  {flag}; threshold now {_num(cal['current_threshold'])}, recommended "
            f"{_num(cal['recommended_threshold'])} for pass rate ≥ {cal['target']} with ≥ {cal['min_n']} events"
            f" (candidates from the evidence floor {_num(cal.get('evidence_floor'))})"
        )
    return "\n".join(lines)


def review(kind: str, report: dict[str, Any]) -> str:
    """One of the weekly review's reports (grading, readiness, rollout) as a table per task type."""
    w = report["window"]
    observed = (
        f"; live events span {w['days_observed']:.3g} days: per-day figures over that span"
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
                f"  {t:<18} {_num_grouped(g['input_tokens']['p50'], 0):>6}/"
                f"{_num_grouped(g['input_tokens']['p95'], 0):<7} {'yes' if g['long_tail'] else 'no':>4} "
                f"{_num_grouped(g['daily_calls'], 1):>10} {_pct(g['determinism']):>8} "
                f"{g['error_cost']:>8.2f} {g['score']:>6.3f}  {g['tier']} ({g['reason']})"
            )
            lines.append(
                f"  {'':<18}   determinism from {g['determinism_groups']} re-run groups"
                f"{_ci_pct(g.get('determinism_ci'), 0)}"
                + ("" if g.get("tier_settled", True) else ": few re-run groups, the tier is not settled")
            )
        lines.append(
            "  the error-cost veto (error_cost > 0.7) is decided before any score (docs/sources.md#seed-004-2)"
        )
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
                f"{g['gate_quality']['status']:>8} {score}/30  {verdict(r['verdict'])} / "
                f"{side.get('grading_tier') or '—'}{flag}"
            )
            if r["reasons"]:
                screen = r.get("token_screen") or {}
                named = [
                    f"token_screen (p90 {screen['value']:g} > {screen['limit']} tokens)"
                    if why == "token_screen"
                    else why
                    for why in r["reasons"]
                ]
                lines.append(f"  {'':<18}   because: {', '.join(named)}")
            lines.append(f"  {'':<18}   evidence: {_review.evidence(g)}")
            if r.get("answer_check"):  # the serve-time check of its answers (docs/router.md); `unchecked`: none
                lines.append(f"  {'':<18}   answers checked at serve time: {r['answer_check']}")
            if "judge_agreement" in r:  # docs/metrics.md §3d: the judge behind the quality gate, audited by people
                lines.append(f"  {'':<18}   judge: {_judge(r)}")
        lines.append(
            "  docs/sources.md#seed-003: first the token screen (p90 input + output <= 400 tokens, else not "
            "scored); gates: peak memory <= 40 % and resident <= 25 % of the lowest target tier, device p95 <= 10 s "
            "over >= 30 attempts (timeouts censored) and streamable or asynchronous, missed <= 3 % with >= 90 % "
            "of bad answers caught, on intervals; too little evidence is unknown, never a pass; then a score "
            ">= 12 of 30"
        )
    else:
        samples = report.get("divergence_samples") or {}
        for t, r in rows.items():
            stage = r["stage"] + (f" {r['percent']:g}% of sessions" if r.get("percent") else "")
            move = {
                "advance": f"ADVANCE to {r['to']}",
                "rollback": f"ROLL BACK to {r['to']}",
                "hold": "hold",
            }[r["recommendation"]]
            kept = sum((samples.get(t) or {}).values())
            lines.append(f"  {t:<18} {stage:<26} → {move}" + (f"   [{kept} divergence samples]" if kept else ""))
            if (r.get("rollback") or {}).get("recommended"):  # the words On-call and the tuning page say too
                lines.append(f"      {r['rollback']['words']}")
            for c in r["conditions"]:
                value = "—" if c["value"] is None else f"{c['value']:.3f}"
                if c.get("labeled_share") is not None:  # an estimate (docs/metrics.md §3c), the labeled share beside
                    value += f" (labeled {c['labeled_share']:.3f})"
                note = f" ({c['note']})" if c.get("note") else ""
                lines.append(
                    f"      {'ok ' if c['met'] else 'NO '} {c['condition']}: {value} vs {c['limit']} (n={c['n']}){note}"
                )
        lines.append(
            "  the tracker recommends; it does not edit the policy (the cloud stays the fallback in every stage)"
        )
    return "\n".join(lines)


def whatif(result: dict[str, Any], hits: list[str] | None = None) -> str:
    """The what-if as a readable table per task type, its warnings, the caveat, and the gate's verdict."""
    w = result["window"]
    lines = [f"what-if over the live traffic of [{w['start']}, {w['end']})"]
    for t, task in result["by_task_type"].items():
        lines.append("")
        if "candidate" not in task:
            lines.append(f"{t}: threshold {task['threshold']:g}: no live events in the window")
            continue
        lines.append(
            f"{t}: threshold {_whatif.recorded(task['recorded_threshold'])} → {task['threshold']:g} "
            f"({task['current']['requests']} live requests, {task['gated']} decided by the confidence gate)"
        )
        width = max(len(label) for label, _ in _whatif.ROWS)
        cur = [fmt(task["current"]) for _, fmt in _whatif.ROWS]
        col = max(len("current"), *(len(c) for c in cur))
        lines.append(f"  {'':<{width}}  {'current':<{col}}  candidate")
        for (label, fmt), c in zip(_whatif.ROWS, cur):
            lines.append(f"  {label:<{width}}  {c:<{col}}  {fmt(task['candidate'])}")
        m = task["moved"]
        lines.append(
            f"  moved: {m['n']} ({m['to_cloud']['n']} to the cloud, {m['to_device']['n']} to the device); "
            f"{m['labeled']} labeled (coverage {_pct(m['label_coverage'])}), "
            f"their device answers passed {_pct(m['pass_rate'])}{_ci_pct(m['ci'])}"
        )
        for warning in task["warnings"]:
            lines.append(f"  warning: {warning}")
    lines += ["", f"caveat: {result['caveat']}"]
    for change in result.get("not_rescored") or []:
        lines.append(f"not re-scored: the policy file changes {change} (only thresholds are re-scored)")
    if hits is not None:
        lines.append(
            "gate: REFUSED: " + "; ".join(hits)
            if hits
            else "gate: no --fail-if condition met (what it could not judge, if anything, is on stderr)"
        )
    return "\n".join(lines)
