"""Serve-time answer checks: only an answer that is what the policy declares reaches a user (docs/router.md,
"Only a declared answer is served"; docs/sources.md#seed-000, its decision criteria: a fixed label set, a schema
check, whitelisted tools).

A capability's `answer:` declaration says what a correct answer *is*; the router checks every answer it would
serve against it, the device's and the cloud's alike, before it reaches the user:

* `labels: [...]` — one of the declared labels, normalised the one way the replay's judge normalises it
  (`label_key`: case, surrounding quotes and backticks, trailing `.!?`, `-` and spaces for `_`);
* `fields: {name: type}` — one JSON object (a Markdown fence aside) holding every declared field, of its JSON
  type, not null nor blank, and no other key;
* `tools: {tool: {arg: type}}` — exactly one call, `{"tool": name, ...args}` (or the args under
  `args`/`arguments`), of a declared tool that is on the capability's whitelist (`tools`) and among the tools
  the request declared, with exactly the declared arguments, each of its type;
* `language: <name>` — code that parses in that language (`LANGUAGES`: the languages with a parser here) and
  is more than a bare name or constant, and that was not cut at the output cap (a cut snippet is never served
  as complete);
* nothing declared — the capability's output validator alone (`validate`: JSON, a label, a pattern), the form
  check of before; the review names such a task type `unchecked`.

`check(capability, text, ...)` returns None when the answer may be served, else a `Failed` with the check's
name (`labels`, `fields`, `tools`, `language`, `format`) and a short detail. The checks are pure and cost
microseconds (`bench/router.py` measures the decision with them). The replay's judge
(`routerscope.router.judge`) shares the form helpers here and adds meaning on top (grounding in the request,
agreement with the cloud).
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass

from routerscope.router.backends import validate

JSON_TYPES = {
    "string": (str,),
    "number": (int, float),
    "integer": (int,),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}
LANGUAGES = ("python",)  # languages with a parser here (the standard library's `ast`)
CHECKS = ("labels", "fields", "tools", "language")  # what an `answer:` declaration may hold, in the order judged
MAX_CHECKED_CHARS = 100_000  # a declared answer longer than this is no label, slot or snippet (and parsing it
# on the request's thread would cost the budget): it fails its check unread
_FENCE = re.compile(r"^\s*```[A-Za-z0-9_+-]*\s*\n?(.*?)\n?```\s*$", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Failed:
    """A failed serve-time check: its name (`labels`, `fields`, `tools`, `language`, `format`) and why."""

    check: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.check}:{self.detail}" if self.detail else self.check


def unfence(text: str) -> str:
    """The answer without a surrounding Markdown code fence (```json … ```), which small models add."""
    m = _FENCE.match(text)
    return m.group(1) if m else text.strip()


def label_key(text: str) -> str:
    """A label as compared: surrounding quotes, backticks and `*` gone, no trailing `.!?`, lower case, runs of
    spaces and `-` as one `_` (the serve-time check and the replay's judge normalise the one same way)."""
    text = text.strip().strip("`'\"*").strip().rstrip(".!?").strip().strip("`'\"*")
    return re.sub(r"[\s\-]+", "_", text.lower())


def typed(value, kind: str) -> bool:
    """`value` is of the declared JSON type `kind` (JSON true is no number)."""
    if kind in ("number", "integer") and isinstance(value, bool):
        return False
    return isinstance(value, JSON_TYPES[kind])


def parse_json(answer: str):
    """(value, '') of an answer holding one JSON value (a Markdown fence aside), else (None, 'not_json'); JSON
    nested past the interpreter's recursion limit is no answer either, never a crash."""
    try:
        return json.loads(unfence(answer)), ""
    except (ValueError, RecursionError):
        return None, "not_json"


def code_problem(answer: str, language: str) -> str | None:
    """Why `answer` is not code in `language`: `no_parser:<language>` (no parser here), `does_not_parse`,
    `not_code` (empty, or a bare name or constant, which parse too); None when it is code."""
    if language.lower() not in LANGUAGES:
        return f"no_parser:{language[:20]}"
    code = unfence(answer)
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "does_not_parse"
    body = tree.body
    if not body or (
        len(body) == 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Name | ast.Constant)
    ):
        return "not_code"  # '' parses, so does a lone word: neither is a snippet
    return None


_KEYS: dict[int, tuple[object, frozenset[str]]] = {}  # id(labels) -> (labels, their keys): one policy's few lists


def _label_keys(labels) -> frozenset[str]:
    """The declared labels' keys, computed once per declared list (a policy is immutable once loaded)."""
    cached = _KEYS.get(id(labels))
    if cached is not None and cached[0] is labels:
        return cached[1]
    keys = frozenset(label_key(v) for v in labels)
    if len(_KEYS) > 256:  # reloaded policies leave old lists behind: start over
        _KEYS.clear()
    _KEYS[id(labels)] = (labels, keys)
    return keys


def declared(capability) -> str | None:
    """The serve-time check a task type's declaration gives it (`labels`, `fields`, `tools`, `language`), None when
    it declares nothing (its output validator alone: "unchecked" in the review); a language without a parser
    here is unchecked too."""
    answer = capability.answer
    if not answer:
        return None
    for key in CHECKS:
        if answer.get(key):
            if key == "language" and str(answer[key]).lower() not in LANGUAGES:
                return None
            return key
    return None


def check_labels(text: str, labels) -> Failed | None:
    keys = _label_keys(labels)
    if text in keys or label_key(text) in keys:  # the common case first: the label as declared
        return None
    return Failed("labels", "not_a_declared_label")


def check_fields(text: str, fields: dict) -> Failed | None:
    value, problem = parse_json(text)
    if problem:
        return Failed("fields", problem)
    if not isinstance(value, dict):
        return Failed("fields", "not_an_object")
    for name, kind in fields.items():
        v = value.get(name)
        if v is None or (isinstance(v, str) and not v.strip()):
            return Failed("fields", f"missing:{name[:40]}")
        if kind in JSON_TYPES and not typed(v, kind):
            return Failed("fields", f"type:{name[:40]}")
    extra = [k for k in value if k not in fields]
    if extra:
        return Failed("fields", f"undeclared:{str(extra[0])[:40]}")
    return None


def check_tools(text: str, tools: dict, whitelist, requested) -> Failed | None:
    """One call of a declared tool, on the capability's whitelist (None: any declared) and among the request's
    declared tools (None: any), with exactly its declared arguments, each of its type."""
    value, problem = parse_json(text)
    if problem:
        return Failed("tools", problem)
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if not isinstance(value, dict):
        return Failed("tools", "not_one_call")
    name = value.get("tool", value.get("name"))
    if (
        not isinstance(name, str)
        or name not in tools
        or (whitelist is not None and name not in whitelist)
        or (requested is not None and name not in requested)
    ):
        return Failed("tools", f"tool_not_allowed:{str(name)[:40]}")
    nested = value.get("args", value.get("arguments"))
    args = nested if isinstance(nested, dict) else {k: v for k, v in value.items() if k not in ("tool", "name")}
    schema = tools[name] or {}
    if not isinstance(schema, dict):
        return Failed("tools", f"undeclared_schema:{name[:40]}")
    for arg, kind in schema.items():
        if arg not in args or (kind in JSON_TYPES and not typed(args[arg], kind)):
            return Failed("tools", f"arg:{str(arg)[:40]}")
    extra = [a for a in args if a not in schema]
    if extra:
        return Failed("tools", f"undeclared_arg:{str(extra[0])[:40]}")
    return None


def check(capability, text: str, requested_tools=None, cut: bool = False) -> Failed | None:
    """The serve-time verdict on `text` for a task type of `capability`: None when it may be served, else the
    failed check. `requested_tools`: the tools the request declared (a tool call must use one of them);
    `cut`: the answer stopped at its output cap (code is then never served: it is whole or nothing). A policy
    load refuses a malformed declaration; one built in code that is malformed fails every answer, never raises."""
    answer = capability.answer
    if not answer:  # the common case of free text: the output validator alone
        if capability.validator is not None and not validate(capability.validator, text, capability.pattern):
            return Failed("format", capability.validator)
        return None
    try:
        return _declared_check(capability, answer, text, requested_tools, cut)
    except Exception:  # noqa: BLE001 (a declaration the load did not see: no answer passes it, no request fails)
        return Failed(declared(capability) or "format", "bad_declaration")


def _declared_check(capability, answer: dict, text: str, requested_tools, cut: bool) -> Failed | None:
    if len(text) > MAX_CHECKED_CHARS and declared(capability) is not None:
        return Failed(declared(capability) or "format", "too_long")
    labels = answer.get("labels")
    if labels:
        return check_labels(text, labels)
    fields = answer.get("fields")
    if fields:
        return check_fields(text, fields)
    tools = answer.get("tools")
    if tools:
        return check_tools(text, tools, capability.tools, requested_tools)
    language = answer.get("language")
    if language and str(language).lower() in LANGUAGES:
        if cut:
            return Failed("language", "cut_at_output_cap")
        problem = code_problem(text, str(language))
        return None if problem is None else Failed("language", problem)
    if capability.validator is not None and not validate(capability.validator, text, capability.pattern):
        return Failed("format", capability.validator)
    if language and cut:  # a language without a parser: still never served cut
        return Failed("language", "cut_at_output_cap")
    return None
