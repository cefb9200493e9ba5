"""OpenTelemetry for the router: one span per decision, one child span per attempt, metrics, and the
decision event to Kafka with the trace context in its headers.

`routerscope.instrumentation.sdk.InstrumentedRouter(router, telemetry).route(request)` is what an application
calls. The decision
span `route {task_type}` (INTERNAL) carries the decision as `router.*` attributes; each attempt is a
child span with GenAI attributes and `error.type` on failure. Counters of decisions by task type ×
fallback type × reason × level and a latency histogram go to the meter (no session ids as metric
attributes). Only the decision span is made on the request path; the attempt spans, the count and
the latency follow on the emitter's sender thread (`Telemetry.decided`). Nothing is exported
anywhere by default except the events to Kafka; set the standard `OTEL_EXPORTER_OTLP_ENDPOINT` (or
`..._TRACES_ENDPOINT` / `..._METRICS_ENDPOINT`) to export spans and metrics over OTLP/HTTP.
Session ids are pseudonymised and free text that looks like personal data is scrubbed
(`routerscope.instrumentation.pii`) before they enter a span or an event.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from typing import Any

import msgspec
from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.metrics import Observation
from opentelemetry.propagate import inject
from opentelemetry.trace import SpanContext

from routerscope.core.extras import require
from routerscope.instrumentation import attributes as A
from routerscope.instrumentation.emitter import KafkaEmitter, Message
from routerscope.instrumentation.spans import AttemptSpanArgs, attempt_spans


def setup_providers(service_name: str = "routerscope-router"):
    """Tracer and meter providers: OTLP/HTTP export only when OTEL_EXPORTER_OTLP_* asks for it. They are
    OpenTelemetry's SDK, which recording itself does not need (the API alone records, without trace ids)."""
    require("setup_providers (OpenTelemetry's SDK)", "otlp", "opentelemetry.sdk")
    from opentelemetry.sdk.metrics import MeterProvider  # deferred: the OTel SDK, ~35 ms, only when asked for
    from opentelemetry.sdk.resources import Resource  # deferred: as MeterProvider
    from opentelemetry.sdk.trace import TracerProvider  # deferred: as MeterProvider

    resource = Resource.create({"service.name": service_name})
    tracer_provider = TracerProvider(resource=resource)
    readers = []
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    traces = endpoint or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    metered = endpoint or os.environ.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
    if traces or metered:
        require("OTLP export (OTEL_EXPORTER_OTLP_* is set)", "otlp", "opentelemetry.exporter.otlp.proto.http")
    if traces:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # deferred: [otlp] extra
        from opentelemetry.sdk.trace.export import BatchSpanProcessor  # deferred: only with the exporter

        tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    if metered:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter  # deferred: [otlp] extra
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader  # deferred: only with the exporter

        readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
    return tracer_provider, MeterProvider(resource=resource, metric_readers=readers)


MAX_DECISION_SERIES = 2000  # the OTel SDK's own cardinality limit per metric: past it, one overflow series
_OVERFLOW = {"otel.metric.overflow": True}
_OVERFLOW_KEY = (None, None, None, None)  # no decision has this series


class Telemetry:
    def __init__(self, emitter: KafkaEmitter | None, tracer_provider=None, meter_provider=None):
        self.emitter = emitter
        self.tracer = (tracer_provider or trace.get_tracer_provider()).get_tracer("routerscope.router")
        meter = (meter_provider or metrics.get_meter_provider()).get_meter("routerscope.router")
        # Decisions are counted here, one dict increment each, and reported at each collection: the
        # same monotonic sum, series and values as a synchronous counter, without building and
        # checking a measurement on the request path for every decision.
        self._decision_counts: dict[tuple, list] = {}  # (task, fallback, reason, level) -> [count, attributes]
        self._counts_lock = threading.Lock()
        meter.create_observable_counter(
            A.METRIC_DECISIONS,
            callbacks=[self._decision_observations],
            unit="{decision}",
            description="routing decisions",
        )
        self.latency = meter.create_histogram(
            A.METRIC_LATENCY, unit="ms", description="decision latency, model time included"
        )
        self._abandoned = {"device": 0, "cloud": 0}  # attempts the router abandoned at their timeout
        meter.create_observable_counter(
            A.METRIC_ABANDONED,
            callbacks=[self._abandoned_observations],
            unit="{call}",
            description="backend calls abandoned at their level's timeout (docs/router.md)",
        )
        # Decisions wait here, a tuple each, for the emitter's sender thread (or the next collection,
        # whichever comes first) to make their attempt spans, count them and record their latency: the
        # same spans, series, values and exemplars, off the request path. Without a sender to do it, or
        # past the bound, at the call. (After `emitter.close()` they wait, like its events, until a
        # collection or `Recorder.flush()`.)
        self._decided: deque[tuple[Any, SpanContext | None, Context | None, AttemptSpanArgs | None]] = deque()
        self._decided_max = 0
        self._latency_attrs: dict[tuple, dict] = {}  # (task_type, degrade_level) -> the histogram's attributes
        if emitter is not None and hasattr(emitter, "call_on_sender"):
            emitter.call_on_sender(self.record_decisions)
            self._decided_max = max(4096, min(getattr(emitter, "queue_size", 0), 1_000_000))
        if emitter is not None:
            meter.create_observable_counter(
                A.METRIC_EVENTS,
                callbacks=[self._event_counts],
                unit="{event}",
                description="decision events by state: emitted, delivered, spooled, dropped",
            )

    def count_decision(self, key: tuple) -> None:
        """One decision for the series `key` = (task_type, fallback_type, reason, degrade_level)."""
        with self._counts_lock:
            entry = self._decision_counts.get(key)
            if entry is None:
                if len(self._decision_counts) >= MAX_DECISION_SERIES - 1:  # room kept for the overflow series
                    key, attributes = _OVERFLOW_KEY, _OVERFLOW
                    entry = self._decision_counts.get(key)
                else:
                    attributes = {
                        "task_type": key[0],
                        "fallback_type": key[1],
                        "reason": key[2],
                        "degrade_level": key[3],
                    }
                if entry is None:
                    entry = self._decision_counts[key] = [0, attributes]
            entry[0] += 1

    def deferring(self) -> bool:
        """True when what `decided` is given waits for the sender thread (there is one, with room)."""
        return len(self._decided) < self._decided_max

    def decided(
        self,
        event,
        span_context: SpanContext | None = None,
        context: Context | None = None,
        attempts: AttemptSpanArgs | None = None,
    ) -> None:
        """One decision (a DecisionEvent as sent): counted in its series (task type × fallback type ×
        reason × level), its latency recorded with an exemplar linked to `span_context` (the decision
        span's ids) inside `context`, or else to the span current in `context` (None: the current
        context); with `attempts` = (started_ns, session, details), its attempt spans made as children
        of that span. Queued for the sender thread when there is one (see `record_decisions`)."""
        if len(self._decided) < self._decided_max:
            self._decided.append((event, span_context, context, attempts))
        else:
            self._record_decision(event, span_context, context, attempts)

    def _record_decision(
        self, event, span_context: SpanContext | None, context: Context | None, attempts: AttemptSpanArgs | None
    ) -> None:
        if span_context is not None:
            context = trace.set_span_in_context(trace.NonRecordingSpan(span_context), context)
        if attempts is not None:
            attempt_spans(self.tracer, event, *attempts, context)
        key = (event.task_type, event.fallback_type, event.reason, event.degrade_level)
        self.count_decision(key)
        for attempt in event.attempts:
            if attempt.abandoned is True:
                with self._counts_lock:
                    self._abandoned["device" if attempt.level <= 1 else "cloud"] += 1
        attributes = self._latency_attrs.get(key[0::3])
        if attributes is None:  # the few combinations recur: build their attribute dicts once
            if len(self._latency_attrs) >= 4096:
                self._latency_attrs.clear()
            attributes = self._latency_attrs[key[0::3]] = {"task_type": key[0], "degrade_level": key[3]}
        self.latency.record(event.latency_ms, attributes, context)

    def record_decisions(self) -> None:
        """Make the attempt spans of, count and time the decisions waiting in the queue. The sender
        thread calls this between batches (spans and metric points appear milliseconds after their
        decision, the attempt spans after the decision span; an exemplar's timestamp is when it is
        recorded), and so do every collection, before it reads the metrics, and `Recorder.flush()`: a
        reader never misses a decision made before it collected."""
        pending, record = self._decided, self._record_decision
        while True:
            try:
                decision = pending.popleft()
            except IndexError:
                return
            record(*decision)

    def _decision_observations(self, options):
        self.record_decisions()  # a collection runs its callbacks before it reads the histogram
        with self._counts_lock:
            return [Observation(count, attributes) for count, attributes in self._decision_counts.values()]

    def _abandoned_observations(self, options):
        self.record_decisions()
        with self._counts_lock:
            return [Observation(n, {"boundary": side}) for side, n in self._abandoned.items()]

    def _event_counts(self, options):
        if self.emitter is None:  # (registered only with an emitter)
            return []
        counts = self.emitter.counters()
        return [
            Observation(counts[state], {"state": state}) for state in ("emitted", "delivered", "spooled", "dropped")
        ]

    def send(
        self,
        topic: str,
        key: str | None,
        event,
        context: Context | None = None,
        span_context: SpanContext | None = None,
    ) -> None:
        """Queue `event` for Kafka. The request path only captures the trace context (the current one, or
        `context`); the JSON and the W3C trace headers are made by the emitter's sender thread when it
        first reads the message. With `span_context`, the headers carry that span inside `context`: a
        queued message then holds the span's ids, not the live span and everything it references."""
        if self.emitter is None:
            return
        self.emitter.emit(
            EventMessage(
                topic,
                None if key is None else key.encode(),
                event,
                otel_context.get_current() if context is None else context,
                span_context,
            )
        )


class EventMessage(msgspec.Struct, gc=False):
    """An emitter message (`routerscope.instrumentation.emitter.Message`'s interface) whose value and headers are
    encoded on first use — on the sender's thread, off the request path. The bytes are the same as
    encoding at the call: the event is not changed after it is sent, and the trace context is the one
    that was current at `send()` (with `_span`, that context with the span of these ids current).

    Not tracked by the garbage collector (nothing it holds refers back to it): a queue of them, which
    grows while the broker is away, costs the collector nothing."""

    topic: str
    key: bytes | None
    _event: object
    _context: Context
    _span: SpanContext | None = None  # None: the context as it is
    _value: bytes | None = None
    _headers: tuple | None = None

    @property
    def value(self) -> bytes:
        if self._value is None:
            self._value = msgspec.json.encode(self._event)
        return self._value

    @property
    def headers(self) -> tuple[tuple[str, bytes], ...]:
        if self._headers is None:
            context = self._context
            if self._span is not None:
                context = trace.set_span_in_context(trace.NonRecordingSpan(self._span), context)
            carrier: dict[str, str] = {}
            inject(carrier, context=context)  # W3C traceparent of the span current at send()
            self._headers = tuple((k, v.encode()) for k, v in carrier.items())
        return self._headers

    to_line = Message.to_line
