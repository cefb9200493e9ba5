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
