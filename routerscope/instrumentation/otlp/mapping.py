"""The spans of one trace → one decision event (docs/otlp.md has the mapping, a table per source).

Pure: `map_trace` takes the trace's spans (`proto.SpanView`) and the user's mapping file and returns
the event, or the name of the reason nothing could be mapped. The event then goes through the same
contract validation and quarantine as every event (the loader's); nothing here decides that an event
is valid. What the spans cannot say is never guessed:

* device or cloud from the mapping file (server address, provider, span kind, model globs) or the
  span's `routerscope.side`;
* a fallback only from what the spans show: an earlier device attempt that failed, then a cloud call
  that served, or the app's own `routerscope.fallback_type` / `routerscope.reason`; a requested model
  that differs from the served one is not a fallback;
* the task type, degrade level, confidence and threshold from `routerscope.*` attributes, else the task
  type from a rule of the mapping file, else `unknown`;
* when the app sets no routing attribute (`routerscope.side`, `.fallback_type`, `.reason`, `.degrade_level`),
  a fallback the trace's shape shows is inferred and the decision says so (its `policy_version` ends in
  INFERRED): a failed call that nothing places (no server address, no side, not on the device by the
  mapping file) before a cloud call that served is the device's; a device answer followed by a cloud call
  that served is a quality fallback (`validator_failed`: the app judged the answer wanting, with no
  confidence known);
* a timeout from the error type or, for OpenInference, which writes none, the type of the call's `exception`
  span event; time to first token from `gen_ai.response.time_to_first_chunk`, else the served call's first
  first-token event (the span events `collect` keeps: docs/otlp.md, "Span events");
* a stream cut mid-way (a streamed call that ended without an error and without a finish reason, as
  OpenLLMetry 0.62 ends one whose iteration failed; a call whose connection dropped after its answer began)
  is a `timeout`: the cloud call after it makes a timeout fallback, and served as it was it is a partial
  answer (`reason = truncated`), never a quarantined trace.

No prompt or completion content reaches an event (the spans were stripped on the way in, and nothing
here reads content); identifiers are scrubbed as for our own events (`routerscope.instrumentation.pii`).
"""

from __future__ import annotations

import fnmatch
import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from routerscope.contract.events import Attempt, DecisionEvent, Outcome, new_decision
from routerscope.instrumentation import pii
from routerscope.instrumentation.otlp import semconv as S
from routerscope.instrumentation.otlp.proto import KIND_INTERNAL, SpanView

UTC = timezone.utc  # datetime.UTC is Python 3.11+; the SDK runs on 3.10

DEFAULT_MAPPING = Path(__file__).with_name("default_mapping.yaml")
# Why a trace maps to nothing (quarantine rule names).
NO_MODEL_CALL = "otlp.no_model_call"
TOO_MANY_CALLS = "otlp.too_many_model_calls"
MAX_ATTEMPTS = 5  # the contract's longest attempt list
MAX_MS = 86_400_000
MAX_TOKENS = 10_000_000
UNKNOWN_TASK = "unknown"
INFERRED = "+inferred"  # appended to a decision's policy_version when its fallback was inferred from the shape
# Decision event ids are derived from the trace id: the same trace sent twice (an exporter's retry, a
# Collector's replay) is the same event, which the warehouse keeps once.
EVENT_NAMESPACE = uuid.UUID("5b0c4e4e-6f74-4c70-8a2d-7265726f7574")

# One side of a fallback implies the other when the app sets only one.
_REASON_OF = {
    "none": "default",
    "quality": "low_confidence",
    "timeout": "device_timeout",
    "error": "device_error",
    "capability": "capability_miss",
}
_FALLBACK_OF = {
    "low_confidence": "quality",
    "validator_failed": "quality",
    "device_timeout": "timeout",
    "device_error": "error",
    "capability_miss": "capability",
}


class MappingError(ValueError):
    """A mapping file that cannot be used (the message says which key)."""


@dataclass(frozen=True)
class TaskRule:
    task_type: str
    model: str | None = None
    operation: str | None = None
    service: str | None = None
    span_name: str | None = None


@dataclass(frozen=True)
class Mapping:
    """The user's mapping file (`default_mapping.yaml` documents each key)."""

    version: str = "otlp-default"
    deadline_ms: int = 60_000
    device_servers: tuple[str, ...] = ()
    device_providers: tuple[str, ...] = ()
    device_internal: bool = False
    device_models: tuple[str, ...] = ()
    task_rules: tuple[TaskRule, ...] = ()

    @classmethod
    def load(cls, path: Path | None = None) -> Mapping:
        path = Path(path) if path else DEFAULT_MAPPING
        try:
            doc = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise MappingError(f"cannot read the OTLP mapping file {path}: {str(exc).splitlines()[0]}") from None
        return cls.from_dict(doc, str(path))

    @classmethod
    def from_dict(cls, doc: dict, where: str = "the mapping") -> Mapping:
        if not isinstance(doc, dict):
            raise MappingError(f"{where}: the mapping file is a YAML mapping")
        unknown = set(doc) - {"version", "deadline_ms", "device", "task_types"}
        if unknown:
            raise MappingError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
        device = doc.get("device") or {}
        if not isinstance(device, dict) or set(device) - {"server_addresses", "providers", "internal_spans", "models"}:
            raise MappingError(f"{where}: `device` takes server_addresses, providers, internal_spans, models")
        deadline = doc.get("deadline_ms", 60_000)
        if not isinstance(deadline, int) or isinstance(deadline, bool) or not 1 <= deadline <= MAX_MS:
            raise MappingError(f"{where}: deadline_ms must be an integer from 1 to {MAX_MS}")
        rules = []
        for i, rule in enumerate(doc.get("task_types") or ()):
            if not isinstance(rule, dict) or "task_type" not in rule:
                raise MappingError(f"{where}: task_types[{i}] needs a task_type")
            extra = set(rule) - {"task_type", "model", "operation", "service", "span_name"}
            if extra:
                raise MappingError(f"{where}: task_types[{i}] has unknown key(s) {', '.join(sorted(extra))}")
            rules.append(TaskRule(**{k: str(v) for k, v in rule.items()}))

        def strings(key: str) -> tuple[str, ...]:
            values = device.get(key) or ()
            if not isinstance(values, list | tuple):
                raise MappingError(f"{where}: device.{key} is a list")
            return tuple(str(v) for v in values)

        return cls(
            version=str(doc.get("version") or "otlp-default"),
            deadline_ms=deadline,
            device_servers=tuple(s.lower() for s in strings("server_addresses")),
            device_providers=tuple(s.lower() for s in strings("providers")),
            device_internal=bool(device.get("internal_spans", False)),
            device_models=strings("models"),
            task_rules=tuple(rules),
        )


def _first(attrs: dict, keys: tuple[str, ...]):
    for key in keys:
        value = attrs.get(key)
        if value is not None and value != "":
            return value
    return None


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def model_of(span: SpanView) -> str | None:
    """The call's model: the response's, else the request's, else (OpenInference) the model of its request
    parameters, which alone name it on a call that failed before any answer."""
    model = _first(span.attrs, S.MODEL)
    if isinstance(model, str):
        return model
    params = span.attrs.get(S.OI_INVOCATION_PARAMETERS)
    if isinstance(params, str):
        try:
            model = json.loads(params).get("model")
        except (ValueError, AttributeError):
            return None
        return model if isinstance(model, str) and model else None
    return None


def is_model_call(span: SpanView) -> bool:
    """A span of a model answering a request (not an embedding or a tool), in any of the dialects."""
    attrs = span.attrs
    if attrs.get(S.OI_SPAN_KIND) == S.OI_KIND_LLM:
        return True
    if not any(key in attrs for key in S.MODEL_CALL_MARKERS):
        return False
    operation = _first(attrs, S.OPERATION)
    return not (isinstance(operation, str) and operation.lower() in S.NOT_ANSWERS)


def _server(span: SpanView) -> tuple[str | None, int | None]:
    host = span.attrs.get(S.SERVER_ADDRESS)
    port = _int(span.attrs.get(S.SERVER_PORT))
    if host is None and isinstance(span.attrs.get(S.OPENAI_API_BASE), str):
        try:
            parts = urlsplit(span.attrs[S.OPENAI_API_BASE])
            host, port = parts.hostname, parts.port
        except ValueError:
            host = None
    return (host.lower() if isinstance(host, str) else None), port


def _side(span: SpanView, by_id: dict) -> str | None:
    """`routerscope.side` on the span or the nearest ancestor that has it (an app marks its device path
    with a span of its own when the instrumentation's span says nothing of where it ran)."""
    seen: set[str] = set()
    node: SpanView | None = span
    while node is not None and node.span_id not in seen:
        side = node.attrs.get(S.RS_SIDE)
        if side in ("device", "cloud"):
            return side
        seen.add(node.span_id)
        node = by_id.get(node.parent_id)
    return None


def is_device(span: SpanView, mapping: Mapping, by_id: dict | None = None) -> bool:
    side = _side(span, by_id or {})
    if side is not None:
        return side == "device"
    host, port = _server(span)
    if host is not None and (host in mapping.device_servers or f"{host}:{port}" in mapping.device_servers):
        return True
    provider = _first(span.attrs, S.PROVIDER)
    if isinstance(provider, str) and provider.lower() in mapping.device_providers:
        return True
    if mapping.device_internal and span.kind == KIND_INTERNAL:
        return True
    model = model_of(span)
    return isinstance(model, str) and any(fnmatch.fnmatchcase(model, g) for g in mapping.device_models)


def _dropped_midway(span: SpanView) -> bool:
    """A failed call whose answer had begun coming and then stopped: the model name on OpenInference's OpenAI
    spans (its response's: absent on a call that failed before any answer), or openai-v2's response model with
    a dropped connection as the error type (`<class 'httpx.RemoteProtocolError'>`), not an error the API
    answered with."""
    if span.attrs.get(S.OI_SPAN_KIND) == S.OI_KIND_LLM:  # OpenAI's spans only: LiteLLM's name the request's model
        return span.name in S.OI_OPENAI_SPAN_NAMES and bool(span.attrs.get(S.OI_MODEL_NAME))
    error = str(span.attrs.get(S.ERROR_TYPE) or "").lower()
    return bool(span.attrs.get(S.RESPONSE_MODEL)) and any(word in error for word in S.DROPPED_WORDS)


def is_cut(span: SpanView) -> bool:
    """A stream cut mid-way: a streamed call that ended without an error and without a finish reason (OpenLLMetry
    0.62 ends one whose iteration failed so), or a call that failed after its answer had begun (openai-v2 and
    OpenInference record the dropped connection as the error)."""
    failed = span.error or span.attrs.get(S.ERROR_TYPE) not in (None, "")
    if failed:
        return _dropped_midway(span)
    streamed = any(span.attrs.get(key) is True for key in S.STREAMING)
    return streamed and not span.attrs.get(S.FINISH_REASONS)


def exception_types(span: SpanView) -> list[str]:
    """The types of the span's `exception` events (kept by the allow-list as dotted class names)."""
    return [
        e.attrs[S.EXCEPTION_TYPE]
        for e in span.events
        if e.name == S.EV_EXCEPTION and isinstance(e.attrs.get(S.EXCEPTION_TYPE), str)
    ]


def _outcome(span: SpanView) -> Outcome:
    """ok, or for a failed call (error status or `error.type`) `timeout` when its error type or the type of
    an exception it recorded (OpenInference says a timeout only there) names one, else `error`. An exception
    event on a call that did not fail (one retried inside it) changes nothing."""
    error = span.attrs.get(S.ERROR_TYPE)
    if not span.error and error in (None, ""):
        return "timeout" if is_cut(span) else "ok"
    texts = [str(error or "").lower(), *(t.lower() for t in exception_types(span))]
    timed_out = any(word in text for text in texts for word in S.TIMEOUT_WORDS)
    return "timeout" if timed_out or is_cut(span) else "error"


def ttft_ms(span: SpanView) -> float | None:
    """Time to first token of a call, in ms: its `gen_ai.response.time_to_first_chunk` (seconds), else the
    time of its first first-token event (OpenInference's `First Token Stream Event`, OpenLLMetry's first
    `gen_ai.content.completion.chunk`) less the span's start; None when neither is there, or the event lies
    outside the span (clocks that disagree are not a measurement)."""
    seconds = span.attrs.get(S.TIME_TO_FIRST_CHUNK)
    if isinstance(seconds, int | float) and not isinstance(seconds, bool):
        return round(seconds * 1000, 3)  # out of range, the contract quarantines it (as every field)
    times = [e.time_ns for e in span.events if e.name in S.FIRST_TOKEN_EVENTS]
    if not times:
        return None
    first = min(times)
    if not span.start_ns <= first <= max(span.end_ns, span.start_ns) or first - span.start_ns > MAX_MS * 1_000_000:
        return None
    return round((first - span.start_ns) / 1e6, 3)


def _placed(span: SpanView) -> bool:
    """Whether the span says where the call ran: a server address (a model name alone does not: every model
    the mapping file does not name is taken as the cloud's)."""
    return _server(span)[0] is not None


def _task_type(served: SpanView, mapping: Mapping) -> str:
    model = model_of(served)
    operation = _first(served.attrs, S.OPERATION)
    service = served.resource.get(S.SERVICE_NAME)
    for rule in mapping.task_rules:
        checks = (
            (rule.model, model),
            (rule.operation, operation),
            (rule.service, service),
            (rule.span_name, served.name),
        )
        if all(p is None or (isinstance(v, str) and fnmatch.fnmatchcase(v, p)) for p, v in checks):
            return rule.task_type
    return UNKNOWN_TASK


def _ms(ns: int) -> float:
    return round(max(0, ns) / 1e6, 3)


def _clamp_ms(ms: float) -> int:
    return int(min(max(ms, 0), MAX_MS))


def _shown_fallback(attempts: list[Attempt], served: SpanView, routed: bool) -> tuple[str, str, bool]:
    """(fallback_type, reason, inferred) from the attempts alone, for a trace whose app names neither:
    `inferred` when the shape of the calls says it rather than their outcomes."""
    last = attempts[-1]
    failed_device = [a for a in attempts[:-1] if a.level in (0, 1) and a.outcome in ("error", "timeout")]
    answered_device = [a for a in attempts[:-1] if a.level in (0, 1) and a.outcome == "ok"]
    if last.level >= 2 and failed_device:  # the device failed, then a cloud call served: shown, not guessed
        fallback_type = failed_device[-1].outcome
        return fallback_type, ("device_timeout" if fallback_type == "timeout" else "device_error"), False
    if last.level >= 2 and answered_device and not routed:
        # the device answered and the app still asked the cloud: it judged the answer wanting (the shape)
        return "quality", "validator_failed", True
    if last.level in (0, 1) and is_cut(served):  # served as it was when the stream stopped: partial
        return "none", "truncated", False
    if last.level in (0, 1) and last.outcome in ("error", "timeout"):
        return "none", ("device_timeout" if last.outcome == "timeout" else "device_error"), False
    return "none", "default", False


def map_trace(spans: list[SpanView], mapping: Mapping) -> tuple[DecisionEvent | None, str | None]:
    """The trace's decision event, or (None, the quarantine rule saying why there is none)."""
    by_id = {s.span_id: s for s in spans}
    calls = {s.span_id for s in spans if is_model_call(s)}

    def nested(span: SpanView) -> bool:  # LiteLLM's span around OpenAI's is one call, not two
        seen = set()
        parent = by_id.get(span.parent_id)
        while parent is not None and parent.span_id not in seen:
            if parent.span_id in calls:
                return True
            seen.add(parent.span_id)
            parent = by_id.get(parent.parent_id)
        return False

    attempts_spans = sorted((by_id[i] for i in calls if not nested(by_id[i])), key=lambda s: (s.start_ns, s.end_ns))
    if not attempts_spans:
        return None, NO_MODEL_CALL
    if len(attempts_spans) > MAX_ATTEMPTS:
        return None, TOO_MANY_CALLS
    roots = [s for s in spans if not s.parent_id or s.remote_parent or s.parent_id not in by_id]
    roots.sort(key=lambda s: s.start_ns)
    ordered = roots + [s for s in spans if s not in roots]  # app attributes: the root's first

    def app(key: str):
        for span in ordered:
            value = span.attrs.get(key)
            if value is not None:
                return value
        return None

    routed = any(span.attrs.get(key) is not None for span in spans for key in S.ROUTING)
    devices = [is_device(span, mapping, by_id) for span in attempts_spans]
    inferred = False
    if not routed and not any(devices) and len(attempts_spans) > 1 and _outcome(attempts_spans[-1]) == "ok":
        # the shape: failed calls that nothing places, before the cloud call that served, were the device's
        for i, span in enumerate(attempts_spans[:2]):
            if _placed(span) or _outcome(span) == "ok":
                break
            devices[i] = inferred = True

    attempts: list[Attempt] = []
    device_seen = cloud_calls = 0
    device_model = cloud_model = None
    for span, device in zip(attempts_spans, devices, strict=True):
        level = _int(span.attrs.get(S.RS_DEGRADE_LEVEL))
        if level is None:
            level = (0 if device_seen == 0 else 1) if device else 2
        if device:
            device_seen += 1
            device_model = model_of(span) or device_model
        else:
            cloud_calls += 1
            cloud_model = model_of(span) or cloud_model
        attempts.append(Attempt(level=level, outcome=_outcome(span), latency_ms=_ms(span.end_ns - span.start_ns)))
    served = attempts_spans[-1]
    last = attempts[-1]

    fallback_type, reason = app(S.RS_FALLBACK_TYPE), app(S.RS_REASON)
    if fallback_type is None and reason is None:
        fallback_type, reason, judged = _shown_fallback(attempts, served, routed)
        inferred = inferred or judged
    elif reason is None:
        reason = _REASON_OF.get(fallback_type, fallback_type)
    elif fallback_type is None:
        fallback_type = _FALLBACK_OF.get(reason, "none")

    start = min(s.start_ns for s in roots + attempts_spans)
    first_call = attempts_spans[0].start_ns
    deadline = _int(app(S.RS_DEADLINE_MS)) or mapping.deadline_ms
    task_type = app(S.RS_TASK_TYPE) or _task_type(served, mapping)
    session = _first({k: app(k) for k in S.SESSION}, S.SESSION) or served.trace_id
    has_pii = app(S.RS_HAS_PII)
    event = new_decision(
        event_id=str(uuid.uuid5(EVENT_NAMESPACE, served.trace_id)),
        event_time=datetime.fromtimestamp(served.end_ns // 1_000_000 / 1000, timezone.utc),
        request_id=str(app(S.RS_REQUEST_ID) or served.trace_id),
        session_id=str(session),
        task_type=task_type if isinstance(task_type, str) else str(task_type),
        mode="live",
        entered_device=any(a.level in (0, 1) for a in attempts),
        fallback_type=fallback_type,
        reason=reason,
        degrade_level=last.level,
        attempts=attempts,
        cloud_calls=cloud_calls,
        confidence=app(S.RS_CONFIDENCE),
        threshold=app(S.RS_THRESHOLD),
        deadline_ms=deadline,
        elapsed_ms=_clamp_ms(_ms(first_call - start)),
        latency_ms=min(_ms(served.end_ns - start), MAX_MS),
        input_tokens=min(_int(_first(served.attrs, S.INPUT_TOKENS)) or 0, MAX_TOKENS),
        output_tokens=min(_int(_first(served.attrs, S.OUTPUT_TOKENS)) or 0, MAX_TOKENS),
        policy_version=str(app(S.RS_POLICY_VERSION) or mapping.version)[: 64 - len(INFERRED) if inferred else 64]
        + (INFERRED if inferred else ""),
        app_id=served.resource.get(S.SERVICE_NAME),
        app_version=served.resource.get(S.SERVICE_VERSION),
        ttft_ms=ttft_ms(served),
        has_pii=has_pii if isinstance(has_pii, bool) else None,
        device_model=device_model,
        cloud_model=cloud_model,
        trace_id=served.trace_id,
        span_id=(roots[0] if roots else served).span_id,
    )
    return pii.scrub_event(event), None
