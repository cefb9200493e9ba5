"""The router's side of docs/sources.md#seed-003 and #seed-004: rollout stages honoured per session, the all-cloud
counterfactual and the device ledger on each event, divergence samples kept out of events, the thermal reader."""

from __future__ import annotations

import re
import threading

import pytest

from routerscope.contract.validation import DECISIONS
from routerscope.router.backends import CloudResult, DeviceResult, thermal_state
from routerscope.router.engine import Request, Router
from routerscope.router.policy import DEFAULT_POLICY, PolicyStore, in_canary
from routerscope.router.sim.backends import InstantCloud, InstantDevice

STATS = {
    "peak_mem_mb": 950.0,
    "thermal_state": "nominal",
    "decode_tps": 42.0,
    "prefill_tps": 300.0,
    "cold_start": False,
    "load_ms": None,
}


def store(tmp_path, rollout: str = "", **replace) -> PolicyStore:
    text = DEFAULT_POLICY.read_text()
    if rollout:  # one more entry under the policy's `rollout:` line
        text = re.sub(r"^rollout:.*\n", lambda m: m.group(0) + f"  {rollout}\n", text, count=1, flags=re.M)
    for old, new in replace.items():
        text = text.replace(old, new)
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    return PolicyStore(path, check_every_s=0.0)


def router(tmp_path, device=None, cloud=None, rollout: str = "", **kw) -> Router:
    device = device or InstantDevice(DeviceResult("play_music", 0.95, "logprob", 2, 1.0, 2.0, "ok", stats=STATS))
    return Router(
        device, cloud or InstantCloud(CloudResult("weather", 5.0, "ok", 10)), policy=store(tmp_path, rollout), **kw
    )


def route(r: Router, **kw):
    req = Request(
        **{
            "task_type": "intent_classify",
            "text": "play jazz",
            "session_id": "s",
            "input_tokens": 100,
            "expected_output_tokens": 8,
            **kw,
        }
    )
    late = threading.Event()
    box = []
    r.on_shadow_event = lambda e: (box.append(e), late.set())
    response, event = r.route(req)
    if event is None:  # a shadow device still running when the cloud served: its event follows
        assert late.wait(5)
        event = box[0]
    assert DECISIONS.parse(event.to_json())[1] == [], event
    return response, event


def sessions(percent: float, inside: bool, n: int = 3) -> list[str]:
    found = [s for s in (f"session-{i}" for i in range(1000)) if in_canary(s, percent) is inside]
    return found[:n]


def test_seed004_canary_serves_the_cohort_on_device_and_sends_the_rest_to_the_cloud(tmp_path):
    r = router(tmp_path, rollout="intent_classify: {stage: canary, percent: 30}")
    for session in sessions(30, inside=True):
        for _ in range(2):  # every request of a cohort session: sticky
            response, event = route(r, session_id=session)
            assert (event.rollout_stage, event.entered_device, response.served_by) == ("canary", True, "device")
    for session in sessions(30, inside=False):
        response, event = route(r, session_id=session)
        assert (event.rollout_stage, event.reason, event.entered_device) == ("cloud_only", "policy_cloud", False)
        assert response.served_by == "cloud" and event.fallback_type == "none" and event.device_stats is None


def test_cloud_only_stage_never_enters_the_device_but_pii_stays_pinned(tmp_path):
    r = router(tmp_path, rollout="intent_classify: cloud_only")
    _, event = route(r)
    assert (event.rollout_stage, event.reason, event.entered_device) == ("cloud_only", "policy_cloud", False)
    _, pinned = route(r, has_pii=True)  # the hard constraint comes before any stage: never the cloud
    assert pinned.reason == "pii_pin" and pinned.cloud_calls == 0


def test_stages_of_the_default_policy(tmp_path):
    r = router(tmp_path)
    assert route(r)[1].rollout_stage == "full"
    assert route(r, task_type="long_summary")[1].rollout_stage == "cloud_only"  # unsupported: capability_miss first
    assert route(r, task_type="long_summary")[1].reason == "capability_miss"
    _, shadow = route(r, task_type="code_snippet", files=1)
    assert (shadow.rollout_stage, shadow.mode) == ("shadow", "shadow")


def test_seed003_all_cloud_cost_is_input_plus_output_at_the_l2_price(tmp_path):
    # served on the device: 100 input + 2 output tokens at cloud-small's 0.0004 per 1k → 0.0000408; spent 0
    _, event = route(router(tmp_path))
    assert event.all_cloud_cost_usd == pytest.approx(102 * 0.0004 / 1000) and event.cost_usd == 0.0
    no_prices = router(tmp_path, **{})
    no_prices.policy = store(
        tmp_path, **{"cloud-small: 0.0004": "", "cloud-large: 0.003": "", "cloud_prices_usd_per_1k_tokens:": "unused:"}
    )
    _, unpriced = route(no_prices)
    assert b"all_cloud_cost_usd" not in unpriced.to_json()  # no prices, no counterfactual


def test_device_stats_merge_the_attempts_and_are_absent_when_the_device_was_not_entered(tmp_path):
    class TwoAttempts:  # L0 below threshold (cold start, big peak), then L1 served
        model, ttft_ms, tps = "two", 10.0, 100.0

        def __init__(self):
            self.calls = 0

        def generate(self, prompt, **kw):
            self.calls += 1
            if self.calls == 1:
                return DeviceResult(
                    "meh",
                    0.1,
                    "logprob",
                    2,
                    1.0,
                    2.0,
                    "ok",
                    stats={**STATS, "peak_mem_mb": 1500.0, "cold_start": True, "load_ms": 700.0},
                )
            return DeviceResult("play_music", 0.95, "logprob", 2, 1.0, 2.0, "ok", stats={**STATS, "decode_tps": 30.0})

    _, event = route(router(tmp_path, device=TwoAttempts()))
    assert [a.level for a in event.attempts] == [0, 1]
    s = event.device_stats
    assert (s.peak_mem_mb, s.cold_start, s.load_ms, s.decode_tps) == (1500.0, True, 700.0, 30.0)
    _, cap_miss = route(router(tmp_path), task_type="long_summary")
    assert cap_miss.device_stats is None


def test_seed004_shadow_and_canary_disagreements_are_samples_never_event_content(tmp_path):
    kept = []
    r = router(
        tmp_path,
        device=InstantDevice(DeviceResult("secret device answer", 0.2, "logprob", 3, 1.0, 2.0, "ok", stats=STATS)),
        cloud=ByPrompt({"write code": "print(1)", "play jazz": "play_music"}),
        rollout="intent_classify: {stage: canary, percent: 100}",
        on_divergence=kept.append,
    )
    _, shadow = route(r, task_type="code_snippet", text="write code", files=1, request_id="r-shadow")
    _, canary = route(r, request_id="r-canary")  # below threshold → the cloud's different answer replaces it
    assert shadow.shadow_agree is False and canary.fallback_type == "quality"
    assert [(d.request_id, d.stage) for d in kept] == [("r-shadow", "shadow"), ("r-canary", "canary")]
    assert kept[0].device_hash != kept[0].cloud_hash and kept[0].input_tokens == 100
    assert all(b"secret" not in e.to_json() for e in (shadow, canary))


class ByPrompt(InstantCloud):
    """Answers each request text with its own answer (a task type's declared form: a label, a snippet)."""

    def __init__(self, answers: dict[str, str]):
        self.answers = answers

    def complete(self, prompt, **kw) -> CloudResult:
        return CloudResult(self.answers[str(prompt)], 5.0, "ok", 3)


def _zone(root, name, temp, trips):
    zone = root / name
    zone.mkdir(parents=True)
    (zone / "temp").write_text(f"{temp}\n")
    for i, (kind, value) in enumerate(trips):
        (zone / f"trip_point_{i}_type").write_text(kind + "\n")
        (zone / f"trip_point_{i}_temp").write_text(f"{value}\n")


@pytest.mark.parametrize(
    "temp, expected", [(50_000, "nominal"), (81_000, "fair"), (90_000, "serious"), (105_000, "critical")]
)
def test_thermal_state_reads_the_hottest_zone_against_its_trip_points(tmp_path, temp, expected):
    _zone(tmp_path, "thermal_zone0", 40_000, [("passive", 90_000), ("critical", 105_000)])
    _zone(tmp_path, "thermal_zone1", temp, [("passive", 90_000), ("critical", 105_000)])
    assert thermal_state(tmp_path) == expected


def test_thermal_state_is_unknown_without_readable_zones(tmp_path):
    assert thermal_state(tmp_path) == "unknown"
    _zone(tmp_path, "thermal_zone0", 50_000, [])  # no trip points: no scale to read it on
    (tmp_path / "thermal_zone1").mkdir()
    (tmp_path / "thermal_zone1" / "temp").write_text("garbage")
    assert thermal_state(tmp_path) == "unknown"


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("capabilities:\n  short_reply: {supported: true, threshold: null}\n", "threshold must be a number, not None"),
        ("capabilities:\n  short_reply: {supported: true, threshold: abc}\n", "threshold must be a number, not 'abc'"),
        ("capabilities:\n  short_reply: {supported: true, threshold: [0.5]}\n", "threshold must be a number"),
        ("capabilities:\n  short_reply: {supported: true, threshold: true}\n", "threshold must be a number, not True"),
        ("capabilities:\n  short_reply: {supported: 'yes'}\n", "supported must be true or false"),
        ("capabilities: {}\nbreakers: {device: {failure_rate: x}}\n", "breakers.device.failure_rate must be a number"),
        ("capabilities: {}\nshadow: 5\n", "shadow must be a list of task type names"),
    ],
)
def test_a_policy_value_of_the_wrong_type_is_one_config_error_naming_it(yaml_text, message):
    """A reload must keep the last good policy on a bad file: a wrong type is a ConfigError, never a TypeError
    from deep in a comparison."""
    from routerscope.core.errors import ConfigError
    from routerscope.router.policy import parse

    with pytest.raises(ConfigError, match=re.escape(message)):
        parse("version: 1\n" + yaml_text, "p.yaml")
