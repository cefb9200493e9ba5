"""The main job: a simulated fleet through the real router, end to end, in one command.

Broker (local unless configured) → SIMULATED fleet with scripted incidents → Kafka → the Dagster
ingest job → 5-minute metric windows with alert evaluation after each (as the sensor would) → the
daily data-quality suites and metrics (Dagster) → a summary with the headline numbers and the alerts
the incidents raised. Re-running adds another simulated span and continues from the stored offsets.
"""

from __future__ import annotations

import sys
import tempfile
from datetime import timedelta
from pathlib import Path

from routerscope import broker, names
from routerscope.settings import Settings

CORRUPT = [b"{not json", b"\x00\xff\xfe binary", b'{"schema_version": 9}']


def _bar(total: int, desc: str, unit: str):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, leave=True, file=sys.stderr, disable=None, mininterval=0.5)


def simulate(settings: Settings, requests: int, seed: int, span: timedelta, corrupt: int = 0, show: bool = True) -> dict:
    """Run the SIMULATED fleet into Kafka; returns counts."""
    from instrumentation.emitter import KafkaEmitter, Message
    from instrumentation.telemetry import Telemetry, producer_config
    from router.fleet import Fleet, default_start

    emitter = KafkaEmitter(producer_config(settings), settings.home / "spool")
    tel = Telemetry(emitter)
    policy_dir = Path(tempfile.mkdtemp(prefix="routerscope-sim-policy-"))
    fleet = Fleet(
        seed=seed, start=default_start(span), span=span, policy_path=policy_dir / "policy.yaml",
        on_event=lambda e: tel.send(names.TOPIC_DECISIONS, e.session_id, e),
        on_breaker_event=lambda e: tel.send(names.TOPIC_BREAKERS, e.instance_id, e),
        on_label=lambda e: tel.send(names.TOPIC_LABELS, e.request_id, e),
    )  # fmt: skip
    bar = _bar(requests, "simulating (SIMULATED fleet)", " req") if show else None
    stats = fleet.run(requests, progress=bar.update if bar else (lambda n: None))
    if bar:
        bar.close()
    for i in range(corrupt):
        emitter.emit(Message(names.TOPIC_DECISIONS, b"corrupt", CORRUPT[i % len(CORRUPT)]))
    if not emitter.flush(120):
        print(f"routerscope: warning: events still spooled: {emitter.counters()}", file=sys.stderr)
    emitter.close()
    return {**stats, "corrupt": corrupt, "start": fleet.clock.start, "end": fleet.clock.start + span, **emitter.counters()}


def run(settings: Settings, *, requests: int, seed: int, port: int, span_minutes: int = 120, corrupt: int = 3) -> dict:
    from pipelines.ingest import ingest_topics
    from pipelines.run import materializations, run_job
    from routerscope import alerts, kafka
    from warehouse.client import open_warehouse
    from warehouse.metrics import compute
    from warehouse.migrate import migrate
    from warehouse.queries.metric_windows import write_window

    out: dict = {}
    if settings.kafka_bootstrap_env:
        kafka.ensure_topics(settings)
        out["kafka"] = settings.kafka_bootstrap_env
    else:
        out["kafka"] = broker.start(settings, port=port).bootstrap
    with open_warehouse(settings, purpose="demo") as client:
        migrate(client)
    span = timedelta(minutes=span_minutes)
    sim = simulate(settings, requests, seed, span, corrupt)
    out["simulated"] = sim
    print(f"  simulated {sim['requests']} requests and {sim['labels']} labels (SIMULATED), {corrupt} corrupted messages", file=sys.stderr)

    from pipelines.resources import RouterscopeResource

    resources = {"routerscope": RouterscopeResource.for_settings(settings)}
    result = run_job("ingest", ops_config={ingest_topics.op.name: {"config": {"idle_timeout_s": 1.0}}}, resources=resources)
    out["loaded"] = {k: v.get("loaded") for k, v in materializations(result).items()}

    start, end = sim["start"], sim["end"]
    fired: list[str] = []
    with open_warehouse(settings, purpose="demo metrics") as client:
        windows = int(span / timedelta(minutes=5))
        bar = _bar(windows, "metric windows + alerts", " windows")
        for k in range(windows):
            w0 = start + k * timedelta(minutes=5)
            write_window(client, "5m", w0, w0 + timedelta(minutes=5), compute(client, w0, w0 + timedelta(minutes=5)))
            evaluation = alerts.run(client, rules_path=settings.alert_rules, webhook=settings.alert_webhook, now=w0 + timedelta(minutes=6))
            fired += [f"{a.rule}{'|' + a.task_type if a.task_type else ''} at {a.first_seen:%H:%M}" for a in evaluation.fired]
            bar.update(1)
        bar.close()
        summary = compute(client, start, end)
        final = alerts.run(client, rules_path=settings.alert_rules, webhook=settings.alert_webhook)
    days = sorted({start.date(), (end - timedelta(microseconds=1)).date()})
    quality = {}
    for day in days:  # the day's data-quality suites, then (unless a blocking check failed) its metrics
        daily = run_job("metrics_daily_job", partition_key=day.isoformat(), raise_on_error=False, resources=resources)
        checks = {e.check_name: e.passed for e in daily.get_asset_check_evaluations()}
        quality[day.isoformat()] = {"blocking_failed": [k for k, ok in checks.items() if not ok and k != "pipeline_health"],
                                    "metrics_materialized": daily.success}  # fmt: skip
    out["quality"] = quality
    out.update(summary=summary, fired=fired, firing=[a.alert_key for a in final.firing], days=[d.isoformat() for d in days])
    return out
