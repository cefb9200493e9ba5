"""`routerscope loop …` as a user runs it, against a real broker and warehouse (docs/loop.md#commands)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from routerscope.core import broker
from routerscope.warehouse.analytics.loop import rules, runner
from routerscope.warehouse.analytics.loop.evidence import Candidate, policies_root
from routerscope.warehouse.analytics.loop.publish import KafkaPublisher
from routerscope.warehouse.ingest.loader import load
from tests.support.home import clean_env, run_cli
from tests.support.ingest import FAST, query

pytestmark = pytest.mark.integration
UTC = timezone.utc  # noqa: UP017
T0 = datetime(2026, 11, 30, tzinfo=UTC)
WINDOW = {"start": "2026-11-23T00:00:00Z", "end": "2026-11-30T00:00:00Z"}


def _at_canary_25(settings) -> Candidate:
    """A candidate walked to canary_25 whose look says await_approval: 4,000 identical sessions, a quarter in the
    candidate arm, the same missed share (1 in 20) and offload (0.8) in both arms: Δ = 0 with a zero-width
    interval, the offload exactly the prediction."""
    publish = KafkaPublisher(settings)
    try:
        c = Candidate.propose(
            policies_root(settings.home),
            "intent_classify",
            {"task_type": "intent_classify", "threshold": 0.69},
            parent="c" * 64,
            window=WINDOW,
            parameters={"margin": 0.01},
            publish=publish,
            now=T0,
        )
        prediction = {"estimate": 0.8, "window_se": 0.01, "sd_per_session": 0.0, "planned_sessions": 1000, "factor": 1}
        c.write_evaluation({"offload_prediction": prediction})
        for a, b in (
            ("proposed", "evaluated"),
            ("evaluated", "shadow"),
            ("shadow", "canary_5"),
            ("canary_5", "canary_10"),
            ("canary_10", "canary_25"),
        ):
            c.transition(a, b, "test", "evaluation.json", publish, now=T0)
        sums = runner.CanarySums()
        for i in range(4000):
            sums.add_session(int(i % 4 == 0), 0.25, requests=20, served=16, judged=16, missed=0.8, confidence=0.8)
        clock = {"stage_hours": 30.0, "total_hours": 100.0, "stage_candidate_sessions": 1000}
        verdict, moved = runner.judge(c, sums, rules.LoopPolicy(), clock=clock, window=WINDOW, publish=publish, now=T0)
        assert (verdict.action, moved) == ("await_approval", None)
    finally:
        publish.close()
    return c


@pytest.mark.slow
def test_status_explain_approve_and_the_refusals(stack):
    c = _at_canary_25(stack)
    env = clean_env(stack.home, ROUTERSCOPE_KAFKA_BOOTSTRAP=stack.kafka_bootstrap())
    done = run_cli("loop", "status", "--json", env=env)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)["candidates"]
    assert (row["policy_id"], row["state"], row["last_verdict"]["action"]) == (
        c.policy_id,
        "canary_25",
        "await_approval",
    )
    assert row["missed_fallback_delta"]["n"] == 4000 and row["unpublished_transitions"] == 0

    done = run_cli("loop", "explain", c.policy_id[:8], env=env)
    assert done.returncode == 0, done.stderr
    assert "canary_10 → canary_25" in done.stdout and "await_approval" in done.stdout and "chain: whole" in done.stdout

    done = run_cli("loop", "resume", c.policy_id, "--actor", "ana", env=env)
    assert done.returncode == 1 and done.stderr.startswith("routerscope: error: ") and "only a halted" in done.stderr

    done = run_cli("loop", "approve", c.policy_id, "--actor", "ana", env=env)
    assert done.returncode == 0, done.stderr
    assert c.state() == "full" and c.decision()["actor"] == "ana"
    # approving again: refused, one line, nothing written
    files = len(c.transition_files())
    done = run_cli("loop", "approve", c.policy_id, "--actor", "ana", env=env)
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1 and len(c.transition_files()) == files

    load(stack, **FAST)
    rows = query(
        stack,
        "SELECT to_state, actor, reason FROM routerscope.policy_events FINAL WHERE policy_id = {p:String} ORDER BY seq",
        p=c.policy_id,
    )
    assert rows[-1] == ("full", "ana", "approved") and len(rows) == files

    # without a broker a rollback changes nothing and says what to do
    broker.stop(stack)
    done = run_cli("loop", "rollback", c.policy_id, "--actor", "ana", env=env)
    assert done.returncode == 1 and "routerscope: error:" in done.stderr
    assert c.state() == "full" and len(c.transition_files()) == files


def test_an_unknown_id_is_one_line(tmp_path):
    done = run_cli("loop", "explain", "feedbeef", env=clean_env(tmp_path))
    assert done.returncode == 1
    assert (
        done.stderr
        == "routerscope: error: policy id 'feedbeef': no candidate has it (`routerscope loop status` lists them)\n"
    )


def test_a_damaged_file_is_named_and_never_hides_the_other_candidates(tmp_path):
    """A look file cut short by hand (or a damaged disk): `status` names it and lists the rest, `explain` says what
    to do in one line."""
    events: list = []
    root = policies_root(tmp_path)
    good = Candidate.propose(
        root, "short_reply", {"threshold": 0.5}, parent=None, window={}, parameters={}, publish=events.append
    )
    bad = Candidate.propose(
        root, "short_reply", {"threshold": 0.55}, parent=None, window={}, parameters={}, publish=events.append
    )
    (bad.dir / "transitions" / "0001.json").write_text('{"event": {"to_st')
    env = clean_env(tmp_path)
    done = run_cli("loop", "status", env=env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert any(good.policy_id in line and "proposed" in line for line in lines)
    assert any(bad.policy_id in line and "unreadable" in line for line in lines)
    done = run_cli("loop", "explain", bad.policy_id, env=env)
    assert done.returncode == 1 and done.stderr.startswith("routerscope: error: ")
    assert len(done.stderr.strip().splitlines()) == 1 and "cannot be read" in done.stderr
