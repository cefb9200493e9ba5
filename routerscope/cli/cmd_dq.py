"""`routerscope dq`: the data-quality suites on one day (the data_quality asset's unit of work,
`routerscope.pipelines.core.quality_window`): exit 1 on a blocking failure, 4 when there was nothing to check."""

from __future__ import annotations

import sys
from datetime import timedelta

from routerscope.cli.common import parse_time, print_json
from routerscope.core.settings import Settings

DQ_NOTHING_CHECKED = 4  # `dq` exit code: the window held no rows, every check was skipped (not an all-clear)


def cmd_dq(args, settings: Settings) -> int:
    from routerscope.pipelines import core as units  # deferred: start-up: the router, ~0.1 s
    from routerscope.warehouse.analytics.quality.report import SKIPPED  # deferred: start-up: ~20 ms

    start = end = None
    if args.day:
        start = parse_time(args.day, "--day")
        end = start + timedelta(days=1)
    print("routerscope: running the data-quality suites (Great Expectations: ~10 s) …", file=sys.stderr, flush=True)
    report = units.quality_window(settings, start, end)  # the data_quality asset's unit of work (default thresholds)
    if args.json:
        print_json(report.as_dict())
    else:
        print(f"data quality of [{report.window_start.isoformat()}, {report.window_end.isoformat()})")
        for r in report.results:
            status = "skip" if r.observed == SKIPPED else "ok  " if r.success else ("FAIL" if r.blocking else "warn")
            detail = "" if r.success else f"  {r.unexpected_count} unexpected of {r.element_count}"
            sample = f"  e.g. {', '.join(r.sample_ids[:3])}" if r.sample_ids and not r.success else ""
            print(f"  {status} {r.check}{detail}{sample}")
        failures = report.blocking_failures
        checks = f"{len(report.results)} checks ({sum(r.observed == SKIPPED for r in report.results)} skipped)"
        # the words of the Data quality page: blocking failures (FAIL) and warnings (warn, failed but not blocking)
        warned = len(report.failed()) - len(failures)
        warnings = f"{warned} warning{'' if warned == 1 else 's'}"
        print(
            f"{checks}, {len(failures)} blocking failure{'' if len(failures) == 1 else 's'} (metrics for this window "
            f"are held back), {warnings}; data docs: {report.docs_index}"
            if failures
            else f"{checks}, {warnings}, no blocking failure; data docs: {report.docs_index}"
        )
    if report.checked_nothing:
        print(
            "routerscope: nothing was checked: no events in this window. Load events first (`routerscope load`) "
            "or name a day that has some (`--day YYYY-MM-DD`).",
            file=sys.stderr,
        )
        return DQ_NOTHING_CHECKED
    return 1 if report.blocking_failures else 0


def add_commands(sub) -> None:
    """The commands of this module, on the `routerscope` parser's subparsers."""
    p = sub.add_parser(
        "dq",
        help="run the data-quality suites on the latest day (exit 1 on a blocking failure, 4 when there was "
        "nothing to check)",
    )
    p.add_argument("--json", action="store_true", help="every check's result as JSON")
    p.add_argument("--day", help="the UTC day to check, e.g. 2026-11-29 (default: the day of the newest event)")
    p.set_defaults(func=cmd_dq)
