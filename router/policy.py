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
import os
import threading
import time
import typing
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Protocol

import yaml

from instrumentation.events import ROLLOUT_STAGES
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
    # what a correct answer means, for the replay's judge (`router.judge`; docs/router.md#the-judge): labels, fields,
    # tool argument schemas or a language; None: judged by agreement with the cloud's answer, or not at all
    answer: dict | None = None

    def admits(
        self, input_tokens: int, output_tokens: int, tools: tuple[str, ...] | None = None, files: int | None = None
    ) -> bool:
        """The capability matrix's verdict: supported, within the input and output limits, every tool the
        request calls on the whitelist, and no more than one file of context where that is the condition
        (a request that does not say which tools or how many files is judged by the rest)."""
        return (
            self.supported
            and input_tokens <= self.max_input_tokens
            and output_tokens <= self.max_output_tokens
            and (self.tools is None or not tools or set(tools) <= set(self.tools))
            and not (self.single_file and files is not None and files > 1)
        )


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
    """The stage tracker's exit conditions (docs/sources.md#seed-004-7; `warehouse.analytics.review`)."""

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
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
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


def parse(text: str, source: str = "policy") -> Policy:
    """Parse and validate a policy file; ConfigError says what is wrong and where."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML ({exc})") from None
    if not isinstance(doc, dict) or "version" not in doc or not isinstance(doc.get("capabilities"), dict):
        raise ConfigError(f"{source}: expected a mapping with `version` and a `capabilities` mapping")
    caps = {}
    for task_type, raw in doc["capabilities"].items():
        cap = _record(Capability, raw, f"capabilities.{task_type}", source)
        if not 0 <= cap.threshold <= 1:
            raise ConfigError(f"{source}: capabilities.{task_type}.threshold {cap.threshold} is not in [0, 1]")
        if cap.validator is not None and cap.validator not in VALIDATORS:
            raise ConfigError(f"{source}: capabilities.{task_type}.validator must be one of {', '.join(VALIDATORS)}")
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
        if cap.answer is not None and not isinstance(cap.answer, dict):  # its keys are checked by router.judge
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
            and (b.p90_spike_factor is None or b.p90_spike_factor > 0)
            and (b.fallback_rate_limit is None or 0 <= b.fallback_rate_limit <= 1)
            and b.fallback_windows >= 1
            and b.fallback_window_s > 0
        ):
            raise ConfigError(f"{source}: breakers.{boundary}: a value is out of range ({b})")
    concurrency = doc.get("device_concurrency", 1)
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
        raise ConfigError(f"{source}: device_concurrency must be an integer >= 1")
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
        pii_to_cloud=bool(doc.get("pii_to_cloud", False)),
        l1_enabled=bool(doc.get("l1_enabled", True)),
        commit_tokens=int(doc.get("commit_tokens", 120)),
        device_concurrency=concurrency,
        shadow=frozenset(_names(doc.get("shadow") or (), "shadow", source)),
        cloud_prices={str(k): float(v) for k, v in prices.items()},
        breakers=breakers,
        rollout=rollout,
        rollout_limits=limits,
        device_tiers={str(k): dict(v) for k, v in tiers.items()},
    )


class PolicyStore:
    """The current policy of a file, reloaded when the file changes; the last good one on error."""

    def __init__(self, path: Path | str | None = None, check_every_s: float = 1.0, clock=time.monotonic):
        self.path = Path(path or os.environ.get("ROUTERSCOPE_POLICY") or DEFAULT_POLICY)
        self.check_every_s = check_every_s
        self._clock = clock
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._next_check = 0.0
        self.last_error: str | None = None
        text = self._read()
        self._policy = parse(text, str(self.path))  # the first load must succeed: no last good yet
        self._stamp = self._file_stamp()

    def _read(self) -> str:
        try:
            return self.path.read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read the routing policy {self.path}: {exc.strerror}") from None

    def _file_stamp(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat()
            return (st.st_mtime_ns, st.st_size)
        except OSError:
            return None

    def current(self) -> Policy:
        now = self._clock()
        if now < self._next_check:
            return self._policy
        with self._lock:
            self._next_check = now + self.check_every_s
            stamp = self._file_stamp()
            if stamp is None or stamp == self._stamp:
                return self._policy
            self._stamp = stamp
            try:
                self._policy = parse(self._read(), str(self.path))
                self.last_error = None
                log.info("routing policy reloaded: %s", self._policy.version)
            except ConfigError as exc:
                self.last_error = str(exc)
                log.error("routing policy not reloaded, keeping %s: %s", self._policy.version, exc)
            return self._policy
