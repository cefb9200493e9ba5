"""The span attribute names the OTLP mapping reads, defined once, per source (docs/otlp.md has a table
per source). GenAI conventions are still moving: the v1.37+ names and the older ones that
instrumentations still emit unless told otherwise are both read, the newer first."""

from __future__ import annotations

# -- OpenTelemetry GenAI semantic conventions, v1.37+ ----------------------------------------------
PROVIDER_NAME = "gen_ai.provider.name"
OPERATION_NAME = "gen_ai.operation.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
FINISH_REASONS = "gen_ai.response.finish_reasons"
CONVERSATION_ID = "gen_ai.conversation.id"
TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"  # seconds
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
ERROR_TYPE = "error.type"

# -- the older GenAI names (before v1.37), still the default of several instrumentations -------------
SYSTEM = "gen_ai.system"
USAGE_PROMPT_TOKENS = "gen_ai.usage.prompt_tokens"
USAGE_COMPLETION_TOKENS = "gen_ai.usage.completion_tokens"

# -- OpenLLMetry (Traceloop) --------------------------------------------------------------------------
LLM_REQUEST_TYPE = "llm.request.type"  # chat | completion | embedding
GEN_AI_IS_STREAMING = "gen_ai.is_streaming"  # OpenLLMetry 0.4x+: the call streamed its answer
LLM_IS_STREAMING = "llm.is_streaming"  # the same, older OpenLLMetry
LLM_USAGE_PROMPT_TOKENS = "llm.usage.prompt_tokens"
LLM_USAGE_COMPLETION_TOKENS = "llm.usage.completion_tokens"
OPENAI_API_BASE = "gen_ai.openai.api_base"  # a URL: its host and port are the server address
TRACELOOP_SESSION_ID = "traceloop.association.properties.session_id"

# -- OpenInference (Arize Phoenix) ----------------------------------------------------------------
OI_SPAN_KIND = "openinference.span.kind"  # LLM for a model call
OI_MODEL_NAME = "llm.model_name"
OI_PROVIDER = "llm.provider"
OI_SYSTEM = "llm.system"
OI_TOKENS_PROMPT = "llm.token_count.prompt"
OI_TOKENS_COMPLETION = "llm.token_count.completion"
OI_SESSION_ID = "session.id"
# The request's parameters as JSON; only its `model` passes the allow-list (`{"model": "<name>"}`): the one
# place OpenInference's OpenAI spans name the model of a call that failed before any answer came
OI_INVOCATION_PARAMETERS = "llm.invocation_parameters"
# OpenInference's OpenAI instrumentation names a call's span after the response type, and takes the model name
# from the response alone (its LiteLLM instrumentation takes it from the request)
OI_OPENAI_SPAN_NAMES = frozenset({"ChatCompletion", "Completion", "Response"})

# -- set by the app itself, when it knows (routing has no convention yet) --------------------------------
RS_TASK_TYPE = "routerscope.task_type"
RS_SESSION_ID = "routerscope.session_id"
RS_REQUEST_ID = "routerscope.request_id"
RS_DEGRADE_LEVEL = "routerscope.degrade_level"  # on a model-call span: its level (0-4)
RS_SIDE = "routerscope.side"  # on a model-call span: device | cloud
RS_CONFIDENCE = "routerscope.confidence"
RS_THRESHOLD = "routerscope.threshold"
RS_FALLBACK_TYPE = "routerscope.fallback_type"
RS_REASON = "routerscope.reason"
RS_POLICY_VERSION = "routerscope.policy_version"
RS_DEADLINE_MS = "routerscope.deadline_ms"
RS_HAS_PII = "routerscope.has_pii"
RS_PREFIX = "routerscope."

# -- span events (kept by name only: docs/otlp.md, "Span events") -------------------------------------
EV_EXCEPTION = "exception"  # the OpenTelemetry convention: a span's exception, its type in EXCEPTION_TYPE
EXCEPTION_TYPE = "exception.type"  # the exception's class (`openai.APITimeoutError`); its message never
EV_OI_FIRST_TOKEN = "First Token Stream Event"  # OpenInference: when a stream's first chunk came
EV_OLLM_CHUNK = "gen_ai.content.completion.chunk"  # OpenLLMetry: one per streamed chunk; the first is kept
# Events whose (first) time is the call's first token or chunk
FIRST_TOKEN_EVENTS = (EV_OI_FIRST_TOKEN, EV_OLLM_CHUNK)

# -- the resource ------------------------------------------------------------------------------------
SERVICE_NAME = "service.name"
SERVICE_VERSION = "service.version"

# Read from a span, in order of preference (the first present wins).
PROVIDER = (PROVIDER_NAME, SYSTEM, OI_PROVIDER, OI_SYSTEM)
MODEL = (RESPONSE_MODEL, REQUEST_MODEL, OI_MODEL_NAME)
INPUT_TOKENS = (USAGE_INPUT_TOKENS, USAGE_PROMPT_TOKENS, LLM_USAGE_PROMPT_TOKENS, OI_TOKENS_PROMPT)
OUTPUT_TOKENS = (USAGE_OUTPUT_TOKENS, USAGE_COMPLETION_TOKENS, LLM_USAGE_COMPLETION_TOKENS, OI_TOKENS_COMPLETION)
SESSION = (RS_SESSION_ID, CONVERSATION_ID, OI_SESSION_ID, TRACELOOP_SESSION_ID)
OPERATION = (OPERATION_NAME, LLM_REQUEST_TYPE)
STREAMING = (GEN_AI_IS_STREAMING, LLM_IS_STREAMING)
# The app's own routing attributes: when a trace has none, the mapping may infer a fallback from its shape
ROUTING = (RS_SIDE, RS_FALLBACK_TYPE, RS_REASON, RS_DEGRADE_LEVEL)
# Words of an error type (or exception type) that make a failed call a timeout, lower-cased
TIMEOUT_WORDS = ("timeout", "timed out", "timedout", "deadline")
# Words of an error type that say the connection dropped (an answer cut mid-way), not that the API refused
DROPPED_WORDS = ("protocol", "connection", "incomplete", "chunked", "peer", "reset", "closed", "broken", "stream")
# Identifiers, scrubbed (routerscope.instrumentation.pii) as soon as a span is taken in.
IDENTIFIERS = frozenset((*SESSION, RS_REQUEST_ID))

# A span is a model call when it carries one of these (or OpenInference's span kind LLM).
MODEL_CALL_MARKERS = (PROVIDER_NAME, SYSTEM, OPERATION_NAME, REQUEST_MODEL, LLM_REQUEST_TYPE)
OI_KIND_LLM = "LLM"
# Operations that are not a model answering a request (an embedding is not a routed request).
NOT_ANSWERS = frozenset({"embeddings", "embedding", "execute_tool", "create_agent"})

# Every span attribute kept on the way in: what the mapping reads, nothing else (no prompt or completion
# content, whatever name an instrumentation gives it); `routerscope.*` is kept as well.
KEPT = frozenset(
    {
        PROVIDER_NAME,
        OPERATION_NAME,
        REQUEST_MODEL,
        RESPONSE_MODEL,
        USAGE_INPUT_TOKENS,
        USAGE_OUTPUT_TOKENS,
        FINISH_REASONS,
        CONVERSATION_ID,
        TIME_TO_FIRST_CHUNK,
        SERVER_ADDRESS,
        SERVER_PORT,
        ERROR_TYPE,
        SYSTEM,
        USAGE_PROMPT_TOKENS,
        USAGE_COMPLETION_TOKENS,
        LLM_REQUEST_TYPE,
        GEN_AI_IS_STREAMING,
        LLM_IS_STREAMING,
        LLM_USAGE_PROMPT_TOKENS,
        LLM_USAGE_COMPLETION_TOKENS,
        OPENAI_API_BASE,
        TRACELOOP_SESSION_ID,
        OI_SPAN_KIND,
        OI_MODEL_NAME,
        OI_PROVIDER,
        OI_SYSTEM,
        OI_TOKENS_PROMPT,
        OI_TOKENS_COMPLETION,
        OI_SESSION_ID,
    }
)
KEPT_RESOURCE = frozenset({SERVICE_NAME, SERVICE_VERSION})
