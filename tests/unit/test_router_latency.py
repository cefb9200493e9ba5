"""`routerscope.router.latency`: the budget on the router's clock, each level's share, the device's ETA with
prefill, the gate, what fits when nothing does, and the decision point's re-estimate (golden figures by hand)."""

from __future__ import annotations

import pytest

from routerscope.router.latency import (
    Budget,
    device_estimates,
    device_eta_ms,
    device_fits,
    latency_gate,
    level_timeout_ms,
    prefill_ms,
    tokens_that_fit,
)
from tests.support.fakes import FakeClock


def test_the_budget_only_subtracts_on_the_routers_clock():
    clock = FakeClock()
    budget = Budget(clock, deadline_ms=2000, elapsed_ms=500)  # 1500 ms left when the router starts
    assert budget.total_ms == 1500 and budget.remaining_ms() == 1500
    assert budget.timeout_ms(0) == pytest.approx(1050.0)  # 0.7 × 1500
    assert budget.decision_point_in_ms() == pytest.approx(100.0)  # 30 % of 2000 = 600, 500 already spent
    clock.t += 0.4
    assert budget.spent_ms() == pytest.approx(400.0) and budget.remaining_ms() == pytest.approx(1100.0)
    assert budget.timeout_ms(2) == pytest.approx(550.0)  # L2: 0.5 × what remains now
    assert budget.decision_point_in_ms() == 0.0  # already past it


def test_a_levels_timeout_leaves_l4_its_50_ms():
    assert level_timeout_ms(3, 1000) == pytest.approx(800.0)  # 0.8 × 1000 < 950
    assert level_timeout_ms(3, 200) == pytest.approx(150.0)  # 0.8 × 200 = 160, but 200 - 50 = 150


def test_the_devices_eta_includes_prefill_and_the_gate_picks_device_cloud_or_truncate():
    prefill = prefill_ms(1000, 2000.0)  # 1000 tokens at 2000 tokens/s
    assert prefill == pytest.approx(500.0) and prefill_ms(1000, None) == 0.0
    eta = device_eta_ms(100.0, 40, 50.0, prefill)  # 100 + 500 + 40 / 50 s
    assert eta == pytest.approx(1400.0)
    assert latency_gate(2000, eta, 800) == "device"  # 1400 <= 1800
    assert latency_gate(1500, eta, 800) == "cloud"  # 1400 > 1350; the cloud's 800 fits
    assert latency_gate(2000, eta, 800, device_cut_ms=1400) == "cloud"  # a whole answer: L0's own cut, 1260
    assert latency_gate(700, eta, 800) == "truncate"


def test_tokens_that_fit_finish_inside_l0s_own_timeout():
    # L0 is given 0.7 × 1000 = 700 ms; 90 % of it is 630; less 100 ms first token, 30 ms prefill: 500 ms at 20/s
    assert tokens_that_fit(1000, 100.0, 30.0, 20.0) == 10
    assert tokens_that_fit(100, 100.0, 0.0, 20.0) == 0  # not even the first token fits


def test_the_decision_point_judges_the_rest_at_the_observed_rate():
    # 11 tokens in 600 ms after a 100 ms first token: 50 ms a token; 30 more take 1500 ms
    assert device_fits(1700, 600, 11, 100, 41, fallback_tps=1000) is True  # 1500 <= 1530
    assert device_fits(1600, 600, 11, 100, 41, fallback_tps=1000) is False  # 1500 > 1440
    # one token seen: the device's own estimate (10 tokens/s) judges the 40 left: 4000 ms
    assert device_fits(4500, 100, 1, 100, 41, fallback_tps=10) is True


class Estimates:
    def __init__(self, ttft_ms, tps, prefill_tps=None):
        self.ttft_ms, self.tps, self.prefill_tps = ttft_ms, tps, prefill_tps


def test_estimates_that_are_not_numbers_read_as_a_slow_device():
    assert device_estimates(Estimates(120.0, 40.0, 900.0)) == (120.0, 40.0, 900.0)
    assert device_estimates(Estimates(float("nan"), "fast", -3.0)) == (1000.0, 1.0, None)
    assert device_estimates(Estimates(50, 0, None)) == (50.0, 1.0, None)  # ints read; no rate is 1 token/s
