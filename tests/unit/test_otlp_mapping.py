"""The mapping of GenAI spans to decision events (routerscope/instrumentation/otlp/mapping.py, docs/otlp.md): each
source's dialect, device or cloud from the mapping file, fallbacks only from what the spans show, and no
content or raw identifier in an event. Every event is checked against the contract as the loader will."""

from __future__ import annotations

import pytest

from routerscope.contract.validation import DECISIONS
from routerscope.instrumentation.otlp.mapping import NO_MODEL_CALL, TOO_MANY_CALLS, Mapping, MappingError, map_trace
from routerscope.instrumentation.otlp.proto import KIND_CLIENT, KIND_INTERNAL, EventView, SpanView

TRACE = "0af7651916cd43dd8448eb211c80319c"
MAPPING = Mapping.from_dict(
    {
        "device": {"server_addresses": ["127.0.0.1:8081"], "providers": ["ollama"], "models": ["gemma-*"]},
        "task_types": [{"task_type": "short_reply", "service": "support-*"}],
    }
)


def span(span_id: int, attrs: dict, *, parent: int | None = 1, start_ms: int = 10, end_ms: int = 20, **kw) -> SpanView:
    return SpanView(
        trace_id=TRACE,
        span_id=f"{span_id:016x}",
        parent_id="" if parent is None else f"{parent:016x}",
        remote_parent=False,
        name=kw.pop("name", "chat"),
        kind=kw.pop("kind", KIND_CLIENT),
        start_ns=1_800_000_000_000_000_000 + start_ms * 1_000_000,
        end_ns=1_800_000_000_000_000_000 + end_ms * 1_000_000,
        error=kw.pop("error", False),
        attrs=attrs,
        resource=kw.pop("resource", {"service.name": "support-bot"}),
    )


def root(**attrs) -> SpanView:
    return span(1, dict(attrs), parent=None, start_ms=0, end_ms=100, name="handle", kind=2)


def mapped(spans, mapping=MAPPING):
    event, reason = map_trace(spans, mapping)
    assert reason is None and event is not None
    _, rules = DECISIONS.parse(event.to_json())
    assert rules == [], rules  # what the loader will check
    return event


# One successful cloud call as each source writes it: (attributes, model, input tokens, output tokens).
DIALECTS = {
    "semconv 1.37+": (
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
            "gen_ai.usage.input_tokens": 11,
            "gen_ai.usage.output_tokens": 5,
            "server.address": "api.openai.com",
        },
        "gpt-4o-mini-2024-07-18",
        11,
        5,
    ),
    "semconv before 1.37": (
        {
            "gen_ai.system": "openai",
            "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.usage.prompt_tokens": 11,
            "gen_ai.usage.completion_tokens": 5,
        },
        "gpt-4o-mini",
        11,
        5,
    ),
    "OpenLLMetry": (
        {
            "llm.request.type": "chat",
            "gen_ai.system": "openai",
            "gen_ai.request.model": "gpt-4o-mini",
            "llm.usage.prompt_tokens": 11,
            "llm.usage.completion_tokens": 5,
            "gen_ai.openai.api_base": "https://api.openai.com/v1/",
        },
        "gpt-4o-mini",
        11,
        5,
    ),
    "OpenInference": (
        {
            "openinference.span.kind": "LLM",
            "llm.system": "openai",
            "llm.model_name": "gpt-4o-mini",
            "llm.token_count.prompt": 11,
            "llm.token_count.completion": 5,
        },
        "gpt-4o-mini",
        11,
        5,
    ),
}


@pytest.mark.parametrize("source", sorted(DIALECTS))
def test_each_sources_dialect_maps_to_a_served_cloud_call(source):
    attrs, model, tokens_in, tokens_out = DIALECTS[source]
    event = mapped([root(), span(2, attrs)])
    assert (event.entered_device, event.fallback_type, event.reason, event.degrade_level) == (
        False,
        "none",
        "default",
        2,
    )
    assert [(a.level, a.outcome) for a in event.attempts] == [(2, "ok")]
    assert (event.cloud_model, event.device_model, event.cloud_calls) == (model, None, 1)
    assert (event.input_tokens, event.output_tokens) == (tokens_in, tokens_out)
    assert event.task_type == "short_reply"  # the mapping file's rule on service.name
    assert event.trace_id == TRACE and event.request_id == TRACE


@pytest.mark.parametrize(
    "device_attrs, kind",
    [
        ({"server.address": "127.0.0.1", "server.port": 8081}, KIND_CLIENT),  # by server address and port
        ({"gen_ai.openai.api_base": "http://127.0.0.1:8081/v1/"}, KIND_CLIENT),  # OpenLLMetry's base URL
        ({"gen_ai.provider.name": "ollama"}, KIND_CLIENT),  # by provider
        ({"gen_ai.request.model": "gemma-3-270m"}, KIND_CLIENT),  # by model glob
        ({"routerscope.side": "device"}, KIND_CLIENT),  # the app says so
    ],
)
def test_a_failed_device_call_then_a_cloud_answer_is_an_error_fallback(device_attrs, kind):
    device = span(2, {"gen_ai.operation.name": "chat", **device_attrs}, start_ms=1, end_ms=5, error=True, kind=kind)
    cloud = span(3, DIALECTS["semconv 1.37+"][0], start_ms=6, end_ms=40)
    event = mapped([root(), device, cloud])
    assert (event.entered_device, event.fallback_type, event.reason, event.degrade_level) == (
        True,
        "error",
        "device_error",
        2,
    )
    assert [(a.level, a.outcome) for a in event.attempts] == [(0, "error"), (2, "ok")]


def test_an_app_span_marking_the_device_path_puts_the_call_inside_it_on_the_device():
    path = span(2, {"routerscope.side": "device"}, start_ms=1, end_ms=5, kind=KIND_INTERNAL, name="device path")
    device = span(3, {"openinference.span.kind": "LLM", "llm.system": "openai"}, parent=2, start_ms=1, end_ms=5)
    device.error = True  # OpenInference names no model and no server when the call fails
    event = mapped([root(), path, device, span(4, DIALECTS["OpenInference"][0], start_ms=6, end_ms=40)])
    assert (event.fallback_type, [a.level for a in event.attempts]) == ("error", [0, 2])


def test_a_device_timeout_then_the_cloud_is_a_timeout_fallback():
    device = span(2, {"gen_ai.provider.name": "ollama", "error.type": "APITimeoutError"}, start_ms=1, end_ms=5)
    event = mapped([root(), device, span(3, DIALECTS["semconv 1.37+"][0], start_ms=6, end_ms=40)])
    assert (event.fallback_type, event.reason, event.attempts[0].outcome) == ("timeout", "device_timeout", "timeout")


def test_a_requested_model_other_than_the_served_one_is_not_a_fallback():
    attrs = {**DIALECTS["semconv 1.37+"][0], "gen_ai.request.model": "gpt-4o", "gen_ai.response.model": "gpt-4o-mini"}
    event = mapped([root(), span(2, attrs)])
    assert (event.fallback_type, event.reason, len(event.attempts)) == ("none", "default", 1)


def test_a_cloud_error_then_another_cloud_answer_is_no_device_fallback():
    first = span(2, DIALECTS["semconv 1.37+"][0], start_ms=1, end_ms=5, error=True)
    event = mapped([root(), first, span(3, DIALECTS["semconv 1.37+"][0], start_ms=6, end_ms=40)])
    assert (event.fallback_type, event.entered_device, event.cloud_calls) == ("none", False, 2)
    assert [(a.level, a.outcome) for a in event.attempts] == [(2, "error"), (2, "ok")]


def test_the_apps_routerscope_attributes_win_and_go_through_the_contract():
    device = span(2, {"gen_ai.provider.name": "ollama", "gen_ai.request.model": "gemma-3"}, start_ms=1, end_ms=5)
    cloud = span(3, {**DIALECTS["semconv 1.37+"][0], "routerscope.degrade_level": 3}, start_ms=6, end_ms=40)
    app = root(
        **{
            "routerscope.task_type": "intent_classify",
            "routerscope.fallback_type": "quality",
            "routerscope.confidence": 0.41,
            "routerscope.threshold": 0.7,
            "routerscope.deadline_ms": 2000,
            "routerscope.session_id": "s-42",
        }
    )
    event = mapped([app, device, cloud])
    assert (event.task_type, event.fallback_type, event.reason) == ("intent_classify", "quality", "low_confidence")
    assert (event.confidence, event.threshold, event.deadline_ms, event.session_id) == (0.41, 0.7, 2000, "s-42")
    assert (event.degrade_level, [a.level for a in event.attempts]) == (3, [0, 3])


def test_a_bad_routerscope_value_reaches_the_contract_which_names_it():
    event, _ = map_trace([root(**{"routerscope.confidence": "high"}), span(2, DIALECTS["OpenInference"][0])], MAPPING)
    assert DECISIONS.parse(event.to_json())[1] == ["schema.invalid.confidence"]


def test_nested_model_call_spans_are_one_call():
    outer = span(2, {"openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini"}, kind=KIND_INTERNAL)
    inner = span(3, DIALECTS["semconv 1.37+"][0], parent=2)  # LiteLLM's span around OpenAI's
    assert len(mapped([root(), outer, inner]).attempts) == 1


@pytest.mark.parametrize(
    "spans, reason",
    [
        ([root()], NO_MODEL_CALL),
        ([root(), span(2, {"gen_ai.operation.name": "embeddings", "gen_ai.request.model": "e5"})], NO_MODEL_CALL),
        ([root(), *(span(i, DIALECTS["OpenInference"][0], start_ms=i) for i in range(2, 8))], TOO_MANY_CALLS),
    ],
)
def test_traces_that_map_to_nothing_say_why(spans, reason):
    assert map_trace(spans, MAPPING) == (None, reason)


def test_identifiers_are_scrubbed_and_the_event_id_follows_the_trace():
    attrs = {**DIALECTS["semconv 1.37+"][0], "gen_ai.conversation.id": "jane.doe@example.com"}
    first, again = mapped([root(), span(2, attrs)]), mapped([root(), span(2, attrs)])
    assert first.session_id.startswith("redacted-") and "jane" not in first.to_json().decode()
    assert first.event_id == again.event_id  # an exporter's retry is the same event


def test_the_shipped_mapping_file_loads_and_a_broken_one_is_refused(tmp_path):
    assert Mapping.load().deadline_ms == 60_000
    bad = tmp_path / "m.yaml"
    bad.write_text("device:\n  servers: [x]\n")
    with pytest.raises(MappingError, match="device"):
        Mapping.load(bad)


def _message(offset: int, spans, sent_ms: int, partition: int = 0):
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return (partition, offset, b"k", (1, sent_ms), encode_spans(spans).SerializeToString())


@pytest.mark.parametrize(
    "age_ms, unread, deferred",
    [(1_000, frozenset(), {0: 5}), (60_000, frozenset(), {}), (60_000, frozenset({0}), {0: 5})],
    ids=["young: waits for its root", "old: mapped as it is", "its partition not read to the end: waits"],
)
def test_a_trace_without_its_root_waits_while_young_or_while_its_partition_has_more(age_ms, unread, deferred):
    from routerscope.warehouse.ingest.otlp import map_messages
    from tests.support.otlp import fallback_trace, finished_spans

    calls = [s for s in finished_spans(fallback_trace) if s.parent is not None]
    now = 1_800_000_000_000
    events, rows, result, left = map_messages([_message(5, calls, now - age_ms)], MAPPING, now_ms=now, unread=unread)
    assert left == deferred
    assert (len(events), result.deferred, rows) == ((0, 1, []) if deferred else (1, 0, []))


def test_a_message_that_is_not_otlp_is_quarantined_without_its_bytes():
    from routerscope.warehouse.ingest.otlp import NOT_OTLP, map_messages

    secret = b"\x0a\xff\x01 the secret prompt"
    _, rows, result, _ = map_messages([(0, 3, None, (1, 0), secret)], MAPPING)
    ((partition, offset, _key, _ts, raw, rules, error),) = rows
    assert (partition, offset, raw, rules, result.quarantined) == (0, 3, b"", [NOT_OTLP], {NOT_OTLP: 1})
    assert "secret" not in error and "sha256" in error


def test_a_late_piece_of_a_trace_already_stored_is_quarantined_never_a_second_event():
    """The root and the cloud call were mapped by an earlier load; the device call's span comes later, alone. Mapped,
    it would be a second, different event under the trace's id (a blocking data-quality failure); the stored decision
    stands and the late spans are kept in the quarantine with the reason."""
    from routerscope.warehouse.ingest.otlp import ALREADY_MAPPED, map_messages
    from tests.support.otlp import fallback_trace, finished_spans

    spans = finished_spans(fallback_trace)
    late = [s for s in spans if s.parent is not None][:1]
    now = 1_800_000_000_000
    message = _message(9, late, now - 60_000)  # old enough not to wait for a root
    events, _, _, _ = map_messages([message], MAPPING, now_ms=now)
    (event,) = events  # unchecked, the piece maps to an event of its own
    asked = []

    def stored(ids):
        asked.append(ids)
        return {str(event.event_id)}

    events, rows, result, _ = map_messages([message], MAPPING, now_ms=now, stored=stored)
    assert asked == [[str(event.event_id)]] and events == [] and result.mapped == 0
    assert result.quarantined == {ALREADY_MAPPED: 1}
    ((partition, offset, _key, _ts, raw, rules, detail),) = rows
    assert (partition, offset, rules) == (0, 9, [ALREADY_MAPPED]) and b"chat gemma" in raw
    assert "the stored decision stands" in detail
    # a trace the warehouse does not hold maps as before
    events, rows, result, _ = map_messages([message], MAPPING, now_ms=now, stored=lambda ids: set())
    assert len(events) == 1 and rows == [] and result.mapped == 1


# -- each instrumentation's hard cases, as its pinned version writes them (docs/otlp.md "Tested versions") -----

# OpenLLMetry 0.62.4 (opentelemetry-instrumentation-openai): a streamed chat call to the device's llama.cpp
OPENLLMETRY_DEVICE_STREAM = {
    "llm.request.type": "chat",
    "gen_ai.system": "openai",
    "gen_ai.request.model": "gemma-3-270m",
    "gen_ai.openai.api_base": "http://127.0.0.1:8081/v1/",
    "gen_ai.is_streaming": True,
}
OPENLLMETRY_CLOUD = {
    "llm.request.type": "chat",
    "gen_ai.system": "openai",
    "gen_ai.request.model": "gpt-4o-mini",
    "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
    "gen_ai.openai.api_base": "https://api.openai.com/v1/",
    "gen_ai.response.finish_reasons": ["stop"],
    "gen_ai.usage.input_tokens": 12,
    "gen_ai.usage.output_tokens": 7,
}
# OpenInference 0.1.66 (openinference-instrumentation-openai): a failed call names neither model nor server
OPENINFERENCE_FAILED = {"openinference.span.kind": "LLM", "llm.system": "openai", "llm.provider": "openai"}


def test_openllmetry_stream_cut_midway_then_the_cloud_is_a_timeout_fallback_never_quarantined():
    """OpenLLMetry 0.62.4 ends a stream whose iteration failed with status OK and no finish reason: the call is
    a timeout (the device stopped answering), and the cloud call after it makes a timeout fallback. Before, the
    device attempt read `ok`, the event broke `invariant.served_on_device_level` and the trace was quarantined."""
    cut = span(2, OPENLLMETRY_DEVICE_STREAM, start_ms=1, end_ms=30)
    event = mapped([root(), cut, span(3, OPENLLMETRY_CLOUD, start_ms=31, end_ms=90)])
    assert (event.entered_device, event.fallback_type, event.reason, event.degrade_level) == (
        True,
        "timeout",
        "device_timeout",
        2,
    )
    assert [(a.level, a.outcome) for a in event.attempts] == [(0, "timeout"), (2, "ok")]
    assert (event.device_model, event.cloud_model) == ("gemma-3-270m", "gpt-4o-mini-2024-07-18")
    assert event.policy_version == "otlp-default"  # shown by the spans, not inferred


def test_a_stream_cut_midway_and_served_as_it_was_is_a_truncated_answer():
    event = mapped([root(), span(2, OPENLLMETRY_DEVICE_STREAM, start_ms=1, end_ms=30)])
    assert (event.fallback_type, event.reason, event.degrade_level) == ("none", "truncated", 0)
    assert [(a.level, a.outcome) for a in event.attempts] == [(0, "timeout")]


def test_a_stream_that_finished_is_an_answer():
    done = span(2, {**OPENLLMETRY_DEVICE_STREAM, "gen_ai.response.finish_reasons": ["stop"]}, start_ms=1, end_ms=30)
    event = mapped([root(), done])
    assert (event.fallback_type, event.reason, [a.outcome for a in event.attempts]) == ("none", "default", ["ok"])


@pytest.mark.parametrize(
    "error_type, outcome",
    [
        ("APITimeoutError", "timeout"),  # openai's, as openai-v2 and OpenLLMetry record it
        ("httpx.ReadTimeout", "timeout"),
        ("DeadlineExceeded", "timeout"),  # gRPC-style runtimes
        ("requests.exceptions.ConnectTimeout", "timeout"),
        ("Request timed out", "timeout"),
        ("APIConnectionError", "error"),
        ("", "error"),  # status ERROR alone
    ],
)
def test_timeouts_are_read_from_the_error_type_in_every_spelling(error_type, outcome):
    device = span(
        2,
        {"gen_ai.provider.name": "ollama", **({"error.type": error_type} if error_type else {})},
        start_ms=1,
        end_ms=5,
        error=True,
    )
    event = mapped([root(), device, span(3, DIALECTS["semconv 1.37+"][0], start_ms=6, end_ms=40)])
    assert (event.attempts[0].outcome, event.fallback_type) == (outcome, outcome)


def test_openinference_without_routerscope_side_infers_the_device_from_the_traces_shape():
    """OpenInference names neither the model nor the server of a failed call, so nothing places it: a failed
    call before the cloud call that served is taken as the device's, the fallback inferred and marked
    (`policy_version` ends in `+inferred`). Before, the fallback vanished (two cloud calls, rate 0.0). The app's
    other routerscope attributes (its session, its task type) do not stop the inference; its routing ones do."""
    failed = span(2, OPENINFERENCE_FAILED, start_ms=1, end_ms=5, error=True, kind=KIND_INTERNAL)
    served = span(3, DIALECTS["OpenInference"][0], start_ms=6, end_ms=40, kind=KIND_INTERNAL)
    app = root(**{"routerscope.session_id": "s-1", "routerscope.task_type": "short_reply"})
    event = mapped([app, failed, served])
    assert (event.entered_device, event.fallback_type, event.reason) == (True, "error", "device_error")
    assert [(a.level, a.outcome) for a in event.attempts] == [(0, "error"), (2, "ok")]
    assert (event.policy_version, event.cloud_calls, event.task_type) == ("otlp-default+inferred", 1, "short_reply")
    # the app marks where its calls ran: nothing is inferred, the unplaced call is the cloud's
    marked = root(**{"routerscope.session_id": "s-1", "routerscope.side": "cloud"})
    event = mapped([marked, failed, served])
    assert (event.fallback_type, event.entered_device, event.policy_version) == ("none", False, "otlp-default")
    # a failed call that names its server is placed by the mapping file, never inferred
    placed = span(2, {**OPENINFERENCE_FAILED, "server.address": "api.openai.com"}, start_ms=1, end_ms=5, error=True)
    assert mapped([root(), placed, served]).fallback_type == "none"


def test_a_device_answer_then_a_cloud_answer_is_an_inferred_quality_fallback():
    """The device answered (no failure) and the app still called the cloud: it judged the answer wanting. With
    no routing attribute that is an inferred quality fallback, marked; before it broke the contract and was
    quarantined."""
    device = span(2, {**OPENLLMETRY_CLOUD, "gen_ai.openai.api_base": "http://127.0.0.1:8081/v1/"}, start_ms=1, end_ms=5)
    event = mapped([root(), device, span(3, OPENLLMETRY_CLOUD, start_ms=6, end_ms=40)])
    assert (event.fallback_type, event.reason, event.policy_version) == (
        "quality",
        "validator_failed",  # the answer was judged wanting; no confidence is known (low_confidence needs one)
        "otlp-default+inferred",
    )
    assert [(a.level, a.outcome) for a in event.attempts] == [(0, "ok"), (2, "ok")]


def test_both_failed_is_stored_as_it_was_every_attempt_failed():
    """The device failed, then the cloud failed too: nothing was served. The decision keeps both failures
    (the last attempt's outcome `error` at the degrade level it reached), never a cloud call that served."""
    device = span(2, {"gen_ai.provider.name": "ollama", "error.type": "APIConnectionError"}, start_ms=1, end_ms=5)
    device.error = True
    cloud = span(3, {**DIALECTS["semconv 1.37+"][0], "error.type": "RateLimitError"}, start_ms=6, end_ms=40)
    cloud.error = True
    event = mapped([root(), device, cloud])
    assert [(a.level, a.outcome) for a in event.attempts] == [(0, "error"), (2, "error")]
    assert (event.fallback_type, event.reason, event.degrade_level) == ("error", "device_error", 2)
    assert event.policy_version == "otlp-default"


def test_the_device_model_comes_from_the_device_attempts_own_span():
    device = span(2, OPENLLMETRY_DEVICE_STREAM, start_ms=1, end_ms=30)
    event = mapped([root(), device, span(3, OPENLLMETRY_CLOUD, start_ms=31, end_ms=90)])
    assert event.device_model == "gemma-3-270m"


def test_time_to_first_token_from_the_served_calls_attribute():
    attrs = {**DIALECTS["semconv 1.37+"][0], "gen_ai.response.time_to_first_chunk": 0.125}
    assert mapped([root(), span(2, attrs)]).ttft_ms == 125.0


def test_openinference_litellms_failed_call_names_the_requested_model_and_is_an_error_not_a_cut():
    """OpenInference's LiteLLM spans carry the model it was asked for even when the call failed before any
    answer: an error, not a stream cut. Its OpenAI spans (named after the response type) carry only the response's
    model, so there an error with a model is an answer that stopped mid-way."""
    litellm = {**OPENINFERENCE_FAILED, "llm.model_name": "openai/gemma-3-270m"}
    served = span(3, DIALECTS["OpenInference"][0], start_ms=6, end_ms=40, kind=KIND_INTERNAL)
    failed = span(2, litellm, start_ms=1, end_ms=5, error=True, kind=KIND_INTERNAL, name="completion")
    assert [a.outcome for a in mapped([root(), failed, served]).attempts] == ["error", "ok"]
    cut = span(2, litellm, start_ms=1, end_ms=5, error=True, kind=KIND_INTERNAL, name="ChatCompletion")
    assert [a.outcome for a in mapped([root(), cut, served]).attempts] == ["timeout", "ok"]


def test_an_error_type_written_as_a_class_leaves_collect_as_its_dotted_name():
    """openai-v2 2.4b0 writes `error.type` as `<class 'openai.APITimeoutError'>`: collect's allow-list keeps
    `openai.APITimeoutError` (the mapping reads the timeout in it), and still drops anything with other words."""
    from routerscope.instrumentation.otlp import allow

    assert allow.string("error", "<class 'openai.APITimeoutError'>") == "openai.APITimeoutError"
    assert allow.string("error", "<class 'httpx.RemoteProtocolError'>") == "httpx.RemoteProtocolError"
    assert allow.string("error", "APIConnectionError") == "APIConnectionError"
    assert allow.string("error", "<class 'my card is 4111 1111 1111 1111'>") is None
    assert allow.string("error", "timeout for jane.doe@example.com") is None


# -- what span events say (collect keeps the exception and first-token events: docs/otlp.md "Span events") -------


def _at(s: SpanView, ms: float, name: str, **attrs) -> EventView:
    """An event `ms` after the span's start."""
    return EventView(name, s.start_ns + int(ms * 1_000_000), dict(attrs))


OPENINFERENCE_TIMEOUT = {**OPENINFERENCE_FAILED, "llm.invocation_parameters": '{"model": "gemma-3-270m"}'}


def test_openinference_says_its_timeout_only_in_an_exception_event_a_timeout_fallback_with_the_device_model():
    """OpenInference 0.1.66 writes no `error.type`: a call the app's client timeout stopped has an error status,
    an `exception` event of type `openai.APITimeoutError`, no response model, and its request parameters (kept
    as their model alone). Before, that was an `error` fallback with no device model."""
    failed = span(2, OPENINFERENCE_TIMEOUT, start_ms=1, end_ms=501, error=True, kind=KIND_INTERNAL)
    failed.events = [_at(failed, 500, "exception", **{"exception.type": "openai.APITimeoutError"})]
    served = span(3, DIALECTS["OpenInference"][0], start_ms=502, end_ms=600, kind=KIND_INTERNAL)
    event = mapped([root(), failed, served])
    assert [(a.level, a.outcome) for a in event.attempts] == [(0, "timeout"), (2, "ok")]
    assert (event.fallback_type, event.reason, event.device_model, event.cloud_model) == (
        "timeout",
        "device_timeout",
        "gemma-3-270m",
        "gpt-4o-mini",
    )


@pytest.mark.parametrize(
    "exception_type, error, outcome",
    [
        ("openai.APIConnectionError", True, "error"),  # an exception, but no timeout
        ("httpx.ReadTimeout", True, "timeout"),
        ("java.net.SocketTimeoutException", True, "timeout"),
        ("httpx.ReadTimeout", False, "ok"),  # recorded, then recovered from inside the call: it answered
    ],
)
def test_an_exception_events_type_says_timeout_only_for_a_call_that_failed(exception_type, error, outcome):
    call = span(2, {**DIALECTS["semconv 1.37+"][0]}, start_ms=1, end_ms=50, error=error)
    call.events = [_at(call, 20, "exception", **{"exception.type": exception_type})]
    assert [a.outcome for a in mapped([root(), call]).attempts] == [outcome]


@pytest.mark.parametrize(
    "events, ttft",
    [
        ([("First Token Stream Event", 37.5)], 37.5),  # OpenInference
        ([("gen_ai.content.completion.chunk", 12.25), ("gen_ai.content.completion.chunk", 11.0)], 11.0),  # the first
        ([("exception", 5.0)], None),  # not a first-token event
        ([("First Token Stream Event", -3.0)], None),  # before the call began: clocks disagree, no measurement
        ([("First Token Stream Event", 61.0)], None),  # after it ended
        ([], None),
    ],
)
def test_time_to_first_token_from_the_served_calls_first_token_event(events, ttft):
    """TTFT is the first first-token event's time less the served call's start (a span 60 ms long here)."""
    call = span(2, {**DIALECTS["OpenInference"][0]}, start_ms=10, end_ms=70, kind=KIND_INTERNAL)
    call.events = [_at(call, ms, name) for name, ms in events]
    assert mapped([root(), call]).ttft_ms == ttft


def test_the_attribute_wins_over_the_event_and_only_the_served_calls_count():
    device = span(2, {**OPENINFERENCE_TIMEOUT}, start_ms=1, end_ms=9, error=True, kind=KIND_INTERNAL)
    device.events = [_at(device, 2, "First Token Stream Event")]  # the device's first token, not the served one's
    served = span(3, {**DIALECTS["semconv 1.37+"][0], "gen_ai.response.time_to_first_chunk": 0.25}, start_ms=10)
    served.events = [_at(served, 4, "gen_ai.content.completion.chunk")]
    assert mapped([root(), device, served]).ttft_ms == 250.0
    del served.attrs["gen_ai.response.time_to_first_chunk"]
    assert mapped([root(), device, served]).ttft_ms == 4.0


def test_request_parameters_name_the_model_only_when_the_call_names_none():
    answered = span(2, {**DIALECTS["OpenInference"][0], "llm.invocation_parameters": '{"model": "gpt-4o"}'})
    assert mapped([root(), answered]).cloud_model == "gpt-4o-mini"  # the response's model first
    asked = span(2, {**OPENINFERENCE_FAILED, "llm.invocation_parameters": '{"model": "gemma-3-270m"}'}, error=True)
    event = mapped([root(), asked])  # the mapping file's device model glob places it by that model
    assert (event.device_model, event.attempts[0].level) == ("gemma-3-270m", 0)
