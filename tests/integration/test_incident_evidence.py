"""An incident's evidence read from the warehouse (routerscope/warehouse/analytics/alerting/evidence.py): every episode
of On-call's range in one batch of four queries, each episode's numbers its own."""

from __future__ import annotations

from datetime import timedelta

import pytest

from routerscope.core.timeutil import parse_utc
from routerscope.warehouse.analytics.alerting.evidence import baseline_start, evidence, evidence_many
from tests.support.golden_day import DECISION_EVENTS, END, LABEL_EVENTS, START, A, B, insert

pytestmark = pytest.mark.integration

EPISODES = [
    ("", START, START + timedelta(hours=6)),  # every task type
    (A, START + timedelta(hours=1), START + timedelta(hours=3)),  # inside the first: no decision may bleed across
    (B, START, END),  # shadow traffic only: nothing live
]


def live(task: str, lo, hi) -> list[dict]:
    """The fixture's live decisions of `task` ('' = any) in [lo, hi), each once (the re-sent A1 is stored once)."""
    found = {
        e["event_id"]: e
        for e in DECISION_EVENTS
        if e["mode"] == "live" and (not task or e["task_type"] == task) and lo <= parse_utc(e["event_time"]) < hi
    }
    return list(found.values())


def test_a_batch_of_episodes_reads_what_each_alone_does_and_each_its_own(warehouse):
    """Issue 55 (a page's queries measured and cut): On-call named each incident with four queries of its own (28 for
    seven incidents, 0.5 s of a cold page); now one batch reads them all. Each episode's counts are its own decisions
    (counted here from the fixture's events by hand)."""
    insert(warehouse, DECISION_EVENTS, LABEL_EVENTS)
    batch = evidence_many(warehouse, EPISODES)
    assert batch == [evidence(warehouse, *episode) for episode in EPISODES]
    for (task, start, end), found in zip(EPISODES, batch):
        during, before = live(task, start, end), live(task, baseline_start(start, end), start)
        assert found.during.get("requests", 0) == len(during), task
        assert found.before.get("requests", 0) == len(before), task
        fell_back = [e for e in during if e["fallback_type"] != "none"]
        assert sum(r["during"] for r in found.reasons) == len(fell_back), task
        assert set(found.versions) == {e["policy_version"] for e in during + before}, task
    assert batch[0].during["requests"] > batch[1].during["requests"] > 0  # the wider episode holds more
    assert batch[2].during == {} and batch[2].reasons == []
    assert evidence_many(warehouse, []) == []
