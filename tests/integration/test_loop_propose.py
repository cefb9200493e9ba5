"""Propose and evaluate a candidate on a small warehouse whose numbers are computed by hand
(docs/loop.md#propose, #evaluate)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from routerscope.warehouse.analytics.loop import propose
from routerscope.warehouse.client import open_warehouse
from routerscope.warehouse.sql import QueryWindow
from tests.support.events import decision, label, quality_fallback
from tests.support.golden_day import END, START, at, eid, insert
from tests.support.home import copy_warehouse

pytestmark = pytest.mark.integration
IC = "intent_classify"
WINDOW = QueryWindow(START, END)

# 20 sessions, threshold 0.7. Every session: served at 0.9 and 0.8, a quality fallback at 0.65 (L0 turned down,
# L2 served); sessions 0-9 also a served 0.95. Every event labeled acceptable but session 19's 0.8.
EVENTS, LABELS = [], []
for k in range(20):
    confidences = [0.9, 0.8, 0.65] + ([0.95] if k < 10 else [])
    for j, c in enumerate(confidences):
        n = 1000 + 10 * k + j
        make = quality_fallback if c == 0.65 else decision
        EVENTS.append(
            make(
                event_id=eid(n),
                request_id=f"r{n}",
                session_id=f"sess-{k}",
                task_type=IC,
                event_time=at(1 + k / 10),
                confidence=c,
                threshold=0.7,
            )
        )
        LABELS.append(label(request_id=f"r{n}", device_acceptable=not (k == 19 and c == 0.8), event_time=at(20)))


@pytest.fixture
def warehouse(home, warehouse_template):
    settings = copy_warehouse(warehouse_template("loop-propose", lambda client: insert(client, EVENTS, LABELS)), home)
    with open_warehouse(settings) as client:
        yield client


def test_the_lowest_threshold_that_passes_every_check(warehouse):
    """Target 0.3: 0.60 serves the 0.65 band too (20 moved, all acceptable: Wilson low 20/23.8415 = 0.839 ≥ 0.7;
    missed 1/70 with full coverage) — the lowest of the trust region 0.60-0.80 is chosen.
    Target 0.12: the moved band needs ≥ 0.88 and fails below 0.66; from 0.66 up nothing moves and the missed
    estimate is 1/50 with n_eff 50 (every served event labeled: no variance left): Wilson upper
    0.054247 + 0.050708 = 0.104955 ≤ 0.12 → 0.66. Target 0.10: that upper bound fails everywhere → none."""
    loose = propose.propose(warehouse, WINDOW, IC, 0.7, target=0.3, trust_region=0.1)
    assert loose["chosen"] == 0.6 and loose["moves"]
    assert loose["checks"]["0.60"] == {
        "missed_fallback_upper": True,
        "coverage": True,
        "moved_band": True,
        "alert_limits": True,
        "breaches": [],
    }
    strict = propose.propose(warehouse, WINDOW, IC, 0.7, target=0.12, trust_region=0.1)
    assert strict["chosen"] == 0.66
    assert strict["checks"]["0.65"]["moved_band"] is False and strict["checks"]["0.66"]["moved_band"] is True
    none = propose.propose(warehouse, WINDOW, IC, 0.7, target=0.10, trust_region=0.1)
    assert none["chosen"] is None and not none["moves"]
    assert none["checks"]["0.70"]["missed_fallback_upper"] is False


def test_an_alert_limit_the_candidate_would_breach_rules_it_out(warehouse):
    """A per-task-type rule on the fallback rate: today 20/70 entered-device fall back; at 0.60 none do. A rule
    firing when the fallback rate is under 0.1 (a made-up limit, to see the check act) rules 0.60 out."""
    rule = SimpleNamespace(
        name="too_few", scope="per_task_type", metric="fallback_rate", op="<", limit_for=lambda t: 0.1
    )
    got = propose.propose(warehouse, WINDOW, IC, 0.7, target=0.3, trust_region=0.1, alert_rules=[rule])
    assert got["checks"]["0.60"]["alert_limits"] is False
    assert got["checks"]["0.60"]["breaches"] == ["too_few: fallback_rate 0 < 0.1"]
    assert got["chosen"] == 0.66


def test_the_evaluation_resamples_sessions_and_states_the_prediction(warehouse):
    """At today's threshold: offload 50/70 = 0.714286; per session y − R·x = ±0.142857 (3 of 4, 2 of 3), so the
    per-session spread is 0.142857 / x̄ (3.5) = 0.0408163; at 0.60 every request is served: offload 1."""
    today = propose.evaluate_candidate(warehouse, WINDOW, IC, 0.7, planned_sessions=400, resamples=200, seed=3)
    assert today["sessions"] == 20
    pred = today["offload_prediction"]
    assert pred["estimate"] == pytest.approx(50 / 70)
    assert pred["sd_per_session"] == pytest.approx(0.142857 / 3.5, abs=1e-6)
    low, high = pred["interval"]
    assert low < 50 / 70 < high
    boot = today["figures"]["offload"]["candidate"]
    assert 2 / 3 <= boot["ci"][0] <= boot["ci"][1] <= 0.75  # sessions resampled: between the two kinds' ratios
    cand = propose.evaluate_candidate(warehouse, WINDOW, IC, 0.6, planned_sessions=400, resamples=50)
    assert cand["figures"]["offload"]["candidate"]["estimate"] == 1.0
    assert cand["figures"]["offload"]["current"]["estimate"] == pytest.approx(50 / 70)
    assert cand["figures"]["fallback_rate"]["candidate"]["estimate"] == 0.0
    assert cand["figures"]["cloud_calls_per_session"]["current"]["estimate"] == 1.0  # one fallback per session
    assert cand["quality"]["rate"] == pytest.approx(1 / 70)
    # a ledger that missed: the prediction widens by its factor
    missed = [{"predicted": 0.5, "interval": [0.4, 0.6], "measured": 0.8}] * 8
    wide = propose.evaluate_candidate(
        warehouse, WINDOW, IC, 0.7, planned_sessions=400, ledger=missed, resamples=200, seed=3
    )
    assert wide["calibration_ledger"]["factor"] == pytest.approx(3.0)
    w_low, w_high = wide["offload_prediction"]["interval"]
    assert (w_high - w_low) == pytest.approx(3.0 * (high - low), rel=1e-6)


@pytest.mark.slow
def test_loop_propose_as_a_user_runs_it(stack):
    """`routerscope loop propose` on the fixture above in the home's warehouse: target 0.3 proposes 0.60 (the
    lowest of the trust region), evaluates it, and with --start-canary moves it to canary_5; the same proposal
    again is the same candidate."""
    from routerscope.warehouse.analytics.loop.evidence import find, policies_root
    from tests.support.home import clean_env, run_cli

    with open_warehouse(stack, migrated=True) as client:
        insert(client, EVENTS, LABELS)
    env = clean_env(stack.home, ROUTERSCOPE_KAFKA_BOOTSTRAP=stack.kafka_bootstrap())
    args = ("loop", "propose", "--task-type", IC, "--target", "0.3", "--end", END.isoformat(), "--days", "1")
    done = run_cli(*args, "--start-canary", "--json", env=env)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert (out["state"], out["threshold"], out["new"]) == ("canary_5", 0.6, True)
    c = find(policies_root(stack.home), out["policy_id"])
    evaluation = c.evaluation()
    assert evaluation["proposal"]["chosen"] == 0.6 and evaluation["offload_prediction"]["estimate"] == 1.0
    assert [t["event"]["to_state"] for t in c.transitions()] == ["proposed", "evaluated", "shadow", "canary_5"]
    again = run_cli(*args, "--json", env=env)
    assert json.loads(again.stdout)["new"] is False
    # a target nothing meets: rejected, with the reason
    done = run_cli(
        "loop", "propose", "--task-type", IC, "--target", "0.05", "--end", END.isoformat(), "--days", "1", env=env
    )
    assert done.returncode == 0 and "rejected" in done.stdout
    done = run_cli("loop", "propose", "--task-type", "no_such_task", env=env)
    assert done.returncode == 1 and "no confidence threshold" in done.stderr
