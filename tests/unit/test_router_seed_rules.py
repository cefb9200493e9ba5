"""The router's rules as docs/sources.md#seed-000 states them (docs/router.md), one table per rule, on a fake clock; and
the budget and decision point again on slow real-time backends (a device that sleeps, a real HTTP cloud).

docs/sources.md#seed-000 lines cited by the tests:
* "路由层只做减法" and the degrade-chain table (L0 预算×0.7 → L1 ×0.3 → L2 ×0.5 → L3 ×0.8 → L4 50ms): each
  level's timeout is its share of the budget remaining when it starts, never past what remains minus 50 ms.
* "在消耗掉 30% 预算时做一次判定,把剩下的 70% 留给回退路径本身": the decision point.
* "过了承诺点就不再接管,宁可让端侧跑完": the commit point.
* "必须按 task_type 分开校准": calibration stands on one confidence per request (L0's).
* "云侧连续失败或 P90 突增时全量走端侧 … 端侧模型加载失败、内存不足或回退率连续超标时全量上云": the breakers.
docs/sources.md#seed-004-6
"给端侧设一个硬并发上限,超出的部分直接走云端——宁可多花钱也不要让请求排队": the concurrency cap.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from routerscope.contract.validation import DECISIONS
from routerscope.router.backends import DeviceResult, OpenAICloud
from routerscope.router.engine import L4_MS, Request, Router, device_fits, level_timeout_ms
from routerscope.router.policy import DEFAULT_POLICY, PolicyStore, write_policy
from tests.support.fakes import BlockingDevice, FakeClock, GreedyCloud, GreedyDevice, SleepingDevice, StreamingDevice


def policy_file(tmp_path, text: str | None = None, **replace: str):
    path = tmp_path / "policy.yaml"
    text = text or DEFAULT_POLICY.read_text()
    for old, new in replace.items():
        text = text.replace(old, new)
    path.write_text(text)
    return PolicyStore(path, check_every_s=0.0)


def req(**kw) -> Request:
    return Request(
        **{"task_type": "short_reply", "text": "hello", "session_id": "s", "expected_output_tokens": 300, **kw}
    )


def shape(event):
    return [(a.level, a.outcome, round(a.latency_ms, 3)) for a in event.attempts]


def valid(event):
    _, rules = DECISIONS.parse(event.to_json())
    assert rules == [], rules
    return event


# -- the budget only subtracts ------------------------------------------------------------------
@pytest.mark.parametrize(
    "deadline_ms, elapsed_ms, expected",
    [
        # 8 s, nothing spent: L0 0.7×8000; L2 0.5×2400; L3 0.8×1200 = 960; L4. (Old rule: 5600 + 4000 + 6400.)
        (8000, 0, [(0, "timeout", 5600.0), (2, "timeout", 1200.0), (3, "timeout", 960.0), (4, "ok", 0.0)]),
        # half of it already spent upstream: every share is of the 4000 ms that remain
        (8000, 4000, [(0, "timeout", 2800.0), (2, "timeout", 600.0), (3, "timeout", 480.0), (4, "ok", 0.0)]),
        # 1 s: L3's 0.8 × 150 = 120 would eat L4's reserve: capped at 150 - 50 = 100
        (1000, 0, [(0, "timeout", 700.0), (2, "timeout", 150.0), (3, "timeout", 100.0), (4, "ok", 0.0)]),
        # 200 ms: L0 0.7 × 200; of the 60 left L2 gets only the 10 ms above L4's reserve; nothing is left for L3
        (200, 0, [(0, "timeout", 140.0), (2, "timeout", 10.0), (4, "ok", 0.0)]),
        # 40 ms left: not even L0 fits before L4's 50 ms, the canned answer at once
        (1040, 1000, [(4, "ok", 0.0)]),
        # over the deadline on arrival
        (1000, 5000, [(4, "ok", 0.0)]),
    ],
)
def test_seed000_budget_only_subtracts_each_level_a_share_of_what_remains(tmp_path, deadline_ms, elapsed_ms, expected):
    """docs/sources.md#seed-000 "路由层只做减法" + the degrade-chain table: backends that use every millisecond they are
    given; the request ends within deadline - elapsed + 50 ms and its latency_ms is the time it took."""
    clock = FakeClock()
    router = Router(GreedyDevice(clock), GreedyCloud(clock), policy=policy_file(tmp_path), clock=clock)
    started = clock.t
    _, event = router.route(req(deadline_ms=deadline_ms, elapsed_ms=elapsed_ms))
    valid(event)
    assert shape(event) == expected
    took_ms = (clock.t - started) * 1000
    assert event.latency_ms == pytest.approx(took_ms)
    assert took_ms <= max(0, deadline_ms - elapsed_ms) + L4_MS


@pytest.mark.parametrize(
    "level, remaining_ms, expected_ms",
    [
        (0, 8000, 5600),
        (1, 8000, 2400),
        (2, 8000, 4000),
        (3, 8000, 6400),  # the seed's shares when there is room
        (3, 200, 150),
        (0, 100, 50),
        (2, 50, 0),  # never past what remains minus L4's 50 ms
    ],
)
def test_seed000_level_timeout_table(level, remaining_ms, expected_ms):
    assert level_timeout_ms(level, remaining_ms) == pytest.approx(expected_ms)


def test_seed000_l1_retry_gets_its_share_of_what_l0_left(tmp_path):
    clock = FakeClock()
    device = GreedyDevice(clock, need_ms=1000, confidence=0.1)  # answers in 1 s, below the threshold
    router = Router(device, GreedyCloud(clock, need_ms=300), policy=policy_file(tmp_path), clock=clock)
    _, event = router.route(req(deadline_ms=8000))
    assert device.timeouts == [pytest.approx(5600), pytest.approx(0.3 * 7000)]
    assert shape(event) == [(0, "low_confidence", 1000.0), (1, "low_confidence", 1000.0), (2, "ok", 300.0)]
    assert event.latency_ms == pytest.approx(2300)


# -- the decision point at 30 % of the budget -------------------------------------------------------
@pytest.mark.parametrize(
    "case, deadline_ms, elapsed_ms, tokens, per_token_ms, decided, expected, reason",
    [
        # 300 tokens at 40 ms: at 2400 ms (30 % of 8 s) 58 tokens are out; 242 × 40 = 9680 ms > 0.9 × 5600
        (
            "slow stream: stopped at 30 %, to the cloud",
            8000,
            0,
            300,
            40.0,
            (2400.0, 58),
            [(0, "timeout", 2400.0), (2, "ok", 500.0)],
            "latency_pressure",
        ),
        # 200 tokens at 20 ms: 116 out at 2400 ms, 84 × 20 = 1680 ms fits; the device finishes at 100 + 199 × 20
        ("fast enough: keeps the device", 8000, 0, 200, 20.0, (2400.0, 116), [(0, "ok", 4080.0)], "default"),
        # a quarter already spent upstream: the point is 400 ms into the request; 287 × 25 = 7175 ms > 0.9 × 5600
        (
            "30 % counts the gateway's elapsed",
            8000,
            2000,
            300,
            25.0,
            (400.0, 13),
            [(0, "timeout", 400.0), (2, "ok", 500.0)],
            "latency_pressure",
        ),
    ],
)
def test_seed000_decision_point_at_30_percent(
    tmp_path, case, deadline_ms, elapsed_ms, tokens, per_token_ms, decided, expected, reason
):
    """docs/sources.md#seed-000 "在消耗掉 30% 预算时做一次判定": re-estimate from the observed TTFT and token rate."""
    clock = FakeClock()
    device = StreamingDevice(clock, ttft_ms=100.0, per_token_ms=per_token_ms)
    router = Router(device, GreedyCloud(clock, need_ms=500), policy=policy_file(tmp_path), clock=clock)
    _, event = router.route(req(deadline_ms=deadline_ms, elapsed_ms=elapsed_ms, expected_output_tokens=tokens))
    valid(event)
    assert device.decided == [decided], case
    assert shape(event) == expected, case
    assert event.reason == reason, case
    assert event.fallback_type == ("timeout" if reason == "latency_pressure" else "none"), case


def test_seed000_no_decision_past_the_commit_point_and_no_decision_without_a_cloud(tmp_path):
    """Past the commit point (120 tokens) the device is never taken over; a PII request has no cloud to go to."""
    clock = FakeClock()
    device = StreamingDevice(clock, ttft_ms=100.0, per_token_ms=19.0)  # 122 tokens out at 2400 ms
    router = Router(device, GreedyCloud(clock, need_ms=500), policy=policy_file(tmp_path), clock=clock)
    _, event = router.route(req(deadline_ms=8000))
    assert device.decided == []
    pii = StreamingDevice(clock, ttft_ms=100.0, per_token_ms=40.0)
    router = Router(pii, GreedyCloud(clock), policy=policy_file(tmp_path), clock=clock)
    _, event = router.route(req(deadline_ms=8000, has_pii=True))
    assert pii.decided == [] and event.cloud_calls == 0


def test_device_fits_table():
    # (remaining, elapsed, tokens, ttft, expected, device tps estimate) -> fits?
    assert device_fits(5600, 2400, 58, 100, 300, 100) is False  # 242 × 40 ms = 9680 > 5040
    assert device_fits(5600, 2400, 231, 100, 300, 100) is True  # 69 × 10 ms
    assert device_fits(1000, 100, 1, 100, 50, 100) is True  # one token: the device's own estimate, 49 × 10 ms
    assert device_fits(1000, 100, 1, 100, 200, 100) is False  # 199 × 10 ms > 900


# -- the commit point: the device runs to the end of the budget; a partial answer is truncated ---------
@pytest.mark.parametrize(
    "per_token_ms, expected, served, reason",
    [
        # commit point 60 tokens. 300 tokens at 19 ms: 100 + 299 × 19 = 5781 ms > L0's 5600, but the commit
        # point (at 1221 ms) came first: it runs on, within 8000 - 50 = 7950, and finishes in full
        (19.0, [(0, "ok", 5781.0)], "A full answer.", "default"),
        # 300 tokens at 30 ms: 9070 ms; committed at 1870 ms (before the 30 % decision point); cut at 7950 ms,
        # the partial answer served up to its last complete sentence, flagged as truncated
        # (docs/sources.md#seed-000: "返回部分结果"), its attempt a timeout
        (30.0, [(0, "timeout", 7950.0)], "A part.", "truncated"),
    ],
)
def test_seed000_commit_point_runs_to_the_end_of_the_remaining_budget(tmp_path, per_token_ms, expected, served, reason):
    """docs/sources.md#seed-000 "过了承诺点就不再接管,宁可让端侧跑完": past the commit point the device may use the
    whole remaining budget minus L4's 50 ms, not only L0's 70 % share."""
    clock = FakeClock()
    device = StreamingDevice(clock, ttft_ms=100.0, per_token_ms=per_token_ms, tps_estimate=1000.0)
    store = policy_file(tmp_path, **{"commit_tokens: 120": "commit_tokens: 60"})
    router = Router(device, GreedyCloud(clock), policy=store, clock=clock)
    response, event = router.route(req(deadline_ms=8000))
    valid(event)
    assert device.limits == (5600.0, 7950.0)
    assert response.served_by == "device" and response.text == served
    assert shape(event) == expected
    assert (event.fallback_type, event.reason, event.degrade_level, event.cloud_calls) == ("none", reason, 0, 0)
    assert event.latency_ms <= 8000 + L4_MS


# -- neither fits: truncate first (docs/sources.md#seed-000 "都赶不上,裁剪输出或返回部分结果") -------------------------
@pytest.mark.parametrize(
    "case, remaining_ms, prefill_tps, input_tokens, expected_cap, expected",
    [
        # the seed's long-output row with 2 s left: device 150 + 300 × 10 = 3150 ms, cloud p90 2800 ms (primed);
        # the device is given L0's share, 0.7 × 2000 = 1400 ms; 0.9 × 1400 - 150 = 1110 ms of decoding at 100
        # tokens/s: the cap becomes 111, served at L0
        ("truncated to what fits", 2000, None, 100, 111, "truncated"),
        # prefill counts: 300 tokens at 1000 tokens/s = 300 ms more, (1260 - 150 - 300) × 0.1 = 81 tokens
        ("the prefill is part of the ETA", 2000, 1000.0, 300, 81, "truncated"),
        # not even one token fits (a 2000-token prompt at 1000 tokens/s: 2 s of prefill): never enters the
        # device, the cloud is tried with what remains, then L4
        ("prefill alone does not fit", 2000, 1000.0, 2000, None, "latency_pressure"),
    ],
)
def test_seed000_neither_fits_truncates_before_l4(
    tmp_path, case, remaining_ms, prefill_tps, input_tokens, expected_cap, expected
):
    clock = FakeClock()
    device = GreedyDevice(clock, need_ms=0, ttft_ms=150.0, tps=100.0)
    device.prefill_tps = prefill_tps
    cloud = GreedyCloud(clock, need_ms=2800)
    router = Router(device, cloud, policy=policy_file(tmp_path), clock=clock)
    for _ in range(20):  # the cloud's p90 is 2.8 s
        router.cloud_latency.add(2800.0)
    caps = []
    generate = device.generate
    device.generate = lambda prompt, **kw: caps.append(kw["max_tokens"]) or generate(prompt, **kw)
    response, event = router.route(
        req(
            task_type="short_reply",
            deadline_ms=remaining_ms,
            expected_output_tokens=300,
            input_tokens=input_tokens,
        )
    )
    valid(event)
    assert event.reason == expected, case
    if expected_cap is None:
        assert caps == [] and not event.entered_device, case
        assert [a.level for a in event.attempts][-1] == 4 and event.schema_version == 2
    else:
        assert caps == [expected_cap], case
        assert (response.served_by, event.degrade_level, event.fallback_type) == ("device", 0, "none"), case


def test_seed000_a_truncated_answer_is_sized_to_l0s_share_and_finishes(tmp_path):
    """docs/sources.md#seed-000 "裁剪输出": with the device's speed estimated exactly (150 ms to the first token,
    10 ms a token) and the cloud's breaker open, 2 s left: L0 is given 0.7 × 2000 = 1400 ms, so the cap is
    (0.9 × 1400 - 150) / 10 = 111 tokens, which stream in 150 + 110 × 10 = 1250 ms: served whole by the device,
    `truncated` (was: sized for 90 % of the 2 s, cut at 1400 ms, the canned answer, `device_timeout`)."""
    clock = FakeClock()
    device = StreamingDevice(clock, ttft_ms=150.0, per_token_ms=10.0, tps_estimate=100.0)
    device.ttft_ms = 150.0
    router = Router(device, GreedyCloud(clock), policy=policy_file(tmp_path), clock=clock)
    router.cloud_breaker.force_open("test")
    response, event = router.route(req(task_type="short_reply", deadline_ms=2000, expected_output_tokens=300))
    valid(event)
    assert (response.served_by, response.text) == ("device", "A full answer.")
    assert (event.reason, event.fallback_type, event.degrade_level) == ("truncated", "none", 0)
    assert shape(event) == [(0, "ok", 1250.0)]


def test_seed000_a_truncated_request_is_recorded_as_truncated_whichever_way_it_ends(tmp_path):
    """The device slower than its estimate: the truncated run times out before its commit point and the canned
    answer serves (the cloud's breaker is open); the event still says `truncated`, with the timeout attempt."""
    clock = FakeClock()
    device = StreamingDevice(clock, ttft_ms=150.0, per_token_ms=30.0, tps_estimate=100.0)
    router = Router(device, GreedyCloud(clock), policy=policy_file(tmp_path), clock=clock)
    router.cloud_breaker.force_open("test")
    response, event = router.route(req(task_type="short_reply", deadline_ms=2000, expected_output_tokens=300))
    valid(event)
    assert response.served_by == "fallback"
    assert (event.reason, event.fallback_type) == ("truncated", "timeout")
    assert [(a.level, a.outcome) for a in event.attempts] == [(0, "timeout"), (4, "ok")]


def test_seed000_truncated_reason_and_abandoned_attempts_are_v2_only():
    """`truncated` (an additive enum value) and an attempt's `abandoned` belong to contract v2: a v1 event
    naming them is refused, old v1 events (without them) stay valid."""
    from tests.support.events import decision

    v2 = decision()
    assert DECISIONS.parse(json.dumps(v2 | {"schema_version": 1}).encode())[1] == []
    for version, rules in ((2, []), (1, ["schema.invalid.reason"])):
        raw = json.dumps(v2 | {"schema_version": version, "reason": "truncated"}).encode()
        assert DECISIONS.parse(raw)[1] == rules
    abandoned = [{"level": 0, "outcome": "timeout", "latency_ms": 700.0, "abandoned": True}]
    late = v2 | {"attempts": abandoned + [{"level": 2, "outcome": "ok", "latency_ms": 5.0}]}
    late |= {"fallback_type": "timeout", "reason": "device_timeout", "degrade_level": 2, "cloud_calls": 1}
    for version, rules in ((2, []), (1, ["schema.invalid.attempts"])):
        assert DECISIONS.parse(json.dumps(late | {"schema_version": version}).encode())[1] == rules


# -- L4 and latency from the injected clock ----------------------------------------------------------
def test_seed000_l4_is_logged_with_its_real_latency_bounded_by_50ms(tmp_path):
    slow_clock = FakeClock()

    def ticking():  # every read of the clock moves it 30 ms: L4's two reads are 30 ms apart
        slow_clock.t += 0.03
        return slow_clock.t

    router = Router(
        GreedyDevice(slow_clock, need_ms=0), GreedyCloud(slow_clock), policy=policy_file(tmp_path), clock=ticking
    )
    router.device_breaker.force_open("test")
    router.cloud_breaker.force_open("test")
    _, event = router.route(req())
    assert event.attempts[-1].level == 4 and 0 < event.attempts[-1].latency_ms <= L4_MS


def test_event_latency_is_the_simulated_time_not_the_wall_time(tmp_path):
    clock = FakeClock()
    router = Router(GreedyDevice(clock, need_ms=691), GreedyCloud(clock), policy=policy_file(tmp_path), clock=clock)
    _, event = router.route(req())
    assert event.latency_ms == pytest.approx(691) and event.attempts[0].latency_ms == pytest.approx(691)


# -- one confidence per request: L0's -------------------------------------------------------------
@pytest.mark.parametrize(
    "l0, l1, confidence, fallback_type, reason",
    [
        (dict(confidence=0.2), dict(confidence=0.5), 0.2, "quality", "low_confidence"),
        (dict(confidence=0.2), dict(confidence=0.95), 0.2, "none", "default"),  # L1 served; L0 was judged first
        (dict(confidence=0.9, text="{bad"), dict(confidence=0.3, text='{"a": 1}'), 0.9, "quality", "validator_failed"),
    ],
)
def test_seed000_event_confidence_is_l0s_and_the_first_miss_names_the_fallback(
    tmp_path, l0, l1, confidence, fallback_type, reason
):
    """docs/sources.md#seed-000 "必须按 task_type 分开校准": calibration
    judges the confidence the threshold judged first."""
    task = "slot_extract" if "text" in l0 else "short_reply"
    results = [
        DeviceResult(x.get("text", "positive"), x["confidence"], "logprob", 5, 1.0, 10.0, "ok") for x in (l0, l1)
    ]

    class TwoShot:
        model, ttft_ms, tps = "two-shot", 1.0, 1e6

        def __init__(self):
            self.i = 0

        def generate(self, prompt, **kw):
            self.i += 1
            return results[self.i - 1]

    clock = FakeClock()
    router = Router(TwoShot(), GreedyCloud(clock, need_ms=100), policy=policy_file(tmp_path), clock=clock)
    _, event = router.route(req(task_type=task, expected_output_tokens=None))
    valid(event)
    assert (event.confidence, event.fallback_type, event.reason) == (confidence, fallback_type, reason)


# -- the device concurrency cap: the excess to the cloud, never a queue ------------------------------
@pytest.mark.parametrize("cap, second", [(1, "device_busy"), (2, "default")])
def test_seed004_device_concurrency_cap_sends_the_excess_to_the_cloud(tmp_path, cap, second):
    """docs/sources.md#seed-004-6 "硬并发上限,超出的部分直接走云端": the second request does not wait for the first."""
    device = BlockingDevice()
    cloud = GreedyCloud(FakeClock(), need_ms=0)
    router = Router(
        device, cloud, policy=policy_file(tmp_path, **{"device_concurrency: 1": f"device_concurrency: {cap}"})
    )
    first = threading.Thread(target=router.route, args=(req(),))
    first.start()
    try:
        assert device.entered.wait(5)
        if cap == 2:
            device.entered.clear()
            threading.Timer(0.05, device.release.set).start()  # the second may enter: let both finish
        started = time.monotonic()
        _, event = router.route(req())
        waited = time.monotonic() - started
    finally:
        device.release.set()
        first.join(5)
    valid(event)
    assert event.reason == second and event.schema_version == 2
    if second == "device_busy":
        assert waited < 1.0, "never queued behind the busy device"
        assert (event.entered_device, event.fallback_type, event.degrade_level, event.cloud_calls) == (
            False,
            "none",
            2,
            1,
        )
    assert router.device_in_flight == 0


# -- a cloud that answers 200 with something else ----------------------------------------------------
class Cloud200(BaseHTTPRequestHandler):
    body = b"{}"
    delay_s = 0.0

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        time.sleep(self.server.delay_s)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        try:
            self.wfile.write(self.server.body)
        except OSError:
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def http_cloud():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Cloud200)
    server.daemon_threads = True
    server.body, server.delay_s = b"{}", 0.0
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    "body",
    [
        b'{"error": {"message": "rate limited"}}',
        b"[]",
        b'{"choices": []}',
        b'{"choices": [{"text": "legacy"}]}',
        b'{"choices": [{"message": {"content": 42}}]}',
        b"<html>maintenance</html>",
        b"",
    ],
)
def test_a_200_reply_that_is_not_a_chat_completion_is_an_error_attempt(http_cloud, tmp_path, body):
    http_cloud.body = body
    cloud = OpenAICloud(f"http://127.0.0.1:{http_cloud.server_address[1]}")
    router = Router(GreedyDevice(FakeClock()), cloud, policy=policy_file(tmp_path))
    response, event = router.route(req(task_type="long_summary"))  # unsupported on the device: straight to the cloud
    valid(event)
    assert [(a.level, a.outcome) for a in event.attempts] == [(2, "error"), (3, "error"), (4, "ok")]
    assert response.served_by == "fallback"


# -- slow real-time backends ------------------------------------------------------------------------
@pytest.mark.parametrize("deadline_ms, elapsed_ms", [(700, 100), (400, 0)])
def test_seed000_real_time_slow_backends_never_exceed_the_remaining_budget_plus_50ms(
    http_cloud, tmp_path, deadline_ms, elapsed_ms
):
    """A device that streams until its timeout, a real HTTP cloud that answers after 2 s: the request
    ends within deadline - elapsed + 50 ms of wall time, and latency_ms is that time."""
    http_cloud.delay_s = 2.0
    http_cloud.body = b'{"choices": [{"message": {"content": "late"}}]}'
    cloud = OpenAICloud(f"http://127.0.0.1:{http_cloud.server_address[1]}")
    router = Router(SleepingDevice(0.005), cloud, policy=policy_file(tmp_path))
    started = time.monotonic()
    _, event = router.route(req(deadline_ms=deadline_ms, elapsed_ms=elapsed_ms, has_pii=False))
    wall_ms = (time.monotonic() - started) * 1000
    valid(event)
    assert wall_ms <= deadline_ms - elapsed_ms + L4_MS
    assert event.latency_ms == pytest.approx(wall_ms, abs=5)
    assert [a.level for a in event.attempts][-1] == 4 and all(a.outcome != "ok" for a in event.attempts[:-1])


def test_seed000_real_time_decision_point_moves_a_slow_stream_to_the_cloud(http_cloud, tmp_path):
    """30 % of 1 s: the device streams 300 tokens at 5 ms (1.5 s, too slow); stopped at ~300 ms."""
    http_cloud.body = b'{"choices": [{"message": {"content": "cloud"}}], "usage": {"completion_tokens": 1}}'
    cloud = OpenAICloud(f"http://127.0.0.1:{http_cloud.server_address[1]}")
    router = Router(SleepingDevice(0.005), cloud, policy=policy_file(tmp_path))
    response, event = router.route(req(deadline_ms=1000))
    valid(event)
    assert (event.fallback_type, event.reason, response.served_by) == ("timeout", "latency_pressure", "cloud")
    assert event.attempts[0].outcome == "timeout" and 280 <= event.attempts[0].latency_ms < 450


# -- breakers as the seed says -------------------------------------------------------------------
def test_seed000_cloud_breaker_opens_on_a_p90_spike(tmp_path):
    """docs/sources.md#seed-000 "云侧 … P90 突增时全量走端侧": 20
    successful calls at 3.5 s against the shipped floor of 1000 ms × 3."""
    clock = FakeClock()
    seen = []
    router = Router(
        GreedyDevice(clock, need_ms=10),
        GreedyCloud(clock, need_ms=3500),
        policy=policy_file(tmp_path),
        clock=clock,
        on_breaker_event=seen.append,
    )
    for _ in range(19):
        router.route(req(task_type="long_summary", deadline_ms=60_000))
    assert router.cloud_breaker.state == "closed"
    router.route(req(task_type="long_summary", deadline_ms=60_000))
    assert [(e.boundary, e.to_state, e.trigger) for e in seen] == [("cloud", "open", "cloud_p90_spike")]
    _, event = router.route(req(deadline_ms=60_000, expected_output_tokens=10))
    assert event.entered_device and event.cloud_calls == 0  # everything stays on the device


@pytest.mark.parametrize("error_kind, opens", [("oom", True), ("load_failure", True), (None, False)])
def test_seed000_device_breaker_opens_at_once_on_load_failure_or_oom(tmp_path, error_kind, opens):
    """docs/sources.md#seed-000 "端侧模型加载失败、内存不足 … 全量上云":
    one such error opens it; one plain error does not."""
    clock = FakeClock()

    class Failing(GreedyDevice):
        def generate(self, prompt, **kw):
            return DeviceResult("", None, "none", 0, 0.0, 0.0, "error", error_kind=error_kind)

    router = Router(Failing(clock), GreedyCloud(clock, need_ms=100), policy=policy_file(tmp_path), clock=clock)
    router.route(req())
    assert (router.device_breaker.state == "open") is opens
    _, event = router.route(req())
    assert (event.reason == "device_unavailable") is opens


@pytest.mark.parametrize(
    "window_rates, opens",
    [
        ([1.0, 1.0, 1.0], True),  # three consecutive windows over 50 %
        ([1.0, 1.0, 0.0], False),  # the streak broken by a good window
        ([1.0, 0.0, 1.0, 1.0], False),  # only two in a row
        ([0.6, 0.6, 0.6], True),
        ([0.5, 0.5, 0.5], False),  # at the limit is not over it
    ],
)
def test_seed000_device_breaker_opens_on_fallback_rate_over_limit_for_consecutive_windows(
    tmp_path, window_rates, opens
):
    """docs/sources.md#seed-000 "回退率连续超标时全量上云": policy limit
    0.5, 3 windows of 60 s, at least 20 requests each."""
    clock = FakeClock()
    device = GreedyDevice(clock, need_ms=1)
    no_failure_rate = {
        "min_calls: 10, cooldown_s: 30,\n           fallback": (
            "min_calls: 1000000, cooldown_s: 30,\n           fallback"
        )
    }
    router = Router(device, GreedyCloud(clock, need_ms=1), policy=policy_file(tmp_path, **no_failure_rate), clock=clock)
    assert router.device_breaker.policy.min_calls == 10**6  # the failure-rate trigger stays out of this table
    start = clock.t
    for w, rate in enumerate(window_rates):
        for i in range(20):
            clock.t = start + 60 * w + i
            device.confidence = 0.1 if i < rate * 20 else 0.9
            router.route(req(expected_output_tokens=10))
    clock.t = start + 60 * len(window_rates) + 1
    router.route(req(expected_output_tokens=10))  # the first request of the next window closes the last one
    assert (router.device_breaker.state == "open") is opens


def test_breaker_settings_hot_reload_with_the_policy(tmp_path):
    clock = FakeClock()
    store = PolicyStore(policy_file(tmp_path).path, check_every_s=0.0, clock=clock)
    router = Router(GreedyDevice(clock, need_ms=1), GreedyCloud(clock, need_ms=1), policy=store, clock=clock)
    assert router.device_breaker.policy.min_calls == 10
    write_policy(
        store.path,
        store.path.read_text().replace(
            "min_calls: 10, cooldown_s: 30,\n           fallback", "min_calls: 3, cooldown_s: 30,\n           fallback"
        ),
    )
    router.route(req(expected_output_tokens=10))  # the change is seen, and read once it has settled (1 s)
    clock.t += 1.0
    router.route(req(expected_output_tokens=10))
    assert router.device_breaker.policy.min_calls == 3


@pytest.mark.parametrize("open_boundary", ["device", "cloud"])
def test_shadow_mode_respects_both_breakers(tmp_path, open_boundary):
    clock = FakeClock()
    device, cloud = GreedyDevice(clock, need_ms=10), GreedyCloud(clock, need_ms=10)
    store = policy_file(
        tmp_path, **{"shadow: []": "shadow: [short_reply]", "device_concurrency: 1 ": "device_concurrency: 2 "}
    )
    router = Router(device, cloud, policy=store, clock=clock)
    getattr(router, f"{open_boundary}_breaker").force_open("test")
    response, event = router.route(req(expected_output_tokens=10))
    valid(event)
    assert event.mode == "shadow"
    if open_boundary == "device":
        assert device.timeouts == [] and event.reason == "device_unavailable" and not event.entered_device
        assert response.served_by == "cloud" and [a.level for a in event.attempts] == [2]
    else:
        assert cloud.timeouts == [] and event.cloud_calls == 0 and response.served_by == "device"


def test_every_event_is_contract_v2_and_json_round_trips(tmp_path):
    clock = FakeClock()
    router = Router(GreedyDevice(clock, need_ms=10), GreedyCloud(clock), policy=policy_file(tmp_path), clock=clock)
    _, event = router.route(req(expected_output_tokens=10))
    assert json.loads(event.to_json())["schema_version"] == 2


@pytest.mark.parametrize(
    "edit, message",
    [
        ({"device_concurrency: 1 ": "device_concurrency: 0 "}, "device_concurrency must be an integer from 1 to 1024"),
        (
            {"device_concurrency: 1 ": "device_concurrency: true "},
            "device_concurrency must be an integer from 1 to 1024",
        ),
        (
            {"device_concurrency: 1 ": "device_concurrency: two "},
            "device_concurrency must be an integer from 1 to 1024",
        ),
        ({"p90_spike_factor: 3.0": "p90_spike_factor: -1"}, "breakers.cloud: a value is out of range"),
        ({"fallback_rate_limit: 0.5": "fallback_rate_limit: 1.5"}, "breakers.device: a value is out of range"),
        ({"fallback_windows: 3": "fallback_windows: 0"}, "breakers.device: a value is out of range"),
        ({"fallback_windows: 3": "fallback_windowz: 3"}, "breakers.device: .*fallback_windowz"),
    ],
)
def test_hostile_concurrency_and_breaker_settings_are_one_clear_error(tmp_path, edit, message):
    from routerscope.core.errors import ConfigError

    path = tmp_path / "policy.yaml"
    text = DEFAULT_POLICY.read_text()
    for old, new in edit.items():
        assert old in text
        text = text.replace(old, new)
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        PolicyStore(path)


def test_device_failed_opens_the_device_breaker_for_the_app_that_loads_the_model(tmp_path):
    seen = []
    clock = FakeClock()
    router = Router(
        GreedyDevice(clock, need_ms=1),
        GreedyCloud(clock, need_ms=1),
        policy=policy_file(tmp_path),
        clock=clock,
        on_breaker_event=seen.append,
    )
    router.device_failed("load_failure")
    _, event = router.route(req(expected_output_tokens=10))
    assert [(e.boundary, e.to_state, e.trigger) for e in seen] == [("device", "open", "device_load_failure")]
    assert (event.entered_device, event.reason) == (False, "device_unavailable")


# -- the p90 spike breaker settles (docs/sources.md#seed-000 "P90 突增时全量走端侧") -----------------------------------
def replay_cloud(tmp_path, phases):
    """Replays cloud traffic on the fake clock, one cloud-only request every 5 s: `phases` are (seconds, the
    cloud's latency in ms, or "down" for errors). Returns the router and its cloud breaker's events."""
    clock = FakeClock()
    seen = []
    cloud = GreedyCloud(clock)
    router = Router(
        GreedyDevice(clock, need_ms=10),
        cloud,
        policy=policy_file(tmp_path),
        clock=clock,
        on_breaker_event=seen.append,
    )
    for seconds, latency in phases:
        end = clock.t + seconds
        cloud.need_ms, cloud.outcome_when_done = (50.0, "error") if latency == "down" else (latency, "ok")
        while clock.t < end:
            started = clock.t
            router.route(req(task_type="long_summary", deadline_ms=60_000))
            clock.t = max(clock.t, started + 5.0)
    return router, [e for e in seen if e.boundary == "cloud"]


@pytest.mark.parametrize("outage", ["down", 6000.0])
def test_seed000_cloud_breaker_one_open_episode_over_an_outage_and_no_reopening_after_recovery(tmp_path, outage):
    """30 min of a healthy cloud (900 ms), a 5-minute outage (errors, or answers at 6 s: a p90 spike over
    3 × the learned 900 ms), 30 min of recovery. Measured before: open → half-open → closed → open 8 times
    in 271 s, the closed breaker reopened by the 5-minute window's samples from before it closed. Now: one
    episode; trials during the outage fail (a slow trial is no recovery); after recovery it stays closed."""
    router, events = replay_cloud(tmp_path, [(1800, 900.0), (300, outage), (1800, 900.0)])
    moves = [(e.from_state, e.to_state, e.trigger) for e in events]
    opened = [m for m in moves if m[:2] == ("closed", "open")]
    assert len(opened) == 1 and [m for m in moves if m[1] == "closed"] == [moves[-1]], moves
    assert router.cloud_breaker.state == "closed"
    assert opened[0][2] == ("cloud_error" if outage == "down" else "cloud_p90_spike")
    assert all(m[2] in ("cloud_error", "cloud_p90_spike", "trial_failed") for m in moves if m[1] == "open"), moves


def test_seed000_p90_spike_is_judged_against_the_learned_baseline_not_only_the_configured_floor(tmp_path):
    """A cloud whose usual p90 is 1.5 s: 2.5 s is no spike against 3 × 1.5 s (the configured 800 ms alone
    would open at 2.4 s); 5 s is."""
    router, events = replay_cloud(tmp_path, [(1800, 1500.0), (300, 2500.0)])
    assert events == [] and router.cloud_baseline_ms() == pytest.approx(1500.0)
    _, events = replay_cloud(tmp_path, [(1800, 1500.0), (300, 5000.0)])
    assert [(e.to_state, e.trigger) for e in events][:1] == [("open", "cloud_p90_spike")]


# -- the capability matrix's conditions (docs/sources.md#seed-000 判据三) --------------------------------------------
@pytest.mark.parametrize(
    "task_type, extra, admitted",
    [
        ("tool_call", dict(tools=("weather",)), True),  # "单步工具调用: 仅限白名单内工具"
        ("tool_call", dict(tools=("weather", "transfer_money")), False),
        # undeclared is not admitted: the matrix cannot vouch for what it was not told (was: admitted)
        ("tool_call", dict(), False),
        ("tool_call", dict(tools=()), False),
        ("tool_call", dict(tools=("weather", "lookup", "set_timer")), False),  # "单步": one tool per call
        ("tool_call", dict(tools=("delete_all_files",)), False),
        ("code_snippet", dict(files=1), True),  # "代码生成: 单文件片段可,跨文件上下文不可"
        ("code_snippet", dict(files=0), True),
        ("code_snippet", dict(files=3), False),
        ("code_snippet", dict(), False),  # the file count undeclared
    ],
)
def test_seed000_capability_matrix_tool_whitelist_and_single_file(tmp_path, task_type, extra, admitted):
    clock = FakeClock()
    device = GreedyDevice(clock, need_ms=10, text='{"tool": "weather"}', confidence=0.99)
    store = policy_file(tmp_path, **{"code_snippet: {stage: shadow}": "code_snippet: {stage: full}"})
    router = Router(device, GreedyCloud(clock, need_ms=100), policy=store, clock=clock)
    _, event = router.route(req(task_type=task_type, expected_output_tokens=50, **extra))
    valid(event)
    assert event.entered_device is admitted and (event.reason == "capability_miss") is not admitted


@pytest.mark.parametrize(
    "edit, message",
    [
        ("tools: [lookup, weather, set_timer, set_alarm]", "tools must be a list of tool names"),
        ("single_file: true", "single_file must be true or false"),
    ],
)
def test_hostile_capability_conditions_are_one_clear_error(tmp_path, edit, message):
    from routerscope.core.errors import ConfigError

    bad = {"tools: [lookup, weather, set_timer, set_alarm]": "tools: weather", "single_file: true": "single_file: 2"}
    with pytest.raises(ConfigError, match=message):
        policy_file(tmp_path, **{edit: bad[edit]})


# -- PII over the device's context: the input cut to its window, never the cloud ----------------------
def test_pii_over_the_devices_window_is_cut_to_it_at_l1_never_the_cloud(tmp_path):
    """Measured before: a 9,000-token PII request entered the device whole. short_reply's window is 2048
    tokens; a device without a tokenizer is judged by the upper bound, one token per UTF-8 byte plus the chat
    template's 10 = 36,010 tokens for 36,000 bytes (more than the gateway's 9,000): the prompt is cut to at most
    2,038 bytes, not cut again by the degraded level, and runs as L1 (context cut, the seed's
    (docs/sources.md#seed-000) L1); the event says so (degrade level 1, pii_pin) and carries the figure it used."""
    clock = FakeClock()
    prompts = []

    class Recording(GreedyDevice):
        def generate(self, prompt, *, max_tokens, timeout_ms, degraded, commit_tokens):
            prompts.append((len(prompt), degraded))
            return super().generate(
                prompt, max_tokens=max_tokens, timeout_ms=timeout_ms, degraded=degraded, commit_tokens=commit_tokens
            )

    cloud = GreedyCloud(clock)
    router = Router(Recording(clock, need_ms=100), cloud, policy=policy_file(tmp_path), clock=clock)
    text = "x" * 36_000
    response, event = router.route(req(text=text, input_tokens=9000, has_pii=True, expected_output_tokens=50))
    valid(event)
    # cut to fit: at most 2048 - 10 bytes, the cut's mark ("\n…\n", 5 bytes in 3 characters) included
    ((size, degraded),) = prompts
    assert 0.95 * 2036 <= size <= 2036 and degraded is False
    assert event.device_input_tokens == 36_010
    assert (response.served_by, event.degrade_level, event.reason, event.cloud_calls) == ("device", 1, "pii_pin", 0)
    assert cloud.timeouts == []
