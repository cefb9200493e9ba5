"""The alert rules as a Prometheus rule file (`routerscope rules export --format prometheus`): recording rules
over the exporter's series (`routerscope.warehouse.analytics.exporter`) and one alerting rule per project rule, with the
same limits, minimum samples and streak (docs/operations.md "Prometheus").

* A rate is never averaged: its numerator and its denominator are recorded apart, each summed over what the
  rule aggregates (per task type, or overall), and divided after — a per-instance or per-task-type ratio
  averaged would weigh a quiet task type like a busy one.
* The exporter serves each grain's latest finished window as gauges (`routerscope_window_…{grain}`), so at any
  moment an expression reads one window's numbers, exactly as the project's rules read them.
* `min_n`: `and <denominator> >= min_n` — a window with too few events behind it never breaches.
* `interval`: the rule's Wilson 95 % interval (`stats.wilson`) computed from the same two recorded series, and
  the whole interval must lie beyond the limit (its low end over, or its high end under).
* `windows` consecutive windows: `for:` (windows − 1) × the grain — the first breaching window makes the alert
  pending, and it fires when the condition still holds `windows − 1` windows later (a window that no longer
  breaches, or has no events, resets it, as a missing window breaks the project's streak).
* Per task type `limits`: one comparison per named task type, the default limit for the rest.
* **Staleness**: a window's numbers count only while the window advances. Every count a window rule reads is
  taken `and` its exporter's latest window is *fresh* — ended less than one grain plus `FRESH_ALLOWANCE` ago
  (`time() - routerscope_window_end_timestamp_seconds`) — so when new windows stop coming the counts vanish and
  every window rule stops holding, resetting its streak. A streak's `for:` is (windows − 1) grains plus the
  allowance: the condition holds at most `windows − 1` grains plus the allowance from the first breaching window
  to the moment the (windows − 1)-th would go stale, so fewer windows than the streak names can never fire it,
  however late they were computed; the price is that a streak fires up to the allowance after its last window
  arrives. The breaker and data-quality signals, which the exporter reads from the warehouse at each refresh,
  hold only while its snapshot is as fresh. `routerscope_windows_stale` fires per grain when the latest window
  is older than that (or no window of the 5-minute grain exists at all).
* A rule that reads a population estimate (docs/metrics.md §3c, a key ending in `_est`: the quality false
  fallbacks, the route accuracy of the rollback rule) is left out (`unexported`): the estimate weighs each
  confidence bucket by its own size, which the exporter's unstratified counts cannot give. The project's own
  evaluation still raises it, and posts it to Alertmanager with ROUTERSCOPE_ALERTMANAGER_URL."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from routerscope.core.errors import ConfigError
from routerscope.warehouse.analytics.alerting.rules import GRAINS, WINDOW_GRAINS, Rule
from routerscope.warehouse.analytics.stats import Z95

GROUP_INTERVAL = "1m"  # how often Prometheus evaluates the groups: a window's change is seen within a minute
# metric → (numerator family, its label matcher, the rate's denominator family): docs/metrics.md's definitions
RATIOS: dict[str, tuple[str, str, str]] = {
    "fallback_rate": ("fallbacks", 'type=~"quality|timeout|error"', "device_entered"),
    "quality_fallback_rate": ("fallbacks", 'type="quality"', "device_entered"),
    "timeout_fallback_rate": ("fallbacks", 'type="timeout"', "device_entered"),
    "error_fallback_rate": ("fallbacks", 'type="error"', "device_entered"),
    "capability_reject_rate": ("fallbacks", 'type="capability"', "decisions"),
    "naive_fallback_rate": ("fallbacks", "", "decisions"),
    "device_bypass_rate": ("device_bypassed", "", "decisions"),
    "false_fallback_rate": ("false_fallbacks", "", "false_fallback_labeled"),
    "missed_fallback_rate": ("missed_fallbacks", "", "missed_fallback_labeled"),
    "route_accuracy": ("route_correct", "", "route_labeled"),
    "offload_failure_rate": ("offload_failures", "", "device_attempts"),
    "degrade_trigger_rate": ("degrade_triggered", "", "device_entered"),
    "l2_l3_share": ("served", 'level=~"L2|L3"', "decisions"),
    **{f"degrade_share.{lv}": ("served", f'level="{lv}"', "decisions") for lv in ("L0", "L1", "L2", "L3", "L4")},
}
# a rule's `denominator` (a key of docs/metrics.md) → the exporter's family
DENOMINATORS = {
    "requests": "decisions",
    "device_entered": "device_entered",
    "device_attempts": "device_attempts",
    "false_fallback_labeled": "false_fallback_labeled",
    "missed_fallback_labeled": "missed_fallback_labeled",
    "route_labeled": "route_labeled",
}
# the interval a rule may name → the rate it is the interval of
INTERVALS = {
    "route_accuracy_ci": "route_accuracy",
    "offload_failure_ci": "offload_failure_rate",
    "degrade_trigger_ci": "degrade_trigger_rate",
    "false_fallback_ci": "false_fallback_rate",
    "missed_fallback_ci": "missed_fallback_rate",
}
QUARANTINE_RATIO = "overall:routerscope_quarantine_share:ratio_1d"
# How long after one grain past its end a window still counts as the latest: the daemon computes a 5-minute
# window 2 minutes after it ends (routerscope/pipelines/timing.py SETTLE_5M), the exporter reads the warehouse
# every 15 s and Prometheus scrapes every 15-60 s, so the next window is served about 3 minutes after the
# previous one's grain ran out; a day 15 minutes after midnight (SETTLE_DAILY). A window still served after
# this is stale: its numbers no longer count and `routerscope_windows_stale` fires.
FRESH_ALLOWANCE = {"5m": timedelta(minutes=4), "1d": timedelta(hours=1)}
STALE_ALERT = "routerscope_windows_stale"
WINDOW_LABELS = "task_type, type, level"  # the labels a window gauge has beside its grain and the target's


def stale_after(grain: str) -> timedelta:
    """The age (now − the latest window's end) from which a window of `grain` is stale."""
    return WINDOW_GRAINS[grain] + FRESH_ALLOWANCE[grain]


def fresh_series(rec: _Recorder, grain: str) -> str:
    """The recorded series of each exporter's latest window end while it is fresh (absent once stale)."""
    limit = int(stale_after(grain).total_seconds())
    return rec.record(
        f"target:routerscope_window_end_fresh:{grain}",
        f'routerscope_window_end_timestamp_seconds{{grain="{grain}"}} '
        f'and (time() - routerscope_window_end_timestamp_seconds{{grain="{grain}"}}) < {limit}',
    )


def duration(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds == 0:
        return "0s"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _number(value) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return repr(float(value)) if isinstance(value, float) else str(value)


class _Recorder:
    """Recording rules, each recorded once however many alerts read it."""

    def __init__(self):
        self.rules: list[dict[str, str]] = []
        self._names: set[str] = set()

    def record(self, name: str, expr: str) -> str:
        if name not in self._names:
            self._names.add(name)
            self.rules.append({"record": name, "expr": expr})
        return name


def _by(rule: Rule) -> tuple[str, str]:
    """(the recorded name's level, the aggregation) of a rule's scope."""
    return ("task_type", "sum by (task_type)") if rule.scope == "per_task_type" else ("overall", "sum")


def _fresh(rec: _Recorder, grain: str, series: str) -> str:
    """`series` (window gauges of `grain`) kept only where its exporter's latest window is fresh."""
    return f"({series} and ignoring({WINDOW_LABELS}) {fresh_series(rec, grain)})"


def _count(rec: _Recorder, rule: Rule, family: str, matcher: str = "", tag: str = "") -> str:
    level, agg = _by(rule)
    selector = ", ".join(m for m in (f'grain="{rule.grain}"', matcher) if m)
    name = f"{level}:routerscope_{tag or family}:sum_{rule.grain}"
    return rec.record(name, f"{agg} {_fresh(rec, rule.grain, f'routerscope_window_{family}{{{selector}}}')}")


def _ratio(rec: _Recorder, rule: Rule, metric: str) -> tuple[str, str]:
    """(the rate's recorded name, its denominator's) for a rate of RATIOS."""
    family, matcher, denominator = RATIOS[metric]
    level, _ = _by(rule)
    tag = metric.replace(".", "_")
    num = _count(rec, rule, family, matcher, f"{tag}_numerator") if matcher else _count(rec, rule, family)
    den = _count(rec, rule, denominator)
    return rec.record(f"{level}:routerscope_{tag}:ratio_{rule.grain}", f"{num} / {den}"), den


def _wilson(rec: _Recorder, rule: Rule, metric: str, ratio: str, den: str) -> tuple[str, str]:
    """The recorded (low, high) ends of the rate's Wilson 95 % interval (stats.wilson_rate, term by term)."""
    level, _ = _by(rule)
    tag = metric.replace(".", "_")
    z, z2 = _number(Z95), _number(Z95 * Z95)
    centre = f"(({ratio} + {z2} / (2 * {den})) / (1 + {z2} / {den}))"
    half = f"(({z} / (1 + {z2} / {den})) * sqrt({ratio} * (1 - {ratio}) / {den} + {z2} / (4 * {den} ^ 2)))"
    low = rec.record(f"{level}:routerscope_{tag}:wilson_low_{rule.grain}", f"clamp_min({centre} - {half}, 0)")
    high = rec.record(f"{level}:routerscope_{tag}:wilson_high_{rule.grain}", f"clamp_max({centre} + {half}, 1)")
    return low, high


def _compare(rule: Rule, series: str) -> str:
    """`series op limit`, with one clause per task type named in `limits`."""
    if not rule.limits:
        return f"{series} {rule.op} {_number(rule.limit)}"
    named = sorted(rule.limits)
    clauses = [f'{series}{{task_type!~"{"|".join(named)}"}} {rule.op} {_number(rule.limit)}']
    clauses += [f'{series}{{task_type="{t}"}} {rule.op} {_number(rule.limits[t])}' for t in named]
    return " or ".join(f"({c})" for c in clauses)


def _window_condition(rec: _Recorder, rule: Rule) -> str:
    if rule.metric == "l2_l3_drift.drifting":
        gauge = f'routerscope_window_l2_l3_drifting{{grain="{rule.grain}"}}'
        flag = rec.record(
            f"overall:routerscope_l2_l3_drifting:max_{rule.grain}", f"max {_fresh(rec, rule.grain, gauge)}"
        )
        condition = _compare(rule, flag)
    elif rule.metric in RATIOS:
        ratio, den = _ratio(rec, rule, rule.metric)
        series = ratio
        if rule.interval:
            if INTERVALS.get(rule.interval) != rule.metric:
                raise ConfigError(f"rule {rule.name}: no Prometheus form for interval {rule.interval!r}")
            low, high = _wilson(rec, rule, rule.metric, ratio, den)
            series = low if rule.op in (">", ">=") else high
        condition = _compare(rule, series)
    else:
        raise ConfigError(f"rule {rule.name}: no Prometheus form for metric {rule.metric!r} (see RATIOS)")
    if rule.denominator and rule.min_n:
        if rule.denominator not in DENOMINATORS:
            raise ConfigError(f"rule {rule.name}: no Prometheus form for denominator {rule.denominator!r}")
        n = _count(rec, rule, DENOMINATORS[rule.denominator])
        condition = f"({condition}) and {n} >= {rule.min_n}"
    return condition


def _signal_condition(rec: _Recorder, rule: Rule) -> str:
    metric = rule.metric
    if metric.startswith("pipeline.breaker_open."):
        if rule.grain != "5m":
            raise ConfigError(f"rule {rule.name}: the exporter serves {metric} per 5-minute window only")
        boundary = metric.rsplit(".", 1)[1]
        series = f'max(routerscope_breakers_open{{boundary="{boundary}"}})'
    elif metric == "pipeline.freshness_lag_s":
        series = "(time() - max(routerscope_newest_event_timestamp_seconds))"
    elif metric == "pipeline.dq_blocking_failures":
        series = "max(routerscope_dq_blocking_failures)"
    elif metric == "pipeline.quarantine_share":
        # the last day's messages, as alerts.QUARANTINE_SHARE_SQL counts them: quarantined over all received
        q = rec.record(
            "overall:routerscope_quarantined_messages:increase_1d",
            "sum(increase(routerscope_quarantined_messages_total[1d]))",
        )
        all_ = rec.record(
            "overall:routerscope_received_messages:increase_1d",
            f"{q} + sum(increase(routerscope_loaded_messages_total[1d]))",
        )
        series = rec.record(QUARANTINE_RATIO, f"{q} / {all_}")
    else:
        raise ConfigError(f"rule {rule.name}: no Prometheus form for signal {metric!r}")
    condition = f"{series} {rule.op} {_number(rule.limit)}"
    if metric.startswith("pipeline.breaker_open.") or metric == "pipeline.dq_blocking_failures":
        # read by the exporter from the warehouse at each refresh: they hold only while its snapshot is fresh
        # (a warehouse it cannot read leaves the last snapshot served)
        limit = int(stale_after("5m").total_seconds())
        fresh = rec.record(
            "overall:routerscope_exporter_snapshot_fresh:5m",
            f"(time() - max(routerscope_exporter_refresh_timestamp_seconds)) < {limit}",
        )
        condition = f"({condition}) and on() {fresh}"
    return condition


def reads_estimate(rule: Rule) -> bool:
    """Whether `rule` reads a §3c population estimate (its metric or interval lies under a `…_est` key)."""
    return any(part.endswith("_est") for key in (rule.metric, rule.interval) if key for part in key.split("."))


def unexported(rules: list[Rule]) -> list[str]:
    """The rules `rule_file` leaves out, each with why: `false_fallback_high (reads …)`."""
    return [
        f"{r.name} (reads {r.metric}, a population estimate over confidence buckets the exporter does not serve)"
        for r in rules
        if reads_estimate(r)
    ]


def stale_alert(rec: _Recorder, version: str, grains: set[str], interval: str) -> dict[str, Any]:
    """`routerscope_windows_stale`: per exporter and grain, the latest window is older than `stale_after` (the
    window rules have stopped holding), or the exporters have read the warehouse and serve no 5-minute window."""
    clauses = []
    for grain in sorted(grains, key=lambda g: WINDOW_GRAINS[g]):
        fresh_series(rec, grain)
        limit = int(stale_after(grain).total_seconds())
        clauses.append(f'(time() - routerscope_window_end_timestamp_seconds{{grain="{grain}"}}) >= {limit}')
    # an exporter that has read the warehouse (its refresh time is served) and found no 5-minute window; before
    # the first scrape nothing is known, and nothing fires
    clauses.append(
        'label_replace(count(routerscope_exporter_refresh_timestamp_seconds) * 0 + 1e12, "grain", "5m", "", "")'
        ' unless on() count(routerscope_window_end_timestamp_seconds{grain="5m"})'
    )
    return {
        "alert": STALE_ALERT,
        "expr": " or ".join(clauses),
        "for": interval,  # one evaluation more: a scrape that lands between two reads of the warehouse never pages
        "labels": {"severity": "page", "routerscope_rule_version": version},
        "annotations": {
            "summary": "Metric windows stopped advancing: every window alert is held off until they come back",
            "description": (
                "{{ if gt $value 1e11 }}No {{ $labels.grain }} metric window has been computed yet.{{ else }}"
                "The latest {{ $labels.grain }} metric window ended {{ $value | humanizeDuration }} ago.{{ end }} "
                "Window alerts count a window only while it is the latest (docs/operations.md, Stale windows): "
                "check that the windows are computed (the Dagster daemon, or `routerscope load`) and that the "
                "exporter reads the warehouse."
            ),
        },
    }


def rule_file(version: str, rules: list[Rule], interval: str = GROUP_INTERVAL) -> dict[str, Any]:
    """The Prometheus rule file (a mapping to dump as YAML) for the project's `rules` of `version`, evaluated
    every `interval`; the rules that read an estimate are left out (`unexported`)."""
    rec = _Recorder()
    alerts = []
    window_grains = {"5m"}
    for rule in rules:
        if reads_estimate(rule):
            continue
        if rule.grain == "now" or rule.metric.startswith("pipeline."):
            expr = _signal_condition(rec, rule)
            step = GRAINS[rule.grain]  # None for `now`: held no longer than one reading
            hold = step * (rule.windows - 1) if step else timedelta(0)
        else:
            expr = _window_condition(rec, rule)
            window_grains.add(rule.grain)
            streak = rule.windows - 1
            hold = WINDOW_GRAINS[rule.grain] * streak + (FRESH_ALLOWANCE[rule.grain] if streak else timedelta(0))
        alert: dict[str, Any] = {"alert": rule.name, "expr": expr}
        if hold:
            alert["for"] = duration(hold)
        alert["labels"] = {
            "severity": rule.severity,
            "routerscope_rule_version": version,
            **({"action": rule.action} if rule.action else {}),
        }
        alert["annotations"] = {
            # per task type limits: the summary cannot name one limit for every task type
            "summary": rule.summary.replace("{limit}", "its task type's limit")
            if rule.limits
            else rule.summary_for(""),
            "description": (
                f"{rule.metric}"
                + (f" ({rule.interval} bound)" if rule.interval else "")
                + f" {rule.op} limit: {{{{ $value }}}}"
                + (f" (at least {rule.min_n} {rule.denominator} per window)" if rule.min_n and rule.denominator else "")
                + (f" for {rule.windows} consecutive {rule.grain} windows" if rule.windows > 1 else "")
            ),
        }
        alerts.append(alert)
    alerts.append(stale_alert(rec, version, window_grains, interval))
    # One group: Prometheus evaluates a group's rules in order, each seeing the ones before it at the same
    # instant, so an alert never reads its recorded rate one evaluation late (separate groups run apart).
    return {"groups": [{"name": "routerscope", "interval": interval, "rules": rec.rules + alerts}]}
