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
