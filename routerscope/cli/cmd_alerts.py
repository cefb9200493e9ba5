"""`routerscope alerts`: the firing and recently resolved alerts as stored, or evaluated now with `--evaluate` (the
alerts job's unit of work), beside the rollback verdicts `report rollout` reads."""

from __future__ import annotations

import sys
from datetime import datetime

from routerscope.cli.common import float_at_least, parse_time, print_json
from routerscope.core.errors import ConfigError
from routerscope.core.settings import Settings


def _rollback_verdicts(settings: Settings, days: float, end: datetime | None) -> dict:
    """The rollback verdicts over the review window (`days` full days ending at `end`), read from the stored
    episodes exactly as `report rollout` reads them (`routerscope.warehouse.analytics.rollback`): a verdict whose
    episode resolved in the window was absent from `alerts --json` (it read only what was firing) while the
    report said "ROLL BACK" for it."""
    from routerscope.pipelines import core as units  # deferred: start-up: the router, ~0.1 s
    from routerscope.warehouse.analytics import rollback  # deferred: start-up
    from routerscope.warehouse.analytics.review import review_window  # deferred: start-up: ~0.05 s

    with units.unit_of_work(settings, purpose="alerts (rollback verdicts)") as client:
        window = review_window(client, days, end)
        states = rollback.rollback_states(client, window.start, window.end)
    return {
        "rollback_window": {
            "start": window.start.isoformat().replace("+00:00", "Z"),
            "end": window.end.isoformat().replace("+00:00", "Z"),
            "days": days,
        },
        "rollback_states": {t: s.public() for t, s in sorted(states.items())},
    }


def cmd_alerts(args, settings: Settings) -> int:
    from routerscope.pipelines import core as units  # deferred: start-up: the router, ~0.1 s

    if args.new_rules and not args.evaluate:
        raise ConfigError("--new-rules only applies with --evaluate")
    if args.evaluate:  # the alerts job's unit of work: writes episodes, under the rules the warehouse was judged with
        warn = lambda text: print(f"routerscope: WARNING: {text}", file=sys.stderr)  # noqa: E731
        result = units.evaluate_alerts(settings, by="cli", rules_as_recorded=True, new_rules=args.new_rules, warn=warn)
    else:  # reads only: what the pipeline's own evaluations stored
        result = units.stored_alerts(settings)
    verdicts = _rollback_verdicts(settings, args.days, parse_time(args.end, "--end") if args.end else None)
    if args.json:
        print_json({**result.as_dict(), "evaluated": bool(args.evaluate), **verdicts})
        return 0
    stamp = result.as_dict()["evaluated_at"]
    if args.evaluate:
        print(f"alerts evaluated at {stamp} (rules {result.rule_version})")
    elif result.rule_version:
        print(
            f"alerts as stored, last evaluated as of {stamp} (rules {result.rule_version}); "
            "`routerscope alerts --evaluate` evaluates now"
        )
    else:
        print("alerts as stored: never evaluated here; `routerscope alerts --evaluate` evaluates now")
    if not result.firing:
        print("  nothing firing")
    for a in result.firing:
        new = "NEW " if a in result.fired else ""
        rollback = "  → ROLLBACK RECOMMENDED" if a.action == "rollback" else ""
        print(
            f"  {new}FIRING [{a.severity}] {a.summary} ({a.task_type or 'overall'}) "
            f"since {a.first_seen:%Y-%m-%d %H:%M}{rollback}"
        )
    evidence = result.rollback_evidence()
    for task_type, signals in result.rollback_recommended().items():
        named = [_evidence(signal, evidence.get(task_type, {}).get(signal, {})) for signal in signals]
        print(f"  ROLLBACK RECOMMENDED: {task_type} back to the cloud ({', '.join(named)})")
    for a in result.recently_resolved:
        print(f"  resolved [{a.severity}] {a.summary} ({a.task_type or 'overall'}) at {a.resolved_at:%Y-%m-%d %H:%M}")
    window = verdicts["rollback_window"]
    for task_type, state in verdicts["rollback_states"].items():
        if not state["firing"]:  # the firing ones are said above; a resolved one as `report rollout` reads it
            print(f"  rollback verdict {window['start']} → {window['end']}: {task_type}: {state['words']}")
    if result.delivery_failures:
        print(
            f"routerscope: warning: {result.delivery_failures} notification(s) could not be delivered to "
            "ROUTERSCOPE_ALERT_WEBHOOK; they stay pending and are retried at the next evaluation",
            file=sys.stderr,
        )
    return 0


def _evidence(signal: str, latest: dict) -> str:
    """`degrade_trigger_rate 0.31 [0.18, 0.47] n=36`: a rollback signal's latest value and 95 % interval."""
    value, interval = latest.get("value"), latest.get("interval")
    if value is None:
        return signal
    text = f"{signal} {value:.2f}" + (f" [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else "")
    return text + (f" n={latest['n']}" if latest.get("n") is not None else "")


def add_commands(sub) -> None:
    """The commands of this module, on the `routerscope` parser's subparsers."""
    p = sub.add_parser(
        "alerts",
        help="list firing and recently resolved alerts as stored (reads only); --evaluate evaluates the rules now",
    )
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--evaluate",
        action="store_true",
        help="evaluate the rules now and store what fires or resolves, under the rules this warehouse was judged "
        "with (as the alerts job does)",
    )
    p.add_argument(
        "--new-rules",
        action="store_true",
        help="with --evaluate: judge with ROUTERSCOPE_ALERT_RULES (or the defaults) even though the warehouse was "
        "judged with other rules",
    )
    p.add_argument(
        "--days",
        type=float_at_least(1),
        default=7.0,
        help="the rollback verdicts' window in days, as `report rollout` reads it (default 7)",
    )
    p.add_argument("--end", help="that window's end, ISO 8601 (default: the end of the newest live event's day)")
    p.set_defaults(func=cmd_alerts)
