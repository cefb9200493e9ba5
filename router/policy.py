"""The routing policy as a file: capability matrix, calibrated thresholds, shadow mode, breakers.

`PolicyStore` hot-reloads it: each decision asks for the current policy; when the file changed
(checked at most every `check_every_s`), it is parsed and validated again. A bad file is rejected
with a logged reason and the last good policy stays. Each load stamps a `policy_version`: the
file's own `version` plus the first 8 hex digits of its SHA-256, so two edits under one version
number are still told apart in the events.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from routerscope.errors import ConfigError

log = logging.getLogger("routerscope.router.policy")
DEFAULT_POLICY = Path(__file__).with_name("default_policy.yaml")
VALIDATORS = ("label", "json", "regex")


@dataclass(frozen=True)
class Capability:
    supported: bool
    max_input_tokens: int = 0
    max_output_tokens: int = 0
    threshold: float = 0.7
    validator: str | None = None
    pattern: str | None = None  # for validator: regex

    def admits(self, input_tokens: int, output_tokens: int) -> bool:
        return self.supported and input_tokens <= self.max_input_tokens and output_tokens <= self.max_output_tokens


@dataclass(frozen=True)
class BreakerPolicy:
    """A boundary's breaker (seed 000: "云侧连续失败或 P90 突增时全量走端侧 … 端侧模型加载失败、内存不足或回退率
    连续超标时全量上云"). Besides the sliding failure rate: the cloud breaker opens when the cloud's 5-minute p90
    exceeds `p90_spike_factor` × `p90_baseline_ms` (over at least `p90_min_samples` calls); the device breaker
    opens when its fallback rate exceeds `fallback_rate_limit` for `fallback_windows` consecutive windows of
    `fallback_window_s` (each with at least `fallback_min_n` device-entered requests). None: that trigger is off."""

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
class Policy:
    version: str
    capabilities: dict[str, Capability]
    pii_to_cloud: bool = False
    l1_enabled: bool = True
    commit_tokens: int = 120
    device_concurrency: int = 1  # seed 004 §6: a hard cap on concurrent device requests; the excess goes to the cloud
    shadow: frozenset[str] = frozenset()
    cloud_prices: dict[str, float] = field(default_factory=dict)  # cloud model -> USD per 1k tokens
    breakers: dict[str, BreakerPolicy] = field(default_factory=lambda: {"device": BreakerPolicy(), "cloud": BreakerPolicy()})

    def capability(self, task_type: str) -> Capability:
        return self.capabilities.get(task_type) or Capability(supported=False)


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
        if not isinstance(raw, dict):
            raise ConfigError(f"{source}: capabilities.{task_type} must be a mapping")
        try:
            cap = Capability(**raw)
        except TypeError as exc:
            raise ConfigError(f"{source}: capabilities.{task_type}: {exc}") from None
        if not 0 <= cap.threshold <= 1:
            raise ConfigError(f"{source}: capabilities.{task_type}.threshold {cap.threshold} is not in [0, 1]")
        if cap.validator is not None and cap.validator not in VALIDATORS:
            raise ConfigError(f"{source}: capabilities.{task_type}.validator must be one of {', '.join(VALIDATORS)}")
        caps[str(task_type)] = cap
    breakers = {}
    for boundary in ("device", "cloud"):
        raw = (doc.get("breakers") or {}).get(boundary) or {}
        try:
            breakers[boundary] = BreakerPolicy(**raw)
        except TypeError as exc:
            raise ConfigError(f"{source}: breakers.{boundary}: {exc}") from None
        b = breakers[boundary]
        if not (0 < b.failure_rate <= 1 and b.window_s > 0 and b.cooldown_s >= 0 and b.min_calls >= 1
                and (b.p90_spike_factor is None or b.p90_spike_factor > 0)
                and (b.fallback_rate_limit is None or 0 <= b.fallback_rate_limit <= 1)
                and b.fallback_windows >= 1 and b.fallback_window_s > 0):  # fmt: skip
            raise ConfigError(f"{source}: breakers.{boundary}: a value is out of range ({b})")
    concurrency = doc.get("device_concurrency", 1)
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
        raise ConfigError(f"{source}: device_concurrency must be an integer >= 1")
    prices = doc.get("cloud_prices_usd_per_1k_tokens") or {}
    if not isinstance(prices, dict) or not all(isinstance(v, (int, float)) and v >= 0 for v in prices.values()):
        raise ConfigError(f"{source}: cloud_prices_usd_per_1k_tokens must map cloud model names to prices >= 0")
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
        shadow=frozenset(doc.get("shadow") or ()),
        cloud_prices={str(k): float(v) for k, v in prices.items()},
        breakers=breakers,
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
