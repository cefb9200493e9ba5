"""Labels by design, a judge audited by people (docs/metrics.md §3d): prediction-powered estimates computed by hand
on a small designed sample whose judge is wrong on purpose, in a real embedded warehouse through `compute` (what
`routerscope metrics --json` prints). The corrected estimate recovers the truth within its interval; the judge's
own reading does not."""

from __future__ import annotations

import math

import pytest

from routerscope.warehouse.analytics import ppi
from routerscope.warehouse.analytics.metrics import compute
from tests.support.events import decision, label
from tests.support.golden_day import END, START, at, eid, insert

pytestmark = pytest.mark.integration
IC = "intent_classify"


def designed_sample() -> tuple[list[dict], list[dict]]:
    """200 device-served intent_classify events, two strata of 100 (confidence 0.90: bucket [0.85, 1];
    0.70: [0.65, 0.85)). Truth: in A every 5th answer is bad (20 of 100); in B two of every 5 (40 of 100): 60 of
    200 = 0.30 missed fallbacks. The judge (offline_replay) sees all of A and accepts every answer (it never
    catches a bad one); it sees B's first 50 and catches only every 5th (10 of the 20 bad there). People
    (human_review) audit A's first 40 and B's first 20."""
    events, labels = [], []
    for stratum, confidence, judged, audited, bad, caught in (
        ("a", 0.90, 100, 40, lambda i: i % 5 == 0, lambda i: False),
        ("b", 0.70, 50, 20, lambda i: i % 5 in (0, 1), lambda i: i % 5 == 0),
    ):
        for i in range(100):
            rid = f"{stratum}{i}"
            n = (0 if stratum == "a" else 100) + i
            events.append(
                decision(event_id=eid(5000 + n), request_id=rid, task_type=IC, event_time=at(1), confidence=confidence)
            )
            if i < judged:
                ok = not caught(i)
                labels.append(label(request_id=rid, source="offline_replay", device_acceptable=ok, route_correct=ok))
            if i < audited:
                ok = not bad(i)
                labels.append(label(request_id=rid, source="human_review", device_acceptable=ok, route_correct=ok))
    return events, labels


def test_the_corrected_estimate_recovers_the_truth_and_the_judges_own_does_not(warehouse):
    insert(warehouse, *designed_sample())
    result = compute(warehouse, START, END)
    # Stratum A: N 100, judged 100, Ŷ (hit = not acceptable) all 0 → m_A = 0, s² = 0; audited 40, of them 8 bad
    # (i = 0, 5, …, 35): Y − Ŷ = 1 for 8, 0 for 32 → mean 0.2, s² = (8 − 64/40)/39 = 0.164103.
    # Stratum B: N 100, judged 50 with 10 hits (i % 5 == 0) → m_B = 0.2, s² = (10 − 100/50)/49 = 0.163265;
    # audited 20: 8 bad, 4 of them caught → Y − Ŷ = 1 for 4 → mean 0.2, s² = (4 − 16/20)/19 = 0.168421.
    # M = ½·0 + ½·0.2 = 0.1; Δ = ½·0.2 + ½·0.2 = 0.2; rate = 0.3 (the truth: 60/200).
    # V = ¼·0.163265/50 + ¼·0.164103/40 + ¼·0.168421/20 = 0.00081633 + 0.00102564 + 0.00210526 = 0.00394723
    # half = 1.96·√V = 0.123140 → ci [0.176860, 0.423140]
    for group in (result["overall"], result["by_task_type"][IC]):
        est = group["missed_fallback_ppi"]
        assert est["rate"] == pytest.approx(0.3)
        assert est["ci"] == [pytest.approx(0.176860, abs=1e-5), pytest.approx(0.423140, abs=1e-5)]
        assert (est["coverage"], est["n_judged"], est["n_human"]) == (1.0, 150, 60)
        assert est["ci"][0] <= 60 / 200 <= est["ci"][1]  # the truth, inside
        # route accuracy: hit = the route was right (serving on the device was right when acceptable): 1 − 0.3
        ra = group["route_accuracy_ppi"]
        assert ra["rate"] == pytest.approx(0.7)
        assert ra["ci"] == [pytest.approx(0.576860, abs=1e-5), pytest.approx(0.823140, abs=1e-5)]
        assert group["false_fallback_ppi"] is None  # no fallback in the window
        # the audit: 60 events with both verdicts; A: judge accepts all, 8 bad → 32 agree; B: 4 caught + 12 good
        # agree, 4 bad accepted → 48/60 = 0.8; accept_bad 12/16; reject_good 0/44
        audit = group["judge_agreement"]
        assert (audit["agreement"], audit["n_human"], audit["accept_bad"], audit["reject_good"]) == (
            pytest.approx(0.8),
            60,
            pytest.approx(0.75),
            0.0,
        )
        assert audit["ci"][0] < 0.8 < audit["ci"][1]
        assert "80%" in group["judge_warning"]  # below 0.9: said beside its estimates
    # the judge's own reading (its verdicts alone): M = 0.1 with V = ¼·0.163265/50 → half 1.96·0.028571 = 0.056
    strata = [(100, 100, 0, 40, 8, 8), (100, 50, 10, 20, 4, 4)]
    assert ppi.uncorrected(strata) == pytest.approx(0.1)
    half = 1.96 * math.sqrt(0.25 * 0.163265 / 50)
    assert not (0.1 - half <= 0.3 <= 0.1 + half)  # the truth lies outside the uncorrected interval
    assert not (result["by_task_type"][IC]["missed_fallback_ppi"]["ci"][0] <= 0.1)  # and it outside the corrected


def test_too_few_audited_events_give_no_estimate_and_say_the_judge_is_not_audited(warehouse):
    events, labels = designed_sample()
    labels = [lb for lb in labels if not (lb["source"] == "human_review" and lb["request_id"] not in ("a0", "a1"))]
    insert(warehouse, events, labels)
    group = compute(warehouse, START, END)["by_task_type"][IC]
    assert group["missed_fallback_ppi"] is None and group["route_accuracy_ppi"] is None
    assert group["judge_warning"].startswith("the judge is not audited (2 of 30")
    key, est = ppi.preferred(group, "mf")
    assert key == "missed_fallback_est" and est["rate"] is not None  # §3c's, named


def test_a_human_label_is_never_overwritten_by_a_later_judge_label(warehouse):
    """The chosen label (§3) ranks human_review above offline_replay whatever their times; §3d reads both."""
    events = [decision(event_id=eid(9001), request_id="h1", task_type=IC, event_time=at(1), confidence=0.9)]
    labels = [
        label(request_id="h1", source="human_review", device_acceptable=False, route_correct=False),
        label(request_id="h1", source="offline_replay", device_acceptable=True, route_correct=True, event_time=at(30)),
    ]
    insert(warehouse, events, labels)
    group = compute(warehouse, START, END)["by_task_type"][IC]
    assert group["missed_fallback_rate"] == 1.0  # the person's verdict stands
    assert group["judge_agreement"]["n_human"] == 1 and group["judge_agreement"]["accept_bad"] == 1.0


def test_readinesss_quality_gate_reads_the_corrected_estimate_and_names_it(warehouse):
    from routerscope.router.policy import default_policy
    from routerscope.warehouse.analytics import review
    from routerscope.warehouse.sql import QueryWindow

    insert(warehouse, *designed_sample())
    report = review.readiness_report(warehouse, default_policy(), QueryWindow(START, END))
    q = report["task_types"][IC]["gates"]["gate_quality"]
    assert q["estimate"] == "missed_fallback_ppi" and q["missed_fallback_ppi"]["rate"] == pytest.approx(0.3)
    assert q["status"] == "fail"  # 0.3 missed, its interval starts at 0.18 > 3 %: the judge alone said 0.1
    assert "80%" in q["judge_warning"] and "missed_fallback_ppi" in review.evidence(report["task_types"][IC]["gates"])
    # the weekly report says how far the judge agrees with people beside the gate it fed
    ready = report["task_types"][IC]
    assert ready["judge_agreement"]["n_human"] == 60 and "80%" in ready["judge_warning"]
    from routerscope.cli import render

    text = render.review("readiness", {**report, "beside_grading": {}})
    assert "judge: 80.0%" in text and "accepts 75.0% of bad" in text


def test_the_replay_takes_exactly_the_drawn_events_of_a_design_and_the_new_columns_load(warehouse):
    """Events that carry the design load with `label_pi` and `label_design_id` (contract v2); the replay's
    candidates are those not judged yet that left a device answer, and the draw is decided from the event alone."""
    from routerscope.router.label_design import DEFAULT_DESIGN, drawn
    from routerscope.warehouse.queries.ppi import designed_candidates
    from routerscope.warehouse.sql import QueryWindow

    design = DEFAULT_DESIGN.design_id
    events = [
        {
            **decision(event_id=eid(7000 + i), request_id=f"d{i}", task_type=IC, event_time=at(1), confidence=0.7),
            "schema_version": 2,
            "label_pi": 0.5,
            "label_design_id": design,
        }
        for i in range(40)
    ]
    events.append(decision(event_id=eid(7100), request_id="old", task_type=IC, event_time=at(1)))  # v1, no design
    labels = [label(request_id="d0", source="offline_replay", device_acceptable=True)]  # judged already
    insert(warehouse, events, labels)
    stored = warehouse.query(
        "SELECT count(), countIf(label_pi = 0.5 AND label_design_id = {d:String}) FROM routerscope.decisions",
        parameters={"d": design},
    ).result_rows[0]
    assert stored == (41, 40)
    found = designed_candidates(warehouse, QueryWindow(START, END))
    assert sorted(rid for rid, *_ in found) == sorted(f"d{i}" for i in range(1, 40))
    picked = [rid for rid, _, _, pi, d in found if drawn(rid, pi, d)]
    assert sorted(picked) == sorted(f"d{i}" for i in range(1, 40) if drawn(f"d{i}", 0.5, design))
    assert 0 < len(picked) < 39


def test_the_what_if_gives_the_candidates_corrected_estimate_and_its_gate_reads_it(warehouse):
    """§14 with §3d: the candidate's own routes. At 0.8 the 0.70 stratum moves to the cloud, leaving stratum A
    device-served: M_A = 0, Δ = 0.2 → 0.2 (A's truth: 20 of 100); V = 0.164103/40 = 0.00410256, half
    1.96·0.064051 = 0.125540 → [0.074460, 0.325540]. A gate on the §3c estimate reads the corrected one and says so."""
    from routerscope.warehouse.analytics import whatif
    from routerscope.warehouse.sql import QueryWindow

    insert(warehouse, *designed_sample())
    window = QueryWindow(START, END)
    task = whatif.compute(warehouse, window, {IC: 0.8})["by_task_type"][IC]
    assert task["current"]["missed_fallback_ppi"]["rate"] == pytest.approx(0.3)
    est = task["candidate"]["missed_fallback_ppi"]
    assert est["rate"] == pytest.approx(0.2)
    assert est["ci"] == [pytest.approx(0.074460, abs=1e-5), pytest.approx(0.325540, abs=1e-5)]
    result = {"by_task_type": {IC: task}}
    hits = whatif.gate(result, [whatif.parse_gate("missed_fallback_est.high>0.05")], min_labeled=1)
    assert hits == [f"{IC}: missed_fallback_est.high 0.32554 > 0.05 (read missed_fallback_ppi.high)"]
    rows = {label: fmt(task["candidate"]) for label, fmt in whatif.ROWS}  # the table the CLI and tuning page show
    assert rows["missed fallbacks, corrected (§3d)"].startswith("20.0% [") and rows[
        "false fallbacks, corrected (§3d)"
    ].endswith("(judge not audited)")
    assert whatif.gate(result, [whatif.parse_gate("missed_fallback_ppi.rate>0.1")], min_labeled=1) == [
        f"{IC}: missed_fallback_ppi.rate 0.2 > 0.1"
    ]


def test_labels_as_of_arrival_carry_the_route_accuracy_sums_of_the_verdicts_that_had_arrived(warehouse):
    """The alert engine's as-of read (labels.labels_as_of): per stratum (N, judged, judged hits, audited, Σ(Y − Ŷ),
    Σ(Y − Ŷ)²) of route verdicts. A: the judge calls every route right, 8 of its 40 audited were wrong (−8); B: 40
    of 50 right, 4 of its 20 audited wrong where it said right (−4). Before any label arrived: nothing judged."""
    from datetime import timedelta

    from routerscope.warehouse.queries import labels as label_queries

    insert(warehouse, *designed_sample())
    late = label_queries.labels_as_of(warehouse, 86400, START, END, END + timedelta(days=30))
    assert sorted(late[(IC, START)]["ra_ppi"]) == [(100, 50, 40, 20, -4, 4), (100, 100, 100, 40, -8, 8)]
    early = label_queries.labels_as_of(warehouse, 86400, START, END, START - timedelta(days=30))
    assert all(n == 0 and r == 0 for _, n, _, r, _, _ in early[(IC, START)]["ra_ppi"])


def test_several_sets_of_bucket_edges_are_read_at_once_each_as_its_own(warehouse):
    """The metric set stratifies §3d on §6's edges and checks each recommended threshold on those edges with the
    threshold added, all in one read (`ppi_strata_sets`): each set's strata are its own. The designed sample by
    hand (missed fallbacks, `mf`: N events, n judged, y judged bad, r audited): under the edge 0.8, B (0.70) is
    bucket 0 with N 100, n 50, y 10 (i % 5 == 0 caught), r 20; A (0.90) bucket 1 with N 100, n 100, y 0, r 40.
    Under 0.95 and under no edge, both are bucket 0: N 200, n 150, y 10, r 60."""
    from routerscope.warehouse.queries.ppi import ppi_strata, ppi_strata_sets
    from routerscope.warehouse.sql import QueryWindow

    insert(warehouse, *designed_sample())
    window = QueryWindow(START, END)
    by_edge, by_high_edge, by_none = ppi_strata_sets(warehouse, window, [(0.8,), (0.95,), ()])
    assert by_edge[IC]["buckets"] == [0, 1]
    assert [s[:4] for s in by_edge[IC]["strata"]["mf"]] == [(100, 50, 10, 20), (100, 100, 0, 40)]
    for one in (by_high_edge, by_none):
        assert one[IC]["buckets"] == [0] and [s[:4] for s in one[IC]["strata"]["mf"]] == [(200, 150, 10, 60)]
        assert one[IC]["audit"] == by_edge[IC]["audit"] and one[IC]["audit"]["a_n"] == 60
    assert ppi_strata(warehouse, window, (0.8,)) == by_edge and ppi_strata_sets(warehouse, window, []) == []
