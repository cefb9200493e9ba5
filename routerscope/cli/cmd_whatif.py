"""`routerscope whatif`: a candidate threshold (or a whole policy file) re-scored on a window's own live traffic
before it is pushed (docs/metrics.md §14, `routerscope/warehouse/analytics/whatif.py`), as a table or JSON, and
optionally as a pre-push gate (`--fail-if`, docs/whatif.md). Here: the command, and reading the candidates from the
command line or a policy file; the table is `render.whatif`."""

from __future__ import annotations

import argparse
import math
import re
import sys
from datetime import timedelta

from msgspec.structs import asdict

from routerscope.cli.common import parse_time, positive_int, print_json
from routerscope.core.errors import ConfigError
from routerscope.core.settings import Settings
from routerscope.warehouse.analytics import whatif
from routerscope.warehouse.sql import QueryWindow

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


def cmd_whatif(args, settings: Settings) -> int:
    from routerscope.cli import render  # deferred: start-up: the review's and what-if's words, ~0.05 s
    from routerscope.pipelines import core as units  # deferred: start-up: the router, ~0.1 s
    from routerscope.warehouse.analytics.review import review_window  # deferred: start-up: ~0.05 s

    thresholds = candidates(args.task_type, args.threshold, args.policy)
    not_rescored = []
    if args.policy:  # what the file changes besides thresholds: said, and the gate does not judge the file
        from routerscope.router.policy import PolicyStore  # deferred: start-up: YAML and the policy, ~20 ms

        not_rescored = unrescorable(args.policy, PolicyStore().current())
    try:
        conditions = [whatif.parse_gate(text) for text in args.fail_if]
    except ValueError as exc:
        raise ConfigError(f"--fail-if {exc}") from None
    start = parse_time(args.start, "--start") if args.start else None
    end = parse_time(args.end, "--end") if args.end else None
    if args.days > 3650:
        raise ConfigError(f"--days {args.days:g} is more than ten years")
    if start and end and end <= start:
        raise ConfigError(f"--end {args.end} must be after --start {args.start}")
    with units.unit_of_work(settings, purpose="whatif") as client:
        if end is None:  # by default the last --days full days of live traffic (as `report`)
            end = start + timedelta(days=args.days) if start else review_window(client, args.days).end
        start = start or end - timedelta(days=args.days)
        check_known(thresholds, _known_task_types(client))
        result = whatif.compute(client, QueryWindow(start, end), thresholds)
    if args.policy:
        result["not_rescored"] = not_rescored
    hits = whatif.gate(result, conditions, args.min_labeled) if conditions else None
    if args.json:
        print_json({**result, **({"gate": {"conditions": args.fail_if, "met": hits}} if conditions else {})})
    else:
        print(render.whatif(result, hits))
    for line in not_rescored:
        print(f"routerscope: warning: --policy changes {line}, which the what-if cannot re-score", file=sys.stderr)
    for t, task in result["by_task_type"].items():
        if task.get("self_check"):  # `current` must equal the metric set over the same events
            print(f"routerscope: warning: {t}: {'; '.join(task['self_check'])}", file=sys.stderr)
    if hits:
        return 1
    missing = whatif.unjudged(result, conditions, args.min_labeled) if conditions else []
    if conditions and not_rescored:  # a file whose routing changes the what-if cannot see is not judged
        missing += [f"--policy changes {line}" for line in not_rescored]
    if missing:  # a gate that could not judge fails closed, with its own code
        print(
            f"routerscope: the gate could not judge {'; '.join(missing)}: check the task type names and the window, "
            "or wait for labels",
            file=sys.stderr,
        )
        return WHATIF_UNJUDGED
    return 0


def _known_task_types(client) -> set[str]:
    """The task types the warehouse holds decisions or metric windows of, and the ones the policy in force names."""
    from routerscope.router.policy import PolicyStore  # deferred: start-up: YAML and the policy, ~20 ms
    from routerscope.warehouse.queries import metric_windows  # deferred: start-up
    from routerscope.warehouse.sql import named  # deferred: start-up

    # the decisions' own too: a task type loaded before its first metric window is known
    loaded = client.query(named("whatif_known_task_types", "SELECT DISTINCT task_type FROM $decisions")).result_rows
    return (
        set(metric_windows.task_types(client)) | {str(r[0]) for r in loaded} | set(PolicyStore().current().capabilities)
    )


WHATIF_UNJUDGED = 4  # `whatif --fail-if` exit code: something the gate asks about could not be judged


def _window_days(text: str) -> float:
    """A window length in days: finite, from one minute (a shorter one holds no whole millisecond of
    traffic, `1e-300` made an empty window) to ten years."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or not 1 / 1440 <= value <= 3650:
        raise argparse.ArgumentTypeError(f"{text!r} must be from one minute (0.0007) to ten years (3650) of days")
    return value


def add_commands(sub) -> None:
    """The commands of this module, on the `routerscope` parser's subparsers."""
    p = sub.add_parser(
        "whatif",
        help="re-score a window's live traffic under candidate thresholds before a push (exit 1: a --fail-if met)",
    )
    p.add_argument(
        "--task-type",
        action="append",
        default=[],
        metavar="T",
        help="the task type of a bare --threshold; with --policy, only these (repeatable)",
    )
    p.add_argument(
        "--threshold",
        metavar="X | T=X,T=X",
        help="the candidate threshold: 0.85 for the one --task-type, or short_reply=0.85,intent_classify=0.65",
    )
    p.add_argument(
        "--policy", metavar="FILE", help="read the candidates from this routing policy file (the router's format)"
    )
    p.add_argument("--start", help="window start, ISO 8601 (default: --days before --end)")
    p.add_argument("--end", help="window end (exclusive), ISO 8601 (default: the end of the newest live event's day)")
    p.add_argument(
        "--days",
        type=_window_days,
        default=7.0,
        help="window length when --start or --end is missing (default 7; one minute to ten years)",
    )
    p.add_argument(
        "--fail-if",
        action="append",
        default=[],
        metavar="COND",
        help='pre-push gate, e.g. "missed_fallback_rate.high>0.05" (docs/whatif.md): exit 1 when a candidate meets '
        "it, 4 when it cannot be judged (repeatable)",
    )
    p.add_argument(
        "--min-labeled",
        type=positive_int,
        default=30,
        metavar="N",
        help="a --fail-if on a labeled rate with fewer labels is not judged (exit 4; default 30)",
    )
    p.add_argument("--json", action="store_true", help="the what-if as JSON (docs/whatif.md)")
    p.set_defaults(func=cmd_whatif)
