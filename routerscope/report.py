"""Readable terminal renderings of command results (the `--json` forms are the contract)."""

from __future__ import annotations

from typing import Any

from routerscope.core.text import pct as _pct


def _num(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _ci(ci: list[float] | None) -> str:
    return "" if ci is None else f" [{100 * ci[0]:.0f}–{100 * ci[1]:.0f}%]"


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
    # seed 000: never mixed — quality (the threshold) and timeout (latency) apart
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
    (
        "route accuracy",
        lambda g: f"{_pct(g['route_accuracy'])}{_ci(g['route_accuracy_ci'])} of {g.get('route_labeled', 0)}",
    ),
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
