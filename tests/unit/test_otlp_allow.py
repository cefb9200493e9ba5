"""The receiver's allow-list (what of a span may leave `collect`) and its limits on what a body expands to."""

from __future__ import annotations

import gzip
import time

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from routerscope.instrumentation import pii
from routerscope.instrumentation.otlp import allow, proto


@pytest.fixture(autouse=True)
def key():
    pii.configure(key=b"k" * 32)


@pytest.mark.parametrize(
    ("name", "kept"),
    [
        ("chat gpt-4o-mini", True),
        ("handle", True),
        ("openai.chat", True),
        ("POST /v1/chat/completions", True),
        ("chat gpt-4o-2024-08-06", True),  # a date in a model name is no phone number
        ("tell me about my divorce", False),
        ("chat my card is 4111 1111 1111 1111", False),
        ("jane.doe@example.com", False),
        ("4111111111111111", False),
        ("x" * 200, False),
    ],
)
def test_a_span_name_leaves_only_in_a_shape_a_span_name_has(name, kept):
    assert allow.span_name(name) == (name if kept else "")


def test_a_span_name_a_task_rule_reads_is_kept_unless_it_looks_personal():
    assert allow.span_name("summarise the ticket", ("summarise *",)) == "summarise the ticket"
    assert allow.span_name("summarise jane.doe@example.com", ("summarise *",)) == ""


@pytest.mark.parametrize(
    ("kind", "value", "out"),
    [
        ("enum", "stop", "stop"),
        ("enum", "stop because 4111 1111 1111 1111", None),
        ("enum", "4111111111111111", None),
        ("enum", "APIConnectionError", "APIConnectionError"),
        ("name", "gpt-4o-mini-2024-07-18", "gpt-4o-mini-2024-07-18"),
        ("name", "jane.doe@example.com", None),
        ("host", "127.0.0.1", "127.0.0.1"),
        ("host", "jane doe", None),
        ("url", "https://api.openai.com/v1?user=jane@example.com", "https://api.openai.com"),
        ("url", "http://127.0.0.1:8081/v1", "http://127.0.0.1:8081"),
        ("task", "summarise", "summarise"),
        ("task", "Summarise This", None),
        ("id", "sess-1", "sess-1"),
    ],
)
def test_each_kind_of_value_passes_only_in_its_shape(kind, value, out):
    assert allow.string(kind, value) == out


def test_an_identifier_that_is_text_or_personal_is_hashed_so_it_still_groups():
    text = allow.string("id", "the conversation about my divorce")
    assert (
        text is not None
        and text.startswith("hashed-")
        and text == allow.string("id", "the conversation about my divorce")
    )
    assert allow.string("id", "jane.doe@example.com").startswith("redacted-")


def _nested(field: int, inner: bytes) -> bytes:
    from google.protobuf.internal.encoder import _VarintBytes

    return _VarintBytes(field << 3 | 2) + _VarintBytes(len(inner)) + inner


def test_a_body_of_millions_of_empty_messages_is_refused_before_it_is_parsed():
    started = time.process_time()
    with pytest.raises(proto.TooLarge):
        proto.decode(b"\x0a\x00" * 4_000_000)  # 4 million empty ResourceSpans: no span to count
    with pytest.raises(proto.TooLarge):
        proto.decode(_nested(1, _nested(2, _nested(2, _nested(9, b"") * 2_000_000))))  # empty attributes
    with pytest.raises(proto.TooLarge):
        proto.decode_json(b'{"resourceSpans":[' + b"{}," * 1_000_000 + b"{}]}")
    assert time.process_time() - started < 1.0


def test_a_gzip_body_stops_unzipping_at_the_limit():
    bomb = gzip.compress(b"\0" * (40 * 1024 * 1024))
    with pytest.raises(proto.TooLarge):
        proto.inflate(bomb, 1024 * 1024)
    assert proto.inflate(gzip.compress(b"ab") + gzip.compress(b"cd")) == b"abcd"  # members in turn
    # empty messages: stopped by their count after a few MiB, long before the byte limit
    empties = gzip.compress(b"\x0a\x00" * 30_000_000, compresslevel=1)
    started = time.process_time()
    with pytest.raises(proto.TooLarge, match="messages"):
        proto.inflate(empties, 10**9, as_json=False)
    with pytest.raises(proto.TooLarge, match="values"):
        proto.inflate(gzip.compress(b"{}," * 10_000_000, compresslevel=1), 10**9, as_json=True)
    assert time.process_time() - started < 0.5
    with pytest.raises(proto.BadRequest):
        proto.inflate(gzip.compress(b"abcdef")[:-6])


def test_counts_past_the_limits_are_refused_and_within_them_taken():
    request = ExportTraceServiceRequest()
    for _ in range(proto.MAX_RESOURCES + 1):
        request.resource_spans.add()
    with pytest.raises(proto.TooLarge, match="resources"):
        proto.split(request)
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add(trace_id=b"\1" * 16, span_id=b"\2" * 8)
    for i in range(proto.MAX_ATTRIBUTES + 1):
        span.attributes.add(key=f"k{i}")
    with pytest.raises(proto.TooLarge, match="attributes"):
        proto.split(request)
    del span.attributes[1:]
    parts, rejected, _, filtered = proto.split(request)
    assert (len(parts), rejected, filtered.attributes) == (1, 0, 1)


@pytest.mark.parametrize(
    ("value", "out"),
    [
        ("openai.APITimeoutError", "openai.APITimeoutError"),
        ("<class 'httpx.ReadTimeout'>", "httpx.ReadTimeout"),  # as Python prints a class
        ("java.net.SocketTimeoutException", "java.net.SocketTimeoutException"),
        ("TimeoutError", "TimeoutError"),
        ("Request timed out.", None),  # a message, not a type
        ("*errors.errorString", None),
        ("please pay with my card 4111 1111 1111 1111", None),
        ("jane.doe@example.com", None),
        ("a." * 40 + "B", None),  # past 16 dotted parts
    ],
)
def test_an_exception_type_leaves_only_as_a_dotted_class_name(value, out):
    assert allow.string("class", value) == out


@pytest.mark.parametrize(
    ("value", "out"),
    [
        ('{"model": "gemma-3-270m", "stream": true}', '{"model": "gemma-3-270m"}'),
        ('{"model": "gpt-4o", "user": "jane.doe@example.com", "tools": [{"name": "refund"}]}', '{"model": "gpt-4o"}'),
        ('{"stream": true}', None),
        ('{"model": "my card is 4111 1111 1111 1111"}', None),
        ('{"model": 7}', None),
        ('["gpt-4o"]', None),
        ("not json", None),
        ("[" * 100_000, None),  # too deep for the parser, and past the length limit
    ],
)
def test_request_parameters_leave_as_their_model_alone(value, out):
    assert allow.string("params", value) == out


PROMPT = "please pay with my card 4111 1111 1111 1111 and mail jane.doe@example.com"
CANARIES = (b"4111", b"jane.doe", b"please pay", b"Traceback")
T0 = 1_796_000_000_000_000_000


def _kv(target, key: str, value: str) -> None:
    target.attributes.add(key=key).value.string_value = value


def _span_with_events() -> ExportTraceServiceRequest:
    """One call that recorded what instrumentations record, the prompt quoted in every free-text place."""
    request = ExportTraceServiceRequest()
    span = (
        request.resource_spans.add()
        .scope_spans.add()
        .spans.add(
            trace_id=b"\1" * 16,
            span_id=b"\2" * 8,
            name="ChatCompletion",
            start_time_unix_nano=T0,
            end_time_unix_nano=T0 + 900,
        )
    )
    _kv(span, "openinference.span.kind", "LLM")
    _kv(span, "llm.invocation_parameters", '{"model": "gemma-3-270m", "user": "jane.doe@example.com"}')
    _kv(span, "input.value", PROMPT)
    for at in (300, 100, 200):  # OpenLLMetry's chunks, one not in time order
        _kv(span.events.add(name="gen_ai.content.completion.chunk", time_unix_nano=T0 + at), "chunk", PROMPT)
    _kv(span.events.add(name="First Token Stream Event", time_unix_nano=T0 + 150), "content", PROMPT)
    exc = span.events.add(name="exception", time_unix_nano=T0 + 800)
    _kv(exc, "exception.type", "openai.APITimeoutError")
    _kv(exc, "exception.message", PROMPT)
    _kv(
        exc, "exception.stacktrace", f'Traceback (most recent call last):\n  File "app.py", line 3\n    ask("{PROMPT}")'
    )
    _kv(exc, "exception.escaped", "False")
    _kv(span.events.add(name="exception", time_unix_nano=T0 + 850), "exception.type", PROMPT)
    _kv(span.events.add(name=PROMPT, time_unix_nano=T0 + 500), "gen_ai.prompt", PROMPT)
    span.events.add(name="gen_ai.content.prompt", time_unix_nano=T0 + 1)
    return request


def _events(request: ExportTraceServiceRequest) -> list[tuple[str, int, dict]]:
    (span,) = request.resource_spans[0].scope_spans[0].spans
    return [
        (e.name, e.time_unix_nano - T0, {kv.key: kv.value.string_value for kv in e.attributes}) for e in span.events
    ]


KEPT_EVENTS = [
    ("gen_ai.content.completion.chunk", 100, {}),  # the earliest chunk alone
    ("First Token Stream Event", 150, {}),
    ("exception", 800, {"exception.type": "openai.APITimeoutError"}),
    ("exception", 850, {}),  # a type that is text: the event stays, its type does not
]


def test_span_events_leave_by_name_with_their_time_and_an_exceptions_type_alone():
    """A prompt quoted in an exception's message or stack trace, in a chunk event or as an event's name never
    leaves `collect`; the first-token events (the earliest of each kind) and exceptions keep their name and time,
    an exception its dotted type alone; the rest is counted."""
    parts, _, _, filtered = proto.split(_span_with_events())
    (part,) = parts.values()
    raw = part.request.SerializeToString()
    for canary in CANARIES:
        assert canary not in raw, canary
    assert _events(part.request) == KEPT_EVENTS
    (span,) = part.request.resource_spans[0].scope_spans[0].spans
    params = [kv.value.string_value for kv in span.attributes if kv.key == "llm.invocation_parameters"]
    assert params == ['{"model": "gemma-3-270m"}']
    # dropped: 2 later chunks, the unknown event, the prompt event; their attributes and the kept ones' extras
    assert filtered.events == 4
    assert filtered.attributes == 1 + 2 + 3  # input.value; chunk and content; message, stacktrace, escaped
    assert filtered.values == 1  # the prompt as an exception type


def test_a_collectors_unstripped_message_reads_as_the_same_events_as_collects():
    """The loader reads a Collector's messages (unstripped OTLP) through the same allow-list: the same events,
    the same attributes, as what `collect` passes on."""
    unstripped = _span_with_events()
    (part,) = proto.split(unstripped)[0].values()
    (direct,), (stripped,) = proto.views(unstripped), proto.views(part.request)
    assert direct.events == stripped.events and direct.attrs == stripped.attrs
    assert [(e.name, e.time_ns - T0, e.attrs) for e in direct.events] == KEPT_EVENTS
    assert PROMPT not in repr(direct) and "4111" not in proto.summary([direct]).decode()


def test_a_span_keeps_at_most_a_few_exceptions():
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add(trace_id=b"\1" * 16, span_id=b"\2" * 8)
    for i in range(allow.MAX_EXCEPTIONS + 5):
        _kv(span.events.add(name="exception", time_unix_nano=T0 + i), "exception.type", "httpx.ReadTimeout")
    parts, _, _, filtered = proto.split(request)
    (part,) = parts.values()
    assert len(_events(part.request)) == allow.MAX_EXCEPTIONS and filtered.events == 5


def test_hostile_events_a_flood_of_chunks_and_exception_types_of_the_wrong_kind_are_dropped_and_counted():
    """50,000 chunk events on one span leave as one (the earliest, wherever it sits); an `exception.type` that is
    a number, a list or bytes leaves no value; an event named with a known name plus a space is not that event."""
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add(trace_id=b"\1" * 16, span_id=b"\2" * 8)
    for i in range(50_000):
        span.events.add(name="gen_ai.content.completion.chunk", time_unix_nano=T0 + 50_000 - i)
    wrong = span.events.add(name="exception", time_unix_nano=T0)
    wrong.attributes.add(key="exception.type").value.int_value = 4111111111111111
    wrong.attributes.add(key="exception.type").value.array_value.values.add().string_value = PROMPT
    wrong.attributes.add(key="exception.type").value.bytes_value = PROMPT.encode()
    span.events.add(name="exception ", time_unix_nano=T0)
    parts, _, _, filtered = proto.split(request)
    (part,) = parts.values()
    assert _events(part.request) == [("gen_ai.content.completion.chunk", 1, {}), ("exception", 0, {})]
    assert (filtered.events, filtered.values) == (49_999 + 1, 3)
    assert b"4111" not in part.request.SerializeToString()
