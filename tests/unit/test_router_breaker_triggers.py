"""`routerscope.router.p90` and `routerscope.router.breaker_triggers`: the cloud's latency windows, the p90 spike
that opens the cloud breaker, calls past a breaker open for slowness, and the device's fallback rate over
consecutive windows."""

from __future__ import annotations

import pytest

from routerscope.router.backends import CloudResult
from routerscope.router.breaker import CLOSED, OPEN, CircuitBreaker
from routerscope.router.breaker_triggers import CloudLatencyTrigger, FallbackRateTrigger
from routerscope.router.p90 import BaselineP90, SlidingP90
from routerscope.router.policy import BreakerPolicy
from tests.support.fakes import FakeClock


def test_the_sliding_p90_forgets_samples_older_than_its_window():
    clock = FakeClock()
    window = SlidingP90(window_s=300, clock=clock)
    assert window.p90() == 800.0  # nothing yet: the default
    for ms in range(100, 1100, 100):  # 100 … 1000 ms
        window.add(float(ms))
    assert window.p90() == 1000.0  # the 10th of 10 sorted (index 9)
    clock.t += 200
    window.add(50.0)
    clock.t += 150  # the first ten are 350 s old now
    assert window.count() == 1 and window.p90() == 50.0


def test_the_usual_p90_never_counts_the_spike_window_itself():
    clock = FakeClock()
    usual = BaselineP90(window_s=1800, lag_s=300, clock=clock)
    for _ in range(20):
        usual.add(500.0)
    assert usual.p90(min_samples=20) is None  # still inside the last 300 s
    clock.t += 301
    assert usual.p90(min_samples=20) == 500.0
    usual.settle(900.0)  # the cloud moved for good
    assert usual.p90(min_samples=20) == 900.0 and usual.has_day(20)


def spiking(clock) -> tuple[CircuitBreaker, CloudLatencyTrigger]:
    policy = BreakerPolicy(p90_spike_factor=2.0, p90_baseline_ms=800.0, p90_min_samples=20)
    breaker = CircuitBreaker("cloud", policy, clock=clock)
    trigger = CloudLatencyTrigger(breaker, clock)
    breaker._on_transition = trigger.transition  # as the router hands on its transitions
    return breaker, trigger


def test_a_p90_over_twice_the_baseline_opens_the_cloud_breaker_for_latency():
    clock = FakeClock()
    breaker, trigger = spiking(clock)
    assert trigger.spike_threshold_ms() == pytest.approx(1600.0)  # no learned baseline: 2 × 800
    for _ in range(19):
        trigger.record(CloudResult("a", 1700.0, "ok", 3), 1700.0)
    assert breaker.state == CLOSED  # 19 samples: under p90_min_samples
    trigger.record(CloudResult("a", 1700.0, "ok", 3), 1700.0)
    assert breaker.state == OPEN and trigger.open_for_latency


def test_a_call_past_a_breaker_open_for_slowness_keeps_its_latency_and_an_error_ends_the_bypass():
    clock = FakeClock()
    _, trigger = spiking(clock)
    trigger.open_for_latency = True
    trigger.record_bypass(CloudResult("a", 900.0, "ok", 3), 900.0)
    assert trigger.latency.count() == 1 and trigger.open_for_latency
    trigger.record_bypass(CloudResult("", 5.0, "timeout"), 5.0)  # slow, not failing: the bypass stays
    assert trigger.open_for_latency
    trigger.record_bypass(CloudResult("", 5.0, "error"), 5.0)
    assert not trigger.open_for_latency and trigger.latency.count() == 1


def test_the_fallback_rate_over_its_limit_for_consecutive_windows_opens_the_device_breaker():
    clock = FakeClock()
    policy = BreakerPolicy(
        fallback_rate_limit=0.5, fallback_windows=2, fallback_window_s=60.0, fallback_min_n=4, cooldown_s=3600.0
    )
    breaker = CircuitBreaker("device", policy, clock=clock)
    fallbacks = FallbackRateTrigger(breaker, clock)
    for window in range(3):  # three windows of 4 requests, 3 of them falling back (0.75 > 0.5)
        for fell_back in (True, True, True, False):
            fallbacks.record(fell_back)
        clock.t += 61
        if window == 0:
            assert breaker.state == CLOSED  # one window over the limit is not enough
    assert breaker.state == OPEN


def test_without_a_limit_the_fallback_rate_never_opens_it():
    clock = FakeClock()
    breaker = CircuitBreaker("device", BreakerPolicy(), clock=clock)
    fallbacks = FallbackRateTrigger(breaker, clock)
    for _ in range(200):
        fallbacks.record(True)
        clock.t += 1
    assert breaker.state == CLOSED
