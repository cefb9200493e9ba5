"""The closed loop's statistics (docs/loop.md#statistics), golden numbers computed by hand from the formulas."""

from __future__ import annotations

import math
import random

import pytest

from routerscope.warehouse.analytics.loop import evaluate, rules
from routerscope.warehouse.analytics.loop.sequential import (
    ArmSums,
    Interval,
    MeanSums,
    RatioDifference,
    chi2_sf_1,
    one_sided_radius,
    radius,
    ratio_interval,
    rho_for,
    srm_pvalue,
    srm_sequential_p,
)


def test_the_normal_mixture_radius_by_hand():
    """Howard et al. (2021) eq. 14 on standardized sums: sqrt((t+ρ) ln((t+ρ)/(ρα²))) / t.
    t = 100, ρ = 10, α = 0.05: (t+ρ)/(ρα²) = 110 / 0.025 = 4400; ln 4400 = 8.38936; 110 · 8.38936 = 922.83;
    sqrt = 30.3781; / 100 = 0.303781."""
    assert radius(100, 10, 0.05) == pytest.approx(0.303781, abs=1e-6)
    assert radius(0, 10) == math.inf
    # narrower with more sessions, never zero: the price of looking at every session
    assert radius(10_000, 10) < radius(1_000, 10) < radius(100, 10)


def test_the_one_sided_normal_mixture_radius_by_hand():
    """t = 100, ρ = 10, α = 0.05: C = ln(1/(2α)) + ½ ln((t+ρ)/ρ) = 2.302585 + 1.198948 = 3.501533; z₀ = sqrt(2C) =
    2.646331, Φ(z₀) = 0.995931, z₁ = sqrt(2 (C + 0.004077)) = 2.647871, z₂ = 2.647864 (then fixed); radius =
    2.647864 · sqrt(110) / 100 = 0.277710 — narrower than the two-sided 0.303781, about the two-sided at 2α
    (0.277549), never below it (Φ ≤ 1)."""
    assert one_sided_radius(100, 10, 0.05) == pytest.approx(0.277710, abs=1e-6)
    assert one_sided_radius(0, 10) == math.inf
    for t, rho in ((4, 10), (100, 10), (16_000, 1361)):
        assert radius(t, rho, 0.10) <= one_sided_radius(t, rho, 0.05) < radius(t, rho, 0.05)
    d = RatioDifference()
    for arm, y, x in ((0, 1, 4), (0, 0, 2), (1, 2, 4), (1, 1, 2)):
        d.add(arm, y, x, 0.5)
    one = d.interval(rho=10, min_sessions=1, one_sided=True)
    assert one.high - one.estimate == pytest.approx(math.sqrt(2) / 9 * one_sided_radius(4, 10))


def test_rho_for_the_planned_size_by_hand():
    """ρ = t* / (−2 ln α + ln(1 − 2 ln α)): α = 0.05: 5.99146 + ln 6.99146 = 5.99146 + 1.94469 = 7.93615;
    100 / 7.93615 = 12.6006."""
    assert rho_for(100) == pytest.approx(12.6006, abs=1e-4)
    with pytest.raises(ValueError):
        rho_for(0)


def test_a_session_level_ratio_difference_by_hand():
    """Two sessions per arm, share 0.5 (every weight 2). Control (y, x): (1, 4), (0, 2); candidate (2, 4), (1, 2).
    R0 = (2·1 + 2·0) / (2·4 + 2·2) = 1/6; R1 = 6/12 = 1/2; Δ = 1/3. t = 4, x̄ = 12/4 = 3 in each arm.
    Control influences 2(1 − 4/6)/3 = 2/9 and 2(0 − 2/6)/3 = −2/9, candidate's 0 and 0: σ̂² = (8/81)/4 = 2/81,
    σ̂ = 0.157135. radius(4, 10) = sqrt(14 ln 560)/4 = 2.353071: half-width 0.369749."""
    d = RatioDifference()
    for arm, y, x in ((0, 1, 4), (0, 0, 2), (1, 2, 4), (1, 1, 2)):
        d.add(arm, y, x, 0.5)
    got = d.interval(rho=10, min_sessions=1)
    assert got.estimate == pytest.approx(1 / 3)
    assert got.sd == pytest.approx(math.sqrt(2) / 9)
    assert got.low == pytest.approx(1 / 3 - 0.369749, abs=1e-6)
    assert got.high == pytest.approx(1 / 3 + 0.369749, abs=1e-6)
    assert got.n == 4


def test_an_arm_without_a_denominator_is_unknown_never_zero():
    d = RatioDifference()
    d.add(0, 1, 4, 0.05)
    d.add(1, 0, 0, 0.05)  # a candidate session without a judged answer
    assert d.interval(10, min_sessions=1) == Interval(None, None, None, 2)


def test_one_candidate_session_shows_no_harm():
    """Found by the simulation: with a single candidate session its influence is exactly 0, σ̂ came from the
    control arm alone and a good candidate was rolled back after one session. Below 30 sessions per arm the
    interval is unknown."""
    d = RatioDifference()
    for i in range(500):
        d.add(0, 1 if i % 14 == 0 else 0, 13, 0.05)  # control: ~0.55 % missed per judged answer
    d.add(1, 3, 13, 0.05)  # one unlucky candidate session: 3 of 13
    assert not d.interval(rho_for(4000)).known
    assert d.interval(rho_for(4000), min_sessions=1).low > 0.01  # what the rule used to see: "harm"
    for _ in range(29):
        d.add(1, 0, 13, 0.05)
    assert d.interval(rho_for(4000)).known


def test_sums_merged_in_batches_equal_sums_added_one_by_one():
    rng = random.Random(3)
    one, batch = ArmSums(), ArmSums()
    parts = [ArmSums(), ArmSums()]
    for i in range(50):
        y, x, p = rng.randint(0, 3), rng.randint(1, 9), rng.choice((0.05, 0.1, 0.25))
        one.add(y, x, p)
        parts[i % 2].add(y, x, p)
    batch.merge(parts[0])
    batch.merge(parts[1])
    for name, value in one.to_dict().items():
        assert batch.to_dict()[name] == pytest.approx(value)
    assert ArmSums.from_dict(one.to_dict()) == one


def test_a_propensity_outside_the_unit_interval_is_refused():
    with pytest.raises(ValueError):
        ArmSums().add(1, 1, 0.0)
    with pytest.raises(ValueError):
        ArmSums().add(1, 1, 1.5)


def test_the_sample_ratio_checks_by_hand():
    """1,000 sessions at 5 %: 30 candidates against 50 expected. χ² = 20²/50 + 20²/950 = 8.42105, p = erfc(sqrt(χ²/2))
    = 0.003709. The always-valid check: S = −20, V = 1000 · 0.05 · 0.95 = 47.5, ρ = 10:
    ln M = ½ ln(10/57.5) + 400/115 = −0.874591 + 3.478261 = 2.603670; p = 1/M = 0.074002 — the price of looking
    at every session."""
    assert srm_pvalue(30, 970, 50.0) == pytest.approx(0.0037090, abs=1e-6)
    assert srm_sequential_p(30, 50.0, 47.5, 10) == pytest.approx(0.074002, abs=1e-5)
    assert srm_sequential_p(50, 50.0, 47.5, 10) == 1.0
    assert srm_pvalue(0, 0, 0.0) is None and srm_sequential_p(0, 0.0, 0.0, 10) is None
    assert chi2_sf_1(3.841459) == pytest.approx(0.05, abs=1e-6)


def test_each_one_sided_bound_holds_at_every_look_in_at_least_95_percent_of_runs():
    """The always-valid promise of each bound the rules read, on a null difference looked at after every 20
    sessions (200 runs): the upper bound ever below the truth (a false promotion's error) and the lower bound ever
    above it (a false rollback's), each in at most α of runs."""
    rng = random.Random(7)
    below = above = 0
    for _ in range(200):
        d = RatioDifference()
        low_seen = high_seen = False
        for _look in range(40):
            for _ in range(20):
                arm = 1 if rng.random() < 0.25 else 0
                x = rng.randint(5, 15)
                y = sum(rng.random() < 0.1 for _ in range(x))
                d.add(arm, y, x, 0.25)
            got = d.interval(rho_for(800), one_sided=True)
            if got.known:
                high_seen, low_seen = high_seen or got.high < 0, low_seen or got.low > 0
        below, above = below + high_seen, above + low_seen
    assert below <= 16 and above <= 16  # α = 0.05 of 200 runs is 10; a binomial 95 % band reaches ~16


def _look(**kw) -> rules.Look:
    base = dict(
        stage=0,
        stage_hours=30.0,
        total_hours=30.0,
        stage_candidate_sessions=300,
        candidate_sessions=300,
        control_sessions=5700,
        missed=Interval(0.002, -0.004, 0.008, 6000),
        guardrails={"cloud_calls_per_session": Interval(-0.3, -0.5, -0.1, 6000)},
        offload=Interval(0.80, 0.77, 0.83, 300),
        prediction=(0.78, 0.82),
        srm_p=0.5,
        balance=Interval(0.0, -0.01, 0.01, 6000),
    )
    base.update(kw)
    return rules.Look(**base)


POLICY = rules.LoopPolicy()


def test_the_rules_in_order():
    assert rules.decide(_look(), POLICY) == rules.Verdict("advance", "inside_margin")
    assert rules.decide(_look(stage=2), POLICY) == rules.Verdict("await_approval", "inside_margin")
    auto = rules.LoopPolicy(auto_promote=True)
    assert rules.decide(_look(stage=2), auto) == rules.Verdict("promote", "inside_margin")
    # harm beyond the margin rolls back, before any time or session minimum
    harm = _look(missed=Interval(0.03, 0.015, 0.045, 600), stage_hours=1.0, stage_candidate_sessions=20)
    assert rules.decide(harm, POLICY) == rules.Verdict("rollback", "harm")
    cloud = _look(guardrails={"cloud_calls_per_session": Interval(0.5, 0.3, 0.7, 600)})
    assert rules.decide(cloud, POLICY) == rules.Verdict("rollback", "guardrail:cloud_calls_per_session")
    # a failed sample-ratio check halts, even with harm shown: the arms cannot be trusted
    assert rules.decide(_look(srm_p=0.0005, missed=harm.missed), POLICY) == rules.Verdict("halt", "srm")
    assert rules.decide(_look(balance=Interval(0.05, 0.02, 0.08, 6000)), POLICY) == rules.Verdict("halt", "imbalance")
    assert rules.decide(_look(offload=Interval(0.9, 0.88, 0.92, 300)), POLICY) == rules.Verdict(
        "halt", "prediction_miss"
    )


def test_rounding_is_not_imbalance():
    """Identical confidences in both arms: the difference comes out as −3.7e-14 with a zero-width interval."""
    tiny = Interval(-3.7e-14, -3.7e-14, -3.7e-14, 4000)
    assert rules.decide(_look(balance=tiny), POLICY).action == "advance"
    assert rules.decide(_look(balance=Interval(-0.001, -0.002, -1e-6, 4000)), POLICY) == rules.Verdict(
        "halt", "imbalance"
    )


def test_never_promoted_on_inconclusive_no_data_or_too_little_time():
    inside = Interval(0.002, -0.004, 0.008, 6000)
    straddling = Interval(0.005, -0.002, 0.012, 6000)
    # the default, "ramp": a day since the canary began, 200 candidate sessions in this stage
    assert rules.decide(_look(stage_hours=2.0, total_hours=23.9), POLICY).action == "continue"
    assert rules.decide(_look(stage_hours=2.0), POLICY).action == "advance"
    assert rules.decide(_look(stage_candidate_sessions=199), POLICY).action == "continue"
    per_stage = rules.LoopPolicy(minimums="stage")
    assert rules.decide(_look(stage_hours=23.9), per_stage).action == "continue"
    per_canary = rules.LoopPolicy(minimums="canary")
    assert rules.decide(_look(stage_candidate_sessions=10), per_canary).action == "advance"
    assert rules.decide(_look(stage_candidate_sessions=10, candidate_sessions=199), per_canary).action == "continue"
    assert rules.decide(_look(missed=straddling), POLICY).action == "continue"
    assert rules.decide(_look(missed=straddling, total_hours=168.0), POLICY) == rules.Verdict("hold", "inconclusive")
    unknown = Interval(None, None, None, 0)
    assert rules.decide(_look(missed=unknown, candidate_sessions=0), POLICY) == rules.Verdict("continue", "no_data")
    assert rules.decide(_look(missed=unknown, candidate_sessions=0, total_hours=200.0), POLICY) == rules.Verdict(
        "hold", "no_data"
    )
    # no prediction (the evaluation could not state one): inside the margin is not enough to advance
    assert rules.decide(_look(missed=inside, prediction=None), POLICY).action == "continue"
    # the measured offload's point outside the prediction (its sequence still overlapping): no advance yet
    assert rules.decide(_look(offload=Interval(0.83, 0.80, 0.86, 300)), POLICY).action == "continue"


def test_mean_sums_and_one_arm_ratio():
    m = MeanSums()
    for v in (1.0, 2.0, 3.0):
        m.add(v)
    got = m.interval(10, min_sessions=1)
    # mean 2, population sd sqrt(2/3) = 0.816497, radius(3, 10) = sqrt(13 ln(13/0.025))/3 = sqrt(13 · 6.25383)/3
    assert got.estimate == 2.0
    assert got.high - 2.0 == pytest.approx(math.sqrt(2 / 3) * math.sqrt(13 * math.log(520)) / 3, abs=1e-9)
    arm = ArmSums()
    for y, x in ((8, 10), (9, 10)):
        arm.add(y, x, 1.0)
    got = ratio_interval(arm, 10, min_sessions=1)
    # R = 17/20 = 0.85; influences (8 − 8.5)/10 = −0.05 and +0.05: sd 0.05
    assert got.estimate == pytest.approx(0.85) and got.sd == pytest.approx(0.05)


def test_the_prediction_at_a_size_by_hand():
    """estimate 0.8, window se 0.01, per-session sd 0.2: at 400 sessions se = sqrt(0.0001 + 0.04/400) = 0.014142;
    half = 1.959964 · 0.014142 = 0.027718."""
    record = {"estimate": 0.8, "window_se": 0.01, "sd_per_session": 0.2, "factor": 1.0}
    low, high = evaluate.prediction_at(record, 400)
    assert low == pytest.approx(0.8 - 0.027718, abs=1e-6) and high == pytest.approx(0.8 + 0.027718, abs=1e-6)
    wide = evaluate.prediction_at({**record, "factor": 1.5}, 400)
    assert wide[1] - 0.8 == pytest.approx(1.5 * 0.027718, abs=1e-6)
    assert evaluate.prediction_at({**record, "window_se": None}, 400) is None


def test_the_session_bootstrap_resamples_sessions():
    """One session holds all the bad answers: a request-level bootstrap would call the rate precise; resampling
    sessions gives an interval that reaches both 0 and the one session's share."""
    sessions = [(0.0, 10.0)] * 9 + [(10.0, 10.0)]
    boot = evaluate.session_bootstrap(sessions, resamples=400, seed=1)
    assert boot["estimate"] == pytest.approx(0.1)
    assert boot["ci"][0] == 0.0 and boot["ci"][1] >= 0.2
    assert evaluate.session_bootstrap([], 10)["ci"] is None


def test_the_calibration_ledger_widens_by_the_measured_factor():
    """8 past predictions, 6 covered (75 % < 90 %): the factor is the 90th percentile (the 8th of 8 sorted, by
    ceil(0.9 · 8) = 8) of |measured − predicted| / half-width: misses at 2.0 and 3.0 half-widths → 3.0."""
    covered = [{"predicted": 0.5, "interval": [0.4, 0.6], "measured": 0.55}] * 6
    missed = [
        {"predicted": 0.5, "interval": [0.4, 0.6], "measured": 0.7},
        {"predicted": 0.5, "interval": [0.4, 0.6], "measured": 0.2},
    ]
    state = evaluate.ledger_factor(covered + missed)
    assert state["coverage"] == 0.75 and state["covered"] == 6 and state["n"] == 8
    assert state["factor"] == pytest.approx(3.0)
    assert evaluate.ledger_factor(covered)["factor"] == 1.0
    assert evaluate.ledger_factor([])["coverage"] is None
    # only the last 8 count: an old miss ages out
    assert evaluate.ledger_factor(missed + covered + covered[:2])["factor"] == 1.0
