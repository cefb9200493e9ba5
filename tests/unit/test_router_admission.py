"""`routerscope.router.admission`: the breaker's verdict, then a slot under the concurrency cap or the reason
there is none; shadow runs only on capacity live traffic does not need, and a live request takes the device back
from a shadow run that can yield."""

from __future__ import annotations

import threading
import time

from routerscope.router.admission import YIELD_S, DeviceSlots
from routerscope.router.breaker import CircuitBreaker
from routerscope.router.engine import Router
from routerscope.router.policy import DEFAULT_POLICY, PolicyStore, default_policy
from tests.support.fakes import FakeClock, ScriptedCloud, ScriptedDevice, cloud, dev

ONE, TWO = default_policy().with_(device_concurrency=1), default_policy().with_(device_concurrency=2)


def slots(cancels=False, enforce=False) -> DeviceSlots:
    return DeviceSlots(CircuitBreaker("device", clock=FakeClock()), cancels=cancels, enforce=enforce)


def test_the_cap_sends_the_excess_away_and_a_release_frees_its_slot():
    s = slots()
    assert s.enter(TWO) is None and s.enter(TWO) is None
    assert s.enter(TWO) == "device_busy" and s.device_in_flight == 2
    s.release()
    assert s.enter(TWO) is None and s.device_in_flight == 2


def test_an_open_breaker_admits_nothing():
    s = slots()
    s.breaker.force_open("test")
    assert s.enter(TWO) == "device_unavailable" and s.enter_shadow(TWO) == "device_unavailable"
    assert s.device_in_flight == 0 and s.shadow_in_flight == 0


def test_a_device_that_cannot_yield_runs_a_shadow_only_in_a_spare_slot_beyond_one_for_live_traffic():
    s = slots(cancels=False)
    assert s.enter_shadow(ONE) == "device_busy"  # with a cap of 1, never
    shadow = s.enter_shadow(TWO)
    assert not isinstance(shadow, str) and s.shadow_in_flight == 1
    assert s.enter(TWO) is None  # one slot kept for live traffic
    assert s.enter(TWO) == "device_busy"  # the shadow run holds the other
    s.release_shadow(shadow)
    assert s.shadow_in_flight == 0 and s.enter(TWO) is None


def test_a_live_request_asks_a_yielding_shadow_run_to_stop_and_takes_the_device():
    s = slots(cancels=True)
    shadow = s.enter_shadow(ONE)
    assert not isinstance(shadow, str)
    assert s.enter_shadow(ONE) == "device_busy"  # one shadow run at a time
    assert s.enter(ONE) is None and shadow.is_set()  # not enforced: no wait, the cancel is set at once
    assert s.enter(ONE) == "device_busy"  # the live call holds the one slot now


def test_on_the_real_clock_a_live_request_waits_for_the_shadow_run_to_end_and_not_longer_than_yield_s():
    s = slots(cancels=True, enforce=True)
    shadow = s.enter_shadow(ONE)
    assert not isinstance(shadow, str)
    threading.Timer(0.05, s.release_shadow, args=(shadow,)).start()  # the run stops 50 ms after its cancel
    assert s.enter(ONE) is None and s.shadow_in_flight == 0
    s.release()
    ignoring = s.enter_shadow(ONE)  # a run that never stops
    started = time.monotonic()
    assert s.enter(ONE) == "device_busy" and s.device_in_flight == 0
    assert YIELD_S <= time.monotonic() - started < YIELD_S + 0.5
    s.release_shadow(ignoring)


def test_the_routers_enforce_setting_reaches_its_slots_and_its_shadow_runs():
    router = Router(
        ScriptedDevice([dev()]), ScriptedCloud([cloud()]), policy=PolicyStore(DEFAULT_POLICY), clock=FakeClock()
    )
    assert (router.enforce, router.slots.enforce, router.shadow.enforce) == (False, False, False)  # a simulated clock
    router.enforce = True
    assert (router.enforce, router.slots.enforce, router.shadow.enforce) == (True, True, True)
