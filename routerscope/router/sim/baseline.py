"""The SIMULATED fleet's calm baseline per task type, and the alert limits tuned from it.

The fleet's rules file (`routerscope/router/sim/alert_rules.yaml`) is the shipped defaults plus per task type `limits`
the way a team sets them for its own fleet (docs/metrics.md §3b): each limit is the task type's calm rate
(outside the three incidents) moved away from it by the rule's margin (`MARGINS`), rounded away from the
baseline to the next 0.05. `calm_baseline` measures the calm rates by counting the fleet's own events and
labels (no warehouse), so a test can check that the file's limits still sit where the world puts them:

    .venv/bin/python -m routerscope.router.sim.baseline --seeds 1 2 3 4 5 11

prints the measured calm rates and the limits they give (the file's were set from those six seeds).
"""

from __future__ import annotations

import argparse
import json
import math
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

from routerscope.contract.events import DecisionEvent, LabelEvent
from routerscope.router.sim.fleet import Fleet, Incidents

UTC = timezone.utc  # noqa: UP017 (datetime.UTC is Python 3.11+; routerscope.router runs on 3.10 too)

SIM_RULES = Path(__file__).with_name("alert_rules.yaml")
SPAN = timedelta(minutes=120)  # the demo's span
REQUESTS = 20_000  # the demo's request count

# rule → (the calm rate it reads, the margin, +1: the limit sits above the baseline / -1: below). The fallback
# rate is judged on its point estimate, so its margin is wider (about two standard errors of a 40-request
# window); the rollback rules judge the end of a 95 % interval, which already needs the evidence.
# The two label-based rules read population estimates (docs/metrics.md §3c), so their calm rates are estimates
# too: post-stratified on confidence bucket over the calm events (`stratified`).
MARGINS = {
    "fallback_rate_high": ("fallback_rate", 0.15, +1),
    "rollback_degrade_trigger": ("degrade_trigger_rate", 0.10, +1),
    "rollback_route_accuracy": ("route_accuracy_est", 0.05, -1),
    "false_fallback_high": ("quality_false_fallback_est", 0.10, +1),
}
STEP = 0.05
# A task type gets limits of its own only with this many events behind its calm rate (pooled over the seeds):
# the rare ones never fill a window's minimum sample and keep the defaults.
MIN_BASELINE = 300
# The quality fallbacks alone are labeled less often (slot_extract: 157, tool_call: 220 over the six seeds), yet a
# task type with ~30 of them a day fills the daily rule's minimum sample: it gets its own limit from 150 up.
MIN_BASELINE_OF = {"quality_false_fallback_labeled": 150}
DENOMINATORS = {
    "fallback_rate": "device_entered",
    "degrade_trigger_rate": "device_entered",
    "route_accuracy_est": "route_labeled",
    "quality_false_fallback_est": "quality_false_fallback_labeled",
}
BUCKET_EDGES = (0.45, 0.65, 0.85)  # docs/metrics.md §6's inner edges: the strata of §3c (-1: no confidence)


def bucket(confidence: float | None) -> int:
    return -1 if confidence is None else sum(1 for e in BUCKET_EDGES if e <= confidence)


def stratified(strata: dict[int, list[int]]) -> float | None:
    """docs/metrics.md §3c's point estimate: `strata` bucket → [N_h, n_h, k_h]; the covered strata (n_h >= 1) each
    at its share of their population, Σ (N_h / N_cov) · k_h / n_h; None when nothing is labeled. (The warehouse's
    `stats.post_stratified` is the same rate with its interval; the simulator sits below the warehouse.)"""
    covered = [(big, n, k) for big, n, k in strata.values() if n]
    n_cov = sum(big for big, _, _ in covered)
    return sum(big / n_cov * k / n for big, n, k in covered) if n_cov else None


def tuned_limit(calm: float, margin: float, direction: int) -> float:
    """`calm` moved by `margin` in `direction`, rounded away from the baseline to the next STEP."""
    target = calm + direction * margin
    steps = math.ceil(target / STEP - 1e-9) if direction > 0 else math.floor(target / STEP + 1e-9)
    return round(steps * STEP, 2)


def calm_baseline(seed: int, requests: int = REQUESTS, span: timedelta = SPAN) -> dict[str, dict[str, float]]:
    """Per task type, the calm (outside every incident) live events' rates: `fallback_rate` and
    `degrade_trigger_rate` over device-entered (docs/metrics.md §2, §3b), and the §3c estimates the label-based
    rules read, post-stratified on confidence bucket: `route_accuracy_est` and `quality_false_fallback_est` (the
    quality fallbacks whose device answer was acceptable), with the labeled counts beside them."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    incidents = Incidents()
    windows = (incidents.cloud_outage, incidents.thermal, incidents.bad_threshold)
    events: list[DecisionEvent] = []
    labels: dict[str, LabelEvent] = {}
    Fleet(
        seed=seed,
        start=start,
        span=span,
        on_event=events.append,
        on_label=lambda label: labels.__setitem__(label.request_id, label),
    ).run(requests)
    counts: dict[str, Counter] = {}
    strata: dict[tuple[str, str], dict[int, list[int]]] = {}  # (task type, measure) → bucket → [N, n, k]

    def count(task: str, measure: str, confidence: float | None, labeled: bool, hit: bool) -> None:
        s = strata.setdefault((task, measure), {}).setdefault(bucket(confidence), [0, 0, 0])
        s[0], s[1], s[2] = s[0] + 1, s[1] + labeled, s[2] + (labeled and hit)

    for e in events:
        progress = (e.event_time - start) / span
        if e.mode != "live" or any(a <= progress < b for a, b in windows):
            continue
        c = counts.setdefault(e.task_type, Counter())
        label = labels.get(e.request_id)
        acceptable = label.device_acceptable if label is not None else None
        correct = label.route_correct if label is not None else None
        judged = acceptable is not None  # (only these are chosen, §3)
        route = judged and correct is not None
        c["route_labeled"] += route  # route accuracy's population: every live request (§3b)
        count(e.task_type, "route", e.confidence, route, bool(route and correct))
        if not e.entered_device:
            continue
        c["device_entered"] += 1
        c["fallbacks"] += e.fallback_type in ("quality", "timeout", "error")
        c["degrade_triggered"] += any(a.level in (2, 3) for a in e.attempts)
        if e.fallback_type == "quality":
            c["quality_false_fallback_labeled"] += judged
            count(e.task_type, "quality", e.confidence, judged, bool(judged and acceptable))
    return {task: _rates(c, strata, task) for task, c in sorted(counts.items())}


def _rates(c: Counter, strata: dict, task: str) -> dict[str, float]:
    def share(k: str, n: str):
        return c[k] / c[n] if c[n] else None

    return {
        "fallback_rate": share("fallbacks", "device_entered"),
        "degrade_trigger_rate": share("degrade_triggered", "device_entered"),
        "route_accuracy_est": stratified(strata.get((task, "route"), {})),
        "quality_false_fallback_est": stratified(strata.get((task, "quality"), {})),
        **{k: c[k] for k in ("device_entered", "route_labeled", "quality_false_fallback_labeled")},
    }


def pooled(seeds: list[int], requests: int = REQUESTS) -> dict[str, dict[str, float | None]]:
    """The calm rates over several seeded runs, each run weighted by its denominator."""
    runs = [calm_baseline(seed, requests) for seed in seeds]
    out: dict[str, dict[str, float | None]] = {}
    for task in sorted({t for run in runs for t in run}):
        rows = [run[task] for run in runs if task in run]
        out[task] = {}
        for rate, n in DENOMINATORS.items():
            total = sum(r[n] for r in rows if r[rate] is not None)
            out[task][rate] = sum(r[rate] * r[n] for r in rows if r[rate] is not None) / total if total else None
            out[task][n] = sum(r[n] for r in rows)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description="the SIMULATED fleet's calm baseline and the limits it gives")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5, 11])
    parser.add_argument("--requests", type=int, default=REQUESTS)
    args = parser.parse_args()
    calm = pooled(args.seeds, args.requests)
    limits: dict[str, dict[str, float]] = {}
    for rule, (rate, margin, d) in MARGINS.items():
        n = DENOMINATORS[rate]
        limits[rule] = {}
        for t, r in calm.items():
            value, count = r[rate], r[n]
            if value is not None and count is not None and count >= MIN_BASELINE_OF.get(n, MIN_BASELINE):
                limits[rule][t] = tuned_limit(value, margin, d)
    print(json.dumps({"calm": calm, "limits": limits}, indent=1))


if __name__ == "__main__":
    main()
