"""`routerscope whatif`: a candidate threshold (or a whole policy file) re-scored on a window's own live
traffic before it is pushed (docs/metrics.md §14, `routerscope/warehouse/analytics/whatif.py`), as a table or JSON, and
optionally
as a pre-push gate (`--fail-if`). Here: reading the candidates from the command line or a policy file,
and the text rendering."""

from __future__ import annotations

import math
import re

from msgspec.structs import asdict

from routerscope.core.errors import ConfigError

TASK_TYPE_HELP = "a task type (lower-case letters, digits, underscores)"
_TASK_TYPE = re.compile(r"[a-z][a-z0-9_]{0,63}")  # the event contract's task_type pattern


def _threshold(text: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{where}: {text!r} is not a number") from None
    if not math.isfinite(value) or not 0 <= value <= 1:
        raise ConfigError(f"{where}: {text!r} must be a threshold in [0, 1]")
    return value


def _task_type(text: str, where: str) -> str:
    if not _TASK_TYPE.fullmatch(text):
        raise ConfigError(f"{where}: {text!r} is not {TASK_TYPE_HELP}")
    return text


def parse_thresholds(text: str, task_types: list[str]) -> dict[str, float]:
    """`--threshold`: `0.85` for the one `--task-type`, or `short_reply=0.85,intent_classify=0.65`."""
    if "=" not in text:
        if len(task_types) != 1:
            raise ConfigError(
                f"--threshold {text!r}: name the task type, e.g. --task-type short_reply --threshold 0.85, "
                "or --threshold short_reply=0.85,intent_classify=0.65"
            )
        return {task_types[0]: _threshold(text.strip(), "--threshold")}
    found: dict[str, float] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        name, sep, value = part.partition("=")
        name = _task_type(name.strip(), "--threshold")
        if name in found:
            raise ConfigError(f"--threshold: {name} is given twice")
        found[name] = _threshold(value.strip(), f"--threshold {name}")
    if not found:
        raise ConfigError(f"--threshold {text!r}: give task_type=threshold pairs separated by commas")
    return found


def thresholds_from_policy(path: str) -> dict[str, float]:
    """The thresholds of a routing policy file (the format the router hot-reloads, validated the same
    way), for the task types the device may try (`supported: true`)."""
    from routerscope.router.policy import parse, read_policy_file  # deferred: start-up: YAML and the policy, ~20 ms

    text = read_policy_file(path, f"--policy {path}")
    policy = parse(text, f"--policy {path}")
    return {t: float(cap.threshold) for t, cap in sorted(policy.capabilities.items()) if cap.supported}


def candidates(task_types: list[str], threshold: str | None, policy: str | None) -> dict[str, float]:
    """The candidate threshold per task type: from the policy file, then `--threshold` over it; `--task-type`
    keeps only those task types."""
    task_types = [_task_type(t, "--task-type") for t in task_types]
    found = thresholds_from_policy(policy) if policy else {}
    if threshold is not None:
        found.update(parse_thresholds(threshold, task_types))
    if not found:
        raise ConfigError("give --threshold (e.g. --task-type short_reply --threshold 0.85) or --policy FILE")
    if task_types:
        missing = [t for t in task_types if t not in found]
        if missing:
            raise ConfigError(f"no candidate threshold for {', '.join(missing)} (not in --threshold or the policy)")
        found = {t: found[t] for t in task_types}
    return found


# Policy fields that change routing besides the threshold, which the what-if cannot re-score from recorded
# outcomes (docs/whatif.md): top level, and per capability entry.
ROUTING_FIELDS = ("pii_to_cloud", "l1_enabled", "commit_tokens", "device_concurrency", "shadow", "rollout", "breakers")
CAPABILITY_FIELDS = (
    "supported",
    "max_input_tokens",
    "max_output_tokens",
    "validator",
    "pattern",
    "tools",
    "single_file",
)


def _show(value) -> str:
    if isinstance(value, frozenset):
        value = sorted(value)
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def unrescorable(path: str, current) -> list[str]:
    """The changes of the policy file at `path` against `current` (the policy in force) that the what-if
    cannot re-score — PII routing, L1, concurrency, the commit point, shadow and rollout stages, breakers,
    and each capability's admission (supported, limits, validator, tools, single-file) — one line each, e.g.
    `pii_to_cloud: False → True`. Only the thresholds are re-scored."""
    from routerscope.router.policy import Capability, parse, read_policy_file  # deferred: start-up, ~20 ms

    candidate = parse(read_policy_file(path, f"--policy {path}"), f"--policy {path}")
    lines = []
    for name in ROUTING_FIELDS:
        old, new = getattr(current, name), getattr(candidate, name)
        if name == "breakers":
            old, new = {k: asdict(v) for k, v in old.items()}, {k: asdict(v) for k, v in new.items()}
        elif name == "rollout":
            old, new = {k: asdict(v) for k, v in old.items()}, {k: asdict(v) for k, v in new.items()}
        if old != new:
            lines.append(f"{name}: {_show(old)} → {_show(new)}")
    off = Capability(supported=False)
    for task_type in sorted(set(current.capabilities) | set(candidate.capabilities)):
        old, new = current.capabilities.get(task_type, off), candidate.capabilities.get(task_type, off)
        for field in CAPABILITY_FIELDS:
            a, b = getattr(old, field), getattr(new, field)
            if a != b:
                lines.append(f"capabilities.{task_type}.{field}: {_show(a)} → {_show(b)}")
    return lines


def check_known(thresholds: dict[str, float], known: set[str]) -> None:
    """Refuse a task type neither the warehouse nor the routing policy knows (a typo read as "no live events" and
    exited 0), naming the closest known one and the rest."""
    import difflib  # deferred: only on this check

    for task_type in thresholds:
        if task_type in known or not known:
            continue
        close = difflib.get_close_matches(task_type, sorted(known), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}? " if close else ""
        raise ConfigError(
            f"--task-type {task_type}: no such task type in the warehouse or the routing policy; {hint}"
            f"known: {', '.join(sorted(known))}"
        )
