"""The cloud's latency, as the router remembers it: the p90 over the last five minutes (`SlidingP90`, which the
latency gate and the p90-spike trigger read) and the cloud's usual p90 that a spike is judged against
(`BaselineP90`, docs/router.md "p90 spike")."""

from __future__ import annotations

import bisect
import threading
import time
from collections import deque
from collections.abc import Callable

CLOUD_WINDOW_S = 300.0
BASELINE_WINDOW_S = 1800.0  # the p90 spike's learned baseline: the cloud's p90 over the 30 minutes before the window
LONG_BASELINE_S = 86400.0  # ... and over the day before the last hour, which a slow ramp cannot drag along
LONG_BASELINE_LAG_S = 3600.0
DEFAULT_CLOUD_P90_MS = 800.0


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
