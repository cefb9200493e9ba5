"""The `routerscope` command line (docs/architecture.md §6). Every command reads the same settings.

Errors the user can act on are printed as one line (`routerscope: error: ...`), never a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import subprocess
import sys
import webbrowser
from datetime import UTC, datetime, timedelta
from pathlib import Path

from routerscope import __version__
from routerscope.cli import labels_review, loop, oncall, review
from routerscope.cli import whatif as whatif_cli
from routerscope.cli.interrupt import Terminated, stop_on_term
from routerscope.contract.validation import EVENT_TIME_MAX, EVENT_TIME_MIN
from routerscope.core import broker, names, procs
from routerscope.core.errors import BrokerUnavailable, ConfigError, RouterscopeError, full_disk_error, is_full_disk
from routerscope.core.extras import missing_extra
from routerscope.core.kafka import ensure_topics, librdkafka_config
from routerscope.core.settings import Settings
from routerscope.core.text import counts, estimate, pct
from routerscope.core.timeutil import parse_utc
from routerscope.instrumentation import pii
from routerscope.warehouse import doctor
from routerscope.warehouse.analytics import metrics as metric_defaults
from routerscope.warehouse.analytics import whatif
from routerscope.warehouse.analytics.stats import LOW_COVERAGE
from routerscope.warehouse.client import damage_error, damaged, open_warehouse, outage, outage_error
from routerscope.warehouse.ingest import loader
from routerscope.warehouse.migrate import migrate
from routerscope.warehouse.sql import QueryWindow


def _print_json(obj) -> None:
    print(json.dumps(obj, indent=2, sort_keys=False))


# -- commands -------------------------------------------------------------------------------------
def cmd_broker(args, settings: Settings) -> int:
    if args.action == "start":
        if settings.kafka_bootstrap_env:
            print(
                f"ROUTERSCOPE_KAFKA_BOOTSTRAP={settings.kafka_bootstrap_env} is set: commands use that "
                "broker; starting a local one anyway for this home.",
                file=sys.stderr,
            )
        already = broker.status(settings).running
        st = broker.start(settings, port=args.port)
        print(st.bootstrap)
        print(
            f"broker {'already running' if already else 'started'} (pid {st.pid}, log {st.log}); "
            f"topics: {', '.join(names.TOPICS.values())}",
            file=sys.stderr,
        )
        return 0
    if args.action == "stop":
        stopped = broker.stop(settings)
        print("broker stopped" if stopped else "no broker was running for this home")
        return 0
    st = broker.status(settings)
    if args.json:
        _print_json(st.as_dict())
    elif st.running:
        print(f"running at {st.bootstrap} (pid {st.pid}, log {st.log})")
    else:
        print(f"not running (home {settings.home})")
    return 0 if st.running else 3


def cmd_produce(args, settings: Settings) -> int:
    from routerscope.cli.produce import produce_file  # deferred: start-up: kafka-python, ~0.07 s to import

    path = Path(args.file)
    if not path.is_file():
        raise RouterscopeError(f"no such file: {path}")
    result = produce_file(settings, path, args.topic, show_progress=not args.quiet)
    print(
        f"produced {result.sent} message(s) to {result.topic}"
        + (f" ({result.unkeyed} without a key: not a JSON object with its key field)" if result.unkeyed else "")
    )
    if result.failed:
        print(
            f"routerscope: error: {result.failed} line(s) were not published: {'; '.join(result.errors)}",
            file=sys.stderr,
        )
        return 1
    return 0


def cmd_migrate(args, settings: Settings) -> int:
    with open_warehouse(settings, purpose="migrate") as client:
        applied = migrate(client)
    print(f"applied {len(applied)} migration(s)" + (f": {', '.join(applied)}" if applied else "; up to date"))
    return 0


def cmd_doctor(args, settings: Settings) -> int:
    report = doctor.run(settings, repair=args.repair)
    if args.json:
        _print_json(report.as_dict())
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
        _print_json(summary)
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


def cmd_collect(args, settings: Settings) -> int:
    """The OTLP/HTTP receiver: GenAI spans in, one Kafka message per trace out (docs/otlp.md)."""
    from routerscope.instrumentation.otlp.mapping import Mapping, MappingError  # deferred: as the receiver
    from routerscope.instrumentation.otlp.receiver import Receiver  # deferred: start-up: protobuf, ~25 ms

    try:
        ensure_topics(settings)  # the OTLP topic among them
    except BrokerUnavailable as exc:  # spans are taken all the same: they wait on disk for the broker
        print(
            f"routerscope collect: warning: {str(exc).splitlines()[0]}; spans are taken and wait on disk until a "
            "broker answers there (with its topics: `routerscope broker start` creates them)",
            file=sys.stderr,
            flush=True,
        )
    pii.configure(settings.home)  # values that look personal are hashed on the way in, as the loader would
    try:  # span names a task rule of the mapping file reads are kept (docs/otlp.md)
        mapping = Mapping.load(settings.otlp_mapping)
    except MappingError as exc:
        raise ConfigError(f"{exc}; fix the file named by ROUTERSCOPE_OTLP_MAPPING") from None
    globs = tuple(r.span_name for r in mapping.task_rules if r.span_name)
    directory = settings.home / "collect"
    try:
        receiver = Receiver.open(
            librdkafka_config(settings),
            settings.otlp_topic,
            directory,
            host=args.host,
            port=args.port,
            trace_wait_s=args.trace_wait,
            span_name_globs=globs,
            max_backlog=int(args.max_backlog_mb * 1024 * 1024),
            fsync_interval_s=args.fsync_interval,
        )
    except OSError as exc:
        if exc.filename:
            raise ConfigError(f"cannot use {exc.filename}: {exc.strerror or exc}") from None
        raise ConfigError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    stop_on_term()
    print(
        f"routerscope collect: OTLP/HTTP on http://{args.host}:{receiver.port}/v1/traces "
        f"-> Kafka topic {settings.otlp_topic} at {settings.kafka_bootstrap()}"
        + (f" ({receiver.recovered} traces still waiting from the last run)" if receiver.recovered else ""),
        flush=True,
    )
    try:
        receiver.serve_forever()
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (Terminated)
        pass
    finally:
        stats = receiver.close()
        left = stats.get("undelivered_at_exit", 0)
        print(
            f"routerscope collect: stopped; {stats['spans_in']} spans in, {stats['spans_out']} written in "
            f"{stats['traces_out']} traces, {stats['spans_rejected']} refused, {left} messages undelivered"
            + (f" (kept in {directory / 'outbox'}, sent at the next start)" if left else "")
            + (
                f", {stats['held_at_exit']} spans still waiting (kept for the next start)"
                if stats["held_at_exit"]
                else ""
            )
            + f"; not on the allow-list: {stats['dropped_attributes']} attributes, {stats['dropped_values']} values, "
            f"{stats['dropped_names']} span names, {stats['dropped_events']} span events",
            file=sys.stderr,
        )
    return 0


def _parse_time(text: str, flag: str):
    """An ISO 8601 time (UTC when it has no zone) within the warehouse's DateTime64 range."""
    try:
        value = parse_utc(text)
        in_range = EVENT_TIME_MIN <= value <= EVENT_TIME_MAX.replace(hour=0, minute=0, second=0, microsecond=0)
    except (ValueError, OverflowError):
        raise ConfigError(f"{flag} {text!r} is not an ISO 8601 time, e.g. 2026-11-29T00:00:00Z") from None
    if not in_range:
        raise ConfigError(f"{flag} {text!r} is outside the times the warehouse stores (years 1900 to 2299)")
    return value


def cmd_metrics(args, settings: Settings) -> int:
    from routerscope.cli import render  # deferred: start-up: the review's and what-if's words, ~0.05 s
    from routerscope.pipelines import core as units  # deferred: start-up: the router, ~0.1 s

    start, end = _parse_time(args.start, "--start"), _parse_time(args.end, "--end")
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
        _print_json(result)
    else:
        print(render.metrics_table(result))
    return 0


def cmd_whatif(args, settings: Settings) -> int:
    from routerscope.cli import render  # deferred: start-up: the review's and what-if's words, ~0.05 s
    from routerscope.pipelines import core as units  # deferred: start-up: the router, ~0.1 s
    from routerscope.warehouse.analytics.review import review_window  # deferred: start-up: ~0.05 s

    thresholds = whatif_cli.candidates(args.task_type, args.threshold, args.policy)
    not_rescored = []
    if args.policy:  # what the file changes besides thresholds: said, and the gate does not judge the file
        from routerscope.router.policy import PolicyStore  # deferred: start-up: YAML and the policy, ~20 ms

        not_rescored = whatif_cli.unrescorable(args.policy, PolicyStore().current())
    try:
        conditions = [whatif.parse_gate(text) for text in args.fail_if]
    except ValueError as exc:
        raise ConfigError(f"--fail-if {exc}") from None
    start = _parse_time(args.start, "--start") if args.start else None
    end = _parse_time(args.end, "--end") if args.end else None
    if args.days > 3650:
        raise ConfigError(f"--days {args.days:g} is more than ten years")
    if start and end and end <= start:
        raise ConfigError(f"--end {args.end} must be after --start {args.start}")
    with units.unit_of_work(settings, purpose="whatif") as client:
        if end is None:  # by default the last --days full days of live traffic (as `report`)
            end = start + timedelta(days=args.days) if start else review_window(client, args.days).end
        start = start or end - timedelta(days=args.days)
        whatif_cli.check_known(thresholds, _known_task_types(client))
        result = whatif.compute(client, QueryWindow(start, end), thresholds)
    if args.policy:
        result["not_rescored"] = not_rescored
    hits = whatif.gate(result, conditions, args.min_labeled) if conditions else None
    if args.json:
        _print_json({**result, **({"gate": {"conditions": args.fail_if, "met": hits}} if conditions else {})})
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


DQ_NOTHING_CHECKED = 4  # `dq` exit code: the window held no rows, every check was skipped (not an all-clear)


def cmd_dq(args, settings: Settings) -> int:
    from routerscope.pipelines import core as units  # deferred: start-up: the router, ~0.1 s
    from routerscope.warehouse.analytics.quality.report import SKIPPED  # deferred: start-up: ~20 ms

    start = end = None
    if args.day:
        start = _parse_time(args.day, "--day")
        end = start + timedelta(days=1)
    print("routerscope: running the data-quality suites (Great Expectations: ~10 s) …", file=sys.stderr, flush=True)
    report = units.quality_window(settings, start, end)  # the data_quality asset's unit of work (default thresholds)
    if args.json:
        _print_json(report.as_dict())
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
    verdicts = _rollback_verdicts(settings, args.days, _parse_time(args.end, "--end") if args.end else None)
    if args.json:
        _print_json({**result.as_dict(), "evaluated": bool(args.evaluate), **verdicts})
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


def cmd_report(args, settings: Settings) -> int:
    from routerscope.cli import render  # deferred: start-up: the review's and what-if's words, ~0.05 s

    end = _parse_time(args.end, "--end") if args.end else None
    if args.days > 3650:
        raise ConfigError(f"--days {args.days:g} is more than ten years")
    report = review.build(args.kind, settings, days=args.days, end=end)
    _print_json(report) if args.json else print(render.review(args.kind, report))
    return 0


def cmd_simulate(args, settings: Settings) -> int:
    from routerscope.cli import demo  # deferred: start-up: the router, the simulator and the units of work, ~0.2 s

    sim = demo.simulate(settings, args.requests, args.seed, timedelta(minutes=args.span_minutes), corrupt=args.corrupt)
    print(
        f"SIMULATED fleet: {sim['requests']} requests, {sim['labels']} labels, {sim['corrupt']} corrupted messages "
        f"from {sim['start']:%Y-%m-%d %H:%M} to {sim['end']:%H:%M} UTC; delivered {sim['delivered']}, "
        f"spooled {sim['spooled']}, dropped {sim['dropped']}"
    )
    return 0


def cmd_demo(args, settings: Settings) -> int:
    from routerscope.cli import demo  # deferred: start-up: the router, the simulator and the units of work, ~0.2 s

    own_rules = settings.alert_rules is not None
    settings = demo.fleet_settings(settings)
    print("routerscope demo — a SIMULATED fleet through the real router, end to end")
    print(f"  home:      {settings.home}")
    print(f"  warehouse: {settings.warehouse.redacted()}")
    print(
        f"  alert rules: {settings.alert_rules}"
        + ("" if own_rules else " (the simulated fleet's per task type limits; ROUTERSCOPE_ALERT_RULES picks others)"),
        flush=True,
    )
    stop_on_term()
    try:
        out = demo.run(
            settings,
            requests=args.requests,
            seed=args.seed,
            port=args.port,
            span_minutes=args.span_minutes,
            live_requests=args.live_sample,
            fresh=args.fresh,
        )
    except KeyboardInterrupt as stop:
        how = "SIGTERM" if isinstance(stop, Terminated) else "Ctrl-C"
        print(
            f"\nrouterscope demo: stopped ({how}). Events already routed were sent to Kafka or spooled under "
            f"{settings.spool_path}; loaded rows and the loader's positions are stored, so running "
            "`routerscope demo` again continues from here. The local broker keeps running (`routerscope broker stop`).",
            file=sys.stderr,
        )
        return 130
    s = out["summary"]["overall"]
    print(f"  kafka:     {out['kafka']}")
    loaded = ", ".join(f"{n or 0:,} {table.replace('_', ' ')}" for table, n in out["loaded"].items())
    print(f"  loaded:    {loaded}")
    live = out["simulated"].get("live") or {}
    if live.get("failed"):
        print(
            f"  live sample: FAILED after {live['requests']} requests ({live['failed']}); "
            "the simulated fleet ran without it"
        )
    elif live:
        print(
            f"  live sample: {live['requests']} real requests through {live['device_model']} (device) and "
            f"llama_cpp.server (stand-in cloud); {counts(live['served_by'])}"
        )
    print(f"  window:    {out['summary']['window']['start']} → {out['summary']['window']['end']}")
    print(f"  requests {s['requests']}, entered the device {s['device_entered']}, sessions {s['sessions']}")
    print(
        f"  fallback rate {pct(s['fallback_rate'])} of device-entered "
        f"(the naive rate over all requests would say {pct(s['naive_fallback_rate'])})"
    )
    by_type = s["false_fallback_by_type"]
    # labels are no random sample (docs/metrics.md §3c): the population estimate first, the labeled share beside it

    print(
        f"  false fallbacks {estimate(s.get('false_fallback_est'), LOW_COVERAGE)} "
        f"(labeled share {pct(s['false_fallback_rate'])} of {s['false_fallback_labeled']}); "
        f"quality {estimate(by_type.get('quality_est'), LOW_COVERAGE)} (labeled {pct(by_type['quality']['rate'])} of "
        f"{by_type['quality']['labeled']}), timeout labeled {pct(by_type['timeout']['rate'])} of "
        f"{by_type['timeout']['labeled']}"
    )
    print(
        f"  missed fallbacks {estimate(s.get('missed_fallback_est'), LOW_COVERAGE)} "
        f"(labeled share {pct(s['missed_fallback_rate'])} of {s['missed_fallback_labeled']})"
    )
    mean_calls = s["cloud_calls_per_session"]["mean"]
    print(
        f"  L2+L3 share {pct(s['l2_l3_share'])}; "
        f"cloud calls per session mean {'—' if mean_calls is None else f'{mean_calls:.2f}'}"
    )
    print("  alerts raised during the run:" + ("" if out["fired"] else " none"))
    for line in out["fired"]:
        print(f"    {line}")
    print(f"  firing now: {', '.join(key.rstrip('|') for key in out['firing']) or 'none'}")
    for day, q in out["quality"].items():
        print(
            f"  data quality {day}: "
            f"{'blocking failure: ' + ', '.join(q['blocking_failed']) if q['blocking_failed'] else 'ok'}"
        )
    print(
        "Explore (these read only): `routerscope alerts` (the incidents as stored), `routerscope metrics --start ... "
        "--end ...`, `routerscope report grading|readiness|rollout`, "
        "`dagster dev -m routerscope.pipelines.definitions`."
    )
    if not own_rules:
        print(
            f"  (`routerscope alerts --evaluate` judges with the rules the demo used, {settings.alert_rules}, "
            "recorded in the warehouse)"
        )
    if args.no_dashboard:
        print(
            "Dashboard: `routerscope dashboard` (On-call, Weekly tuning, Offload review, Data quality, Explorer, "
            "Human review)."
        )
        return 0
    return serve_dashboard(
        args.dashboard_port, settings.dashboard_log_path, open_browser=True, alert_rules=settings.alert_rules
    )


def dashboard_command(port: int) -> list[str]:
    # the installed package (editable or not), not a path relative to this file
    from routerscope import dashboards  # deferred: the [dashboard] extra; every other command runs without it

    app = Path(dashboards.__file__).with_name("streamlit_app.py")
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(app),
        "--server.headless",
        "true",
        "--server.address",
        "127.0.0.1",
        "--server.port",
        str(port),
        "--browser.gatherUsageStats",
        "false",
        "--client.toolbarMode",
        "viewer",  # no "Deploy" button nor developer options: the people reading these pages do not deploy them
    ]


def serve_dashboard(port: int, log_path: Path, open_browser: bool = False, alert_rules: Path | None = None) -> int:
    """Run Streamlit on 127.0.0.1:`port` until Ctrl-C (or until it exits); prints the URL once it answers.
    `alert_rules`: the rules file the dashboard reads (as ROUTERSCOPE_ALERT_RULES; None: the environment's)."""
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", port)) == 0:
            raise RouterscopeError(f"port {port} is already in use; choose another with --dashboard-port / --port")

    stop_on_term()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "ab")

    env = {**os.environ, **({"ROUTERSCOPE_ALERT_RULES": str(alert_rules)} if alert_rules else {})}
    process = procs.spawn(dashboard_command(port), stdout=log, stderr=subprocess.STDOUT, env=env)  # dies with us
    url = f"http://127.0.0.1:{port}"
    try:
        procs.wait_ready(
            process,
            lambda: procs.http_ok(f"{url}/_stcore/health"),
            what="the dashboard",
            log_path=log_path,
            timeout_s=120,
        )
        print(
            f"Dashboard: {url}  (On-call, Weekly tuning, Offload review, Data quality, Explorer, Human review; "
            "Ctrl-C stops it)",
            flush=True,
        )
        if open_browser:
            try:
                webbrowser.open(url)
            except Exception:  # no browser on this machine: the URL above is enough
                pass
        return process.wait()
    except KeyboardInterrupt:
        print("\nrouterscope: dashboard stopped.", file=sys.stderr)
        return 0
    finally:
        procs.stop(process)
        log.close()


def cmd_dashboard(args, settings: Settings) -> int:
    return serve_dashboard(args.port, settings.dashboard_log_path)


# -- parser ---------------------------------------------------------------------------------------
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
MAX_CORRUPT = 1_000_000  # malformed messages `simulate --corrupt` produces at most
MAX_REQUESTS = 10_000_000  # simulated requests `demo` and `simulate` take at most (10M: hours on a laptop)


def _int_at_least(minimum: int, maximum: int | None = None):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r} must be at least {minimum}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"{text!r} must be at most {maximum}")
        return value

    return parse


_port = _int_at_least(1, 65535)  # a TCP port


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


_positive_int = _int_at_least(1)
_span_minutes = _int_at_least(1, 10 * 366 * 24 * 60)  # at most ten years back from now


def _float_at_least(minimum: float, strictly: bool = False):
    """A finite number >= minimum (> when `strictly`): nan and inf are refused."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or value < minimum or (strictly and value == minimum):
            raise argparse.ArgumentTypeError(
                f"{text!r} must be a finite number {'above' if strictly else 'at least'} {minimum:g}"
            )
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="routerscope", description="Observability for a hybrid LLM router.")
    parser.add_argument("--version", action="version", version=f"routerscope {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("demo", help="the main job: a SIMULATED fleet through the real router, end to end")
    p.add_argument("--port", type=_port, default=broker.DEFAULT_PORT, help="local broker port (default 9092)")
    p.add_argument(
        "--requests",
        type=_int_at_least(1, MAX_REQUESTS),
        default=20_000,
        help=f"simulated requests (default 20000, at most {MAX_REQUESTS:,})",
    )
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--span-minutes", type=_span_minutes, default=120, help="simulated time span ending now")
    p.add_argument("--no-dashboard", action="store_true", help="do not start the dashboard at the end (for scripts)")
    p.add_argument("--dashboard-port", type=_port, default=8501, help="dashboard port on 127.0.0.1 (default 8501)")
    p.add_argument(
        "--live-sample",
        type=_int_at_least(0),
        default=5,
        metavar="N",
        help="first N requests through the real model (Gemma via llama-cpp, llama_cpp.server as the cloud); 0: none",
    )
    p.add_argument(
        "--fresh",
        action="store_true",
        help="forget earlier demo runs: remove the demo warehouse, restart the local broker",
    )
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("simulate", help="SIMULATED fleet traffic through the real router into Kafka")
    p.add_argument("--requests", type=_int_at_least(1, MAX_REQUESTS), default=10_000)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--span-minutes", type=_span_minutes, default=120, help="simulated time span ending now")
    p.add_argument(
        "--corrupt",
        type=_int_at_least(0, MAX_CORRUPT),
        default=0,
        help="malformed messages to produce as well (for the quarantine)",
    )
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser("broker", help="the local development broker (Tansu on 127.0.0.1)")
    bsub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    b = bsub.add_parser("start", help="start it (no-op if running); prints the bootstrap address")
    b.add_argument("--port", type=_port, default=broker.DEFAULT_PORT)
    bsub.add_parser("stop", help="stop it")
    b = bsub.add_parser("status", help="is it running? exit 0 if so, 3 if not")
    b.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_broker)

    p = sub.add_parser("produce", help="publish a JSON-lines file, one message per line, bad lines included")
    p.add_argument("file")
    p.add_argument("--topic", required=True, choices=sorted(names.TOPICS))
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_produce)

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
        type=_positive_int,
        default=loader.DEFAULT_BATCH_SIZE,
        help=f"rows per insert (default {loader.DEFAULT_BATCH_SIZE})",
    )
    p.add_argument(
        "--idle-timeout",
        type=_float_at_least(0, strictly=True),
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

    p = sub.add_parser("metrics", help="print the metrics of docs/metrics.md for a window [start, end)")
    p.add_argument("--start", required=True, help="window start, ISO 8601 (UTC if no zone)")
    p.add_argument("--end", required=True, help="window end (exclusive), ISO 8601")
    p.add_argument("--json", action="store_true", help="the JSON of docs/metrics.md")

    p.add_argument(
        "--baseline-days",
        type=_float_at_least(0, strictly=True),
        default=metric_defaults.DEFAULT_BASELINE_DAYS,
        help="L2/L3 drift baseline: days before --start",
    )
    p.add_argument(
        "--target",
        type=_float_at_least(0, strictly=True),
        default=metric_defaults.DEFAULT_TARGET,
        help="target pass rate for the threshold recommendation",
    )
    p.add_argument(
        "--min-n",
        type=_positive_int,
        default=metric_defaults.DEFAULT_MIN_N,
        help="minimum events behind a recommended threshold",
    )
    p.set_defaults(func=cmd_metrics)

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
        type=_positive_int,
        default=30,
        metavar="N",
        help="a --fail-if on a labeled rate with fewer labels is not judged (exit 4; default 30)",
    )
    p.add_argument("--json", action="store_true", help="the what-if as JSON (docs/whatif.md)")
    p.set_defaults(func=cmd_whatif)

    p = sub.add_parser(
        "dq",
        help="run the data-quality suites on the latest day (exit 1 on a blocking failure, 4 when there was "
        "nothing to check)",
    )
    p.add_argument("--json", action="store_true", help="every check's result as JSON")
    p.add_argument("--day", help="the UTC day to check, e.g. 2026-11-29 (default: the day of the newest event)")
    p.set_defaults(func=cmd_dq)

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
        type=_float_at_least(1),
        default=7.0,
        help="the rollback verdicts' window in days, as `report rollout` reads it (default 7)",
    )
    p.add_argument("--end", help="that window's end, ISO 8601 (default: the end of the newest live event's day)")
    p.set_defaults(func=cmd_alerts)

    p = sub.add_parser("report", help="the weekly review: task grading, offload readiness, rollout stages")
    p.add_argument("kind", choices=review.KINDS)
    p.add_argument("--json", action="store_true")
    p.add_argument("--days", type=_float_at_least(1), default=7.0, help="review window in days (default 7)")
    p.add_argument("--end", help="window end, ISO 8601 (default: the end of the newest live event's day)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("dashboard", help="start the Streamlit dashboard on localhost")
    p.add_argument("--port", type=_port, default=8501)
    p.set_defaults(func=cmd_dashboard)

    p = sub.add_parser("collect", help="receive OTLP/HTTP traces from any GenAI-instrumented app (docs/otlp.md)")
    p.add_argument("--port", type=_port, default=4318, help="listen port (default 4318, OTLP/HTTP's)")
    p.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    p.add_argument(
        "--trace-wait",
        type=_float_at_least(0, strictly=True),
        default=10.0,
        help="write a trace whose root span has not arrived this many seconds after its first span (default 10)",
    )
    p.add_argument(
        "--max-backlog-mb",
        type=_float_at_least(1),
        default=1024,
        help="answer 503 while this much waits on disk for Kafka (default 1024 MB)",
    )
    p.add_argument(
        "--fsync-interval",
        type=_float_at_least(0),
        default=1.0,
        help="seconds between fsyncs of what was taken, for power loss (0: before every answer; default 1)",
    )
    p.set_defaults(func=cmd_collect)

    oncall.add_commands(sub, _port)
    labels_review.add_commands(sub)
    loop.add_commands(sub)
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
