"""The attempt spans of a decision: one child span of the decision span per attempt, with the GenAI
attributes of the OpenTelemetry semantic conventions (`routerscope.instrumentation.attributes`), started and ended
at the attempt's own times. Both ways a decision is recorded make them here: the SDK's `Decision` on the request
path, and `Telemetry.decided` on the emitter's sender thread."""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode

from routerscope.instrumentation import attributes as A
from routerscope.instrumentation import pii
from routerscope.instrumentation.pii import scrub

PROVIDER_DEVICE = "llama.cpp"
PROVIDER_CLOUD = "openai"


@dataclass(frozen=True)
class _AttemptSpan:
    """What a child span needs beyond the event's attempt: which model, by whom, when, how many tokens."""

    model: str | None = None
    provider: str | None = None
    start_ns: int | None = None
    output_tokens: int | None = None


_NO_DETAIL = _AttemptSpan()

# `attempt_spans`' arguments between the event and the parent context: (started_ns, session, details)
AttemptSpanArgs = tuple[int, str, list[_AttemptSpan] | None]

# the attempt span's attribute names and kinds, bound once (the loop below runs for every attempt)
_OPERATION, _PROVIDER, _MODEL = A.GEN_AI_OPERATION_NAME, A.GEN_AI_PROVIDER_NAME, A.GEN_AI_REQUEST_MODEL
_CONVERSATION, _LEVEL, _OUTCOME = A.GEN_AI_CONVERSATION_ID, A.ROUTER_ATTEMPT_LEVEL, A.ROUTER_ATTEMPT_OUTCOME
_INPUT_TOKENS, _OUTPUT_TOKENS, _ERROR_TYPE = A.GEN_AI_USAGE_INPUT_TOKENS, A.GEN_AI_USAGE_OUTPUT_TOKENS, A.ERROR_TYPE
_INTERNAL, _CLIENT = SpanKind.INTERNAL, SpanKind.CLIENT


def _attempt_times(event, started_ns: int, details: list[_AttemptSpan] | None):
    """(start, end) in ns of each attempt span: back to back from the decision's start, unless an
    attempt says when it started."""
    t, times = started_ns, []
    for i, attempt in enumerate(event.attempts):
        start_ns = details[i].start_ns if details else None
        if start_ns is not None:
            t = start_ns
        end = t + int(attempt.latency_ms * 1e6)
        times.append((t, end))
        t = end
    return times


def _attempts_end(event, started_ns: int, details: list[_AttemptSpan] | None) -> int:
    return max([end for _, end in _attempt_times(event, started_ns, details)], default=started_ns)


def attempt_spans(
    tracer,
    event,
    started_ns: int,
    session: str,
    details: list[_AttemptSpan] | None,
    parent_context: Context | None,
):
    """One child span of the decision span (the span current in `parent_context`) per attempt, with
    its GenAI attributes, started and ended at the attempt's own times; returns the last end."""
    latest = started_ns
    start_span = tracer.start_span
    attempts = event.attempts
    last = len(attempts) - 1
    for i, (attempt, (t, end)) in enumerate(zip(attempts, _attempt_times(event, started_ns, details))):
        detail = details[i] if details else _NO_DETAIL
        level, outcome = attempt.level, attempt.outcome
        on_device = level <= 1
        if level == 4:
            model, provider = "canned", "routerscope"
        elif on_device:
            model, provider = detail.model or event.device_model or "device", detail.provider or PROVIDER_DEVICE
        else:
            model, provider = detail.model or event.cloud_model or "cloud", detail.provider or PROVIDER_CLOUD
        if detail.model is not None and model is detail.model:  # the caller's text (the event's is scrubbed)
            scrubbed = pii.scrub_name(model)
            if scrubbed is model and pii.REDACTED.fullmatch(
                (event.device_model if on_device else event.cloud_model) or ""
            ):
                scrubbed = pii.hash_value(model)  # personal with another field (`pii.split_across`): as the event
            model = scrubbed
        if detail.provider is not None:
            provider = scrub(provider)
        attributes = {
            _OPERATION: "chat",
            _PROVIDER: provider,
            _MODEL: model,
            _CONVERSATION: session,
            _LEVEL: level,
            _OUTCOME: outcome,
            _INPUT_TOKENS: event.input_tokens,
        }
        if detail.output_tokens is not None:
            attributes[_OUTPUT_TOKENS] = detail.output_tokens
        elif i == last:
            attributes[_OUTPUT_TOKENS] = event.output_tokens
        failed = outcome != "ok"
        if failed:
            attributes[_ERROR_TYPE] = outcome
        child = start_span(
            f"chat {model}",
            parent_context,
            kind=_INTERNAL if on_device else _CLIENT,
            start_time=t,
            attributes=attributes,
        )
        if failed:
            child.set_status(Status(StatusCode.ERROR, outcome))
        child.end(end_time=end)
        if end > latest:
            latest = end
    return latest
