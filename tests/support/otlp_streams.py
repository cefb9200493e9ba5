"""Streams cut mid-way, through the real instrumentations from PyPI, run as its own process (instrumentations
patch the OpenAI client process-wide): a local OpenAI-compatible server in this process answers the "device"
port with a stream whose connection drops after two chunks and the "cloud" port with a whole stream; the app
asks the device, and on failure or a cut answer the cloud. The spans go through what `collect` and `load` do
to them (stripped to the kept attributes, then mapped), and the decisions are printed as JSON lines.

    python -m tests.support.otlp_streams SOURCE
"""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.support.otlp_app import instrument

MODEL = "gemma-3-270m-q4"  # what the local server says served each answer (its chunks' model)
FIRST_S = 0.4  # the paced server's delay before its first chunk, and again before the rest


def chunk(content: str | None, finish: str | None = None) -> bytes:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": MODEL,
        "choices": [{"index": 0, "delta": {"content": content} if content else {}, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):  # noqa: N802 - the base class's name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        cut = self.server.cut  # type: ignore[attr-defined]
        time.sleep(self.server.delay_s)  # type: ignore[attr-defined]
        whole = chunk("Hel") + chunk("lo") + chunk(None, "stop") + b"data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(whole)))
        self.end_headers()
        first_s = self.server.first_s  # type: ignore[attr-defined]
        if first_s:  # the first chunk after first_s, the rest as long again after it: a planted TTFT
            time.sleep(first_s)
            self.wfile.write(chunk("Hel"))
            self.wfile.flush()
            time.sleep(first_s)
            self.wfile.write(whole[len(chunk("Hel")) :])
            return
        if cut:  # two chunks, then the connection drops: fewer bytes than announced
            self.wfile.write(chunk("Hel") + chunk("lo"))
            self.wfile.flush()
            time.sleep(0.05)
            self.connection.shutdown(2)
            self.close_connection = True
            return
        self.wfile.write(whole)

    def log_message(self, *args):
        pass


def server(cut: bool, delay_s: float = 0.0, first_s: float = 0.0) -> ThreadingHTTPServer:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.cut = cut  # type: ignore[attr-defined]
    srv.delay_s = delay_s  # type: ignore[attr-defined]
    srv.first_s = first_s  # type: ignore[attr-defined]
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def main(source: str) -> None:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from routerscope.instrumentation.otlp import proto
    from routerscope.instrumentation.otlp.mapping import Mapping, map_trace

    device, cloud = server(cut=True), server(cut=False)
    slow = server(cut=False, delay_s=3.0)  # a device that answers after the app's 0.5 s timeout
    paced = server(cut=False, first_s=FIRST_S)  # a cloud whose first chunk comes after FIRST_S
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": source}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrument(source, provider)
    tracer = provider.get_tracer("app")

    import openai

    def ask(port: int, timeout_s: float = 10) -> str:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0, timeout=timeout_s)
        stream = client.chat.completions.create(
            model="cloud-small" if port == cloud.server_port else "gemma-3-270m",
            messages=[{"role": "user", "content": "Say hello. My card is 4111 1111 1111 1111."}],
            stream=True,
        )
        return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    # 1. the device's stream drops after two chunks; the app asks the cloud
    with tracer.start_as_current_span("handle") as span:
        span.set_attribute("routerscope.session_id", f"{source}-cut")
        try:
            answer = ask(device.server_port)
            if answer != "Hello":
                raise ValueError("partial answer")
        except Exception:  # noqa: BLE001 - any failure of the device path goes to the cloud, as apps do
            ask(cloud.server_port)
    # 2. the device's stream drops, and the app serves what came (a partial answer)
    with tracer.start_as_current_span("handle") as span:
        span.set_attribute("routerscope.session_id", f"{source}-partial")
        try:
            ask(device.server_port)
        except Exception:  # noqa: BLE001
            pass
    # 3. the device does not answer within the app's timeout; the app asks the cloud
    with tracer.start_as_current_span("handle") as span:
        span.set_attribute("routerscope.session_id", f"{source}-slow")
        try:
            ask(slow.server_port, timeout_s=0.5)
        except Exception:  # noqa: BLE001
            ask(cloud.server_port)
    # 4. the cloud answers alone, its first chunk FIRST_S after the request, the rest FIRST_S later
    with tracer.start_as_current_span("handle") as span:
        span.set_attribute("routerscope.session_id", f"{source}-paced")
        ask(paced.server_port)
    provider.force_flush()
    devices = [f"127.0.0.1:{device.server_port}", f"127.0.0.1:{slow.server_port}"]
    mapping = Mapping.from_dict({"device": {"server_addresses": devices}})
    request = encode_spans(exporter.get_finished_spans())
    traces = proto.split(request)[0]  # what `collect` lets leave: the allow-listed values only
    for part in traces.values():
        one = getattr(part, "request", part)
        if "--attrs" in sys.argv:
            for v in proto.views(one):
                print("#", v.name, v.error, v.attrs)
        event, reason = map_trace(proto.views(one), mapping)
        if event is None:
            print(json.dumps({"quarantined": reason}))
            continue
        print(
            json.dumps(
                {
                    "session_id": event.session_id,
                    "fallback_type": event.fallback_type,
                    "reason": event.reason,
                    "attempts": [[a.level, a.outcome] for a in event.attempts],
                    "device_model": event.device_model,
                    "policy_version": event.policy_version,
                    "ttft_ms": event.ttft_ms,
                    "latency_ms": event.attempts[-1].latency_ms,
                }
            )
        )


if __name__ == "__main__":
    main(sys.argv[1])
