"""docs/metrics.md §3d's arithmetic by hand: the judge part, the rectifier, a stratum with one observation borrowing
its block's variance, clipping, the 30-audited floor and the audit's shares."""

from __future__ import annotations

import math

import pytest

from routerscope.warehouse.analytics import ppi


def test_a_stratum_with_one_observation_borrows_the_blocks_sample_variance():
    # A: N 50, judged 1 (hit) — one value; B: N 50, judged 4 with 2 hits. Block Ŷ: 5 values, 3 hits →
    # s² = (3 − 9/5)/4 = 0.3. Audited: A 10 (Σd 1, Σd² 1), B 30 (Σd −3, Σd² 3).
    strata = [(50, 1, 1, 10, 1, 1), (50, 4, 2, 30, -3, 3)]
    est = ppi.ppi(strata)
    # M = ½·1 + ½·0.5 = 0.75; Δ = ½·0.1 + ½·(−0.1) = 0 → 0.75
    # V = ¼·0.3/1 (A borrows) + ¼·(2 − 4/4)/3/4 + ¼·(1 − 1/10)/9/10 + ¼·(3 − 9/30)/29/30
    v = 0.25 * 0.3 + 0.25 * (1 / 3) / 4 + 0.25 * 0.1 / 10 + 0.25 * (2.7 / 29) / 30
    assert est["rate"] == pytest.approx(0.75)
    assert est["ci"] == [pytest.approx(0.75 - 1.96 * math.sqrt(v)), pytest.approx(min(1.0, 0.75 + 1.96 * math.sqrt(v)))]
    assert (est["n_judged"], est["n_human"], est["coverage"]) == (5, 40, 1.0)


def test_the_rate_and_its_interval_are_clipped_and_an_uncovered_stratum_lowers_coverage():
    # judged hits 1 of 10 in A; people correct down by 0.5 on 30: M 0.1 + Δ −0.5 → clipped to 0
    est = ppi.ppi([(100, 10, 1, 30, -15, 15), (100, 0, 0, 0, 0, 0)])
    assert est["rate"] == 0.0 and est["ci"][0] == 0.0 and est["coverage"] == 0.5


def test_fewer_than_30_audited_events_give_no_estimate():
    assert ppi.ppi([(100, 100, 10, 29, 0, 0)]) is None
    assert ppi.ppi([(100, 0, 0, 30, 0, 0)]) is None  # nothing judged: no judge part
    assert ppi.ppi([]) is None


def test_the_audit_and_its_warning():
    audit = ppi.judge_agreement(
        {"a_n": 40, "a_agree": 34, "a_bad": 10, "a_accept_bad": 5, "a_good": 30, "a_reject_good": 1}
    )
    assert (audit["agreement"], audit["accept_bad"], audit["reject_good"], audit["n_human"]) == (0.85, 0.5, 1 / 30, 40)
    assert ppi.judge_warning(audit) == "the judge agrees with people on 85% of 40 (below 90%)"
    assert ppi.judge_warning({**audit, "agreement": 0.95}) is None
    assert ppi.judge_warning(ppi.judge_agreement({})) == "the judge is not audited (0 of 30 human verdicts)"


def test_a_decision_names_the_estimate_it_read():
    group = {"missed_fallback_ppi": None, "missed_fallback_est": {"rate": 0.1}}
    assert ppi.preferred(group, "mf") == ("missed_fallback_est", {"rate": 0.1})
    group["missed_fallback_ppi"] = {"rate": 0.2}
    assert ppi.preferred(group, "mf") == ("missed_fallback_ppi", {"rate": 0.2})


def test_a_block_of_identical_values_gets_an_interval_not_a_point():
    """30 judged events, none a hit, all 30 audited and agreeing: the sample variances are all 0 and the formula's
    interval would be [0, 0], a certainty 30 audits cannot give. Each stratum's 0 is taken as Laplace's
    p(1 − p), p = 1/(30 + 2) = 1/32: V = 2 · (31/1024)/30 → half = 1.96·√V = 0.088052."""
    est = ppi.ppi([(30, 30, 0, 30, 0, 0)])
    assert est["rate"] == 0.0
    assert est["ci"] == [0.0, pytest.approx(1.96 * math.sqrt(2 * (31 / 1024) / 30), abs=1e-9)]
    assert est["ci"][1] == pytest.approx(0.088052, abs=1e-6)
    # two strata each constant (one all hits, one none), the audits all agreeing: the same, never a point
    two = ppi.ppi([(1000, 500, 0, 30, 0, 0), (1000, 500, 500, 30, 0, 0)])
    assert two["ci"][0] < two["rate"] == 0.5 < two["ci"][1]


@pytest.mark.parametrize(
    "strata",
    [
        [(30, 30, 30, 30, 0, 0)],  # π = 1: everything judged and audited
        [(10**6, 1, 1, 1, 0, 0), (40, 40, 20, 29, 2, 4)],  # π tiny: one judged event in a huge stratum
        [(100, 100, 50, 0, 0, 0)],  # judge labels only
        [(100, 0, 0, 0, 0, 0)],  # nothing judged
        [(10, 1, 1, 1, -1, 1)] * 30,  # thirty strata of one audited event each
        [],
    ],
)
def test_edge_blocks_give_a_finite_estimate_or_none_never_nan(strata):
    import json

    est = ppi.ppi(strata)
    json.dumps(est, allow_nan=False)  # raises on NaN or infinity
    if est is not None:
        assert 0.0 <= est["ci"][0] <= est["rate"] <= est["ci"][1] <= 1.0
        assert est["ci"][1] > est["ci"][0]  # evidence never reads as certainty
    assert ppi.judge_warning(ppi.judge_agreement({})) is not None  # no audit: said, never a pass
