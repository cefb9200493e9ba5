"""`routerscope.router.device_path`: L0 judged against the threshold and the declared answer, L1 once on a
quality miss, then the cloud (or L4); the first miss names the fallback, the slot is released when the turn ends,
and an answer streamed past the commit point is served up to its last sentence."""

from __future__ import annotations

from routerscope.router.engine import Request, Router
from routerscope.router.policy import DEFAULT_POLICY, PolicyStore
from routerscope.router.sanity import sane_request
from tests.support.fakes import FakeClock, ScriptedCloud, ScriptedDevice, StreamingDevice, cloud, dev


def turn(device, cloud_backend, task_type="short_reply", deadline_ms=4000, clock=None):
    """A router's device path and a request's context, the device slot taken as the router takes it."""
    router = Router(device, cloud_backend, policy=PolicyStore(DEFAULT_POLICY), clock=clock or FakeClock())
    ctx = router._context(sane_request(Request(task_type, "hello", "s", deadline_ms=deadline_ms)))
    assert router.slots.enter(ctx.policy) is None
    return router, ctx


def test_a_confident_l0_answer_is_served_and_the_slot_released():
    router, ctx = turn(ScriptedDevice([dev(confidence=0.9, text="Sure.")]), ScriptedCloud([cloud()]))
    response, fallback_type, reason = router.device_path.run(ctx, 64, allow_cloud=True)
    assert (response.text, response.level, response.served_by) == ("Sure.", 0, "device")
    assert (fallback_type, reason, router.device_in_flight) == ("none", None, 0)
    assert [(a.level, a.outcome) for a in ctx.trace.attempts] == [(0, "ok")]


def test_a_low_confidence_answer_tries_l1_once_then_the_cloud_and_the_first_miss_names_the_fallback():
    device = ScriptedDevice([dev(confidence=0.3), dev(outcome="error")])  # short_reply's threshold is 0.60
    router, ctx = turn(device, ScriptedCloud([cloud()]))
    response, fallback_type, reason = router.device_path.run(ctx, 64, allow_cloud=True)
    assert (response.served_by, response.level) == ("cloud", 2)
    assert (fallback_type, reason) == ("quality", "low_confidence")
    assert [(a.level, a.outcome) for a in ctx.trace.attempts] == [(0, "low_confidence"), (1, "error"), (2, "ok")]
    assert ctx.trace.confidence == 0.3  # the first device attempt's, never L1's
    assert router.device_in_flight == 0


def test_without_the_cloud_a_miss_ends_at_l4():
    router, ctx = turn(ScriptedDevice([dev(outcome="timeout")]), ScriptedCloud([cloud()]))
    response, fallback_type, reason = router.device_path.run(ctx, 64, allow_cloud=False)
    assert (response.level, fallback_type, reason) == (4, "timeout", "device_timeout")
    assert ctx.trace.cloud_calls == 0


def test_an_answer_streamed_past_the_commit_point_is_served_up_to_its_last_sentence():
    clock = FakeClock()
    # 400 tokens at 10 ms each after a 50 ms first token: 4040 ms, past any timeout of a 2 s budget; the commit
    # point (120 tokens) is passed at 1240 ms, inside L0's 1400 ms: it runs on and is cut at the budget's end
    device = StreamingDevice(clock, ttft_ms=50.0, per_token_ms=10.0, tps_estimate=1000.0)
    router, ctx = turn(device, ScriptedCloud([cloud()]), deadline_ms=2000, clock=clock)
    response, fallback_type, reason = router.device_path.run(ctx, 400, allow_cloud=True, judge_midway=False)
    assert (response.text, response.partial, response.served_by) == ("A part.", True, "device")
    assert (fallback_type, reason) == ("none", "truncated")
    assert [(a.level, a.outcome) for a in ctx.trace.attempts] == [(0, "timeout")]
