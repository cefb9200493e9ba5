"""Only allow-listed values, each in the shape of its field, leave `routerscope collect`: prompt text put in
the span name, `routerscope.*` attributes, `finish_reasons`, `error.type`, the response model or
`service.name`, an exception event's message and stack trace, an event's name or attributes, the request
parameters (a card number and an e-mail among it) reaches neither the OTLP topic nor, through the
loader, the decisions or the quarantine; what was dropped is counted."""

from __future__ import annotations

import http.client

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from routerscope.core import broker
from routerscope.core.procs import free_port
from routerscope.warehouse.ingest import loader
from tests.support.home import settings_for
from tests.support.ingest import query
from tests.support.kafka import consume_all
from tests.support.otlp import running_receiver

pytestmark = pytest.mark.integration
PROMPT = "please pay with my card 4111 1111 1111 1111 and mail jane.doe@example.com"
CANARIES = ("4111", "jane.doe", "example.com", "please pay", "mail jane")


def _attr(span, key, value) -> None:
    kv = span.attributes.add()
    kv.key = key
    if isinstance(value, list):
        kv.value.array_value.values.add().string_value = value[0]
    elif isinstance(value, str):
        kv.value.string_value = value
    else:
        kv.value.int_value = value


def hostile_request(trace_no: int, model_call: bool = True) -> bytes:
    request = ExportTraceServiceRequest()
    rs = request.resource_spans.add()
    _attr(rs.resource, "service.name", PROMPT)
    _attr(rs.resource, "service.version", "4111111111111111")
    ss = rs.scope_spans.add()
    trace_id = trace_no.to_bytes(16, "big")
    root = ss.spans.add(trace_id=trace_id, span_id=(trace_no * 2).to_bytes(8, "big"), name=PROMPT)
    root.kind = Span.SPAN_KIND_SERVER
    root.start_time_unix_nano, root.end_time_unix_nano = 1_796_000_000_000_000_000, 1_796_000_000_050_000_000
    for key in (
        "routerscope.task_type",
        "routerscope.reason",
        "routerscope.fallback_type",
        "routerscope.policy_version",
    ):
        _attr(root, key, PROMPT)
    _attr(root, "routerscope.session_id", "jane.doe@example.com")
    _attr(root, "routerscope.invented", PROMPT)  # not on the allow-list at all
    if model_call:
        call = ss.spans.add(trace_id=trace_id, span_id=(trace_no * 2 + 1).to_bytes(8, "big"), name=f"chat {PROMPT}")
        call.parent_span_id = root.span_id
        call.kind = Span.SPAN_KIND_CLIENT
        call.start_time_unix_nano, call.end_time_unix_nano = root.start_time_unix_nano + 1, root.end_time_unix_nano - 1
        _attr(call, "gen_ai.provider.name", "openai")
        _attr(call, "gen_ai.operation.name", "chat")
        _attr(call, "gen_ai.request.model", "gpt-4o-mini")
        _attr(call, "gen_ai.response.model", PROMPT)
        _attr(call, "gen_ai.response.finish_reasons", [PROMPT])
        _attr(call, "error.type", "jane.doe@example.com")
        _attr(call, "server.address", "api.openai.com")
        _attr(call, "gen_ai.openai.api_base", "https://api.openai.com/v1/?user=jane.doe@example.com")
        _attr(call, "gen_ai.usage.input_tokens", 12)
        _attr(call, "gen_ai.input.messages", PROMPT)
        _attr(call, "llm.invocation_parameters", f'{{"model": "gpt-4o-mini", "user": "{PROMPT}"}}')
        exc = call.events.add(name="exception", time_unix_nano=call.start_time_unix_nano + 5)
        _attr(exc, "exception.type", "openai.APITimeoutError")
        _attr(exc, "exception.message", PROMPT)
        _attr(exc, "exception.stacktrace", f'Traceback (most recent call last):\n  ask("{PROMPT}")')
        _attr(call.events.add(name="exception"), "exception.type", PROMPT)
        _attr(call.events.add(name="First Token Stream Event"), "output.value", PROMPT)
        _attr(call.events.add(name=PROMPT), "gen_ai.prompt", PROMPT)
    else:
        _attr(root, "error.type", PROMPT)
    return request.SerializeToString()


def post(port: int, body: bytes) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", "/v1/traces", body=body, headers={"Content-Type": "application/x-protobuf"})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


@pytest.mark.slow
def test_prompt_text_in_every_field_collect_passes_on_never_reaches_kafka_the_decisions_or_the_quarantine(home):
    settings = settings_for(home)
    broker.start(settings, port=free_port())
    try:
        with running_receiver(settings) as receiver:
            assert post(receiver.port, hostile_request(1)) == 200
            assert post(receiver.port, hostile_request(2, model_call=False)) == 200  # maps to nothing
            stats = receiver.stats_dict()
        assert stats["dropped_names"] == 3 and stats["dropped_attributes"] >= 3 and stats["dropped_values"] >= 10
        assert stats["dropped_events"] >= 1  # the event named by the prompt
        messages = consume_all(settings.kafka_bootstrap(), settings.otlp_topic, expect=2)
        assert len(messages) == 2
        raw = b"".join(m.value() for m in messages)
        for canary in CANARIES:
            assert canary.encode() not in raw, canary
        call = ExportTraceServiceRequest.FromString(
            next(m.value() for m in messages if int(m.key(), 16) == 1)
        ).resource_spans[0]
        kept = {kv.key for s in call.scope_spans[0].spans for kv in s.attributes}
        # what the mapping needs is still there; the identifier is hashed, not dropped
        assert {"gen_ai.provider.name", "gen_ai.request.model", "routerscope.session_id"} <= kept
        api_base = [
            kv.value.string_value
            for s in call.scope_spans[0].spans
            for kv in s.attributes
            if kv.key == "gen_ai.openai.api_base"
        ]
        assert api_base == ["https://api.openai.com"]
        events = [
            (e.name, {kv.key: kv.value.string_value for kv in e.attributes})
            for s in call.scope_spans[0].spans
            for e in s.events
        ]
        assert events == [
            ("exception", {"exception.type": "openai.APITimeoutError"}),
            ("exception", {}),
            ("First Token Stream Event", {}),
        ]
        result = loader.load(settings, idle_timeout_s=0.5).as_dict()
        assert result["otlp"]["traces"] == 2 and result["otlp"]["mapped"] == 1
        for table in ("decisions", "quarantine"):
            rows = repr(query(settings, f"SELECT * FROM routerscope.{table}"))  # noqa: S608 - a fixed name
            for canary in CANARIES:
                assert canary not in rows, (table, canary)
    finally:
        broker.stop(settings)
