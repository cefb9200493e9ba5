"""Span events through `collect`'s allow-list: spans per second that `proto.split` rebuilds when each model
call carries what instrumentations record (OpenLLMetry: one `gen_ai.content.completion.chunk` event per
streamed chunk; an `exception` event with its message and stack trace), against the same spans without
events, measured in the same run. Prints JSON.

    .venv/bin/python bench/otlp_events.py [--spans 20000] [--chunks 64]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402

from routerscope.instrumentation import pii  # noqa: E402
from routerscope.instrumentation.otlp import proto  # noqa: E402

T0 = 1_796_000_000_000_000_000
PROMPT = "Summarise this ticket for me: the customer says the order never arrived and wants a refund."


def request(spans: int, chunks: int) -> bytes:
    out = ExportTraceServiceRequest()
    ss = out.resource_spans.add().scope_spans.add()
    for i in range(spans):
        span = ss.spans.add(
            trace_id=(i // 2 + 1).to_bytes(16, "big"),
            span_id=(i + 1).to_bytes(8, "big"),
            name="openai.chat",
            start_time_unix_nano=T0,
            end_time_unix_nano=T0 + 10**9,
        )
        for key, value in (("gen_ai.provider.name", "openai"), ("gen_ai.request.model", "gpt-4o-mini")):
            span.attributes.add(key=key).value.string_value = value
        span.attributes.add(key="gen_ai.prompt.0.content").value.string_value = PROMPT
        for c in range(chunks):
            span.events.add(name="gen_ai.content.completion.chunk", time_unix_nano=T0 + c * 1000)
        if chunks:
            exc = span.events.add(name="exception", time_unix_nano=T0 + 10**8)
            for key, value in (
                ("exception.type", "openai.APITimeoutError"),
                ("exception.message", "Request timed out."),
                ("exception.stacktrace", "Traceback (most recent call last):\n" + PROMPT * 20),
            ):
                exc.attributes.add(key=key).value.string_value = value
    return out.SerializeToString()


BATCH = 256  # spans per request, as an SDK's batch exporter sends them


def spans_per_s(spans: int, chunks: int, rounds: int = 3) -> float:
    bodies = [request(BATCH, chunks) for _ in range(max(1, spans // BATCH))]
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for body in bodies:
            proto.split(proto.decode(body))
        best = min(best, time.perf_counter() - started)
    return len(bodies) * BATCH / best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spans", type=int, default=20_000)
    parser.add_argument("--chunks", type=int, default=64)
    args = parser.parse_args()
    pii.configure(key=b"b" * 32)
    plain = spans_per_s(args.spans, 0)
    evented = spans_per_s(args.spans, args.chunks)
    print(
        json.dumps(
            {
                "spans": args.spans,
                "chunk_events_per_span": args.chunks,
                "spans_per_s_without_events": round(plain),
                "spans_per_s_with_events": round(evented),
                "ratio_with_to_without": round(evented / plain, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
