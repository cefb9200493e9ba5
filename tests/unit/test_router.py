"""The decision engine: properties over random requests and behaviours, the breaker state machine,
the latency gate's worked cases, and the policy's hot reload."""

from __future__ import annotations

import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from routerscope.contract.validation import DECISIONS
from routerscope.router.breaker import CLOSED, HALF_OPEN, OPEN, CircuitBreaker
from routerscope.router.engine import Request, Router, latency_gate
from routerscope.router.policy import DEFAULT_POLICY, BreakerPolicy, PolicyStore, write_policy
from tests.support.fakes import FakeClock, ScriptedCloud, ScriptedDevice, cloud, dev

device_results = st.builds(
    dev,
    outcome=st.sampled_from(["ok", "ok", "timeout", "error"]),
    confidence=st.one_of(st.none(), st.floats(0, 1)),
    text=st.sampled_from(["positive", '{"a": 1}', "", "two\nlines"]),
    committed=st.booleans(),
)
requests = st.builds(
    Request,
    task_type=st.sampled_from(
        ["intent_classify", "slot_extract", "short_reply", "long_summary", "tool_call", "unknown_task"]
    ),
    text=st.text(max_size=200).map(lambda t: "PRIVATE-MARKER " + t),
    session_id=st.just("s"),
    deadline_ms=st.integers(1, 20_000),
    elapsed_ms=st.integers(0, 20_000),
    has_pii=st.booleans(),
    input_tokens=st.one_of(st.none(), st.integers(0, 4000)),
    expected_output_tokens=st.one_of(st.none(), st.integers(0, 600)),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    req=requests,
    device_script=st.lists(device_results, min_size=1, max_size=3),
    cloud_script=st.lists(st.sampled_from([cloud("ok"), cloud("timeout"), cloud("error")]), min_size=1, max_size=3),
    device_open=st.booleans(),
    cloud_open=st.booleans(),
    l1_enabled=st.booleans(),
    shadow=st.booleans(),
)
def test_routing_properties(
    tmp_path_factory, req, device_script, cloud_script, device_open, cloud_open, l1_enabled, shadow
):
    policy_file = tmp_path_factory.mktemp("policy") / "policy.yaml"
    text = DEFAULT_POLICY.read_text().replace("l1_enabled: true", f"l1_enabled: {str(l1_enabled).lower()}")
    policy_file.write_text(text.replace("shadow: []", "shadow: [short_reply, slot_extract]") if shadow else text)
    device, cloud_backend = ScriptedDevice(device_script), ScriptedCloud(cloud_script)
    events = []
    ended = threading.Event()
    router = Router(device, cloud_backend, policy=PolicyStore(policy_file), on_event=events.append)
    router.on_shadow_event = lambda e: ended.set()  # a shadow device still running when the cloud served
    if device_open:
        router.device_breaker.force_open("test")
    if cloud_open:
        router.cloud_breaker.force_open("test")
    response, event = router.route(req)
    if event is None:
        assert ended.wait(5) and req.task_type in ("short_reply", "slot_extract") and shadow
        event = events[-1]

    levels = [a.level for a in event.attempts]
    assert 1 <= len(levels) <= 5
    assert levels == sorted(levels), "attempt levels never decrease"
    assert levels.count(1) <= 1, "L1 at most once"
    assert event.cloud_calls == cloud_backend.calls
    if req.has_pii:
        assert cloud_backend.calls == 0 and event.cloud_calls == 0, "a PII-pinned request never reaches the cloud"
        assert event.reason == "pii_pin"
    if event.reason == "capability_miss":
        assert device.calls == 0, "a capability miss never touches the device"
    if not event.entered_device:
        assert device.calls == 0
    parsed, rules = DECISIONS.parse(event.to_json())
    assert rules == [], f"the event breaks the contract: {rules}"
    assert b"PRIVATE-MARKER" not in event.to_json(), "request text never enters an event"
    assert event.attempts[-1].level != 4 or event.attempts[-1].latency_ms <= 50, (
        "L4 is bounded by 50 ms (docs/sources.md#seed-000)"
    )
    assert event.latency_ms <= max(0, req.deadline_ms - req.elapsed_ms) + 50 + 100, "the budget only subtracts"


def test_low_confidence_goes_through_l1_then_the_cloud_with_its_reason(tmp_path):
    device = ScriptedDevice([dev(confidence=0.2), dev(confidence=0.3)])
    router = Router(device, ScriptedCloud([cloud()]))
    _, event = router.route(Request(task_type="short_reply", text="hello", session_id="s"))
    assert [(a.level, a.outcome) for a in event.attempts] == [(0, "low_confidence"), (1, "low_confidence"), (2, "ok")]
    assert (event.fallback_type, event.reason, event.degrade_level, event.cloud_calls) == (
        "quality",
        "low_confidence",
        2,
        1,
    )


def test_a_device_timeout_goes_straight_to_the_cloud():
    router = Router(ScriptedDevice([dev(outcome="timeout")]), ScriptedCloud([cloud("error"), cloud("ok")]))
    _, event = router.route(Request(task_type="short_reply", text="hello", session_id="s"))
    assert [(a.level, a.outcome) for a in event.attempts] == [(0, "timeout"), (2, "error"), (3, "ok")]
    assert (event.fallback_type, event.reason, event.cloud_calls) == ("timeout", "device_timeout", 2)


def test_cost_is_the_completed_cloud_calls_tokens_at_the_policys_prices(tmp_path):
    # default prices: cloud-small 0.0004, cloud-large 0.003 USD per 1k tokens (input + output)
    timeout_then_l3 = Router(
        ScriptedDevice([dev(outcome="timeout")]), ScriptedCloud([cloud("error"), cloud("ok", tokens=20)])
    )
    _, event = timeout_then_l3.route(Request(task_type="short_reply", text="hello", session_id="s", input_tokens=100))
    assert event.cloud_model == "cloud-large" and event.cost_usd == pytest.approx(
        0.003 * 120 / 1000
    )  # the failed L2 is free
    served = Router(ScriptedDevice([dev(confidence=0.99)]), ScriptedCloud([cloud()]))
    assert served.route(Request(task_type="short_reply", text="hello", session_id="s"))[1].cost_usd == 0.0
    unpriced = tmp_path / "policy.yaml"
    unpriced.write_text(DEFAULT_POLICY.read_text().split("cloud_prices_usd_per_1k_tokens:")[0])
    router = Router(ScriptedDevice([dev(outcome="timeout")]), ScriptedCloud([cloud()]), policy=PolicyStore(unpriced))
    assert b"cost_usd" not in router.route(Request(task_type="short_reply", text="hello", session_id="s"))[1].to_json()


def test_past_the_commit_point_the_device_is_not_taken_over():
    """Served up to its last complete sentence, flagged truncated (docs/router.md)."""
    partial = dev(outcome="timeout", committed=True, text="It rains today. Bring an umbr")
    router = Router(ScriptedDevice([partial]), ScriptedCloud([cloud()]))
    response, event = router.route(Request(task_type="short_reply", text="hello", session_id="s"))
    assert response.served_by == "device" and event.fallback_type == "none" and event.cloud_calls == 0
    assert (response.text, response.partial, event.reason) == ("It rains today.", True, "truncated")


def test_a_partial_answer_without_a_complete_sentence_is_never_served():
    router = Router(
        ScriptedDevice([dev(outcome="timeout", committed=True, text="It rains tod")]), ScriptedCloud([cloud()])
    )
    response, event = router.route(Request(task_type="short_reply", text="hello", session_id="s"))
    assert (response.served_by, event.fallback_type, event.reason) == ("cloud", "timeout", "device_timeout")


def test_pii_falls_back_to_a_conservative_answer_never_the_cloud():
    cloud_backend = ScriptedCloud([cloud()])
    router = Router(ScriptedDevice([dev(outcome="error")]), cloud_backend)
    response, event = router.route(Request(task_type="short_reply", text="my card 4111", session_id="s", has_pii=True))
    assert response.served_by == "fallback" and event.degrade_level == 4 and cloud_backend.calls == 0


def test_open_device_breaker_sends_everything_to_the_cloud_as_device_unavailable():
    device = ScriptedDevice([dev()])
    router = Router(device, ScriptedCloud([cloud()]))
    router.device_breaker.force_open("load_failure")
    _, event = router.route(Request(task_type="short_reply", text="hello", session_id="s"))
    assert (event.entered_device, event.reason, device.calls) == (False, "device_unavailable", 0)


def test_open_cloud_breaker_keeps_traffic_on_the_device():
    cloud_backend = ScriptedCloud([cloud()])
    router = Router(ScriptedDevice([dev(confidence=0.1)]), cloud_backend)
    router.cloud_breaker.force_open("cloud_error")
    response, event = router.route(Request(task_type="short_reply", text="hello", session_id="s"))
    assert cloud_backend.calls == 0 and event.degrade_level == 4 and event.fallback_type == "quality"


def test_breaker_transitions_become_events():
    seen = []
    router = Router(ScriptedDevice([dev(outcome="error")]), ScriptedCloud([cloud()]), on_breaker_event=seen.append)
    for _ in range(10):
        router.route(Request(task_type="short_reply", text="hello", session_id="s"))
    assert [(e.boundary, e.from_state, e.to_state) for e in seen] == [("device", "closed", "open")]
    assert seen[0].failure_rate == 1.0


# -- breaker state machine ------------------------------------------------------------------------
POLICY = BreakerPolicy(window_s=10, failure_rate=0.5, min_calls=4, cooldown_s=5)


@pytest.mark.parametrize(
    "steps, expected_states, expected_transitions",
    [
        # (time advance, outcome: True=fail / False=ok / "allow") ...
        ([(0, True), (0, True), (0, True)], [CLOSED] * 3, []),  # below min_calls
        ([(0, True), (0, False), (0, True), (0, True)], [CLOSED, CLOSED, CLOSED, OPEN], [("closed", "open")]),
        ([(0, True), (0, False), (0, False), (0, False)], [CLOSED] * 4, []),  # 25 % < 50 %
        # failures age out of the 10 s window
        ([(0, True), (0, True), (11, False), (0, False), (0, True), (0, False)], [CLOSED] * 6, []),
        # open → half-open after the cool-down → a good trial closes it
        (
            [(0, True)] * 4 + [(5, "allow"), (0, False)],
            [CLOSED, CLOSED, CLOSED, OPEN, HALF_OPEN, CLOSED],
            [("closed", "open"), ("open", "half_open"), ("half_open", "closed")],
        ),
        # a failed trial opens it again
        (
            [(0, True)] * 4 + [(5, "allow"), (0, True)],
            [CLOSED, CLOSED, CLOSED, OPEN, HALF_OPEN, OPEN],
            [("closed", "open"), ("open", "half_open"), ("half_open", "open")],
        ),
        # still open before the cool-down
        ([(0, True)] * 4 + [(4.9, "allow")], [CLOSED, CLOSED, CLOSED, OPEN, OPEN], [("closed", "open")]),
    ],
)
def test_breaker_state_machine(steps, expected_states, expected_transitions):
    clock = FakeClock()
    transitions = []
    breaker = CircuitBreaker("device", POLICY, clock=clock, on_transition=transitions.append)
    states = []
    for advance, outcome in steps:
        clock.t += advance
        if outcome == "allow":
            breaker.allow()
        else:
            breaker.record(outcome)
        states.append(breaker.state)
    assert states == expected_states
    assert [(t.from_state, t.to_state) for t in transitions] == expected_transitions
    assert [t.seq for t in transitions] == list(range(1, len(transitions) + 1))  # numbered per breaker


def test_breaker_events_carry_the_breakers_own_sequence():
    """Each breaker numbers its transitions from 1 (per instance and boundary), so they chain in the order
    they happened even when the router's clock steps back between two of them."""
    clock = FakeClock()
    seen = []
    router = Router(
        ScriptedDevice([dev()]), ScriptedCloud([cloud()]), clock=clock, now=clock.now, on_breaker_event=seen.append
    )
    router.cloud_breaker.force_open("cloud_p90_spike")
    clock.t -= 30  # a clock that steps back (the simulated fleet's does)
    router.device_breaker.force_open("device_oom")
    clock.t += 3600
    assert router.cloud_breaker.allow()  # half-open: the cloud's second transition
    assert [(e.boundary, e.seq, e.to_state) for e in seen] == [
        ("cloud", 1, "open"),
        ("device", 1, "open"),
        ("cloud", 2, "half_open"),
    ]


def test_half_open_lets_one_trial_through_at_a_time():
    clock = FakeClock()
    breaker = CircuitBreaker("cloud", POLICY, clock=clock)
    breaker.force_open("test")
    assert not breaker.allow()
    clock.t += 5
    assert breaker.allow() and not breaker.allow()


# -- latency gate: the seed's worked cases (docs/sources.md#seed-000, "TTFT 和总时长要分开看") -------------------------
@pytest.mark.parametrize(
    "case, remaining_ms, device_eta_ms, cloud_p90_ms, expected",
    [
        ("short output (<100 tokens): device 0.7 s vs cloud 1.2 s, 8 s budget", 8000, 700, 1200, "device"),
        ("medium output, roomy budget: device 2.5 s fits 90 % of 8 s", 8000, 2500, 1600, "device"),
        ("medium output, tight budget: device 2.5 s > 0.9 × 2.6 s, cloud 1.6 s fits", 2600, 2500, 1600, "cloud"),
        ("long output (>400 tokens): device > 5 s, cloud 2.8 s, 4 s left", 4000, 5200, 2800, "cloud"),
        ("long output, 2 s left: neither fits → truncate", 2000, 5200, 2800, "truncate"),
        ("exactly 90 % is still the device", 1000, 900, 500, "device"),
    ],
)
def test_latency_gate(case, remaining_ms, device_eta_ms, cloud_p90_ms, expected):
    assert latency_gate(remaining_ms, device_eta_ms, cloud_p90_ms) == expected, case


def test_a_tight_deadline_routes_to_the_cloud_with_latency_pressure():
    device = ScriptedDevice([dev()], ttft_ms=150, tps=20)  # 300 tokens: 150 + 15000 ms
    router = Router(device, ScriptedCloud([cloud()]))
    _, event = router.route(
        Request(
            task_type="short_reply",
            text="x",
            session_id="s",
            deadline_ms=4000,
            elapsed_ms=1200,
            expected_output_tokens=300,
        )
    )
    assert (event.entered_device, event.reason, device.calls) == (False, "latency_pressure", 0)


# -- hot reload -----------------------------------------------------------------------------------
def test_hot_reload_uses_the_new_threshold_and_keeps_the_last_good_policy(tmp_path, caplog):
    path = tmp_path / "policy.yaml"
    path.write_text(DEFAULT_POLICY.read_text())
    clock = FakeClock()
    store = PolicyStore(path, check_every_s=1.0, clock=clock)
    router = Router(ScriptedDevice([dev(confidence=0.62)]), ScriptedCloud([cloud()]), policy=store)
    _, before = router.route(Request(task_type="short_reply", text="x", session_id="s"))
    assert before.fallback_type == "none" and before.threshold == 0.60

    write_policy(
        path,
        DEFAULT_POLICY.read_text()
        .replace("threshold: 0.60", "threshold: 0.65")
        .replace('version: "2026-11-30.1"', 'version: "2026-11-30.2"'),
    )
    clock.t += 0.5
    _, seen = router.route(Request(task_type="short_reply", text="x", session_id="s"))
    assert seen.threshold == 0.60  # not checked yet (every 1 s)
    clock.t += 1.0
    _, after = router.route(Request(task_type="short_reply", text="x", session_id="s"))  # replaced by rename: read
    assert after.threshold == 0.65 and after.reason == "low_confidence"
    assert after.policy_version.startswith("2026-11-30.2+") and after.policy_version != before.policy_version

    write_policy(path, "version: broken\ncapabilities: [not, a, mapping]\n")
    clock.t += 1.5
    router.route(Request(task_type="short_reply", text="x", session_id="s"))
    clock.t += 1.5
    with caplog.at_level("ERROR", logger="routerscope.router.policy"):
        _, kept = router.route(Request(task_type="short_reply", text="x", session_id="s"))
    assert kept.policy_version == after.policy_version
    assert "keeping 2026-11-30.2" in caplog.text and store.last_error


def test_a_bad_policy_at_start_is_a_clear_error(tmp_path):
    from routerscope.core.errors import ConfigError

    path = tmp_path / "policy.yaml"
    path.write_text("version: 1\ncapabilities:\n  x: {supported: true, threshold: 3}\n")
    with pytest.raises(ConfigError, match="threshold 3 is not in"):
        PolicyStore(path)


def test_a_policy_derived_in_code_is_stamped_from_its_content_and_a_too_long_version_is_refused():
    """`Policy.with_`: the same changes give the same version, other changes another; the file version
    and a tag stay readable in front of the digest; policy_version holds 64 characters."""
    from routerscope.core.errors import ConfigError
    from routerscope.router.policy import default_policy

    base = default_policy()
    once, again = base.with_("canary", l1_enabled=False), base.with_("canary", l1_enabled=False)
    other = base.with_("canary", l1_enabled=False, commit_tokens=60)
    assert once == again and once.version == again.version != other.version
    assert once.version.startswith("2026-11-30.1-canary+") and not once.l1_enabled and base.l1_enabled
    assert base.with_(commit_tokens=60).version.startswith("2026-11-30.1+")
    with pytest.raises(ConfigError, match="too long"):
        base.with_("x" * 60)
