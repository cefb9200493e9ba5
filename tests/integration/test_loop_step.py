"""The canary end to end on a real warehouse: the router reads the experiment from the policy directory, its
decision events (with policy, experiment, arm and bucket) and labels land in the warehouse, and one look rolls a
harmful candidate back (docs/loop.md#a-look)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from routerscope.router.backends import DeviceResult
from routerscope.router.engine import Request, Router
from routerscope.warehouse.analytics.loop import rules, runner
from routerscope.warehouse.analytics.loop.evidence import Candidate, policies_root
from tests.support.events import label
from tests.support.fakes import ScriptedCloud, cloud
from tests.support.golden_day import insert

pytestmark = pytest.mark.integration
UTC = timezone.utc  # noqa: UP017
T0 = datetime(2026, 11, 30, tzinfo=UTC)


class Device:
    """First tries alternate 0.9 and 0.58 (a session's two requests); a degraded retry scores 0.3."""

    model = "test-device"

    def __init__(self):
        self.calls, self.ttft_ms, self.tps = 0, 100.0, 50.0

    def generate(self, prompt, *, max_tokens, timeout_ms, degraded, commit_tokens):
        if degraded:
            return DeviceResult("ok", 0.3, "logprob", 5, 1.0, 2.0, "ok")
        self.calls += 1
        return DeviceResult("ok", 0.9 if self.calls % 2 else 0.58, "logprob", 5, 1.0, 2.0, "ok")


@pytest.mark.slow
def test_a_harmful_candidate_is_rolled_back_from_what_the_router_recorded(warehouse, tmp_path):
    events: list = []
    c = Candidate.propose(
        policies_root(tmp_path),
        "short_reply",
        {"threshold": 0.55, "parent_threshold": 0.6},
        parent=None,
        window={},
        parameters={},
        publish=events.append,
        now=T0,
    )
    c.write_evaluation({"offload_prediction": None})
    for a, b in (("proposed", "evaluated"), ("evaluated", "shadow"), ("shadow", "canary_5")):
        c.transition(a, b, "test", "evaluation.json", events.append, now=T0)

    decisions: list = []
    router = Router(Device(), ScriptedCloud([cloud()]), now=lambda: T0 + timedelta(hours=1), on_event=decisions.append)
    router.experiments = lambda task_type: runner.experiment_of(c) if task_type == c.task_type else None
    for i in range(1500):
        for _ in range(2):
            router.route(Request(task_type="short_reply", text="hello", session_id=f"s-{i}"))
    arms = {e.session_id: e.arm for e in decisions}
    assert 30 <= sum(a == "candidate" for a in arms.values()) <= 130  # 5 % of 1,500 = 75
    # every served answer is judged: the 0.9 ones acceptable, the 0.58 ones (served only in the candidate arm) not
    labels = [
        label(request_id=e.request_id, device_acceptable=e.confidence >= 0.9, event_time="2026-11-30T01:30:00Z")
        for e in decisions
        if e.fallback_type == "none"
    ]
    insert(warehouse, [json.loads(e.to_json()) for e in decisions], labels)

    verdict, moved, left_out = runner.step(
        warehouse, c, rules.LoopPolicy(), now=T0 + timedelta(hours=2), publish=events.append
    )
    assert (verdict.action, verdict.reason, moved) == ("rollback", "harm", "rolled_back")
    assert left_out == {"both_arms": 0, "before_canary": 0}
    (look,) = c.looks()
    measured = look["measured"]["missed_fallback_delta"]
    assert measured["estimate"] == pytest.approx(0.5)  # candidate 1 bad of 2 served per session, control 0 of 1
    assert look["sums"]["missed"]["candidate"]["sessions"] + look["sums"]["missed"]["control"]["sessions"] == 1500
    assert runner.recompute(look).to_dict() == look["verdict"]
    assert events[-1]["to_state"] == "rolled_back" and events[-1]["experiment_id"] == c.policy_id
    assert runner.experiment_of(c) is None  # rolled back: the router serves today's policy again


@pytest.mark.slow
def test_loop_step_as_a_user_runs_it(stack):
    """`routerscope loop step` against the broker and warehouse of the home: the look, its transition on Kafka,
    loaded into policy_events."""
    from routerscope.warehouse.analytics.loop.publish import KafkaPublisher
    from routerscope.warehouse.client import open_warehouse
    from routerscope.warehouse.ingest.loader import load
    from tests.support.home import clean_env, run_cli
    from tests.support.ingest import FAST, query

    publish = KafkaPublisher(stack)
    try:
        c = Candidate.propose(
            policies_root(stack.home),
            "short_reply",
            {"threshold": 0.55, "parent_threshold": 0.6},
            parent=None,
            window={},
            parameters={},
            publish=publish,
            now=T0,
        )
        c.write_evaluation({"offload_prediction": None})
        for a, b in (("proposed", "evaluated"), ("evaluated", "shadow"), ("shadow", "canary_5")):
            c.transition(a, b, "test", "evaluation.json", publish, now=T0)
    finally:
        publish.close()
    decisions: list = []
    router = Router(Device(), ScriptedCloud([cloud()]), now=lambda: T0 + timedelta(hours=1), on_event=decisions.append)
    router.experiments = lambda task_type: runner.experiment_of(c)
    for i in range(1500):
        for _ in range(2):
            router.route(Request(task_type="short_reply", text="hello", session_id=f"s-{i}"))
    labels = [
        label(request_id=e.request_id, device_acceptable=e.confidence >= 0.9, event_time="2026-11-30T01:30:00Z")
        for e in decisions
        if e.fallback_type == "none"
    ]
    with open_warehouse(stack, migrated=True) as client:
        insert(client, [json.loads(e.to_json()) for e in decisions], labels)
    env = clean_env(stack.home, ROUTERSCOPE_KAFKA_BOOTSTRAP=stack.kafka_bootstrap())
    done = run_cli("loop", "step", "--now", "2026-11-30T02:00:00Z", "--json", env=env)
    assert done.returncode == 0, done.stderr
    (look,) = json.loads(done.stdout)["looks"]
    assert (look["from"], look["to"], look["verdict"]["action"]) == ("canary_5", "rolled_back", "rollback")
    done = run_cli("loop", "step", env=env)
    assert done.returncode == 0 and done.stdout.strip() == "no candidate in a canary stage"
    load(stack, **FAST)
    rows = query(stack, "SELECT to_state, reason FROM routerscope.policy_events FINAL ORDER BY seq")
    assert rows[-1] == ("rolled_back", "harm")
