"""The loop's lifecycle and its policy directory (docs/loop.md#files): files, events, crash safety, and every
verdict recomputed from the stored evidence."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from bench.loop import Traffic, threshold_for
from routerscope.warehouse.analytics.loop import evaluate, lifecycle, rules, runner
from routerscope.warehouse.analytics.loop.evidence import Candidate, find, policy_id, sha256
from tests.conftest import REPO

UTC = timezone.utc  # noqa: UP017
T0 = datetime(2026, 11, 30, tzinfo=UTC)
WINDOW = {"start": "2026-11-23T00:00:00Z", "end": "2026-11-30T00:00:00Z"}
PARAMS = {"margin": 0.01, "alpha": 0.05}


def _propose(root, events, threshold=0.69, task_type="intent_classify"):
    cand = {"task_type": task_type, "threshold": threshold, "parent_threshold": 0.70}
    return Candidate.propose(
        root, task_type, cand, parent="a" * 64, window=WINDOW, parameters=PARAMS, publish=events.append, now=T0
    )


def test_the_policy_id_is_the_hash_of_the_canonical_candidate(tmp_path):
    a = {"threshold": 0.69, "task_type": "intent_classify"}
    b = {"task_type": "intent_classify", "threshold": 0.69}  # the same candidate, keys in another order
    assert policy_id(a) == policy_id(b)
    assert policy_id(a) != policy_id({**a, "threshold": 0.68})
    events: list = []
    c = _propose(tmp_path, events)
    assert c.dir == tmp_path / "intent_classify" / c.policy_id
    assert c.candidate() == {"task_type": "intent_classify", "threshold": 0.69, "parent_threshold": 0.70}
    assert c.header()["parent"] == "a" * 64 and c.header()["judge_version"]
    assert [e["to_state"] for e in events] == ["proposed"] and c.state() == "proposed"
    # proposing it again is the same directory and no second event
    assert _propose(tmp_path, events).policy_id == c.policy_id and len(events) == 1
    assert find(tmp_path, c.policy_id[:6]).dir == c.dir


def test_the_lifecycle_refuses_what_it_does_not_allow(tmp_path):
    events: list = []
    c = _propose(tmp_path, events)
    with pytest.raises(lifecycle.TransitionRefused, match="proposed cannot move to full"):
        c.transition("proposed", "full", "x", "candidate.yaml", events.append)
    with pytest.raises(lifecycle.TransitionRefused, match="is proposed, not shadow"):
        c.transition("shadow", "canary_5", "x", "candidate.yaml", events.append)
    c.transition("proposed", "rejected", "coverage", "candidate.yaml", events.append)
    assert lifecycle.allowed("rejected") == set()
    with pytest.raises(lifecycle.TransitionRefused, match="final"):
        c.transition("rejected", "evaluated", "x", "candidate.yaml", events.append)
    assert len(events) == 2


def _to_canary(c, events):
    c.write_evaluation(
        {
            "offload_prediction": {
                "estimate": 0.78,
                "window_se": 0.004,
                "sd_per_session": 0.1,
                "planned_sessions": 1000,
                "factor": 1.0,
            }
        }
    )
    c.transition("proposed", "evaluated", "passed", "evaluation.json", events.append, now=T0)
    c.transition("evaluated", "shadow", "passed", "evaluation.json", events.append, now=T0)
    c.transition("shadow", "canary_5", "shadow_clean", "evaluation.json", events.append, now=T0)


def _offline_prediction(rng, traffic, candidate, today, planned=1000):
    s = traffic.sessions(rng, 1500, np.full(1500, candidate))
    pairs = [(float(a), float(b)) for a, b in zip(s["served"], s["requests"], strict=True) if b > 0]
    boot = evaluate.session_bootstrap(pairs, resamples=100, seed=1)
    return evaluate.prediction_record(pairs, planned, boot)


def _run_canary(root, events, worse_by, seed, policy, sessions_per_hour=150.0):
    """A canary driven by the demo's distributions through `runner.judge`, look by look, to its verdict."""
    rng = np.random.default_rng(seed)
    traffic = Traffic("intent_classify", 1.0)
    candidate_threshold = threshold_for("intent_classify", 0.70, worse_by)
    c = _propose(root, events, threshold=round(candidate_threshold, 4))
    pred = _offline_prediction(rng, traffic, candidate_threshold, 0.70)
    c.write_evaluation({"offload_prediction": pred})
    c.transition("proposed", "evaluated", "passed", "evaluation.json", events.append, now=T0)
    c.transition("evaluated", "shadow", "passed", "evaluation.json", events.append, now=T0)
    c.transition("shadow", "canary_5", "shadow_clean", "evaluation.json", events.append, now=T0)
    sums = runner.CanarySums()
    stage_hours = total_hours = 0.0
    stage_sessions = 0
    for _ in range(400):
        state = c.state()
        share = lifecycle.SHARES[state]
        arm = rng.random(100) < share
        s = traffic.sessions(rng, 100, np.where(arm, candidate_threshold, 0.70))
        for i in np.flatnonzero(s["has_requests"]):
            sums.add_session(
                int(arm[i]),
                share,
                requests=float(s["requests"][i]),
                served=float(s["served"][i]),
                judged=float(s["judged"][i]),
                missed=float(s["missed"][i]),
                confidence=float(s["confidence"][i]),
                guardrails={"cloud_calls_per_session": (float(s["cloud"][i]), 1.0)},
            )
            stage_sessions += int(arm[i])
        stage_hours += 100 / sessions_per_hour
        total_hours += 100 / sessions_per_hour
        clock = {"stage_hours": stage_hours, "total_hours": total_hours, "stage_candidate_sessions": stage_sessions}
        now = T0 + timedelta(hours=total_hours)
        verdict, moved = runner.judge(c, sums, policy, clock=clock, window=WINDOW, publish=events.append, now=now)
        if moved in lifecycle.CANARY:
            stage_hours, stage_sessions = 0.0, 0
        if moved not in (None, *lifecycle.CANARY):
            return c, verdict
    return c, None


POLICY = rules.LoopPolicy(auto_promote=True, planned_sessions=10800)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("worse_by", "seed", "rate", "final"), [(0.03, 11, 150.0, "rolled_back"), (0.003, 12, 250.0, "full")]
)
def test_a_canary_cycle_and_every_verdict_recomputed_from_its_files(tmp_path, worse_by, seed, rate, final):
    """The demo's week in small: a harmful candidate (+3 points) is rolled back, a good one (+0.3) promoted
    through every stage. Then every look file's verdict is recomputed from the file alone, every transition's
    evidence hash and parent chain checks, and replaying the transitions gives the state decision.json holds."""
    events: list = []
    c, verdict = _run_canary(tmp_path, events, worse_by, seed, POLICY, sessions_per_hour=rate)
    assert c.state() == final, verdict
    for path in c.look_files():
        record = json.loads(path.read_text())
        assert runner.recompute(record).to_dict() == record["verdict"], path.name
    assert c.verify() == []
    state = None
    for record in c.transitions():
        lifecycle.check(state, record["event"]["to_state"]) if state else None
        state = record["event"]["to_state"]
    assert state == c.decision()["state"] == final
    # one event per transition, in order, each naming the file it stood on by its hash
    assert [e["seq"] for e in events] == list(range(1, len(c.transition_files()) + 1))
    last = events[-1]
    assert last["evidence_hash"] == sha256((c.dir / last["evidence_file"]).read_bytes())
    assert last["n"] and last["ci_low"] is not None
    if final == "full":
        assert [e["to_state"] for e in events][-4:] == ["canary_5", "canary_10", "canary_25", "full"]


def test_a_changed_evidence_file_breaks_the_chain(tmp_path):
    events: list = []
    c = _propose(tmp_path, events)
    _to_canary(c, events)
    assert c.verify() == []
    path = c.dir / "evaluation.json"
    path.write_text(path.read_text().replace("0.78", "0.88"))
    problems = c.verify()
    assert any("evidence evaluation.json changed" in p for p in problems)


CRASH_SCRIPT = textwrap.dedent(
    """
    import json, os, signal, sys
    from pathlib import Path
    from routerscope.warehouse.analytics.loop.evidence import find

    root, pid, sink = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])

    def publish(event):
        with open(sink, "a") as f:
            f.write(json.dumps(event) + "\\n")

    c = find(root, pid)
    c.transition("canary_5", "rolled_back", "harm", "evaluation.json", publish,
                 after_file=lambda: os.kill(os.getpid(), signal.SIGKILL))
    """
)


def test_a_kill_between_the_file_and_its_event_heals_on_restart(tmp_path):
    """SIGKILL after the transition file is written and before its event is published: the restart publishes it
    once (the same event id), and the directory, decision.json and the events agree on one state."""
    events: list = []
    c = _propose(tmp_path, events)
    _to_canary(c, events)
    sink = tmp_path / "sink.jsonl"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", CRASH_SCRIPT, str(tmp_path), c.policy_id, str(sink)], env=env, capture_output=True
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert not sink.exists()  # killed before the event
    assert c.state() == "rolled_back"  # the file is the state
    assert c.decision()["state"] == "canary_5"  # not yet rewritten
    published: list = []
    assert c.publish_pending(published.append) == 1
    assert [e["to_state"] for e in published] == ["rolled_back"]
    assert c.decision()["state"] == "rolled_back"
    assert c.publish_pending(published.append) == 0  # once
    file_event = c.transitions()[-1]["event"]
    assert published[0] == file_event  # the same id: a duplicate publish is the same event
    assert c.verify() == []


def test_a_torn_temporary_file_is_not_a_transition(tmp_path):
    """A crash mid-write leaves only the temporary file: it is neither a transition nor the state."""
    events: list = []
    c = _propose(tmp_path, events)
    (c.dir / "transitions" / ".0002.json.123.tmp").write_text('{"event": {"to_state": "fu')
    # nor is a notification record beside a transition (it once read as one, and broke the chain)
    (c.dir / "transitions" / "0001.notified.json").write_text('{"webhook": [[200, ""]]}')
    assert c.state() == "proposed" and len(c.transition_files()) == 1 and c.verify() == []


def _harm_sums() -> runner.CanarySums:
    """2,000 sessions at 5 %: the candidate's 16 judged answers miss 3-4 a session, the control's 0.5-1.5."""
    sums = runner.CanarySums()
    for i in range(2000):
        arm = int(i % 20 == 0)
        missed = (3.0 if arm else 0.5) + (i % 3) * 0.5
        sums.add_session(arm, 0.05, requests=20, served=16, judged=16, missed=missed, confidence=0.8)
    return sums


HARM_CLOCK = {"stage_hours": 1.0, "total_hours": 1.0, "stage_candidate_sessions": 100}
LOOK_CRASH_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from routerscope.warehouse.analytics.loop import rules, runner
    from routerscope.warehouse.analytics.loop.evidence import Candidate, find
    from tests.unit.test_loop_evidence import HARM_CLOCK, WINDOW, _harm_sums

    Candidate.transition = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)  # dies right after the look file
    c = find(Path(sys.argv[1]), sys.argv[2])
    runner.judge(c, _harm_sums(), rules.LoopPolicy(), clock=HARM_CLOCK, window=WINDOW, publish=print)
    """
)


def test_a_kill_between_the_look_file_and_its_transition_leaves_the_stage_and_the_next_look_acts(tmp_path):
    """SIGKILL after a look's file is written and before the transition its verdict calls for: the state is still
    the stage (the transitions are the state), the look stands as evidence no transition used, and the restarted
    look, on the same data, writes its own file and makes the transition once."""
    events: list = []
    c = _propose(tmp_path, events)
    _to_canary(c, events)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", LOOK_CRASH_SCRIPT, str(tmp_path), c.policy_id], env=env, capture_output=True
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert [p.name for p in c.look_files()] == ["0001.json"]
    assert c.looks()[0]["verdict"] == {"action": "rollback", "reason": "harm"}
    assert c.state() == c.decision()["state"] == "canary_5" and c.verify() == []
    before = len(events)
    verdict, moved = runner.judge(
        c, _harm_sums(), rules.LoopPolicy(), clock=HARM_CLOCK, window=WINDOW, publish=events.append, now=T0
    )
    assert (verdict.action, moved) == ("rollback", "rolled_back")
    assert [p.name for p in c.look_files()] == ["0001.json", "0002.json"]
    assert [e["to_state"] for e in events[before:]] == ["rolled_back"]
    assert events[-1]["evidence_file"] == "looks/0002.json"
    assert c.state() == c.decision()["state"] == "rolled_back" and c.verify() == []
    assert c.publish_pending(events.append) == 0
