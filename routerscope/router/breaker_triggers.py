"""What opens a breaker besides failed calls (docs/sources.md#seed-000, docs/router.md): the cloud's p90 spike
(`CloudLatencyTrigger`: the latency windows, the spike threshold against the learned baseline, half-open trials that
answer as slowly as the spike, a breaker open for slowness that a request with nowhere else to go may still pass)
and the device's fallback rate over its limit for consecutive windows (`FallbackRateTrigger`). The breakers
themselves are `routerscope.router.breaker`."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from routerscope.router.backends import CloudResult
from routerscope.router.breaker import CLOSED, HALF_OPEN, OPEN, CircuitBreaker, ConsecutiveWindows, Transition
from routerscope.router.p90 import BaselineP90, SlidingP90

log = logging.getLogger("routerscope.router")


class CloudLatencyTrigger:
    """The cloud breaker's latency side. `latency`: the cloud's recent p90 (the gate reads it too); `usual`: its
    usual p90, fed only while the breaker is closed; `open_for_latency`: the breaker is open for slowness, not
    failures (a request with no device to go to may still use the cloud while it fits)."""

    def __init__(self, breaker: CircuitBreaker, clock: Callable[[], float]):
        self.breaker, self._clock = breaker, clock
        self.latency = SlidingP90(clock=clock)
        self.usual = BaselineP90(clock=clock)
        self._slow_trials: list[tuple[float, float]] = []  # half-open cloud trials that answered at spike latency
        self.open_for_latency = False  # the cloud breaker is open for a p90 spike, not for failures
        self._trial_slow = False  # the last half-open cloud trial failed for its latency alone

    def transition(self, t: Transition) -> None:
        """The cloud breaker moved (the router hands on its transitions)."""
        if t.to_state == CLOSED:
            self.latency.clear()  # a closed breaker starts a fresh window: no reopening from older samples
        if t.to_state == OPEN:
            # slowness, not failures: requests with no device to go to may still use the cloud while it fits
            self.open_for_latency = t.trigger == "cloud_p90_spike" or (
                t.from_state == HALF_OPEN and self._trial_slow and t.trigger == "trial_failed"
            )

    def record_bypass(self, result: CloudResult, latency_ms: float) -> None:
        """A call past a breaker open for slowness (no trial): its latency is kept; one that fails, not merely
        slow, ends the calls past the breaker."""
        if result.outcome == "ok":
            self.latency.add(latency_ms)
        elif result.outcome == "error":
            self.open_for_latency = False

    def record(self, result: CloudResult, latency_ms: float) -> None:
        """A cloud call's outcome into the cloud breaker and the latency windows; a half-open trial that answers
        as slowly as the spike is no recovery (docs/router.md, "p90 spike")."""
        failed = result.outcome != "ok"
        trigger = "cloud_" + result.outcome if failed else ""
        bp = self.breaker.policy
        state = self.breaker.state
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
                self.usual.settle(level_ms)
                log.warning("the cloud's latency settled at %.0f ms: the p90 spike baseline moves to it", level_ms)
            else:
                failed, trigger = True, "cloud_p90_spike"
        closed = state == CLOSED
        self._trial_slow = trigger == "cloud_p90_spike"
        self.breaker.record(failed, trigger=trigger)
        if result.outcome == "ok":
            self.latency.add(latency_ms)
            if closed:  # the usual latency: never from open periods or trials
                self.usual.add(latency_ms)
            self._watch_p90()

    def baseline_ms(self) -> float:
        """What a p90 spike is measured against: the cloud's learned usual p90 (the lower of its short and long
        horizons), never below the configured `p90_baseline_ms` (docs/router.md, "p90 spike")."""
        bp = self.breaker.policy
        learned = self.usual.p90(bp.p90_min_samples)
        return bp.p90_baseline_ms if learned is None else max(bp.p90_baseline_ms, learned)

    def spike_threshold_ms(self) -> float:
        """The cloud p90 above which it is spiking: `p90_spike_factor` × the baseline (inf when that trigger is off);
        while the router has no day's baseline (a cold start), never above `p90_ceiling_ms` (default `p90_spike_factor`
        × `p90_baseline_ms`): the 30-minute baseline follows a slow ramp, so a fresh router never caught one
        (docs/router.md, "p90 spike")."""
        bp = self.breaker.policy
        if bp.p90_spike_factor is None:
            return float("inf")
        threshold = bp.p90_spike_factor * self.baseline_ms()
        ceiling = bp.p90_ceiling_ms if bp.p90_ceiling_ms is not None else bp.p90_spike_factor * bp.p90_baseline_ms
        if threshold > ceiling and not self.usual.has_day(bp.p90_min_samples):  # (the usual case: no lock)
            return ceiling
        return threshold

    def _watch_p90(self) -> None:
        """docs/sources.md#seed-000: the cloud breaker opens when the cloud's p90 spikes, not only on failures. The
        window is emptied when the breaker closes, so samples from before it closed never reopen it."""
        bp = self.breaker.policy
        if bp.p90_spike_factor is None or self.latency.count() < bp.p90_min_samples:
            return
        if self.latency.p90() > self.spike_threshold_ms():
            self.breaker.force_open("cloud_p90_spike")


class FallbackRateTrigger:
    """The device breaker's fallback-rate side: each live device turn's fallback, by window."""

    def __init__(self, breaker: CircuitBreaker, clock: Callable[[], float]):
        self.breaker, self._clock = breaker, clock
        self._windows = ConsecutiveWindows()
        self._lock = threading.Lock()

    def record(self, fell_back: bool) -> None:
        """docs/sources.md#seed-000: the device breaker opens when its
        fallback rate is over the limit for consecutive windows."""
        bp = self.breaker.policy
        if bp.fallback_rate_limit is None:
            return
        with self._lock:
            tripped = self._windows.record(
                self._clock(),
                fell_back,
                window_s=bp.fallback_window_s,
                limit=bp.fallback_rate_limit,
                windows=bp.fallback_windows,
                min_n=bp.fallback_min_n,
            )
        if tripped:
            self.breaker.force_open("device_fallback_rate")
