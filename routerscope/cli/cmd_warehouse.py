"""The warehouse's upkeep and filling: `routerscope migrate` (pending migrations), `routerscope doctor` (detached
parts and torn mutation files, `routerscope/warehouse/doctor.py`) and `routerscope load` (the topics drained into
the tables, `routerscope/warehouse/ingest/loader.py`, then the finished 5-minute metric windows)."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timedelta

from routerscope.cli.common import float_at_least, positive_int, print_json
from routerscope.core import names
from routerscope.core.settings import Settings
from routerscope.core.timeutil import UTC
from routerscope.warehouse import doctor
from routerscope.warehouse.client import open_warehouse
from routerscope.warehouse.ingest import loader
from routerscope.warehouse.migrate import migrate


def cmd_migrate(args, settings: Settings) -> int:
    with open_warehouse(settings, purpose="migrate") as client:
        applied = migrate(client)
    print(f"applied {len(applied)} migration(s)" + (f": {', '.join(applied)}" if applied else "; up to date"))
    return 0


def cmd_doctor(args, settings: Settings) -> int:
    report = doctor.run(settings, repair=args.repair)
    if args.json:
        print_json(report.as_dict())
    else:
        for finding in report.findings:
            print(f"  {finding.line()}")
        if report.opened:
            print(f"the warehouse opens; rows: {', '.join(f'{t} {n}' for t, n in report.counts.items()) or 'none'}")
        else:
            print(f"the warehouse does not open: {report.open_error}")
        pending = [f for f in report.findings if not f.repaired]
        if pending and not args.repair:
            print(f"{len(pending)} finding(s); `routerscope doctor --repair` repairs what it safely can")
        elif not report.findings:
            print("nothing detached, no torn mutation file")
    return 0 if report.healthy else 1


def cmd_load(args, settings: Settings) -> int:
    # The ingest job's unit of work, called directly: the Dagster job around it (routerscope/pipelines/ingest.py,
    # what the daemon's schedule runs) records its run in an instance a command would throw away, and
    # importing Dagster and making that instance were most of what a load cost before its first event.

    since = datetime.now(UTC) - CATCH_UP_SLACK  # decisions stored from here on: their windows are computed after
    try:
        result = loader.load(
            settings,
            batch_size=args.batch_size,
            idle_timeout_s=args.idle_timeout,
            partitions=args.partitions or None,
            progress=loader.progress_bar(),
            wait=not args.no_wait,
        )
    except KeyboardInterrupt:
        print(
            "\nrouterscope load: stopped (Ctrl-C); the batches written before are stored with their positions, "
            "so the next `routerscope load` resumes there",
            file=sys.stderr,
        )
        return 130
    summary = result.as_dict()
    windows = None if args.no_windows or args.partitions else _catch_up_windows(settings, since)
    if windows is not None:
        summary["windows_5m"] = len(windows)
    if args.json:
        print_json(summary)
        return 0
    seconds = result.seconds
    for short in names.TOPICS:
        print(f"{short:<10} loaded {summary['loaded'][short]:>9}   quarantined {summary['quarantined'][short]:>7}")
    otlp = summary.get("otlp")
    if otlp:  # the OTLP topic's traces, mapped into decisions before the load (docs/otlp.md)
        print(
            f"{'otlp':<10} traces {otlp['traces']:>9}   mapped {otlp['mapped']:>12}   "
            f"quarantined {sum(otlp['quarantined'].values()):>7}"
        )
    if windows:
        print(
            f"{'windows':<10} 5-minute {len(windows):>7}   "
            f"latest ending {windows[-1] + timedelta(minutes=5):%Y-%m-%d %H:%M} UTC"
        )
    total_q = sum(summary["quarantined"].values())
    print(
        f"done in {seconds:.1f} s"
        + (f"; see the quarantined messages and their broken rules in {names.DATABASE}.quarantine" if total_q else "")
    )
    return 0


CATCH_UP_SLACK = timedelta(minutes=1)  # windows of decisions stored just before a load began are recomputed too


def _catch_up_windows(settings: Settings, since) -> list:
    """The finished 5-minute windows brought up to date after a load (docs/otlp.md, "Windows without the
    daemon"): a failure is a warning, never the load's failure (its rows are stored)."""
    from routerscope.pipelines import core as units  # deferred: the metric modules, only once something loaded

    try:
        return units.catch_up_windows(settings, since)
    except Exception as exc:  # noqa: BLE001 - the load is done and stored: a window that failed is a warning
        print(
            f"routerscope load: warning: the metric windows were not brought up to date "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
            "run `routerscope load` again, or let the Dagster daemon compute them",
            file=sys.stderr,
        )
        return []


def _partition_list(text: str) -> list[int]:
    try:
        values = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give partition numbers separated by commas, e.g. 0,2") from None
    if not values or values[0] < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give partition numbers separated by commas, e.g. 0,2")
    if values[-1] > MAX_PARTITION:
        raise argparse.ArgumentTypeError(f"partition {values[-1]} is past Kafka's largest, {MAX_PARTITION}")
    return values


MAX_PARTITION = 2**31 - 2  # Kafka numbers partitions with a signed 32-bit int


def add_commands(sub) -> None:
    """The commands of this module, on the `routerscope` parser's subparsers."""
    p = sub.add_parser("migrate", help="apply pending warehouse migrations")
    p.set_defaults(func=cmd_migrate)

    p = sub.add_parser("doctor", help="find (and with --repair mend) detached parts and torn mutation files")
    p.add_argument("--repair", action="store_true", help="move torn mutation files aside, re-attach detached parts")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("load", help="drain the topics into the warehouse (the ingest job's unit of work, once)")
    p.add_argument("--json", action="store_true", help="print the loaded and quarantined counts as JSON")

    p.add_argument(
        "--batch-size",
        type=positive_int,
        default=loader.DEFAULT_BATCH_SIZE,
        help=f"rows per insert (default {loader.DEFAULT_BATCH_SIZE})",
    )
    p.add_argument(
        "--idle-timeout",
        type=float_at_least(0, strictly=True),
        default=loader.DEFAULT_IDLE_TIMEOUT_S,
        help=f"seconds without a message that count as drained (default {loader.DEFAULT_IDLE_TIMEOUT_S:g})",
    )
    p.add_argument(
        "--partitions",
        type=_partition_list,
        default=[],
        metavar="P,P,...",
        help="load only these Kafka partitions of each topic (one loader per partition set; default all)",
    )
    p.add_argument(
        "--no-wait",
        action="store_true",
        help="when another load is running on this warehouse, exit at once with code 75 instead of waiting for it",
    )
    p.add_argument(
        "--no-windows",
        action="store_true",
        help="do not compute the finished 5-minute metric windows after the load (by default those of the last "
        "day that new data touched, and every one since the newest stored: docs/otlp.md)",
    )
    p.set_defaults(func=cmd_load)
