"""`routerscope demo` (the main job: a SIMULATED fleet through the real router, end to end, then the dashboard)
and `routerscope simulate` (the fleet's traffic into Kafka only). The work is in `routerscope/cli/demo.py`,
imported when a command runs: `routerscope --help` imports this module for its parser, and demo.py imports the
router, the simulator and the units of work."""

from __future__ import annotations

import sys
from datetime import timedelta

from routerscope.cli.cmd_dashboard import serve_dashboard
from routerscope.cli.common import int_at_least, port
from routerscope.cli.interrupt import Terminated, stop_on_term
from routerscope.core import broker
from routerscope.core.settings import Settings
from routerscope.core.text import counts, estimate, pct
from routerscope.warehouse.analytics.stats import LOW_COVERAGE

MAX_CORRUPT = 1_000_000  # malformed messages `simulate --corrupt` produces at most
MAX_REQUESTS = 10_000_000  # simulated requests `demo` and `simulate` take at most (10M: hours on a laptop)
_span_minutes = int_at_least(1, 10 * 366 * 24 * 60)  # at most ten years back from now


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
            loop_week=not args.no_loop_week,
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
    for name, c in out.get("loop", {}).get("candidates", {}).items():
        verdict = c["last_verdict"]
        said = f"{verdict['action']}, {verdict['reason']}" if verdict else "no look yet"
        print(f"  closed loop, {name} candidate ({c['task_type']}): {c['state']} after {c['looks']} looks ({said})")
    print(
        "Explore (these read only): `routerscope alerts` (the incidents as stored), `routerscope metrics --start ... "
        "--end ...`, `routerscope report grading|readiness|rollout`, `routerscope loop status`, "
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
            "Human review, Closed loop)."
        )
        return 0
    return serve_dashboard(
        args.dashboard_port, settings.dashboard_log_path, open_browser=True, alert_rules=settings.alert_rules
    )


def add_commands(sub) -> None:
    """The commands of this module, on the `routerscope` parser's subparsers."""
    p = sub.add_parser("demo", help="the main job: a SIMULATED fleet through the real router, end to end")
    p.add_argument("--port", type=port, default=broker.DEFAULT_PORT, help="local broker port (default 9092)")
    p.add_argument(
        "--requests",
        type=int_at_least(1, MAX_REQUESTS),
        default=20_000,
        help=f"simulated requests (default 20000, at most {MAX_REQUESTS:,})",
    )
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--span-minutes", type=_span_minutes, default=120, help="simulated time span ending now")
    p.add_argument("--no-dashboard", action="store_true", help="do not start the dashboard at the end (for scripts)")
    p.add_argument("--dashboard-port", type=port, default=8501, help="dashboard port on 127.0.0.1 (default 8501)")
    p.add_argument(
        "--live-sample",
        type=int_at_least(0),
        default=5,
        metavar="N",
        help="first N requests through the real model (Gemma via llama-cpp, llama_cpp.server as the cloud); 0: none",
    )
    p.add_argument(
        "--fresh",
        action="store_true",
        help="forget earlier demo runs: remove the demo warehouse, restart the local broker",
    )
    p.add_argument(
        "--no-loop-week",
        action="store_true",
        help="skip the closed loop's week of SIMULATED canary traffic, dated the week before the demo's "
        "(a good candidate promoted, a harmful one rolled back; ~40k more requests, 35 s and more)",
    )
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("simulate", help="SIMULATED fleet traffic through the real router into Kafka")
    p.add_argument("--requests", type=int_at_least(1, MAX_REQUESTS), default=10_000)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--span-minutes", type=_span_minutes, default=120, help="simulated time span ending now")
    p.add_argument(
        "--corrupt",
        type=int_at_least(0, MAX_CORRUPT),
        default=0,
        help="malformed messages to produce as well (for the quarantine)",
    )
    p.set_defaults(func=cmd_simulate)
