"""The main job: a simulated fleet through the real router, end to end, in one command.

Broker (local unless configured) → SIMULATED fleet with scripted incidents → Kafka → the Dagster
jobs the daemon runs, in this process: `ingest` → `metrics_5m_job` for every 5-minute partition of
the span, `alerts_job` after each (as the daemon's sensor does) → `metrics_daily_job` (data-quality
suites, then daily metrics) per day → a summary with the headline numbers and the alerts the
incidents raised. Re-running adds another simulated span and continues from the stored offsets.
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
from datetime import datetime, timedelta

from tqdm import tqdm

from routerscope.cli.demo_jobs import daily_quality_and_metrics, load, metrics_and_alerts, run_alerts, span_days
from routerscope.cli.demo_span import next_span, record_span, run_instance, run_name
from routerscope.core import broker, kafka, names
from routerscope.core.errors import RouterscopeError, full_disk_error
from routerscope.core.kafka import producer_config
from routerscope.core.settings import Settings
from routerscope.instrumentation import pii
from routerscope.instrumentation.emitter import KafkaEmitter, Message
from routerscope.instrumentation.sdk import Recorder
from routerscope.instrumentation.telemetry import Telemetry, setup_providers
from routerscope.router.label_design import DEFAULT_DESIGN
from routerscope.router.request_store import RequestTextStore, remove_store
from routerscope.router.sim.baseline import SIM_RULES
from routerscope.router.sim.fleet import Fleet, default_start
from routerscope.router.sim.live import live_sample
from routerscope.warehouse.analytics.alerting.rules import load_rules
from routerscope.warehouse.analytics.loop.evidence import policies_root
from routerscope.warehouse.client import open_warehouse
from routerscope.warehouse.queries import ingest_offsets
from routerscope.warehouse.queries.review import store_reruns

CORRUPT = [b"{not json", b"\x00\xff\xfe binary", b'{"schema_version": 9}']


def _bar(total: int, desc: str, unit: str):
    # On a terminal a live bar; in a log or a pipe the same line, refreshed every 5 s (counts, not silence).
    return tqdm(
        total=total, desc=desc, unit=unit, leave=True, file=sys.stderr, mininterval=0.5 if sys.stderr.isatty() else 5.0
    )


def simulate(
    settings: Settings,
    requests: int,
    seed: int,
    span: timedelta,
    corrupt: int = 0,
    show: bool = True,
    live_requests: int = 0,
    start: datetime | None = None,
) -> dict:
    """Run `live_requests` real-model requests, then the SIMULATED fleet, into Kafka; returns counts.
    Request texts go to the request-text store (for the offline replay), never into events.

    Every decision, breaker transition and label is recorded through the SDK (`routerscope.sdk`), as in a
    deployment that follows docs/sdk.md: one span per decision, ids pseudonymised and free text scrubbed,
    the span's trace ids in the event. The providers are the ones docs/sdk.md has a deployment set up,
    `setup_providers()`'s (OpenTelemetry's SDK: real trace ids; spans and metrics exported over OTLP to a
    collector when the standard OTEL_EXPORTER_OTLP_* variables name one, else kept nowhere)."""
    if pii._key is None:  # the home's key, as `Recorder.from_env` reads it
        _home_key(settings)
    emitter = KafkaEmitter(
        producer_config(settings), settings.spool_path, block_when_full=True
    )  # a batch producer: paced, never dropping
    tracer_provider, meter_provider = setup_providers("routerscope-demo")
    tel = Telemetry(emitter, tracer_provider, meter_provider)
    recorder = Recorder(tel)
    start = start or default_start(span)
    run = run_name(start)  # this run's instances and ids
    # the labeling design fixed at decision time (docs/metrics.md §3d): each live event records its stratum's π
    design = DEFAULT_DESIGN
    live: dict = {}
    try:
        with RequestTextStore(settings.request_texts_path) as texts:
            if live_requests:
                live = _live_sample(settings, live_requests, seed, start, texts, recorder, run, show)
            fleet = Fleet(
                seed=seed,
                start=start,
                span=span,
                instance_id=run_instance("sim-router-1", run),
                run=run,
                texts=texts,
                recorder=recorder,
                design=design,  # its drawn events: a SIMULATED judge, and reviewers answering from ground truth
            )
            bar = _bar(requests, "simulating (SIMULATED fleet)", " req") if show else None
            try:
                stats = fleet.run(requests, progress=bar.update if bar else (lambda n: None))
            finally:
                if bar:
                    bar.close()
        store_simulated_reruns(settings, fleet.simulated_reruns())
        for i in range(corrupt):
            emitter.emit(Message(names.TOPIC_DECISIONS, b"corrupt", CORRUPT[i % len(CORRUPT)]))
    finally:  # Ctrl-C included: what was routed is sent, or spooled to disk for the next run
        pending = emitter.counters()["in_flight"]
        if sys.exc_info()[0] is not None and pending:
            print(
                f"\nrouterscope demo: sending the {pending} events routed before the stop ...",
                file=sys.stderr,
                flush=True,
            )
        if not emitter.flush(120):
            print(f"routerscope: warning: events still spooled: {emitter.counters()}", file=sys.stderr)
        emitter.close()
        tel.record_decisions()  # the attempt spans of the last decisions, before the spans are exported
        tracer_provider.shutdown()  # exports what is still batched (with OTLP set)
        meter_provider.shutdown()
    return {**stats, "live": live, "corrupt": corrupt, "start": start, "end": start + span, **emitter.counters()}


def _live_sample(settings: Settings, count: int, seed: int, start: datetime, texts, recorder, run: str, show: bool):
    """`routerscope.router.sim.live.live_sample`, with its progress bar and, when it stops, one warning line."""
    print(
        "  live sample: loading Gemma 3 270M (device) and starting the stand-in cloud (llama_cpp.server) …",
        file=sys.stderr,
    )
    bar = _bar(count, "live sample (real Gemma)", " req") if show else None
    try:
        live = live_sample(
            settings,
            count,
            seed,
            start,
            texts,
            recorder=recorder,
            design=DEFAULT_DESIGN,
            instance_id=run_instance("live-router-1", run),
            run=run,
            progress=bar.update if bar else (lambda n: None),
        )
    finally:
        if bar:
            bar.close()
    if "failed" in live:
        print(
            f"routerscope: warning: live sample stopped after {live['requests']} of {count} requests: "
            f"{live['failed']}; the simulated fleet runs without it",
            file=sys.stderr,
        )
    return live


def store_simulated_reruns(settings: Settings, groups: list[tuple]) -> None:
    """The SIMULATED fleet's determinism groups (what the weekly replay measures with the real model) go
    straight to the warehouse, so the grading report has a determinism to score."""
    with open_warehouse(settings, purpose="simulated replay", migrated=True) as client:
        store_reruns(client, groups)


def _home_key(settings: Settings) -> None:
    """The home's PII key, read or created first of all (its ids are pseudonymised under it). A home on a full
    disk is the disk's one line, as every other write into it says it (`core.errors.full_disk_error`)."""
    try:
        pii.configure(settings.home)
    except pii.PiiKeyUnwritable as exc:
        try:
            full = shutil.disk_usage(settings.home).free < 2**20
        except OSError:  # no home to measure: the key's own line says what failed
            raise exc from None
        if full:
            raise full_disk_error(settings.home, exc, "creating the PII key") from None
        raise


def start_fresh(settings: Settings) -> None:
    """Forget every earlier demo run of this home: stop the local broker (its memory goes with it),
    remove the embedded warehouse, the request-text store and the spool. Refuses a server warehouse."""
    if not settings.warehouse.embedded:
        raise RouterscopeError(
            "--fresh removes an embedded warehouse only; this one is a server: drop its database yourself"
        )
    if settings.kafka_bootstrap_env:
        raise RouterscopeError(
            "--fresh restarts the local broker only; this demo points at ROUTERSCOPE_KAFKA_BOOTSTRAP"
        )
    broker.stop(settings)
    # the loop's candidates go with the warehouse that holds their events (a kept directory would make the
    # demo's cycle skip, its events gone)
    for path in (settings.warehouse.path, settings.spool_path, policies_root(settings.home)):
        if path is not None:  # (an embedded warehouse has one)
            shutil.rmtree(path, ignore_errors=True)
    settings.demo_span_path.unlink(missing_ok=True)
    remove_store(settings.home)
    print(
        f"  fresh start: removed the demo warehouse {settings.warehouse.redacted()} and restarted the local broker",
        file=sys.stderr,
    )


def fleet_settings(settings: Settings) -> Settings:
    """The settings the demo runs with: unless ROUTERSCOPE_ALERT_RULES names a rules file, the SIMULATED
    fleet's (`routerscope/router/sim/alert_rules.yaml`: the shipped defaults with per task type limits tuned to the
    simulated fleet's calm baseline, docs/metrics.md §3b), through the same Settings field every alert
    evaluation reads (the alerts job here and in the daemon, `routerscope alerts`, the dashboard)."""
    if settings.alert_rules is not None:
        return settings
    return dataclasses.replace(settings, alert_rules=SIM_RULES)


def run(
    settings: Settings,
    *,
    requests: int,
    seed: int,
    port: int,
    span_minutes: int = 120,
    corrupt: int = 3,
    live_requests: int = 0,
    fresh: bool = False,
    loop_week: bool = False,
) -> dict:
    """The demo, step by step, through the same Dagster jobs the daemon runs (`routerscope.pipelines.definitions`), in
    this process: `ensure_broker` → `simulate_span` → `load` (`ingest`) → `metrics_and_alerts`
    (`metrics_5m_job` over the span, `alerts_job` as of each window's end) → `daily_quality_and_metrics`
    (`metrics_daily_job` per day); with `loop_week`, then the closed loop's week-compressed cycle in the week before
    the span (`routerscope.cli.loop_cycle`: a good candidate promoted, a harmful one rolled back)."""
    import dagster as dg  # deferred: half a second and more; `simulate` and the CLI's start never need it

    from routerscope.pipelines.resources import RouterscopeResource  # deferred: pulls dagster

    settings = fleet_settings(settings)
    load_rules(settings.alert_rules)  # a bad rules file stops the demo here, in one line, before it simulates
    if fresh:
        start_fresh(settings)
    out: dict = {"kafka": ensure_broker(settings, port)}
    start, span = next_span(settings, timedelta(minutes=span_minutes))
    sim = out["simulated"] = simulate_span(settings, requests, seed, span, corrupt, live_requests, start)
    record_span(settings, sim["end"])
    resources = {"routerscope": RouterscopeResource.for_settings(settings)}
    instance = dg.DagsterInstance.ephemeral()  # one for all of the demo's runs, as one deployment has one
    out["loaded"] = load(resources, instance)
    summary, fired, firing = metrics_and_alerts(
        settings, sim["start"], sim["end"], resources=resources, instance=instance
    )
    days = span_days(sim["start"], sim["end"])
    out["quality"] = daily_quality_and_metrics(days, resources=resources, instance=instance)
    # the alerts once more after the daily suites, as the daemon's sensor follows the daily job: a blocking
    # data-quality failure holds the day's metrics back and is an incident (`data_quality_blocking`) on On-call
    # and in the summary's "firing now", never a silent hold with the earlier figures shown as current
    after = run_alerts(resources, instance)
    fired += [line for line in after["fired_lines"] if line not in fired]
    firing = after["firing_keys"]
    out.update(summary=summary, fired=fired, firing=firing, days=[d.isoformat() for d in days])
    if loop_week:
        from routerscope.cli.loop_cycle import run_cycle  # deferred: the loop's week runs only when asked

        out["loop"] = run_cycle(settings, start=sim["start"], seed=seed)
    return out


def ensure_broker(settings: Settings, port: int) -> str:
    """The broker the demo publishes to (a configured one, or the local one started on `port`); its
    bootstrap address. Refuses a restarted local broker under a warehouse that loaded from the old one."""
    if configured := settings.kafka_bootstrap_env:
        kafka.ensure_topics(settings)
        return configured
    restarted = not broker.status(settings).running
    bootstrap = broker.start(settings, port=port).bootstrap
    assert bootstrap is not None  # (a running broker's status has its address)
    if restarted:
        with open_warehouse(settings, purpose="demo", migrated=True) as client:
            loaded_before = ingest_offsets.position_count(client)
        if loaded_before:
            raise RouterscopeError(
                "the local broker keeps its messages in memory and was restarted since the last demo, so the "
                f"demo's warehouse ({settings.warehouse.redacted()}) refers to messages it no longer has. "
                "Run `routerscope demo --fresh` to start the demo over (it removes the demo's warehouse)"
            )
    return bootstrap


def simulate_span(
    settings: Settings,
    requests: int,
    seed: int,
    span: timedelta,
    corrupt: int,
    live_requests: int,
    start: datetime | None = None,
):
    """`simulate`, with the demo's one-line account of it."""
    sim = simulate(settings, requests, seed, span, corrupt, live_requests=live_requests, start=start)
    print(
        f"  simulated {sim['requests']} requests and {sim['labels']} labels (SIMULATED), {corrupt} corrupted messages",
        file=sys.stderr,
    )
    return sim
