"""The `routerscope` command line (docs/architecture.md §6): the entry point. Every command lives in a module of
its own (or of its group), which registers its parser with `add_commands(sub)`; `COMMANDS` lists them in the order
`routerscope --help` shows them. Every command reads the same settings.

Errors the user can act on are printed as one line (`routerscope: error: ...`), never a traceback: here, for
every command.

`routerscope --help` builds every command's parser, so a command module imports its work (the demo, the units of
work of `routerscope.pipelines.core`, kafka-python) when the command runs, not at the top."""

from __future__ import annotations

import argparse
import sys

from routerscope import __version__
from routerscope.cli import (
    cmd_alerts,
    cmd_broker,
    cmd_collect,
    cmd_dashboard,
    cmd_demo,
    cmd_dq,
    cmd_metrics,
    cmd_oncall,
    cmd_report,
    cmd_review,
    cmd_warehouse,
    cmd_whatif,
    loop,
)
from routerscope.core import interrupts
from routerscope.core.errors import RouterscopeError, full_disk_error, is_full_disk
from routerscope.core.extras import missing_extra
from routerscope.core.settings import Settings
from routerscope.warehouse.client import damage_error, damaged, outage, outage_error

# The command modules, in the order of `routerscope --help`: demo and simulate; broker and produce; migrate, doctor
# and load; metrics; whatif; dq; alerts; report; dashboard; collect; exporter and rules; review; loop.
COMMANDS = (
    cmd_demo,
    cmd_broker,
    cmd_warehouse,
    cmd_metrics,
    cmd_whatif,
    cmd_dq,
    cmd_alerts,
    cmd_report,
    cmd_dashboard,
    cmd_collect,
    cmd_oncall,
    cmd_review,
    loop,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="routerscope", description="Observability for a hybrid LLM router.")
    parser.add_argument("--version", action="version", version=f"routerscope {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        module.add_commands(sub)
    return parser


def _doing(args) -> str:
    return (
        "`routerscope " + " ".join(filter(None, (getattr(args, "command", None), getattr(args, "action", None)))) + "`"
    )


def _missing_extra(part: str, exc: ImportError) -> int:
    """A part whose extra is not installed: one line naming the extra (a traceback for any other import)."""
    missing = missing_extra(part, exc)
    if missing is None:
        raise exc
    print(f"routerscope: error: {missing}", file=sys.stderr)
    return missing.exit_code


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()  # the options' defaults come from the loader and the metrics: the [pipeline] extra
    except ImportError as exc:
        return _missing_extra("the `routerscope` command", exc)
    args = parser.parse_args(argv)
    settings = None
    interrupts.remember_ctrl_c()  # a Ctrl-C Python swallows still stops the long loops (core/interrupts.py)
    try:
        settings = Settings.from_env()
        return args.func(args, settings)
    except ImportError as exc:  # before RouterscopeError: a MissingExtra is both, and is said naming the command
        return _missing_extra(_doing(args), exc)
    except RouterscopeError as exc:  # exit 2 for a bad setting, 75 for a load that would have to wait, else 1
        print(f"routerscope: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:  # an unreadable home, a full disk, a file that vanished: say which
        if is_full_disk(exc) and settings is not None:
            print(f"routerscope: error: {full_disk_error(settings.home, exc, _doing(args))}", file=sys.stderr)
            return 1
        where = f": {exc.filename}" if exc.filename else ""
        print(
            f"routerscope: error: {exc.strerror or exc}{where} (check ROUTERSCOPE_HOME and its permissions)",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        print("routerscope: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a fault of the warehouse (its disk full, out of memory, gone): one line
        if settings is not None and is_full_disk(exc):  # SQLite's "database or disk is full", and the like
            print(f"routerscope: error: {full_disk_error(settings.home, exc, _doing(args))}", file=sys.stderr)
            return 1
        if settings is not None and damaged(exc):  # a checksum that fails at query time: one line naming doctor
            print(f"routerscope: error: {damage_error(exc)}", file=sys.stderr)
            return 1
        if settings is None or not outage(exc):
            raise
        print(f"routerscope: error: {outage_error(settings, exc, 'the warehouse')}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
