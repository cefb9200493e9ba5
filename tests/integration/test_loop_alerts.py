"""Policy events reach the alert channels with their evidence (docs/loop.md#alert-channels): the webhook and a
real Alertmanager, which routes the transition on to a receiver; a channel that is down never stops it."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from routerscope.warehouse.analytics.loop.evidence import Candidate
from routerscope.warehouse.analytics.loop.notify import ALERTNAME, Notifying
from tests.support.home import settings_for
from tests.support.oncall import Receiver, alertmanager

pytestmark = pytest.mark.integration
UTC = timezone.utc  # noqa: UP017


@pytest.mark.slow
def test_a_rollback_reaches_the_webhook_and_alertmanager_with_its_evidence(tmp_path):
    receiver = Receiver()
    try:
        with alertmanager(tmp_path, f"{receiver.base}/am") as am:
            settings = settings_for(
                tmp_path / "home", ROUTERSCOPE_ALERT_WEBHOOK=f"{receiver.base}/slack", ROUTERSCOPE_ALERTMANAGER_URL=am
            )
            published: list = []
            c = Candidate.propose(
                tmp_path / "policies",
                "short_reply",
                {"threshold": 0.55},
                parent=None,
                window={},
                parameters={},
                publish=published.append,
                now=datetime.now(UTC),
            )
            for a, b in (("proposed", "evaluated"), ("evaluated", "shadow"), ("shadow", "canary_5")):
                c.transition(a, b, "test", "candidate.yaml", published.append)
            metrics = {"missed_fallback_delta": {"estimate": 0.031, "ci": [0.012, 0.05], "n": 420}}
            publish = Notifying(published.append, settings, c.dir, backoff_s=0.05)
            event = c.transition(
                "canary_5", "rolled_back", "harm", "candidate.yaml", publish, metrics=metrics, now=datetime.now(UTC)
            )
            (slack,) = receiver.wait_for("/slack", 1)
            assert (
                slack["text"] == f"routerscope loop: short_reply {c.policy_id} canary_5 → rolled_back (harm, by auto)"
            )
            fields = {f["title"]: f["value"] for f in slack["attachments"][0]["fields"]}
            assert fields["figure"] == "Δ missed_fallback_delta +3.10 pts [+1.20, +5.00], n=420"
            assert fields["evidence"] == f"candidate.yaml sha256 {event['evidence_hash']}"
            (routed,) = receiver.wait_for("/am", 1, timeout_s=60)
            (alert,) = routed["alerts"]
            assert alert["labels"]["alertname"] == ALERTNAME and alert["labels"]["to_state"] == "rolled_back"
            assert alert["labels"]["severity"] == "page" and alert["annotations"]["evidence"] == fields["evidence"]
            answers = json.loads((c.dir / "transitions" / "0005.notified.json").read_text())
            assert answers["webhook"][-1][0] == 200 and answers["alertmanager"][-1][0] == 200
    finally:
        receiver.close()


def test_a_channel_that_is_down_never_stops_a_transition(tmp_path):
    settings = settings_for(tmp_path / "home", ROUTERSCOPE_ALERT_WEBHOOK="http://127.0.0.1:9/nowhere")
    published: list = []
    c = Candidate.propose(
        tmp_path / "p",
        "short_reply",
        {"threshold": 0.5},
        parent=None,
        window={},
        parameters={},
        publish=published.append,
    )
    publish = Notifying(published.append, settings, c.dir, retries=2, backoff_s=0.01, timeout_s=0.5)
    c.transition("proposed", "rejected", "coverage", "candidate.yaml", publish)
    assert c.state() == "rejected" and [e["to_state"] for e in published] == ["proposed", "rejected"]
    answers = json.loads((c.dir / "transitions" / "0002.notified.json").read_text())
    assert len(answers["webhook"]) == 2 and answers["webhook"][-1][0] is None
