"""Span and metric attribute names, defined once.

GenAI names follow the OpenTelemetry GenAI semantic conventions as of semconv 1.37
(`gen_ai.operation.name`, `gen_ai.provider.name`, `gen_ai.request.model`, `gen_ai.usage.*`,
`gen_ai.conversation.id`); they are still moving, so code uses these constants, never literals.
Routing has no convention yet: `router.*` is ours.
"""

SEMCONV_VERSION = "1.37.0"

GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
ERROR_TYPE = "error.type"

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
