"""The what-if's arithmetic on counts (routerscope/warehouse/analytics/whatif.py), without a warehouse: the cost of new
fallbacks and the moved requests' shares (docs/metrics.md §14)."""

from __future__ import annotations

import pytest

from routerscope.warehouse.analytics import whatif

ROW = {
    "requests": 4,
    "device_entered": 4,
    "fallbacks": 2,
    "quality_fallbacks": 2,
    "device_served": 2,
    "false_fallbacks": 0,
    "false_fallback_labeled": 0,
    "missed_fallbacks": 0,
    "missed_fallback_labeled": 0,
    "calls": 2,
    "cost_recorded": 0.0,
    "cost_reported": 4,
    "added_all_cloud": 0.0,
    "added_unpriced": 2,
    "removed_cost": 0.0,
}


def test_a_new_fallback_with_no_price_at_all_leaves_the_cost_unknown_not_zero():
    """Costs are reported (all 0: nothing went to the cloud), two requests move to the cloud without an
    all-cloud cost, and no event with a cloud call gives a mean price: the candidate's cost is null."""
    assert whatif.block(ROW, mean_cloud_cost=None)["cost_usd"] is None
    assert whatif.block(ROW, mean_cloud_cost=0.002)["cost_usd"] == pytest.approx(2 * 0.002)


def test_no_reported_cost_stays_null_as_in_the_metrics():
    assert whatif.block({**ROW, "cost_reported": 0, "added_unpriced": 0}, mean_cloud_cost=0.002)["cost_usd"] is None


def test_moved_adds_both_ways_and_keeps_each_way():
    """3 to the cloud (2 labeled, 2 passed), 1 to the device (1 labeled, 0 passed): together 4, 3 labeled,
    2 passed → 2/3, coverage 3/4; the device way alone 0/1, coverage 1."""
    m = whatif.moved(
        {
            "to_cloud": 3,
            "to_cloud_labeled": 2,
            "to_cloud_passed": 2,
            "to_device": 1,
            "to_device_labeled": 1,
            "to_device_passed": 0,
        }
    )
    assert (m["n"], m["labeled"], m["pass_rate"], m["label_coverage"]) == (4, 3, pytest.approx(2 / 3), 0.75)
    assert (m["to_device"]["pass_rate"], m["to_device"]["label_coverage"]) == (0.0, 1.0)
    assert m["to_cloud"]["ci"] == pytest.approx([0.342380, 1.0], abs=1e-6)  # Wilson(2, 2), as in the metrics tests


def _result(missed: int, labeled: int) -> dict:
    """A what-if result for one task type whose candidate has `missed` of `labeled` device-served labels bad."""
    from routerscope.warehouse.analytics import stats

    candidate = {
        "missed_fallback_rate": stats.ratio(missed, labeled),
        "missed_fallback_labeled": labeled,
        "missed_fallback_ci": stats.wilson(missed, labeled),
    }
    return {"by_task_type": {"short_reply": {"candidate": candidate, "moved": {}}}}


def test_the_pre_push_gate_judges_the_interval_not_the_point():
    """Issue 38: the demo's bad 0.93 push passed `missed_fallback_rate>0.05` on 6 labels, none bad: rate 0, but
    Wilson(0, 6) reaches z²/(6 + z²) = 3.841459 / 9.841459 = 0.390334."""
    few = _result(0, 6)
    assert few["by_task_type"]["short_reply"]["candidate"]["missed_fallback_ci"][1] == pytest.approx(0.390334, abs=1e-6)
    point, high = whatif.parse_gate("missed_fallback_rate>0.05"), whatif.parse_gate("missed_fallback_rate.high>0.05")
    # 6 labels < --min-labeled 30: neither condition is judged, and the gate says why (exit 4)
    assert whatif.gate(few, [point, high]) == []
    assert whatif.unjudged(few, [high]) == [
        "short_reply: missed_fallback_rate.high rests on 6 labels (< --min-labeled 30)"
    ]
    # with the minimum lowered to 6 the upper end refuses the push (exit 1), the point estimate would not have
    assert whatif.gate(few, [point, high], 6) == ["short_reply: missed_fallback_rate.high 0.390334 > 0.05"]
    # a calm window with enough labels: 0 of 200 bad → high 3.841459 / 203.841459 = 0.018845 ≤ 0.05 → passes
    calm = _result(0, 200)
    assert whatif.gate(calm, [high]) == [] and whatif.unjudged(calm, [high]) == []
    # 12 of 200 bad (6 %): Wilson [0.034652, 0.101932]: the high end refuses, the low end would not
    bad = _result(12, 200)
    low = whatif.parse_gate("missed_fallback_rate.low>0.05")
    assert whatif.gate(bad, [high, low]) == ["short_reply: missed_fallback_rate.high 0.101932 > 0.05"]


def test_the_side_by_side_rows_group_their_counts_in_thousands():
    """The table `routerscope whatif` prints and the tuning page shows: counts read as numbers a person reads
    (16,909, not 16909), rates and costs as before."""
    block = {
        "fallback_rate": 0.387,
        "fallbacks": 6767,
        "false_fallback_rate": 0.576,
        "false_fallback_ci": [0.556, 0.597],
        "false_fallback_labeled": 2177,
        "missed_fallback_rate": 0.13,
        "missed_fallback_ci": [0.123, 0.137],
        "missed_fallback_labeled": 9763,
        "false_fallback_est": {"rate": None, "ci": None, "coverage": None},
        "missed_fallback_est": {"rate": None, "ci": None, "coverage": None},
        "false_fallback_ppi": {"rate": 0.2, "ci": [0.0, 0.399], "n_judged": 1746, "n_human": 91},
        "missed_fallback_ppi": None,
        "cloud_calls": 7657,
        "cost_usd": 0.3293,
    }
    cells = {label: cell(block) for label, cell in whatif.ROWS}
    assert cells["fallback rate (of device-entered)"] == "38.7% (6,767)"
    assert cells["false fallbacks (quality)"].endswith(" of 2,177")
    assert cells["missed fallbacks"].endswith(" of 9,763")
    assert cells["false fallbacks, corrected (§3d)"].endswith("judged 1,746, human 91")
    assert cells["missed fallbacks, corrected (§3d)"] == "— (judge not audited)"
    assert cells["cloud calls"] == "7,657"
