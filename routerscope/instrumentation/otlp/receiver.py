"""`routerscope collect`: an OTLP/HTTP receiver for traces (docs/otlp.md).

`POST /v1/traces` takes an `ExportTraceServiceRequest` in protobuf (`application/x-protobuf`) or in the
spec's JSON (`application/json`), gzip or not. Each request is parsed with `opentelemetry-proto`'s
messages, stripped to the attributes the mapping reads (`proto.split`: no prompt or completion content
goes further), and its spans are grouped per trace. A trace is written to Kafka — one protobuf
`ExportTraceServiceRequest` per message, keyed by its trace id in hex, the same shape an OpenTelemetry
Collector's Kafka exporter writes with `partition_traces_by_id` — once its local root span has arrived,
or `trace_wait_s` after its first span did (an exporter sends a trace's children before its root, in
earlier batches when the trace is long). The loader maps each trace to a decision event.

Answers, as the OTLP/HTTP spec has them: 200 with the export response (`partial_success` counts the
spans refused: no 16-byte trace id or 8-byte span id); 400 for a body that does not parse (with a
`google.rpc.Status`); 404, 405, 411, 413 (body over `max_body`, or over `max_inflated` once
unzipped), 415 (another content type or encoding); 429 with `Retry-After` when the spans held here
(waiting for their trace or for Kafka) would pass `max_spans`; 503 with `Retry-After` while Kafka
refuses or fails deliveries. Nothing accepted is dropped silently: `stats()` counts every span in and
out, and what Kafka failed to take.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from confluent_kafka import KafkaError, Producer
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from routerscope.instrumentation.otlp import proto

log = logging.getLogger("routerscope.collect")

PATH = "/v1/traces"
MAX_BODY = 32 * 1024 * 1024  # a request body larger than this is refused unread (413)
MAX_INFLATED = 128 * 1024 * 1024  # the same for a gzip body once unzipped (a zip bomb stops here)
MAX_SPANS = 200_000  # spans held (waiting for their trace's root, or for Kafka) before 429
TRACE_WAIT_S = 10.0  # a trace whose local root never arrives is written this long after its first span
RETRY_AFTER_FULL_S = 1
RETRY_AFTER_DOWN_S = 5
# A trace larger than this is written in several messages (the loader merges them by trace id): under
# the broker's default message size limit of 1 MB.
MAX_MESSAGE = 900_000
_PROTOBUF, _JSON = "application/x-protobuf", "application/json"


class SinkFull(Exception):
    """Kafka does not take the message now (its client's queue is full): the trace stays held."""


class Refused(Exception):
    """A request not taken now: answered with `status` and `Retry-After: retry_after` (the exporter retries)."""

    def __init__(self, status: int, message: str, retry_after: int):
        super().__init__(message)
        self.status, self.retry_after = status, retry_after


class KafkaSink:
    """Writes trace messages to the OTLP topic with confluent-kafka (librdkafka), batched and async."""

    def __init__(self, config: dict, topic: str):
        self.topic = topic
        self.delivered = 0
        self.failed = 0
        self.last_error: str | None = None
        self._failing_until = 0.0
        self._producer = Producer(
            {
                **config,
                "linger.ms": 20,
                "batch.size": 1_000_000,
                "queue.buffering.max.messages": 100_000,
                "message.timeout.ms": 30_000,
                "enable.idempotence": True,  # a retry after a broker hiccup never doubles a trace
                "error_cb": self._on_error,
            }
        )
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll, name="routerscope-collect-kafka", daemon=True)
        self._poller.start()

    def _on_error(self, error) -> None:
        self.last_error = error.str()
        if error.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
            self._failing_until = time.monotonic() + RETRY_AFTER_DOWN_S

    def _delivered(self, error, message) -> None:
        if error is None:
            self.delivered += 1
        else:
            self.failed += 1
            self.last_error = error.str()
            self._failing_until = time.monotonic() + RETRY_AFTER_DOWN_S

    def _poll(self) -> None:
        while not self._stop.is_set():
            self._producer.poll(0.05)

    @property
    def failing(self) -> bool:
        return time.monotonic() < self._failing_until

    def send(self, key: bytes, value: bytes) -> None:
        try:
            self._producer.produce(self.topic, value=value, key=key, on_delivery=self._delivered)
        except BufferError:
            raise SinkFull("the Kafka client's queue is full") from None

    def close(self, timeout_s: float = 10.0) -> int:
        """Deliver what is queued (at most `timeout_s`); returns the messages left undelivered."""
        left = self._producer.flush(timeout_s)
        self._stop.set()
        self._poller.join(timeout=1)
        return left


@dataclass
class _Trace:
    request: ExportTraceServiceRequest
    spans: int
    first: float
    complete: bool = False


@dataclass
class Stats:
    requests: int = 0
    spans_in: int = 0
    spans_rejected: int = 0  # refused in partial_success
    spans_out: int = 0  # handed to Kafka
    traces_out: int = 0
    bad_requests: int = 0  # 400, 411, 413, 415
    refused_full: int = 0  # 429
    refused_down: int = 0  # 503
    by_status: dict = field(default_factory=dict)


class Receiver:
    """The HTTP server and the per-trace assembly; `sink.send(key, value)` writes one trace message."""

    def __init__(
        self,
        sink,
        *,
        host: str = "127.0.0.1",
        port: int = 4318,
        max_body: int = MAX_BODY,
        max_inflated: int = MAX_INFLATED,
        max_spans: int = MAX_SPANS,
        trace_wait_s: float = TRACE_WAIT_S,
    ):
        self.sink = sink
        self.max_body, self.max_inflated, self.max_spans = max_body, max_inflated, max_spans
        self.trace_wait_s = trace_wait_s
        self.stats = Stats()
        self._traces: dict[bytes, _Trace] = {}
        self._held = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        receiver = self

        class Handler(_Handler):
            owner = receiver

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._flusher = threading.Thread(target=self._flush_loop, name="routerscope-collect-flush", daemon=True)

    # -- running ----------------------------------------------------------------------------------------
    def start(self) -> Receiver:
        """Serve in a background thread (tests, the bench); `serve_forever` serves in this one."""
        self._flusher.start()
        threading.Thread(target=self.server.serve_forever, name="routerscope-collect-http", daemon=True).start()
        return self

    def serve_forever(self) -> None:
        self._flusher.start()
        self.server.serve_forever()

    def close(self, timeout_s: float = 10.0) -> dict:
        """Stop taking requests, write every trace held (complete or not) and wait for Kafka."""
        self.server.shutdown()
        self.server.server_close()
        self._stop.set()
        if self._flusher.is_alive():
            self._flusher.join(timeout=2)
        self._emit(None, everything=True)
        left = self.sink.close(timeout_s) if hasattr(self.sink, "close") else 0
        return {**self.stats_dict(), "held_at_exit": self._held, "undelivered_at_exit": left}

    def stats_dict(self) -> dict:
        s = self.stats
        out = {k: v for k, v in vars(s).items() if k != "by_status"}
        out["held"] = self._held
        for name in ("delivered", "failed"):
            if hasattr(self.sink, name):
                out[f"kafka_{name}"] = getattr(self.sink, name)
        return out

    # -- one request ----------------------------------------------------------------------------------
    def accept(self, request) -> tuple[int, str]:
        """Take a parsed export request: (spans rejected, why). Raises Refused (503 while Kafka is failing,
        429 when its spans would pass `max_spans`)."""
        traces, rejected, why = proto.split(request)
        spans = sum(sum(len(ss.spans) for ss in rs.scope_spans) for t in traces.values() for rs in t.resource_spans)
        with self._lock:
            if getattr(self.sink, "failing", False):
                self.stats.refused_down += 1
                raise Refused(503, "Kafka is failing deliveries", RETRY_AFTER_DOWN_S)
            # (nothing held: taken whatever its size, or a request larger than the bound would be refused forever)
            if self._held and self._held + spans > self.max_spans:
                self.stats.refused_full += 1
                raise Refused(429, "the receiver's queue is full", RETRY_AFTER_FULL_S)
            now = time.monotonic()
            for trace_id, part in traces.items():
                n = sum(len(ss.spans) for rs in part.resource_spans for ss in rs.scope_spans)
                complete = any(
                    proto.is_local_root(s) for rs in part.resource_spans for ss in rs.scope_spans for s in ss.spans
                )
                held = self._traces.get(trace_id)
                if held is None:
                    self._traces[trace_id] = _Trace(part, n, now, complete)
                else:
                    held.request.resource_spans.extend(part.resource_spans)
                    held.spans += n
                    held.complete = held.complete or complete
                self._held += n
            self.stats.requests += 1
            self.stats.spans_in += spans + rejected
            self.stats.spans_rejected += rejected
        self._emit(list(traces))
        return rejected, why

    def _emit(self, trace_ids: list[bytes] | None = None, everything: bool = False) -> None:
        """Write the complete traces among `trace_ids` (None: every held one, and those waited for long
        enough) to Kafka."""
        with self._lock:
            now = time.monotonic()
            if trace_ids is not None:
                candidates = [(k, self._traces[k]) for k in trace_ids if k in self._traces]
            else:
                candidates = list(self._traces.items())
            ready = [(k, t) for k, t in candidates if everything or t.complete or now - t.first >= self.trace_wait_s]
            for trace_id, trace in ready:
                try:
                    for value in _messages(trace.request):
                        self.sink.send(trace_id.hex().encode(), value)
                except SinkFull:
                    return  # kept: tried again by the flusher, and counted in `held` for 429
                del self._traces[trace_id]
                self._held -= trace.spans
                self.stats.spans_out += trace.spans
                self.stats.traces_out += 1

    def _flush_loop(self) -> None:
        while not self._stop.wait(0.1):
            try:
                self._emit()
            except Exception:  # never let the flusher die: log and go on
                log.exception("writing traces to Kafka failed")


def _messages(request) -> list[bytes]:
    """One trace as one message, or several under MAX_MESSAGE each (spans split, resource and scope kept)."""
    whole = request.SerializeToString()
    if len(whole) <= MAX_MESSAGE:
        return [whole]
    out, part, size = [], ExportTraceServiceRequest(), 0
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            for span in ss.spans:
                n = span.ByteSize() + 16
                if size and size + n > MAX_MESSAGE:
                    out.append(part.SerializeToString())
                    part, size = ExportTraceServiceRequest(), 0
                target = proto.scope_for(part, rs, ss)
                target.spans.append(span)
                size += n
    if size:
        out.append(part.SerializeToString())
    return out


class _Handler(BaseHTTPRequestHandler):
    owner: Receiver
    protocol_version = "HTTP/1.1"
    server_version = "routerscope-collect"
    timeout = 30  # a client that stops sending mid-request lets go of its thread after this long

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        log.debug("%s " + format, self.address_string(), *args)

    def _answer(self, code: int, body: bytes = b"", content_type: str = _PROTOBUF, headers: dict | None = None):
        stats = self.owner.stats
        with self.owner._lock:  # handlers run in threads of their own
            stats.by_status[code] = stats.by_status.get(code, 0) + 1
            if code >= 400 and code not in (429, 503):
                stats.bad_requests += 1
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if code >= 400 and code not in (429, 503):
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def _error(self, code: int, message: str, as_json: bool, headers: dict | None = None):
        status = status_pb2.Status(code={400: 3, 413: 8, 415: 3, 429: 8, 503: 14}.get(code, 2), message=message)
        if as_json:
            self._answer(code, json.dumps({"code": status.code, "message": message}).encode(), _JSON, headers)
        else:
            self._answer(code, status.SerializeToString(), _PROTOBUF, headers)

    def do_GET(self):  # noqa: N802 - the base class's naming
        self._error(405 if self.path.split("?")[0] == PATH else 404, "POST OTLP traces to /v1/traces", False)

    do_PUT = do_DELETE = do_PATCH = do_GET  # noqa: N815

    def do_POST(self):  # noqa: N802
        if self.path.split("?")[0] != PATH:
            return self._error(404, f"only {PATH} is served here", False)
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        as_json = ctype == _JSON
        if ctype not in (_PROTOBUF, _JSON):
            return self._error(415, f"Content-Type must be {_PROTOBUF} or {_JSON}, not {ctype[:80]!r}", False)
        encoding = (self.headers.get("Content-Encoding") or "identity").strip().lower()
        if encoding not in ("identity", "gzip"):
            return self._error(415, f"Content-Encoding must be gzip or none, not {encoding[:40]!r}", as_json)
        declared = self.headers.get("Content-Length")
        if declared is None or not declared.isdigit():
            return self._error(411, "a Content-Length is required", as_json)
        length = int(declared)
        if length > self.owner.max_body:
            return self._error(413, f"a body of {length} bytes is over the limit of {self.owner.max_body}", as_json)
        body = self.rfile.read(length)
        if len(body) < length:
            return self._error(400, "the body ended before its Content-Length", as_json)
        if encoding == "gzip":
            try:
                inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
                body = inflater.decompress(body, self.owner.max_inflated + 1)
                if len(body) > self.owner.max_inflated or inflater.unconsumed_tail:
                    return self._error(413, f"the body unzips past {self.owner.max_inflated} bytes", as_json)
            except zlib.error as exc:
                return self._error(400, f"not gzip: {exc}", as_json)
        try:
            request = proto.decode_json(body) if as_json else proto.decode(body)
            rejected, why = self.owner.accept(request)
        except proto.BadRequest as exc:
            return self._error(400, str(exc), as_json)
        except RecursionError:
            return self._error(400, "nested too deep", as_json)
        except Refused as exc:
            return self._error(exc.status, str(exc), as_json, {"Retry-After": str(exc.retry_after)})
        self._answer(200, proto.response(rejected, why, as_json), _JSON if as_json else _PROTOBUF)
