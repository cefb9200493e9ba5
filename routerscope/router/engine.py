"""The decision engine (docs/sources.md#seed-000; the rules and their reasons: docs/router.md): a short-circuit
decision, a finite degrade chain, breakers.

Order: PII hard constraint → capability admission → device breaker → latency gate → device
concurrency cap → device attempt judged against the task type's declared answer (or its output validator,
`routerscope.router.answers`) and its calibrated threshold → default; every cloud answer is checked the same way
before it is handed on. `fallback_type` and `reason` are set where the decision is taken.

The budget only subtracts (docs/sources.md#seed-000: "路由层只做减法"): every level's timeout is its share of the budget
*remaining when it starts* — L0 device 0.7, L1 device degraded (once) 0.3, L2 cloud small 0.5, L3
cloud large 0.8 — and never more than what remains minus L4's 50 ms, so a request takes at most
`deadline_ms - elapsed_ms + 50 ms` whatever the backends do: the router enforces it (a backend that
does not declare `honours_deadline` runs on a bounded guard pool and is abandoned at its timeout,
`routerscope.router.guard`). L4 (the canned answer) ends the chain and is bounded by 50 ms. The device's ETA
includes prefill; when neither the device nor the cloud fits, the output cap is lowered to what fits
(`reason = truncated`) before L4. At 30 % of the deadline spent, while the device streams L0 and
before the commit point, the device's finish is re-estimated from its observed TTFT and token rate;
if it no longer fits 90 % of what remains (of what remains of L0's own share, for an answer served whole, as
at the gate), the device is stopped and the cloud takes over (`fallback_type = timeout`,
`reason = latency_pressure`). A device answer streamed past the commit
point is never taken over and may run to the end of the remaining budget; if that cuts it, the
partial answer is served (`reason = truncated`) and its attempt logged as the `timeout` it was.

Every latency (the event's and each attempt's) is read from the router's injected clock, so a
simulated fleet's events carry simulated time. The event's `confidence` is the first device
attempt's (the one the threshold judged first), and the fallback's type and reason are that first
miss's: an L1 retry never mixes its confidence into calibration.

A PII-pinned request never reaches the cloud: its fallback is L4; over the device's window its input is
cut to it and it runs at L1. An open cloud breaker keeps
traffic on the device (its fallback is L4 too); an open device breaker sends traffic to the cloud
with `reason = device_unavailable`; a device at its concurrency cap sends the excess to the cloud
with `reason = device_busy`, never into a queue (docs/sources.md#seed-004-6). The cloud breaker also opens on a
p90 spike; the device breaker on a model load failure, out-of-memory, or a fallback rate over its
limit for consecutive windows; the p90 is judged against the cloud's learned usual p90 (the configured
baseline its floor), and a breaker that closes starts a fresh window. Breaker settings hot-reload with
the policy. In shadow mode the cloud serves the user with the whole budget while the device runs beside
it within the cap (docs/sources.md#seed-004-5); a PII request of a shadow task type is a live, pinned event.

Rollout stages (docs/sources.md#seed-004-7, `routerscope.router.policy`): a task type in `shadow` runs as above; in
`canary`
only the sessions of its cohort (a stable hash of the session id) may enter the device, the others go
to the cloud with `reason = policy_cloud`, as does every request of a `cloud_only` task; `full` is the
chain above. The hard constraint and the capability matrix still come first, and the cloud remains the
fallback in every stage. Each event records the request's `rollout_stage` (`cloud_only` for a session
outside a canary cohort), what the device measured (`device_stats`, from the backend) and what the
request would have cost served by the cloud alone (`all_cloud_cost_usd`: input plus output tokens at
the L2 model's price, when the policy has prices). Shadow disagreements, and canary requests whose
device answer the cloud replaced with a different one, go to `on_divergence` as `Divergence` samples
with both texts: the caller keeps them with the request texts (docs/sources.md#seed-004-5), never in events.

`Router.route(request)` returns the response and the decision event (`routerscope.contract.events`);
events also go to `on_event`, breaker transitions to `on_breaker_event`. No request or answer text
ever enters an event.
"""

from __future__ import annotations

import bisect
import hashlib
import inspect
import logging
import math
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

from msgspec import UNSET, UnsetType

from routerscope.contract.events import (
    DECISION_SCHEMA_VERSIONS,
    OUTCOMES,
    THERMAL_STATES,
    Attempt,
    BreakerEvent,
    BreakerStates,
    DecisionEvent,
    DeviceStats,
    Outcome,
    new_decision,
)
from routerscope.contract.validation import DEVICE_STATS_MAXIMA
from routerscope.router import experiment
from routerscope.router.answers import check as check_answer
from routerscope.router.backends import (
    Cancel,
    CloudBackend,
    CloudResult,
    DeviceBackend,
    DeviceResult,
    Prompt,
    committed,
    complete_sentences,
    degrade_prompt,
    error_kind,
)
from routerscope.router.breaker import CLOSED, HALF_OPEN, OPEN, CircuitBreaker, ConsecutiveWindows, Transition
from routerscope.router.guard import ABANDONED, DONE, RAISED, Guard, honours_deadline
from routerscope.router.policy import Capability, Policy, PolicySource, PolicyStore

UTC = timezone.utc  # noqa: UP017 (datetime.UTC is Python 3.11+; routerscope.router runs on 3.10 too)

log = logging.getLogger("routerscope.router")
LEVEL_BUDGET = {0: 0.7, 1: 0.3, 2: 0.5, 3: 0.8}  # share of the budget remaining when the level starts
L4_MS = 50.0  # L4's bound, reserved out of every other level's timeout
DAY_MS, MAX_TOKENS = 86_400_000, 10_000_000  # the contract's ranges of milliseconds and tokens
MAX_COUNTED_CHARS = 200_000  # longer inputs are not tokenized on the request's thread (≈ 100 ms on Gemma's)
MIN_LEVEL_MS = 1.0  # a level given less than this is skipped (no backend answers in under a millisecond)
DECISION_POINT = 0.3  # share of the deadline spent when the router re-judges a streaming L0
CANNED = "Sorry, I can't answer that right now."
GATE_SHARE = 0.9  # stay on device if its ETA fits in 90 % of the remaining budget
CLOUD_WINDOW_S = 300.0
BASELINE_WINDOW_S = 1800.0  # the p90 spike's learned baseline: the cloud's p90 over the 30 minutes before the window
LONG_BASELINE_S = 86400.0  # ... and over the day before the last hour, which a slow ramp cannot drag along
LONG_BASELINE_LAG_S = 3600.0
DEFAULT_CLOUD_P90_MS = 800.0
SCHEMA_VERSION = DECISION_SCHEMA_VERSIONS[-1]  # the contract the router emits (v2: device_busy, truncated, abandoned)
LATE_MS = 10.0  # a backend's answer later than its timeout by more than this is dropped, never served
YIELD_S = 0.25  # how long a live request waits for a shadow run asked to yield (the real device: 2-85 ms, docs/router.md)


@dataclass(frozen=True)
class Request:
    task_type: str
    text: str
    session_id: str
    deadline_ms: int = 8000
    elapsed_ms: int = 0
    has_pii: bool = False
    network: str = "wifi"
    device_tier: str | None = None
    input_tokens: int | None = None
    expected_output_tokens: int | None = None  # the gateway's estimate; None: the task's output cap
    request_id: str | None = None
    app_id: str | None = None
    messages: tuple[dict, ...] | list[dict] | None = (
        None  # chat messages (system prompt + history); `text` becomes them
    )
    tools: tuple[str, ...] | None = None  # the tools a tool call would use (capability matrix: the whitelist)
    files: int | None = None  # how many files a code request's context spans (capability matrix: single file)

    def __post_init__(self):
        if self.messages is not None:  # the backends send the messages; everything else reads them as text
            object.__setattr__(self, "text", Prompt(self.messages))


@dataclass(frozen=True)
class Divergence:
    """A shadow or canary disagreement (docs/sources.md#seed-004-5 "分歧样本"): for the review and the replay. The texts
    belong in the request-text store; only the hashes may travel further."""

    request_id: str
    task_type: str
    stage: str
    input_tokens: int
    device_text: str
    cloud_text: str

    @property
    def device_hash(self) -> str:
        return answer_hash(self.device_text)

    @property
    def cloud_hash(self) -> str:
        return answer_hash(self.cloud_text)


def answer_hash(text: str) -> str:
    """A short hash of an answer after the shadow's normalisation (equal answers, equal hashes)."""
    return hashlib.sha256(normalise(text).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Response:
    text: str
    level: int
    served_by: str  # device | cloud | fallback
    partial: bool = False  # a device answer cut to its last complete sentence (reason = truncated)


class SlidingP90:
    """p90 of cloud latencies over the last `window_s` seconds (docs/router.md)."""

    def __init__(self, window_s: float = CLOUD_WINDOW_S, clock: Callable[[], float] = time.monotonic):
        self.window_s, self._clock = window_s, clock
        self._samples: deque[tuple[float, float]] = deque()
        self._sorted: list[float] = []
        self._lock = threading.Lock()

    def add(self, ms: float, at: float | None = None) -> None:
        """One sample, taken now (or at `at`, on the same clock: samples arrive in time order)."""
        with self._lock:
            now = self._clock()
            self._samples.append((now if at is None else at, ms))
            bisect.insort(self._sorted, ms)
            self._trim(now)

    def _trim(self, now: float) -> None:
        while self._samples and self._samples[0][0] < now - self.window_s:
            _, old = self._samples.popleft()
            del self._sorted[bisect.bisect_left(self._sorted, old)]

    def count(self) -> int:
        with self._lock:
            self._trim(self._clock())
            return len(self._sorted)

    def clear(self) -> None:
        with self._lock:
            self._samples.clear()
            self._sorted.clear()

    def p90(self, default: float = DEFAULT_CLOUD_P90_MS) -> float:
        with self._lock:
            self._trim(self._clock())
            if not self._sorted:
                return default
            return self._sorted[min(len(self._sorted) - 1, int(0.9 * len(self._sorted)))]


class BaselineP90:
    """The cloud's usual p90 (docs/router.md, "p90 spike"), fed only while the cloud's breaker is closed (open
    periods and trials are not the usual). Two horizons, and the lower one counts:

    * short: the `window_s` before the last `lag_s` (the spike window itself never raises its own baseline);
    * long: the `long_s` before the last `long_lag_s` (by default the day before the last hour), kept as a
      bounded sample per hour, so a slow ramp (900 ms → 6 s over 30 minutes) that the short horizon follows is
      still judged against what the cloud did before it began.

    None until the short horizon holds `min_samples`; the long one counts once it holds them. After the
    breaker settles on a new level (`settle`), that level is the baseline until both horizons refill."""

    HOURLY_SAMPLE = 1024  # samples kept per hour of the long horizon at most (thinned evenly past that)

    def __init__(
        self,
        window_s: float = BASELINE_WINDOW_S,
        lag_s: float = CLOUD_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
        long_s: float = LONG_BASELINE_S,
        long_lag_s: float = LONG_BASELINE_LAG_S,
    ):
        self.window_s, self.lag_s, self._clock = window_s, lag_s, clock
        self.long_s, self.long_lag_s = long_s, long_lag_s
        self._recent: deque[tuple[float, float]] = deque()  # still inside the spike window
        self._window = SlidingP90(window_s + lag_s, clock)  # trimmed at now - lag - window
        self._hours: dict[int, list] = {}  # hour index -> [count, reservoir]
        self._pinned: float | None = None  # the level a settled breaker moved to
        self._settled = False  # a level was settled on: the cloud's usual is known, no cold start any more
        self._long_cache: tuple | None = None
        self._lock = threading.Lock()

    def add(self, ms: float) -> None:
        with self._lock:
            now = self._clock()
            self._recent.append((now, ms))
            key = int(now // 3600)
            hour = self._hours.get(key)
            if hour is None:
                hour = self._hours[key] = [0, [], 1]  # count, sample, stride
            hour[0] += 1
            if hour[0] % hour[2] == 0:  # every stride-th sample; the stride doubles when the sample is full
                sample = hour[1]
                sample.append(ms)
                if len(sample) >= self.HOURLY_SAMPLE:
                    del sample[::2]
                    hour[2] *= 2

    def settle(self, level_ms: float) -> None:
        """The cloud has moved to `level_ms` for good: forget both horizons and take it as the baseline."""
        with self._lock:
            self._recent.clear()
            self._window.clear()
            self._hours.clear()
            self._long_cache = None
            self._pinned = level_ms
            self._settled = True

    def _long_p90(self, now: float, min_samples: int) -> float | None:
        """The long horizon's p90 over whole past hours; those never change once past, so it is computed once
        per hour (cached by the hours it spans)."""
        cache = self._long_cache
        if cache is not None and cache[0] <= now < cache[1] and cache[2] == min_samples:
            return cache[3]
        first, last = (now - self.long_lag_s - self.long_s) // 3600, (now - self.long_lag_s) // 3600
        for h in [h for h in self._hours if h < first]:
            del self._hours[h]
        value = self._weighted_p90(first, last, min_samples)
        hour = now // 3600 * 3600  # valid until the next whole hour on this clock (the spans move only then)
        self._long_cache = (hour, hour + 3600, min_samples, value)
        return value

    def _weighted_p90(self, first: float, last: float, min_samples: int) -> float | None:
        weighted: list[tuple[float, float]] = []
        total = 0
        for h, (count, sample, _) in self._hours.items():
            if first <= h < last and sample:
                total += count
                weighted.extend((ms, count / len(sample)) for ms in sample)
        if total < min_samples:
            return None
        weighted.sort()
        target, run = 0.9 * total, 0.0
        for ms, w in weighted:
            run += w
            if run > target:
                return ms
        return weighted[-1][0]

    def has_day(self, min_samples: int) -> bool:
        """Whether the baseline stands on the day's history (the long horizon holds `min_samples`) or on a level the
        breaker settled on: not a cold start."""
        with self._lock:
            return self._settled or self._long_p90(self._clock(), min_samples) is not None

    def p90(self, min_samples: int) -> float | None:
        with self._lock:
            now = self._clock()
            horizon = now - self.lag_s
            while self._recent and self._recent[0][0] <= horizon:
                at, ms = self._recent.popleft()
                if at > horizon - self.window_s:
                    self._window.add(ms, at)
            long = self._long_p90(now, min_samples)
            if self._window.count() < min_samples:  # quiet lately: the day's baseline, else a settled level
                return long if long is not None and self._pinned is None else self._pinned
            self._pinned = None
            short = self._window.p90()
            return short if long is None else min(short, long)


def latency_gate(
    remaining_ms: float, device_eta_ms: float, cloud_p90_ms: float, device_cut_ms: float | None = None
) -> str:
    """device if its ETA fits in 90 % of the time the device is given before it is cut (`device_cut_ms`: L0's
    own share for an answer served whole, docs/router.md "The latency gate, with prefill"; default what is
    left); else cloud if its p90 fits; else truncate."""
    if device_eta_ms <= GATE_SHARE * (remaining_ms if device_cut_ms is None else device_cut_ms):
        return "device"
    if cloud_p90_ms <= remaining_ms:
        return "cloud"
    return "truncate"


def device_eta_ms(ttft_ms: float, expected_output_tokens: int, tps: float, prefill_ms: float = 0.0) -> float:
    """The device's finish: time to first token, plus prefilling the input (docs/router.md: a long prompt's
    prefill is most of a small model's time), plus decoding the expected output."""
    return ttft_ms + prefill_ms + expected_output_tokens / max(tps, 1e-6) * 1000


def prefill_ms(input_tokens: int, prefill_tps: float | None) -> float:
    """`input_tokens / prefill_tps` in ms; 0 for a device that does not report a prefill rate."""
    if not prefill_tps or prefill_tps <= 0:
        return 0.0
    return input_tokens / prefill_tps * 1000


def tokens_that_fit(remaining_ms: float, ttft_ms: float, prefill: float, tps: float) -> int:
    """docs/sources.md#seed-000 "裁剪输出": the output cap that still fits 90 % of what the device is *given* (L0's
    share of what remains, `level_timeout_ms(0, …)`) after its first token and prefill, at the device's rate
    (0: none), so a truncated answer finishes inside its own timeout."""
    room_ms = GATE_SHARE * level_timeout_ms(0, remaining_ms) - ttft_ms - prefill
    return max(0, int(room_ms * max(tps, 0.0) / 1000))


def level_timeout_ms(level: int, remaining_ms: float) -> float:
    """A level's timeout: its share of the budget remaining when it starts, never more than what
    remains minus L4's 50 ms (docs/sources.md#seed-000: each level its own timeout, the router only subtracts)."""
    return min(LEVEL_BUDGET[level] * remaining_ms, remaining_ms - L4_MS)


def device_fits(
    remaining_ms: float, elapsed_ms: float, tokens: int, ttft_ms: float, expected_tokens: int, fallback_tps: float
) -> bool:
    """The decision point's re-estimate: the device's time to finish from its observed token rate
    (after the first token; the device's estimate when fewer than two tokens were seen) fits in 90 % of
    the remaining budget."""
    decode_ms = elapsed_ms - ttft_ms
    per_token_ms = decode_ms / (tokens - 1) if tokens >= 2 and decode_ms > 0 else 1000 / max(fallback_tps, 1e-6)
    return max(0, expected_tokens - tokens) * per_token_ms <= GATE_SHARE * remaining_ms


def _iso_now() -> datetime:
    return datetime.now(UTC)


class _Budget:
    """The request's budget on the router's clock: what remains, and each level's timeout."""

    def __init__(self, clock: Callable[[], float], deadline_ms: float, elapsed_ms: float):
        self._clock = clock
        self.started = clock()
        self.deadline_ms, self.elapsed_ms = float(deadline_ms), float(elapsed_ms)
        self.total_ms = max(0.0, self.deadline_ms - self.elapsed_ms)

    def spent_ms(self) -> float:
        return (self._clock() - self.started) * 1000

    def remaining_ms(self) -> float:
        return self.total_ms - self.spent_ms()

    def timeout_ms(self, level: int) -> float:
        return level_timeout_ms(level, self.remaining_ms())

    def decision_point_in_ms(self) -> float:
        """How far from now the deadline is 30 % spent (0 when it already is)."""
        return max(0.0, DECISION_POINT * self.deadline_ms - self.elapsed_ms - self.spent_ms())


@dataclass
class _Trace:
    attempts: list[Attempt] = field(default_factory=list)
    cloud_calls: int = 0
    confidence: float | None = None
    confidence_source: str = "none"
    device_judged: bool = False  # the first device attempt has set confidence
    ttft_ms: float | None = None
    output_tokens: int = 0
    cloud_model: str | None = None
    input_tokens: int = 0
    prices: dict | None = None  # the policy's cloud prices (USD per 1k tokens); None: cost not reported
    cost_usd: float = 0.0
    device_stats: dict | None = None  # merged over the request's device attempts
    device_text: str | None = None  # the device's answer that a quality miss discarded (divergence samples)
    request_id: str = ""
    assignment: experiment.Assignment | None = None  # the closed loop's canary arm (routerscope.router.experiment)
    answer_check: str | None = None  # the first serve-time check an answer failed (docs/router.md)
    device_input_tokens: int | None = None  # the input's size the router judged the device's window by

    def measure(self, stats: dict | None) -> None:
        """Merge one device attempt's ledger: the highest peak memory, a cold start if any attempt had one,
        the latest rates and thermal state."""
        if not stats:
            return
        merged = dict(self.device_stats or {})
        for key, value in stats.items():
            if value is None and key in merged:
                continue
            merged[key] = value
        if self.device_stats:
            peaks = [
                v
                for v in (finite(self.device_stats.get("peak_mem_mb"), -1.0), finite(stats.get("peak_mem_mb"), -1.0))
                if v >= 0
            ]
            merged["peak_mem_mb"] = max(peaks) if peaks else None
            if self.device_stats.get("cold_start"):
                merged["cold_start"], merged["load_ms"] = True, self.device_stats.get("load_ms")
        self.device_stats = merged

    def charge(self, model: str, tokens_out: int) -> None:
        """A completed cloud call costs its input plus output tokens at the model's price."""
        if self.prices is not None:
            self.cost_usd += self.prices.get(model, 0.0) * (self.input_tokens + tokens_out) / 1000

    def add(self, level: int, outcome: Outcome, latency_ms: float, abandoned: bool = False) -> None:
        latency = max(0.0, float(latency_ms))
        if abandoned:  # the router gave up on the call at its timeout (docs/router.md, "abandoned")
            self.attempts.append(Attempt(level=level, outcome=outcome, latency_ms=latency, abandoned=True))
        else:
            self.attempts.append(Attempt(level=level, outcome=outcome, latency_ms=latency))


@dataclass(slots=True)
class _DeviceCall:
    """One device call's settings (`Router._device`): its level and output cap, the commit point, the decision
    point's judge, the input cut to the device's window, an explicit timeout, and how it is run."""

    level: int
    max_tokens: int
    commit_tokens: int
    decide: Callable[[float, int, float], bool] | None = None
    prompt: str | None = None
    timeout_ms: float | None = None
    whole: bool = False  # a structured answer: whole or nothing, never committed early
    share_level: int | None = None  # the level whose share of the budget it runs with (default its own)
    cancel: Cancel | None = None
    on_late_end: Callable[[], None] | None = None
    shadow: bool = False  # a shadow run: its outcome never reaches the device breaker


@dataclass(slots=True)
class _Shadow:
    """A shadow request's device side: its slot (or why it has none), its own trace and how its call ended."""

    slot: Cancel | str
    dev: _Trace
    device_timeout_ms: float
    result: DeviceResult | None = None
    latency_ms: float = 0.0
    abandoned: bool = False

    @property
    def blocked(self) -> str | None:
        """Why the device could not run beside the cloud (`device_busy`, `device_unavailable`), None when it ran."""
        return self.slot if isinstance(self.slot, str) else None


@dataclass(slots=True)
class _Request:
    """One request's context through the router's paths (gate, device, degrade chain, shadow, canary, commit, L4):
    the request, its policy and capability, its budget clock, the attempts so far (`trace`), the decision's
    fields as they are set (`entered`, `fallback_type`, `reason`) and a shadow request's device side."""

    req: Request
    policy: Policy
    cap: Capability
    budget: _Budget
    trace: _Trace
    counted: int | None  # the input in the device model's own tokens, when counted
    input_tokens: int
    expected_out: int
    max_tokens: int
    stage: str
    pinned: bool
    mode: str
    no_time: bool  # not even L0 fits before L4's 50 ms
    entered: bool = False
    fallback_type: str = "none"
    reason: str = "default"
    shadow: _Shadow | None = None


def accepts_keyword(fn, name: str, explicit: bool = False) -> bool:
    """Whether `fn` takes the keyword `name` (or any keyword): optional backend features are offered only then.
    `explicit`: only a parameter of that name counts (an object such as a `Cancel` is never handed to a
    `**kwargs` that may forward it over a pipe as JSON, as the model worker does)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    if name in params:
        return True
    return not explicit and any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


INF = float("inf")
TEMPLATE_TOKENS_PER_MESSAGE, TEMPLATE_TOKENS = 8, 2  # a chat template's turn markers (as LlamaDevice counts them)


def token_bound(text: str) -> int:
    """An upper bound on the tokens `text` takes in a byte-fallback BPE model's window without its tokenizer
    (docs/router.md, "Personal data fits the device"): one token per UTF-8 byte at most (a piece missing from
    the vocabulary falls back to its bytes; digits are one token each in Gemma's), plus the chat template's
    markers. Measured against Gemma's own tokenizer by `bench/token_bound.py`."""
    messages = getattr(text, "messages", None)
    markers = TEMPLATE_TOKENS_PER_MESSAGE * (len(messages) if messages else 1) + TEMPLATE_TOKENS
    return len(str(text).encode("utf-8", "surrogatepass")) + markers


def finite(value, default: float) -> float:
    """`value` as a float when it is a finite number (not a bool), else `default`: what a backend or a gateway
    hands the router is never trusted to be a number."""
    kind = type(value)
    if kind is float:  # the common case first: the router calls this several times a request
        return value if math.isfinite(value) else default
    if kind is int:
        return float(value) if -1e300 < value < 1e300 else default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    value = float(value)
    return value if math.isfinite(value) else default


def sane_device_result(result) -> DeviceResult:
    """A backend's result with every field the router reads within its type and range; anything else is a
    device error (a text that is not text, an unknown outcome). A confidence that is not a finite number in
    [0, 1] reads 0: it can never pass a threshold."""
    if not isinstance(result, DeviceResult) or not isinstance(result.text, str) or result.outcome not in OUTCOMES:
        return DeviceResult("", None, "none", 0, 0.0, 0.0, "error")
    c, n, t, lat = result.confidence, result.tokens_out, result.ttft_ms, result.latency_ms
    if (  # the common case: every field already in range (NaN fails every comparison)
        (c is None or (type(c) is float and 0.0 <= c <= 1.0))
        and type(n) is int
        and n >= 0
        and type(t) in (float, int)
        and 0 <= t < INF
        and type(lat) in (float, int)
        and 0 <= lat < INF
    ):
        return result
    confidence = result.confidence
    if confidence is not None:
        confidence = finite(confidence, 0.0)
        confidence = confidence if 0.0 <= confidence <= 1.0 else 0.0
    tokens = result.tokens_out if isinstance(result.tokens_out, int) and not isinstance(result.tokens_out, bool) else 0
    ttft, latency = finite(result.ttft_ms, 0.0), finite(result.latency_ms, 0.0)
    clean = (confidence, max(0, tokens), max(0.0, ttft), max(0.0, latency))
    if clean == (result.confidence, result.tokens_out, result.ttft_ms, result.latency_ms):
        return result
    return replace(result, confidence=clean[0], tokens_out=clean[1], ttft_ms=clean[2], latency_ms=clean[3])


def sane_cloud_result(result) -> CloudResult:
    if not isinstance(result, CloudResult) or not isinstance(result.text, str) or result.outcome not in OUTCOMES:
        return CloudResult("", 0.0, "error")
    n, lat = result.tokens_out, result.latency_ms
    if type(n) is int and n >= 0 and type(lat) in (float, int) and 0 <= lat < INF:
        return result
    tokens = result.tokens_out if isinstance(result.tokens_out, int) and not isinstance(result.tokens_out, bool) else 0
    return replace(result, tokens_out=max(0, tokens), latency_ms=max(0.0, finite(result.latency_ms, 0.0)))


class Router:
    def __init__(
        self,
        device: DeviceBackend,
        cloud: CloudBackend,
        *,
        policy: PolicySource | None = None,
        instance_id: str = "router-1",
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = _iso_now,
        on_event: Callable[[DecisionEvent], None] | None = None,
        on_breaker_event: Callable[[BreakerEvent], None] | None = None,
        on_divergence: Callable[[Divergence], None] | None = None,
        enforce: bool | None = None,
        guard_workers: int = 8,
        max_late: int = 4,
    ):
        """`enforce`: hold every backend call to its level's timeout on the router's clock (default: when
        the clock is the real `time.monotonic`; a simulated clock is moved by its backends instead). A
        backend without `honours_deadline = True` then runs on a guard pool of `guard_workers` threads and
        is abandoned at its timeout; past `max_late` abandoned calls still running, new calls to that
        backend fail at once (docs/router.md)."""
        self.device, self.cloud = device, cloud
        self.policy = policy or PolicyStore()
        self.instance_id = instance_id
        self._clock = clock
        self._now = now
        self.on_event = on_event or (lambda e: None)
        self.on_breaker_event = on_breaker_event or (lambda e: None)
        self.on_divergence = on_divergence or (lambda d: None)
        p = self.policy.current()
        self.device_breaker = CircuitBreaker(
            "device", p.breakers["device"], clock=clock, on_transition=self._transition
        )
        self.cloud_breaker = CircuitBreaker("cloud", p.breakers["cloud"], clock=clock, on_transition=self._transition)
        self.cloud_latency = SlidingP90(clock=clock)
        self.cloud_usual = BaselineP90(clock=clock)
        self._fallback_windows = ConsecutiveWindows()
        self._fallback_lock = threading.Lock()
        self._slots = threading.Lock()  # guards the in-flight counts only: nothing ever waits on the device
        self._yielded = threading.Condition(self._slots)  # a shadow run ended (a live request may wait YIELD_S)
        self.device_in_flight = 0  # live device calls running, an abandoned one until it really ends
        self.shadow_in_flight = 0  # shadow runs: only on a device no live request wants (docs/router.md)
        self._shadow_cancels: set[Cancel] = set()
        self._device_cancels = accepts_keyword(device.generate, "cancel", explicit=True)
        self._device_whole = accepts_keyword(device.generate, "commit_on_sentence")
        self._counts_tokens = callable(getattr(device, "count_tokens", None))
        self._slow_trials: list[tuple[float, float]] = []  # half-open cloud trials that answered at spike latency
        self._cloud_open_for_latency = False  # the cloud breaker is open for a p90 spike, not for failures
        self._trial_slow = False  # the last half-open cloud trial failed for its latency alone
        self._device_decides = accepts_keyword(
            device.generate, "decide"
        )  # a device without the decision point still works
        self.enforce = clock is time.monotonic if enforce is None else bool(enforce)
        self.device_guard = Guard("device", guard_workers, max_late)
        self.cloud_guard = Guard("cloud", guard_workers, max_late)
        self._device_guarded = self.enforce and not honours_deadline(device)
        self._cloud_guarded = self.enforce and not honours_deadline(cloud)
        # past the commit point the device may run to the end of the budget: only a device that stops by
        # itself is offered that (a guarded one is abandoned at its level's timeout)
        self._device_commits = accepts_keyword(device.generate, "commit_timeout_ms") and not self._device_guarded
        self.on_shadow_event: Callable[[DecisionEvent], None] | None = None
        self.experiments: experiment.ExperimentSource | None = None  # the closed loop's canary (docs/loop.md)

    @property
    def abandoned_total(self) -> int:
        """Backend calls abandoned at their timeout since the router started (both boundaries)."""
        return self.device_guard.abandoned_total + self.cloud_guard.abandoned_total

    @property
    def abandoned_running(self) -> int:
        """Abandoned backend calls still running now (bounded by `max_late` per boundary)."""
        return self.device_guard.late + self.cloud_guard.late

    def _transition(self, t: Transition) -> None:
        if t.boundary == "cloud" and t.to_state == CLOSED:
            self.cloud_latency.clear()  # a closed breaker starts a fresh window: no reopening from older samples
        if t.boundary == "cloud" and t.to_state == OPEN:
            # slowness, not failures: requests with no device to go to may still use the cloud while it fits
            self._cloud_open_for_latency = t.trigger == "cloud_p90_spike" or (
                t.from_state == HALF_OPEN and self._trial_slow and t.trigger == "trial_failed"
            )
        self._send(
            self.on_breaker_event,
            BreakerEvent(
                schema_version=1,
                event_id=str(uuid.uuid4()),
                event_time=self._now(),
                instance_id=self.instance_id,
                boundary=t.boundary,
                from_state=t.from_state,
                to_state=t.to_state,
                failure_rate=min(1.0, max(0.0, t.failure_rate)),
                window_s=t.window_s,
                trigger=t.trigger[:64],
                seq=t.seq,
            ),
        )

    @staticmethod
    def _send(sink, event) -> None:
        """Hand an event to a sink the caller gave; a sink that raises is logged, never a failed request (nor a
        slot released twice on the way out)."""
        try:
            sink(event)
        except Exception:
            log.exception("an event sink failed; routing goes on")

    def device_failed(self, kind: str) -> None:
        """The device cannot serve (`load_failure`, `oom`): open its breaker at once (docs/sources.md#seed-000:
        "端侧不可用" is a far more serious failure than a high fallback rate). For the app that loads the model."""
        self.device_breaker.force_open(f"device_{kind}")

    # -- device admission: breaker, then the concurrency cap (a slot or the cloud, never a queue) -------
    def _enter_device(self, policy) -> str | None:
        """None when the device may run this live request (a slot is taken: release it); else the reason. The
        cap counts live calls, an abandoned one until it really ends, and the shadow runs of a device that cannot
        yield; a shadow run on a device that can is asked to yield at once (docs/sources.md#seed-004-5: shadow
        never touches the main path)."""
        if self.device_breaker.state == OPEN:
            return "device_unavailable"
        cap = policy.device_concurrency
        with self._slots:
            held = self.device_in_flight + (self._ignoring() if self._device_cancels else self.shadow_in_flight)
            if held >= cap:
                return "device_busy"
            self.device_in_flight += 1
            yielding = [c for c in self._shadow_cancels if not c.is_set()] if self._shadow_cancels else ()
        for cancel in yielding:
            cancel.set()
        if yielding and self.enforce and not self._yield(cap):
            self._release_device()  # the shadow run ignored its cancel: it still holds the device
            return "device_busy"
        if not self.device_breaker.allow():  # half-open with its one trial already out
            self._release_device()
            return "device_unavailable"
        return None

    def _ignoring(self) -> int:
        """Shadow runs asked to yield that are still running (under `_slots`): a backend that takes `cancel` and
        ignores it still holds the device, so they count against the cap (docs/router.md)."""
        return sum(1 for c in self._shadow_cancels if c.is_set())

    def _yield(self, cap: int) -> bool:
        """Wait up to YIELD_S for the shadow runs just asked to yield to end, while they and the live calls are
        over the cap; False when they did not (a backend that ignores `cancel`)."""
        deadline = time.monotonic() + YIELD_S
        with self._yielded:
            while self.device_in_flight + self._ignoring() > cap:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._yielded.wait(left)
        return True

    def _release_device(self) -> None:
        with self._slots:
            self.device_in_flight -= 1

    def _enter_shadow(self, policy) -> Cancel | str:
        """A shadow run's slot, on capacity live traffic does not need; the Cancel a live request sets to take the
        device back. A device that can yield (`cancel`) runs one shadow while no live request is on it; one that
        cannot only in a slot the cap leaves spare beyond one kept for live traffic (with `device_concurrency: 1`,
        never). Else the reason."""
        if self.device_breaker.state == OPEN:
            return "device_unavailable"
        cancel = Cancel()
        with self._slots:
            if self._device_cancels:
                busy = self.device_in_flight > 0 or self.shadow_in_flight >= 1
            else:
                held = self.device_in_flight + self.shadow_in_flight
                busy = self.shadow_in_flight >= 1 or held + 1 >= policy.device_concurrency
            if busy:
                return "device_busy"
            self.shadow_in_flight += 1
            self._shadow_cancels.add(cancel)
        if not self.device_breaker.allow():
            self._release_shadow(cancel)
            return "device_unavailable"
        return cancel

    def _release_shadow(self, cancel: Cancel) -> None:
        with self._yielded:
            self.shadow_in_flight -= 1
            self._shadow_cancels.discard(cancel)
            self._yielded.notify_all()

    def _estimates(self) -> tuple[float, float, float | None]:
        """The device's time to first token, decode and prefill rates as the gate reads them: an estimate that is
        not a finite non-negative number reads as a slow device (1 s, 1 token/s; no prefill rate), never as a
        reason to crash or to admit on hope."""
        device = self.device
        ttft, tps = getattr(device, "ttft_ms", None), getattr(device, "tps", None)
        prefill = getattr(device, "prefill_tps", None)
        if (  # the common case: finite positive floats (NaN fails every comparison)
            type(ttft) is float
            and type(tps) is float
            and 0 <= ttft < INF
            and 0 < tps < INF
            and (prefill is None or (type(prefill) is float and 0 < prefill < INF))
        ):
            return ttft, tps, prefill
        ttft, tps = finite(ttft, -1.0), finite(tps, -1.0)
        prefill = None if prefill is None else finite(prefill, -1.0)
        return (
            ttft if ttft >= 0 else 1000.0,
            tps if tps > 0 else 1.0,
            prefill if prefill is None or prefill > 0 else None,
        )

    def _count_tokens(self, text: str) -> int | None:
        """The input in the device model's own tokens, when the device has a tokenizer (None otherwise)."""
        if not self._counts_tokens:
            return None
        if len(text) > MAX_COUNTED_CHARS:  # tokenizing megabytes takes longer than a budget; the bound decides
            return None
        try:
            counted = self.device.count_tokens(text)  # type: ignore[attr-defined]  # optional: _counts_tokens
        except Exception:  # a tokenizer that fails is as good as none
            log.warning("the device could not count the input's tokens; a conservative bound is used")
            return None
        if counted is None:  # the device cannot count now (a model worker busy generating): the bound decides
            return None
        if isinstance(counted, bool) or not isinstance(counted, int) or counted < 0:
            log.warning("the device counted %r tokens; a conservative bound is used", counted)
            return None
        return max(1, counted)

    def _device_tokens(self, text: str, counted: int | None, input_tokens: int) -> int:
        """What the input takes of the device's window: its own tokenizer's count, else `token_bound` (an upper
        bound for any text), never less than the gateway's count."""
        if counted is not None:
            return counted
        return max(input_tokens, token_bound(text))

    def _device_room(self, cap, max_tokens: int) -> int | None:
        """The input the device can take: the capability's `max_input_tokens` for a task it supports, and the
        model's context (`context_tokens`) less the output budget; None when neither is known."""
        sizes = []
        context = getattr(self.device, "context_tokens", None)
        if context:
            sizes.append(int(context) - max_tokens)
        if cap.supported and cap.max_input_tokens:
            sizes.append(int(cap.max_input_tokens))
        return max(1, min(sizes)) if sizes else None

    def _cut_to(self, text: str, room: int, tokens: int) -> tuple[str, int]:
        """`text` cut (oldest history first, `degrade_prompt`) until it takes at most `room` of the window,
        re-counted after each cut; the cut text and its size."""
        share = room / max(tokens, 1)
        prompt, size = text, tokens
        if len(text) > MAX_COUNTED_CHARS:  # a few tokens per character at most: cut the rest before counting
            prompt = degrade_prompt(text, min(1.0, 4 * room / len(text)))
            text, share = prompt, room / max(1, self._device_tokens(prompt, self._count_tokens(prompt), 0))
        for _ in range(6):
            prompt = degrade_prompt(text, share)
            size = self._device_tokens(prompt, self._count_tokens(prompt), 0)
            if size <= room:
                break
            share *= 0.97 * room / size
        return prompt, size

    # -- the chain pieces ------------------------------------------------------------------------------
    def _device(
        self, trace: _Trace, req: Request, budget: _Budget, call: _DeviceCall
    ) -> tuple[DeviceResult, float, bool]:
        """One device call under its level's timeout (docs/router.md): `call.share_level`'s share of what remains
        when given (a context cut that runs with L0's share), else the level's own. `call.whole`: a structured
        answer, never committed early (no sentence commits it, no extension past the commit point).
        `call.on_late_end` runs when an abandoned call really ends (its slot is held until then). Returns the
        result, its latency on the router's clock and whether the router abandoned it. A `call.shadow` run's
        outcome never reaches the device breaker (docs/sources.md#seed-004-5: shadow never touches the main
        path)."""
        share = call.level if call.share_level is None else call.share_level
        timeout = max(0.0, budget.timeout_ms(share) if call.timeout_ms is None else call.timeout_ms)
        commit_tokens = call.max_tokens + 1 if call.whole else call.commit_tokens  # structured: no commit point
        kwargs: dict = dict(
            max_tokens=call.max_tokens, timeout_ms=timeout, degraded=call.level == 1, commit_tokens=commit_tokens
        )
        if call.prompt is not None:
            kwargs["degraded"] = False  # the router already cut the input to the device's window
        if call.whole and self._device_whole:
            kwargs["commit_on_sentence"] = False
        if call.cancel is not None and self._device_cancels:
            kwargs["cancel"] = call.cancel
        if call.decide is not None and self._device_decides:
            kwargs.update(decide=call.decide, decision_at_ms=budget.decision_point_in_ms())
        commit_limit = timeout
        if self._device_commits and call.level <= 1 and call.timeout_ms is None and not call.whole:
            # docs/sources.md#seed-000 "宁可让端侧跑完": past the commit
            # point, the whole remaining budget minus L4's 50 ms
            commit_limit = max(timeout, budget.remaining_ms() - L4_MS)
            kwargs["commit_timeout_ms"] = commit_limit
        text = req.text if call.prompt is None else call.prompt
        started = self._clock()
        result, abandoned = self._run_device(text, kwargs, timeout, started, call.on_late_end)
        result = sane_device_result(result)
        latency_ms = (self._clock() - started) * 1000
        if result.outcome == "ok":
            past = not call.whole and committed(result.tokens_out, result.text, commit_tokens)
            if latency_ms > (commit_limit if past else timeout) + LATE_MS:  # after its timeout: dropped, never served
                result = DeviceResult(
                    "",
                    result.confidence,
                    result.confidence_source,
                    0,
                    result.ttft_ms,
                    latency_ms,
                    "timeout",
                    stats=result.stats,
                )
        trace.measure(result.stats if isinstance(result.stats, dict) else None)
        if not call.shadow:  # a shadow run's outcome never reaches the device breaker
            self.device_breaker.record(result.outcome != "ok", trigger="device_" + result.outcome)
            if result.outcome == "error" and result.error_kind in ("load_failure", "oom"):
                self.device_failed(result.error_kind)
            if abandoned and self.device_guard.late >= min(
                self.device_guard.max_late, self.policy.current().device_concurrency
            ):
                # every slot the cap allows is held by a call the device never finished: it is not answering
                self.device_breaker.force_open("device_not_answering")
        if trace.ttft_ms is None:
            trace.ttft_ms = result.ttft_ms
        if not trace.device_judged:  # the event's confidence is the first device attempt's
            trace.device_judged = True
            trace.confidence, trace.confidence_source = result.confidence, result.confidence_source
        trace.output_tokens = result.tokens_out
        return result, latency_ms, abandoned

    def _run_device(
        self, text: str, kwargs: dict, timeout: float, started: float, on_late_end: Callable[[], None] | None
    ) -> tuple[DeviceResult, bool]:
        """The device's `generate`, on the guard pool when the router must hold it to its timeout; a failure is a
        device error result, never an exception out of route(). The result and whether it was abandoned."""
        if not self._device_guarded:
            try:
                return self.device.generate(text, **kwargs), False
            except Exception as exc:  # a device backend's failure is a device error, never an exception out of route()
                return DeviceResult("", None, "none", 0, 0.0, 0.0, "error", error_kind=error_kind(exc)), False
        state, value = self.device_guard.run(
            lambda: self.device.generate(text, **kwargs), timeout / 1000, on_late_end=on_late_end
        )
        if state == DONE and isinstance(value, DeviceResult):
            return value, False
        if state == ABANDONED:
            spent = (self._clock() - started) * 1000
            return DeviceResult("", None, "none", 0, spent, spent, "timeout"), True
        if state == RAISED and isinstance(value, BaseException) and error_kind(value):
            return DeviceResult("", None, "none", 0, 0.0, 0.0, "error", error_kind=error_kind(value)), False
        # raised, not a result, or the guard full of late calls: a device error
        return DeviceResult("", None, "none", 0, 0.0, 0.0, "error"), False

    def _cloud_or_l4(
        self, ctx: _Request, allowed: bool = True, budget: _Budget | None = None, max_tokens: int | None = None
    ) -> Response:
        """The cloud chain when `allowed` (on `budget`, default the request's, for `max_tokens`, default the
        request's cap), else, or when it fails, L4."""
        return (self._cloud_chain(ctx, budget, max_tokens) if allowed else None) or self._l4(ctx.trace)

    def _cloud_chain(
        self, ctx: _Request, budget: _Budget | None = None, max_tokens: int | None = None
    ) -> Response | None:
        """L2 then L3; None when both failed or no time is left (the caller goes to L4)."""
        budget = ctx.budget if budget is None else budget
        max_tokens = ctx.max_tokens if max_tokens is None else max_tokens
        trace = ctx.trace
        for level in (2, 3):
            timeout_ms = budget.timeout_ms(level)
            if timeout_ms < MIN_LEVEL_MS:
                return None
            bypass = False
            if not self.cloud_breaker.allow():
                # open for slowness, not failures: a request with nowhere else to go than the canned answer
                # still gets the cloud when its recent p90 fits a level's timeout (docs/router.md)
                if not self._cloud_open_for_latency:
                    return None
                if self.cloud_latency.p90() > timeout_ms:
                    continue  # L3's larger share may hold it
                bypass = True
            result, latency_ms, abandoned = self._cloud_call(ctx, level, timeout_ms, max_tokens, bypass)
            if result.outcome == "ok":
                trace.charge(self.cloud.model_for(level), result.tokens_out)  # paid, served or not
                # the cloud's answer is checked as the device's is before it is handed on (docs/router.md)
                cut = result.tokens_out >= max_tokens
                failed = (
                    check_answer(ctx.cap, result.text, ctx.req.tools, cut)
                    if ctx.cap.answer or ctx.cap.validator
                    else None
                )
                if failed is not None:
                    trace.add(level, "validator_failed", latency_ms, abandoned)
                    trace.answer_check = trace.answer_check or failed.check
                    continue
            trace.add(level, result.outcome, latency_ms, abandoned)
            if result.outcome == "ok":
                trace.cloud_model = self.cloud.model_for(level)
                trace.output_tokens = result.tokens_out or trace.output_tokens
                return Response(result.text, level, "cloud")
        return None

    def _cloud_call(
        self, ctx: _Request, level: int, timeout_ms: float, max_tokens: int, bypass: bool = False
    ) -> tuple[CloudResult, float, bool]:
        """One cloud call under its level's timeout: the result, its latency on the router's clock, and
        whether the router abandoned it (docs/router.md). `bypass`: a call past a breaker open for slowness
        (its latency is kept; it is no trial)."""
        ctx.trace.cloud_calls += 1
        started = self._clock()
        abandoned = False
        text = ctx.req.text

        def call():
            return self.cloud.complete(text, level=level, max_tokens=max_tokens, timeout_ms=timeout_ms)

        if self._cloud_guarded:
            state, value = self.cloud_guard.run(call, timeout_ms / 1000)
            if state == DONE and isinstance(value, CloudResult):
                result = value
            elif state == ABANDONED:
                abandoned = True
                result = CloudResult("", (self._clock() - started) * 1000, "timeout")
            else:  # raised, not a result, or the guard full of late calls: an error attempt
                result = CloudResult("", 0.0, "error")
        else:
            try:
                result = call()
            except Exception:  # a cloud backend's failure is an error attempt, never an exception out of route()
                result = CloudResult("", 0.0, "error")
        result = sane_cloud_result(result)
        latency_ms = (self._clock() - started) * 1000
        if result.outcome == "ok" and latency_ms > timeout_ms + LATE_MS:  # too late: dropped, never served
            result = CloudResult("", latency_ms, "timeout")
        if bypass:
            if result.outcome == "ok":
                self.cloud_latency.add(latency_ms)
            elif result.outcome == "error":  # failing, not merely slow: no more calls past the breaker
                self._cloud_open_for_latency = False
        else:
            self._record_cloud(result, latency_ms)
        return result, latency_ms, abandoned

    def _record_cloud(self, result: CloudResult, latency_ms: float) -> None:
        """A cloud call's outcome into the cloud breaker and the latency windows; a half-open trial that answers
        as slowly as the spike is no recovery (docs/router.md, "p90 spike")."""
        failed = result.outcome != "ok"
        trigger = "cloud_" + result.outcome if failed else ""
        bp = self.cloud_breaker.policy
        state = self.cloud_breaker.state
        half_open = state == HALF_OPEN
        if half_open and (failed or latency_ms <= self.spike_threshold_ms()):
            self._slow_trials.clear()
        if not failed and half_open and bp.p90_spike_factor is not None and latency_ms > self.spike_threshold_ms():
            # a trial that answers as slowly as the spike is no recovery, unless the cloud has moved to a new level
            # for good: after `p90_settle_trials` such trials in a row the baseline moves to it and the breaker
            # closes (a permanent shift settles instead of blocking the cloud for good)
            # ... and only once the trials have answered at the new level for `p90_settle_s`: a surge (20 minutes)
            # opens the breaker for as long as it lasts and leaves the day's baseline as it was
            self._slow_trials.append((self._clock(), latency_ms))
            lasted_s = self._slow_trials[-1][0] - self._slow_trials[0][0]
            if len(self._slow_trials) >= bp.p90_settle_trials and lasted_s >= bp.p90_settle_s:
                level_ms = sorted(ms for _, ms in self._slow_trials)[len(self._slow_trials) // 2]
                self._slow_trials.clear()
                self.cloud_usual.settle(level_ms)
                log.warning("the cloud's latency settled at %.0f ms: the p90 spike baseline moves to it", level_ms)
            else:
                failed, trigger = True, "cloud_p90_spike"
        closed = state == CLOSED
        self._trial_slow = trigger == "cloud_p90_spike"
        self.cloud_breaker.record(failed, trigger=trigger)
        if result.outcome == "ok":
            self.cloud_latency.add(latency_ms)
            if closed:  # the usual latency: never from open periods or trials
                self.cloud_usual.add(latency_ms)
            self._watch_cloud_p90()

    def cloud_baseline_ms(self) -> float:
        """What a p90 spike is measured against: the cloud's learned usual p90 (the lower of its short and long
        horizons), never below the configured `p90_baseline_ms` (docs/router.md, "p90 spike")."""
        bp = self.cloud_breaker.policy
        learned = self.cloud_usual.p90(bp.p90_min_samples)
        return bp.p90_baseline_ms if learned is None else max(bp.p90_baseline_ms, learned)

    def spike_threshold_ms(self) -> float:
        """The cloud p90 above which it is spiking: `p90_spike_factor` × the baseline (inf when that trigger is off);
        while the router has no day's baseline (a cold start), never above `p90_ceiling_ms` (default `p90_spike_factor`
        × `p90_baseline_ms`): the 30-minute baseline follows a slow ramp, so a fresh router never caught one
        (docs/router.md, "p90 spike")."""
        bp = self.cloud_breaker.policy
        if bp.p90_spike_factor is None:
            return float("inf")
        threshold = bp.p90_spike_factor * self.cloud_baseline_ms()
        ceiling = bp.p90_ceiling_ms if bp.p90_ceiling_ms is not None else bp.p90_spike_factor * bp.p90_baseline_ms
        if threshold > ceiling and not self.cloud_usual.has_day(bp.p90_min_samples):  # (the usual case: no lock)
            return ceiling
        return threshold

    def _watch_cloud_p90(self) -> None:
        """docs/sources.md#seed-000: the cloud breaker opens when the cloud's p90 spikes, not only on failures. The
        window is emptied when the breaker closes, so samples from before it closed never reopen it."""
        bp = self.cloud_breaker.policy
        if bp.p90_spike_factor is None or self.cloud_latency.count() < bp.p90_min_samples:
            return
        if self.cloud_latency.p90() > self.spike_threshold_ms():
            self.cloud_breaker.force_open("cloud_p90_spike")

    def _watch_device_fallbacks(self, fell_back: bool) -> None:
        """docs/sources.md#seed-000: the device breaker opens when its
        fallback rate is over the limit for consecutive windows."""
        bp = self.device_breaker.policy
        if bp.fallback_rate_limit is None:
            return
        with self._fallback_lock:
            tripped = self._fallback_windows.record(
                self._clock(),
                fell_back,
                window_s=bp.fallback_window_s,
                limit=bp.fallback_rate_limit,
                windows=bp.fallback_windows,
                min_n=bp.fallback_min_n,
            )
        if tripped:
            self.device_breaker.force_open("device_fallback_rate")

    def _l4(self, trace: _Trace) -> Response:
        """L4 ends the chain: the canned answer, logged with its real latency, bounded by L4_MS."""
        started = self._clock()
        response = Response(CANNED, 4, "fallback")
        trace.add(4, "ok", min(L4_MS, (self._clock() - started) * 1000))
        return response

    # -- the decision ------------------------------------------------------------------------------
    def route(self, req: Request) -> tuple[Response, DecisionEvent | None]:
        """Decide and serve one request: the response and its decision event (also given to `on_event`).
        A shadow request whose device is still running when the cloud has served returns None for the
        event: the device runs on, off the user's path, and its event goes to `on_event` and
        `on_shadow_event` when it ends (docs/router.md, "Shadow mode")."""
        ctx = self._context(_sane_request(req))
        response = self._decide(ctx)
        if response is None:
            return self._shadow(ctx)
        return self._commit(ctx, response)

    def _context(self, req: Request) -> _Request:
        """The request's context: its policy (breaker settings hot-reload with it), input size, output cap, budget
        and stage."""
        budget = _Budget(self._clock, req.deadline_ms, req.elapsed_ms)  # the router's own time counts too
        policy = self.policy.current()
        self.device_breaker.set_policy(policy.breakers["device"])  # breaker settings hot-reload too
        self.cloud_breaker.set_policy(policy.breakers["cloud"])
        cap, assignment = experiment.apply(
            self.experiments, req.task_type, req.session_id, policy.capability(req.task_type)
        )
        counted = self._count_tokens(req.text) if req.input_tokens is None or req.has_pii else None
        if req.input_tokens is not None:
            input_tokens = req.input_tokens
        else:  # the device model's own count where it has a tokenizer, else the usual 4-characters estimate
            input_tokens = counted if counted is not None else max(1, len(req.text) // 4)
        expected_out = req.expected_output_tokens if req.expected_output_tokens is not None else cap.max_output_tokens
        # generate what the gateway expects, never past the task's cap
        limits = [x for x in (cap.max_output_tokens, req.expected_output_tokens) if x]
        trace = _Trace(
            input_tokens=input_tokens,
            prices=policy.cloud_prices or None,
            request_id=req.request_id or str(uuid.uuid4()),
            assignment=assignment,
        )
        stage = policy.stage_for(req.task_type, req.session_id)
        pinned = req.has_pii and not policy.pii_to_cloud
        # docs/sources.md#seed-004 / docs/router.md: a PII request of a shadow task type is pinned to the device, a
        # live event
        mode = "shadow" if stage == "shadow" and not pinned else "live"
        no_time = budget.timeout_ms(0) < MIN_LEVEL_MS  # not even L0 fits before L4's 50 ms: the canned answer
        max_tokens = min(limits) if limits else 64
        # positional: the request path's one allocation of it costs a third of a keyword call
        return _Request(
            req,
            policy,
            cap,
            budget,
            trace,
            counted,
            input_tokens,
            expected_out,
            max_tokens,
            stage,
            pinned,
            mode,
            no_time,
        )

    def _decide(self, ctx: _Request) -> Response | None:
        """The short-circuit decision, in order; the response, or None for a shadow request (`_shadow` serves it).
        Sets the context's `fallback_type`, `reason` and `entered` where the decision is taken."""
        req = ctx.req
        if ctx.pinned:
            return self._pinned(ctx)  # 1. Hard constraint: the device or a conservative answer, never the cloud.
        if not ctx.cap.admits(ctx.input_tokens, ctx.expected_out, req.tools, req.files):
            # 2. Capability admission: never enters the device.
            ctx.fallback_type, ctx.reason = "capability", "capability_miss"
            return self._cloud_chain(ctx) or self._l4(ctx.trace)
        if ctx.stage == "cloud_only":
            # Rollout: rolled back, or a session outside the task's canary cohort (docs/sources.md#seed-004-7).
            ctx.reason = "policy_cloud"
            return self._cloud_chain(ctx) or self._l4(ctx.trace)
        if ctx.no_time:
            ctx.reason = "latency_pressure"
            return self._l4(ctx.trace)
        if ctx.mode == "shadow":
            return None
        if self.device_breaker.state == OPEN:
            # Device unavailable (breaker open): everything to the cloud.
            ctx.reason = "device_unavailable"
            return self._cloud_chain(ctx) or self._l4(ctx.trace)
        return self._gated(ctx)

    def _pinned(self, ctx: _Request) -> Response:
        """A PII-pinned request: the device or L4. Over the device's window (its context less the output budget)
        the input is cut to fit, counted in the model's own tokens where it can, and runs as L1 with L0's share
        of the budget, never the cloud."""
        req, budget, max_tokens = ctx.req, ctx.budget, ctx.max_tokens
        ctx.reason = "pii_pin"
        device_ttft, device_tps, device_prefill_tps = self._estimates()
        room = self._device_room(ctx.cap, max_tokens)
        prompt = None
        device_input = self._device_tokens(req.text, ctx.counted, ctx.input_tokens)
        ctx.trace.device_input_tokens = device_input  # the figure the window was judged by (the event carries it)
        if room is not None and device_input > room:
            prompt, device_input = self._cut_to(req.text, room, device_input)
        too_big = room is not None and device_input > room  # not even cut does it fit (a huge system prompt)
        fit = min(
            max_tokens,
            tokens_that_fit(
                budget.remaining_ms(), device_ttft, prefill_ms(device_input, device_prefill_tps), device_tps
            ),
        )
        if ctx.no_time or too_big or fit < 1 or self._enter_device(ctx.policy) is not None:
            return self._l4(ctx.trace)  # nothing fits even truncated, or the device cannot take it
        ctx.entered = True
        response, ctx.fallback_type, _ = self._device_path(
            ctx, fit, allow_cloud=False, prompt=prompt, cut_at=fit if fit < max_tokens else None
        )
        return response

    def _gated(self, ctx: _Request) -> Response:
        """3. The latency gate, judged before the device starts (the device's ETA includes its prefill); then the
        device's slot, and the device path."""
        max_tokens = ctx.max_tokens
        device_ttft, device_tps, device_prefill_tps = self._estimates()
        remaining = ctx.budget.remaining_ms()
        prefill = prefill_ms(ctx.input_tokens, device_prefill_tps)
        eta = device_eta_ms(device_ttft, ctx.expected_out, device_tps, prefill)
        cut = level_timeout_ms(0, remaining) if self._cut_at_l0(ctx.cap) else None
        gate = latency_gate(remaining, eta, self.cloud_latency.p90(), cut)
        cloud_ok = self.cloud_breaker.state != OPEN
        fit = max_tokens
        if gate != "device" and not (gate == "cloud" and cloud_ok):
            # neither fits (or the cloud's breaker is open): truncate first (docs/sources.md#seed-000 "裁剪输出")
            fit = min(max_tokens, tokens_that_fit(remaining, device_ttft, prefill, device_tps))
        if gate == "cloud" and cloud_ok:
            ctx.reason = "latency_pressure"
            return self._cloud_chain(ctx) or self._l4(ctx.trace)
        if fit < 1:  # not even a truncated answer fits on the device (its prefill alone does not)
            ctx.reason = "latency_pressure"
            return self._cloud_or_l4(ctx, cloud_ok)
        blocked = self._enter_device(ctx.policy)  # the breaker's verdict or the concurrency cap
        if blocked:
            ctx.reason = blocked
            return self._cloud_or_l4(ctx, cloud_ok)
        ctx.entered = True
        truncated = fit < max_tokens
        response, ctx.fallback_type, miss = self._device_path(
            ctx, fit, allow_cloud=cloud_ok, judge_midway=not truncated, cut_at=fit if truncated else None
        )
        # a truncated request is recorded as such whichever way it ends (docs/router.md)
        ctx.reason = "truncated" if truncated else (miss or "default")
        return response

    def _commit(self, ctx: _Request, response: Response) -> tuple[Response, DecisionEvent]:
        """The live request's end: a canary's divergence sample, its decision event, handed to `on_event`."""
        trace = ctx.trace
        if (
            ctx.stage == "canary"
            and ctx.fallback_type == "quality"
            and response.served_by == "cloud"
            and trace.device_text
            and normalise(trace.device_text) != normalise(response.text)
        ):
            self.on_divergence(
                Divergence(
                    trace.request_id, ctx.req.task_type, ctx.stage, ctx.input_tokens, trace.device_text, response.text
                )
            )
        event = self._event(ctx, trace.attempts[-1].level, None, ctx.budget.spent_ms())
        try:  # `_send`, inline: a sink that raises is logged, never a failed request
            self.on_event(event)
        except Exception:
            log.exception("an event sink failed; routing goes on")
        return response, event

    def _event(self, ctx: _Request, level: int, shadow_agree: bool | None, latency_ms: float) -> DecisionEvent:
        req, trace, entered = ctx.req, ctx.trace, ctx.entered
        all_cloud: float | UnsetType = UNSET
        # docs/sources.md#seed-003 and #seed-004: what the request would have cost served by the cloud alone
        if trace.prices is not None:
            all_cloud = (
                trace.prices.get(self.cloud.model_for(2), 0.0) * (trace.input_tokens + trace.output_tokens) / 1000
            )
        # the contract's ranges; values are checked before they are clamped (the common case costs no call)
        d, e, i, o, ttft = req.deadline_ms, req.elapsed_ms, trace.input_tokens, trace.output_tokens, trace.ttft_ms
        return new_decision(
            schema_version=SCHEMA_VERSION,
            event_time=self._now(),
            request_id=trace.request_id,
            session_id=req.session_id,
            task_type=req.task_type,
            mode=ctx.mode,
            entered_device=entered,
            fallback_type=ctx.fallback_type,
            reason=ctx.reason,
            degrade_level=level,
            attempts=trace.attempts,
            cloud_calls=trace.cloud_calls,
            confidence=trace.confidence,
            threshold=ctx.cap.threshold if entered else None,
            deadline_ms=d if type(d) is int and 1 <= d <= DAY_MS else min(DAY_MS, max(1, int(d))),
            # what the gateway sent, when `deadline_ms` (at least 1) cannot hold it (the contract's range: a day)
            gateway_deadline_ms=max(-DAY_MS, int(d)) if d < 1 else None,
            elapsed_ms=e if type(e) is int and 0 <= e <= DAY_MS else min(DAY_MS, max(0, int(e))),
            latency_ms=latency_ms if 0.0 <= latency_ms <= DAY_MS else min(float(DAY_MS), max(0.0, latency_ms)),
            input_tokens=i if 0 <= i <= MAX_TOKENS else min(MAX_TOKENS, max(0, i)),
            output_tokens=o if 0 <= o <= MAX_TOKENS else min(MAX_TOKENS, max(0, o)),
            policy_version=ctx.policy.version,
            app_id=req.app_id,
            confidence_source=trace.confidence_source,
            ttft_ms=ttft
            if ttft is None or (type(ttft) is float and 0.0 <= ttft <= DAY_MS)
            else min(float(DAY_MS), max(0.0, finite(ttft, 0.0))),
            network=req.network,
            device_tier=req.device_tier,
            has_pii=req.has_pii,
            device_model=self.device.model if entered else None,
            cloud_model=trace.cloud_model,
            shadow_agree=shadow_agree,
            breaker=BreakerStates(device=self.device_breaker.state, cloud=self.cloud_breaker.state),
            cost_usd=trace.cost_usd if trace.prices is not None else UNSET,
            device_stats=_device_stats(trace.device_stats) if entered else None,
            all_cloud_cost_usd=all_cloud,
            rollout_stage=ctx.stage,
            **experiment.event_fields(trace.assignment),
            answer_check=trace.answer_check or UNSET,
            device_input_tokens=UNSET
            if trace.device_input_tokens is None
            else min(MAX_TOKENS, max(0, trace.device_input_tokens)),
        )

    def _device_path(
        self,
        ctx: _Request,
        fit: int,
        *,
        allow_cloud: bool,
        judge_midway: bool = True,
        prompt: str | None = None,
        cut_at: int | None = None,
    ) -> tuple[Response, str, str | None]:
        """L0, judged; L1 once on a quality miss; then the cloud chain (or L4 when the cloud is not allowed), all
        for `fit` output tokens. `prompt`: the input already cut to the device's window, which starts at L1 (a
        context cut) with L0's share of the budget. `cut_at`: the lowered output cap of a truncated request (an
        answer that reaches it is partial). The caller holds a device slot; it is released when the device's turn
        ends, or, for a call the router abandoned, when that call really ends. Nothing reaches the user
        unvalidated: a structured answer is served whole and valid or not at all; a partial free-text answer only
        up to its last complete sentence (docs/router.md, "Nothing unvalidated reaches a user"). Returns the
        response, the fallback type and the reason: the first device miss's, `truncated` for a partial answer
        served, None when the device served in full."""
        levels = [1] if prompt is not None else [0, 1] if ctx.policy.l1_enabled else [0]
        miss: tuple[str, str] | None = None  # (fallback_type, reason) of the first device miss
        served: Response | None = None
        handed_off = False  # an abandoned call holds the slot until it really ends
        try:
            for level in levels:
                call = self._device_call(ctx, level, fit, allow_cloud and judge_midway, prompt)
                if call is None:  # no time left for another device try
                    break
                result, latency_ms, abandoned = self._device(ctx.trace, ctx.req, ctx.budget, call)
                handed_off = abandoned
                if result.outcome != "ok":
                    served, this = self._device_miss(ctx, level, result, latency_ms, abandoned)
                    miss = miss or this
                    break  # timeouts and errors go straight to the cloud (L0 → L2)
                cap_out = (
                    None if cut_at is None else cut_at if level == 0 or prompt is not None else max(1, cut_at // 2)
                )
                asked = call.max_tokens if level == 0 or prompt is not None else max(1, call.max_tokens // 2)
                served, this = self._judge(ctx, level, result, latency_ms, cap_out, asked)
                miss = miss or this
                if served is not None or this is None or this[0] != "quality":
                    break  # served, or cut to nothing; a quality miss: L1 once may fix it
        finally:
            if not handed_off:
                self._release_device()
            if ctx.req.task_type not in ctx.policy.shadow:
                self._watch_device_fallbacks(served is None)
        if served is not None:
            return served, "none", "truncated" if served.partial else None
        fallback_type, reason = miss or ("timeout", "device_timeout")
        return self._cloud_or_l4(ctx, allow_cloud, max_tokens=fit), fallback_type, reason

    def _device_call(self, ctx: _Request, level: int, fit: int, midway: bool, prompt: str | None) -> _DeviceCall | None:
        """A live device try at `level`; None when its share of the budget is too small to start one. `midway`: a
        streaming L0 is re-judged at the decision point (only with a cloud to move to)."""
        share_level = 0 if prompt is not None else level
        budget = ctx.budget
        if budget.timeout_ms(share_level) < MIN_LEVEL_MS:
            return None
        decide = None
        if level == 0 and midway:
            # judged against L0's own cut: an answer served whole is cut at L0's share, so the rest must fit in
            # what is left of it (docs/router.md, "The decision point and the commit point")
            l0_cut = budget.timeout_ms(0) if self._cut_at_l0(ctx.cap) else None

            def decide(elapsed_ms: float, tokens: int, ttft_ms: float) -> bool:
                left = budget.remaining_ms()
                if l0_cut is not None:
                    left = min(left, l0_cut - elapsed_ms)
                return device_fits(left, elapsed_ms, tokens, ttft_ms, fit, self._estimates()[1])

        return _DeviceCall(
            level,
            fit,
            ctx.policy.commit_tokens,
            decide,
            prompt,
            None,
            ctx.cap.whole,
            share_level,
            None,
            self._release_device,
        )

    def _cut_at_l0(self, cap: Capability) -> bool:
        """Whether the device must finish inside L0's own share of the budget: an answer served whole never
        commits, so L0's cut ends it, and a cut answer is never served. A free-text answer past its commit point
        runs on (or is served up to its last sentence), so it is judged against the budget (docs/router.md)."""
        return cap.whole

    def _judge(
        self,
        ctx: _Request,
        level: int,
        result: DeviceResult,
        latency_ms: float,
        cap_out: int | None,
        asked: int | None = None,
    ) -> tuple[Response | None, tuple[str, str] | None]:
        """A device answer judged: the response to serve, or the miss (a quality miss, or a truncated answer cut
        to nothing). `cap_out`: the lowered output cap an answer that reaches may be cut at; `asked`: the output
        cap the device was given (an answer that reaches it may be cut: never served as complete code)."""
        cap, trace = ctx.cap, ctx.trace
        text, cut = result.text, False
        if cap_out is not None and result.tokens_out >= cap_out:  # stopped at the lowered cap: may be cut
            # structured: whole or nothing, so never served; free text: only whole sentences
            text = "" if cap.whole else complete_sentences(text)
            cut = text != result.text.strip()
            if not text:
                trace.add(level, "timeout", latency_ms)
                return None, ("timeout", "device_timeout")
        trace.device_text = trace.device_text or text
        failed = check_answer(cap, text, ctx.req.tools, asked is not None and result.tokens_out >= asked)
        if failed is not None:  # docs/router.md, "Only a declared answer is served"
            trace.add(level, "validator_failed", latency_ms)
            trace.answer_check = trace.answer_check or failed.check
            return None, ("quality", "validator_failed")
        if result.confidence is not None and result.confidence < cap.threshold:
            trace.add(level, "low_confidence", latency_ms)
            return None, ("quality", "low_confidence")
        trace.add(level, "ok", latency_ms)
        return Response(text, level, "device", partial=cut), None

    def _device_miss(
        self, ctx: _Request, level: int, result: DeviceResult, latency_ms: float, abandoned: bool
    ) -> tuple[Response | None, tuple[str, str] | None]:
        """A device try that timed out or failed: logged; the partial answer of one streamed past the commit point
        served, else the miss."""
        cap = ctx.cap
        ctx.trace.add(level, result.outcome, latency_ms, abandoned)
        if result.outcome == "timeout" and result.committed and not result.preempted and not cap.whole:
            # past the commit point: never taken over mid-stream; the partial answer is served up to its
            # last complete sentence, flagged as truncated, its attempt logged as the timeout it was
            # (docs/sources.md#seed-000 "宁可让端侧跑完"); with no complete sentence it falls back
            partial = complete_sentences(result.text)
            failed = check_answer(cap, partial, ctx.req.tools) if partial else None
            if partial and failed is None:
                return Response(partial, level, "device", partial=True), None
            if failed is not None:
                ctx.trace.answer_check = ctx.trace.answer_check or failed.check
        if result.preempted:
            return None, ("timeout", "latency_pressure")
        return None, (("timeout", "device_timeout") if result.outcome == "timeout" else ("error", "device_error"))

    # -- shadow mode -------------------------------------------------------------------------------
    def _shadow(self, ctx: _Request) -> tuple[Response, DecisionEvent | None]:
        """docs/sources.md#seed-004-5 shadow traffic: the cloud serves the user with the whole budget, as if the task
        were cloud-only; the device runs beside it (its own attempt, within the concurrency cap), off the user's
        path, its answer only compared after normalisation. With the cloud's breaker open the device serves
        (docs/sources.md#seed-000: everything stays on the device). On a simulated clock the device runs first and the
        cloud gets a fresh budget after it; the event's latency is the user's either way."""
        slot = self._enter_shadow(ctx.policy)
        cloud_open = self.cloud_breaker.state == OPEN
        shadow = ctx.shadow = _Shadow(
            slot,
            _Trace(input_tokens=ctx.input_tokens, request_id=ctx.trace.request_id),
            level_timeout_ms(0, ctx.budget.remaining_ms()),
        )
        if shadow.blocked is None and (cloud_open or not self.enforce):
            self._shadow_device(ctx)  # on the user's path only when there is no cloud; else a simulated clock's turn
        if cloud_open:
            return self._shadow_on_device(ctx)
        user = ctx.budget if self.enforce else _Budget(self._clock, ctx.req.deadline_ms, ctx.req.elapsed_ms)
        done = threading.Event()
        if shadow.blocked is None and self.enforce:

            def beside() -> None:
                try:
                    self._shadow_device(ctx)
                finally:
                    done.set()

            threading.Thread(target=beside, name="routerscope-shadow", daemon=True).start()
        else:
            done.set()
        response = self._cloud_or_l4(ctx, budget=user)
        latency_ms = user.spent_ms()
        if done.is_set():
            event = self._shadow_finish(ctx, response, latency_ms)
            self._send(self.on_event, event)
            return response, event
        self._shadow_later(ctx, response, user, done)
        return response, None

    def _shadow_device(self, ctx: _Request) -> None:
        """The shadow's device run, in its slot (released when it ends, or, abandoned, when the call really
        ends); nothing the device does reaches the user's path."""
        shadow = ctx.shadow
        assert shadow is not None and isinstance(shadow.slot, Cancel)
        slot = shadow.slot
        handed_off = False
        try:
            call = _DeviceCall(
                0,
                ctx.max_tokens,
                ctx.policy.commit_tokens,
                timeout_ms=shadow.device_timeout_ms,
                whole=ctx.cap.whole,
                cancel=slot,
                on_late_end=lambda: self._release_shadow(slot),
                shadow=True,
            )
            shadow.result, shadow.latency_ms, shadow.abandoned = self._device(shadow.dev, ctx.req, ctx.budget, call)
            handed_off = shadow.abandoned
        except Exception:  # nothing the device does may reach the user's path
            shadow.result = DeviceResult("", None, "none", 0, 0.0, 0.0, "error")
            shadow.latency_ms, shadow.abandoned = 0.0, False
        finally:
            if not handed_off:
                self._release_shadow(slot)

    def _shadow_on_device(self, ctx: _Request) -> tuple[Response, DecisionEvent]:
        """The cloud's breaker is open: the device's shadow answer serves the user, validated like any device
        answer, else L4."""
        shadow, cap = ctx.shadow, ctx.cap
        assert shadow is not None
        result = shadow.result
        failed = None
        if result is not None and result.outcome == "ok":
            failed = check_answer(cap, result.text, ctx.req.tools, result.tokens_out >= ctx.max_tokens)
            ctx.trace.answer_check = None if failed is None else failed.check
        if result is not None and result.outcome == "ok" and failed is None:
            response = Response(result.text, 0, "device")
        else:
            response = self._l4(ctx.trace)
        event = self._shadow_finish(ctx, response, ctx.budget.spent_ms())
        self._send(self.on_event, event)
        return response, event

    def _shadow_finish(self, ctx: _Request, response: Response, latency_ms: float) -> DecisionEvent:
        """The shadow request's event, once both sides ended: the device's attempt first, agreement of the two
        answers (a disagreement goes to `on_divergence` as a sample)."""
        shadow, trace = ctx.shadow, ctx.trace
        assert shadow is not None
        ctx.entered = shadow.blocked is None
        ctx.reason = shadow.blocked or "default"
        if ctx.entered:
            dev = shadow.dev
            trace.attempts.insert(0, _device_attempt(shadow))
            trace.confidence, trace.confidence_source = dev.confidence, dev.confidence_source
            trace.ttft_ms, trace.device_stats = dev.ttft_ms, dev.device_stats
        result = shadow.result
        agree = None
        if response.served_by == "cloud" and result is not None and result.outcome == "ok":
            agree = normalise(result.text) == normalise(response.text)
            if not agree:
                try:
                    self.on_divergence(
                        Divergence(
                            trace.request_id, ctx.req.task_type, ctx.stage, ctx.input_tokens, result.text, response.text
                        )
                    )
                except Exception:  # a failing sample sink (maybe on the device's thread) never loses the event
                    log.exception("shadow divergence sample not kept for request %s", trace.request_id)
        if response.served_by == "device" and result is not None:
            trace.output_tokens = result.tokens_out
        return self._event(ctx, response.level, agree, latency_ms)

    def _shadow_later(self, ctx: _Request, response: Response, user: _Budget, done: threading.Event) -> None:
        """The device ends after the user was served: its event leaves then (to `on_event` and
        `on_shadow_event`), with the user's latency: until route() returns."""
        returned: dict = {}
        left = threading.Event()

        def later() -> None:
            done.wait()
            left.wait()
            try:
                event = self._shadow_finish(ctx, response, returned["ms"])
                self.on_event(event)
                if self.on_shadow_event is not None:
                    self.on_shadow_event(event)
            except Exception:  # nothing to raise to on this thread: said, never silent
                log.exception("the shadow event of request %s was not sent", ctx.trace.request_id)

        threading.Thread(target=later, name="routerscope-shadow-event", daemon=True).start()
        returned["ms"] = user.spent_ms()
        left.set()


INVALID = ("\x00undeclared",)  # a declaration of another type than the contract's: no whitelist holds it


def _sane_request(req: Request) -> Request:
    """The request with every number finite and every declaration of its type: a NaN or infinite budget is no
    budget (0), a negative elapsed time none; `tools` that are not a list of names and a file count that is not
    an integer are kept as declarations the capability matrix never admits (docs/router.md)."""
    d, e, tools, files = req.deadline_ms, req.elapsed_ms, req.tools, req.files
    if (  # the common case: plain numbers in range, no declarations or well-typed ones
        type(d) is int
        and -DAY_MS <= d <= DAY_MS
        and type(e) is int
        and 0 <= e <= DAY_MS
        and (req.input_tokens is None or (type(req.input_tokens) is int and req.input_tokens >= 0))
        and (
            req.expected_output_tokens is None
            or (type(req.expected_output_tokens) is int and req.expected_output_tokens >= 0)
        )
        and (tools is None or (type(tools) is tuple and all(type(x) is str for x in tools)))
        and (files is None or type(files) is int)
    ):
        return req
    changes: dict[str, object] = {}
    deadline, elapsed = finite(req.deadline_ms, 0.0), max(0.0, finite(req.elapsed_ms, 0.0))
    if deadline != req.deadline_ms:
        changes["deadline_ms"] = max(-DAY_MS, min(DAY_MS, deadline))
    if elapsed != req.elapsed_ms:
        changes["elapsed_ms"] = min(DAY_MS, elapsed)
    for name in ("input_tokens", "expected_output_tokens"):
        value = getattr(req, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            changes[name] = None
    tools = req.tools
    if tools is not None:
        listed = tuple(tools) if isinstance(tools, (list, tuple)) else None
        if listed is None or not all(isinstance(t, str) for t in listed):
            changes["tools"] = INVALID
        elif listed is not tools:
            changes["tools"] = listed
    if req.files is not None and (isinstance(req.files, bool) or not isinstance(req.files, int)):
        changes["files"] = -1
    if not changes:
        return req
    return replace(req, **changes)  # type: ignore[arg-type]  # each value was checked for its field above


def _device_attempt(shadow: _Shadow) -> Attempt:
    """The shadow device's own attempt (level 0), as it ended."""
    outcome = shadow.result.outcome if shadow.result is not None else "error"
    latency = max(0.0, float(shadow.latency_ms))
    if shadow.abandoned:
        return Attempt(level=0, outcome=outcome, latency_ms=latency, abandoned=True)
    return Attempt(level=0, outcome=outcome, latency_ms=latency)


def normalise(text: str) -> str:
    """How the shadow (and the replay judge) compare two answers: lower-case, trimmed, whitespace
    collapsed, trailing `.!?` dropped."""
    return " ".join(text.lower().strip().strip(".!?").split())


def _device_stats(stats: dict | None) -> DeviceStats | None:
    """The contract's `device_stats` from a backend's measurements (None: the backend measured nothing); a value
    out of the contract's type or range is left out (unknown), never an event the loader must refuse."""
    if not stats or not isinstance(stats, dict):
        return None

    def number(key: str):
        value = finite(stats.get(key), -1.0)
        return value if 0.0 <= value <= DEVICE_STATS_MAXIMA[key] else None

    optional = {}
    if number("peak_mem_mb") is not None:
        optional["peak_mem_mb"] = number("peak_mem_mb")
    if stats.get("thermal_state") in THERMAL_STATES:
        optional["thermal_state"] = stats["thermal_state"]
    if isinstance(stats.get("cold_start"), bool):
        optional["cold_start"] = stats["cold_start"]
    return DeviceStats(
        **optional,
        decode_tps=number("decode_tps"),
        prefill_tps=number("prefill_tps"),
        load_ms=number("load_ms") if stats.get("cold_start") is True else None,
        resident_mem_mb=number("resident_mem_mb"),
    )
