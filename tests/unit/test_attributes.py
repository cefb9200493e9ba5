"""The GenAI attribute names come from the installed `opentelemetry.semconv`, and are still the wire names the
warehouse, the OTLP ingest and the golden telemetry hold: an upgrade that renames one fails here, loudly."""

from __future__ import annotations

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes
from opentelemetry.semconv.attributes import error_attributes
from opentelemetry.semconv.schemas import Schemas

from routerscope.instrumentation import attributes

# what events already stored and `routerscope collect` expect on the wire (docs/instrumentation.md)
WIRE = {
    "GEN_AI_OPERATION_NAME": "gen_ai.operation.name",
    "GEN_AI_PROVIDER_NAME": "gen_ai.provider.name",
    "GEN_AI_REQUEST_MODEL": "gen_ai.request.model",
    "GEN_AI_USAGE_INPUT_TOKENS": "gen_ai.usage.input_tokens",
    "GEN_AI_USAGE_OUTPUT_TOKENS": "gen_ai.usage.output_tokens",
    "GEN_AI_CONVERSATION_ID": "gen_ai.conversation.id",
}


def test_gen_ai_names_are_the_semconv_constants_and_unchanged_on_the_wire():
    for name, wire in WIRE.items():
        assert getattr(attributes, name) == getattr(gen_ai_attributes, name) == wire, name
    assert attributes.ERROR_TYPE == error_attributes.ERROR_TYPE == "error.type"


def test_semconv_version_is_the_installed_packages_newest_schema():
    assert Schemas(f"https://opentelemetry.io/schemas/{attributes.SEMCONV_VERSION}") is list(Schemas)[-1]
    major, minor = (int(x) for x in attributes.SEMCONV_VERSION.split(".")[:2])
    assert (major, minor) >= (1, 37)  # the release whose GenAI names the project adopted


def test_routing_names_stay_ours():
    ours = [v for k, v in vars(attributes).items() if k.startswith("ROUTER_")]
    assert ours and all(v.startswith("router.") for v in ours)
