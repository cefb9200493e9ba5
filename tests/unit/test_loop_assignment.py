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
