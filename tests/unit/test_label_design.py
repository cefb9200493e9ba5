"""The labeling design fixed at decision time (docs/metrics.md §3d): inclusion probabilities per task type ×
confidence bucket, a draw by a hash of the request id that anyone holding the event repeats, a uniform human share,
and the fields on the event; and the demo's fleet drawing its labels by it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from routerscope.contract.events import DecisionEvent
from routerscope.contract.validation import DECISIONS
from routerscope.router.label_design import DEFAULT_DESIGN, LabelDesign, bucket, drawn, for_review, unit
from routerscope.router.sim.fleet import Fleet
from tests.support.events import decision, dumps


@pytest.mark.parametrize(
    "confidence, threshold, pi",
    [
        (0.70, 0.75, 1.0),  # [0.65, 0.85) meets [0.65, 0.85]
        (0.50, 0.75, 0.1),  # [0.45, 0.65) ends before 0.65
        (0.90, 0.80, 1.0),  # [0.85, 1] meets [0.70, 0.90]
        (0.30, 0.80, 0.1),
        (0.60, 0.55, 1.0),
        (None, 0.75, 0.1),  # null confidence: elsewhere
        (0.70, None, 0.1),
    ],
)
def test_the_default_design_includes_the_buckets_near_the_threshold_and_a_tenth_elsewhere(confidence, threshold, pi):
    assert DEFAULT_DESIGN.pi("intent_classify", confidence, threshold) == pi


def test_an_override_sets_one_strata_probability_and_bad_probabilities_are_refused():
    design = LabelDesign(design_id="d2", overrides={("tool_call", bucket(0.3)): 0.5})
    assert design.pi("tool_call", 0.3, 0.8) == 0.5 and design.pi("slot_extract", 0.3, 0.8) == 0.1
    with pytest.raises(ValueError):
        LabelDesign(pi_far=0.0)
    with pytest.raises(ValueError):
        LabelDesign(design_id="x" * 65)


def test_the_draw_is_a_hash_of_the_request_id_and_its_share_is_pi():
    ids = [f"req-{i}" for i in range(20_000)]
    assert [drawn(r, 0.1, "d1") for r in ids[:50]] == [drawn(r, 0.1, "d1") for r in ids[:50]]  # repeatable
    share = sum(drawn(r, 0.1, "d1") for r in ids) / len(ids)
    assert 0.09 < share < 0.11  # 3 sd of a binomial(20000, 0.1) is 0.0064
    assert sum(drawn(r, 0.1, "d1") != drawn(r, 0.1, "d2") for r in ids) > 2000  # another design, another sample
    assert all(drawn(r, 1.0, "d1") for r in ids[:100]) and not drawn("r", None, "d1") and not drawn("r", 0.5, None)
    human = [r for r in ids if for_review(r, 1.0, "d1", 0.05)]
    assert 0.04 < len(human) / len(ids) < 0.06 and all(drawn(r, 1.0, "d1") for r in human)
    assert 0.0 <= unit("d1", "x") < 1.0


def test_the_event_records_pi_and_the_design_as_optional_v2_fields_and_v1_stays_loadable():
    event = msgspec.convert({**decision(confidence=0.7, threshold=0.75), "schema_version": 2}, DecisionEvent)
    stamped = DEFAULT_DESIGN.stamp(event)
    assert (stamped.label_pi, stamped.label_design_id) == (1.0, DEFAULT_DESIGN.design_id)
    assert DECISIONS.parse(msgspec.json.encode(stamped))[1] == []
    assert DECISIONS.parse(dumps(decision()))[1] == []  # v1 without them stays loadable
    assert "schema.unknown.label_pi" in DECISIONS.parse(dumps({**decision(), "label_pi": 0.5}))[1]  # v2 only
    too_big = DECISIONS.parse(dumps({**decision(), "schema_version": 2, "label_pi": 1.5}))
    assert too_big[0] is None and too_big[1]
    assert DEFAULT_DESIGN.stamp(msgspec.structs.replace(event, mode="shadow")).label_pi is msgspec.UNSET


def test_the_fleet_labels_exactly_the_drawn_events_by_a_simulated_judge_and_reviewers_from_ground_truth():
    events, labels = [], []
    fleet = Fleet(
        seed=11,
        start=datetime(2026, 11, 30, tzinfo=UTC),
        span=timedelta(minutes=20),
        on_event=lambda e: events.append(DEFAULT_DESIGN.stamp(e)),
        on_label=labels.append,
        design=DEFAULT_DESIGN,
    )
    fleet.run(3000)
    by_id = {e.request_id: e for e in events if e.mode == "live"}
    judged = {lb.request_id for lb in labels if lb.source == "offline_replay"}
    reviewed = {lb.request_id: lb for lb in labels if lb.source == "human_review"}
    assert judged and reviewed and set(reviewed) <= judged
    for rid in judged:  # only drawn events, and every label of the judge names the simulated judge
        e = by_id[rid]
        assert e.label_pi is not msgspec.UNSET and drawn(rid, e.label_pi, e.label_design_id)
    judge = {lb.request_id: lb.device_acceptable for lb in labels if lb.source == "offline_replay"}
    disagree = sum(judge[r] != lb.device_acceptable for r, lb in reviewed.items())
    assert disagree > 0  # the simulated judge is wrong sometimes; the reviewers say so
