"""OTLP in against the real broker and the real embedded warehouse: `routerscope collect`'s receiver fed by
the real OTLP/HTTP exporter (protobuf, gzip) and by OTLP/JSON, a Collector's Kafka message, the loader's
mapping step, and hostile bodies that get the right status while the receiver keeps serving."""

from __future__ import annotations

import gzip
import http.client
import json

import pytest
from google.protobuf import json_format
from opentelemetry import context as otel_context
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.trace.export import SpanExportResult

from routerscope.core.procs import free_port
from routerscope.warehouse.ingest import loader
from tests.support.home import settings_for
from tests.support.ingest import produce, query
from tests.support.otlp import (
    SECRET,
    collector_messages,
    export,
    fallback_trace,
    finished_spans,
    openinference_timeout_trace,
    running_receiver,
)

pytestmark = pytest.mark.integration
ROW = (
    "SELECT fallback_type, reason, entered_device, degrade_level, attempt_levels, attempt_outcomes, cloud_calls,"
    " device_model, cloud_model, input_tokens, output_tokens, latency_ms, app_id, app_version, task_type"
    " FROM routerscope.decisions FINAL WHERE trace_id = {t:String}"
)
EXPECTED = (
    "error",
    "device_error",
    True,
    2,
    [0, 2],
    ["error", "ok"],
    1,
    "gemma-3-270m",
    "gpt-4o-mini-2024-07-18",
    12,
    7,
    40.0,
    "support-bot",
    "1.2",
    "unknown",
)


@pytest.fixture
def otlp_stack(home):
    """A broker and an empty warehouse of this test's own, with a mapping file that puts 127.0.0.1:8081
    (a llama.cpp server) on the device."""
    from routerscope.core import broker

    mapping = home / "otlp-mapping.yaml"
    mapping.write_text("device:\n  server_addresses: ['127.0.0.1:8081']\n")
    settings = settings_for(home, ROUTERSCOPE_OTLP_MAPPING=str(mapping))
    broker.start(settings, port=free_port())
    yield settings
    broker.stop(settings)


def trace_id(spans) -> str:
    return f"{spans[0].context.trace_id:032x}"


def post(port: int, body: bytes, content_type: str = "application/x-protobuf", **headers) -> tuple[int, dict, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", "/v1/traces", body=body, headers={"Content-Type": content_type, **headers})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def otlp_json(spans) -> bytes:
    """OTLP/JSON as the spec writes it: ids in hex."""
    doc = json_format.MessageToDict(encode_spans(spans))
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in s:
                        s[key] = __import__("base64").b64decode(s[key]).hex()
    return json.dumps(doc).encode()


def assert_no_content(settings) -> None:
    for table in ("decisions", "quarantine"):
        rows = query(settings, f"SELECT * FROM routerscope.{table}")  # noqa: S608 - a fixed table name
        assert "secret prompt" not in repr(rows) and "4111" not in repr(rows)


@pytest.mark.slow
def test_spans_from_the_real_exporter_protobuf_gzip_and_json_land_as_the_same_fallback_decision(otlp_stack):
    settings = otlp_stack
    by_protobuf = finished_spans(fallback_trace)
    by_json = finished_spans(fallback_trace, session="jane.doe@example.com")
    with running_receiver(settings) as receiver:
        assert export(by_protobuf, receiver.port, compression=Compression.Gzip) == SpanExportResult.SUCCESS
        status, headers, body = post(receiver.port, otlp_json(by_json), "application/json")
        assert status == 200 and headers["Content-Type"] == "application/json" and json.loads(body) == {}
    result = loader.load(settings, idle_timeout_s=0.5).as_dict()
    assert result["otlp"] == {"messages": 2, "traces": 2, "mapped": 2, "quarantined": {}}
    assert result["loaded"]["decisions"] == 2
    assert query(settings, ROW, t=trace_id(by_protobuf)) == [EXPECTED]
    assert query(settings, ROW, t=trace_id(by_json)) == [EXPECTED]
    assert_no_content(settings)
    # what collect wrote to Kafka holds no content, and the session id that looks personal is hashed there too
    from tests.support.kafka import consume_all

    written = b"".join(m.value() for m in consume_all(settings.kafka_bootstrap(), settings.otlp_topic, expect=2))
    assert SECRET.encode() not in written and b"4111" not in written and b"jane" not in written
    (session,) = query(
        settings, "SELECT session_id FROM routerscope.decisions WHERE trace_id = {t:String}", t=trace_id(by_json)
    )[0]
    assert session.startswith("redacted-")
    # a second load maps nothing again: the positions were stored
    assert "otlp" not in loader.load(settings, idle_timeout_s=0.5).as_dict()


@pytest.mark.slow
def test_a_collector_kafka_message_with_otlp_proto_encoding_gets_the_same_decision(otlp_stack):
    """What a Collector's Kafka exporter writes (`encoding: otlp_proto`, `partition_traces_by_id: true`),
    unstripped, content and all: the loader maps it like the receiver's, and no content lands."""
    settings = otlp_stack
    spans = finished_spans(fallback_trace)
    ((key, value),) = collector_messages(spans)
    assert SECRET.encode() in value
    produce(settings, settings.otlp_topic, [value], keys=[key])
    result = loader.load(settings, idle_timeout_s=0.5).as_dict()
    assert result["otlp"]["mapped"] == 1
    assert query(settings, ROW, t=trace_id(spans)) == [EXPECTED]
    assert_no_content(settings)


@pytest.mark.slow
def test_openinferences_timeout_and_first_token_events_map_the_same_through_collect_and_a_collector(otlp_stack):
    """OpenInference says a timeout only in an `exception` event and its first token only in a `First Token
    Stream Event`: through `collect` (which keeps those events, the exception's type alone) and through a
    Collector's unstripped Kafka message (read through the same allow-list) the decision is the same timeout
    fallback, with the device model from the request parameters and TTFT 120 ms, and no content lands."""
    settings = otlp_stack
    by_collect = finished_spans(openinference_timeout_trace, session="oi-collect")
    by_collector = finished_spans(openinference_timeout_trace, session="oi-collector")
    with running_receiver(settings) as receiver:
        assert export(by_collect, receiver.port) == SpanExportResult.SUCCESS
    ((key, value),) = collector_messages(by_collector)
    assert SECRET.encode() in value
    produce(settings, settings.otlp_topic, [value], keys=[key])
    result = loader.load(settings, idle_timeout_s=0.5).as_dict()
    assert result["otlp"]["mapped"] == 2, result["otlp"]
    row = (
        "SELECT fallback_type, reason, attempt_levels, attempt_outcomes, device_model, cloud_model, ttft_ms"
        " FROM routerscope.decisions FINAL WHERE trace_id = {t:String}"
    )
    expected = ("timeout", "device_timeout", [0, 2], ["timeout", "ok"], "gemma-3-270m", "gpt-4o-mini-2024-07-18", 120.0)
    assert query(settings, row, t=trace_id(by_collect)) == [expected]
    assert query(settings, row, t=trace_id(by_collector)) == [expected]
    assert_no_content(settings)


@pytest.mark.slow
def test_a_trace_whose_root_comes_in_a_later_message_waits_for_it_and_maps_whole(otlp_stack):
    """A Collector without groupbytrace sends a trace's calls before its root: the load that sees only the
    calls leaves them for later, and the next one maps the whole trace once."""
    settings = otlp_stack
    spans = finished_spans(fallback_trace)
    calls = [s for s in spans if s.parent is not None]
    roots = [s for s in spans if s.parent is None]
    produce(settings, settings.otlp_topic, [collector_messages(calls)[0][1]], keys=[b"t"])
    first = loader.load(settings, idle_timeout_s=0.5).as_dict()["otlp"]
    assert (first["deferred"], first["mapped"]) == (1, 0)
    produce(settings, settings.otlp_topic, [collector_messages(roots)[0][1]], keys=[b"t"])
    second = loader.load(settings, idle_timeout_s=0.5).as_dict()["otlp"]
    assert (second["messages"], second["mapped"], second.get("deferred", 0)) == (2, 1, 0)
    assert query(settings, ROW, t=trace_id(spans)) == [EXPECTED]
    assert "otlp" not in loader.load(settings, idle_timeout_s=0.5).as_dict()


@pytest.mark.slow
def test_a_trace_sent_again_after_its_decision_was_stored_is_quarantined_and_the_day_stays_clean(otlp_stack):
    """An exporter's retry after a load, or spans that end after their trace was written: the stored decision
    stands, the spans are kept in the quarantine as `otlp.already_mapped`, and the id keeps one copy (a second,
    different event under it failed the blocking check `decisions.unique.event_content`)."""
    settings = otlp_stack
    spans = finished_spans(fallback_trace)
    ((key, value),) = collector_messages(spans)
    produce(settings, settings.otlp_topic, [value], keys=[key])
    assert loader.load(settings, idle_timeout_s=0.5).as_dict()["otlp"]["mapped"] == 1
    late = [s for s in spans if s.parent is None or s.name.startswith("chat gemma")]  # the root and one call again
    produce(settings, settings.otlp_topic, [collector_messages(late)[0][1]], keys=[key])
    second = loader.load(settings, idle_timeout_s=0.5).as_dict()["otlp"]
    assert (second["mapped"], second["quarantined"]) == (0, {"otlp.already_mapped": 1})
    assert query(settings, ROW, t=trace_id(spans)) == [EXPECTED]
    assert query(
        settings, "SELECT count() FROM routerscope.decisions WHERE trace_id = {t:String}", t=trace_id(spans)
    ) == [(1,)]
    rows = query(settings, "SELECT rules, error FROM routerscope.quarantine WHERE kafka_topic = 'otlp_spans'")
    assert rows and rows[0][0] == ["otlp.already_mapped"] and "the stored decision stands" in rows[0][1]


def test_what_maps_to_nothing_is_quarantined_with_the_reason_never_dropped(otlp_stack):
    settings = otlp_stack

    def no_model_call(provider):
        with provider.get_tracer("app").start_as_current_span("GET /health", context=otel_context.Context()) as s:
            s.set_attribute("http.request.body", SECRET)
            s.set_attribute("session.id", "jane.doe@example.com")

    spans = finished_spans(no_model_call)
    produce(settings, settings.otlp_topic, [collector_messages(spans)[0][1], b"\x0a\xff\xff garbage"])
    result = loader.load(settings, idle_timeout_s=0.5).as_dict()
    assert result["otlp"]["quarantined"] == {"otlp.no_model_call": 1, "otlp.invalid": 1}
    rows = query(
        settings, "SELECT rules, raw FROM routerscope.quarantine WHERE kafka_topic = 'otlp_spans' ORDER BY kafka_offset"
    )
    assert [r[0] for r in rows] == [["otlp.no_model_call"], ["otlp.invalid"]]
    raw = rows[0][1].encode() if isinstance(rows[0][1], str) else rows[0][1]
    assert b"GET /health" in raw and b"session.id" in raw and b"jane" not in raw  # kept attributes, scrubbed
    assert_no_content(settings)


def deep_kvlist(depth: int) -> bytes:
    """A span whose one attribute nests kvlists `depth` deep (protobuf bytes)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue

    value = AnyValue(string_value="leaf")
    for _ in range(depth):
        outer = AnyValue()
        kv = outer.kvlist_value.values.add()
        kv.key = "k"
        kv.value.CopyFrom(value)
        value = outer
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = b"\x01" * 16, b"\x02" * 8, "deep"
    attr = span.attributes.add()
    attr.key = "deep"
    attr.value.CopyFrom(value)
    return request.SerializeToString(deterministic=True)


def wide_trace(provider, spans: int = 10_000) -> None:
    """One trace of `spans` spans: a model call among thousands of others, with attributes nobody knows."""
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("batch job", context=otel_context.Context()) as root:
        root.set_attribute("gen_ai.conversation.id", "wide")
        for i in range(spans - 2):
            with tracer.start_as_current_span(f"step {i}") as s:
                s.set_attribute("vendor.unknown.attribute", "x" * 50)
        with tracer.start_as_current_span("chat gpt-4o-mini") as call:
            call.set_attributes({"gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-4o-mini"})


@pytest.mark.slow  # 100 MB and a 200 MB gzip over loopback, 10,000 spans through the SDK: ~8 s
def test_hostile_bodies_get_their_status_and_the_receiver_keeps_serving(otlp_stack):
    settings = otlp_stack
    good = encode_spans(finished_spans(fallback_trace)).SerializeToString()
    wide = finished_spans(wide_trace)
    with running_receiver(settings) as receiver:
        port = receiver.port
        cases = {
            "truncated protobuf": post(port, good[: len(good) // 2])[0],
            "wrong content type": post(port, good, "text/plain")[0],
            "unknown encoding": post(port, good, **{"Content-Encoding": "br"})[0],
            "not gzip": post(port, good, **{"Content-Encoding": "gzip"})[0],
            "deep attribute nesting": post(port, deep_kvlist(5_000))[0],
            "deep JSON nesting": post(port, b"[" * 100_000 + b"]" * 100_000, "application/json")[0],
            "gzip that unzips past the limit": post(
                port, gzip.compress(b"\0" * (200 * 1024 * 1024), compresslevel=1), **{"Content-Encoding": "gzip"}
            )[0],
            "100 MB": _post_huge(port, 100 * 1024 * 1024),
            "unknown attributes": post(port, good)[0],
        }
        assert cases == {
            "truncated protobuf": 400,
            "wrong content type": 415,
            "unknown encoding": 415,
            "not gzip": 400,
            "deep attribute nesting": 400,
            "deep JSON nesting": 400,
            "gzip that unzips past the limit": 413,
            "100 MB": 413,
            "unknown attributes": 200,
        }
        assert export(wide, port) == SpanExportResult.SUCCESS  # 10,000 spans of one trace
        # a span without a valid trace id is refused in partial_success, the rest taken
        request = encode_spans(finished_spans(fallback_trace, session="partial"))
        request.resource_spans[0].scope_spans[0].spans[0].trace_id = b"\x01\x02"
        status, _, body = post(port, request.SerializeToString())
        answer = ExportTraceServiceResponse.FromString(body)
        assert status == 200 and answer.partial_success.rejected_spans == 1
        assert receiver.stats_dict()["spans_in"] == 3 + 10_000 + 3
    result = loader.load(settings, idle_timeout_s=0.5).as_dict()
    # the good trace twice (one event: its id follows the trace), the wide one, the partial one
    assert result["otlp"]["traces"] == 3 and result["otlp"]["mapped"] == 3
    wide_row = query(
        settings,
        "SELECT attempt_levels, session_id FROM routerscope.decisions FINAL WHERE trace_id = {t:String}",
        t=trace_id(wide),
    )
    assert wide_row == [([2], "wide")]


def _post_huge(port: int, size: int) -> int:
    """Announce and start sending `size` bytes; the answer comes before the body is read."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.putrequest("POST", "/v1/traces")
        conn.putheader("Content-Type", "application/x-protobuf")
        conn.putheader("Content-Length", str(size))
        conn.endheaders()
        chunk = b"\0" * (1024 * 1024)
        try:
            for _ in range(size // len(chunk)):
                conn.send(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the receiver answered and closed without reading it
        return conn.getresponse().status
    finally:
        conn.close()


@pytest.mark.slow
def test_a_full_queue_answers_429_a_dead_broker_still_200_and_a_full_backlog_503(down_broker):
    """A broker that is down is no reason to refuse: spans wait on disk and reach it once it is up. Only a
    full backlog (or a disk that refuses writes) answers 503, with Retry-After."""
    from tests.support import kafka as support_kafka
    from tests.support.kafka import consume_all

    spans = encode_spans(finished_spans(fallback_trace)).SerializeToString()

    def orphan() -> bytes:
        return encode_spans([s for s in finished_spans(fallback_trace) if s.parent is not None]).SerializeToString()

    dead = down_broker["settings"]
    with running_receiver(
        dead, directory=dead.home / "collect-429", max_spans=3, trace_wait_s=60, close_timeout_s=0
    ) as receiver:
        assert post(receiver.port, orphan())[0] == 200  # held: its root has not arrived
        status, headers, _ = post(receiver.port, orphan())
        assert (status, headers.get("Retry-After")) == (429, "1")
        assert post(receiver.port, spans)[0] == 200  # a complete trace does not wait: taken
    with running_receiver(dead, directory=dead.home / "collect-full", max_backlog=1, close_timeout_s=0) as receiver:
        assert post(receiver.port, spans)[0] == 200  # the first message fits, then the backlog is full
        status, headers, _ = post(receiver.port, spans)
        assert (status, headers.get("Retry-After")) == (503, "5")
        ready = http.client.HTTPConnection("127.0.0.1", receiver.port, timeout=10)
        ready.request("GET", "/-/ready")
        answer = ready.getresponse()
        assert answer.status == 503 and json.loads(answer.read())["outbox"] == 1
    with running_receiver(dead, directory=dead.home / "collect-down") as receiver:
        assert [post(receiver.port, spans)[0] for _ in range(3)] == [200, 200, 200]
        assert receiver.stats_dict()["outbox"] == 3
        support_kafka.start(down_broker)
        messages = consume_all(dead.kafka_bootstrap(), dead.otlp_topic, expect=3, timeout_s=60)
        assert len(messages) == 3 and receiver.stats_dict()["outbox"] == 0


def test_collect_on_a_port_in_use_is_one_line_and_exit_2(otlp_stack, home):
    import socket

    from tests.support.home import clean_env, run_cli

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_cli("collect", "--port", str(port), env=clean_env(home), timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith("routerscope: error: cannot listen on 127.0.0.1:") and done.stderr.count("\n") == 1


def test_the_dagster_ingest_job_maps_the_otlp_topic_and_says_so(otlp_stack):
    import dagster as dg

    from routerscope.pipelines.ingest import ingest_topics
    from routerscope.pipelines.resources import RouterscopeResource

    settings = otlp_stack
    ((key, value),) = collector_messages(finished_spans(fallback_trace))
    produce(settings, settings.otlp_topic, [value], keys=[key])
    result = dg.materialize(
        [ingest_topics],
        resources={"routerscope": RouterscopeResource.for_settings(settings)},
        instance=dg.DagsterInstance.ephemeral(),
    )
    assert result.success
    decisions = [
        m.metadata
        for m in result.asset_materializations_for_node("ingest_topics")
        if m.asset_key.path[-1] == "decisions"
    ]
    assert decisions[0]["otlp_traces_mapped"].value == 1 and decisions[0]["loaded"].value == 1


@pytest.mark.slow
def test_collect_writes_what_it_holds_when_stopped_and_says_what_it_did(otlp_stack, home):
    """SIGTERM to `routerscope collect` holding a trace whose root never came: written, then one summary line."""
    import signal
    import subprocess

    from tests.support.home import REPO, ROUTERSCOPE, clean_env
    from tests.support.kafka import consume_all

    port = free_port()
    collect = subprocess.Popen(
        [ROUTERSCOPE, "collect", "--port", str(port), "--trace-wait", "600"],
        env=clean_env(home),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert "OTLP/HTTP on" in collect.stdout.readline()
        calls = [s for s in finished_spans(fallback_trace) if s.parent is not None]
        assert post(port, encode_spans(calls).SerializeToString())[0] == 200
        collect.send_signal(signal.SIGTERM)
        _, err = collect.communicate(timeout=60)
    finally:
        collect.kill()
    assert collect.returncode == 0
    assert "2 spans in, 2 written in 1 traces, 0 refused, 0 messages undelivered" in err
    (message,) = consume_all(otlp_stack.kafka_bootstrap(), otlp_stack.otlp_topic, expect=1, timeout_s=10)
    assert message.key() == f"{calls[0].context.trace_id:032x}".encode()
