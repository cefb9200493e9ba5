"""The routing policy's data: capability matrix, calibrated thresholds, rollout stages, breakers, the stage tracker's
limits, the judge's expectations (docs/router.md#the-policy-file). Declared as `msgspec.Struct`s, decoded and
validated from a parsed policy document by `from_document` (`msgspec.convert` per section, then the checks across
fields); a ConfigError names the setting and what it must be.

Reading the file (YAML within bounds), hot reload and the shipped default stay in `routerscope.router.policy`; a
module that only reads a policy's data (the warehouse's review, the what-if) imports it from here.

Rollout stages (docs/sources.md#seed-004-7): each task type is in `shadow` (the device runs, the cloud answers),
`canary` with a percentage of *sessions* (sticky: a session is in the cohort when a hash of its id
falls under the percentage, never per request), `full`, or `cloud_only` (rolled back, or a task the
capability matrix does not support); the cloud stays the permanent fallback channel in every stage.
`shadow: [...]` is the short form of `rollout: {task: {stage: shadow}}`. Per task type the review
inputs of docs/sources.md#seed-003 and #seed-004 live in the capability matrix too: `error_cost` (0–1, missing 0.5),
`privacy` (strict | redactable | public), `iteration` (quarterly | monthly | weekly) and `streamable`
(the answer can be streamed or the task run asynchronously; default true); per device
tier `device_tiers.<tier>.memory_mb`; the stage tracker's limits in `rollout_limits`.

Each policy carries a `version`: the file's own `version` plus the first 8 hex digits of its SHA-256 (given by the
reader), so two edits under one version number are still told apart in the events. A policy derived in code
(`Policy.with_`, e.g. the simulator's pushed threshold) is stamped the same way from its content.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Annotated, Any

import msgspec

from routerscope.contract.events import ROLLOUT_STAGES
from routerscope.core.errors import ConfigError

VALIDATORS = ("label", "json", "regex")
STAGES = ROLLOUT_STAGES  # the contract's rollout stages, in order
PRIVACY = ("strict", "redactable", "public")
ITERATION = ("quarterly", "monthly", "weekly")
MAX_INT = 10**9  # the largest integer setting (tokens, counts) a policy may hold
MAX_PATTERN = 512  # characters of a validator's regular expression
MAX_WINDOW_S = 86_400.0  # breaker windows and cool-downs: a day at most

# an integer of a sane size (a 4,000-digit one is no setting); a finite number (.inf and .nan are no settings either)
Int = Annotated[int, msgspec.Meta(ge=-MAX_INT, le=MAX_INT)]
Number = Annotated[float, msgspec.Meta(ge=-1e300, le=1e300)]


def in_canary(session_id: str, percent: float) -> bool:
    """Whether a session is in a canary cohort of `percent` % of sessions: a stable hash of the session id
    (not Python's salted `hash`), so a session keeps its path on every request, every router instance."""
    bucket = int.from_bytes(hashlib.sha256(session_id.encode()).digest()[:8], "big") % 10_000
    return bucket < percent * 100


class Capability(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A task type's row of the capability matrix (docs/sources.md#seed-000) and its review inputs."""

    supported: bool
    max_input_tokens: Int = 0
    max_output_tokens: Int = 0
    threshold: Number = 0.7
    validator: str | None = None
    pattern: str | None = None  # for validator: regex
    error_cost: Number | None = None  # docs/sources.md#seed-004: 0-1, what a wrong answer costs downstream (None: 0.5)
    privacy: str = "public"  # docs/sources.md#seed-003: strict | redactable | public
    # docs/sources.md#seed-003: how often the task's model must change: quarterly | monthly | weekly
    iteration: str = "monthly"
    # docs/sources.md#seed-000 "仅限白名单内工具": the tools the device may call (None: any)
    tools: tuple[str, ...] | None = None
    single_file: bool = False  # docs/sources.md#seed-000 "单文件片段可,跨文件上下文不可": a context of one file at most
    streamable: bool = True  # docs/sources.md#seed-003: the answer can be streamed or the task run asynchronously
    # what a correct answer means, for the replay's judge (`routerscope.router.judge`; docs/router.md#the-judge):
    # labels, fields, tool argument schemas or a language; None: judged by agreement with the cloud's answer, or not
    # at all (its keys are checked by the judge)
    answer: dict | None = None

    @property
    def structured(self) -> bool:
        """The answer is checked whole (JSON, a label, a pattern, a tool call): it never commits on a sentence
        end and is never served cut (docs/router.md, "Nothing unvalidated reaches a user")."""
        return self.validator is not None or self.tools is not None

    @property
    def whole(self) -> bool:
        """The router serves the answer whole or not at all: a structured one, or one whose `answer:` declares a
        label set, fields, tools or a language (code cut mid-way is no snippet; docs/router.md, "Only a declared
        answer is served")."""
        if self.validator is not None or self.tools is not None:
            return True
        answer = self.answer
        return answer is not None and any(answer.get(k) for k in ("labels", "fields", "tools", "language"))

    def admits(
        self, input_tokens: int, output_tokens: int, tools: tuple[str, ...] | None = None, files: int | None = None
    ) -> bool:
        """The capability matrix's verdict (docs/sources.md#seed-000): supported, within the input and output
        limits; where the task type has a tool whitelist, the request declares exactly one tool and it is on
        the list (single-step calls only: no tools declared, or several, is not admitted), and where it has none,
        the request declares no tool; where it is `single_file`, the request declares how many files its context
        spans, and that is at most one, and no request declaring more than one file is admitted."""
        if not (self.supported and input_tokens <= self.max_input_tokens and output_tokens <= self.max_output_tokens):
            return False
        if self.tools is not None:
            if tools is None or isinstance(tools, str) or len(tuple(tools)) != 1:
                return False
            if not set(tools) <= set(self.tools):
                return False
        elif tools is not None and (isinstance(tools, str) or len(tuple(tools)) > 0):
            return False  # tools declared for a task type the matrix whitelists none for: the device calls none
        if self.single_file and (files is None or isinstance(files, bool) or not 0 <= files <= 1):
            return False
        if files is not None and (isinstance(files, bool) or not 0 <= files <= 1):
            return False  # a context across files is never the device's (docs/sources.md#seed-000), whatever the task
        return True


class BreakerPolicy(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A boundary's breaker (docs/sources.md#seed-000: "云侧连续失败或 P90 突增时全量走端侧 …
    端侧模型加载失败、内存不足或回退率 连续超标时全量上云"). Besides the sliding failure rate: the cloud breaker opens
    when the cloud's 5-minute p90 exceeds `p90_spike_factor` × `p90_baseline_ms` (over at least `p90_min_samples`
    calls); the device breaker opens when its fallback rate exceeds `fallback_rate_limit` for `fallback_windows`
    consecutive windows of `fallback_window_s` (each with at least
    `fallback_min_n` device-entered requests). None: that trigger is off."""

    window_s: Number = 60.0
    failure_rate: Number = 0.5
    min_calls: Int = 10
    cooldown_s: Number = 30.0
    p90_spike_factor: Number | None = None
    p90_baseline_ms: Number = 800.0
    p90_min_samples: Int = 20
    p90_settle_trials: Int = 3  # half-open trials in a row that answer at the new level: the baseline moves to it
    # ... and only once such trials have gone on this long: a surge shorter than this opens the breaker each time
    # and never moves the baseline (docs/router.md, "p90 spike")
    p90_settle_s: Number = 1800.0
    # the spike threshold's ceiling while the router has no day's baseline yet (a cold start): None is
    # `p90_spike_factor` × `p90_baseline_ms`, so a ramp from a fresh start is caught against the policy's figure
    p90_ceiling_ms: Number | None = None
    fallback_rate_limit: Number | None = None
    fallback_windows: Int = 3
    fallback_window_s: Number = 60.0
    fallback_min_n: Int = 20

    def in_range(self) -> bool:
        return (
            0 < self.failure_rate <= 1
            and 0 < self.window_s <= MAX_WINDOW_S
            and 0 <= self.cooldown_s <= MAX_WINDOW_S
            and self.min_calls >= 1
            and 0 < self.fallback_window_s <= MAX_WINDOW_S
            and self.p90_settle_trials >= 1
            and 0 <= self.p90_settle_s <= MAX_WINDOW_S
            and (self.p90_ceiling_ms is None or self.p90_ceiling_ms > 0)
            and self.p90_baseline_ms >= 0
            and self.p90_min_samples >= 1
            and (self.p90_spike_factor is None or self.p90_spike_factor >= 1)
            and (self.fallback_rate_limit is None or 0 <= self.fallback_rate_limit <= 1)
            and self.fallback_windows >= 1
        )


class Rollout(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A task type's migration stage (docs/sources.md#seed-004-7); `percent` of sessions for a canary."""

    stage: str = "full"
    percent: Number = 0.0


class RolloutLimits(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The stage tracker's exit conditions (docs/sources.md#seed-004-7; `routerscope.warehouse.analytics.review`)."""

    agreement: Number = 0.9  # shadow → canary: agreement in every input-length bucket with enough sample
    min_n: Int = 30  # the sample a bucket, a cohort or a rate needs to count
    error_rate_drift: Number = 0.02  # shadow → canary: the device error rate rose by at most this between halves
    fallback_rate: Number = 0.25  # canary → full: the canary cohort's limits
    false_fallback_rate: Number = 0.10
    offload_failure_rate: Number = 0.02
    l4_margin: Number = 0.01  # canary → full: canned answers at most this above the cloud cohort's share


def _both_breakers() -> dict[str, BreakerPolicy]:
    return {"device": BreakerPolicy(), "cloud": BreakerPolicy()}


class Policy(msgspec.Struct, frozen=True, kw_only=True):
    """A whole policy: the file's top-level settings and its sections (docs/router.md#the-policy-file)."""

    version: str
    capabilities: dict[str, Capability]
    pii_to_cloud: bool = False
    l1_enabled: bool = True
    commit_tokens: Int = 120  # at least 1
    # docs/sources.md#seed-004-6: a hard cap on concurrent device requests; the excess goes to the cloud
    device_concurrency: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 1
    shadow: frozenset[str] = frozenset()
    # cloud model -> USD per 1k tokens (the file's `cloud_prices_usd_per_1k_tokens`)
    cloud_prices: dict[str, float] = msgspec.field(default_factory=dict, name="cloud_prices_usd_per_1k_tokens")
    breakers: dict[str, BreakerPolicy] = msgspec.field(default_factory=_both_breakers)
    rollout: dict[str, Rollout] = msgspec.field(default_factory=dict)
    rollout_limits: RolloutLimits = RolloutLimits()
    device_tiers: dict[str, dict] = msgspec.field(default_factory=dict)  # tier -> {memory_mb: ...}

    def capability(self, task_type: str) -> Capability:
        return self.capabilities.get(task_type) or Capability(supported=False)

    def stage(self, task_type: str) -> Rollout:
        """The task type's stage: its `rollout` entry, `shadow` when listed there, else `full` for a task
        the capability matrix supports and `cloud_only` for the rest."""
        if task_type in self.rollout:
            return self.rollout[task_type]
        if task_type in self.shadow:
            return Rollout("shadow")
        return Rollout("full" if self.capability(task_type).supported else "cloud_only")

    def stage_for(self, task_type: str, session_id: str) -> str:
        """The stage this request runs in: `canary` when its session is in the cohort, else `cloud_only`."""
        r = self.stage(task_type)
        if r.stage == "canary":
            return "canary" if in_canary(session_id, r.percent) else "cloud_only"
        return r.stage

    def with_(self, tag: str | None = None, **changes: Any) -> Policy:
        """This policy with `changes` (fields, as `msgspec.structs.replace` takes them) and a version of its own:
        this one's file version, `-tag` when given, `+` the first 8 hex digits of a SHA-256 of the new content;
        so a policy built in code is told apart in the events as an edited file is."""
        label = self.version.partition("+")[0] + (f"-{tag}" if tag else "")
        policy = msgspec.structs.replace(self, **changes, version=label)
        content = json.dumps(msgspec.to_builtins(policy, order="deterministic"), sort_keys=True)  # stable across runs
        version = f"{label}+{hashlib.sha256(content.encode()).hexdigest()[:8]}"
        if len(version) > 64:
            raise ConfigError(f"policy version {version!r} is too long (policy_version holds 64 characters)")
        return msgspec.structs.replace(policy, version=version)


# What a setting must be, as the error says it: by field name where it has its own words, else by type.
_WORDS = {
    "tools": "a list of tool names",
    "answer": "a mapping",
    "shadow": "a list of task type names",
    "device_concurrency": "an integer from 1 to 1024",
    "cloud_prices_usd_per_1k_tokens": "a mapping of cloud model names to prices >= 0",
}
_KINDS = {"bool": "true or false", "int": "an integer", "float": "a number", "str": "a string"}
_AT = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?$")


def _convert(cls: type, raw: Any, where: str, source: str) -> Any:
    """`raw` as `cls` (`msgspec.convert`, strict: no string for a number, no 1 for true); a ConfigError naming the
    setting at `where` (`where` empty: the top level) and what it must be when it does not fit."""
    try:
        return msgspec.convert(raw, cls, strict=True)
    except msgspec.ValidationError as exc:
        raise ConfigError(_say(exc, cls, raw, where, source)[:300]) from None


def _say(exc: msgspec.ValidationError, cls: type, raw: Any, where: str, source: str) -> str:
    m = _AT.match(str(exc))
    what, path = (m["what"], m["path"] or "") if m else (str(exc), "")
    head = f"{source}: {where}" if where else source
    unknown = re.match(r"Object contains unknown field `(.*)`", what)
    if unknown:
        return f"{head}: unknown setting {unknown[1]!r}"
    missing = re.match(r"Object missing required field `(.*)`", what)
    if missing:
        return f"{head}: {missing[1]} is required"
    name = path.lstrip(".").split(".")[0].split("[")[0]
    if not name:
        return f"{head}: {what}"
    value = raw.get(name) if isinstance(raw, dict) else None
    setting = f"{where}.{name}" if where else name
    return f"{source}: {setting} must be {_expected(cls, name)}, not {_short(value)}"


def _expected(cls: type, name: str) -> str:
    """How a field's type reads in an error: `a number`, `true or false`..."""
    if name in _WORDS:
        return _WORDS[name]
    fields = {f.encode_name: f for f in msgspec.structs.fields(cls)}
    kind = msgspec.inspect.type_info(fields[name].type) if name in fields else None
    while isinstance(kind, msgspec.inspect.UnionType):  # an optional setting: what it is when set
        kind = next(t for t in kind.types if not isinstance(t, msgspec.inspect.NoneType))
    label = type(kind).__name__.removesuffix("Type").lower()
    return _KINDS.get(label, "a mapping" if label in ("dict", "struct") else f"of type {label}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _mapping(doc: dict, key: str, source: str) -> dict:
    """The optional mapping section `key` of the policy ({} when absent or empty); ConfigError if it is not one."""
    value = doc.get(key) or {}
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: {key} must be a mapping")
    return value


def _record(cls: type, raw: Any, where: str, source: str, shape: str = "a mapping") -> Any:
    """The policy section at `where` as `cls`; a ConfigError naming it when it is not a mapping or does not fit."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: {where} must be {shape}")
    return _convert(cls, raw, where, source)


def _capability(raw: Any, where: str, source: str) -> Capability:
    """A capability matrix row, with the checks across its fields."""
    cap: Capability = _record(Capability, raw, where, source)
    if not 0 <= cap.threshold <= 1:
        raise ConfigError(f"{source}: {where}.threshold {raw['threshold']} is not in [0, 1]")
    if cap.validator is not None and cap.validator not in VALIDATORS:
        raise ConfigError(f"{source}: {where}.validator must be one of {', '.join(VALIDATORS)}")
    if cap.max_input_tokens < 0 or cap.max_output_tokens < 0:
        raise ConfigError(f"{source}: {where}: max_input_tokens and max_output_tokens must be >= 0")
    if cap.validator == "regex" or cap.pattern is not None:
        if cap.pattern is None or not 0 < len(cap.pattern) <= MAX_PATTERN:
            raise ConfigError(f"{source}: {where}.pattern must be a regular expression of 1-{MAX_PATTERN} characters")
        try:
            re.compile(cap.pattern)
        except re.error as exc:
            raise ConfigError(f"{source}: {where}.pattern is no regular expression ({exc})") from None
    if cap.error_cost is not None and not 0 <= cap.error_cost <= 1:
        raise ConfigError(f"{source}: {where}.error_cost must be a number in [0, 1]")
    if cap.tools is not None and not all(cap.tools):
        raise ConfigError(f"{source}: {where}.tools must be a list of tool names")
    problem = answer_problem(cap.answer)
    if problem is not None:
        raise ConfigError(f"{source}: {where}.answer: {problem}")
    if cap.privacy not in PRIVACY or cap.iteration not in ITERATION:
        raise ConfigError(
            f"{source}: {where}: privacy must be one of {', '.join(PRIVACY)}, iteration one of {', '.join(ITERATION)}"
        )
    return cap


ANSWER_KEYS = ("labels", "fields", "tools", "language")
JSON_TYPE_NAMES = ("string", "number", "integer", "boolean", "array", "object")


def _schema_ok(schema: Any) -> bool:
    """A mapping of names to JSON type names (`{query: string}`)."""
    return isinstance(schema, dict) and all(isinstance(k, str) and v in JSON_TYPE_NAMES for k, v in schema.items())


def answer_problem(answer: Any) -> str | None:
    """What is wrong with a capability's `answer:` declaration, which the router checks every answer against before
    serving it (docs/router.md, "Only a declared answer is served"); None when it is fine or absent."""
    if answer is None:
        return None
    unknown = [str(k) for k in answer if k not in ANSWER_KEYS]
    if unknown:
        return f"unknown key {unknown[0][:40]!r} (one of {', '.join(ANSWER_KEYS)})"
    labels = answer.get("labels")
    if "labels" in answer and not (
        isinstance(labels, list) and labels and all(isinstance(v, str) and v.strip() for v in labels)
    ):
        return "labels must be a non-empty list of names"
    if "fields" in answer and not (_schema_ok(answer["fields"]) and answer["fields"]):
        return f"fields must map names to one of {', '.join(JSON_TYPE_NAMES)}"
    tools = answer.get("tools")
    if "tools" in answer and not (
        isinstance(tools, dict)
        and tools
        and all(isinstance(t, str) and (s is None or _schema_ok(s)) for t, s in tools.items())
    ):
        return f"tools must map tool names to their arguments' types ({', '.join(JSON_TYPE_NAMES)})"
    if "language" in answer and not (isinstance(answer["language"], str) and answer["language"].strip()):
        return "language must be a name"
    return None


def _rollout(raw: Any, where: str, source: str) -> Rollout:
    """A task type's stage: a stage name, or a mapping with `stage` (and `percent` for a canary)."""
    raw = {"stage": raw} if isinstance(raw, str) else raw
    r: Rollout = _record(Rollout, raw, where, source, "a stage or a mapping with `stage`")
    if r.stage not in STAGES:
        raise ConfigError(f"{source}: {where}.stage must be one of {', '.join(STAGES)}")
    if not 0 <= r.percent <= 100 or (r.stage == "canary" and r.percent <= 0):
        raise ConfigError(f"{source}: {where}.percent must be a share of sessions in (0, 100] for a canary")
    return r


def _top_level(doc: dict, source: str) -> dict:
    """The document's top-level settings, `msgspec.convert`-ready: an empty setting is its default, a section that
    must be a mapping is one, names and prices as the policy keeps them."""
    settings = {k: doc[k] for k in ("pii_to_cloud", "l1_enabled", "commit_tokens") if doc.get(k) is not None}
    if "device_concurrency" in doc:
        settings["device_concurrency"] = doc["device_concurrency"]
    shadow = doc.get("shadow") or ()
    if not isinstance(shadow, (list, tuple)) or not all(isinstance(v, str) and v for v in shadow):
        raise ConfigError(f"{source}: shadow must be a list of task type names")
    settings["shadow"] = list(shadow)
    prices = doc.get("cloud_prices_usd_per_1k_tokens") or {}
    if not isinstance(prices, dict) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in prices.values()
    ):
        raise ConfigError(f"{source}: cloud_prices_usd_per_1k_tokens must map cloud model names to prices >= 0")
    settings["cloud_prices_usd_per_1k_tokens"] = {str(k): float(v) for k, v in prices.items()}
    tiers = doc.get("device_tiers") or {}
    if not isinstance(tiers, dict) or not all(
        isinstance(t, dict)
        and isinstance(t.get("memory_mb"), (int, float))
        and not isinstance(t.get("memory_mb"), bool)
        and t["memory_mb"] > 0
        for t in tiers.values()
    ):
        raise ConfigError(f"{source}: device_tiers must map tier names to {{memory_mb: a number > 0}}")
    settings["device_tiers"] = {str(k): dict(v) for k, v in tiers.items()}
    return settings


def from_document(doc: Any, source: str, digest: str) -> Policy:
    """A parsed policy document as a validated `Policy`, its version the document's `version` + `digest` (the first
    8 hex digits of the file's SHA-256); ConfigError says what is wrong and where."""
    if not isinstance(doc, dict) or "version" not in doc or not isinstance(doc.get("capabilities"), dict):
        raise ConfigError(f"{source}: expected a mapping with `version` and a `capabilities` mapping")
    if not isinstance(doc["version"], (str, int, float)) or isinstance(doc["version"], bool):
        raise ConfigError(f"{source}: version must be a string or a number")
    settings = _top_level(doc, source)
    scalars: Policy = _convert(Policy, {"version": "", "capabilities": {}, **settings}, "", source)  # by name first
    if scalars.commit_tokens < 1:
        raise ConfigError(f"{source}: commit_tokens must be at least 1, not {scalars.commit_tokens!r}")
    caps = {str(t): _capability(raw, f"capabilities.{t}", source) for t, raw in doc["capabilities"].items()}
    sections = _mapping(doc, "breakers", source)
    breakers = {}
    for boundary in ("device", "cloud"):
        b: BreakerPolicy = _record(BreakerPolicy, sections.get(boundary) or {}, f"breakers.{boundary}", source)
        if not b.in_range():
            raise ConfigError(f"{source}: breakers.{boundary}: a value is out of range ({b})")
        breakers[boundary] = b
    rollout = {str(t): _rollout(raw, f"rollout.{t}", source) for t, raw in _mapping(doc, "rollout", source).items()}
    limits: RolloutLimits = _record(RolloutLimits, doc.get("rollout_limits") or {}, "rollout_limits", source)
    if not all(v >= 0 for v in msgspec.structs.astuple(limits)):
        raise ConfigError(f"{source}: rollout_limits: every limit must be a number >= 0")
    version = f"{doc['version']}+{digest}"
    if len(version) > 64:
        raise ConfigError(f"{source}: version is too long (policy_version holds 64 characters)")
    document = {**settings, "version": version, "capabilities": caps, "breakers": breakers, "rollout": rollout}
    policy: Policy = _convert(Policy, {**document, "rollout_limits": limits}, "", source)
    return policy
