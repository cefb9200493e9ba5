"""`routerscope.router.cloud_path`: L2, then L3, each under its share of what remains, every answer checked as
the device's is, then L4's canned answer; a breaker open for slowness still lets a request through while the
cloud's p90 fits."""

from __future__ import annotations

import pytest

from routerscope.router.backends import CloudResult
from routerscope.router.cloud_path import CANNED
from routerscope.router.engine import Request, Router
from routerscope.router.policy import DEFAULT_POLICY, PolicyStore
from routerscope.router.sanity import sane_request
from tests.support.fakes import FakeClock, GreedyCloud, ScriptedCloud, ScriptedDevice, cloud, dev


def path_and_context(cloud_backend, clock, task_type="short_reply", deadline_ms=2000):
    router = Router(ScriptedDevice([dev()]), cloud_backend, policy=PolicyStore(DEFAULT_POLICY), clock=clock)
    req = Request(task_type, "hello", "s", deadline_ms=deadline_ms)
    return router.cloud_path, router._context(sane_request(req))


def test_l2_that_times_out_hands_on_to_l3_with_its_share_of_what_remains():
    clock = FakeClock()
    backend = GreedyCloud(clock, need_ms=1500.0)
    path, ctx = path_and_context(backend, clock, deadline_ms=4000)
    response = path.chain(ctx)
    # L2: 0.5 × 4000 = 2000 ms, the cloud needs 1500: served at L2
    assert (response.level, response.served_by, backend.timeouts) == (2, "cloud", [pytest.approx(2000.0)])
    backend = GreedyCloud(clock, need_ms=1500.0)
    path, ctx = path_and_context(backend, clock, deadline_ms=2400)
    response = path.chain(ctx)
    # L2: 1200 ms, cut; L3: 0.8 × the 1200 left = 960 ms, cut too: no answer
    assert response is None and backend.timeouts == [pytest.approx(1200.0), pytest.approx(960.0)]
    assert [(a.level, a.outcome) for a in ctx.trace.attempts] == [(2, "timeout"), (3, "timeout")]
    assert ctx.trace.cloud_calls == 2


def test_when_the_chain_fails_l4_ends_it_with_the_canned_answer():
    clock = FakeClock()
    path, ctx = path_and_context(ScriptedCloud([cloud("error")]), clock)
    response = path.or_l4(ctx)
    assert (response.text, response.level, response.served_by) == (CANNED, 4, "fallback")
    assert [a.level for a in ctx.trace.attempts] == [2, 3, 4]
    path, ctx = path_and_context(ScriptedCloud([cloud("ok")]), clock)
    assert path.or_l4(ctx, allowed=False).level == 4 and ctx.trace.cloud_calls == 0


def test_a_cloud_answer_not_of_the_declared_form_is_never_handed_on():
    clock = FakeClock()
    backend = ScriptedCloud([CloudResult("not a label at all\nsecond line", 300.0, "ok", 7), cloud("ok")])
    path, ctx = path_and_context(backend, clock, task_type="intent_classify")
    assert path.chain(ctx) is None  # neither answer is one of the labels
    assert [a.outcome for a in ctx.trace.attempts] == ["validator_failed", "validator_failed"]
    assert ctx.trace.answer_check is not None


def test_a_breaker_open_for_slowness_lets_a_request_through_while_the_p90_fits():
    clock = FakeClock()
    backend = ScriptedCloud([cloud("ok")])
    path, ctx = path_and_context(backend, clock, deadline_ms=4000)
    path.trigger.breaker.force_open("cloud_p90_spike")
    path.trigger.open_for_latency = True
    path.trigger.latency.add(1800.0)  # the recent p90, 1800 ms, fits L2's 2000
    response = path.chain(ctx)
    assert response is not None and response.level == 2 and backend.calls == 1
    path.trigger.open_for_latency = False  # open for failures: no call at all
    _, ctx = path_and_context(backend, clock)
    assert path.chain(ctx) is None and backend.calls == 1
