"""OTLP trace messages: decoding (protobuf and the spec's JSON), stripping to what the mapping reads, and
splitting by trace. Parsing is `opentelemetry-proto`'s generated messages (upb, in C).

What leaves `split` never holds prompt or completion content: each span is rebuilt with its ids, name,
kind, times, status code and flags, the attributes of the allow-list (`allow`, each value in the shape
its field has) and the span events it names (their name, time and allow-listed attributes); every other
event, links, status messages, trace state, scope attributes and every other attribute are never copied.
Limits on what a body expands to are checked before it is parsed (`check_protobuf`, `check_json`: bounds
computed at C speed) and before anything is built from it (`check_counts`).
"""

from __future__ import annotations

import base64
import json
import zlib
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span, Status

from routerscope.instrumentation import pii
from routerscope.instrumentation.otlp import allow

# Span.flags bits (OTLP 1.1+): whether the parent's remoteness is known, and whether it is remote.
_HAS_IS_REMOTE = 0x100
_IS_REMOTE = 0x200
_ERROR = Status.STATUS_CODE_ERROR
_NO_TRACE = bytes(16)
KIND_INTERNAL = Span.SPAN_KIND_INTERNAL
KIND_CLIENT = Span.SPAN_KIND_CLIENT


class BadRequest(ValueError):
    """A body that is not an OTLP trace export (the receiver answers 400 with this message)."""


@dataclass(slots=True)
class EventView:
    """A span event the allow-list keeps: its name, its time (ns since the epoch), its kept attributes."""

    name: str
    time_ns: int
    attrs: dict = field(default_factory=dict)


@dataclass(slots=True)
class SpanView:
    """One span as the mapping reads it: ids in lower-case hex, times in ns since the epoch."""

    trace_id: str
    span_id: str
    parent_id: str  # "" for a root
    remote_parent: bool  # the parent is in another process (a local root)
    name: str
    kind: int
    start_ns: int
    end_ns: int
    error: bool
    attrs: dict = field(default_factory=dict)
    resource: dict = field(default_factory=dict)
    events: list[EventView] = field(default_factory=list)


def decode(body: bytes) -> ExportTraceServiceRequest:
    """A protobuf body; BadRequest when it is not one (truncated, or nested past protobuf's limit), TooLarge
    when it could hold more messages than MAX_MESSAGES (checked before parsing)."""
    check_protobuf(body)
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise BadRequest(f"not an OTLP ExportTraceServiceRequest in protobuf: {exc}") from None
    return request


_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def _hex_to_base64(obj: dict, keys: tuple[str, ...], what: str) -> None:
    for key in keys:
        value = obj.get(key)
        if isinstance(value, str) and value:
            try:
                obj[key] = base64.b64encode(bytes.fromhex(value)).decode()
            except ValueError:
                raise BadRequest(f"{what}{key} {value[:40]!r} is not hex") from None


def _ids_to_base64(spans) -> None:
    """OTLP/JSON writes ids in hex; protobuf's JSON mapping reads bytes as base64."""
    for span in spans:
        if not isinstance(span, dict):
            raise BadRequest("a span in OTLP/JSON must be an object")
        _hex_to_base64(span, _ID_FIELDS, "")
        for link in span.get("links") or ():
            if isinstance(link, dict):
                _hex_to_base64(link, ("traceId", "spanId"), "link ")


def decode_json(body: bytes) -> ExportTraceServiceRequest:
    """An OTLP/JSON body (ids in hex, enums as integers, keys in lowerCamelCase)."""
    check_json(body)
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise BadRequest(f"not JSON: {str(exc)[:200]}") from None
    if not isinstance(doc, dict):
        raise BadRequest("an OTLP/JSON body is an object")
    try:
        for rs in doc.get("resourceSpans") or ():
            for ss in rs.get("scopeSpans") or ():
                _ids_to_base64(ss.get("spans") or ())
        return json_format.ParseDict(doc, ExportTraceServiceRequest(), ignore_unknown_fields=True)
    except BadRequest:
        raise
    except (json_format.ParseError, AttributeError, TypeError, ValueError, RecursionError) as exc:
        raise BadRequest(f"not an OTLP/JSON trace export: {str(exc)[:200]}") from None


def response(rejected: int, message: str, as_json: bool) -> bytes:
    """The spec's ExportTraceServiceResponse, with `partial_success` when spans were rejected."""
    out = ExportTraceServiceResponse()
    if rejected:
        out.partial_success.rejected_spans = rejected
        out.partial_success.error_message = message
    if as_json:
        return json.dumps(json_format.MessageToDict(out)).encode()
    return out.SerializeToString()


# -- limits, checked before anything is built from a body (docs/otlp.md, "Limits") ---------------------
MAX_INFLATED = 32 * 1024 * 1024  # a gzip body stops unzipping here (413)
# Messages a protobuf body may hold, bounded from above before it is parsed: every message but the outer one
# starts with a length-delimited tag byte (its low three bits 010), so counting those bytes bounds the
# messages the parser would allocate (~64 bytes each: 1.5 million is under 100 MB), whatever they hold.
MAX_MESSAGES = 1_500_000
MAX_JSON_VALUES = 300_000  # objects and arrays in an OTLP/JSON body, counted the same way (`{` and `[`)
MAX_RESOURCES = 10_000
MAX_SCOPES = 10_000  # in one request, over all its resources
MAX_SPANS = 100_000  # in one request
MAX_ATTRIBUTES = 1_000  # on one span or one resource (the SDK's default limit is 128)
_TAG_BYTES = bytes(1 if b & 7 == 2 else 0 for b in range(256))


class TooLarge(BadRequest):
    """A body past one of the limits (the receiver answers 413)."""


_CHUNK = 1024 * 1024


def inflate(body: bytes, limit: int = MAX_INFLATED, as_json: bool | None = None) -> bytes:
    """A gzip body unzipped 1 MiB at a time, stopping as soon as it passes `limit` bytes — or, when
    `as_json` is given (False: protobuf), as soon as what it unzipped could hold more messages than
    `check_protobuf` / `check_json` allow (TooLarge): a zip bomb costs what its first few MiB cost.
    Concatenated gzip members are read in turn."""
    out: list[bytes] = []
    size = marks = 0
    bound = MAX_MESSAGES if as_json is False else MAX_JSON_VALUES
    rest = body
    try:
        while rest:
            inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            data = rest
            while True:
                chunk = inflater.decompress(data, _CHUNK)
                size += len(chunk)
                if size > limit:
                    raise TooLarge(f"the body unzips past {limit} bytes")
                if as_json is not None:
                    marks += chunk.count(b"{") + chunk.count(b"[") if as_json else chunk.translate(_TAG_BYTES).count(1)
                    if marks > bound:
                        raise TooLarge(f"the body unzips to over {bound} {'values' if as_json else 'messages'}")
                out.append(chunk)
                data = inflater.unconsumed_tail
                if inflater.eof:
                    break
                if not chunk and not data:
                    raise BadRequest("not gzip: the stream ends early")
            rest = inflater.unused_data
    except zlib.error as exc:
        raise BadRequest(f"not gzip: {exc}") from None
    return b"".join(out)


def check_protobuf(body: bytes, max_messages: int = MAX_MESSAGES) -> None:
    """TooLarge when the body could hold more than `max_messages` messages (see MAX_MESSAGES): C-speed,
    before the parser allocates anything."""
    if len(body) // 2 > max_messages and body.translate(_TAG_BYTES).count(1) > max_messages:
        raise TooLarge(f"a body of {len(body)} bytes holding over {max_messages} messages")


def check_json(body: bytes, max_values: int = MAX_JSON_VALUES) -> None:
    if len(body) // 2 > max_values and body.count(b"{") + body.count(b"[") > max_values:
        raise TooLarge(f"an OTLP/JSON body of over {max_values} objects and arrays")


def check_counts(request: ExportTraceServiceRequest) -> None:
    """The request's resources, scopes, spans and attributes within the limits (counted in C: `len`)."""
    resources = request.resource_spans
    if len(resources) > MAX_RESOURCES:
        raise TooLarge(f"{len(resources)} resources in one request (the limit is {MAX_RESOURCES})")
    scopes = spans = 0
    for rs in resources:
        if len(rs.resource.attributes) > MAX_ATTRIBUTES:
            raise TooLarge(f"a resource with over {MAX_ATTRIBUTES} attributes")
        scopes += len(rs.scope_spans)
        if scopes > MAX_SCOPES:
            raise TooLarge(f"over {MAX_SCOPES} scopes in one request")
        for ss in rs.scope_spans:
            spans += len(ss.spans)
        if spans > MAX_SPANS:
            raise TooLarge(f"over {MAX_SPANS} spans in one request")
    for rs in resources:
        for ss in rs.scope_spans:
            for span in ss.spans:
                if len(span.attributes) > MAX_ATTRIBUTES:
                    raise TooLarge(f"a span with over {MAX_ATTRIBUTES} attributes")


@dataclass(slots=True)
class Filtered:
    """What the allow-list kept back (docs/otlp.md): counted, never stored."""

    attributes: int = 0  # keys not on the list (content, vendor attributes)
    values: int = 0  # keys on the list whose value is not of its kind
    names: int = 0  # span names emptied
    events: int = 0  # span events not on the list, or past what a span keeps of them

    def add(self, other: Filtered) -> None:
        self.attributes += other.attributes
        self.values += other.values
        self.names += other.names
        self.events += other.events


def kept_events(events, filtered: Filtered) -> list[tuple[Any, dict]]:
    """The span events that may leave (`allow.EVENTS`), each with the rules for its attributes, in the order
    they came: of a first-token kind only the earliest, at most `allow.MAX_EXCEPTIONS` exceptions; the rest
    counted in `filtered.events`."""
    out: list[tuple[Any, dict]] = []
    if not events:
        return out
    rules_of, first_only, max_exceptions = allow.EVENTS, allow.FIRST_ONLY, allow.MAX_EXCEPTIONS
    first: dict[str, int] = {}  # name -> its index in `out`
    exceptions = dropped = 0
    for event in events:
        name = event.name
        rules = rules_of.get(name)
        if rules is None:
            dropped += 1
        elif name in first_only:
            at = first.get(name)
            if at is None:
                first[name] = len(out)
                out.append((event, rules))
            else:  # a later one of its kind: dropped, unless it is earlier than the one kept
                dropped += 1
                if event.time_unix_nano < out[at][0].time_unix_nano:
                    out[at] = (event, rules)
        elif exceptions < max_exceptions:
            exceptions += 1
            out.append((event, rules))
        else:
            dropped += 1
    filtered.events += dropped
    return out


@dataclass(slots=True)
class Part:
    """The spans of one trace in one request, as a request of their own."""

    request: ExportTraceServiceRequest
    spans: int = 0
    complete: bool = False  # holds the trace's local root


def _allowed(key: str, v, rules: dict, filtered: Filtered):
    """The value of attribute `key` as it may leave (a Python scalar or a list of strings), or None."""
    kind = rules.get(key)
    if kind is None:
        filtered.attributes += 1
        return None
    which = v.WhichOneof("value")
    out: str | int | float | list[str] | None = None
    if which == "string_value":
        text = v.string_value
        if kind == "number":
            out = allow.number_string(text)
        elif kind != "bool":
            out = allow.string(kind, text)
    elif which == "int_value" or which == "double_value":
        if kind == "number":
            out = v.int_value if which == "int_value" else v.double_value
    elif which == "bool_value":
        if kind == "bool":
            out = v.bool_value
    elif which == "array_value" and kind == "enum":
        items = [allow.string(kind, x.string_value) for x in v.array_value.values if x.HasField("string_value")]
        kept = [x for x in items if x is not None]
        if len(kept) == len(v.array_value.values) and kept:
            out = kept
    if out is None:
        filtered.values += 1
    return out


def _copy_attributes(source, target, rules: dict, filtered: Filtered) -> None:
    """The attributes of `source` that may leave, appended to `target` (as they came when their value
    passes unchanged, the common case: one copy in C)."""
    string = allow.string
    for kv in source:
        kind = rules.get(kv.key)
        if kind is None:
            filtered.attributes += 1
            continue
        v = kv.value
        if v.WhichOneof("value") == "string_value" and kind != "number" and kind != "bool":
            text = v.string_value
            out = string(kind, text)
            if out == text:
                target.append(kv)
                continue
            if out is not None:
                target.add(key=kv.key).value.string_value = out
                continue
            filtered.values += 1
            continue
        value = _allowed(kv.key, v, rules, filtered)
        if value is None:
            continue
        new = target.add(key=kv.key)
        if isinstance(value, str):
            new.value.string_value = value
        elif isinstance(value, bool):
            new.value.bool_value = value
        elif isinstance(value, int):
            new.value.int_value = value
        elif isinstance(value, float):
            new.value.double_value = value
        else:
            new.value.array_value.values.extend(AnyValue(string_value=x) for x in value)


def split(
    request: ExportTraceServiceRequest, span_name_globs: tuple[str, ...] = ()
) -> tuple[dict[bytes, Part], int, str, Filtered]:
    """The request's spans, rebuilt with allow-listed values only (`allow`), as one request per trace
        (resource and scope kept around them). Returns (trace id -> part, spans rejected, why, what the
        allow-list kept back) — a span without a valid trace or span id is rejected (the spec's partial
        success). Links, status messages, trace state and the events `kept_events` does not keep never leave:
    nothing of them is copied."""
    check_counts(request)
    out: dict[bytes, Part] = {}
    rejected = 0
    filtered = Filtered()
    span_rules = allow.SPAN
    for rs in request.resource_spans:
        resource = Resource()
        _copy_attributes(rs.resource.attributes, resource.attributes, allow.RESOURCE, filtered)
        for ss in rs.scope_spans:
            targets: dict[bytes, Any] = {}  # trace id -> its ScopeSpans for this (resource, scope)
            for span in ss.spans:
                trace_id, span_id = span.trace_id, span.span_id
                if len(trace_id) != 16 or len(span_id) != 8 or trace_id == _NO_TRACE:
                    rejected += 1
                    continue
                target = targets.get(trace_id)
                if target is None:
                    part = out.get(trace_id)
                    if part is None:
                        part = out[trace_id] = Part(ExportTraceServiceRequest())
                    new_rs = part.request.resource_spans.add(schema_url=rs.schema_url)
                    new_rs.resource.CopyFrom(resource)
                    target = targets[trace_id] = new_rs.scope_spans.add(schema_url=ss.schema_url)
                    target.scope.name, target.scope.version = ss.scope.name, ss.scope.version
                else:
                    part = out[trace_id]
                name = span.name
                kept_name = allow.span_name(name, span_name_globs)
                if kept_name != name:
                    filtered.names += 1
                parent = span.parent_span_id
                new = target.spans.add(
                    trace_id=trace_id,
                    span_id=span_id,
                    parent_span_id=parent,
                    name=kept_name,
                    kind=span.kind,
                    start_time_unix_nano=span.start_time_unix_nano,
                    end_time_unix_nano=span.end_time_unix_nano,
                    flags=span.flags,
                )
                code = span.status.code
                if code:
                    new.status.code = code
                _copy_attributes(span.attributes, new.attributes, span_rules, filtered)
                for event, rules in kept_events(span.events, filtered):
                    new_event = new.events.add(name=event.name, time_unix_nano=event.time_unix_nano)
                    _copy_attributes(event.attributes, new_event.attributes, rules, filtered)
                part.spans += 1
                if not part.complete and is_local_root(span):
                    part.complete = True
    why = f"{rejected} span(s) without a 16-byte trace id or an 8-byte span id" if rejected else ""
    return out, rejected, why, filtered


def scope_for(trace: ExportTraceServiceRequest, rs, ss):
    """The ScopeSpans of `trace` that mirrors (rs, ss), made on first use (the last one, since spans of
    one request arrive grouped by resource and scope)."""
    if trace.resource_spans:
        last_rs = trace.resource_spans[-1]
        if last_rs.resource == rs.resource and last_rs.schema_url == rs.schema_url:
            last_ss = last_rs.scope_spans[-1]
            if last_ss.scope.name == ss.scope.name and last_ss.scope.version == ss.scope.version:
                return last_ss
            new_ss = last_rs.scope_spans.add()
            new_ss.scope.name, new_ss.scope.version, new_ss.schema_url = ss.scope.name, ss.scope.version, ss.schema_url
            return new_ss
    new_rs: ResourceSpans = trace.resource_spans.add()
    new_rs.resource.CopyFrom(rs.resource)
    new_rs.schema_url = rs.schema_url
    new_ss = new_rs.scope_spans.add()
    new_ss.scope.name, new_ss.scope.version, new_ss.schema_url = ss.scope.name, ss.scope.version, ss.schema_url
    return new_ss


def is_local_root(span) -> bool:
    """No parent, or a parent in another process (the span's flags say so)."""
    return not span.parent_span_id or (span.flags & _HAS_IS_REMOTE and span.flags & _IS_REMOTE) != 0


def views(request: ExportTraceServiceRequest) -> list[SpanView]:
    """Every span of a request as the mapping reads it: the allow-listed values only, as `collect` passes
    them on (a Collector's messages, unstripped, are read the same way)."""
    out = []
    ignored = Filtered()
    for rs in request.resource_spans:
        resource = _allowed_values(rs.resource.attributes, allow.RESOURCE, ignored)
        for ss in rs.scope_spans:
            for span in ss.spans:
                attrs = _allowed_values(span.attributes, allow.SPAN, ignored)
                out.append(
                    SpanView(
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_id=span.parent_span_id.hex(),
                        remote_parent=bool(span.parent_span_id) and is_local_root(span),
                        name=span.name,
                        kind=span.kind,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        error=span.status.code == _ERROR,
                        attrs=attrs,
                        resource=resource,
                        events=[
                            EventView(e.name, e.time_unix_nano, _allowed_values(e.attributes, rules, ignored))
                            for e, rules in kept_events(span.events, ignored)
                        ],
                    )
                )
    return out


def _allowed_values(attributes, rules: dict, filtered: Filtered) -> dict:
    out = {}
    for kv in attributes:
        value = _allowed(kv.key, kv.value, rules, filtered)
        if value is not None:
            out[kv.key] = value
    return out


def _scrubbed(value):
    if isinstance(value, str):
        return pii.scrub(value)
    if isinstance(value, list):
        return [_scrubbed(v) for v in value]
    return value


def summary(spans: list[SpanView]) -> bytes:
    """What the quarantine keeps of a trace that maps to nothing: its spans' kept attributes as JSON, every
    text scrubbed as our events' identifiers are (never the message as it came, which may hold prompts)."""
    return json.dumps(
        [
            {
                "trace_id": s.trace_id,
                "span_id": s.span_id,
                "parent_id": s.parent_id,
                "name": allow.span_name(s.name[:200]),
                "kind": s.kind,
                "error": s.error,
                "attributes": {k: _scrubbed(v) for k, v in s.attrs.items()},
                "resource": {k: _scrubbed(v) for k, v in s.resource.items()},
                "events": [
                    {"name": e.name, "time_ns": e.time_ns, "attributes": {k: _scrubbed(v) for k, v in e.attrs.items()}}
                    for e in s.events
                ],
            }
            for s in spans[:200]
        ],
        default=str,
    ).encode()
