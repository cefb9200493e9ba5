"""The statistics of docs/metrics.md, defined once: Wilson interval, two-proportion z, PSI, quantiles.

Pure functions of counts; the warehouse queries produce the counts. Each returns None where
docs/metrics.md says the value is null (an empty denominator, a degenerate pooled share)."""

from __future__ import annotations

import math
from collections.abc import Sequence

Z95 = 1.959964  # docs/metrics.md §3: Wilson score interval at 95 %
PSI_FLOOR = 1e-4  # docs/metrics.md §5: each share floored before the logarithm
DRIFT_Z = 3.0
DRIFT_PSI = 0.1


def ratio(numerator: float, denominator: float) -> float | None:
    """numerator / denominator, or None for an empty denominator (never 0)."""
    return None if not denominator else numerator / denominator


def wilson(successes: int, n: int, z: float = Z95) -> list[float] | None:
    """Wilson score interval [low, high] for successes out of n; None when n = 0."""
    if n <= 0:
        return None
    return wilson_rate(successes / n, n, z)


def wilson_rate(p: float, n: float, z: float = Z95) -> list[float] | None:
    """The Wilson interval of a share `p` at a sample size `n` that need not be whole (an effective n,
    docs/metrics.md §3c); None when n <= 0."""
    if n <= 0:
        return None
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = (z / (1 + z2 / n)) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return [max(0.0, centre - half), min(1.0, centre + half)]


def two_proportion_z(x1: int, n1: int, x2: int, n2: int) -> float | None:
    """Pooled two-proportion z statistic of x1/n1 minus x2/n2; None if a window is empty or the
    pooled share is 0 or 1 (no variance)."""
    if n1 <= 0 or n2 <= 0:
        return None
    pooled = (x1 + x2) / (n1 + n2)
    if pooled <= 0 or pooled >= 1:
        return None
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    return (x1 / n1 - x2 / n2) / se


def psi(current: Sequence[float], baseline: Sequence[float], floor: float = PSI_FLOOR) -> float:
    """Population stability index: sum((c - b) * ln(c / b)) over shares floored at `floor`."""
    total = 0.0
    for c, b in zip(current, baseline, strict=True):
        c, b = max(c, floor), max(b, floor)
        total += (c - b) * math.log(c / b)
    return total


def quantile(sorted_values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default, ClickHouse's
    quantileExactInclusive); None for no values. For checking the SQL, not used by it."""
    n = len(sorted_values)
    if n == 0:
        return None
    position = q * (n - 1)
    low = math.floor(position)
    high = min(low + 1, n - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def drifting(delta_pp: float | None, z: float | None, psi_value: float | None) -> bool:
    """docs/metrics.md §5: (z >= 3 or psi >= 0.1) and the L2/L3 share went up."""
    if delta_pp is None or delta_pp <= 0:
        return False
    return (z is not None and z >= DRIFT_Z) or (psi_value is not None and psi_value >= DRIFT_PSI)


def isotonic_blocks(blocks: Sequence[tuple[float, int, int]]) -> list[float]:
    """docs/metrics.md §6: the non-decreasing step function fitted to pass rates by pool-adjacent-violators.

    `blocks`: (confidence, n, passed), confidence ascending, one block per distinct confidence. While a
    block's pass rate is below its left neighbour's, the two merge into one block with the weighted mean
    (their summed passes over their summed n); repeat. Returns the fitted value at each input block."""
    pooled: list[list[int]] = []  # [passed, n, blocks merged]
    for _, n, passed in blocks:
        pooled.append([passed, n, 1])
        # passed_b / n_b < passed_a / n_a, compared in integers (exact)
        while len(pooled) > 1 and pooled[-1][0] * pooled[-2][1] < pooled[-2][0] * pooled[-1][1]:
            p2, n2, k2 = pooled.pop()
            pooled[-1] = [pooled[-1][0] + p2, pooled[-1][1] + n2, pooled[-1][2] + k2]
    fitted: list[float] = []
    for passed, n, merged in pooled:
        fitted += [passed / n] * merged
    return fitted


EMPTY_ESTIMATE = {"rate": None, "ci": None, "n_eff": None, "coverage": None}
LOW_COVERAGE = 0.8  # docs/metrics.md §3c: an estimate whose labels cover less of its population, the pages warn


def post_stratified(strata: Sequence[tuple[int, int, int]]) -> dict:
    """docs/metrics.md §3c: the population estimate of a share from labeled samples, post-stratified.

    `strata`: (N_h, n_h, k_h) per stratum — the population's events in it, how many have a chosen label,
    how many of those are hits. Covered strata (n_h >= 1) are weighted by N_h / N_cov; `coverage` = N_cov / N;
    V = Σ (N_h/N_cov)² p_h(1−p_h)/n_h (1 − n_h/N_h); n_eff = rate(1−rate)/V when V > 0, else Σ n_h; `ci` the
    Wilson interval of `rate` at n_eff. All null when nothing is labeled."""
    population = sum(big for big, _, _ in strata)
    covered = [(big, n, k) for big, n, k in strata if n >= 1]
    if not covered or not population:
        return dict(EMPTY_ESTIMATE)
    n_cov = sum(big for big, _, _ in covered)
    rate = sum(big / n_cov * (k / n) for big, n, k in covered)
    variance = sum((big / n_cov) ** 2 * (k / n) * (1 - k / n) / n * (1 - n / big) for big, n, k in covered if big > 0)
    rate = min(1.0, max(0.0, rate))
    n_eff = rate * (1 - rate) / variance if variance > 0 else float(sum(n for _, n, _ in covered))
    return {"rate": rate, "ci": wilson_rate(rate, n_eff), "n_eff": n_eff, "coverage": n_cov / population}
