"""docs/metrics.md §3d: prediction-powered estimates (the judge's verdicts corrected by people's) and the judge's
audit. Pure functions of the sums `routerscope.warehouse.queries.ppi` reads, plus `ppi_estimates`, the one call a
caller outside the metrics (the closed loop, a canary's promotion) needs.

Interpretations (docs/metrics.md §3d, "Interpretations"):
* a stratum "holding one value" is one with a single observation of that kind (its sample variance is undefined);
  it borrows the sample variance of that kind over the whole block (all strata of the group and measure);
* the block's population must hold at least `MIN_AUDITED` audited events, else the estimate is null and the
  caller reads §3c's `_est` with the warning `UNAUDITED`;
* where every stratum's sample variance of both kinds is 0 the interval would be a point: each 0 is then taken as
  Laplace's p(1 − p), p = 1/(count + 2) (`_not_certain`), so agreement seen on a sample never reads as certainty;
* a judge is *trusted* where its audit has `n_human >= MIN_AUDITED` and `agreement >= MIN_AGREEMENT`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from routerscope.warehouse.analytics import stats
from routerscope.warehouse.queries import labels as label_queries
from routerscope.warehouse.queries import ppi as ppi_queries
from routerscope.warehouse.sql import QueryWindow

MIN_AUDITED = 30  # audited events a block's population needs before its PPI estimate is given
MIN_AGREEMENT = 0.9  # below this agreement with people, a task type's judge is flagged wherever its estimates appear
Z = 1.96
UNAUDITED = "the judge is not audited"
EMPTY_PPI = None
MEASURE_KEYS = {"ff": "false_fallback_ppi", "mf": "missed_fallback_ppi", "ra": "route_accuracy_ppi"}
FALLBACK_KEYS = {"ff": "false_fallback_est", "mf": "missed_fallback_est", "ra": "route_accuracy_est"}

Stratum = tuple[int, int, int, int, int, int]  # (N_h, n_h, Σ Ŷ, r_h, Σ (Y − Ŷ), Σ (Y − Ŷ)²)


def _var(total: float, squares: float, count: int) -> float | None:
    """Sample variance (divisor count − 1) from a sum and a sum of squares; None below 2 observations."""
    if count < 2:
        return None
    return max(0.0, (squares - total * total / count) / (count - 1))


def _not_certain(s2: float, count: int) -> float:
    """Where every value of both kinds is the same (the judge never hits, 30 audits that all agree) the interval
    would be a point, a certainty no sample gives: each stratum's variance of 0 is then taken as that of a share
    with one value of each kind added (Laplace), p(1 − p) with p = 1/(count + 2) (docs/metrics.md §3d,
    "Interpretations")."""
    if s2 > 0:
        return s2
    p = 1.0 / (count + 2)
    return p * (1.0 - p)


def ppi(strata: Sequence[Stratum], min_audited: int = MIN_AUDITED) -> dict[str, Any] | None:
    """§3d's estimate of one block from its strata (Ŷ binary, so Σ Ŷ² = Σ Ŷ): `{rate, ci, coverage, n_judged,
    n_human}`, or None when nothing is judged or the population holds fewer than `min_audited` audited events.

    M = Σ_cov (N_h/N_cov)·m_h over strata with n_h ≥ 1; Δ = Σ_{r_h ≥ 1} (N_h/N_r)·mean_h(Y − Ŷ); rate =
    clip(M + Δ); V = Σ_cov (N_h/N_cov)²·s²_h(Ŷ)/n_h + Σ_r (N_h/N_r)²·s²_h(Y − Ŷ)/r_h; ci = clip(rate ± 1.96·√V)."""
    population = sum(s[0] for s in strata)
    covered = [s for s in strata if s[1] >= 1]
    rectified = [s for s in strata if s[3] >= 1]
    n_human = sum(s[3] for s in strata)
    if not population or not covered or n_human < min_audited:
        return EMPTY_PPI
    n_cov = sum(s[0] for s in covered)
    n_r = sum(s[0] for s in rectified)
    block_y = _var(sum(s[2] for s in covered), sum(s[2] for s in covered), sum(s[1] for s in covered)) or 0.0
    block_d = _var(sum(s[4] for s in rectified), sum(s[5] for s in rectified), n_human) or 0.0
    judged = sum(big / n_cov * (y / n) for big, n, y, *_ in covered)
    correction = sum(big / n_r * (d / r) for big, _, _, r, d, _ in rectified) if n_r else 0.0
    variance = 0.0
    for floor in (False, True):  # a point interval (every value of both kinds the same) claims certainty: floored
        for big, n, y, *_ in covered:
            s2 = _var(y, y, n)
            s2 = block_y if s2 is None else s2
            variance += (big / n_cov) ** 2 * (_not_certain(s2, n) if floor else s2) / n
        for big, _, _, r, d, d2 in rectified:
            s2 = _var(d, d2, r)
            s2 = block_d if s2 is None else s2
            variance += (big / n_r) ** 2 * (_not_certain(s2, r) if floor else s2) / r
        if variance > 0:
            break
    rate = min(1.0, max(0.0, judged + correction))
    half = Z * math.sqrt(variance)
    return {
        "rate": rate,
        "ci": [max(0.0, rate - half), min(1.0, rate + half)],
        "coverage": n_cov / population,
        "n_judged": sum(s[1] for s in covered),
        "n_human": n_human,
    }


def uncorrected(strata: Sequence[Stratum]) -> float | None:
    """The judge part M alone (what the estimate would say if the judge were right): for contrast and tests."""
    covered = [s for s in strata if s[1] >= 1]
    n_cov = sum(s[0] for s in covered)
    return sum(big / n_cov * (y / n) for big, n, y, *_ in covered) if n_cov else None


def judge_agreement(audit: Mapping[str, int]) -> dict[str, Any]:
    """§3d's audit of the judge over events with both a judge and a human verdict: `{agreement, ci, n_human,
    accept_bad, reject_good}` (agreement with its Wilson interval; accept_bad over the human-unacceptable,
    reject_good over the human-acceptable; null where a denominator is 0)."""
    n = int(audit.get("a_n", 0))
    return {
        "agreement": stats.ratio(audit.get("a_agree", 0), n),
        "ci": stats.wilson(int(audit.get("a_agree", 0)), n),
        "n_human": n,
        "accept_bad": stats.ratio(audit.get("a_accept_bad", 0), audit.get("a_bad", 0)),
        "reject_good": stats.ratio(audit.get("a_reject_good", 0), audit.get("a_good", 0)),
    }


def judge_warning(agreement: Mapping[str, Any], min_audited: int = MIN_AUDITED) -> str | None:
    """What a page or a decision must say beside a task type's estimates: unaudited, or below `MIN_AGREEMENT`;
    None for a judge people have checked and found in agreement."""
    n = agreement.get("n_human") or 0
    if n < min_audited:
        return f"{UNAUDITED} ({n} of {min_audited} human verdicts)"
    if agreement["agreement"] is not None and agreement["agreement"] < MIN_AGREEMENT:
        return f"the judge agrees with people on {agreement['agreement']:.0%} of {n} (below {MIN_AGREEMENT:.0%})"
    return None


def merged(by_task: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The overall block: every task type's strata side by side, the audits summed."""
    strata = {m: [s for per in by_task.values() for s in per["strata"][m]] for m in MEASURE_KEYS}
    audit: dict[str, int] = {}
    for per in by_task.values():
        for k, v in per["audit"].items():
            audit[k] = audit.get(k, 0) + v
    return {"strata": strata, "audit": audit}


def block(found: Mapping[str, Any] | None) -> dict[str, Any]:
    """The §3d keys of one group (overall or a task type) from its sums: the three `_ppi` estimates,
    `judge_agreement` and `judge_warning`."""
    if not found:
        return {**dict.fromkeys(MEASURE_KEYS.values()), "judge_agreement": judge_agreement({}), "judge_warning": None}
    agreement = judge_agreement(found["audit"])
    out: dict[str, Any] = {key: ppi(found["strata"][m]) for m, key in MEASURE_KEYS.items()}
    out["judge_agreement"] = agreement
    out["judge_warning"] = judge_warning(agreement)
    return out


def preferred(group: Mapping[str, Any], measure: str) -> tuple[str, dict[str, Any] | None]:
    """The estimate a decision reads for `measure` (`ff`, `mf`, `ra`): (`missed_fallback_ppi`, its estimate) where
    §3d's exists, else (`missed_fallback_est`, §3c's). The key goes with the decision, so it says which it read."""
    key = MEASURE_KEYS[measure]
    if group.get(key):
        return key, group[key]
    return FALLBACK_KEYS[measure], group.get(FALLBACK_KEYS[measure])


def ppi_estimates(client, start: datetime, end: datetime, from_window: bool = False) -> dict[str, Any]:
    """§3d for the window [start, end): `{"overall": block, "by_task_type": {task_type: block}}`, each block
    `{false_fallback_ppi, missed_fallback_ppi, route_accuracy_ppi, judge_agreement, judge_warning}` — an estimate
    `{rate, ci, coverage, n_judged, n_human}` or None (fewer than `MIN_AUDITED` audited events: read §3c's `_est`,
    `preferred` does). Strata: task type × §6's confidence buckets. One query over the warehouse (`from_window`: over
    the materialized window, `decisions.materialized_window`, open on `client`)."""
    window, edges = QueryWindow(start, end), label_queries.DEFAULT_EDGES[1:-1]
    found = ppi_queries.ppi_strata_sets(client, window, [edges], from_window=from_window)[0]
    return {"overall": block(merged(found) if found else None), "by_task_type": {t: block(v) for t, v in found.items()}}


RECOMMENDATION_KEYS = {True: MEASURE_KEYS["mf"], False: FALLBACK_KEYS["mf"]}


def served_miss_strata(found: Mapping[str, Any], first_bucket: int) -> list[Stratum]:
    """The miss strata of what a threshold would serve: every bucket from `first_bucket` up (never the null
    confidence's), the device-served events (`mf`, hit = not acceptable) and the judged fallbacks (`ff`, whose hit
    is acceptable, turned into a miss: y → n − y, each correction Y − Ŷ → −(Y − Ŷ)) side by side in one stratum."""
    out: list[Stratum] = []
    for bucket, f, m in zip(found["buckets"], found["strata"]["ff"], found["strata"]["mf"]):
        if bucket < first_bucket or bucket < 0:
            continue
        out.append((f[0] + m[0], f[1] + m[1], (f[1] - f[2]) + m[2], f[3] + m[3], m[4] - f[4], f[5] + m[5]))
    return out


def check_recommendation(
    found: Mapping[str, Any] | None,
    first_bucket: int,
    threshold: float,
    target: float,
    served_pass_est: Mapping[str, Any],
) -> dict[str, Any]:
    """docs/metrics.md §6, "The recommendation checked against the judge's audit": §3d's missed-fallback estimate
    over what `threshold` would serve (`found`: one task type's `ppi_strata` whose edges include the threshold,
    `first_bucket` the bucket that starts at it) where it exists, else §3c's (`served_pass_est` turned into a miss
    share). `{threshold, estimate, served_miss, withheld, reason, judge_warning}`: withheld when the corrected
    rate is above 1 − target."""
    agreement = judge_agreement(found["audit"] if found else {})
    corrected = ppi(served_miss_strata(found, first_bucket)) if found else None
    allowed = 1.0 - target
    out: dict[str, Any] = {
        "threshold": threshold,
        "estimate": RECOMMENDATION_KEYS[corrected is not None],
        "served_miss": corrected,
        "withheld": False,
        "reason": None,
        "judge_warning": judge_warning(agreement),
    }
    if corrected is None:
        rate, ci = served_pass_est.get("rate"), served_pass_est.get("ci")
        out["served_miss"] = {
            "rate": None if rate is None else 1.0 - rate,
            "ci": None if ci is None else [1.0 - ci[1], 1.0 - ci[0]],
            "coverage": served_pass_est.get("coverage"),
        }
        return out
    if corrected["rate"] > allowed + 1e-12:
        low, high = corrected["ci"]
        out["withheld"] = True
        out["reason"] = (
            f"people's verdicts correct the judge: what {threshold:.2f} would serve misses an estimated "
            f"{corrected['rate']:.1%} [{low:.1%}, {high:.1%}] (missed_fallback_ppi, {corrected['n_human']} human "
            f"verdicts), above the {allowed:.1%} the target {target:g} allows"
        )
    return out
