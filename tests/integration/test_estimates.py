"""Population estimates (docs/metrics.md §3c): labels are never a random sample, so every labeled rate gets a
post-stratified estimate for its whole population. Hand-computed goldens in a real embedded warehouse, and held-out
data with a labeling design that is not random checked against an independent reference."""

from __future__ import annotations

import math
import random

import pytest

from routerscope.warehouse.analytics.metrics import compute
from tests.support.events import decision, label, quality_fallback
from tests.support.golden_day import END, START, at, eid, insert, timeout_fallback

pytestmark = pytest.mark.integration
IC = "intent_classify"


def fallbacks_with_labels(low_labeled: int, low_acceptable: int) -> tuple[list[dict], list[dict]]:
    """200 quality fallbacks of intent_classify: 100 at confidence 0.30 (bucket [0, 0.45)) and 100 at 0.60
    ([0.45, 0.65)). The mid band has 10 labeled, 5 acceptable; the low band `low_labeled`, `low_acceptable`."""
    events, labels = [], []
    for band, confidence, labeled, acceptable in (
        ("low", 0.30, low_labeled, low_acceptable),
        ("mid", 0.60, 10, 5),
    ):
        for i in range(100):
            rid = f"{band}{i}"
            n = (0 if band == "low" else 100) + i
            events.append(
                quality_fallback(
                    event_id=eid(1000 + n), request_id=rid, task_type=IC, event_time=at(1), confidence=confidence
                )
            )
            if i < labeled:
                labels.append(label(request_id=rid, source="offline_replay", device_acceptable=i < acceptable))
    return events, labels


@pytest.mark.parametrize(
    "low_labeled, low_acceptable, share, n_eff, ci",
    [
        # Labels spread evenly, 10 per band: low 1/10, mid 5/10. Labeled share (1 + 5)/20 = 0.30.
        # Estimate: N_low = N_mid = 100, both covered → ½·0.1 + ½·0.5 = 0.30 (the labeled share: labels fall evenly).
        # V = ¼·0.1·0.9/10·(1 − 10/100) + ¼·0.5·0.5/10·0.9 = 0.002025 + 0.005625 = 0.00765
        # n_eff = 0.3·0.7 / 0.00765 = 27.450980; Wilson(0.3 at 27.45): z² = 3.841459, centre (0.3 + 0.069969)/1.139939
        # = 0.324552, half 1.719359·√(0.007650 + 0.001274) = 0.162427 → [0.162125, 0.486979]
        (10, 1, 0.30, 27.450980, [0.162125, 0.486979]),
        # The replay labels the low band densely, same ground truth (5 of 50 acceptable, 0.1). Labeled share
        # (5 + 5)/60 = 0.1667 — it moved — while the estimate stays ½·0.1 + ½·0.5 = 0.30.
        # V = ¼·0.1·0.9/50·(1 − 50/100) + 0.005625 = 0.000225 + 0.005625 = 0.00585; n_eff = 0.21/0.00585 = 35.897436
        # Wilson(0.3 at 35.897): centre (0.3 + 0.053506)/1.107011 = 0.319333, half 1.770501·√(0.00585 + 0.000745)
        # = 0.143784 → [0.175549, 0.463118]
        (50, 5, 10 / 60, 35.897436, [0.175549, 0.463118]),
    ],
)
def test_finding2_dense_labels_in_one_stratum_move_the_labeled_share_not_the_estimate(
    warehouse, low_labeled, low_acceptable, share, n_eff, ci
):
    insert(warehouse, *fallbacks_with_labels(low_labeled, low_acceptable))
    result = compute(warehouse, START, END)
    for group in (result["overall"], result["by_task_type"][IC]):
        assert group["false_fallback_rate"] == pytest.approx(share)  # §3: what the labels say
        for est in (group["false_fallback_est"], group["false_fallback_by_type"]["quality_est"]):
            assert est["rate"] == pytest.approx(0.30)  # §3c: what holds for all 200 fallbacks
            assert est["n_eff"] == pytest.approx(n_eff, abs=1e-5)
            assert est["ci"] == [pytest.approx(ci[0], abs=1e-6), pytest.approx(ci[1], abs=1e-6)]
            assert est["coverage"] == 1.0
        assert group["missed_fallback_est"] == {"rate": None, "ci": None, "n_eff": None, "coverage": None}


def test_an_uncovered_stratum_lowers_coverage_and_leaves_the_rate_to_the_covered_ones(warehouse):
    # 100 fallbacks at 0.30 with 10 labeled (2 acceptable), 100 at 0.60 with none: coverage 100/200 = 0.5, rate
    # = the covered stratum's 0.2; V = 0.2·0.8/10·0.9 = 0.0144 → n_eff = 0.16/0.0144 = 11.111111
    events, labels = fallbacks_with_labels(10, 2)
    labels = [lb for lb in labels if lb["request_id"].startswith("low")]
    insert(warehouse, events, labels)
    est = compute(warehouse, START, END)["by_task_type"][IC]["false_fallback_est"]
    assert (est["rate"], est["coverage"]) == (pytest.approx(0.2), 0.5)
    assert est["n_eff"] == pytest.approx(11.111111, abs=1e-5)


def reference_estimate(rows: list[tuple[str, float | None, bool, bool | None]]) -> dict | None:
    """An independent reading of §3c: rows (task type, confidence, in the population, hit or None unlabeled)."""
    edges = (0.45, 0.65, 0.85)
    strata: dict[tuple, list] = {}
    for task, confidence, member, hit in rows:
        if not member:
            continue
        key = (task, -1 if confidence is None else sum(e <= confidence for e in edges))
        strata.setdefault(key, []).append(hit)
    total = sum(len(v) for v in strata.values())
    covered = {k: v for k, v in strata.items() if any(h is not None for h in v)}
    if not covered:
        return None
    n_cov = sum(len(v) for v in covered.values())
    rate, var, n_sum = 0.0, 0.0, 0
    for hits in covered.values():
        labeled = [h for h in hits if h is not None]
        w, p, n = len(hits) / n_cov, sum(labeled) / len(labeled), len(labeled)
        rate += w * p
        var += w * w * p * (1 - p) / n * (1 - n / len(hits))
        n_sum += n
    n_eff = rate * (1 - rate) / var if var > 0 else n_sum
    z2 = 1.959964**2
    centre = (rate + z2 / (2 * n_eff)) / (1 + z2 / n_eff)
    half = (1.959964 / (1 + z2 / n_eff)) * math.sqrt(rate * (1 - rate) / n_eff + z2 / (4 * n_eff * n_eff))
    return {
        "rate": rate,
        "n_eff": n_eff,
        "coverage": n_cov / total,
        "ci": [max(0, centre - half), min(1, centre + half)],
    }


def test_held_out_data_with_a_biased_labeling_design_matches_an_independent_reference(warehouse):
    """Three task types, confidences across every bucket (and null), acceptability rising with confidence; the
    labels favour low confidence heavily (as a replay of fallbacks does) and skip one band of one task type."""
    rng = random.Random(37)
    events, labels, rows = [], [], []
    for n in range(900):
        task = ("intent_classify", "slot_extract", "short_reply")[n % 3]
        confidence = None if rng.random() < 0.08 else min(0.999, round(rng.random(), 3))
        rid = f"h{n}"
        fields = dict(event_id=eid(5000 + n), request_id=rid, task_type=task, event_time=at(2), confidence=confidence)
        if confidence is None:  # no device answer: a timeout (the null-confidence stratum)
            events.append(timeout_fallback(**{k: v for k, v in fields.items() if k != "confidence"}))
            fb, served = "timeout", False
        elif rng.random() < 0.45:  # a threshold of 1.0 turns any answer down
            events.append(quality_fallback(threshold=1.0, **fields))
            fb, served = "quality", False
        else:
            events.append(decision(threshold=0.0, **fields))
            fb, served = None, True
        good = rng.random() < (0.3 if confidence is None else 0.1 + 0.85 * confidence)
        p_label = 0.05 if confidence is None else (0.9 if confidence < 0.45 else 0.3 if confidence < 0.85 else 0.04)
        if task == "slot_extract" and confidence is not None and 0.65 <= confidence < 0.85:
            p_label = 0.0  # a band nobody labels: coverage below 1
        labeled = rng.random() < p_label
        if labeled:
            labels.append(label(request_id=rid, source="human_review", device_acceptable=good))
        rows.append((task, confidence, fb, served, good if labeled else None))
    insert(warehouse, events, labels)
    result = compute(warehouse, START, END)

    def check(est, expected):
        if expected is None:
            assert est == {"rate": None, "ci": None, "n_eff": None, "coverage": None}
            return
        assert est["rate"] == pytest.approx(expected["rate"], abs=1e-9)
        assert est["n_eff"] == pytest.approx(expected["n_eff"], rel=1e-9)
        assert est["coverage"] == pytest.approx(expected["coverage"], abs=1e-12)
        assert est["ci"] == [pytest.approx(v, abs=1e-9) for v in expected["ci"]]

    for group, tasks in [
        (result["overall"], None),
        *[(result["by_task_type"][t], {t}) for t in result["by_task_type"]],
    ]:
        mine = [r for r in rows if tasks is None or r[0] in tasks]
        ff = [(t, c, fb is not None, None if h is None else h) for t, c, fb, _, h in mine]
        qf = [(t, c, fb == "quality", h) for t, c, fb, _, h in mine]
        mf = [(t, c, served, None if h is None else not h) for t, c, _, served, h in mine]
        check(group["false_fallback_est"], reference_estimate(ff))
        check(group["false_fallback_by_type"]["quality_est"], reference_estimate(qf))
        check(group["missed_fallback_est"], reference_estimate(mf))
    assert result["by_task_type"]["slot_extract"]["missed_fallback_est"]["coverage"] < 1  # the unlabeled band
    overall = result["overall"]  # the design is biased enough to matter: the labeled share misleads
    assert abs(overall["missed_fallback_est"]["rate"] - overall["missed_fallback_rate"]) > 0.05


def test_the_threshold_recommendation_reads_the_estimate_of_what_a_threshold_serves(warehouse):
    """Issue 37 on the tuning page's recommendation: intent_classify, threshold 0.70, 100 requests at confidence
    0.60 (quality fallbacks; the replay labeled 60, 54 acceptable: 0.9) and 100 at 0.90 (served; 10 labeled, all
    acceptable). Target 0.95, min_n 30, local floor 0.85; evidence floor 0.60.
    At c = 0.60 the labeled share is (54 + 10)/70 = 0.914 < 0.95, and above it 10 labels < 30: §6 recommends none.
    The estimate of what 0.60 serves: ½·0.9 + ½·1.0 = 0.95 ≥ 0.95, local pass rate at 0.60 = 0.9 ≥ 0.85 → 0.60.
    V = ¼·0.9·0.1/60·(1 − 60/100) = 0.00015 (the top band has no variance), n_eff = 0.95·0.05/0.00015 = 316.667;
    Wilson(0.95 at 316.667): centre (0.95 + 0.006065)/1.012131 = 0.944607, half 1.936474·√(0.00015 + 0.0000096)
    = 0.024462 → [0.920145, 0.969069]. The move 0.70 → 0.60 crosses [0.60, 0.70): 60 labeled, 0.9 passed."""
    from routerscope.warehouse.analytics.metrics import calibration
    from routerscope.warehouse.sql import QueryWindow

    events, labels = [], []
    for band, confidence, labeled, acceptable in (("mid", 0.60, 60, 54), ("top", 0.90, 10, 10)):
        for i in range(100):
            rid, n = f"{band}{i}", (0 if band == "mid" else 100) + i
            make = quality_fallback if band == "mid" else decision
            events.append(make(event_id=eid(3000 + n), request_id=rid, task_type=IC, event_time=at(1),
                               confidence=confidence, threshold=0.7))  # fmt: skip
            if i < labeled:
                labels.append(label(request_id=rid, source="offline_replay", device_acceptable=i < acceptable))
    insert(warehouse, events, labels)
    cal = calibration(warehouse, QueryWindow(START, END), target=0.95, min_n=30)[IC]
    assert (cal["current_threshold"], cal["evidence_floor"]) == (0.7, 0.6)
    assert cal["recommended_threshold"] is None  # §6, the labeled share: 0.914 at 0.60, too few labels above
    assert cal["recommended_threshold_est"] == 0.6
    est = cal["served_pass_est"]
    assert est["rate"] == pytest.approx(0.95) and est["coverage"] == 1.0
    assert est["n_eff"] == pytest.approx(316.666667)
    assert est["ci"] == [pytest.approx(0.920145, abs=1e-6), pytest.approx(0.969069, abs=1e-6)]
    band = cal["threshold_change_est"]["band"]
    assert (cal["threshold_change_est"]["to"], band["low"], band["high"], band["n"]) == (0.6, 0.6, 0.7, 60)
    assert band["pass_rate"] == pytest.approx(0.9)
