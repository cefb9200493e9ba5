"""`routerscope.router.decision_event`: the decision event built from a request's context and trace, clamped into
the contract's ranges; the device's measurements kept only where the contract holds them; the breaker event of a
transition; and `send`, which never lets a sink that raises fail a request."""

from __future__ import annotations

from msgspec import UNSET

from routerscope.contract.validation import DECISIONS
from routerscope.router.breaker import CLOSED, OPEN, CircuitBreaker, Transition
from routerscope.router.decision_event import Events, device_stats, send
from routerscope.router.engine import Request, Router
from routerscope.router.policy import DEFAULT_POLICY, PolicyStore
from routerscope.router.sanity import sane_request
from tests.support.fakes import FakeClock, ScriptedCloud, ScriptedDevice, cloud, dev


def events_and_context(req: Request):
    clock = FakeClock()
    device, backend = ScriptedDevice([dev()]), ScriptedCloud([cloud()])
    router = Router(device, backend, policy=PolicyStore(DEFAULT_POLICY), clock=clock, now=clock.now)
    breakers = (CircuitBreaker("device", clock=clock), CircuitBreaker("cloud", clock=clock))
    return Events("router-7", device, backend, breakers, clock.now), router._context(sane_request(req)), clock


def test_the_decision_event_carries_the_trace_and_clamps_what_the_contract_cannot_hold():
    events, ctx, clock = events_and_context(Request("short_reply", "PRIVATE text", "s", deadline_ms=-5, elapsed_ms=3))
    ctx.entered, ctx.reason = True, "default"
    ctx.trace.add(0, "ok", 120.0)
    ctx.trace.confidence, ctx.trace.output_tokens, ctx.trace.ttft_ms = 0.9, 12, float("nan")
    events.breakers[1].force_open("test")
    event = events.decision(ctx, 0, None, latency_ms=-1.0)
    assert DECISIONS.parse(event.to_json())[1] == []  # the loader takes it
    assert (event.deadline_ms, event.gateway_deadline_ms) == (1, -5)  # what the gateway sent, kept beside
    assert (event.latency_ms, event.ttft_ms, event.output_tokens) == (0.0, 0.0, 12)
    assert (event.device_model, event.threshold, event.confidence) == ("scripted-device", 0.6, 0.9)
    assert (event.breaker.device, event.breaker.cloud) == (CLOSED, OPEN)
    assert event.event_time == clock.now() and b"PRIVATE" not in event.to_json()


def test_device_measurements_out_of_the_contracts_range_are_left_out():
    stats = device_stats(
        {"peak_mem_mb": -4.0, "thermal_state": "melting", "cold_start": False, "decode_tps": 31.5, "load_ms": 900.0}
    )
    assert stats is not None
    assert (stats.decode_tps, stats.load_ms, stats.cold_start) == (31.5, None, False)  # no cold start: no load time
    assert stats.peak_mem_mb is UNSET and stats.thermal_state is UNSET  # unknown, never a refused event
    assert device_stats(None) is None and device_stats({}) is None


def test_a_transition_is_a_breaker_event_of_this_router():
    events, _, clock = events_and_context(Request("short_reply", "hi", "s"))
    event = events.breaker(Transition("cloud", CLOSED, OPEN, 1.7, 60.0, "x" * 100, 1000.0, 3))
    assert (event.instance_id, event.boundary, event.failure_rate, event.trigger, event.seq) == (
        "router-7",
        "cloud",
        1.0,  # clamped to a rate
        "x" * 64,
        3,
    )
    assert event.event_time == clock.now()


def test_a_sink_that_raises_is_logged_never_raised(caplog):
    def broken(event):
        raise RuntimeError("sink down")

    send(broken, object())
    assert "an event sink failed" in caplog.text
