"""OTLP in: spans per second through `routerscope collect` into Kafka. Prints JSON.

    .venv/bin/python bench/otlp.py [--spans 200000] [--batch 512] [--connections 2]

A local broker and `routerscope collect` (the command, its own process) are started; a sender process
posts pre-encoded OTLP/HTTP protobuf requests of `--batch` spans each over `--connections` keep-alive
connections. Each trace is what an instrumented app sends per request: the app's root span, a device
call that failed, the cloud call that served, and one HTTP span, with prompt and completion attributes
(which the receiver drops). The clock runs from the first request until every trace is in the topic
(counted by a consumer), so `spans_per_s` is spans received, stripped, grouped and written to Kafka.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from routerscope.core import broker  # noqa: E402
from routerscope.core.procs import free_port  # noqa: E402
from routerscope.core.settings import Settings  # noqa: E402

SPANS_PER_TRACE = 4


def log(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def requests(total: int, batch: int) -> list[bytes]:
    """Encoded ExportTraceServiceRequests, `batch` spans each, every trace complete (root included)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    def attr(span, key, value):
        kv = span.attributes.add()
        kv.key = key
        if isinstance(value, str):
            kv.value.string_value = value
        else:
            kv.value.int_value = value

    out, trace_no = [], 0
    t0 = time.time_ns()
    while len(out) * batch < total:
        request = ExportTraceServiceRequest()
        rs = request.resource_spans.add()
        service = rs.resource.attributes.add()
        service.key, service.value.string_value = "service.name", "bench-app"
        ss = rs.scope_spans.add()
        ss.scope.name = "bench"
        for _ in range(batch // SPANS_PER_TRACE):
            trace_no += 1
            trace_id = trace_no.to_bytes(16, "big")
            ids = [(trace_no * 4 + i).to_bytes(8, "big") for i in range(4)]
            for i, name in enumerate(("handle", "chat gemma", "chat gpt-4o-mini", "GET /profile")):
                span = ss.spans.add()
                span.trace_id, span.span_id, span.name = trace_id, ids[i], name
                span.parent_span_id = b"" if i == 0 else ids[0]
                span.kind = Span.SPAN_KIND_SERVER if i == 0 else Span.SPAN_KIND_CLIENT
                span.start_time_unix_nano = t0 + i * 1_000_000
                span.end_time_unix_nano = t0 + (i + 1) * 1_000_000 + (10_000_000 if i == 0 else 0)
                if i in (1, 2):
                    for key, value in (
                        ("gen_ai.operation.name", "chat"),
                        ("gen_ai.provider.name", "openai"),
                        ("gen_ai.request.model", "gemma-3-270m" if i == 1 else "gpt-4o-mini"),
                        ("gen_ai.usage.input_tokens", 42),
                        ("gen_ai.usage.output_tokens", 17),
                        ("server.address", "127.0.0.1" if i == 1 else "api.openai.com"),
                        ("server.port", 8081 if i == 1 else 443),
                        ("gen_ai.input.messages", '[{"role": "user", "content": "' + "words " * 40 + '"}]'),
                        ("gen_ai.output.messages", '[{"role": "assistant", "content": "ok"}]'),
                    ):
                        attr(span, key, value)
                    if i == 1:
                        attr(span, "error.type", "APIConnectionError")
                        span.status.code = 2
                else:
                    attr(span, "http.route", "/profile")
                    attr(
                        span,
                        "gen_ai.conversation.id" if i == 0 else "http.response.status_code",
                        "s-1" if i == 0 else 200,
                    )
        out.append(request.SerializeToString())
    return out


SENDER = r"""
import http.client, pickle, sys, threading, time
bodies, port, connections = pickle.load(sys.stdin.buffer)
statuses = {}
def run(part):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    for body in part:
        while True:
            conn.request("POST", "/v1/traces", body=body, headers={"Content-Type": "application/x-protobuf"})
            r = conn.getresponse(); r.read()
            statuses[r.status] = statuses.get(r.status, 0) + 1
            if r.status == 200:
                break
            time.sleep(float(r.getheader("Retry-After") or 1) / 10)
threads = [threading.Thread(target=run, args=(bodies[i::connections],)) for i in range(connections)]
[t.start() for t in threads]; [t.join() for t in threads]
print(statuses)
"""


def count_messages(settings: Settings, topic: str, expect: int, timeout_s: float) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": settings.kafka_bootstrap(), "group.id": "bench", "log_level": 0})
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    seen, deadline = 0, time.monotonic() + timeout_s
    while seen < expect and time.monotonic() < deadline:
        seen += sum(1 for m in consumer.consume(10_000, timeout=0.2) if m.error() is None)
    consumer.close()
    return seen


def main() -> None:
    import pickle

    parser = argparse.ArgumentParser(description="spans/s through `routerscope collect` into Kafka")
    parser.add_argument("--spans", type=int, default=200_000, help="spans to send (rounded up to whole requests)")
    parser.add_argument("--batch", type=int, default=512, help="spans per request (the SDK exporter's default)")
    parser.add_argument("--connections", type=int, default=2, help="keep-alive connections sending at once")
    args = parser.parse_args()
    bodies = requests(args.spans, args.batch)
    spans = len(bodies) * (args.batch // SPANS_PER_TRACE) * SPANS_PER_TRACE
    traces = spans // SPANS_PER_TRACE
    with tempfile.TemporaryDirectory(prefix="rs-bench-otlp-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ROUTERSCOPE_")}
        env["ROUTERSCOPE_HOME"] = tmp
        settings = Settings.from_env(env)
        broker.start(settings, port=free_port(), keep=False)
        port = free_port()
        collect = subprocess.Popen(
            [str(Path(sys.executable).parent / "routerscope"), "collect", "--port", str(port)],
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            collect.stdout.readline()
            log(f"sending {spans} spans in {len(bodies)} requests over {args.connections} connections")
            started = time.monotonic()
            sender = subprocess.run(
                [sys.executable, "-c", SENDER],
                input=pickle.dumps((bodies, port, args.connections)),
                capture_output=True,
                check=True,
            )
            sent = time.monotonic() - started
            seen = count_messages(settings, settings.otlp_topic, traces, timeout_s=120)
            elapsed = time.monotonic() - started
        finally:
            collect.terminate()
            _, err = collect.communicate(timeout=60)
            broker.stop(settings)
    print(
        json.dumps(
            {
                "spans": spans,
                "traces": traces,
                "requests": len(bodies),
                "spans_per_request": args.batch,
                "connections": args.connections,
                "statuses": sender.stdout.decode().strip(),
                "traces_in_kafka": seen,
                "seconds_to_receive": round(sent, 3),
                "seconds_to_kafka": round(elapsed, 3),
                "spans_per_s": round(spans / elapsed) if seen == traces else None,
                "collect_exit": err.strip().splitlines()[-1] if err.strip() else "",
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
