"""Rollback signals end to end (docs/sources.md#seed-004-7, docs/metrics.md §3b): an hour of traffic through the real
router on a fake clock — a cloud outage, then a bad threshold push for short_reply — into the real warehouse, the
5-minute metrics, then the default alert rules. The outage recommends no rollback; the push recommends
rolling short_reply back, naming its signals.

docs/sources.md#seed-004-7: "路由判定准确率 … 下放路径失败率:端侧结果未通过校验或异常的比例 …
降级触发率:端侧失败后转云端的请求占比", "连续 window 个观测窗口越界才回退,避免被单点抖动触发"."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from routerscope.contract.events import LabelEvent
from routerscope.router.engine import Request, Router
from routerscope.router.policy import DEFAULT_POLICY, PolicyStore
from routerscope.router.replay import route_correct
from routerscope.warehouse.analytics import alerting
from routerscope.warehouse.analytics.metrics import compute
from routerscope.warehouse.client import open_warehouse
from routerscope.warehouse.migrate import migrate
from routerscope.warehouse.queries.metric_windows import write_window
from tests.support.fakes import FakeClock, SteadyDevice, SwitchableCloud
from tests.support.golden_day import insert
from tests.support.home import settings_for

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
STEP = timedelta(minutes=5)
OUTAGE, PUSH = range(3, 6), range(8, 12)  # 5-minute windows of the hour
PER_WINDOW = 40  # requests per task type per window


def traffic(tmp_path):
    """Per window: 40 short_reply (one in 40 below the 0.60 threshold), 40 long_summary (capability misses,
    cloud only). Labels: every device-entered request, acceptable when its confidence is >= 0.6."""
    policy = tmp_path / "policy.yaml"
    base = DEFAULT_POLICY.read_text()
    policy.write_text(base)
    clock = FakeClock(0.0, start=T0)
    device, cloud = SteadyDevice(clock), SwitchableCloud(clock)
    decisions, labels = [], []
    router = Router(
        device,
        cloud,
        policy=PolicyStore(policy, check_every_s=0.0, clock=clock),
        clock=clock,
        now=clock.now,
        on_event=lambda e: decisions.append(e),
    )
    for w in range(12):
        cloud.down = w in OUTAGE
        pushed = base.replace("threshold: 0.60", "threshold: 0.93").replace(
            'version: "2026-11-30.1"', 'version: "push"'
        )
        wanted = pushed if w in PUSH else base
        if policy.read_text() != wanted:
            policy.write_text(wanted)
        for i in range(PER_WINDOW):
            clock.t = (w * STEP + i * STEP / PER_WINDOW).total_seconds()
            device.confidence = 0.3 if i == 0 else 0.7 + (i % 12) * 0.02
            router.route(Request(task_type="short_reply", text="hi", session_id=f"s{i % 8}", request_id=f"r{w}-{i}"))
            clock.t += 1
            router.route(
                Request(task_type="long_summary", text="report", session_id=f"s{i % 8}", request_id=f"l{w}-{i}")
            )
    for e in decisions:
        if e.entered_device:
            ok = e.confidence >= 0.6
            labels.append(
                LabelEvent(
                    schema_version=1,
                    label_id=str(uuid.uuid4()),
                    event_time=e.event_time,
                    request_id=e.request_id,
                    source="human_review",
                    device_acceptable=ok,
                    route_correct=route_correct(e.fallback_type, ok),
                )
            )
    return decisions, labels


@pytest.mark.slow
def test_seed004_cloud_outage_recommends_no_rollback_the_threshold_push_does_naming_task_and_signals(home, tmp_path):
    decisions, labels = traffic(tmp_path)
    assert all(e.schema_version == 2 for e in decisions)
    fired, old_rule_would_fire = [], []
    with open_warehouse(settings_for(home)) as client:
        migrate(client)
        insert(client, [_dict(e) for e in decisions], [_dict(e) for e in labels])
        for w in range(12):
            w0 = T0 + w * STEP
            result = compute(client, w0, w0 + STEP)
            write_window(client, "5m", w0, w0 + STEP, result)
            old_rule_would_fire.append(result["overall"]["degrade_share"]["L4"] > 0.02)  # the former "offload failure"
            evaluation = alerting.run(client, now=w0 + STEP + timedelta(minutes=1))
            fired += [(w, a.alert_key) for a in evaluation.fired if a.action == "rollback"]
        final = alerting.run(client, now=T0 + 12 * STEP + timedelta(minutes=1))
        outage = compute(client, T0 + OUTAGE[0] * STEP, T0 + (OUTAGE[-1] + 1) * STEP)["by_task_type"]["short_reply"]
    # the outage ended low-confidence answers at L4 (the old L4-share rule fired) but moved no §3b signal
    assert any(old_rule_would_fire[w] for w in OUTAGE)
    assert outage["degrade_trigger_rate"] < 0.05 and outage["offload_failure_rate"] == 0.0
    assert outage["route_accuracy"] == 1.0
    assert not [k for w, k in fired if w < PUSH[0]], fired
    # the push: three windows in, both signals of short_reply, and nothing for long_summary (never on the device)
    assert sorted(k for w, k in fired) == [
        "rollback_degrade_trigger|short_reply",
        "rollback_route_accuracy|short_reply",
    ]
    assert {w for w, _ in fired} == {PUSH[0] + 2}
    # route accuracy as §3c's estimate (the labels here cover every request: it equals the labeled share)
    assert final.rollback_recommended() == {"short_reply": ["degrade_trigger_rate", "route_accuracy_est"]}
    assert final.as_dict()["rollback_recommended"] == {"short_reply": ["degrade_trigger_rate", "route_accuracy_est"]}
    # one recommendation, one page: the route accuracy episode is grouped with the degrade trigger's (no webhook here)
    assert {a.rule: a.notify_state for a in final.firing if a.action == "rollback"} == {
        "rollback_degrade_trigger": "no_webhook",
        "rollback_route_accuracy": "grouped",
    }
    body = alerting.slack_body(next(a for a in final.firing if a.rule == "rollback_degrade_trigger"))
    assert "ROLLBACK RECOMMENDED for short_reply: degrade_trigger_rate" in body["text"]


def _dict(event) -> dict:
    import msgspec

    return msgspec.json.decode(event.to_json())


def test_seed004_calm_windows_over_the_point_limit_recommend_no_rollback(home):
    """docs/metrics.md §3b through the stored windows and the default rules: tool_call sends 2 of 32, 2 of 34 and
    2 of 37 device-entered requests on to the cloud (0.062, 0.059, 0.054 against the 0.05 limit, n >= 30 each),
    as it did on calm demo windows. Each Wilson interval holds the limit (lows 0.017, 0.016, 0.015): no
    recommendation. Three windows of 12 in 35 (0.343, low 0.208) do recommend it."""
    from tests.support.events import decision, quality_fallback

    events, n = [], 0
    for w, (triggered, entered) in enumerate([(2, 32), (2, 34), (2, 37), (12, 35), (12, 35), (12, 35)]):
        for i in range(entered):
            make = quality_fallback if i < triggered else decision
            at = (T0 + w * STEP + i * STEP / entered).isoformat().replace("+00:00", "Z")
            events.append(
                make(
                    event_id=f"00000000-0000-4000-8000-{n:012d}",
                    request_id=f"t{n}",
                    task_type="tool_call",
                    event_time=at,
                )
            )
            n += 1
    fired = []
    with open_warehouse(settings_for(home)) as client:
        migrate(client)
        insert(client, events, [])
        for w in range(6):
            w0 = T0 + w * STEP
            result = compute(client, w0, w0 + STEP)
            write_window(client, "5m", w0, w0 + STEP, result)
            evaluation = alerting.run(client, now=w0 + STEP + timedelta(minutes=1))
            fired += [(w, a.alert_key) for a in evaluation.fired if a.action == "rollback"]
            if w == 2:
                calm = result["by_task_type"]["tool_call"]
                assert (calm["degrade_trigger_rate"], calm["device_entered"]) == (pytest.approx(2 / 37), 37)
                assert round(calm["degrade_trigger_ci"][0], 6) == 0.014951
                assert evaluation.rollback_recommended() == {}
    # the evidence windows 3, 4, 5: fired as of the third, naming its value and interval
    assert fired == [(5, "rollback_degrade_trigger|tool_call")]
    evidence = evaluation.rollback_evidence()["tool_call"]["degrade_trigger_rate"]
    assert (round(evidence["value"], 3), evidence["n"], evidence["windows"]) == (0.343, 35, 3)
    assert round(evidence["interval"][0], 3) == 0.208
