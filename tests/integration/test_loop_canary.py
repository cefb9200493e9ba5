"""A canary's sums read from the warehouse (docs/loop.md#a-look): the experiment's live decisions per session,
each at the share in force when it was first seen, with chosen labels, every number computed by hand."""

from __future__ import annotations

from datetime import timedelta

import pytest

from routerscope.warehouse.analytics.loop import runner
from routerscope.warehouse.client import open_warehouse
from routerscope.warehouse.queries import loop as loop_queries
from routerscope.warehouse.sql import QueryWindow
from tests.support.events import decision, label, quality_fallback
from tests.support.golden_day import END, START, at, eid, insert, timeout_fallback
from tests.support.home import copy_warehouse

pytestmark = pytest.mark.integration
PID, EXP = "0123456789abcdef", "exp-1"
STAGES = [(START, 0.05), (START + timedelta(hours=12), 0.10)]
_n = iter(range(3000, 4000))


def ev(make, session, arm, hours, experiment=EXP, **fields):
    n = next(_n)
    return make(
        event_id=eid(n),
        request_id=f"q{n}",
        session_id=session,
        event_time=at(hours),
        schema_version=2,
        policy_id=PID,
        experiment_id=experiment,
        arm=arm,
        assignment_bucket=100 if arm == "candidate" else 7000,
        **fields,
    )


EVENTS, LABELS = [], []
for c in ("c0", "c1", "c2"):  # control, first seen at 1 h (5 %): two served judged acceptable, one quality fallback
    for _ in range(2):
        EVENTS.append(ev(decision, c, "control", 1, confidence=0.9))
        LABELS.append(label(request_id=EVENTS[-1]["request_id"], device_acceptable=True, event_time=at(20)))
    EVENTS.append(ev(quality_fallback, c, "control", 1.5, confidence=0.4))
# candidate k0 at 2 h (5 %): one served judged bad, one served unjudged
EVENTS.append(ev(decision, "k0", "candidate", 2, confidence=0.8))
LABELS.append(label(request_id=EVENTS[-1]["request_id"], device_acceptable=False, event_time=at(20)))
EVENTS.append(ev(decision, "k0", "candidate", 2.5, confidence=0.8))
# candidate k1 at 13 h (10 %): one served judged acceptable, one device timeout answered by the cloud
EVENTS.append(ev(decision, "k1", "candidate", 13, confidence=0.8))
LABELS.append(label(request_id=EVENTS[-1]["request_id"], device_acceptable=True, event_time=at(20)))
EVENTS.append(ev(timeout_fallback, "k1", "candidate", 13.5))
# x0 in both arms (a broken assignment), and another experiment's event, and a session before the canary
EVENTS += [
    ev(decision, "x0", "control", 3),
    ev(decision, "x0", "candidate", 4),
    ev(decision, "o0", "control", 5, "exp-2"),
]


@pytest.fixture
def warehouse(home, warehouse_template):
    settings = copy_warehouse(warehouse_template("loop-canary", lambda client: insert(client, EVENTS, LABELS)), home)
    with open_warehouse(settings) as client:
        yield client


def test_the_canary_sums_by_hand(warehouse):
    rows = loop_queries.canary_sessions(warehouse, EXP, QueryWindow(START, END))
    assert sorted(r["session"] for r in rows) == ["c0", "c1", "c2", "k0", "k1", "x0"]
    sums, left_out = runner.sums_from_sessions(rows, STAGES)
    assert left_out == {"both_arms": 1, "before_canary": 0}
    # control: 3 sessions at 1 − 0.05, judged 2 each, none missed: Σw·x = 6 / 0.95
    assert sums.missed.control.sessions == 3
    assert sums.missed.control.wx == pytest.approx(6 / 0.95) and sums.missed.control.wy == 0
    # candidate: k0 at 5 % (w 20) judged 1 missed 1; k1 at 10 % (w 10) judged 1 missed 0: R = 20 / 30
    assert sums.missed.candidate.wy == pytest.approx(20) and sums.missed.candidate.wx == pytest.approx(30)
    assert sums.missed.candidate.rate == pytest.approx(2 / 3)
    assert sums.expected_candidate == pytest.approx(4 * 0.05 + 0.10)
    assert sums.assignment_variance == pytest.approx(4 * 0.05 * 0.95 + 0.10 * 0.90)
    # offload of the candidate arm: served 2 of 2 (k0) and 1 of 2 (k1)
    assert (sums.offload.y, sums.offload.x) == (3, 4)
    # guardrails: one timeout in k1's 2 requests (w 10); cloud calls: 1 per control session, k1's 1
    assert sums.guardrails["timeouts"].candidate.wy == pytest.approx(10)
    assert sums.guardrails["cloud_calls_per_session"].control.y == 3
    assert sums.guardrails["cloud_calls_per_session"].candidate.y == 1
    # balance: the mean first-try confidence per session, (0.9 + 0.9 + 0.4) / 3 in control, 0.8 in the candidate
    assert sums.confidence[0].s == pytest.approx(3 * 2.2 / 3) and sums.confidence[1].s == pytest.approx(1.6)


def test_a_session_first_seen_before_the_canary_is_left_out():
    rows = [
        {
            "arms": ["control"],
            "first_seen": START - timedelta(hours=1),
            "requests": 1,
            "served": 1,
            "judged": 0,
            "missed": 0,
            "confidence": None,
            "calls": 0,
            "timeouts": 0,
            "canned": 0,
        }
    ]
    sums, left_out = runner.sums_from_sessions(rows, STAGES)
    assert left_out["before_canary"] == 1 and sums.missed.sessions == 0
