"""OTLP trace messages: decoding (protobuf and the spec's JSON), stripping to what the mapping reads, and
splitting by trace. Parsing is `opentelemetry-proto`'s generated messages (upb, in C).

What leaves here never holds prompt or completion content: every span attribute outside
`semconv.KEPT` (and `routerscope.*`), every span event and link, every resource attribute but the
service's name and version, and every scope attribute are removed before a message is stored anywhere.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span, Status

from routerscope.instrumentation import pii
from routerscope.instrumentation.otlp import semconv as S

# Span.flags bits (OTLP 1.1+): whether the parent's remoteness is known, and whether it is remote.
_HAS_IS_REMOTE = 0x100
_IS_REMOTE = 0x200
_ERROR = Status.STATUS_CODE_ERROR
KIND_INTERNAL = Span.SPAN_KIND_INTERNAL
KIND_CLIENT = Span.SPAN_KIND_CLIENT


class BadRequest(ValueError):
    """A body that is not an OTLP trace export (the receiver answers 400 with this message)."""


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


def _value(v):
    """An AnyValue as a Python scalar, or a list of scalars; None for anything nested deeper."""
    which = v.WhichOneof("value")
    if which == "string_value":
        return v.string_value
    if which == "int_value":
        return v.int_value
    if which == "double_value":
        return v.double_value
    if which == "bool_value":
        return v.bool_value
    if which == "array_value":
        items = [_value(x) for x in v.array_value.values]
        return [x for x in items if x is not None and not isinstance(x, list)]
    return None


def decode(body: bytes) -> ExportTraceServiceRequest:
    """A protobuf body; BadRequest when it is not one (truncated, or nested past protobuf's limit)."""
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


def _keep(attributes, kept: frozenset) -> None:
    """Remove, in place, every attribute whose key is not kept (`routerscope.*` always is)."""
    drop = [i for i, kv in enumerate(attributes) if kv.key not in kept and not kv.key.startswith(S.RS_PREFIX)]
    for i in reversed(drop):
        del attributes[i]


def strip_span(span) -> None:
    _keep(span.attributes, S.KEPT)
    for kv in span.attributes:  # ids that look personal are hashed before they are stored anywhere
        if kv.key in S.IDENTIFIERS and kv.value.WhichOneof("value") == "string_value":
            scrubbed = pii.scrub(kv.value.string_value)
            if scrubbed != kv.value.string_value:
                kv.value.string_value = scrubbed
    del span.events[:]  # events carry content (prompts, completions, exception messages)
    del span.links[:]
    span.status.message = ""  # an error message may quote the request
    span.trace_state = ""


def split(request: ExportTraceServiceRequest) -> tuple[dict[bytes, ExportTraceServiceRequest], int, str]:
    """The request's spans, stripped, as one request per trace (resource and scope kept around them).
    Returns (trace id -> request, spans rejected, why) — a span without a valid trace or span id is
    rejected (the spec's partial success)."""
    out: dict[bytes, ExportTraceServiceRequest] = {}
    rejected = 0
    for rs in request.resource_spans:
        resource = rs.resource
        _keep(resource.attributes, S.KEPT_RESOURCE)
        for ss in rs.scope_spans:
            for span in ss.spans:
                if len(span.trace_id) != 16 or len(span.span_id) != 8 or not any(span.trace_id):
                    rejected += 1
                    continue
                strip_span(span)
                trace = out.get(span.trace_id)
                if trace is None:
                    trace = out[span.trace_id] = ExportTraceServiceRequest()
                target = scope_for(trace, rs, ss)
                target.spans.append(span)
    why = f"{rejected} span(s) without a 16-byte trace id or an 8-byte span id" if rejected else ""
    return out, rejected, why


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
    """Every span of a request as the mapping reads it (kept attributes only)."""
    out = []
    for rs in request.resource_spans:
        resource = {kv.key: _value(kv.value) for kv in rs.resource.attributes if kv.key in S.KEPT_RESOURCE}
        for ss in rs.scope_spans:
            for span in ss.spans:
                attrs = {}
                for kv in span.attributes:
                    if kv.key in S.KEPT or kv.key.startswith(S.RS_PREFIX):
                        attrs[kv.key] = _value(kv.value)
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
                    )
                )
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
                "name": pii.scrub(s.name[:200]),
                "kind": s.kind,
                "error": s.error,
                "attributes": {k: _scrubbed(v) for k, v in s.attrs.items()},
                "resource": {k: _scrubbed(v) for k, v in s.resource.items()},
            }
            for s in spans[:200]
        ],
        default=str,
    ).encode()
