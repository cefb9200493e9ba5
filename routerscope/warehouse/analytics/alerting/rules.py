"""Alert rules: data (`alert_rules.yaml` beside this module, or the file named by ROUTERSCOPE_ALERT_RULES),
validated on load so that a bad file is one clear error naming the rule and the field."""

from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml

from routerscope.core.errors import ConfigError

DEFAULT_RULES = Path(__file__).with_name("alert_rules.yaml")
WINDOW_GRAINS = {"5m": timedelta(minutes=5), "1d": timedelta(days=1)}  # the stored windows and their lengths
GRAINS: dict[str, timedelta | None] = {**WINDOW_GRAINS, "now": None}  # `now`: one reading as of the evaluation
OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne}
SEVERITIES = ("page", "ticket", "info")
SCOPES = ("overall", "per_task_type")
# Pipeline signals read per window (from breaker_events, as of each window: docs/metrics.md "Pipeline signals per
# window"); every other pipeline signal is one reading as of the evaluation time (grain `now`).
WINDOW_SIGNALS = ("pipeline.breaker_open.device", "pipeline.breaker_open.cloud")
TASK_TYPE = re.compile(r"\A[a-z][a-z0-9_]{0,63}\Z")  # the event contract's task_type (docs/contract.md)


@dataclass(frozen=True)
class Rule:
    name: str
    summary: str
    metric: str
    scope: str
    grain: str
    op: str
    limit: Any
    windows: int
    severity: str
    min_n: int = 0
    denominator: str | None = None
    action: str = ""
    # The metric's confidence interval ([low, high], e.g. `degrade_trigger_ci`): with one, a window breaches
    # only when the whole interval lies beyond the limit (the evidence to say so, docs/metrics.md §3b), not when
    # the point estimate alone does: 2 failures in 35 cannot tell a 5 % limit from noise.
    interval: str | None = None
    # Per task type limits beside `limit` (a per_task_type rule only): {task_type: limit}; a task type not
    # named gets `limit`. A confidence-gated task type falls back by design, so its accepted baseline (and
    # the limit above it) is its own (docs/metrics.md §3b).
    limits: dict[str, Any] | None = None

    def limit_for(self, scope: str = "") -> Any:
        """The limit that applies to `scope` (a task type, '' = overall)."""
        return (self.limits or {}).get(scope, self.limit)

    def summary_for(self, scope: str = "") -> str:
        """The summary with `{limit}` replaced by the limit that applies to `scope`."""
        return self.summary.replace("{limit}", _shown(self.limit_for(scope)))

    def breaches(self, value, n: int | None, interval: list[float] | None = None, scope: str = "") -> bool:
        if value is None:
            return False
        if self.denominator and (n is None or n < self.min_n):
            return False  # too few events behind the number to act on it
        if self.interval:
            if not interval:
                return False  # no interval, no evidence
            # over a limit: the low end must be over it; under a limit: the high end must be under it
            value = interval[0] if self.op in (">", ">=") else interval[1]
        return bool(OPS[self.op](value, self.limit_for(scope)))


def _shown(limit) -> str:
    return f"{limit:g}" if isinstance(limit, float) else str(limit)


def load_rules(path: Path | str | None = None) -> tuple[str, list[Rule]]:
    """The rules and their version; a bad file is a ConfigError naming the rule and the field."""
    path = Path(path) if path else DEFAULT_RULES
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read alert rules {path}: {' '.join(str(exc).split())}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"alert rules {path} is not a text (UTF-8 YAML) file") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("rules"), list) or "version" not in doc:
        raise ConfigError(f"alert rules {path}: expected a mapping with `version` and a list `rules`")
    rules: list[Rule] = []
    names: set[str] = set()
    for i, raw in enumerate(doc["rules"]):
        where = f"alert rules {path}, rule {i + 1} ({raw.get('name', '?') if isinstance(raw, dict) else '?'})"
        rule = _rule(raw, where)
        problems = _problems(rule, names)
        if problems:
            raise ConfigError(f"{where}: {'; '.join(problems)}")
        names.add(rule.name)
        rules.append(rule)
    return str(doc["version"]), rules


def _rule(raw, where: str) -> Rule:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping")
    unknown = set(raw) - set(Rule.__dataclass_fields__)
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    try:
        return Rule(**raw)
    except TypeError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _problems(rule: Rule, seen_names: set[str]) -> list[str]:
    problems = [
        f"op must be one of {', '.join(OPS)}" if rule.op not in OPS else "",
        f"grain must be one of {', '.join(GRAINS)}" if rule.grain not in GRAINS else "",
        f"scope must be one of {', '.join(SCOPES)}" if rule.scope not in SCOPES else "",
        f"severity must be one of {', '.join(SEVERITIES)}" if rule.severity not in SEVERITIES else "",
        "windows must be at least 1" if not isinstance(rule.windows, int) or rule.windows < 1 else "",
        "a duplicate rule name" if rule.name in seen_names else "",
        _grain_problem(rule),
        "an interval needs op <, <=, > or >=" if rule.interval and rule.op not in ("<", "<=", ">", ">=") else "",
        _limit_problem("limit", rule.limit, rule.op),
        *_limits_problems(rule),
    ]
    return [p for p in problems if p]


def _limit_problem(name: str, value, op: str) -> str:
    """A limit must be a finite number (true/false only for == and !=) — not text a comparison would reject."""
    if isinstance(value, bool):
        return "" if op in ("==", "!=") else f"{name} must be a number, not {value!r}"
    if isinstance(value, int | float) and math.isfinite(value):
        return ""
    return f"{name} must be a finite number{' or true/false' if op in ('==', '!=') else ''}, not {value!r}"


def _limits_problems(rule: Rule) -> list[str]:
    if rule.limits is None:
        return []
    if rule.scope != "per_task_type":
        return ["limits (per task type) needs scope per_task_type"]
    if not isinstance(rule.limits, dict) or not rule.limits:
        return ["limits must be a non-empty mapping {task_type: limit}"]
    problems = []
    for task_type, value in rule.limits.items():
        if not isinstance(task_type, str) or not TASK_TYPE.match(task_type):
            problems.append(f"limits: {task_type!r} is not a task type name (lowercase letters, digits, _)")
        elif isinstance(value, bool) != isinstance(rule.limit, bool):
            problems.append(f"limits.{task_type} must be of the same kind as limit ({rule.limit!r}), not {value!r}")
        else:
            problems.append(_limit_problem(f"limits.{task_type}", value, rule.op))
    return problems


def _grain_problem(rule: Rule) -> str:
    if rule.metric in WINDOW_SIGNALS:
        return "" if rule.grain != "now" else f"{rule.metric} is read per window: grain 5m or 1d"
    if rule.metric.startswith("pipeline.") != (rule.grain == "now"):
        return "pipeline signals have grain `now`"
    return ""
