"""Circuit breakers at the device and cloud boundaries (docs/router.md).

Closed: calls go through; outcomes are kept for a sliding window of `window_s`. When at least
`min_calls` outcomes are in the window and the failure share reaches `failure_rate`, the breaker
opens. Open: calls are refused until `cooldown_s` has passed, then it is half-open: one trial call
goes through; success closes it, failure opens it again. `force_open` opens it at once (a device
that failed to load or ran out of memory, a cloud p90 spike, a device fallback rate over its limit for
consecutive windows: the router decides those, see `routerscope.router.engine`). Every transition calls
`on_transition` (the router turns it into a breaker event), numbered by `seq` (1, 2, … per breaker) so
that its transitions chain in the order they happened whatever their timestamps or arrival order. The
clock is injectable so the state machine is tested without sleeping.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from routerscope.contract.events import BreakerState
from routerscope.router.policy import BreakerPolicy

CLOSED: BreakerState = "closed"
OPEN: BreakerState = "open"
HALF_OPEN: BreakerState = "half_open"
Boundary = Literal["device", "cloud"]


@dataclass(frozen=True)
class Transition:
    boundary: Boundary
    from_state: BreakerState
    to_state: BreakerState
    failure_rate: float
    window_s: float
    trigger: str
    at: float
    seq: int = 1  # this breaker's transitions, numbered from 1 in the order they happened


class CircuitBreaker:
    def __init__(
        self,
        boundary: Boundary,
        policy: BreakerPolicy | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_transition: Callable[[Transition], None] | None = None,
    ):
        self.boundary = boundary
        self.policy = policy or BreakerPolicy()
        self._clock = clock
        self._on_transition = on_transition or (lambda t: None)
        self._outcomes: deque[tuple[float, bool]] = deque()  # (time, failed)
        self._failures = 0
        self._state = CLOSED
        self._opened_at = 0.0
        self._trial_out = False
        self._seq = 0  # transitions so far (under the lock)
        self._lock = threading.Lock()

    @property
    def state(self) -> BreakerState:
        state = self._state
        if state == CLOSED:  # only an outcome moves a closed breaker, never the clock: read without the lock
            return state
        with self._lock:
            self._maybe_half_open(self._clock())
            return self._state

    def set_policy(self, policy: BreakerPolicy) -> None:
        """Hot reload: the next call is judged by the new settings (the window's outcomes are kept)."""
        self.policy = policy

    def failure_rate(self) -> float:
        return self._failures / len(self._outcomes) if self._outcomes else 0.0

    def allow(self) -> bool:
        """May a call go through now? In half-open, only one trial at a time."""
        if self._state == CLOSED:  # as `state`: closed stays closed until an outcome moves it
            return True
        with self._lock:
            now = self._clock()
            self._maybe_half_open(now)
            if self._state == CLOSED:
                return True
            if self._state == HALF_OPEN and not self._trial_out:
                self._trial_out = True
                return True
            return False

    def record(self, failed: bool, trigger: str = "error_rate") -> None:
        with self._lock:
            now = self._clock()
            if self._state == HALF_OPEN:
                self._trial_out = False
                self._move(OPEN if failed else CLOSED, "trial_failed" if failed else "trial_succeeded", now)
                if not failed:
                    self._outcomes.clear()
                    self._failures = 0
                return
            if self._state == OPEN:
                return
            self._outcomes.append((now, failed))
            self._failures += failed
            self._trim(now)
            p = self.policy
            if len(self._outcomes) >= p.min_calls and self.failure_rate() >= p.failure_rate:
                self._move(OPEN, trigger, now)

    def force_open(self, trigger: str) -> None:
        with self._lock:
            if self._state != OPEN:
                self._move(OPEN, trigger, self._clock())

    def _trim(self, now: float) -> None:
        horizon = now - self.policy.window_s
        while self._outcomes and self._outcomes[0][0] < horizon:
            _, failed = self._outcomes.popleft()
            self._failures -= failed

    def _maybe_half_open(self, now: float) -> None:
        if self._state == OPEN and now - self._opened_at >= self.policy.cooldown_s:
            self._move(HALF_OPEN, "cooldown_elapsed", now)

    def _move(self, to_state: BreakerState, trigger: str, now: float) -> None:
        self._seq += 1
        transition = Transition(
            self.boundary, self._state, to_state, self.failure_rate(), self.policy.window_s, trigger, now, self._seq
        )
        self._state = to_state
        if to_state == OPEN:
            self._opened_at = now
            self._trial_out = False
        self._on_transition(transition)


class ConsecutiveWindows:
    """Is a rate over its limit for `windows` consecutive fixed windows (docs/sources.md#seed-000: "回退率连续超标")?

    Outcomes are counted into windows of `window_s` on the injected clock; when a window closes, it
    breaches if it holds at least `min_n` outcomes and its rate is over `limit`; a window that does not
    breach, or a skipped (empty) window, resets the streak. `record` returns True when the streak reaches
    `windows` (once per streak)."""

    def __init__(self):
        self._start: float | None = None
        self._n = self._hits = self._streak = 0

    def record(self, now: float, hit: bool, *, window_s: float, limit: float, windows: int, min_n: int) -> bool:
        tripped = False
        if self._start is None:
            self._start = now
        elif now >= self._start + window_s:
            breached = self._n >= min_n and self._hits / self._n > limit
            skipped = now >= self._start + 2 * window_s
            self._streak = self._streak + 1 if breached else 0
            tripped = self._streak >= windows
            if skipped:
                self._streak = 0
            self._start = now - (now - self._start) % window_s
            self._n = self._hits = 0
        self._n += 1
        self._hits += hit
        return tripped
