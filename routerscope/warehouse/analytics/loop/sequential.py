"""Always-valid statistics for a canary by session (docs/loop.md#statistics).

Pure functions of running sums, so a look costs the same after ten sessions or a million, and a verdict can
be recomputed from the sums a look file stores.

**The confidence sequence.** The two-sided normal-mixture boundary of Howard, Ramdas, McAuliffe & Sekhon
(2021, "Time-uniform, nonparametric, nonasymptotic confidence sequences", Ann. Statist. 49(2), §3.2 / eq. 14),
applied to standardized sums as in the asymptotic confidence sequences of Waudby-Smith, Arbour, Sinha,
Kennedy & Ramdas (2024, "Time-uniform central limit theory and asymptotic confidence sequences", Ann.
Statist.): after t sessions, with σ̂ the standard deviation of the sessions' influence values,

    θ̂_t ± σ̂_t · sqrt((t + ρ) · ln((t + ρ) / (ρ α²))) / t

holds for every t at once with probability ≥ 1 − α (asymptotically), so it may be looked at after every
session. ρ > 0 (in sessions) sets where the sequence is tightest; `rho_for(t*)` makes it tightest near t*.

**Session-level differences.** The unit is the session (the arm is assigned per session). For a ratio
metric R = Σ numerators / Σ denominators (missed fallbacks over device-served, cloud calls over sessions,
...), each session i with arm Z_i ∈ {0, 1} assigned with probability π_i (the stage's share when it was
assigned) contributes the inverse-propensity influence value (the delta method for a ratio)

    ψ_i = Z_i/π_i · (y_i − R̂₁ x_i)/x̄₁ − (1 − Z_i)/(1 − π_i) · (y_i − R̂₀ x_i)/x̄₀

with R̂_a = Σ_i w_i y_i / Σ_i w_i x_i and x̄_a = Σ_i w_i x_i / t over the arm's sessions (w_i = 1/π_i or
1/(1 − π_i)); Δ̂ = R̂₁ − R̂₀ and σ̂² = Σ ψ_i² / t. Because π_i is known when the session is assigned, the
shares may change between stages without breaking the sequence: evidence accumulates across stages.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

ALPHA = 0.05
SRM_P = 0.001  # a sample-ratio mismatch halts the canary below this p-value
# Sessions each arm needs before its interval is known: the sequences estimate σ from the sessions themselves,
# and one session has no spread at all (the simulation rolled good candidates back after a single candidate
# session before this floor existed: docs/loop.md#statistics).
MIN_SESSIONS = 30


def rho_for(t_star: float, alpha: float = ALPHA) -> float:
    """The mixture parameter that makes the sequence tightest near t* sessions (Waudby-Smith et al. 2024,
    their ρ² = (−2 ln α + ln(1 − 2 ln α)) / t*, in Howard et al.'s parametrisation ρ = 1/ρ²_WS)."""
    if t_star <= 0:
        raise ValueError("t_star must be positive")
    return t_star / (-2 * math.log(alpha) + math.log(1 - 2 * math.log(alpha)))


def radius(t: float, rho: float, alpha: float = ALPHA) -> float:
    """The normal-mixture boundary on the mean of t standardized values: sqrt((t+ρ) ln((t+ρ)/(ρα²))) / t.
    Infinite before the first session."""
    if t <= 0:
        return math.inf
    return math.sqrt((t + rho) * math.log((t + rho) / (rho * alpha * alpha))) / t


def one_sided_radius(t: float, rho: float, alpha: float = ALPHA) -> float:
    """The one-sided normal-mixture boundary on the mean of t standardized values (Howard et al. 2021, the
    one-sided normal mixture: λ mixed over a half-normal on λ ≥ 0), for a bound that is crossed on one side with
    probability ≤ α however often it is looked at: z · sqrt(t + ρ) / t, z the root of
    2 sqrt(ρ / (t + ρ)) · exp(z² / 2) · Φ(z) = 1 / α.

    A rule that reads one side of an interval (promotion the upper bound of the harm, rollback its lower bound)
    spends its whole α on that side; the two-sided `radius` spends α on both sides together, about α/2 each, and
    cost good candidates sessions (docs/loop.md#always-valid-confidence-sequences-normal-mixture). The root: the
    fixed point z = sqrt(2 (C − ln Φ(z))), C = ln(1/(2α)) + ½ ln((t + ρ)/ρ), which contracts by φ(z)/(zΦ(z)) (below 0.02
    at α = 0.05) a step from z = sqrt(2C); ten steps are exact to double precision."""
    if t <= 0:
        return math.inf
    c = math.log(1 / (2 * alpha)) + 0.5 * math.log((t + rho) / rho)
    z = math.sqrt(2 * max(c, 0.0))
    for _ in range(10):
        z = math.sqrt(2 * (c - math.log(0.5 * math.erfc(-z / math.sqrt(2)))))
    return z * math.sqrt(t + rho) / t


@dataclass
class ArmSums:
    """Running sums of one arm for one ratio metric (y over x per session), weighted by 1/propensity."""

    sessions: int = 0
    w: float = 0.0  # Σ w
    wy: float = 0.0  # Σ w y
    wx: float = 0.0  # Σ w x
    w2yy: float = 0.0  # Σ w² y²
    w2xy: float = 0.0  # Σ w² x y
    w2xx: float = 0.0  # Σ w² x²
    y: float = 0.0  # unweighted Σ y, Σ x (the arm's own rate, for display)
    x: float = 0.0

    def add(self, y: float, x: float, propensity: float) -> None:
        if not 0 < propensity <= 1:
            raise ValueError(f"propensity {propensity} outside (0, 1]")
        w = 1.0 / propensity
        self.sessions += 1
        self.w += w
        self.wy += w * y
        self.wx += w * x
        self.w2yy += w * w * y * y
        self.w2xy += w * w * x * y
        self.w2xx += w * w * x * x
        self.y += y
        self.x += x

    def merge(self, other: ArmSums) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @property
    def rate(self) -> float | None:
        return self.wy / self.wx if self.wx > 0 else None

    def squared_influence(self, t: int) -> float:
        """Σ over the arm's sessions of (w (y − R̂ x) / x̄)², x̄ = Σ w x / t."""
        rate = self.rate
        if rate is None or t <= 0:
            return 0.0
        xbar = self.wx / t
        return (self.w2yy - 2 * rate * self.w2xy + rate * rate * self.w2xx) / (xbar * xbar)

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, data: dict) -> ArmSums:
        return cls(**{name: data[name] for name in cls.__dataclass_fields__})


@dataclass
class Interval:
    """An estimate with its always-valid interval at the look it was computed; `n` sessions behind it."""

    estimate: float | None
    low: float | None
    high: float | None
    n: int
    sd: float | None = None

    @property
    def known(self) -> bool:
        return self.low is not None and self.high is not None

    def to_dict(self) -> dict:
        return {
            "estimate": self.estimate,
            "ci": [self.low, self.high] if self.known else None,
            "n": self.n,
            "sd": self.sd,
        }


@dataclass
class RatioDifference:
    """Δ = R(candidate) − R(control) of one ratio metric, session by session (module docstring)."""

    control: ArmSums = field(default_factory=ArmSums)
    candidate: ArmSums = field(default_factory=ArmSums)

    def add(self, arm: int, y: float, x: float, share: float) -> None:
        """One session: arm 1 (candidate, assigned with probability `share`) or 0 (control)."""
        if arm:
            self.candidate.add(y, x, share)
        else:
            self.control.add(y, x, 1.0 - share)

    @property
    def sessions(self) -> int:
        return self.control.sessions + self.candidate.sessions

    def interval(
        self, rho: float, alpha: float = ALPHA, min_sessions: int = MIN_SESSIONS, *, one_sided: bool = False
    ) -> Interval:
        """Δ̂ with its confidence sequence at this look; unknown (None) while either arm has no
        denominator or fewer than `min_sessions` sessions. `one_sided`: each bound a one-sided sequence at α
        (`one_sided_radius`), for rules that read one bound at a time; the pair then holds with 1 − 2α."""
        t = self.sessions
        r1, r0 = self.candidate.rate, self.control.rate
        if r1 is None or r0 is None or min(self.candidate.sessions, self.control.sessions) < min_sessions:
            return Interval(None, None, None, t)
        variance = (self.candidate.squared_influence(t) + self.control.squared_influence(t)) / t
        sd = math.sqrt(max(variance, 0.0))
        delta = r1 - r0
        half = sd * (one_sided_radius if one_sided else radius)(t, rho, alpha)
        return Interval(delta, delta - half, delta + half, t, sd)

    def to_dict(self) -> dict:
        return {"control": self.control.to_dict(), "candidate": self.candidate.to_dict()}

    @classmethod
    def from_dict(cls, data: dict) -> RatioDifference:
        return cls(ArmSums.from_dict(data["control"]), ArmSums.from_dict(data["candidate"]))


@dataclass
class MeanSums:
    """Running sums of a per-session value in one arm, unweighted (for a one-arm sequence on its mean)."""

    n: int = 0
    s: float = 0.0
    ss: float = 0.0

    def add(self, value: float) -> None:
        self.n += 1
        self.s += value
        self.ss += value * value

    def merge(self, other: MeanSums) -> None:
        self.n, self.s, self.ss = self.n + other.n, self.s + other.s, self.ss + other.ss

    def interval(self, rho: float, alpha: float = ALPHA, min_sessions: int = MIN_SESSIONS) -> Interval:
        """The mean with its confidence sequence (sample variance; unknown below `min_sessions` values)."""
        if self.n == 0 or self.n < min_sessions:
            return Interval(None, None, None, 0)
        mean = self.s / self.n
        sd = math.sqrt(max(self.ss / self.n - mean * mean, 0.0))
        half = sd * radius(self.n, rho, alpha)
        return Interval(mean, mean - half, mean + half, self.n, sd)

    def to_dict(self) -> dict:
        return {"n": self.n, "s": self.s, "ss": self.ss}

    @classmethod
    def from_dict(cls, data: dict) -> MeanSums:
        return cls(int(data["n"]), float(data["s"]), float(data["ss"]))


def mean_difference(control: MeanSums, candidate: MeanSums, rho: float, alpha: float = ALPHA) -> Interval:
    """Difference of two arms' means with a conservative union of their sequences (each at α/2): used by the
    balance check of a pre-treatment value, where either arm alone may be short."""
    a, b = control.interval(rho, alpha / 2), candidate.interval(rho, alpha / 2)
    if not (a.known and b.known):
        return Interval(None, None, None, control.n + candidate.n)
    return Interval(b.estimate - a.estimate, b.low - a.high, b.high - a.low, control.n + candidate.n)  # type: ignore[operator]


def chi2_sf_1(x: float) -> float:
    """The survival function of χ² with one degree of freedom: erfc(sqrt(x/2))."""
    return math.erfc(math.sqrt(max(x, 0.0) / 2))


def srm_pvalue(candidate_sessions: int, control_sessions: int, expected_candidate: float) -> float | None:
    """The sample-ratio check: a χ² goodness-of-fit test (1 df) of the arms' session counts against the
    counts the assignment expects (`expected_candidate` = Σ π_i over the sessions). None before any session or
    when an arm cannot be expected at all."""
    total = candidate_sessions + control_sessions
    expected_control = total - expected_candidate
    if total <= 0 or expected_candidate <= 0 or expected_control <= 0:
        return None
    chi2 = (candidate_sessions - expected_candidate) ** 2 / expected_candidate + (
        control_sessions - expected_control
    ) ** 2 / expected_control
    return chi2_sf_1(chi2)


def srm_sequential_p(candidate_sessions: int, expected_candidate: float, variance: float, rho: float) -> float | None:
    """The always-valid p-value of the sample-ratio check (looked at after every session without inflating its
    error): S = candidate sessions − Σ π_i, V = Σ π_i (1 − π_i); the normal-mixture martingale
    M = sqrt(ρ / (V + ρ)) · exp(S² / (2 (V + ρ))) and p = min(1, 1 / M) (Ville's inequality). None before any
    session."""
    if variance <= 0:
        return None
    s = candidate_sessions - expected_candidate
    log_m = 0.5 * math.log(rho / (variance + rho)) + s * s / (2 * (variance + rho))
    return 1.0 if log_m <= 0 else math.exp(-log_m)


def covered(interval: Iterable[float] | None, value: float | None) -> bool | None:
    """Whether `value` lies inside [low, high]; None when either is unknown."""
    if interval is None or value is None:
        return None
    low, high = interval
    return low <= value <= high


def ratio_interval(arm: ArmSums, rho: float, alpha: float = ALPHA, min_sessions: int = MIN_SESSIONS) -> Interval:
    """One arm's ratio (e.g. the candidate's offload: device-served over requests) with its confidence
    sequence, the delta method over the arm's own sessions (unweighted: add them with propensity 1)."""
    n = arm.sessions
    rate = arm.rate
    if rate is None or n == 0 or n < min_sessions:
        return Interval(None, None, None, n)
    sd = math.sqrt(max(arm.squared_influence(n) / n, 0.0))
    half = sd * radius(n, rho, alpha)
    return Interval(rate, rate - half, rate + half, n, sd)
