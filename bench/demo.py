"""The whole chain, as the demo runs it: prints JSON figures measured in one run.

    .venv/bin/python bench/demo.py [--requests 200000] [--span-minutes 1440]

Stages, each timed on the wall clock in a fresh home with its own local broker and embedded warehouse:
  route_and_emit  the SIMULATED fleet through the real router, events enqueued to the emitter
                  (request texts stored for the replay), then flushed to Kafka;
  load            the Dagster ingest job draining the three topics into the warehouse;
  metrics_5m      every 5-minute partition of the span through the Dagster `metrics_5m_job`, the
                  `alerts_job` after each (as the demo runs them: `routerscope.cli.demo_jobs.windows_and_alerts`);
  metrics_span    the full docs/metrics.md set over the whole span (one query set, as `routerscope metrics`).
`events_per_s` is distinct decision events through route → Kafka → load → metrics_span over their
summed wall time (`loaded` counts messages, including the local broker's duplicate deliveries); each
stage also reports its own rate. On a shared 2-core machine compare stages within a run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from routerscope.core import broker  # noqa: E402
from routerscope.core.procs import free_port  # noqa: E402
from routerscope.core.settings import Settings  # noqa: E402


def log(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=200_000)
    parser.add_argument("--span-minutes", type=int, default=24 * 60, help="simulated span (default one day)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    import dagster as dg

    from routerscope.cli.demo import fleet_settings, simulate
    from routerscope.cli.demo_jobs import windows_and_alerts
    from routerscope.pipelines.ingest import ingest_topics
    from routerscope.pipelines.resources import RouterscopeResource
    from routerscope.pipelines.run import materializations, run_job
    from routerscope.warehouse.analytics.metrics import compute
    from routerscope.warehouse.client import open_warehouse

    home = Path(tempfile.mkdtemp(prefix="routerscope-bench-demo-"))
    settings = fleet_settings(Settings.from_env({"ROUTERSCOPE_HOME": str(home)}))  # the demo's alert rules
    broker.start(settings, port=free_port())
    figures: dict = {"requests": args.requests, "span_minutes": args.span_minutes}
    stages: dict[str, float] = {}
    try:
        with open_warehouse(settings, migrated=True):
            pass  # the schema first, as the demo has it
        log(f"routing {args.requests} SIMULATED requests")
        t = time.perf_counter()
        sim = simulate(settings, args.requests, args.seed, timedelta(minutes=args.span_minutes), show=False)
        stages["route_and_emit"] = time.perf_counter() - t
        figures["emitted"] = sim["emitted"]
        figures["delivered"] = sim["delivered"]

        log("loading")
        t = time.perf_counter()
        resources = {"routerscope": RouterscopeResource.for_settings(settings)}
        result = run_job(
            "ingest", ops_config={ingest_topics.op.name: {"config": {"idle_timeout_s": 1.0}}}, resources=resources
        )
        stages["load"] = time.perf_counter() - t
        loaded = {k: v.get("loaded") for k, v in materializations(result).items()}
        figures["loaded"] = loaded

        start, end = sim["start"], sim["end"]
        log("five-minute metric windows + alerts (Dagster jobs)")
        t = time.perf_counter()
        fired = windows_and_alerts(start, end, resources=resources, instance=dg.DagsterInstance.ephemeral())
        stages["metrics_5m"] = time.perf_counter() - t
        figures["alerts_fired"] = len(fired)
        with open_warehouse(settings) as client:
            windows = client.query(
                "SELECT count() FROM routerscope.metric_windows FINAL WHERE grain = '5m' AND task_type = ''"
            ).result_rows[0][0]
            t = time.perf_counter()
            summary = compute(client, start, end)
            stages["metrics_span"] = time.perf_counter() - t
            # messages loaded include the broker's duplicate deliveries (producer retries); events are distinct
            figures["distinct_decisions"] = client.query(
                "SELECT uniqExact(event_id) FROM routerscope.decisions"
            ).result_rows[0][0]
        figures["overall_fallback_rate"] = summary["overall"]["fallback_rate"]
    finally:
        broker.stop(settings)

    decisions = figures["distinct_decisions"]
    chain = stages["route_and_emit"] + stages["load"] + stages["metrics_span"]
    figures["wall_s"] = {k: round(v, 2) for k, v in stages.items()}
    figures["per_stage_events_per_s"] = {
        "route_and_emit": round(args.requests / stages["route_and_emit"]),
        "load": round(decisions / stages["load"]),
        "metrics_span": round(decisions / stages["metrics_span"]),
    }
    figures["metrics_5m_windows_per_s"] = round(windows / stages["metrics_5m"], 1)
    figures["events_per_s"] = round(decisions / chain)
    figures["chain_s"] = round(chain, 2)
    figures["all_stages_s"] = round(sum(stages.values()), 2)
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
