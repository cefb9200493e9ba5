"""What of a span may leave `routerscope collect` (docs/otlp.md, "What leaves the receiver").

Only values the mapping reads, each in the shape the mapping expects, pass; everything else is dropped and
counted. An attribute passes when its key is on the allow-list below and its value fits its kind:

* `enum`: one word (letters, digits, `_ . : / @ + -`, at most 64 characters) that the scrubber leaves as it
  is: providers, operations, span kinds, sides, fallback types and reasons, each of `finish_reasons`;
* `error`: `error.type`, an `enum`, or an exception's class as openai-v2 writes it (`<class 'a.B'>`: `a.B`);
* `name`: one word of at most 128 characters that the scrubber for names leaves as it is (dates in a model
  name are not phone numbers): models, the policy version, the service's name and version;
* `number` (an int or a double), `bool`;
* `host`: a host name or an IP address (`server.address`), nothing else;
* `url`: reduced to its scheme, host and port (`gen_ai.openai.api_base`; the path and query are dropped);
* `id`: an identifier (sessions, conversations, requests): scrubbed (a personal one is hashed), and one
  that is not a single word of at most 128 characters is replaced by its keyed hash, so it still groups;
* `params`: a JSON object of request parameters (`llm.invocation_parameters`), reduced to its `model` (a
  `name`) as `{"model": "<name>"}`; every other parameter (tools, schemas, user ids) is dropped;
* `task`: a task type (`[a-z][a-z0-9_]*`, at most 64 characters), scrubbed as our events' task types are.

A span's name is kept when it is one word, `<operation> <model>` (the GenAI convention), an HTTP method and
a route, or when it matches a `span_name` of the mapping file's task rules; otherwise it is emptied.
Span events pass by name only (`EVENTS`): an `exception` with its `exception.type` alone (a `class`: a
dotted class name; never `exception.message` or `exception.stacktrace`, which can quote the prompt), and the
first of each span's first-token events (OpenInference's `First Token Stream Event`, OpenLLMetry's
`gen_ai.content.completion.chunk`) with no attribute at all; each keeps its name and time. Every other event,
and every other attribute of a kept one, is dropped and counted.

A string never reaches the topic because it looks harmless: it reaches it because it has the one shape its
field can have. Prompt text has spaces; a card number or an e-mail is caught by the scrubber.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Callable
from urllib.parse import urlsplit

from routerscope.instrumentation import pii
from routerscope.instrumentation.otlp import semconv as S

_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/@+\-]*")
_HOST = re.compile(r"[A-Za-z0-9_.:\-\[\]%]{1,255}")
_TASK = re.compile(r"[a-z][a-z0-9_]{0,63}")
_NUMERIC = re.compile(r"-?\d{1,15}(?:\.\d{1,15})?")
_HTTP = re.compile(r"(?:GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS|CONNECT|TRACE) /[A-Za-z0-9_./{}:\-]{0,120}")
# Operations of the GenAI conventions (and older names): the first word of a model call's span name.
OPERATIONS = frozenset(
    {
        "chat",
        "text_completion",
        "generate_content",
        "embeddings",
        "execute_tool",
        "create_agent",
        "invoke_agent",
        "completion",
        "embedding",
        "rerank",
    }
)
MAX_ENUM, MAX_NAME, MAX_ID, MAX_SPAN_NAME = 64, 128, 128, 128
# Kept resource attributes, and their kinds.
RESOURCE = {S.SERVICE_NAME: "name", S.SERVICE_VERSION: "name"}
# Kept span attributes, and their kinds: what the mapping reads (semconv), nothing else.
SPAN = {
    S.PROVIDER_NAME: "enum",
    S.OPERATION_NAME: "enum",
    S.SYSTEM: "enum",
    S.LLM_REQUEST_TYPE: "enum",
    S.OI_SPAN_KIND: "enum",
    S.OI_PROVIDER: "enum",
    S.OI_SYSTEM: "enum",
    S.ERROR_TYPE: "error",
    S.FINISH_REASONS: "enum",
    S.RS_SIDE: "enum",
    S.RS_FALLBACK_TYPE: "enum",
    S.RS_REASON: "enum",
    S.REQUEST_MODEL: "name",
    S.RESPONSE_MODEL: "name",
    S.OI_MODEL_NAME: "name",
    S.OI_INVOCATION_PARAMETERS: "params",
    S.RS_POLICY_VERSION: "name",
    S.USAGE_INPUT_TOKENS: "number",
    S.USAGE_OUTPUT_TOKENS: "number",
    S.USAGE_PROMPT_TOKENS: "number",
    S.USAGE_COMPLETION_TOKENS: "number",
    S.LLM_USAGE_PROMPT_TOKENS: "number",
    S.LLM_USAGE_COMPLETION_TOKENS: "number",
    S.OI_TOKENS_PROMPT: "number",
    S.OI_TOKENS_COMPLETION: "number",
    S.TIME_TO_FIRST_CHUNK: "number",
    S.SERVER_PORT: "number",
    S.RS_DEGRADE_LEVEL: "number",
    S.RS_CONFIDENCE: "number",
    S.RS_THRESHOLD: "number",
    S.RS_DEADLINE_MS: "number",
    S.RS_HAS_PII: "bool",
    S.GEN_AI_IS_STREAMING: "bool",  # a streamed call: without a finish reason, a stream cut mid-way
    S.LLM_IS_STREAMING: "bool",
    S.SERVER_ADDRESS: "host",
    S.OPENAI_API_BASE: "url",
    S.CONVERSATION_ID: "id",
    S.TRACELOOP_SESSION_ID: "id",
    S.OI_SESSION_ID: "id",
    S.RS_SESSION_ID: "id",
    S.RS_REQUEST_ID: "id",
    S.RS_TASK_TYPE: "task",
}
# Kept span events, by name, and the attributes (with their kinds) each may keep.
EVENTS: dict[str, dict[str, str]] = {
    S.EV_EXCEPTION: {S.EXCEPTION_TYPE: "class"},
    **{name: {} for name in S.FIRST_TOKEN_EVENTS},
}
FIRST_ONLY = frozenset(S.FIRST_TOKEN_EVENTS)  # of these, a span keeps its earliest one
MAX_EXCEPTIONS = 8  # exception events kept on one span (a retry loop may record many)
_CLASS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*(?:\.[A-Za-z_][A-Za-z0-9_$]*){0,15}")


def _enum(value: str) -> str | None:
    if len(value) <= MAX_ENUM and _WORD.fullmatch(value) and pii.scrub(value) == value:
        return value
    return None


_CLASS = re.compile(r"<class '([A-Za-z_][A-Za-z0-9_.]*)'>")


def _error(value: str) -> str | None:
    """An error type: an `enum`, or an exception's class as openai-v2 2.4b0 writes it (`<class
    'openai.APITimeoutError'>`), reduced to its dotted name."""
    found = _CLASS.fullmatch(value)
    return _enum(found.group(1) if found else value)


def _class(value: str) -> str | None:
    """An exception's type: a dotted class name (`openai.APITimeoutError`, `java.net.SocketTimeoutException`),
    also when written as Python prints a class (`<class 'a.B'>`); anything else (a message, a Go `*errors.x`
    pointer type, text with spaces) is dropped."""
    found = _CLASS.fullmatch(value)
    value = found.group(1) if found else value
    if len(value) <= MAX_NAME and _CLASS_NAME.fullmatch(value) and pii.scrub(value) == value:
        return value
    return None


def _name(value: str) -> str | None:
    if len(value) <= MAX_NAME and _WORD.fullmatch(value) and pii.scrub_name(value) == value:
        return value
    return None


def _params(value: str) -> str | None:
    try:
        doc = json.loads(value)
    except (ValueError, RecursionError):
        return None
    model = doc.get("model") if isinstance(doc, dict) else None
    kept = _name(model) if isinstance(model, str) else None
    return json.dumps({"model": kept}) if kept else None


def _host(value: str) -> str | None:
    return value if _HOST.fullmatch(value) else None


def _url(value: str) -> str | None:
    try:
        parts = urlsplit(value)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not host or parts.scheme not in ("http", "https") or not _HOST.fullmatch(host):
        return None
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}" + (f":{port}" if port else "")


def _id(value: str) -> str | None:
    if not value:
        return None
    scrubbed = pii.scrub(value)
    if len(scrubbed) <= MAX_ID and _WORD.fullmatch(scrubbed):
        return scrubbed
    return pii.hashed_id(value)


def _task(value: str) -> str | None:
    value = pii.scrub_task_type(value)
    return value if _TASK.fullmatch(value) else None


_STRING_RULES: dict[str, Callable[[str], str | None]] = {
    "enum": _enum,
    "error": _error,
    "class": _class,
    "name": _name,
    "host": _host,
    "url": _url,
    "id": _id,
    "task": _task,
    "params": _params,
}
# Verdicts on strings already seen (span names and values repeat: the same models, providers, sessions):
# bounded, emptied when full. It holds only what this process has been sent, in memory.
_CACHE: dict[tuple, str | None] = {}
_CACHE_MAX = 200_000


def string(kind: str, value: str) -> str | None:
    """The value as it may leave (perhaps hashed), or None: dropped."""
    key = (kind, value)
    try:
        return _CACHE[key]
    except KeyError:
        pass
    out = _STRING_RULES[kind](value) if len(value) <= 4096 else None
    if len(_CACHE) >= _CACHE_MAX:
        _CACHE.clear()
    _CACHE[key] = out
    return out


def number_string(value: str) -> int | float | None:
    """A number sent as a string (some instrumentations do), as the number; else None."""
    if not _NUMERIC.fullmatch(value):
        return None
    return float(value) if "." in value else int(value)


def span_name(name: str, globs: tuple[str, ...] = ()) -> str:
    """The name if it has one of the shapes a span name may leave in, else ""."""
    if not name:
        return name
    key = ("span", name, globs)
    try:
        out = _CACHE[key]
    except KeyError:
        out = _span_name(name, globs) if len(name) <= 1024 else ""
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.clear()
        _CACHE[key] = out
    return out or ""


def _span_name(name: str, globs: tuple[str, ...]) -> str:
    if any(fnmatch.fnmatchcase(name, g) for g in globs):
        return pii.scrub(name) if pii.scrub(name) == name else ""
    if len(name) > MAX_SPAN_NAME:
        return ""
    words = name.split(" ")
    if len(words) == 1:
        return name if _enum(name) or _name(name) else ""
    if len(words) == 2 and words[0] in OPERATIONS and _name(words[1]):
        return name
    if _HTTP.fullmatch(name) and pii.scrub(name) == name:
        return name
    return ""
