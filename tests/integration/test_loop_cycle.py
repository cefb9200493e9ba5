"""The demo's closed-loop cycle end to end (docs/loop.md#the-demos-cycle): a week of canary traffic through the real
router, Kafka and the loader; a good candidate promoted and a harmful one rolled back; every verdict recomputed from
the warehouse and the policy directory; predicted against measured offload in the calibration ledger; both in
`routerscope loop status` and the policy_events table."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from routerscope.cli import loop_cycle
from routerscope.core.timeutil import utc
from routerscope.warehouse.analytics.loop import lifecycle, rules, runner, view
from routerscope.warehouse.analytics.loop.evidence import find, policies_root
from routerscope.warehouse.client import open_warehouse
from routerscope.warehouse.queries import loop as loop_queries
from routerscope.warehouse.sql import QueryWindow

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]  # the week: ~35 s, 18 loads
START = datetime(2026, 11, 30, tzinfo=UTC)  # where the demo's span would start: the week ends here


def at(text: str) -> datetime:
    return utc(datetime.fromisoformat(text))


def flat(value, key: str = "") -> dict:
    """A nested record as {path: number}, to compare sums the warehouse adds in its own order (a per-session mean
    confidence comes back a few ULPs apart from one query to the next)."""
    if isinstance(value, dict):
        return {k: v for name, item in value.items() for k, v in flat(item, f"{key}/{name}").items()}
    if isinstance(value, list | tuple):
        return {k: v for i, item in enumerate(value) for k, v in flat(item, f"{key}/{i}").items()}
    return {key: value}


def recomputed_from_the_warehouse(client, c) -> list[tuple[dict, str]]:
    """Each look of `c` rebuilt from the warehouse (its sessions re-read over the look's window, each at the share
    of the stage in force when first seen) and the policy directory (the stages from the transitions, the
    prediction from evaluation.json, the settings from candidate.yaml): (the rebuilt sums, the verdict's action)."""
    stages = runner.stages_of(c)
    policy = rules.LoopPolicy(**(c.candidate().get("loop") or {}))
    prediction = c.evaluation()["offload_prediction"]
    out = []
    for look in c.looks():
        start, end = at(look["window"]["start"]), at(look["window"]["end"])
        rows = loop_queries.canary_sessions(client, c.policy_id, QueryWindow(start, end))
        before = [s for s in stages if s[0] < end]  # a stage entered at this look's time is its verdict's doing
        sums, _ = runner.sums_from_sessions(rows, before)
        stage_start = before[-1][0]
        clock = {
            "stage": len(before) - 1,
            "stage_hours": (end - stage_start).total_seconds() / 3600,
            "total_hours": (end - start).total_seconds() / 3600,
            "stage_candidate_sessions": sum(
                1 for r in rows if set(r["arms"]) == {"candidate"} and utc(r["first_seen"]) >= stage_start
            ),
        }
        verdict = rules.decide(runner.build_look(sums, policy, prediction=prediction, **clock), policy)
        out.append((sums.to_dict(), verdict.action))
    return out


def test_the_demo_cycle_promotes_the_good_candidate_and_rolls_the_harmful_one_back(stack, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from tests.support.home import REPO, clean_env, run_cli
    from tests.support.ingest import FAST, query

    out = loop_cycle.run_cycle(stack, start=START, seed=7, show=False)
    good, harmful = out["candidates"]["good"], out["candidates"]["harmful"]
    assert (good["state"], harmful["state"]) == ("full", "rolled_back"), out
    assert harmful["last_verdict"]["reason"] == "harm"
    root = policies_root(stack.home)

    # every transition reproducible: each look's sums and verdict rebuilt from the warehouse and the directory, and
    # the state each verdict calls for is the state its transition file recorded
    with open_warehouse(stack, migrated=True) as client:
        for name in ("good", "harmful"):
            c = find(root, out["candidates"][name]["policy_id"])
            assert c.verify() == []
            rebuilt = recomputed_from_the_warehouse(client, c)
            looks = c.looks()
            for (sums, _), look in zip(rebuilt, looks, strict=True):
                assert flat(sums) == pytest.approx(flat(look["sums"]), rel=1e-12, abs=1e-12)
            assert [a for _, a in rebuilt] == [look["verdict"]["action"] for look in looks]
            assert [runner.recompute(look).to_dict() for look in looks] == [look["verdict"] for look in looks]
            by_file = {f"looks/{p.name}": look for p, look in zip(c.look_files(), looks, strict=True)}
            state = None
            for record in c.transitions():
                event = record["event"]
                look = by_file.get(event["evidence_file"])
                if look is not None:
                    action = runner.recompute(look).action
                    expected = lifecycle.next_stage(state) if action == "advance" else runner.MOVES[action]
                    assert expected == event["to_state"], (event, look["verdict"])
                state = event["to_state"]
            assert state == c.state() == c.decision()["state"]
        assert c.state() == "rolled_back"

    # predicted against measured on the cycle's good candidate: within 1 point, inside the 95 % interval, and the
    # calibration ledger says so
    (entry,) = view.ledger(root, "intent_classify")
    assert entry["policy_id"] == good["policy_id"]
    assert abs(entry["measured"] - entry["predicted"]) <= 0.01, entry
    assert entry["covered"], entry
    assert good["ledger"] == [entry]

    # a person sees both: `routerscope loop status`, and the events in the warehouse
    env = clean_env(stack.home, ROUTERSCOPE_KAFKA_BOOTSTRAP=stack.kafka_bootstrap())
    done = run_cli("loop", "status", "--json", env=env)
    assert done.returncode == 0, done.stderr
    states = {r["policy_id"]: r["state"] for r in json.loads(done.stdout)["candidates"]}
    assert states == {good["policy_id"]: "full", harmful["policy_id"]: "rolled_back"}
    from routerscope.warehouse.ingest.loader import load

    load(stack, **FAST)
    rows = query(stack, "SELECT policy_id, to_state FROM routerscope.policy_events FINAL ORDER BY policy_id, seq")
    last = {pid: to for pid, to in rows}
    assert last == states
    monkeypatch.setenv("ROUTERSCOPE_HOME", str(stack.home))
    app = AppTest.from_file(str(REPO / "routerscope" / "dashboards" / "app_pages" / "loop.py"), default_timeout=60)
    app.run()
    assert not app.exception, app.exception
    assert sorted(h.value for h in app.header) == ["intent_classify", "short_reply"]
    assert {s.value for s in app.subheader} == {
        f"{good['policy_id']} — full",
        f"{harmful['policy_id']} — rolled_back",
    }
    # a second run in the same home keeps what the first decided
    again = loop_cycle.run_cycle(stack, start=START, seed=7, show=False)
    assert {k: v["state"] for k, v in again["candidates"].items()} == {"good": "full", "harmful": "rolled_back"}
