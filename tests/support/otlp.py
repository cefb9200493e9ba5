"""OTLP in, as the tests drive it: spans made by the real OpenTelemetry SDK (the GenAI attributes of each
source written as its instrumentation writes them), exported by the real OTLP/HTTP exporter, or encoded as
a Collector's Kafka exporter writes them; and a running `Receiver` in this process."""

from __future__ import annotations

import contextlib
import time

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from routerscope.core.kafka import librdkafka_config
from routerscope.core.procs import free_port
from routerscope.instrumentation.otlp.receiver import Receiver

SECRET = "my card is 4111 1111 1111 1111, the secret prompt"


def fallback_trace(provider: TracerProvider, *, session: str = "sess-1", device_port: int = 8081) -> None:
    """An app's request: a device call (llama.cpp on localhost) that fails, then a cloud call that serves,
    both under the app's own span; GenAI attributes as OpenTelemetry's instrumentation writes them, and
    content attributes and events of the kind that must never travel."""
    tracer = provider.get_tracer("app")
    t0 = time.time_ns()
    # a root whatever an earlier test in this process left current (a parent would make the trace rootless)
    root = tracer.start_span("handle", context=otel_context.Context(), kind=SpanKind.SERVER, start_time=t0)
    with trace.use_span(root, end_on_exit=False):
        root.set_attribute("gen_ai.conversation.id", session)
        root.set_attribute("http.request.body", SECRET)
        device = tracer.start_span("chat gemma", kind=SpanKind.CLIENT, start_time=t0 + 1_000_000)
        device.set_attributes(
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": "gemma-3-270m",
                "server.address": "127.0.0.1",
                "server.port": device_port,
                "error.type": "APIConnectionError",
                "gen_ai.input.messages": SECRET,
            }
        )
        device.add_event("gen_ai.content.prompt", {"gen_ai.prompt": SECRET})
        device.set_status(Status(StatusCode.ERROR, SECRET))
        device.end(end_time=t0 + 5_000_000)
        cloud = tracer.start_span("chat gpt-4o-mini", kind=SpanKind.CLIENT, start_time=t0 + 6_000_000)
        cloud.set_attributes(
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
                "gen_ai.usage.input_tokens": 12,
                "gen_ai.usage.output_tokens": 7,
                "gen_ai.response.finish_reasons": ["stop"],
                "server.address": "api.openai.com",
                "gen_ai.output.messages": SECRET,
            }
        )
        cloud.end(end_time=t0 + 40_000_000)
    root.end(end_time=t0 + 41_000_000)


def finished_spans(make, **options):
    """The spans `make(provider, **options)` finishes, as the SDK hands them to an exporter."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "support-bot", "service.version": "1.2"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    make(provider, **options)
    return exporter.get_finished_spans()


def collector_messages(spans) -> list[tuple[bytes, bytes]]:
    """(key, value) as a Collector's Kafka exporter writes them with `encoding: otlp_proto` and
    `partition_traces_by_id: true`: one ExportTraceServiceRequest per trace, keyed by the trace id in hex."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    by_trace: dict[int, list] = {}
    for span in spans:
        by_trace.setdefault(span.context.trace_id, []).append(span)
    return [(f"{t:032x}".encode(), encode_spans(s).SerializeToString()) for t, s in by_trace.items()]


@contextlib.contextmanager
def running_receiver(settings, **options):
    """`routerscope collect`'s receiver on a free loopback port, writing to the settings' broker."""
    directory = options.pop("directory", settings.home / "collect")
    close_timeout_s = options.pop("close_timeout_s", 10.0)
    receiver = Receiver.open(
        librdkafka_config(settings), settings.otlp_topic, directory, port=free_port(), **options
    ).start()
    try:
        yield receiver
    finally:
        receiver.close(close_timeout_s)


def export(spans, port: int, **options) -> object:
    """Export with the real OTLP/HTTP exporter (protobuf); its SpanExportResult."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces", **options)
    try:
        return exporter.export(spans)
    finally:
        exporter.shutdown()


def openinference_timeout_trace(provider: TracerProvider, *, session: str = "sess-oi") -> None:
    """An app's request as OpenInference 0.1.66 records it: the device call stopped by the app's client timeout
    (error status, no `error.type`, no model of the response: the timeout only in its `exception` event, whose
    message and stack trace quote the prompt; the model only in its request parameters), then a streamed cloud
    answer whose `First Token Stream Event` comes 120 ms after the call began. The device path is marked by the
    app (`routerscope.side`), as OpenInference names no server."""
    tracer = provider.get_tracer("app")
    t0 = time.time_ns()
    root = tracer.start_span("handle", context=otel_context.Context(), kind=SpanKind.SERVER, start_time=t0)
    with trace.use_span(root, end_on_exit=False):
        root.set_attribute("routerscope.session_id", session)
        path = tracer.start_span("device path", start_time=t0 + 500_000, attributes={"routerscope.side": "device"})
        with trace.use_span(path, end_on_exit=False):
            device = tracer.start_span("ChatCompletion", start_time=t0 + 1_000_000)
            device.set_attributes(
                {
                    "openinference.span.kind": "LLM",
                    "llm.system": "openai",
                    "llm.invocation_parameters": '{"model": "gemma-3-270m", "stream": true, "user": "jane"}',
                    "input.value": SECRET,
                }
            )
            device.add_event(
                "exception",
                {
                    "exception.type": "openai.APITimeoutError",
                    "exception.message": f"Request timed out: {SECRET}",
                    "exception.stacktrace": f'Traceback (most recent call last):\n  ask("{SECRET}")',
                    "exception.escaped": "False",
                },
                timestamp=t0 + 501_000_000,
            )
            device.set_status(Status(StatusCode.ERROR, SECRET))
            device.end(end_time=t0 + 501_000_000)
        path.end(end_time=t0 + 502_000_000)
        cloud = tracer.start_span("ChatCompletion", start_time=t0 + 503_000_000)
        cloud.set_attributes(
            {
                "openinference.span.kind": "LLM",
                "llm.system": "openai",
                "llm.model_name": "gpt-4o-mini-2024-07-18",
                "llm.invocation_parameters": '{"model": "gpt-4o-mini", "stream": true}',
                "llm.token_count.prompt": 12,
                "llm.token_count.completion": 7,
                "output.value": SECRET,
            }
        )
        cloud.add_event("First Token Stream Event", timestamp=t0 + 623_000_000)
        cloud.end(end_time=t0 + 700_000_000)
    root.end(end_time=t0 + 701_000_000)
