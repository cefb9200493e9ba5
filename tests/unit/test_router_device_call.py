"""`routerscope.router.device_call`: one device call under its level's timeout, offered only the settings the
backend takes, its result made sane, a late answer dropped, and its outcome recorded (the trace; the device
breaker for a live call, never for a shadow run)."""

from __future__ import annotations

import time

import pytest

from routerscope.router.backends import DeviceResult
from routerscope.router.breaker import CLOSED, OPEN, CircuitBreaker
from routerscope.router.device_call import DeviceCall, DeviceCaller, accepts_keyword
from routerscope.router.guard import Guard
from routerscope.router.latency import Budget
from routerscope.router.policy import DEFAULT_POLICY, PolicyStore
from routerscope.router.request import Request
from routerscope.router.trace import Trace
from tests.support.fakes import BlockingDevice, FakeClock, GreedyDevice, ScriptedDevice, StreamingDevice, dev

REQ = Request("short_reply", "hello", "s", deadline_ms=1000)


class LateDevice:
    """Takes `took_ms` on the fake clock whatever its timeout, and says ok."""

    model, ttft_ms, tps = "late-device", 1.0, 1000.0

    def __init__(self, clock, took_ms):
        self.clock, self.took_ms = clock, took_ms

    def generate(self, prompt, *, max_tokens, timeout_ms, degraded, commit_tokens):
        self.clock.t += self.took_ms / 1000
        return DeviceResult("late answer.", 0.9, "logprob", 3, 1.0, self.took_ms, "ok")


def caller(device, clock, enforce=False, max_late=4):
    breaker = CircuitBreaker("device", clock=clock)
    return DeviceCaller(device, breaker, Guard("device", 4, max_late), PolicyStore(DEFAULT_POLICY), clock, enforce)


def test_only_the_keywords_a_backend_takes_are_offered():
    assert not accepts_keyword(ScriptedDevice([dev()]).generate, "decide")
    assert accepts_keyword(StreamingDevice(FakeClock(), 1, 1).generate, "decide")  # **kw takes it
    assert not accepts_keyword(StreamingDevice(FakeClock(), 1, 1).generate, "cancel", explicit=True)
    assert not accepts_keyword(len, "x")  # no signature to read


def test_a_call_runs_under_its_levels_share_and_its_outcome_reaches_the_trace_and_the_breaker():
    clock = FakeClock()
    device = GreedyDevice(clock, need_ms=500.0, confidence=0.8)
    c, trace = caller(device, clock), Trace()
    result, latency_ms, abandoned = c.run(trace, REQ, Budget(clock, 1000, 0), DeviceCall(0, 64, 120))
    assert device.timeouts == [pytest.approx(700.0)]  # L0: 0.7 of the 1000 ms left
    assert (result.outcome, latency_ms, abandoned) == ("ok", pytest.approx(500.0), False)
    assert (trace.confidence, trace.ttft_ms, trace.output_tokens) == (0.8, 1.0, 5)


def test_an_answer_later_than_its_timeout_is_dropped_never_served():
    clock = FakeClock()
    c, trace = caller(LateDevice(clock, took_ms=720.0), clock), Trace()
    result, latency_ms, _ = c.run(trace, REQ, Budget(clock, 1000, 0), DeviceCall(0, 64, 120))
    assert result.outcome == "timeout" and result.text == "" and latency_ms == pytest.approx(720.0)  # 700 + 10 < 720


def test_out_of_memory_opens_the_breaker_at_once_but_never_from_a_shadow_run():
    clock = FakeClock()
    shadow = caller(GreedyDevice(clock, error_kind="oom"), clock)
    shadow.run(Trace(), REQ, Budget(clock, 1000, 0), DeviceCall(0, 64, 120, shadow=True))
    assert shadow.breaker.state == CLOSED
    live = caller(GreedyDevice(clock, error_kind="oom"), clock)
    result, _, _ = live.run(Trace(), REQ, Budget(clock, 1000, 0), DeviceCall(0, 64, 120))
    assert result.outcome == "error" and live.breaker.state == OPEN


def test_a_device_that_never_answers_is_abandoned_at_its_timeout_and_opens_the_breaker():
    device = BlockingDevice()  # does not honour its deadline: the guard pool runs it
    c = caller(device, time.monotonic, enforce=True, max_late=1)
    ended = []
    started = time.monotonic()
    call = DeviceCall(0, 64, 120, on_late_end=lambda: ended.append(True))
    result, latency_ms, abandoned = c.run(Trace(), REQ, Budget(time.monotonic, 300, 0), call)
    assert (result.outcome, abandoned) == ("timeout", True) and 200 <= latency_ms < 1000  # L0: 210 ms
    assert time.monotonic() - started < 1.0
    assert c.breaker.state == OPEN  # the one slot the cap allows is held by a call the device never finished
    device.release.set()
    deadline = time.monotonic() + 5
    while not ended and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ended == [True]  # the slot is handed back when the call really ends
