"""The closed loop's dashboard page and its view (docs/loop.md#what-a-user-sees), from a policy directory."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from routerscope.warehouse.analytics.loop import rules, runner, view
from routerscope.warehouse.analytics.loop.evidence import Candidate, policies_root
from tests.support.pages import run_page

pytestmark = pytest.mark.integration
UTC = timezone.utc  # noqa: UP017
T0 = datetime(2026, 11, 30, tzinfo=UTC)
PREDICTION = {"estimate": 0.8, "window_se": 0.01, "sd_per_session": 0.05, "planned_sessions": 1000, "factor": 1}


def _canary(root, threshold, missed_candidate, looks):
    """A candidate at canary_5 judged `looks` times on 2,000 identical sessions per look (5 % candidate)."""
    events: list = []
    c = Candidate.propose(
        root,
        "intent_classify",
        {"threshold": threshold, "parent_threshold": 0.7},
        parent=None,
        window={},
        parameters={"margin": 0.01},
        publish=events.append,
        now=T0,
    )
    c.write_evaluation({"offload_prediction": PREDICTION})
    for a, b in (("proposed", "evaluated"), ("evaluated", "shadow"), ("shadow", "canary_5")):
        c.transition(a, b, "test", "evaluation.json", events.append, now=T0)
    sums = runner.CanarySums()
    for k in range(looks):
        for i in range(2000):
            arm = int(i % 20 == 0)
            missed = missed_candidate if arm else 0.5
            sums.add_session(
                arm, 0.05, requests=20, served=16, judged=16, missed=missed + (i % 3) * 0.5, confidence=0.8
            )
        clock = {"stage_hours": 1.0 + k, "total_hours": 1.0 + k, "stage_candidate_sessions": (k + 1) * 100}
        verdict, moved = runner.judge(
            c, sums, rules.LoopPolicy(), clock=clock, window={}, publish=events.append, now=T0
        )
        if moved:
            break
    return c


@pytest.mark.slow
def test_the_view_and_the_page(tmp_path, monkeypatch):
    root = policies_root(tmp_path)
    harmful = _canary(root, 0.6, 3.0, 3)  # 3 of 16 judged missed more per session: rolled back
    assert harmful.state() == "rolled_back"
    live = _canary(root, 0.69, 0.5, 2)  # the same as control: collecting
    v = view.task_view(live)
    assert v["state"] == "canary_5" and v["threshold"] == 0.69 and v["today_threshold"] == 0.7
    assert v["measured_offload"] == pytest.approx(0.8) and v["predicted_offload"] == 0.8
    assert [b["candidate_sessions"] for b in v["bands"]] == [100, 200]
    assert v["bands"][-1]["low"] < 0 < v["bands"][-1]["high"] and v["bands"][-1]["margin"] == 0.01
    ledger = view.ledger(root, "intent_classify")
    assert [e["policy_id"] for e in ledger] == [harmful.policy_id] and ledger[0]["covered"] is True

    monkeypatch.setenv("ROUTERSCOPE_HOME", str(tmp_path))
    app = run_page("loop.py")
    assert not app.exception, app.exception
    assert [h.value for h in app.header] == ["intent_classify"]
    assert {s.value for s in app.subheader} == {f"{live.policy_id} — canary_5", f"{harmful.policy_id} — rolled_back"}
    assert any("1 of the last 1 predictions covered" in m.value for m in app.markdown)


def test_the_page_without_candidates(tmp_path, monkeypatch):
    monkeypatch.setenv("ROUTERSCOPE_HOME", str(tmp_path))
    app = run_page("loop.py")
    assert not app.exception and "No candidate yet" in app.info[0].value
