"""`routerscope metrics`: the metrics of docs/metrics.md for a window [start, end), as a table or JSON, computed
by the metric assets' unit of work (`routerscope.pipelines.core.metrics_window`) and not stored."""

from __future__ import annotations

from routerscope.cli.common import float_at_least, parse_time, positive_int, print_json
from routerscope.core.errors import ConfigError
from routerscope.core.settings import Settings
from routerscope.warehouse.analytics import metrics as metric_defaults


def cmd_metrics(args, settings: Settings) -> int:
    from routerscope.cli import render  # deferred: start-up: the review's and what-if's words, ~0.05 s
    from routerscope.pipelines import core as units  # deferred: start-up: the router, ~0.1 s

    start, end = parse_time(args.start, "--start"), parse_time(args.end, "--end")
    if end <= start:
        raise ConfigError(f"--end {args.end} must be after --start {args.start}")
    if not 0 < args.target <= 1:
        raise ConfigError(f"--target {args.target} must be a pass rate in (0, 1]")
    if args.baseline_days > 3650:
        raise ConfigError(f"--baseline-days {args.baseline_days:g} is more than ten years")
    if args.baseline_days * 1440 < 1:
        raise ConfigError(f"--baseline-days {args.baseline_days:g} is shorter than a minute (0.0007 days)")
    params = units.MetricParams(baseline_days=args.baseline_days, target=args.target, min_n=args.min_n)
    result, _ = units.metrics_window(settings, start, end, params)  # the metric assets' unit of work, not stored
    if args.json:
        print_json(result)
    else:
        print(render.metrics_table(result))
    return 0


def add_commands(sub) -> None:
    """The commands of this module, on the `routerscope` parser's subparsers."""
    p = sub.add_parser("metrics", help="print the metrics of docs/metrics.md for a window [start, end)")
    p.add_argument("--start", required=True, help="window start, ISO 8601 (UTC if no zone)")
    p.add_argument("--end", required=True, help="window end (exclusive), ISO 8601")
    p.add_argument("--json", action="store_true", help="the JSON of docs/metrics.md")

    p.add_argument(
        "--baseline-days",
        type=float_at_least(0, strictly=True),
        default=metric_defaults.DEFAULT_BASELINE_DAYS,
        help="L2/L3 drift baseline: days before --start",
    )
    p.add_argument(
        "--target",
        type=float_at_least(0, strictly=True),
        default=metric_defaults.DEFAULT_TARGET,
        help="target pass rate for the threshold recommendation",
    )
    p.add_argument(
        "--min-n",
        type=positive_int,
        default=metric_defaults.DEFAULT_MIN_N,
        help="minimum events behind a recommended threshold",
    )
    p.set_defaults(func=cmd_metrics)
