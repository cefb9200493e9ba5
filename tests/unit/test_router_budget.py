"""The router enforces the budget itself (docs/router.md): hostile backends on the real clock.

docs/sources.md#seed-000 "路由层只做减法" and its degrade chain (每级有独立超时): whatever a backend does — ignore its
timeout, sleep forever, raise, answer after the deadline, trickle its HTTP answer a byte at a time —
`route()` returns within `deadline_ms - elapsed_ms + 50 ms` (plus scheduling slack on a shared machine),
the event's `latency_ms` is that wall time, and a late answer is never served. A backend that cannot
cooperate is abandoned at its timeout on a bounded pool, and the abandoned calls are counted.
"""

from __future__ import annotations

import threading
import time

import pytest
from msgspec import UNSET

from routerscope.contract.validation import DECISIONS
from routerscope.router.backends import CloudResult, DeviceResult, OpenAICloud
from routerscope.router.engine import L4_MS, Request, Router
from routerscope.router.policy import DEFAULT_POLICY, PolicyStore
from routerscope.router.sim.hostile import Trickler
from tests.support.fakes import QuickCloud

SLACK_MS = 40.0  # thread scheduling on a loaded 2-core machine


def policy(tmp_path, **replace: str) -> PolicyStore:
    text = DEFAULT_POLICY.read_text()
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    return PolicyStore(path, check_every_s=0.0)


def req(**kw) -> Request:
    return Request(
        **{
            "task_type": "short_reply",
            "text": "hello",
            "session_id": "s",
            "expected_output_tokens": 20,
            "deadline_ms": 1000,
            **kw,
        }
    )


def timed(router: Router, request: Request):
    started = time.monotonic()
    response, event = router.route(request)
    wall_ms = (time.monotonic() - started) * 1000
    assert DECISIONS.parse(event.to_json())[1] == []
    return response, event, wall_ms


# -- hostile backends: a user's, which the router must guard -------------------------------------------
class UserDevice:
    """A user's device backend: works `need_s` whatever timeout it is given (None: until released), then
    answers `outcome`; or raises."""

    model, ttft_ms, tps = "user-device", 1.0, 1e6

    def __init__(self, need_s: float | None = None, raises: bool = False):
        self.need_s, self.raises = need_s, raises
        self.release = threading.Event()
        self.finished = threading.Event()

    def generate(self, prompt, **kw):
        try:
            if self.raises:
                raise RuntimeError("the model exploded")
            if self.need_s is None:
                self.release.wait(30)
            else:
                time.sleep(self.need_s)
            return DeviceResult("late device answer", 0.99, "logprob", 3, 1.0, 1.0, "ok")
        finally:
            self.finished.set()


class UserCloud:
    """A user's cloud backend: ignores the timeout (`need_s`; None: until released), or raises."""

    def __init__(self, need_s: float | None = None, raises: bool = False):
        self.need_s, self.raises = need_s, raises
        self.release = threading.Event()

    def model_for(self, level):
        return {2: "cloud-small", 3: "cloud-large"}[level]

    def complete(self, prompt, *, level, max_tokens, timeout_ms):
        if self.raises:
            raise ConnectionResetError("peer reset")
        if self.need_s is None:
            self.release.wait(30)
        else:
            time.sleep(self.need_s)
        return CloudResult("late cloud answer", 1.0, "ok", 3)


@pytest.mark.parametrize(
    "case, device",
    [
        ("ignores its timeout (3 s of work)", lambda: UserDevice(3.0)),
        ("sleeps forever", lambda: UserDevice(None)),
        ("answers 50 ms after its timeout", lambda: UserDevice(0.75)),
    ],
)
def test_a_device_that_overruns_is_abandoned_at_its_timeout_and_the_cloud_serves(tmp_path, case, device):
    """1 s budget: L0 gets 700 ms; past it the device is abandoned (a `timeout`, `abandoned`), L2 serves."""
    device = device()
    router = Router(device, QuickCloud(), policy=policy(tmp_path))
    try:
        response, event, wall_ms = timed(router, req())
        assert wall_ms <= 1000 + L4_MS + SLACK_MS, case
        assert event.latency_ms == pytest.approx(wall_ms, abs=10), case
        assert (response.served_by, response.text) == ("cloud", "cloud answer"), case
        first = event.attempts[0]
        assert (first.level, first.outcome, first.abandoned) == (0, "timeout", True), case
        # abandoned at L0's 700 ms (its outcome, a timeout, is asserted below): a busy CI host wakes the abandoning
        # thread late (759 ms once), never early
        assert 700 - SLACK_MS <= first.latency_ms <= 700 + 3 * SLACK_MS, case
        assert (event.fallback_type, event.reason, event.degrade_level) == ("timeout", "device_timeout", 2)
        assert router.abandoned_total == 1 and router.abandoned_running == 1
        assert b'"abandoned":true' in event.to_json()
    finally:
        device.release.set()
    if device.need_s is not None and device.need_s < 1:
        assert device.finished.wait(2)  # it answered after all: dropped, and its thread is free again
        time.sleep(0.05)
        assert router.abandoned_running == 0 and router.abandoned_total == 1


def test_a_device_that_raises_is_an_error_attempt(tmp_path):
    router = Router(UserDevice(raises=True), QuickCloud(), policy=policy(tmp_path))
    response, event, wall_ms = timed(router, req())
    assert [(a.level, a.outcome) for a in event.attempts] == [(0, "error"), (2, "ok")]
    assert response.text == "cloud answer" and wall_ms < 500 and router.abandoned_total == 0


@pytest.mark.parametrize(
    "case, cloud",
    [
        ("ignores its timeout (3 s)", lambda: UserCloud(3.0)),
        ("sleeps forever", lambda: UserCloud(None)),
        ("raises", lambda: UserCloud(raises=True)),
    ],
)
def test_a_cloud_that_overruns_or_raises_ends_at_l4_within_the_budget(tmp_path, case, cloud):
    """A capability miss goes to the cloud only: L2 (0.5 × 1000), L3 (0.8 × what remains, capped at what
    remains minus 50 ms), then L4, within 1050 ms of wall time."""
    cloud = cloud()
    router = Router(UserDevice(0.0), cloud, policy=policy(tmp_path))
    try:
        response, event, wall_ms = timed(router, req(task_type="long_summary"))
    finally:
        cloud.release.set()
    assert wall_ms <= 1000 + L4_MS + SLACK_MS, case
    assert event.latency_ms == pytest.approx(wall_ms, abs=10), case
    assert response.served_by == "fallback" and event.degrade_level == 4, case
    outcomes = [(a.level, a.outcome) for a in event.attempts]
    if cloud.raises:
        assert outcomes == [(2, "error"), (3, "error"), (4, "ok")]
    else:
        assert outcomes == [(2, "timeout"), (3, "timeout"), (4, "ok")]
        assert event.attempts[0].latency_ms == pytest.approx(500, abs=SLACK_MS)
        assert all(a.abandoned is True for a in event.attempts[:2])


def test_both_sides_ignoring_their_timeouts_still_end_within_the_budget(tmp_path):
    device, cloud = UserDevice(5.0), UserCloud(5.0)
    router = Router(device, cloud, policy=policy(tmp_path))
    _, event, wall_ms = timed(router, req(deadline_ms=800, elapsed_ms=100))
    assert wall_ms <= 700 + L4_MS + SLACK_MS
    assert [(a.level, a.outcome) for a in event.attempts] == [(0, "timeout"), (2, "timeout"), (3, "timeout"), (4, "ok")]
    assert event.latency_ms == pytest.approx(wall_ms, abs=10)


def test_abandoned_calls_are_bounded_and_past_the_bound_open_the_device_breaker(tmp_path):
    """At most `max_late` abandoned calls run late at once: past that bound the device is not answering, so its
    breaker opens and the next request goes to the cloud at once (`device_unavailable`), never a thread more,
    never a queue behind the hung ones."""
    device = UserDevice(None)
    router = Router(
        device,
        QuickCloud(),
        policy=policy(tmp_path, **{"device_concurrency: 1 ": "device_concurrency: 4 "}),
        max_late=2,
        guard_workers=4,
    )
    try:
        for _ in range(2):
            _, event, _ = timed(router, req(deadline_ms=300))
            assert event.attempts[0].outcome == "timeout" and event.attempts[0].abandoned is True
        assert (router.abandoned_running, router.abandoned_total) == (2, 2)
        assert router.device_breaker.state == "open"
        response, event, wall_ms = timed(router, req(deadline_ms=300))
        assert (event.entered_device, event.reason, response.text) == (False, "device_unavailable", "cloud answer")
        assert wall_ms < 100 and router.device_guard.in_flight == 2  # no third thread went to the hung backend
    finally:
        device.release.set()
    deadline = time.monotonic() + 2
    while router.abandoned_running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert router.abandoned_running == 0 and router.abandoned_total == 2
    assert router.device_in_flight == 0  # each abandoned call gave its slot back when it really ended


def test_seed004_an_abandoned_call_keeps_its_slot_until_it_really_ends(tmp_path):
    """docs/sources.md#seed-004-6: a hard cap on concurrent device calls. A call the router abandoned still runs,
    so it still counts: with `device_concurrency: 1` no second call ever runs inside the device beside it (was: up
    to 4 at once), and the device breaker opens (every slot is held by a call the device never finished)."""
    running, peak = [0], [0]
    lock = threading.Lock()

    class Counting(UserDevice):
        def generate(self, prompt, **kw):
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            try:
                return super().generate(prompt, **kw)
            finally:
                with lock:
                    running[0] -= 1

    device = Counting(None)
    router = Router(device, QuickCloud(), policy=policy(tmp_path))
    try:
        _, first, _ = timed(router, req(deadline_ms=300))
        assert first.attempts[0].abandoned is True
        assert router.device_in_flight == 1 and router.device_breaker.state == "open"
        for _ in range(4):
            response, event, _ = timed(router, req(deadline_ms=300))
            assert not event.entered_device and response.text == "cloud answer"
        assert peak[0] == 1
    finally:
        device.release.set()
    deadline = time.monotonic() + 2
    while router.device_in_flight and time.monotonic() < deadline:
        time.sleep(0.01)
    assert router.device_in_flight == 0 and peak[0] == 1


# -- a real HTTP cloud on loopback that trickles its answer --------------------------------------------
@pytest.mark.parametrize("where", ["headers", "body"])
def test_a_cloud_that_trickles_bytes_over_real_http_is_cut_at_the_total_deadline(tmp_path, where):
    """Measured on the old per-read timeout: 8,980 ms for a 1 s budget. One total deadline over connect,
    headers and body: L2 cut at 500 ms, L3 at what remains, L4 — within 1050 ms."""
    server = Trickler(where)
    try:
        cloud = OpenAICloud(server.url)
        router = Router(UserDevice(0.0), cloud, policy=policy(tmp_path))
        assert router.cloud_guard.in_flight == 0 and not router.cloud_path.guarded  # it cooperates: no guard thread
        response, event, wall_ms = timed(router, req(task_type="long_summary"))
    finally:
        server.close()
    assert wall_ms <= 1000 + L4_MS + SLACK_MS
    assert event.latency_ms == pytest.approx(wall_ms, abs=10)
    assert [(a.level, a.outcome) for a in event.attempts] == [(2, "timeout"), (3, "timeout"), (4, "ok")]
    assert event.attempts[0].latency_ms == pytest.approx(500, abs=SLACK_MS)
    assert response.served_by == "fallback"


# -- shadow mode: the device off the user's path (docs/sources.md#seed-004-5 "端侧失败不影响主路径") -------------------
class SlowCloud(QuickCloud):
    """Answers after `need_s` (well within its timeout)."""

    def __init__(self, need_s: float, text: str = "cloud answer"):
        self.need_s, self.text = need_s, text

    def complete(self, prompt, *, level, max_tokens, timeout_ms):
        time.sleep(self.need_s)
        return CloudResult(self.text, self.need_s * 1000, "ok", 3)


def shadow_router(tmp_path, device, cloud):
    events, ended = [], threading.Event()
    # a user's device that cannot yield runs shadow only in a slot the cap leaves spare beyond one for live traffic
    edits = {"shadow: []": "shadow: [short_reply]", "device_concurrency: 1 ": "device_concurrency: 2 "}
    router = Router(device, cloud, policy=policy(tmp_path, **edits))
    router.on_event = events.append
    router.on_shadow_event = lambda e: ended.set()
    return router, events, ended


@pytest.mark.parametrize(
    "case, device, device_outcome",
    [
        ("a device slower than the cloud (2 s)", lambda: UserDevice(2.0), "ok"),
        ("a device that fails", lambda: UserDevice(raises=True), "error"),
        ("a device that hangs past its shadow timeout", lambda: UserDevice(None), "timeout"),
    ],
)
def test_seed004_shadow_a_slow_or_failing_device_never_changes_the_users_latency_or_answer(
    tmp_path, case, device, device_outcome
):
    """Measured before: a 2 s device made the user wait 2,301 ms for a 300 ms cloud, logged as L0. Now the
    cloud serves with the whole budget and the user waits for it alone; the device's own attempt, the
    served level (L2) and the comparison arrive in the event when the device ends."""
    device = device()
    router, events, ended = shadow_router(tmp_path, device, SlowCloud(0.3, "late device answer"))
    try:
        started = time.monotonic()
        response, event = router.route(req(deadline_ms=3000))
        user_ms = (time.monotonic() - started) * 1000
        assert (response.text, response.level) == ("late device answer", 2), case  # the cloud's text
        assert 300 <= user_ms <= 300 + SLACK_MS + 20, case
        if event is None:  # the device still ran when the user was served
            assert ended.wait(5), case
            event = events[-1]
    finally:
        device.release.set()
    assert DECISIONS.parse(event.to_json())[1] == [], case
    assert event.latency_ms == pytest.approx(user_ms, abs=10), case
    assert (event.mode, event.degrade_level, event.entered_device, event.cloud_calls) == ("shadow", 2, True, 1)
    assert [(a.level, a.outcome) for a in event.attempts] == [(0, device_outcome), (2, "ok")], case
    assert event.shadow_agree is (True if device_outcome == "ok" else None), case
    assert event.fallback_type == "none" and event.cloud_model == "cloud-small"
    assert router.device_in_flight == 0


def test_seed004_shadow_a_device_faster_than_the_cloud_is_compared_in_the_returned_event(tmp_path):
    router, events, _ = shadow_router(tmp_path, UserDevice(0.0), SlowCloud(0.2, "another answer"))
    response, event = router.route(req(deadline_ms=3000))
    assert event is events[-1] and response.text == "another answer"
    assert (event.shadow_agree, event.degrade_level) == (False, 2)


def test_seed004_a_pii_request_of_a_shadow_task_type_is_pinned_to_the_device_as_a_live_event(tmp_path):
    """Measured before: logged `mode = shadow`, so 36 such requests vanished from every live metric."""
    cloud = SlowCloud(0.0)
    router, events, _ = shadow_router(tmp_path, UserDevice(0.0), cloud)
    response, event = router.route(req(deadline_ms=3000, has_pii=True))
    assert (event.mode, event.reason, event.entered_device, event.cloud_calls) == ("live", "pii_pin", True, 0)
    assert response.served_by == "device" and event.rollout_stage == "shadow"


def test_seed004_a_failing_divergence_sink_on_the_devices_thread_never_loses_the_shadow_event(tmp_path, caplog):
    device = UserDevice(0.3)
    router, events, ended = shadow_router(tmp_path, device, SlowCloud(0.0, "another answer"))

    def broken(sample):
        raise RuntimeError("SQLite objects created in a thread can only be used in that same thread")

    router.on_divergence = broken
    with caplog.at_level("ERROR", logger="routerscope.router"):
        _, event = router.route(req(deadline_ms=3000))
        assert event is None and ended.wait(5)
    assert events[-1].shadow_agree is False and "divergence sample not kept" in caplog.text


def test_a_late_answer_from_a_backend_that_claims_to_cooperate_is_dropped_never_served(tmp_path):
    """`honours_deadline` is trusted for the thread, not for the answer: one that arrives past its timeout
    (+10 ms) is a `timeout`, and the chain goes on."""

    class Claims(UserDevice):
        honours_deadline = True

    router = Router(Claims(0.75), QuickCloud(), policy=policy(tmp_path))  # L0: 700 ms; it answers at 750
    response, event, _ = timed(router, req())
    assert response.text == "cloud answer" and router.abandoned_total == 0
    assert [(a.level, a.outcome, a.abandoned) for a in event.attempts] == [(0, "timeout", UNSET), (2, "ok", UNSET)]
