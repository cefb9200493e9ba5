"""The offline evaluation's intervals (docs/loop.md#evaluate): a session-cluster bootstrap of the what-if's
figures, the prediction at the canary's planned size, and the calibration ledger.

**Session-cluster bootstrap.** Requests of one session are not independent (one device, one user, one
network), so the resampling unit is the session: B times, draw as many sessions as the window has, with
replacement, and recompute the ratio Σ y / Σ x over the drawn sessions; the interval is the 2.5th and 97.5th
percentile of the B ratios.

**Prediction at the canary's size.** What the canary will *measure* differs from the window's figure by
the window's own uncertainty and by the canary's sampling noise: with s_w the bootstrap standard error and
s_c = sd(y_i − R x_i) / (x̄ √n_c) the delta-method standard error of a ratio over n_c canary sessions, the
prediction is R ± z · √(s_w² + s_c²) · f, f the calibration ledger's widening factor (≥ 1).

**Calibration ledger.** Every past prediction beside what its canary measured: coverage = the share of the
last 8 whose 95 % interval held the measurement. When fewer than 90 % of them were covered, the factor f is
the smallest that would have covered 90 %: the 90th percentile of |measured − predicted| / half-width
(never below 1).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

Z95 = 1.959964
LEDGER_WINDOW = 8
LEDGER_TARGET = 0.9


def ratio(pairs: Sequence[tuple[float, float]]) -> float | None:
    x = sum(b for _, b in pairs)
    return sum(a for a, _ in pairs) / x if x > 0 else None


def session_bootstrap(sessions: Sequence[tuple[float, float]], resamples: int = 400, seed: int = 0) -> dict:
    """`sessions`: (y, x) per session (e.g. device-served, requests). Returns the ratio, its bootstrap
    standard error and 95 % percentile interval, and n; all null without a denominator."""
    n = len(sessions)
    point = ratio(sessions)
    if point is None or n < 2:
        return {"estimate": point, "se": None, "ci": None, "n": n, "resamples": resamples, "seed": seed}
    rng = random.Random(seed)
    ys, xs = [float(y) for y, _ in sessions], [float(x) for _, x in sessions]
    population = range(n)
    draws = []
    for _ in range(resamples):
        drawn = rng.choices(population, k=n)
        x = sum(map(xs.__getitem__, drawn))
        if x > 0:
            draws.append(sum(map(ys.__getitem__, drawn)) / x)
    draws.sort()
    mean = sum(draws) / len(draws)
    se = math.sqrt(sum((d - mean) ** 2 for d in draws) / max(len(draws) - 1, 1))
    low = draws[int(0.025 * (len(draws) - 1))]
    high = draws[int(math.ceil(0.975 * (len(draws) - 1)))]
    return {"estimate": point, "se": se, "ci": [low, high], "n": n, "resamples": resamples, "seed": seed}


def canary_se(sessions: Sequence[tuple[float, float]], planned: int) -> float | None:
    """The delta-method standard error of the ratio over `planned` sessions like these."""
    point = ratio(sessions)
    if point is None or planned <= 0 or not sessions:
        return None
    n = len(sessions)
    xbar = sum(x for _, x in sessions) / n
    var = sum((y - point * x) ** 2 for y, x in sessions) / n
    return math.sqrt(var) / (xbar * math.sqrt(planned))


def prediction(boot: dict, planned_se: float | None, factor: float = 1.0) -> list[float] | None:
    """R ± z √(s_w² + s_c²) · factor, clipped to [0, 1]; null when either part is unknown."""
    if boot.get("estimate") is None or boot.get("se") is None or planned_se is None:
        return None
    half = Z95 * math.sqrt(boot["se"] ** 2 + planned_se**2) * max(1.0, factor)
    return [max(0.0, boot["estimate"] - half), min(1.0, boot["estimate"] + half)]


def prediction_record(sessions: Sequence[tuple[float, float]], planned: int, boot: dict, factor: float = 1.0) -> dict:
    """What `evaluation.json` stores of a prediction: the estimate, the window's bootstrap se, the per-session
    spread (so a look can restate the interval at its own size), the interval at the planned size."""
    point = ratio(sessions)
    sd_per_session = None
    if point is not None and sessions:
        n = len(sessions)
        xbar = sum(x for _, x in sessions) / n
        sd_per_session = math.sqrt(sum((y - point * x) ** 2 for y, x in sessions) / n) / xbar
    record = {
        "estimate": point,
        "window_se": boot.get("se"),
        "bootstrap_ci": boot.get("ci"),
        "sd_per_session": sd_per_session,
        "planned_sessions": planned,
        "factor": max(1.0, factor),
    }
    record["interval"] = prediction_at(record, planned)
    return record


def prediction_at(record: dict, sessions: int) -> list[float] | None:
    """The prediction's 95 % interval for a measurement over `sessions` canary sessions (module docstring)."""
    if record.get("estimate") is None or record.get("window_se") is None or record.get("sd_per_session") is None:
        return None
    if sessions <= 0:
        return None
    se = math.sqrt(record["window_se"] ** 2 + record["sd_per_session"] ** 2 / sessions)
    half = Z95 * se * max(1.0, record.get("factor", 1.0))
    return [max(0.0, record["estimate"] - half), min(1.0, record["estimate"] + half)]


def ledger_factor(entries: Sequence[dict]) -> dict:
    """The calibration ledger's state over its last 8 entries (`predicted`, `interval`, `measured`):
    coverage, and the widening factor (1 while ≥ 90 % were covered). Unknown coverage with no entries."""
    recent = [e for e in entries if e.get("interval") and e.get("measured") is not None][-LEDGER_WINDOW:]
    if not recent:
        return {"n": 0, "covered": 0, "coverage": None, "factor": 1.0}
    ratios = []
    covered = 0
    for e in recent:
        low, high = e["interval"]
        half = max((high - low) / 2, 1e-12)
        covered += low <= e["measured"] <= high
        ratios.append(abs(e["measured"] - e["predicted"]) / half)
    coverage = covered / len(recent)
    factor = 1.0
    if coverage < LEDGER_TARGET:
        ratios.sort()
        factor = max(1.0, ratios[min(len(ratios) - 1, math.ceil(LEDGER_TARGET * len(ratios)) - 1)])
    return {"n": len(recent), "covered": covered, "coverage": coverage, "factor": factor}
