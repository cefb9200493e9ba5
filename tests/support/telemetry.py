"""Telemetry kept in memory: the spans in an in-memory exporter and the events an emitter would send to Kafka
in a list (the emitter's own behaviour is tested against a real broker)."""

from __future__ import annotations

import msgspec
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from routerscope.core import names
from routerscope.instrumentation.telemetry import Telemetry


class ListEmitter:
    """Collects what would go to Kafka (the emitter's own behaviour is tested against a real broker)."""

    def __init__(self):
        self.messages = []

    def emit(self, message):
        self.messages.append(message)

    def flush(self, timeout_s=30.0):
        return True

    def close(self, timeout_s=10.0):
        pass

    def counters(self):
        return {"emitted": len(self.messages), "delivered": 0, "spooled": 0, "dropped": 0, "in_flight": 0}

    def decisions(self):
        return [msgspec.json.decode(m.value) for m in self.messages if m.topic == names.TOPIC_DECISIONS]


def stack():
    exporter, emitter = InMemorySpanExporter(), ListEmitter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = Telemetry(emitter, provider, MeterProvider(metric_readers=[InMemoryMetricReader()]))
    return telemetry, exporter, emitter
