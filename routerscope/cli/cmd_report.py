"""`routerscope report grading|readiness|rollout`: the weekly review's reports (docs/metrics.md §12, §13 and
the stage tracker of docs/sources.md#seed-004-7), as JSON (the contract) or readable tables.

The routing policy read is the router's own (`ROUTERSCOPE_POLICY`, else the default policy): the review
judges task types against the capability matrix, error costs, device tiers and stages actually in force."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from routerscope.cli.common import float_at_least, parse_time, print_json
from routerscope.core.errors import ConfigError
from routerscope.core.settings import Settings
from routerscope.warehouse.client import open_warehouse

KINDS = ("grading", "readiness", "rollout")


def build(kind: str, settings: Settings, days: float = 7.0, end: datetime | None = None) -> dict[str, Any]:
    """The report of `kind` over the review window (`days` full days ending at `end`, by default at the
    end of the newest live event's day): one part of the weekly review the tuning page shows
    (`routerscope.warehouse.analytics.review.weekly_review`)."""
    from routerscope.router.policy import PolicyStore  # deferred: start-up: YAML and the policy, ~20 ms
    from routerscope.warehouse.analytics import review  # deferred: start-up, ~0.05 s: the parser imports KINDS

    store = PolicyStore()
    policy = store.current()
    declared = review.declared_streamable(store.path)  # an explicit `streamable` (the parsed policy cannot tell)
    with open_warehouse(settings, purpose=f"report {kind}", migrated=True) as client:
        window = review.review_window(client, days, end)
        week = review.weekly_review(client, policy, window, settings.home, declared)
    if kind == "grading":
        return week["grading"]
    if kind == "readiness":
        return {**week["readiness"], "beside_grading": week["side_by_side"]}
    return {**week["rollout"], "divergence_samples": week["divergences"]}


def cmd_report(args, settings: Settings) -> int:
    from routerscope.cli import render  # deferred: start-up: the review's and what-if's words, ~0.05 s

    end = parse_time(args.end, "--end") if args.end else None
    if args.days > 3650:
        raise ConfigError(f"--days {args.days:g} is more than ten years")
    report = build(args.kind, settings, days=args.days, end=end)
    print_json(report) if args.json else print(render.review(args.kind, report))
    return 0


def add_commands(sub) -> None:
    """The commands of this module, on the `routerscope` parser's subparsers."""
    p = sub.add_parser("report", help="the weekly review: task grading, offload readiness, rollout stages")
    p.add_argument("kind", choices=KINDS)
    p.add_argument("--json", action="store_true")
    p.add_argument("--days", type=float_at_least(1), default=7.0, help="review window in days (default 7)")
    p.add_argument("--end", help="window end, ISO 8601 (default: the end of the newest live event's day)")
    p.set_defaults(func=cmd_report)
