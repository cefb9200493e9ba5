"""The canary's assignment by session (docs/loop.md#the-canarys-assignment)."""

from __future__ import annotations

import hashlib

import pytest

from routerscope.router.experiment import Experiment, bucket


def exp(share: float) -> Experiment:
    return Experiment("exp-1", "0123456789abcdef", "intent_classify", "salt-1", share, 0.69)


def test_the_bucket_by_hand():
    digest = hashlib.sha256(b"salt-1:session-42").hexdigest()
    assert bucket("session-42", "salt-1") == int(digest[:8], 16) % 10000
    # another salt is another draw: over many sessions the two assignments are independent
    same = sum(bucket(f"s-{i}", "salt-1") < 500 and bucket(f"s-{i}", "salt-2") < 500 for i in range(20_000))
    assert same < 200  # 5 % of 5 % of 20,000 = 50 expected


def test_sticky_and_raising_the_share_only_adds_sessions():
    sessions = [f"s-{i}" for i in range(20_000)]
    at5 = {s for s in sessions if exp(0.05).assign(s).arm == "candidate"}
    at10 = {s for s in sessions if exp(0.10).assign(s).arm == "candidate"}
    assert at5 <= at10  # nobody leaves the candidate arm when the stage grows
    assert all(exp(0.05).assign(s).arm == "candidate" for s in at5)  # the same answer every time
    # the share is honoured: 5 % of 20,000 = 1,000, binomial sd ~31
    assert 900 < len(at5) < 1100 and 1850 < len(at10) < 2150
    assert {exp(1.0).assign(s).arm for s in sessions[:100]} == {"candidate"}
    assert {exp(0.0).assign(s).arm for s in sessions[:100]} == {"control"}


def test_a_request_without_a_session_stays_out_and_a_bad_share_is_refused():
    assert exp(0.05).assign(None) is None and exp(0.05).assign("") is None
    with pytest.raises(ValueError):
        exp(1.5)


def _router_with(experiments):
    from routerscope.router.engine import Router
    from tests.support.fakes import ScriptedCloud, ScriptedDevice, cloud, dev

    router = Router(ScriptedDevice([dev(confidence=0.65)]), ScriptedCloud([cloud()]))
    router.experiments = experiments
    return router


def test_the_router_serves_each_arm_its_threshold_and_records_the_arm():
    """short_reply's threshold is 0.60 today; the candidate's 0.70. A first try at 0.65 is served on the device in
    the control arm and turned down in the candidate arm; each event names the policy, experiment, arm, bucket."""
    from routerscope.contract.validation import DECISIONS
    from routerscope.router.engine import Request

    e = Experiment("exp-7", "0123456789abcdef", "short_reply", "salt-1", 0.5, 0.70)
    router = _router_with(lambda task_type: e)
    seen = {}
    for i in range(40):
        session = f"s-{i}"
        _, event = router.route(Request(task_type="short_reply", text="hello", session_id=session))
        assert (event.policy_id, event.experiment_id, event.assignment_bucket) == (
            "0123456789abcdef",
            "exp-7",
            bucket(session, "salt-1"),
        )
        assert event.arm == ("candidate" if bucket(session, "salt-1") < 5000 else "control")
        assert event.threshold == (0.70 if event.arm == "candidate" else 0.60)
        assert event.fallback_type == ("quality" if event.arm == "candidate" else "none")
        assert DECISIONS.parse(event.to_json())[1] == []  # valid under the contract, v2
        seen[event.arm] = True
    assert seen == {"candidate": True, "control": True}
    # another task type, or no experiment: no experiment fields at all
    _, other = router.route(Request(task_type="intent_classify", text="hi", session_id="s-1"))
    assert b'"arm"' not in other.to_json() and b"policy_id" not in other.to_json()


def test_a_failing_experiment_source_never_fails_a_request():
    from routerscope.router.engine import Request

    def broken(task_type):
        raise RuntimeError("the loop's store is gone")

    _, event = _router_with(broken).route(Request(task_type="short_reply", text="hello", session_id="s-1"))
    assert event.fallback_type == "none" and b'"arm"' not in event.to_json()


def test_a_v1_event_may_not_carry_the_experiment_fields():
    """Optional fields extend the newest version only; v1 events without them stay valid."""
    import json

    from routerscope.contract.validation import DECISIONS
    from tests.support.events import decision

    assert DECISIONS.parse(json.dumps(decision()).encode())[1] == []
    rules = DECISIONS.parse(json.dumps(decision(arm="candidate")).encode())[1]
    assert rules and any("arm" in r or "version" in r for r in rules)
    ok = decision(
        schema_version=2, policy_id="0123456789abcdef", experiment_id="e", arm="control", assignment_bucket=9999
    )
    assert DECISIONS.parse(json.dumps(ok).encode())[1] == []
    bad = dict(ok, assignment_bucket=10000, arm="treatment")
    assert set(DECISIONS.parse(json.dumps(bad).encode())[1]) >= {
        "schema.invalid.assignment_bucket",
        "schema.invalid.arm",
    }
