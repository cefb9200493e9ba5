"""Instrumentation against a real broker: an outage never blocks the request path and loses
nothing, the spool's cap drops the oldest and counts them, a SIGKILLed process replays its spool,
personal data never reaches Kafka or the warehouse; and the span structure of a fallback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from routerscope.core import broker, names
from routerscope.core.kafka import producer_config
from routerscope.core.procs import free_port
from routerscope.instrumentation import attributes as A
from routerscope.instrumentation.emitter import KafkaEmitter, Message
from routerscope.instrumentation.sdk import InstrumentedRouter
from routerscope.instrumentation.telemetry import Telemetry
from routerscope.router.backends import CloudResult
from routerscope.router.engine import Request, Router
from routerscope.router.sim.backends import InstantCloud, InstantDevice
from routerscope.warehouse.client import open_warehouse
from routerscope.warehouse.ingest.loader import load
from tests.support.fakes import ScriptedCloud, ScriptedDevice, cloud, dev
from tests.support.home import REPO, settings_for
from tests.support.kafka import consume_all, start

pytestmark = pytest.mark.integration


@pytest.mark.slow
def test_a_broker_outage_never_blocks_requests_and_loses_nothing(down_broker, home):
    settings = down_broker["settings"]
    emitter = KafkaEmitter(producer_config(settings), home / "spool", retry_every_s=0.5)
    router = InstrumentedRouter(Router(InstantDevice(), InstantCloud()), Telemetry(emitter, TracerProvider()))
    durations, ids = [], []
    for i in range(3000):  # ~2 s at a steady rate with the broker down
        t = time.perf_counter()
        _, event = router.route(Request(task_type="short_reply", text="hello", session_id=f"s{i % 50}"))
        durations.append(time.perf_counter() - t)
        ids.append(event.event_id)
        if i % 100 == 0:
            time.sleep(0.05)
    durations.sort()
    # A route() that waited on Kafka would take the producer's max_block_ms (2 s) or more; on a
    # shared 2-core machine scheduling alone can cost milliseconds at the tail, hence the bounds.
    assert durations[len(durations) // 2] < 0.001, "route() waited on Kafka"
    assert durations[int(len(durations) * 0.99)] < 0.1, "route() waited on Kafka"
    counts = emitter.counters()
    assert counts["emitted"] == 3000 and counts["delivered"] == 0
    assert counts["emitted"] == counts["delivered"] + counts["spooled"] + counts["dropped"] + counts["in_flight"]
    start(down_broker)
    assert emitter.flush(60), emitter.counters()
    emitter.close()
    counts = emitter.counters()
    assert counts == {"emitted": 3000, "delivered": 3000, "spooled": 0, "dropped": 0, "in_flight": 0}
    got = consume_all(settings.kafka_bootstrap(), names.TOPIC_DECISIONS, 3000)
    seen = [json.loads(m.value())["event_id"] for m in got]
    assert len(seen) == 3000 and set(seen) == set(ids), "every event exactly once"
    assert all(dict(m.headers() or [])["traceparent"] for m in got[:10])


def test_a_batch_producer_is_paced_by_the_sender_not_dropped(broker_settings, tmp_path):
    """The request path drops on a full queue (and counts it); a batch producer (the simulator)
    waits for room instead, so a burst far larger than the queue arrives whole."""
    config = producer_config(broker_settings)
    paced = KafkaEmitter(config, tmp_path / "paced", queue_size=10, block_when_full=True)
    for i in range(3000):
        paced.emit(Message("test.emitter.paced", b"paced", f"paced-{i}".encode()))
    assert paced.flush(60)
    paced.close()
    assert paced.counters() == {"emitted": 3000, "delivered": 3000, "spooled": 0, "dropped": 0, "in_flight": 0}

    request_path = KafkaEmitter(config, tmp_path / "request", queue_size=10)
    for i in range(3000):
        request_path.emit(Message("test.emitter.paced", b"request", f"request-{i}".encode()))
    request_path.flush(60)
    request_path.close()
    counters = request_path.counters()
    assert counters["dropped"] > 0 and counters["delivered"] + counters["dropped"] == 3000


@pytest.mark.slow
def test_past_the_spool_cap_the_oldest_are_dropped_and_counted(down_broker, home):
    settings = down_broker["settings"]
    emitter = KafkaEmitter(producer_config(settings), home / "spool", spool_cap_bytes=40_000, retry_every_s=0.5)
    emitter.spool.segment_bytes = 8_000
    for i in range(1000):
        emitter.emit(Message(names.TOPIC_DECISIONS, b"k", json.dumps({"n": i, "pad": "x" * 60}).encode()))
    deadline = time.monotonic() + 20
    while emitter.counters()["in_flight"] and time.monotonic() < deadline:
        time.sleep(0.05)
    counts = emitter.counters()  # read under the sender's lock: a consistent snapshot
    dropped = counts["dropped"]
    assert dropped > 0 and counts["spooled"] + dropped == 1000
    start(down_broker)
    assert emitter.flush(60)
    emitter.close()
    got = consume_all(settings.kafka_bootstrap(), names.TOPIC_DECISIONS, 1000 - dropped)
    numbers = sorted(json.loads(m.value())["n"] for m in got)
    assert numbers == list(range(dropped, 1000)), "exactly the oldest were dropped, nothing else"


EMIT_SCRIPT = r"""
import json, sys, time
from pathlib import Path
from routerscope.instrumentation.emitter import KafkaEmitter, Message
bootstrap, spool, mode = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
emitter = KafkaEmitter({"bootstrap_servers": bootstrap, "acks": "all", "enable_idempotence": True, "max_block_ms": 1000,
                        "bootstrap_timeout_ms": 1000},
                       spool, retry_every_s=0.5)
if mode == "emit":
    for i in range(500):
        emitter.emit(Message("router.decisions.v1", b"k", json.dumps({"n": i}).encode()))
    while emitter.spooled < 500:
        time.sleep(0.02)
    print("spooled", flush=True)
    time.sleep(600)
else:
    ok = emitter.flush(60)
    emitter.close()
    print(json.dumps(emitter.counters()), ok, flush=True)
"""


@pytest.mark.slow
def test_a_killed_process_delivers_its_spool_after_restart(down_broker, home):
    settings = down_broker["settings"]
    bootstrap, spool = settings.kafka_bootstrap(), str(home / "spool")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    first = subprocess.Popen(
        [sys.executable, "-c", EMIT_SCRIPT, bootstrap, spool, "emit"], stdout=subprocess.PIPE, text=True, env=env
    )
    assert first.stdout.readline().strip() == "spooled"
    first.send_signal(signal.SIGKILL)
    first.wait()
    start(down_broker)
    second = subprocess.run(
        [sys.executable, "-c", EMIT_SCRIPT, bootstrap, spool, "replay"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert second.returncode == 0, second.stderr
    counters = json.loads(second.stdout.split(" True")[0])
    assert counters["delivered"] == 500 and counters["spooled"] == 0
    got = consume_all(bootstrap, names.TOPIC_DECISIONS, 500)
    assert sorted(json.loads(m.value())["n"] for m in got) == list(range(500))


CANARIES = ("canary.person@example.com", "+44 20 7946 0958", "4111 1111 1111 1111")


@pytest.mark.slow
def test_personal_data_canaries_reach_neither_kafka_nor_the_warehouse(home):
    settings = settings_for(home)
    broker.start(settings, port=free_port())
    try:
        emitter = KafkaEmitter(producer_config(settings), home / "spool")
        router = InstrumentedRouter(
            Router(ScriptedDevice([dev(confidence=0.1, text="call +44 20 7946 0958")]), ScriptedCloud([cloud()])),
            Telemetry(emitter),
        )
        for i, canary in enumerate(CANARIES):
            for has_pii in (True, False):
                router.route(
                    Request(
                        task_type="short_reply",
                        text=f"please mail {canary} now",
                        session_id=canary,
                        request_id=f"{canary}-{i}",
                        has_pii=has_pii,
                        app_id=canary,
                    )
                )
        assert emitter.flush(30)
        emitter.close()
        raw = b"".join(
            m.value() + b"".join(v for _, v in (m.headers() or []))
            for m in consume_all(settings.kafka_bootstrap(), names.TOPIC_DECISIONS, 6)
        )
        assert raw.count(b'"event_id"') == 6
        for canary in CANARIES:
            assert canary.encode() not in raw
        load(settings, idle_timeout_s=0.5)
        with open_warehouse(settings) as client:
            rows = repr(client.query("SELECT * FROM routerscope.decisions").result_rows)
        assert rows.count("short_reply") == 6
        for canary in CANARIES:
            assert canary not in rows
    finally:
        broker.stop(settings)


def test_a_fallback_decision_is_a_span_with_attempt_children_and_metrics():
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    router = InstrumentedRouter(
        Router(
            ScriptedDevice([dev(confidence=0.2), dev(confidence=0.3)]),
            ScriptedCloud([CloudResult("answer", 300.0, "ok", 9)]),
        ),
        Telemetry(None, tracer_provider, MeterProvider(metric_readers=[reader])),
    )
    _, event = router.route(Request(task_type="short_reply", text="hello", session_id="sess-42"))
    spans = exporter.get_finished_spans()
    parent = next(s for s in spans if s.name == "route short_reply")
    children = sorted(
        (s for s in spans if s.parent and s.parent.span_id == parent.context.span_id), key=lambda s: s.start_time
    )
    assert (
        parent.attributes[A.ROUTER_FALLBACK_TYPE] == "quality"
        and parent.attributes[A.ROUTER_REASON] == "low_confidence"
    )
    assert parent.attributes[A.ROUTER_DEGRADE_LEVEL] == 2 and parent.attributes[A.ROUTER_CLOUD_CALLS] == 1
    assert [c.attributes[A.ROUTER_ATTEMPT_LEVEL] for c in children] == [0, 1, 2]
    assert [c.attributes.get(A.ERROR_TYPE) for c in children] == ["low_confidence", "low_confidence", None]
    assert (
        children[2].attributes[A.GEN_AI_PROVIDER_NAME] == "openai"
        and children[2].attributes[A.GEN_AI_REQUEST_MODEL] == "cloud-small"
    )
    from routerscope.instrumentation.pii import pseudonymise

    # the session as recorded: its keyed hash (docs/operations.md, the PII key)
    assert all(c.attributes[A.GEN_AI_CONVERSATION_ID] == pseudonymise("sess-42") for c in children)
    assert event.trace_id == format(parent.context.trace_id, "032x")
    points = [
        p
        for m in reader.get_metrics_data().resource_metrics[0].scope_metrics[0].metrics
        if m.name == A.METRIC_DECISIONS
        for p in m.data.data_points
    ]
    assert [dict(p.attributes) for p in points] == [
        {"task_type": "short_reply", "fallback_type": "quality", "reason": "low_confidence", "degrade_level": 2}
    ]
