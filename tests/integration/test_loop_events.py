"""The loop's policy events through the real broker and loader into `policy_events` (docs/loop.md#events): one
row per transition even when a crash published one twice, the state the table gives equals the directory's,
and a malformed policy event is quarantined with its rules."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from routerscope.core import names
from routerscope.warehouse.analytics.loop.evidence import Candidate
from routerscope.warehouse.analytics.loop.publish import InvalidPolicyEvent, KafkaPublisher, encode
from routerscope.warehouse.ingest.loader import load
from tests.support.ingest import FAST, produce, query, scalar

pytestmark = pytest.mark.integration
UTC = timezone.utc  # noqa: UP017
T0 = datetime(2026, 11, 30, tzinfo=UTC)


@pytest.mark.slow
def test_every_transition_is_one_row_and_the_table_agrees_with_the_directory(stack, tmp_path):
    publish = KafkaPublisher(stack)
    try:
        c = Candidate.propose(
            tmp_path / "policies",
            "intent_classify",
            {"task_type": "intent_classify", "threshold": 0.69},
            parent="b" * 64,
            window={"start": "2026-11-23T00:00:00Z", "end": "2026-11-30T00:00:00Z"},
            parameters={"margin": 0.01},
            publish=publish,
            now=T0,
        )
        c.write_evaluation({"offload_prediction": None})
        c.transition("proposed", "evaluated", "passed", "evaluation.json", publish, now=T0)
        metrics = {"missed_fallback_delta": {"estimate": 0.03, "ci": [0.015, 0.045], "n": 812}}
        c.transition("evaluated", "rejected", "harm", "evaluation.json", publish, metrics=metrics, now=T0)
        # a crash after the last publish and before its marker: the restart publishes it again
        (c.dir / "transitions" / "0003.sent").unlink()
        assert c.publish_pending(publish) == 1
    finally:
        publish.close()
    produce(stack, names.TOPIC_POLICY, [b'{"schema_version": 1, "to_state": "nowhere"}'])

    result = load(stack, **FAST)

    assert result.as_dict()["loaded"]["policy"] == 4  # three transitions, one twice
    assert result.as_dict()["quarantined"]["policy"] == 1
    rows = query(
        stack,
        "SELECT seq, from_state, to_state, reason, evidence_hash, ci_low, ci_high, n, metrics "
        "FROM routerscope.policy_events FINAL WHERE policy_id = {p:String} ORDER BY seq",
        p=c.policy_id,
    )
    assert [r[:4] for r in rows] == [
        (1, None, "proposed", "proposed"),
        (2, "proposed", "evaluated", "passed"),
        (3, "evaluated", "rejected", "harm"),
    ]
    files = c.transitions()
    assert [r[4] for r in rows] == [f["event"]["evidence_hash"] for f in files]
    assert rows[2][5:8] == (0.015, 0.045, 812)
    assert json.loads(rows[2][8]) == metrics
    assert rows[-1][2] == c.state() == c.decision()["state"]
    rules = scalar(
        stack, "SELECT rules FROM routerscope.quarantine WHERE kafka_topic = {t:String}", t=names.TOPIC_POLICY
    )
    assert "schema.invalid.to_state" in rules and "schema.required.event_id" in rules


def test_an_event_that_breaks_the_contract_is_never_published():
    with pytest.raises(InvalidPolicyEvent, match="schema"):
        encode({"schema_version": 1, "event_id": "not-a-uuid"})
