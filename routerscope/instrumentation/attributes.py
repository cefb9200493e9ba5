"""Span and metric attribute names, defined once.

GenAI names are the OpenTelemetry semantic conventions' (`gen_ai.operation.name`, `gen_ai.provider.name`,
`gen_ai.request.model`, `gen_ai.usage.*`, `gen_ai.conversation.id`, `error.type`), taken from the installed
`opentelemetry.semconv` package (a dependency of `opentelemetry-sdk`), never typed here: an upgrade that renames
one fails `tests/unit/test_attributes.py` instead of drifting silently. The GenAI names live in the package's
`_incubating` module, marked deprecated there since they moved to the separate GenAI conventions repository;
their values are unchanged since semconv 1.37. Routing has no convention yet: `router.*` is ours.
"""

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as _gen_ai
from opentelemetry.semconv.attributes import error_attributes as _error
from opentelemetry.semconv.schemas import Schemas as _Schemas

# the semantic conventions release the names above come from: the installed package's newest schema
SEMCONV_VERSION = list(_Schemas)[-1].value.rsplit("/", 1)[-1]

GEN_AI_OPERATION_NAME: str = _gen_ai.GEN_AI_OPERATION_NAME
GEN_AI_PROVIDER_NAME: str = _gen_ai.GEN_AI_PROVIDER_NAME
GEN_AI_REQUEST_MODEL: str = _gen_ai.GEN_AI_REQUEST_MODEL
GEN_AI_USAGE_INPUT_TOKENS: str = _gen_ai.GEN_AI_USAGE_INPUT_TOKENS
GEN_AI_USAGE_OUTPUT_TOKENS: str = _gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS
GEN_AI_CONVERSATION_ID: str = _gen_ai.GEN_AI_CONVERSATION_ID
ERROR_TYPE: str = _error.ERROR_TYPE

ROUTER_TASK_TYPE = "router.task_type"
ROUTER_FALLBACK_TYPE = "router.fallback_type"
ROUTER_REASON = "router.reason"
ROUTER_DEGRADE_LEVEL = "router.degrade_level"
ROUTER_CONFIDENCE = "router.confidence"
ROUTER_THRESHOLD = "router.threshold"
ROUTER_POLICY_VERSION = "router.policy_version"
ROUTER_CLOUD_CALLS = "router.cloud_calls"
ROUTER_ENTERED_DEVICE = "router.entered_device"
ROUTER_MODE = "router.mode"
ROUTER_ATTEMPT_LEVEL = "router.attempt.level"
ROUTER_ATTEMPT_OUTCOME = "router.attempt.outcome"

# Metric names
METRIC_DECISIONS = "router.decisions"
METRIC_LATENCY = "router.decision.duration"
METRIC_EVENTS = "routerscope.events"  # attribute `state`: emitted | delivered | spooled | dropped
# backend calls the router abandoned at their timeout (attempts with `abandoned`); attribute `boundary`: device | cloud
METRIC_ABANDONED = "routerscope.router.abandoned_calls"
