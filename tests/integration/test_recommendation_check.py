"""The threshold recommendation checked against the judge's audit (docs/metrics.md §6, "The recommendation checked
against the judge's audit"; §3d): a judge that accepts bad answers on purpose makes §6's recommendation move toward
the device; people's verdicts correct it, and the corrected estimate withholds the move. Numbers by hand, in a real
embedded warehouse through `compute` (what `routerscope metrics --json` prints) and `calibration`."""

from __future__ import annotations

import pytest

from routerscope.warehouse.analytics import ppi
from routerscope.warehouse.analytics.metrics import calibration, compute
from routerscope.warehouse.sql import QueryWindow
from tests.support.events import decision, label, quality_fallback
from tests.support.golden_day import END, START, at, eid, insert

pytestmark = pytest.mark.integration
IC = "intent_classify"


def lenient_judge_sample(
    audited: int = 20, audited_h: int | None = None, task_type: str = IC
) -> tuple[list[dict], list[dict]]:
    """Threshold 0.80 in force. H: 100 device-served at confidence 0.90, all good. L: 100 quality fallbacks at 0.70
    whose device answers are bad for i % 10 in (0, 1, 2): 30 of 100. The judge sees every event and accepts every
    answer (right on H, wrong on L's 30). People audit the first `audited` of each stratum (`audited_h` of H where
    given)."""
    events, labels = [], []
    for stratum, confidence, make in (("h", 0.90, decision), ("l", 0.70, quality_fallback)):
        for i in range(100):
            rid = f"{stratum}{i}"
            n = (0 if stratum == "h" else 100) + i
            events.append(
                make(
                    event_id=eid(7000 + n),
                    request_id=rid,
                    task_type=task_type,
                    event_time=at(1),
                    confidence=confidence,
                    threshold=0.80,
                )
            )
            labels.append(label(request_id=rid, source="offline_replay", device_acceptable=True, route_correct=True))
            if i < (audited if audited_h is None or stratum == "l" else audited_h):
                ok = stratum == "h" or i % 10 not in (0, 1, 2)
                labels.append(label(request_id=rid, source="human_review", device_acceptable=ok, route_correct=ok))
    return events, labels


def test_a_lenient_judge_moves_the_raw_recommendation_toward_the_device_and_the_corrected_estimate_withholds_it(
    warehouse,
):
    insert(warehouse, *lenient_judge_sample())
    result = compute(warehouse, START, END)
    cal = result["calibration"][IC]
    # §3c on the chosen labels (a person's first): L passes 94 of 100 (20 audited: 6 bad; 80 judged: all accepted),
    # H 100 of 100. At 0.70 (the evidence floor, the smallest labeled confidence) the device would serve both:
    # ½·0.94 + ½·1.0 = 0.97 >= 0.95, local pass rate at 0.70 = 0.94 >= 0.85 → the move 0.80 → 0.70, toward the device.
    assert cal["current_threshold"] == pytest.approx(0.80)
    assert cal["recommended_threshold_est"] == pytest.approx(0.70)
    assert cal["served_pass_est"]["rate"] == pytest.approx(0.97)
    # §3d over what 0.70 would serve, miss = not acceptable: L (judged fallbacks) N 100, n 100, Ŷ all 0, audited 20
    # with Y − Ŷ = 1 for 6 → mean 0.3, s² = (6 − 36/20)/19 = 0.221053; H N 100, n 100, Ŷ all 0, audited 20, all 0.
    # M = 0; Δ = ½·0.3 + ½·0 = 0.15 (the truth: 30 of 200); V = ¼·0.221053/20 = 0.00276316, half = 1.96·√V =
    # 0.103029 → [0.046971, 0.253029]. 0.15 > 1 − 0.95 = 0.05: withheld.
    check = cal["recommendation_check"]
    assert check["estimate"] == "missed_fallback_ppi" and check["threshold"] == pytest.approx(0.70)
    miss = check["served_miss"]
    assert miss["rate"] == pytest.approx(0.15)
    assert miss["ci"] == [pytest.approx(0.046971, abs=1e-5), pytest.approx(0.253029, abs=1e-5)]
    assert (miss["coverage"], miss["n_judged"], miss["n_human"]) == (1.0, 200, 40)
    assert check["withheld"] is True and cal["recommended_threshold_checked"] is None
    assert "missed_fallback_ppi" in check["reason"] and "15.0%" in check["reason"] and "5.0%" in check["reason"]
    # the audit: 40 with both verdicts, 34 agree → 85 % < 90 %: the warning goes with the recommendation
    assert check["judge_warning"] == "the judge agrees with people on 85% of 40 (below 90%)"
    # the dashboards' path (calibration alone) says the same
    alone = calibration(warehouse, QueryWindow(START, END), 0.95, 30)[IC]
    assert alone["recommendation_check"] == check and alone["recommended_threshold_checked"] is None


def test_an_unaudited_judge_leaves_the_recommendation_on_the_post_stratified_estimate_and_says_so(warehouse):
    insert(warehouse, *lenient_judge_sample(audited=10))
    cal = compute(warehouse, START, END)["calibration"][IC]
    # 20 human verdicts < 30: no §3d estimate. §3c: L passes 97 of 100 (10 audited: 3 bad), H 100 → 0.985 at 0.70
    check = cal["recommendation_check"]
    assert check["estimate"] == "missed_fallback_est" and check["withheld"] is False
    assert check["served_miss"]["rate"] == pytest.approx(0.015)
    assert cal["recommended_threshold_checked"] == pytest.approx(0.70)
    assert check["judge_warning"] == "the judge is not audited (20 of 30 human verdicts)"


def test_a_judge_people_agree_with_keeps_the_recommendation_and_names_the_corrected_estimate(warehouse):
    events, labels = lenient_judge_sample(audited_h=30)
    # the same world with an honest judge: it rejects exactly L's 30 bad answers
    for lb in labels:
        if lb["source"] == "offline_replay" and lb["request_id"].startswith("l") and int(lb["request_id"][1:]) % 10 < 3:
            lb["device_acceptable"] = lb["route_correct"] = False
    insert(warehouse, events, labels)
    cal = compute(warehouse, START, END)["calibration"][IC]
    # §3c: L passes 70 of 100 → ½·0.7 + ½·1.0 = 0.85 at 0.70; the next grid value, 0.75, serves H alone (1.0)
    assert cal["recommended_threshold_est"] == pytest.approx(0.75)
    check = cal["recommendation_check"]
    # §3d over what 0.75 serves: H alone, N 100, n 100, Ŷ all 0, 30 audits all 0 → every variance 0: Laplace,
    # p = 1/102 for the judged (V1 = p(1 − p)/100) and 1/32 for the audits (V2 = p(1 − p)/30); rate 0
    p1, p2 = 1 / 102, 1 / 32
    half = 1.96 * (p1 * (1 - p1) / 100 + p2 * (1 - p2) / 30) ** 0.5
    assert check["estimate"] == "missed_fallback_ppi" and check["served_miss"]["rate"] == 0.0
    assert check["served_miss"]["ci"] == [0.0, pytest.approx(half)]
    assert check["withheld"] is False and cal["recommended_threshold_checked"] == pytest.approx(0.75)
    assert check["judge_warning"] is None  # 50 audits, all agree


def test_the_fallbacks_hits_turn_into_misses_in_the_served_strata():
    """Pure: a judged fallback's hit is acceptable; over what a threshold serves the hit is a miss."""
    found = {
        "buckets": [-1, 2, 3],
        "strata": {
            "ff": [(5, 5, 5, 0, 0, 0), (10, 8, 6, 4, -1, 1), (0, 0, 0, 0, 0, 0)],
            "mf": [(0, 0, 0, 0, 0, 0), (3, 3, 1, 2, 1, 1), (20, 10, 2, 5, -2, 2)],
        },
    }
    assert ppi.served_miss_strata(found, 2) == [(13, 11, 3, 6, 2, 2), (20, 10, 2, 5, -2, 2)]
    assert ppi.served_miss_strata(found, 3) == [(20, 10, 2, 5, -2, 2)]


def test_a_task_type_the_judge_never_saw_reads_the_post_stratified_estimate_flipped_into_a_miss_share():
    """Pure: no §3d sums at all (nothing judged by the replay): §3c's pass estimate as a miss share, not withheld,
    and the judge said to be unaudited."""
    check = ppi.check_recommendation(None, 1, 0.7, 0.95, {"rate": 0.97, "ci": [0.9, 0.99], "coverage": 1.0})
    assert check["estimate"] == "missed_fallback_est" and check["withheld"] is False
    assert check["served_miss"]["rate"] == pytest.approx(0.03)
    assert check["served_miss"]["ci"] == [pytest.approx(0.01), pytest.approx(0.1)]
    assert check["judge_warning"] == "the judge is not audited (0 of 30 human verdicts)"
    empty = ppi.check_recommendation(None, 1, 0.7, 0.95, {"rate": None, "ci": None, "coverage": None})
    assert empty["served_miss"] == {"rate": None, "ci": None, "coverage": None}


def test_a_recommendation_at_either_end_of_the_grid_checks_exactly_what_it_would_serve(warehouse):
    """0.00 serves every event with a confidence (the 200 of the lenient sample: 0.15 missed, withheld); 1.00 serves
    none of them (no population: §3c's estimate is read, flipped, and nothing is withheld)."""
    from routerscope.warehouse.analytics.metrics import checked

    insert(warehouse, *lenient_judge_sample())
    served = {"rate": 1.0, "ci": [0.9, 1.0], "coverage": 1.0}
    found = {
        "low": {"recommended_threshold_est": 0.0, "served_pass_est": served},
        "high": {"recommended_threshold_est": 1.0, "served_pass_est": served},
    }
    edges = (0.0, 0.45, 0.65, 0.85, 1.0)
    low = checked(warehouse, QueryWindow(START, END), {IC: found["low"]}, 0.95, edges)[IC]
    assert low["recommendation_check"]["served_miss"]["rate"] == pytest.approx(0.15)
    assert low["recommendation_check"]["served_miss"]["n_judged"] == 200
    assert low["recommendation_check"]["withheld"] and low["recommended_threshold_checked"] is None
    high = checked(warehouse, QueryWindow(START, END), {IC: found["high"]}, 0.95, edges)[IC]
    assert high["recommendation_check"]["estimate"] == "missed_fallback_est"
    assert high["recommendation_check"]["served_miss"]["rate"] == 0.0
    assert high["recommended_threshold_checked"] == 1.0
