"""An app instrumented as teams instrument theirs, run as its own process (instrumentations patch the
OpenAI client process-wide and do not all undo it): one of the real instrumentations from PyPI wraps an
OpenAI client (or LiteLLM) calling the local OpenAI-compatible stand-in cloud, and the real OTLP/HTTP
exporter sends the spans to `routerscope collect`. Two requests: one the cloud serves, and one whose
device call fails (a local runtime that is not running) before the cloud serves it.

    python -m tests.support.otlp_app SOURCE COLLECT_PORT CLOUD_URL DEAD_DEVICE_PORT
"""

from __future__ import annotations

import contextlib
import os
import sys

SOURCES = ("openai-v2", "openllmetry", "openinference-openai", "openinference-litellm")


def instrument(source: str, provider) -> None:
    if source == "openai-v2":
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    elif source == "openllmetry":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor
    elif source == "openinference-openai":
        from openinference.instrumentation.openai import OpenAIInstrumentor
    else:
        from openinference.instrumentation.litellm import LiteLLMInstrumentor as OpenAIInstrumentor
    OpenAIInstrumentor().instrument(tracer_provider=provider)


def main(source: str, collect_port: int, cloud_url: str, dead_port: int) -> None:
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # LiteLLM would fetch its price table otherwise
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": source}))
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=f"http://127.0.0.1:{collect_port}/v1/traces"))
    )
    instrument(source, provider)
    tracer = provider.get_tracer("app")
    device_url = f"http://127.0.0.1:{dead_port}/v1"

    def ask(base_url: str, session: str) -> str:
        messages = [{"role": "user", "content": "Reply with one word: hello. My card is 4111 1111 1111 1111."}]
        if source == "openinference-litellm":
            import litellm

            response = litellm.completion(
                model="openai/cloud-small",
                api_base=base_url,
                api_key="none",
                messages=messages,
                max_tokens=8,
                num_retries=0,
            )
        else:
            import openai

            client = openai.OpenAI(base_url=base_url, api_key="none", max_retries=0, timeout=60)
            response = client.chat.completions.create(model="cloud-small", messages=messages, max_tokens=8)
        return response.choices[0].message.content

    with tracer.start_as_current_span("handle") as span:  # served by the cloud
        span.set_attribute("routerscope.session_id", f"{source}-a")
        ask(cloud_url, f"{source}-a")
    with tracer.start_as_current_span("handle") as span:  # the device fails, the cloud serves
        span.set_attribute("routerscope.session_id", f"{source}-b")
        span.set_attribute("routerscope.task_type", "short_reply")
        try:
            # OpenInference names neither the server nor the model of a failed call: the app marks its device
            # path; the others name the server, which the mapping file puts on the device
            marked = source.startswith("openinference")
            with (
                tracer.start_as_current_span("device path", attributes={"routerscope.side": "device"})
                if marked
                else contextlib.nullcontext()
            ):
                ask(device_url, f"{source}-b")
        except Exception:
            pass  # the app falls back
        ask(cloud_url, f"{source}-b")
    provider.force_flush()
    provider.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
