"""Numbers and names as people read them, for the pages: an alert's condition and the values that tripped it in
words (`fallback rate above 50%: 86.4% (n = 184)`), never the rule's expression (`fallback_rate > 0.5: 0.864`,
`l2_l3_drift.drifting == True: True`, `pipeline.freshness_lag_s > 600: 1.1e+03`). Pure: tested without Streamlit."""

from __future__ import annotations

import re
from typing import Any

OPS = {">": "above", ">=": "at or above", "<": "below", "<=": "at or below", "==": "is", "!=": "is not"}
# metric keys whose words are not their spelling with spaces
NAMES = {
    "l2_l3_drift.drifting": "L2+L3 share drifting",
    "l2_l3_drift.delta_pp": "L2+L3 share's move",
    "l2_l3_share": "L2+L3 share",
    "pipeline.freshness_lag_s": "newest event's age",
    "degrade_share.L4": "canned-answer (L4) share",
    "pipeline.breaker_open.cloud": "open cloud breakers",  # was "cloud above 0: 1"
    "pipeline.breaker_open.device": "open device breakers",
}

# alert rules by what they say (a rule id stays beside it where a person needs it to grep the rules file)
RULES = {
    "fallback_rate_high": "fallback rate high",
    "l2_l3_drift": "L2+L3 share drifting",
    "device_bypass": "device bypassed",
    "device_breaker_open": "device breaker open",
    "cloud_breaker_open": "cloud breaker open",
    "false_fallback_high": "false fallbacks high",
    "rollback_route_accuracy": "rollback: route accuracy",
    "rollback_offload_failure": "rollback: offload failures",
    "rollback_degrade_trigger": "rollback: degrade triggers",
    "ingest_stale": "ingest stale",
    "quarantine_share_high": "quarantine share high",
    "data_quality_blocking": "blocking data-quality failure",
}


def rule_name(rule: str) -> str:
    """An alert rule's id in words (`l2_l3_drift` → 'L2+L3 share drifting'); an unknown id with spaces."""
    return RULES.get(rule, rule.replace("_", " "))


def metric_name(metric: str) -> str:
    """`fallback_rate` → 'fallback rate'; `pipeline.freshness_lag_s` → "newest event's age"."""
    if metric in NAMES:
        return NAMES[metric]
    last = metric.split(".")[-1]
    return last.removesuffix("_s").replace("_", " ")


def value(metric: str, v: Any) -> str:
    """A value of `metric` to its precision: shares and rates as percentages to a tenth, seconds as s / min / h,
    flags as yes / no, other numbers to three significant digits with thousands grouped."""
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if not isinstance(v, int | float):
        return str(v)
    last = metric.split(".")[-1]
    if last.endswith("_s"):
        return duration(float(v))
    if last.endswith(("rate", "share")) or metric.startswith("degrade_share"):
        return f"{100 * v:.1f}%"
    if last.endswith("_pp"):
        return f"{v:+.1f} pp"
    if float(v).is_integer():
        return f"{int(v):,}"
    return f"{float(f'{v:.3g}'):,g}"


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def limit(metric: str, v: Any) -> str:
    """A rule's limit as it was set: 50%, not 50.0%."""
    text = value(metric, v)
    return text.replace(".0%", "%") if text.endswith(".0%") else text


def condition(metric: str, op: str, limit_value: Any) -> str:
    """'fallback rate above 50%'; a flag's rule (`drifting == True`) reads as its name alone."""
    if isinstance(limit_value, bool) and op == "==":
        return metric_name(metric) if limit_value else f"not {metric_name(metric)}"
    return f"{metric_name(metric)} {OPS.get(op, op)} {limit(metric, limit_value)}"


def tripped(trip: dict | None, last: int = 3) -> str:
    """The condition (with the limit that applied to the task type, and the rule's default beside a task type's
    own) and the last `last` windows that tripped it, each value with its sample size."""
    if not trip:
        return ""
    metric = str(trip.get("metric") or "")
    shown = []
    for w in (trip.get("windows") or [])[-last:]:
        v = w.get("value")
        n = f"n = {w['n']:,}" if isinstance(w.get("n"), int) else ""
        if isinstance(v, bool):  # the condition already says what held: the sample sizes are the news
            shown.append(n or value(metric, v))
        else:
            shown.append(value(metric, v) + (f" ({n})" if n else ""))
    own = (
        f" (this task type's limit; the default is {limit(metric, trip['default_limit'])})"
        if "default_limit" in trip
        else ""
    )
    text = condition(metric, str(trip.get("op") or ""), trip.get("limit")) + own
    return text + (": " + " · ".join(shown) if shown else "")


def span_of_days(days: float) -> str:
    """A span given in days as people say it: '2.3 hours' under a day (never "0.0973 days"), else '3.5 days'."""
    if days < 1:
        hours = days * 24
        return f"{hours:.1f} hours" if hours >= 1 else f"{hours * 60:.0f} minutes"
    return f"{days:.1f} days"


def money(v: float | None, digits: int = 4) -> str:
    """US dollars with the sign before the symbol ('−$0.0025', never '$-0.0025'); '—' for none."""
    if v is None:
        return "—"
    return f"{'−' if v < 0 else ''}${abs(v):,.{digits}f}"


REASONS = {  # machine keys a page shows, in words
    "error_cost_veto": "vetoed by its error cost",
}


def reason(key: str | None) -> str:
    """A verdict's reason key in words: `error_cost_veto` → 'vetoed by its error cost', `0.5 <= score < 0.75` →
    'score from 0.5 to under 0.75'."""
    if not key:
        return "—"
    if key in REASONS:
        return REASONS[key]
    m = re.fullmatch(r"\s*([\d.]+)\s*<=\s*(\w+)\s*<\s*([\d.]+)\s*", key)
    if m:
        return f"{m.group(2)} from {m.group(1)} to under {m.group(3)}"
    m = re.fullmatch(r"\s*(\w+)\s*(>=|<|<=|>)\s*([\d.]+)\s*", key)
    if m:
        return f"{m.group(1)} {OPS[m.group(2)]} {m.group(3)}"
    return key.replace("_", " ")


# The analytics' own text (shared with the CLI, where a section sign points into docs/metrics.md) as a page says it
SECTIONS = {
    "§3c": "post-stratified",
    "§3d": "by people's verdicts",
}
KEYS = {
    "false_fallback_rate": "false-fallback rate",
    "missed_fallback_rate": "missed-fallback rate",
    "fallback_rate": "fallback rate",
    "false_fallback_est": "false-fallback estimate",
    "missed_fallback_est": "missed-fallback estimate",
}
_KEY = re.compile(r"\b(" + "|".join(sorted(KEYS, key=len, reverse=True)) + r")\b")
_SECTION = re.compile(r"§\s?(\d+[a-z]?)")


def prose(text: str) -> str:
    """A line of the analytics' text for a page: its metric keys in words, its section signs as what they stand for
    (`the labeled false_fallback_rate 0.489 lies outside … (§3c)` → `the labeled false-fallback rate 0.489 lies
    outside … (post-stratified)`); a section without words is named as a section of docs/metrics.md."""
    text = _KEY.sub(lambda m: KEYS[m.group(1)], text)
    return _SECTION.sub(lambda m: SECTIONS.get("§" + m.group(1), f"docs/metrics.md section {m.group(1)}"), text)
