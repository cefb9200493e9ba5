"""The routing policy as a file: capability matrix, calibrated thresholds, rollout stages, breakers.

Rollout stages (docs/sources.md#seed-004-7): each task type is in `shadow` (the device runs, the cloud answers),
`canary` with a percentage of *sessions* (sticky: a session is in the cohort when a hash of its id
falls under the percentage, never per request), `full`, or `cloud_only` (rolled back, or a task the
capability matrix does not support); the cloud stays the permanent fallback channel in every stage.
`shadow: [...]` is the short form of `rollout: {task: {stage: shadow}}`. Per task type the review
inputs of docs/sources.md#seed-003 and #seed-004 live in the capability matrix too: `error_cost` (0–1, missing 0.5),
`privacy` (strict | redactable | public), `iteration` (quarterly | monthly | weekly) and `streamable`
(the answer can be streamed or the task run asynchronously; default true); per device
tier `device_tiers.<tier>.memory_mb`; the stage tracker's limits in `rollout_limits`.

`PolicyStore` hot-reloads it: each decision asks for the current policy; when the file changed
(checked at most every `check_every_s`), it is parsed and validated again. A bad file is rejected
with a logged reason and the last good policy stays. Each load stamps a `policy_version`: the
file's own `version` plus the first 8 hex digits of its SHA-256, so two edits under one version
number are still told apart in the events. A policy derived in code (`Policy.with_`, e.g. the
simulator's pushed threshold) is stamped the same way from its content. The router asks any
`PolicySource` (a `PolicyStore`, or anything with `current()`) for the policy of each decision.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import os
import re
import stat
import threading
import time
import typing
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Protocol

import yaml

from routerscope.contract.events import ROLLOUT_STAGES
from routerscope.core.errors import ConfigError

log = logging.getLogger("routerscope.router.policy")
DEFAULT_POLICY = Path(__file__).with_name("default_policy.yaml")
VALIDATORS = ("label", "json", "regex")
STAGES = ROLLOUT_STAGES  # the contract's rollout stages, in order
PRIVACY = ("strict", "redactable", "public")
ITERATION = ("quarterly", "monthly", "weekly")


def in_canary(session_id: str, percent: float) -> bool:
    """Whether a session is in a canary cohort of `percent` % of sessions: a stable hash of the session id
    (not Python's salted `hash`), so a session keeps its path on every request, every router instance."""
    bucket = int.from_bytes(hashlib.sha256(session_id.encode()).digest()[:8], "big") % 10_000
    return bucket < percent * 100


@dataclass(frozen=True)
class Capability:
    supported: bool
    max_input_tokens: int = 0
    max_output_tokens: int = 0
    threshold: float = 0.7
    validator: str | None = None
    pattern: str | None = None  # for validator: regex
    error_cost: float | None = None  # docs/sources.md#seed-004: 0-1, what a wrong answer costs downstream (None: 0.5)
    privacy: str = "public"  # docs/sources.md#seed-003: strict | redactable | public
    # docs/sources.md#seed-003: how often the task's model must change: quarterly | monthly | weekly
    iteration: str = "monthly"
    # docs/sources.md#seed-000 "仅限白名单内工具": the tools the device may call (None: any)
    tools: tuple[str, ...] | None = None
    single_file: bool = False  # docs/sources.md#seed-000 "单文件片段可,跨文件上下文不可": a context of one file at most
    streamable: bool = True  # docs/sources.md#seed-003: the answer can be streamed or the task run asynchronously
    # what a correct answer means, for the replay's judge (`routerscope.router.judge`; docs/router.md#the-judge):
    # labels, fields,
    # tool argument schemas or a language; None: judged by agreement with the cloud's answer, or not at all
    answer: dict | None = None

    @property
    def structured(self) -> bool:
        """The answer is checked whole (JSON, a label, a pattern, a tool call): it never commits on a sentence
        end and is never served cut (docs/router.md, "Nothing unvalidated reaches a user")."""
        return self.validator is not None or self.tools is not None

    def admits(
        self, input_tokens: int, output_tokens: int, tools: tuple[str, ...] | None = None, files: int | None = None
    ) -> bool:
        """The capability matrix's verdict (docs/sources.md#seed-000): supported, within the input and output
        limits; where the task type has a tool whitelist, the request declares exactly one tool and it is on
        the list (single-step calls only: no tools declared, or several, is not admitted); where it is
        `single_file`, the request declares how many files its context spans, and that is at most one."""
        if not (self.supported and input_tokens <= self.max_input_tokens and output_tokens <= self.max_output_tokens):
            return False
        if self.tools is not None:
            if tools is None or isinstance(tools, str) or len(tuple(tools)) != 1:
                return False
            if not set(tools) <= set(self.tools):
                return False
        if self.single_file and (files is None or isinstance(files, bool) or not 0 <= files <= 1):
            return False
        return True


@dataclass(frozen=True)
class BreakerPolicy:
    """A boundary's breaker (docs/sources.md#seed-000: "云侧连续失败或 P90 突增时全量走端侧 …
    端侧模型加载失败、内存不足或回退率 连续超标时全量上云"). Besides the sliding failure rate: the cloud breaker opens
    when the cloud's 5-minute p90 exceeds `p90_spike_factor` × `p90_baseline_ms` (over at least `p90_min_samples`
    calls); the device breaker opens when its fallback rate exceeds `fallback_rate_limit` for `fallback_windows`
    consecutive windows of `fallback_window_s` (each with at least
    `fallback_min_n` device-entered requests). None: that trigger is off."""

    window_s: float = 60.0
    failure_rate: float = 0.5
    min_calls: int = 10
    cooldown_s: float = 30.0
    p90_spike_factor: float | None = None
    p90_baseline_ms: float = 800.0
    p90_min_samples: int = 20
    p90_settle_trials: int = 3  # half-open trials in a row that answer at the new level: the baseline moves to it
    fallback_rate_limit: float | None = None
    fallback_windows: int = 3
    fallback_window_s: float = 60.0
    fallback_min_n: int = 20


@dataclass(frozen=True)
class Rollout:
    """A task type's migration stage (docs/sources.md#seed-004-7); `percent` of sessions for a canary."""

    stage: str = "full"
    percent: float = 0.0


@dataclass(frozen=True)
class RolloutLimits:
    """The stage tracker's exit conditions (docs/sources.md#seed-004-7; `routerscope.warehouse.analytics.review`)."""

    agreement: float = 0.9  # shadow → canary: agreement in every input-length bucket with enough sample
    min_n: int = 30  # the sample a bucket, a cohort or a rate needs to count
    error_rate_drift: float = 0.02  # shadow → canary: the device error rate rose by at most this between halves
    fallback_rate: float = 0.25  # canary → full: the canary cohort's limits
    false_fallback_rate: float = 0.10
    offload_failure_rate: float = 0.02
    l4_margin: float = 0.01  # canary → full: canned answers at most this above the cloud cohort's share


@dataclass(frozen=True)
class Policy:
    version: str
    capabilities: dict[str, Capability]
    pii_to_cloud: bool = False
    l1_enabled: bool = True
    commit_tokens: int = 120
    # docs/sources.md#seed-004-6: a hard cap on concurrent device requests; the excess goes to the cloud
    device_concurrency: int = 1
    shadow: frozenset[str] = frozenset()
    cloud_prices: dict[str, float] = field(default_factory=dict)  # cloud model -> USD per 1k tokens
    breakers: dict[str, BreakerPolicy] = field(
        default_factory=lambda: {"device": BreakerPolicy(), "cloud": BreakerPolicy()}
    )
    rollout: dict[str, Rollout] = field(default_factory=dict)
    rollout_limits: RolloutLimits = RolloutLimits()
    device_tiers: dict[str, dict] = field(default_factory=dict)  # tier -> {memory_mb: ...}

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

    def with_(self, tag: str | None = None, **changes) -> Policy:
        """This policy with `changes` (fields, as `dataclasses.replace` takes them) and a version of its own:
        this one's file version, `-tag` when given, `+` the first 8 hex digits of a SHA-256 of the new content;
        so a policy built in code is told apart in the events as an edited file is."""
        label = self.version.partition("+")[0] + (f"-{tag}" if tag else "")
        policy = replace(self, **changes, version=label)
        content = json.dumps(asdict(policy), sort_keys=True, default=sorted)  # sets sorted: stable across runs
        version = f"{label}+{hashlib.sha256(content.encode()).hexdigest()[:8]}"
        if len(version) > 64:
            raise ConfigError(f"policy version {version!r} is too long (policy_version holds 64 characters)")
        return replace(policy, version=version)


class PolicySource(Protocol):
    """What the router reads its policy from: `current()`, asked once a decision."""

    def current(self) -> Policy: ...


@functools.cache
def default_policy() -> Policy:
    """The shipped default policy, read and parsed on first use only (shared: derive with `with_`, never mutate)."""
    return parse(DEFAULT_POLICY.read_text(), str(DEFAULT_POLICY))


def _record(cls, raw, where: str, source: str, shape: str = "a mapping"):
    """`cls(**raw)` for the policy section at `where`; a ConfigError naming it when it does not fit."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: {where} must be {shape}")
    try:
        record = cls(**raw)
    except TypeError as exc:
        raise ConfigError(f"{source}: {where}: {exc}") from None
    for name, hint in typing.get_type_hints(cls).items():
        value = getattr(record, name)
        wanted = _SCALARS.get(hint)
        if wanted is not None and not (value is None and "None" in str(hint)) and not _is(value, wanted):
            raise ConfigError(f"{source}: {where}.{name} must be {wanted[1]}, not {value!r}")
    return record


# The scalar field types the policy's records check (other annotations are checked where they are read).
_SCALARS = {
    bool: (bool, "true or false"),
    int: (int, "an integer"),
    float: (float, "a number"),
    str: (str, "a string"),
    bool | None: (bool, "true or false"),
    int | None: (int, "an integer"),
    float | None: (float, "a number"),
    str | None: (str, "a string"),
}


def _is(value, wanted: tuple[type, str]) -> bool:
    kind = wanted[0]
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:  # an integer of a sane size (a 4,000-digit one is no setting)
        return isinstance(value, int) and not isinstance(value, bool) and abs(value) <= MAX_INT
    if kind is float:  # a finite number: .inf and .nan are no settings either
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return isinstance(value, kind)


def _names(value, key: str, source: str) -> list[str]:
    """A list of task type names (`shadow:`); ConfigError if it is not one."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{source}: {key} must be a list of task type names")
    return list(value)


def _mapping(doc: dict, key: str, source: str) -> dict:
    """The optional mapping section `key` of the policy ({} when absent); ConfigError if it is not one."""
    value = doc.get(key) or {}
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: {key} must be a mapping")
    return value


MAX_POLICY_BYTES = 1 << 20  # a policy file is a few kB; anything past 1 MiB is not one
MAX_DEPTH = 16  # the deepest section the policy has is 4 levels
MAX_ALIASES = 64  # YAML aliases a file may use (an alias bomb needs many)
MAX_NODES = 100_000  # values after aliases are expanded
MAX_INT = 10**9  # the largest integer setting (tokens, counts) a policy may hold
MAX_PATTERN = 512  # characters of a validator's regular expression
MAX_WINDOW_S = 86_400.0  # breaker windows and cool-downs: a day at most


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with bounds checked while the document is composed: nesting depth, alias uses and
    the number of nodes (an alias counted each time it is used), so a hostile file is refused before it costs
    memory or time."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = self._aliases = self._nodes = 0

    def construct_mapping(self, node, deep=False):
        keys = set()
        for key_node, _ in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else id(key_node)
            if key in keys and key != "<<":
                raise _TooBig(f"the key {str(key)[:64]!r} appears twice in one mapping")
            keys.add(key)
        return super().construct_mapping(node, deep=deep)

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise _TooBig(f"more than {MAX_ALIASES} YAML aliases")
            anchor = self.peek_event().anchor
            if anchor in self.anchors:
                self._nodes += _size(self.anchors[anchor])
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise _TooBig(f"more than {MAX_NODES:,} values (aliases expanded)")
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _TooBig(f"nested more than {MAX_DEPTH} levels deep")
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class _TooBig(Exception):
    pass


def _size(node) -> int:
    """The number of nodes under a composed YAML node (aliases inside it counted again)."""
    seen, stack = 0, [node]
    while stack:
        n = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            return seen
        if isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                stack.extend((k, v))
        elif isinstance(n, yaml.SequenceNode):
            stack.extend(n.value)
    return seen


def read_policy_file(path: Path | str, source: str | None = None) -> str:
    """The text of a policy file: a regular file of at most `MAX_POLICY_BYTES` in UTF-8; ConfigError otherwise
    (a FIFO or a device such as /dev/zero is refused before anything is read from it)."""
    path = Path(path)
    source = source or str(path)
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{source}: not a regular file (give the path of a YAML policy file)")
        if st.st_size > MAX_POLICY_BYTES:
            raise ConfigError(f"{source}: {st.st_size:,} bytes; a policy file holds at most {MAX_POLICY_BYTES:,}")
        with path.open("rb") as f:
            data = f.read(MAX_POLICY_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read it ({exc.strerror or exc})") from None
    if len(data) > MAX_POLICY_BYTES:
        raise ConfigError(f"{source}: more than {MAX_POLICY_BYTES:,} bytes; a policy file holds at most that")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{source}: not a UTF-8 text file") from None


def load_yaml(text: str, source: str = "policy"):
    """A YAML document within the bounds above; ConfigError naming the source when it is not one."""
    if len(text) > MAX_POLICY_BYTES:
        raise ConfigError(f"{source}: more than {MAX_POLICY_BYTES:,} characters; a policy holds at most that")
    try:
        return yaml.load(text, Loader=_BoundedLoader)  # noqa: S506 (a SafeLoader with bounds)
    except _TooBig as exc:
        raise ConfigError(f"{source}: refused, {exc}") from None
    except RecursionError:
        raise ConfigError(f"{source}: refused, nested too deep") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML ({_first_line(exc)})") from None


def _first_line(exc: Exception) -> str:
    return " ".join(str(exc).split())[:200]


def _top(doc: dict, key: str, kind: tuple[type, str], default, source: str, at_least: int | None = None):
    """A top-level scalar setting of the policy, checked by type (and lower bound); ConfigError naming the key."""
    value = doc.get(key, default)
    if value is None:
        value = default
    if not _is(value, kind) or (kind[0] is float and isinstance(value, float) and not math.isfinite(value)):
        raise ConfigError(f"{source}: {key} must be {kind[1]}, not {value!r}"[:300])
    if at_least is not None and value < at_least:
        raise ConfigError(f"{source}: {key} must be at least {at_least}, not {value!r}")
    return value


def parse(text: str, source: str = "policy") -> Policy:
    """Parse and validate a policy file; ConfigError says what is wrong and where."""
    doc = load_yaml(text, source)
    if not isinstance(doc, dict) or "version" not in doc or not isinstance(doc.get("capabilities"), dict):
        raise ConfigError(f"{source}: expected a mapping with `version` and a `capabilities` mapping")
    if not isinstance(doc["version"], (str, int, float)) or isinstance(doc["version"], bool):
        raise ConfigError(f"{source}: version must be a string or a number")
    pii_to_cloud = _top(doc, "pii_to_cloud", _SCALARS[bool], False, source)
    l1_enabled = _top(doc, "l1_enabled", _SCALARS[bool], True, source)
    commit_tokens = _top(doc, "commit_tokens", _SCALARS[int], 120, source, at_least=1)
    caps = {}
    for task_type, raw in doc["capabilities"].items():
        cap = _record(Capability, raw, f"capabilities.{task_type}", source)
        if not 0 <= cap.threshold <= 1:
            raise ConfigError(f"{source}: capabilities.{task_type}.threshold {cap.threshold} is not in [0, 1]")
        if cap.validator is not None and cap.validator not in VALIDATORS:
            raise ConfigError(f"{source}: capabilities.{task_type}.validator must be one of {', '.join(VALIDATORS)}")
        if cap.max_input_tokens < 0 or cap.max_output_tokens < 0:
            raise ConfigError(
                f"{source}: capabilities.{task_type}: max_input_tokens and max_output_tokens must be >= 0"
            )
        if cap.validator == "regex" or cap.pattern is not None:
            if not isinstance(cap.pattern, str) or not 0 < len(cap.pattern) <= MAX_PATTERN:
                raise ConfigError(
                    f"{source}: capabilities.{task_type}.pattern must be a regular expression of 1-{MAX_PATTERN} "
                    "characters"
                )
            try:
                re.compile(cap.pattern)
            except re.error as exc:
                raise ConfigError(
                    f"{source}: capabilities.{task_type}.pattern is no regular expression ({exc})"
                ) from None
        if cap.error_cost is not None and (
            isinstance(cap.error_cost, bool)
            or not isinstance(cap.error_cost, (int, float))
            or not 0 <= cap.error_cost <= 1
        ):
            raise ConfigError(f"{source}: capabilities.{task_type}.error_cost must be a number in [0, 1]")
        if cap.tools is not None:
            if not isinstance(cap.tools, list) or not all(isinstance(t, str) and t for t in cap.tools):
                raise ConfigError(f"{source}: capabilities.{task_type}.tools must be a list of tool names")
            cap = replace(cap, tools=tuple(cap.tools))
        if not isinstance(cap.single_file, bool):
            raise ConfigError(f"{source}: capabilities.{task_type}.single_file must be true or false")
        if not isinstance(cap.streamable, bool):
            raise ConfigError(f"{source}: capabilities.{task_type}.streamable must be true or false")
        if cap.answer is not None and not isinstance(
            cap.answer, dict
        ):  # its keys are checked by routerscope.router.judge
            raise ConfigError(f"{source}: capabilities.{task_type}.answer must be a mapping")
        if cap.privacy not in PRIVACY or cap.iteration not in ITERATION:
            raise ConfigError(
                f"{source}: capabilities.{task_type}: privacy must be one of {', '.join(PRIVACY)}, "
                f"iteration one of {', '.join(ITERATION)}"
            )
        caps[str(task_type)] = cap
    breakers = {}
    for boundary in ("device", "cloud"):
        raw = _mapping(doc, "breakers", source).get(boundary) or {}
        b = breakers[boundary] = _record(BreakerPolicy, raw, f"breakers.{boundary}", source)
        if not (
            0 < b.failure_rate <= 1
            and b.window_s > 0
            and b.cooldown_s >= 0
            and b.min_calls >= 1
            and b.window_s <= MAX_WINDOW_S
            and b.cooldown_s <= MAX_WINDOW_S
            and b.fallback_window_s <= MAX_WINDOW_S
            and b.p90_settle_trials >= 1
            and b.p90_baseline_ms >= 0
            and b.p90_min_samples >= 1
            and (b.p90_spike_factor is None or b.p90_spike_factor >= 1)
            and (b.fallback_rate_limit is None or 0 <= b.fallback_rate_limit <= 1)
            and b.fallback_windows >= 1
            and b.fallback_window_s > 0
        ):
            raise ConfigError(f"{source}: breakers.{boundary}: a value is out of range ({b})")
    concurrency = doc.get("device_concurrency", 1)
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or not 1 <= concurrency <= 1024:
        raise ConfigError(f"{source}: device_concurrency must be an integer from 1 to 1024")
    prices = doc.get("cloud_prices_usd_per_1k_tokens") or {}
    if not isinstance(prices, dict) or not all(isinstance(v, (int, float)) and v >= 0 for v in prices.values()):
        raise ConfigError(f"{source}: cloud_prices_usd_per_1k_tokens must map cloud model names to prices >= 0")
    rollout = {}
    for task_type, raw in _mapping(doc, "rollout", source).items():
        raw = {"stage": raw} if isinstance(raw, str) else raw
        r = _record(Rollout, raw, f"rollout.{task_type}", source, "a stage or a mapping with `stage`")
        if r.stage not in STAGES:
            raise ConfigError(f"{source}: rollout.{task_type}.stage must be one of {', '.join(STAGES)}")
        if (
            isinstance(r.percent, bool)
            or not isinstance(r.percent, (int, float))
            or not 0 <= r.percent <= 100
            or (r.stage == "canary" and r.percent <= 0)
        ):
            raise ConfigError(
                f"{source}: rollout.{task_type}.percent must be a share of sessions in (0, 100] for a canary"
            )
        rollout[str(task_type)] = Rollout(r.stage, float(r.percent))
    limits = _record(RolloutLimits, doc.get("rollout_limits") or {}, "rollout_limits", source)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in limits.__dict__.values()):
        raise ConfigError(f"{source}: rollout_limits: every limit must be a number >= 0")
    tiers = doc.get("device_tiers") or {}
    if not isinstance(tiers, dict) or not all(
        isinstance(t, dict)
        and isinstance(t.get("memory_mb"), (int, float))
        and not isinstance(t.get("memory_mb"), bool)
        and t["memory_mb"] > 0
        for t in tiers.values()
    ):
        raise ConfigError(f"{source}: device_tiers must map tier names to {{memory_mb: a number > 0}}")
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    version = f"{doc['version']}+{digest}"
    if len(version) > 64:
        raise ConfigError(f"{source}: version is too long (policy_version holds 64 characters)")
    return Policy(
        version=version,
        capabilities=caps,
        pii_to_cloud=pii_to_cloud,
        l1_enabled=l1_enabled,
        commit_tokens=commit_tokens,
        device_concurrency=concurrency,
        shadow=frozenset(_names(doc.get("shadow") or (), "shadow", source)),
        cloud_prices={str(k): float(v) for k, v in prices.items()},
        breakers=breakers,
        rollout=rollout,
        rollout_limits=limits,
        device_tiers={str(k): dict(v) for k, v in tiers.items()},
    )


SETTLE_S = 1.0  # a changed file is read once it has stayed the same this long (a writer that pauses mid-file)


class PolicyStore:
    """The current policy of a file, reloaded when the file changes; the last good one on error.

    A reload is whole or not at all (docs/router.md, "Policy reloads"): a change is read only once the file has
    stayed unchanged (size and modification time) for `settle_s` on the store's clock, and is read again if it
    changed while being read; the new document must hold every top-level section the last good one held (a
    section removed on purpose is written empty, `rollout: {}`) and both breakers; anything else keeps the
    last good policy, with a warning naming why (`last_error`). Writers replace the file by rename."""

    def __init__(
        self,
        path: Path | str | None = None,
        check_every_s: float = 1.0,
        clock=time.monotonic,
        settle_s: float = SETTLE_S,
    ):
        self.path = Path(path or os.environ.get("ROUTERSCOPE_POLICY") or DEFAULT_POLICY)
        self.check_every_s = check_every_s
        self.settle_s = max(0.0, float(settle_s))
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: tuple[str, float] | None = None  # a changed content waiting to settle: (digest, first seen)
        self._next_check = 0.0
        self.last_error: str | None = None
        self._stamp = self._file_stamp()
        text = read_policy_file(self.path)
        self._policy = parse(text, str(self.path))  # the first load must succeed: no last good yet
        self._sections = _sections(text)
        self._digest = _digest(text)  # the content last loaded or refused

    def _file_stamp(self) -> tuple[int, ...] | None:
        """What changes with any write: modification and change times (a write that restores the modification
        time still moves the change time), size, inode (a rename)."""
        try:
            st = self.path.stat()
            return (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)
        except OSError:
            return None

    def current(self) -> Policy:
        now = self._clock()
        if now < self._next_check:
            return self._policy
        with self._lock:
            self._next_check = now + self.check_every_s
            stamp = self._file_stamp()
            if stamp is None or (stamp == self._stamp and self._seen is None):
                return self._policy
            try:
                text = read_policy_file(self.path)
            except ConfigError as exc:
                self._refuse(exc, stamp)
                return self._policy
            if self._file_stamp() != stamp:  # written to while being read: look again at the next check
                return self._policy
            digest = _digest(text)
            if digest == self._digest:  # rewritten with what is already in force (or was refused): nothing new
                self._stamp, self._seen = stamp, None
                return self._policy
            if self._seen is None or self._seen[0] != digest:
                self._seen = (digest, now)  # new content: load it once it has stayed the same for the settle time
                if self.settle_s > 0:
                    return self._policy
            if now - self._seen[1] >= self.settle_s:
                self._reload(text, stamp, digest)
            return self._policy

    def _reload(self, text: str, stamp, digest: str) -> None:
        self._stamp, self._seen, self._digest = stamp, None, digest
        try:
            policy = parse(text, str(self.path))
            missing = sorted(self._sections - _sections(text))
            if missing:
                raise ConfigError(
                    f"{self.path}: incomplete, without {', '.join(missing)} (a file still being written? write it "
                    "whole and replace the old one by rename; to drop a section on purpose, leave it empty)"
                )
        except Exception as exc:  # noqa: BLE001 (whatever the file holds, a decision never fails on it)
            self._refuse(exc, stamp)
            return
        self._policy, self._sections, self.last_error = policy, _sections(text), None
        log.info("routing policy reloaded: %s", policy.version)

    def _refuse(self, exc: Exception, stamp) -> None:
        self._stamp, self._seen = stamp, None
        if not isinstance(exc, ConfigError):
            exc = ConfigError(f"{self.path}: {type(exc).__name__}: {_first_line(exc)}")
        if self.last_error != str(exc):
            log.error("routing policy not reloaded, keeping %s: %s", self._policy.version, exc)
        self.last_error = str(exc)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _sections(text: str) -> frozenset[str]:
    """The top-level keys of a policy text, and `breakers.device` / `breakers.cloud` where present; empty when it
    does not parse (the full parse says why)."""
    try:
        doc = load_yaml(text)
    except ConfigError:
        return frozenset()
    if not isinstance(doc, dict):
        return frozenset()
    keys = {str(k) for k in doc}
    breakers = doc.get("breakers")
    if isinstance(breakers, dict):
        keys |= {f"breakers.{b}" for b in ("device", "cloud") if b in breakers}
    return frozenset(keys)


def write_policy(path: Path | str, text: str) -> None:
    """Replace a policy file whole: write a temporary file beside it, then rename it over the old one, so a
    router reloading it never reads half of it."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
