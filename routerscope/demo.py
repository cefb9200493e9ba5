"""The main job: a simulated fleet through the real router, end to end, in one command.

Broker (local unless configured) → SIMULATED fleet with scripted incidents → Kafka → the Dagster
ingest job → 5-minute metric windows with alert evaluation after each (as the sensor would) → the
daily data-quality suites and metrics (Dagster) → a summary with the headline numbers and the alerts
the incidents raised. Re-running adds another simulated span and continues from the stored offsets.
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path

from routerscope import broker, names
from routerscope.errors import RouterscopeError
from routerscope.settings import Settings

CORRUPT = [b"{not json", b"\x00\xff\xfe binary", b'{"schema_version": 9}']


def _bar(total: int, desc: str, unit: str):
    from tqdm import tqdm

    # On a terminal a live bar; in a log or a pipe the same line, refreshed every 5 s (counts, not silence).
    return tqdm(total=total, desc=desc, unit=unit, leave=True, file=sys.stderr, mininterval=0.5 if sys.stderr.isatty() else 5.0)


def simulate(settings: Settings, requests: int, seed: int, span: timedelta, corrupt: int = 0, show: bool = True,
             live_requests: int = 0) -> dict:  # fmt: skip
    """Run `live_requests` real-model requests, then the SIMULATED fleet, into Kafka; returns counts.
    Request texts go to the request-text store (for the offline replay), never into events."""
    from instrumentation.emitter import KafkaEmitter, Message
    from instrumentation.telemetry import Telemetry, producer_config
    from router.fleet import Fleet, default_start
    from router.request_store import RequestTextStore, store_path

    emitter = KafkaEmitter(producer_config(settings), settings.home / "spool", block_when_full=True)  # a batch producer: paced, never dropping
    tel = Telemetry(emitter)
    policy_dir = Path(tempfile.mkdtemp(prefix="routerscope-sim-policy-"))
    start = default_start(span)
    on_event = lambda e: tel.send(names.TOPIC_DECISIONS, e.session_id, e)  # noqa: E731
    on_breaker_event = lambda e: tel.send(names.TOPIC_BREAKERS, e.instance_id, e)  # noqa: E731
    live: dict = {}
    try:
        with RequestTextStore(store_path(settings.home)) as texts:
            if live_requests:
                live = live_sample(settings, live_requests, seed, start, texts, on_event, on_breaker_event, show)
            fleet = Fleet(
                seed=seed, start=start, span=span, policy_path=policy_dir / "policy.yaml", texts=texts,
                on_event=on_event, on_breaker_event=on_breaker_event,
                on_label=lambda e: tel.send(names.TOPIC_LABELS, e.request_id, e),
            )  # fmt: skip
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
        if not emitter.flush(120):
            print(f"routerscope: warning: events still spooled: {emitter.counters()}", file=sys.stderr)
        emitter.close()
    return {**stats, "live": live, "corrupt": corrupt, "start": start, "end": start + span, **emitter.counters()}


def store_simulated_reruns(settings: Settings, groups: list[tuple]) -> None:
    """The SIMULATED fleet's determinism groups (what the weekly replay measures with the real model) go
    straight to the warehouse, so the grading report has a determinism to score."""
    from warehouse.client import open_warehouse
    from warehouse.migrate import migrate
    from warehouse.queries.review import store_reruns

    with open_warehouse(settings, purpose="simulated replay") as client:
        migrate(client)
        store_reruns(client, groups)


LIVE_TASKS = ("intent_classify", "short_reply", "slot_extract", "short_summary", "tool_call")


def live_sample(settings: Settings, count: int, seed: int, start: datetime, texts, on_event, on_breaker_event,
                show: bool = True) -> dict:  # fmt: skip
    """The demo's first requests through the real model: Gemma 3 270M via llama-cpp-python on the
    device side, `llama_cpp.server` on loopback as the stand-in cloud. Their events carry real logprob
    confidence and `device_model = gemma-3-270m-q4_k_m`; their times start at the simulated span's start."""
    from router.backends import OpenAICloud, gemma_path
    from router.engine import Request, Router
    from router.fleet import request_text
    from router.model_worker import ModelCrashed, WorkerDevice
    from router.policy import PolicyStore
    from router.standin_cloud import StandInCloud

    print("  live sample: loading Gemma 3 270M (device) and starting the stand-in cloud (llama_cpp.server) …", file=sys.stderr)
    model = gemma_path(settings.home)
    cloud = StandInCloud(model, settings.home / "standin-cloud.log")
    device = None
    served: dict[str, int] = {}
    done = 0
    bar = None
    try:
        # the model runs in a worker process: a native crash there cannot freeze this process (which holds
        # the embedded warehouse); it ends the live sample, and the simulated fleet runs all the same
        device = WorkerDevice(model, log_path=settings.home / "model-worker.log", n_ctx=512, n_threads=1)
        cloud.wait_ready()
        t0 = time.monotonic()
        router = Router(device, OpenAICloud(cloud.url, {2: "cloud-small", 3: "cloud-small"}), policy=PolicyStore(),
                        instance_id="live-router-1", now=lambda: start + timedelta(seconds=time.monotonic() - t0),
                        on_event=on_event, on_breaker_event=on_breaker_event)  # fmt: skip
        rng = random.Random(seed)
        bar = _bar(count, "live sample (real Gemma)", " req") if show else None
        for i in range(count):
            task_type = LIVE_TASKS[i % len(LIVE_TASKS)]
            text = request_text(rng, task_type)
            request_id = f"live-req-{uuid.UUID(int=rng.getrandbits(128))}"
            texts.add(request_id, task_type, text)
            response, _ = router.route(Request(task_type=task_type, text=text, session_id=f"live-session-{i % 3}",
                                               request_id=request_id, deadline_ms=30_000, expected_output_tokens=8,
                                               network="wifi", device_tier="high", app_id="live-sample"))  # fmt: skip
            served[response.served_by] = served.get(response.served_by, 0) + 1
            done += 1
            if bar:
                bar.update(1)
            if device.crashed:
                raise ModelCrashed(f"the model worker {device.crashed}; see {settings.home / 'model-worker.log'}")
        return {"requests": done, "served_by": served, "device_model": device.model}
    except (ModelCrashed, RouterscopeError) as exc:
        print(f"routerscope: warning: live sample stopped after {done} of {count} requests: {exc}; "
              "the simulated fleet runs without it", file=sys.stderr)  # fmt: skip
        return {"requests": done, "served_by": served, "failed": str(exc)}
    finally:
        if bar:
            bar.close()
        if device is not None:
            device.close()
        cloud.stop()


def start_fresh(settings: Settings) -> None:
    """Forget every earlier demo run of this home: stop the local broker (its memory goes with it),
    remove the embedded warehouse, the request-text store and the spool. Refuses a server warehouse."""
    import shutil

    from router.request_store import remove_store

    if not settings.warehouse.embedded:
        raise RouterscopeError("--fresh removes an embedded warehouse only; this one is a server: drop its database yourself")
    if settings.kafka_bootstrap_env:
        raise RouterscopeError("--fresh restarts the local broker only; this demo points at ROUTERSCOPE_KAFKA_BOOTSTRAP")
    broker.stop(settings)
    for path in (settings.warehouse.path, settings.home / "spool"):
        shutil.rmtree(path, ignore_errors=True)
    remove_store(settings.home)
    print(f"  fresh start: removed the demo warehouse {settings.warehouse.redacted()} and restarted the local broker", file=sys.stderr)


def run(settings: Settings, *, requests: int, seed: int, port: int, span_minutes: int = 120, corrupt: int = 3,
        live_requests: int = 0, fresh: bool = False) -> dict:  # fmt: skip
    from pipelines.ingest import ingest_topics
    from pipelines.run import materializations, run_job
    from routerscope import alerts, kafka
    from warehouse.client import open_warehouse
    from warehouse.metrics import compute
    from warehouse.migrate import migrate
    from warehouse.queries.metric_windows import write_window

    out: dict = {}
    if fresh:
        start_fresh(settings)
    restarted = False
    if settings.kafka_bootstrap_env:
        kafka.ensure_topics(settings)
        out["kafka"] = settings.kafka_bootstrap_env
    else:
        restarted = not broker.status(settings).running
        out["kafka"] = broker.start(settings, port=port).bootstrap
    with open_warehouse(settings, purpose="demo") as client:
        migrate(client)
        loaded_before = client.query("SELECT count() FROM routerscope.ingest_offsets").result_rows[0][0]
    if restarted and loaded_before:
        raise RouterscopeError(
            "the local broker keeps its messages in memory and was restarted since the last demo, so the demo's "
            f"warehouse ({settings.warehouse.redacted()}) refers to messages it no longer has. "
            "Run `routerscope demo --fresh` to start the demo over (it removes the demo's warehouse)"
        )
    span = timedelta(minutes=span_minutes)
    sim = simulate(settings, requests, seed, span, corrupt, live_requests=live_requests)
    out["simulated"] = sim
    print(f"  simulated {sim['requests']} requests and {sim['labels']} labels (SIMULATED), {corrupt} corrupted messages", file=sys.stderr)

    from pipelines.resources import RouterscopeResource

    resources = {"routerscope": RouterscopeResource.for_settings(settings)}
    print("  loading into the warehouse (Dagster ingest job) …", file=sys.stderr, flush=True)
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
        print(f"  data-quality suites and daily metrics for {day} (Dagster metrics_daily_job) …", file=sys.stderr, flush=True)
        daily = run_job("metrics_daily_job", partition_key=day.isoformat(), raise_on_error=False, resources=resources)
        checks = {e.check_name: e.passed for e in daily.get_asset_check_evaluations()}
        quality[day.isoformat()] = {"blocking_failed": [k for k, ok in checks.items() if not ok and k != "pipeline_health"],
                                    "metrics_materialized": daily.success}  # fmt: skip
    out["quality"] = quality
    out.update(summary=summary, fired=fired, firing=[a.alert_key for a in final.firing], days=[d.isoformat() for d in days])
    return out
