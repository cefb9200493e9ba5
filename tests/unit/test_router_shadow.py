"""`routerscope.router.shadow`: the cloud serves a shadow request with the whole budget, the device runs beside it
in a shadow slot, its attempt comes first in the event, a disagreement is a sample; with the cloud's breaker open
the device's answer serves."""

from __future__ import annotations

import pytest

from routerscope.router.engine import Request, Router
from routerscope.router.policy import DEFAULT_POLICY, PolicyStore
from routerscope.router.sanity import sane_request
from tests.support.fakes import FakeClock, GreedyCloud, GreedyDevice, ScriptedCloud, ScriptedDevice, cloud, dev


def shadowed(device, cloud_backend, clock, concurrency=2):
    """A router on a simulated clock whose `short_reply` is in shadow, and a shadow request's context."""
    policy = (
        PolicyStore(DEFAULT_POLICY).current().with_(shadow=frozenset({"short_reply"}), device_concurrency=concurrency)
    )
    source = type("Fixed", (), {"current": lambda self: policy})()
    events, samples = [], []
    router = Router(
        device, cloud_backend, policy=source, clock=clock, on_event=events.append, on_divergence=samples.append
    )
    ctx = router._context(sane_request(Request("short_reply", "hello", "s", deadline_ms=2000, request_id="r1")))
    assert ctx.mode == "shadow"
    return router, ctx, events, samples


def test_the_cloud_serves_with_the_whole_budget_and_the_devices_attempt_comes_first():
    clock = FakeClock()
    device, backend = GreedyDevice(clock, need_ms=300.0, text="A different answer."), GreedyCloud(clock, need_ms=400.0)
    router, ctx, events, samples = shadowed(device, backend, clock)
    response, event = router.shadow.serve(ctx)
    assert (response.served_by, response.text) == ("cloud", "cloud answer")
    # on a simulated clock the device runs first; the cloud then gets a fresh budget: L2 is 0.5 × 2000
    assert backend.timeouts == [pytest.approx(1000.0)] and device.timeouts == [pytest.approx(1400.0)]
    assert event is events[0] and event.mode == "shadow" and event.entered_device
    assert [(a.level, a.outcome) for a in event.attempts] == [(0, "ok"), (2, "ok")]
    assert event.latency_ms == pytest.approx(400.0)  # the user's latency: the cloud's alone
    assert event.shadow_agree is False
    assert [(s.device_text, s.cloud_text) for s in samples] == [("A different answer.", "cloud answer")]
    assert router.shadow_in_flight == 0


def test_a_device_with_no_spare_slot_leaves_the_cloud_alone_with_device_busy():
    clock = FakeClock()
    router, ctx, _, samples = shadowed(ScriptedDevice([dev()]), ScriptedCloud([cloud()]), clock, concurrency=1)
    response, event = router.shadow.serve(ctx)  # a device that cannot yield: never with a cap of 1
    assert response.served_by == "cloud" and not event.entered_device and event.reason == "device_busy"
    assert event.shadow_agree is None and samples == []


def test_with_the_clouds_breaker_open_the_devices_answer_serves():
    clock = FakeClock()
    router, ctx, _, _ = shadowed(ScriptedDevice([dev(text="Device answer.")]), ScriptedCloud([cloud()]), clock)
    router.cloud_breaker.force_open("test")
    response, event = router.shadow.serve(ctx)
    assert (response.served_by, response.text, response.level) == ("device", "Device answer.", 0)
    assert event.degrade_level == 0 and event.cloud_calls == 0
