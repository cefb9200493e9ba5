"""What one instrumented decision leaves behind, pinned field by field: the span tree (names, kinds,
parent and child, times, status, every attribute), the decision event's bytes and trace headers, and
the metric points. The goldens are written out by hand here, not produced by the code under test, so
any change to the request path that would alter what a tracing backend, Kafka or a metric reader
sees fails here (docs/contract.md: the event is the contract; the span mirrors it)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from string import Template

import pytest
from opentelemetry import context as otel_context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from routerscope.core import names
from routerscope.core.procs import free_port
from routerscope.instrumentation.emitter import KafkaEmitter, Message
from routerscope.instrumentation.pii import pseudonymise, pseudonymise_request_id
from routerscope.instrumentation.sdk import InstrumentedRouter, Recorder
from routerscope.instrumentation.telemetry import Telemetry
from routerscope.router.backends import CloudResult
from routerscope.router.engine import Request, Router
from tests.support.fakes import ScriptedCloud, ScriptedDevice, dev
from tests.support.telemetry import ListEmitter

T0 = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
T0_NS = 1767323045123456000  # T0 in nanoseconds since the epoch, by hand: 2026-01-02T03:04:05.123456Z


def stack():
    exporter, emitter, reader = InMemorySpanExporter(), ListEmitter(), InMemoryMetricReader()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Telemetry(emitter, provider, MeterProvider(metric_readers=[reader])), exporter, emitter, reader


def spans_as_records(exporter):
    """Every finished span, in the order the exporter got them, as plain tuples; parents by name."""
    spans = exporter.get_finished_spans()
    by_id = {s.context.span_id: s.name for s in spans}
    return [
        (
            s.name,
            s.kind,
            by_id.get(s.parent.span_id) if s.parent else None,
            s.start_time,
            s.end_time,
            s.status.status_code,
            s.status.description,
            dict(s.attributes),
            len(s.events),
            len(s.links),
        )
        for s in spans
    ]


def metric_points(reader):
    out = {}
    for m in reader.get_metrics_data().resource_metrics[0].scope_metrics[0].metrics:
        for p in m.data.data_points:
            value = p.value if hasattr(p, "value") else (p.count, p.sum)
            out.setdefault(m.name, []).append((dict(p.attributes), value))
    return out


def headers_for(trace_id: str, span_id: str):
    # W3C traceparent: version 00, the ids, flags 03 (sampled, random trace id); no baggage set
    return (("traceparent", f"00-{trace_id}-{span_id}-03".encode()),)


def test_a_decision_recorded_through_the_sdk_leaves_exactly_these_spans_event_and_metrics():
    tel, exporter, out, reader = stack()
    recorder = Recorder(tel, policy_version="p-7")
    with recorder.decision(
        task_type="short_reply",
        session_id="alice@example.com",
        deadline_ms=2000,
        elapsed_ms=120,
        request_id="req-1",
        input_tokens=12,
        network="wifi",
        device_tier="high",
        start_time=T0,
    ) as d:
        d.device_attempt(
            level=0,
            outcome="low_confidence",
            latency_ms=180.5,
            confidence=0.41,
            threshold=0.7,
            ttft_ms=40.0,
            model="gemma-270m",
            output_tokens=5,
        )
        d.cloud_attempt(
            level=2, outcome="ok", latency_ms=420.25, model="gpt-4o-mini", output_tokens=12, cost_usd=0.0003
        )
        d.served(fallback_type="quality", reason="low_confidence")

    session = pseudonymise("alice@example.com")
    assert session.startswith("id-")  # a session id never reaches a span, an event or a key as it was
    ((message),) = out.messages
    event = d.event
    trace_id, span_id = event.trace_id, event.span_id
    golden = Template(
        '{"schema_version":2,"event_id":"$event_id","event_time":"2026-01-02T03:04:05.123456Z","request_id":"$rid",'
        '"session_id":"$session","task_type":"short_reply","mode":"live","entered_device":true,'
        '"fallback_type":"quality","reason":"low_confidence","degrade_level":2,'
        '"attempts":[{"level":0,"outcome":"low_confidence","latency_ms":180.5},'
        '{"level":2,"outcome":"ok","latency_ms":420.25}],"cloud_calls":1,"confidence":0.41,"threshold":0.7,'
        '"deadline_ms":2000,"elapsed_ms":120,"latency_ms":600.75,"input_tokens":12,"output_tokens":12,'
        '"policy_version":"p-7","app_id":null,"app_version":null,"confidence_source":"logprob","ttft_ms":40.0,'
        '"network":"wifi","device_tier":"high","has_pii":false,"device_model":"gemma-270m",'
        '"cloud_model":"gpt-4o-mini","shadow_agree":null,"cost_usd":0.0003,"trace_id":"$trace_id","span_id":"$span_id",'
        '"device_stats":null}'
    ).substitute(
        event_id=event.event_id,
        session=session,
        trace_id=trace_id,
        span_id=span_id,
        rid=pseudonymise_request_id("req-1"),
    )
    assert (message.topic, message.key, message.value) == (names.TOPIC_DECISIONS, session.encode(), golden.encode())
    assert tuple(message.headers) == headers_for(trace_id, span_id)
    assert message.to_line() == Message(message.topic, message.key, golden.encode(), message.headers).to_line()

    route = "route short_reply"
    device = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "llama.cpp",
        "gen_ai.request.model": "gemma-270m",
        "gen_ai.conversation.id": session,
        "router.attempt.level": 0,
        "router.attempt.outcome": "low_confidence",
        "gen_ai.usage.input_tokens": 12,
        "gen_ai.usage.output_tokens": 5,
        "error.type": "low_confidence",
    }
    cloud = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.conversation.id": session,
        "router.attempt.level": 2,
        "router.attempt.outcome": "ok",
        "gen_ai.usage.input_tokens": 12,
        "gen_ai.usage.output_tokens": 12,
    }
    decision = {
        "router.task_type": "short_reply",
        "router.fallback_type": "quality",
        "router.reason": "low_confidence",
        "router.degrade_level": 2,
        "router.cloud_calls": 1,
        "router.policy_version": "p-7",
        "router.entered_device": True,
        "router.mode": "live",
        "gen_ai.conversation.id": session,
        "router.confidence": 0.41,
        "router.threshold": 0.7,
    }
    t1, t2 = T0_NS + 180_500_000, T0_NS + 600_750_000  # the attempts run back to back from the start
    assert spans_as_records(exporter) == [
        ("chat gemma-270m", SpanKind.INTERNAL, route, T0_NS, t1, StatusCode.ERROR, "low_confidence", device, 0, 0),
        ("chat gpt-4o-mini", SpanKind.CLIENT, route, t1, t2, StatusCode.UNSET, None, cloud, 0, 0),
        (route, SpanKind.INTERNAL, None, T0_NS, t2, StatusCode.UNSET, None, decision, 0, 0),
    ]
    (root,) = [s for s in exporter.get_finished_spans() if s.parent is None]
    assert (format(root.context.trace_id, "032x"), format(root.context.span_id, "016x")) == (trace_id, span_id)

    key = {"task_type": "short_reply", "fallback_type": "quality", "reason": "low_confidence", "degrade_level": 2}
    assert metric_points(reader) == {
        "router.decisions": [(key, 1)],
        "router.decision.duration": [({"task_type": "short_reply", "degrade_level": 2}, (1, 600.75))],
        "routerscope.events": [
            ({"state": s}, n) for s, n in (("emitted", 1), ("delivered", 0), ("spooled", 0), ("dropped", 0))
        ],
        "routerscope.router.abandoned_calls": [({"boundary": "device"}, 0), ({"boundary": "cloud"}, 0)],
    }


def test_a_decision_of_our_router_leaves_exactly_these_spans_event_and_metrics():
    """InstrumentedRouter over scripted backends, the router's clock stopped (every latency 0) and its
    wall clock fixed: a quality fallback L0 → L1 → L2."""
    tel, exporter, out, reader = stack()
    router = Router(
        ScriptedDevice([dev(confidence=0.2), dev(confidence=0.3)]),
        ScriptedCloud([CloudResult("answer", 300.0, "ok", 9)]),
        clock=lambda: 100.0,
        now=lambda: T0,
    )
    policy = router.policy.current()
    threshold = policy.capability("short_reply").threshold
    instrumented = InstrumentedRouter(router, tel)
    _, event = instrumented.route(
        Request(task_type="short_reply", text="hello", session_id="sess-42", request_id="req-2", input_tokens=2)
    )
    ((message),) = out.messages
    trace_id, span_id = event.trace_id, event.span_id
    golden = Template(
        '{"schema_version":2,"event_id":"$event_id","event_time":"2026-01-02T03:04:05.123456Z","request_id":"$rid",'
        '"session_id":"$sid","task_type":"short_reply","mode":"live","entered_device":true,'
        '"fallback_type":"quality","reason":"low_confidence","degrade_level":2,'
        '"attempts":[{"level":0,"outcome":"low_confidence","latency_ms":0.0},'
        '{"level":1,"outcome":"low_confidence","latency_ms":0.0},{"level":2,"outcome":"ok","latency_ms":0.0}],'
        '"cloud_calls":1,"confidence":0.2,"threshold":$threshold,"deadline_ms":8000,"elapsed_ms":0,"latency_ms":0.0,'
        '"input_tokens":2,"output_tokens":9,"policy_version":"$policy","app_id":null,"app_version":null,'
        '"confidence_source":"logprob","ttft_ms":50.0,"network":"wifi","device_tier":null,"has_pii":false,'
        '"device_model":"scripted-device","cloud_model":"cloud-small","shadow_agree":null,'
        '"breaker":{"device":"closed","cloud":"closed"},"cost_usd":4.4e-6,"trace_id":"$trace_id","span_id":"$span_id",'
        '"device_stats":null,"all_cloud_cost_usd":4.4e-6,"rollout_stage":"full"}'
    ).substitute(
        event_id=event.event_id,
        threshold=repr(threshold),
        policy=policy.version,
        trace_id=trace_id,
        span_id=span_id,
        rid=pseudonymise_request_id("req-2"),
        sid=pseudonymise("sess-42"),
    )
    # cost: (2 + 9) tokens at the cloud-small price the default policy lists, 0.0004 $ per 1000 tokens
    assert (message.topic, message.key, message.value) == (
        names.TOPIC_DECISIONS,
        pseudonymise("sess-42").encode(),
        golden.encode(),
    )
    assert tuple(message.headers) == headers_for(trace_id, span_id)

    records = spans_as_records(exporter)
    route = "route short_reply"
    start, end = records[-1][3], records[-1][4]
    assert start <= end

    def attempt(level, model, provider, outcome, tokens=None):
        attrs = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
            "gen_ai.conversation.id": pseudonymise("sess-42"),
            "router.attempt.level": level,
            "router.attempt.outcome": outcome,
            "gen_ai.usage.input_tokens": 2,
        }
        if tokens is not None:
            attrs["gen_ai.usage.output_tokens"] = tokens
        failed = outcome != "ok"
        if failed:
            attrs["error.type"] = outcome
        kind = SpanKind.INTERNAL if level <= 1 else SpanKind.CLIENT
        status = (StatusCode.ERROR, outcome) if failed else (StatusCode.UNSET, None)
        return (f"chat {model}", kind, route, start, start, *status, attrs, 0, 0)

    decision = {
        "router.task_type": "short_reply",
        "router.fallback_type": "quality",
        "router.reason": "low_confidence",
        "router.degrade_level": 2,
        "router.cloud_calls": 1,
        "router.policy_version": policy.version,
        "router.entered_device": True,
        "router.mode": "live",
        "gen_ai.conversation.id": pseudonymise("sess-42"),
        "router.confidence": 0.2,
        "router.threshold": threshold,
    }
    assert records == [
        attempt(0, "scripted-device", "llama.cpp", "low_confidence"),
        attempt(1, "scripted-device", "llama.cpp", "low_confidence"),
        attempt(2, "cloud-small", "openai", "ok", tokens=9),  # the router knows the last attempt's tokens only
        (route, SpanKind.INTERNAL, None, start, end, StatusCode.UNSET, None, decision, 0, 0),
    ]
    key = {"task_type": "short_reply", "fallback_type": "quality", "reason": "low_confidence", "degrade_level": 2}
    points = metric_points(reader)
    assert points["router.decisions"] == [(key, 1)]
    assert points["router.decision.duration"] == [({"task_type": "short_reply", "degrade_level": 2}, (1, 0.0))]


def test_a_personal_id_is_redacted_every_time_however_many_clean_ones_were_remembered():
    """docs/contract.md (no personal data in telemetry): the recorder remembers ids that `scrub` keeps, never
    one it redacts, so a phone number or e-mail is redacted on every decision, also past the memory's
    bound; a canonical UUID request id is kept, an e-mail as request id is not."""
    tel, _, out, _ = stack()
    recorder = Recorder(tel)
    sessions = [f"sess-{i}" for i in range(996)] + ["+44 20 7946 0958", "bob@example.org"] * 2
    for i, session in enumerate(sessions):
        request_id = "5f0c1c1e-8a3b-4c2d-9e7f-0123456789ab" if i % 2 else "bob@example.org"
        with recorder.decision(
            task_type="short_reply", session_id=session, deadline_ms=2000, request_id=request_id
        ) as d:
            d.device_attempt(level=0, outcome="ok", latency_ms=5)
            d.served()
    recorder._sessions.update((f"x-{i}", f"x-{i}") for i in range(5000))  # past the bound: the memory starts again
    with recorder.decision(task_type="short_reply", session_id="+44 20 7946 0958", deadline_ms=2000) as d:
        d.device_attempt(level=0, outcome="ok", latency_ms=5)
        d.served()
    decisions = out.decisions()
    by_session = {}
    for raw, event in zip(sessions + ["+44 20 7946 0958"], decisions):
        by_session.setdefault(raw, set()).add(event["session_id"])
    assert by_session["+44 20 7946 0958"] == {pseudonymise("+44 20 7946 0958")}
    assert by_session["bob@example.org"] == {pseudonymise("bob@example.org")}
    assert all(v == {pseudonymise(k)} for k, v in by_session.items() if k.startswith("sess-"))
    assert {e["request_id"] for e in decisions[:-1]} == {
        "5f0c1c1e-8a3b-4c2d-9e7f-0123456789ab",
        pseudonymise_request_id("bob@example.org"),
    }
    raw = (b"@example.org", b"+44 20 7946 0958")
    assert not any(r in m.value or r in m.key for m in out.messages for r in raw)


def test_the_event_carries_the_context_current_at_the_end_of_the_block_as_it_always_has():
    """A block that leaves a context of its own current (here: baggage attached and not yet detached)
    sends its event under that context, baggage header included, exactly as before; parenting of the
    attempt spans is unchanged."""
    from opentelemetry import baggage
    from opentelemetry import context as otel_context

    tel, exporter, out, _ = stack()
    recorder = Recorder(tel)
    with recorder.decision(task_type="short_reply", session_id="s1", deadline_ms=2000) as d:
        d.device_attempt(level=0, outcome="ok", latency_ms=5)
        d.served()
        token = otel_context.attach(baggage.set_baggage("tenant", "t-1"))
    otel_context.detach(token)
    ((message),) = out.messages
    assert tuple(message.headers) == (
        ("traceparent", f"00-{d.event.trace_id}-{d.event.span_id}-03".encode()),
        ("baggage", b"tenant=t-1"),
    )
    assert [(name, parent) for name, _, parent, *_ in spans_as_records(exporter)] == [
        ("chat device", "route short_reply"),
        ("route short_reply", None),
    ]


def decision_metrics(reader):
    """One collection: the decision counter's and the latency histogram's points (as `metric_points`
    gives them), and the histogram's exemplars as (value, trace id, span id)."""
    points, exemplars = {}, []
    for m in reader.get_metrics_data().resource_metrics[0].scope_metrics[0].metrics:
        if m.name not in ("router.decisions", "router.decision.duration"):
            continue
        for p in m.data.data_points:
            value = p.value if hasattr(p, "value") else (p.count, p.sum)
            points.setdefault(m.name, []).append((dict(p.attributes), value))
            if m.name == "router.decision.duration":  # an observation may carry the collector's context
                exemplars += [(e.value, f"{e.trace_id:032x}", f"{e.span_id:016x}") for e in p.exemplars]
    return points, exemplars


def stopped_emitter(path):
    """A real emitter whose sender thread has stopped (nobody listens at its broker address): what is
    handed to the sender waits."""
    config = {"bootstrap_servers": f"127.0.0.1:{free_port()}", "max_block_ms": 500, "bootstrap_timeout_ms": 500}
    emitter = KafkaEmitter(config, path)
    emitter._stop.set()
    emitter._thread.join(5)
    return emitter


def record_one(tel):
    with Recorder(tel).decision(task_type="short_reply", session_id="s1", deadline_ms=2000, start_time=T0) as d:
        d.device_attempt(level=0, outcome="low_confidence", latency_ms=180.5, confidence=0.41, threshold=0.7)
        d.cloud_attempt(level=2, outcome="ok", latency_ms=420.25)
        d.served(fallback_type="quality", reason="low_confidence")
    return d.event


ONE_DECISION_SPANS = [  # record_one's decision: its span and its two attempt spans, as a tracing backend sees them
    (
        "chat device",
        SpanKind.INTERNAL,
        "route short_reply",
        T0_NS,
        T0_NS + 180_500_000,
        StatusCode.ERROR,
        "low_confidence",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "llama.cpp",
            "gen_ai.request.model": "device",
            "gen_ai.conversation.id": "s1",
            "router.attempt.level": 0,
            "router.attempt.outcome": "low_confidence",
            "gen_ai.usage.input_tokens": 0,
            "error.type": "low_confidence",
        },
        0,
        0,
    ),
    (
        "chat cloud",
        SpanKind.CLIENT,
        "route short_reply",
        T0_NS + 180_500_000,
        T0_NS + 600_750_000,
        StatusCode.UNSET,
        None,
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": "cloud",
            "gen_ai.conversation.id": "s1",
            "router.attempt.level": 2,
            "router.attempt.outcome": "ok",
            "gen_ai.usage.input_tokens": 0,
            "gen_ai.usage.output_tokens": 0,
        },
        0,
        0,
    ),
    (
        "route short_reply",
        SpanKind.INTERNAL,
        None,
        T0_NS,
        T0_NS + 600_750_000,
        StatusCode.UNSET,
        None,
        {
            "router.task_type": "short_reply",
            "router.fallback_type": "quality",
            "router.reason": "low_confidence",
            "router.degrade_level": 2,
            "router.cloud_calls": 1,
            "router.policy_version": "app",
            "router.entered_device": True,
            "router.mode": "live",
            "gen_ai.conversation.id": "s1",
            "router.confidence": 0.41,
            "router.threshold": 0.7,
        },
        0,
        0,
    ),
]


@pytest.mark.parametrize("recorded_by", ["the request path", "the sender thread", "the collection"])
def test_whoever_makes_the_attempt_spans_and_the_metrics_of_a_decision_they_are_the_same(recorded_by, tmp_path):
    """With an emitter that has a sender thread, a decision's attempt spans are made, and the decision
    counted and its latency recorded, off the request path: by the sender between batches, or by the
    next collection, whichever comes first (without a sender, at the call). Every way the spans are
    the same (names, kinds, parents, times, status, attributes; the attempt spans end after their
    parent when the sender makes them), a collection sees the same points, and the latency's exemplar
    links to the decision span."""
    if recorded_by == "the request path":
        emitter = ListEmitter()  # no sender thread
    elif recorded_by == "the sender thread":
        config = {"bootstrap_servers": f"127.0.0.1:{free_port()}", "max_block_ms": 500, "bootstrap_timeout_ms": 500}
        emitter = KafkaEmitter(config, tmp_path / "spool")
    else:
        emitter = stopped_emitter(tmp_path / "spool")
    exporter, reader, provider = InMemorySpanExporter(), InMemoryMetricReader(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tel = Telemetry(emitter, provider, MeterProvider(metric_readers=[reader]))
    token = otel_context.attach(otel_context.Context())  # a root decision, whatever an earlier test left current
    try:
        event = record_one(tel)
        if recorded_by == "the sender thread":
            deadline = time.monotonic() + 10
            while tel._decided and time.monotonic() < deadline:
                time.sleep(0.01)
            assert not tel._decided, "the sender thread recorded it, before any collection"
        elif recorded_by == "the collection":
            assert len(tel._decided) == 1, "waiting: the request path did not record it"
            assert [name for name, *_ in spans_as_records(exporter)] == ["route short_reply"]
        points, exemplars = decision_metrics(reader)
    finally:
        otel_context.detach(token)
        if isinstance(emitter, KafkaEmitter):
            emitter._stop.set()
            emitter._thread.join(5)
    session = pseudonymise("s1")  # the spans carry the session's pseudonym; the golden records say "s1"
    records = [
        (*r[:7], {k: "s1" if v == session else v for k, v in r[7].items()}, *r[8:]) for r in spans_as_records(exporter)
    ]
    if recorded_by == "the request path":
        assert records == ONE_DECISION_SPANS
    else:
        assert records == ONE_DECISION_SPANS[2:] + ONE_DECISION_SPANS[:2]
    (root,) = [s for s in exporter.get_finished_spans() if s.parent is None]
    assert (format(root.context.trace_id, "032x"), format(root.context.span_id, "016x")) == (
        event.trace_id,
        event.span_id,
    )
    assert {s.context.trace_id for s in exporter.get_finished_spans()} == {root.context.trace_id}
    key = {"task_type": "short_reply", "fallback_type": "quality", "reason": "low_confidence", "degrade_level": 2}
    assert points == {
        "router.decisions": [(key, 1)],
        "router.decision.duration": [({"task_type": "short_reply", "degrade_level": 2}, (1, 600.75))],
    }
    assert exemplars == [(600.75, event.trace_id, event.span_id)]
    assert not tel._decided


def test_past_the_bound_of_waiting_decisions_they_are_recorded_at_the_call_and_none_is_lost(tmp_path):
    """The decisions waiting for the sender are bounded (by the emitter's queue size, at least 4096):
    past it, a decision's attempt spans, count and latency are made at the call, as with no sender."""
    reader = InMemoryMetricReader()
    tel = Telemetry(stopped_emitter(tmp_path / "spool"), TracerProvider(), MeterProvider(metric_readers=[reader]))
    assert tel._decided_max == 100_000  # the emitter's default queue size
    tel._decided_max = 2
    for _ in range(3):
        record_one(tel)
    assert len(tel._decided) == 2
    points, exemplars = decision_metrics(reader)
    assert points["router.decisions"][0][1] == 3
    assert points["router.decision.duration"] == [({"task_type": "short_reply", "degrade_level": 2}, (3, 1802.25))]


def test_work_handed_to_the_sender_that_fails_is_logged_and_the_sender_goes_on(tmp_path, caplog):
    config = {"bootstrap_servers": f"127.0.0.1:{free_port()}", "max_block_ms": 500, "bootstrap_timeout_ms": 500}
    emitter = KafkaEmitter(config, tmp_path / "spool")
    runs = []
    emitter.call_on_sender(lambda: 1 / 0)
    emitter.call_on_sender(lambda: runs.append(1))
    try:
        deadline = time.monotonic() + 10
        while len(runs) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        emitter._stop.set()
        emitter._thread.join(5)
    assert len(runs) >= 3 and emitter.faults()["restarts"] == 0
    assert "work handed to the event sender failed" in caplog.text


def test_abandoned_calls_are_counted_and_a_late_shadow_event_leaves_through_the_same_path(tmp_path):
    """docs/router.md: an abandoned backend call is counted (`routerscope.router.abandoned_calls`, by
    boundary); a shadow request whose device ends after the user was served still sends its one event."""
    import json
    import threading

    from routerscope.router.policy import DEFAULT_POLICY, PolicyStore
    from tests.support.fakes import QuickCloud

    class Hanging:
        model, ttft_ms, tps = "hanging", 1.0, 1e6

        def __init__(self):
            self.release = threading.Event()

        def generate(self, prompt, **kw):
            self.release.wait(10)
            return dev()

    path = tmp_path / "policy.yaml"
    text = DEFAULT_POLICY.read_text().replace("shadow: []", "shadow: [short_reply]")
    # room for two calls the device never finishes (an abandoned call keeps its slot until it really ends)
    path.write_text(text.replace("device_concurrency: 1 ", "device_concurrency: 4 "))
    tel, _, out, reader = stack()
    device = Hanging()
    instrumented = InstrumentedRouter(Router(device, QuickCloud(), policy=PolicyStore(path)), tel)
    sent = threading.Event()
    instrumented.router.on_shadow_event = (lambda send: lambda e: (send(e), sent.set()))(
        instrumented.router.on_shadow_event
    )
    try:  # the shadow first: a shadow run only takes a device no live request holds
        _, shadow = instrumented.route(Request(task_type="short_reply", text="x", session_id="s", deadline_ms=200))
        _, live = instrumented.route(Request(task_type="intent_classify", text="x", session_id="s", deadline_ms=200))
        assert shadow is None and sent.wait(5)
    finally:
        device.release.set()
    assert live.attempts[0].abandoned is True and len(out.messages) == 2
    late = [json.loads(m.value) for m in out.messages if json.loads(m.value)["mode"] == "shadow"]
    assert len(late) == 1 and late[0]["attempts"][0]["abandoned"] is True and late[0]["degrade_level"] == 2
    assert metric_points(reader)["routerscope.router.abandoned_calls"] == [
        ({"boundary": "device"}, 2),
        ({"boundary": "cloud"}, 0),
    ]
