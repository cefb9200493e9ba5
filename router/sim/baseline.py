"""The SIMULATED fleet's calm baseline per task type, and the alert limits tuned from it.

The fleet's rules file (`router/sim/alert_rules.yaml`) is the shipped defaults plus per task type `limits`
the way a team sets them for its own fleet (docs/metrics.md §3b): each limit is the task type's calm rate
(outside the three incidents) moved away from it by the rule's margin (`MARGINS`), rounded away from the
baseline to the next 0.05. `calm_baseline` measures the calm rates by counting the fleet's own events and
labels (no warehouse), so a test can check that the file's limits still sit where the world puts them:

    .venv/bin/python -m router.sim.baseline --seeds 1 2 3 4 5 11

prints the measured calm rates and the limits they give (the file's were set from those six seeds).
"""

from __future__ import annotations

import math
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

SIM_RULES = Path(__file__).with_name("alert_rules.yaml")
SPAN = timedelta(minutes=120)  # the demo's span
REQUESTS = 20_000  # the demo's request count

# rule → (the calm rate it reads, the margin, +1: the limit sits above the baseline / -1: below). The fallback
# rate is judged on its point estimate, so its margin is wider (about two standard errors of a 40-request
# window); the rollback rules judge the end of a 95 % interval, which already needs the evidence.
MARGINS = {
    "fallback_rate_high": ("fallback_rate", 0.15, +1),
    "rollback_degrade_trigger": ("degrade_trigger_rate", 0.10, +1),
    "rollback_route_accuracy": ("route_accuracy", 0.05, -1),
    "false_fallback_high": ("false_fallback_rate", 0.10, +1),
}
STEP = 0.05
# A task type gets limits of its own only with this many events behind its calm rate (pooled over the seeds):
# the rare ones never fill a window's minimum sample and keep the defaults.
MIN_BASELINE = 300
DENOMINATORS = {
    "fallback_rate": "device_entered",
    "degrade_trigger_rate": "device_entered",
    "route_accuracy": "route_labeled",
    "false_fallback_rate": "false_fallback_labeled",
}


def tuned_limit(calm: float, margin: float, direction: int) -> float:
    """`calm` moved by `margin` in `direction`, rounded away from the baseline to the next STEP."""
    target = calm + direction * margin
    steps = math.ceil(target / STEP - 1e-9) if direction > 0 else math.floor(target / STEP + 1e-9)
    return round(steps * STEP, 2)


def calm_baseline(seed: int, requests: int = REQUESTS, span: timedelta = SPAN) -> dict[str, dict[str, float]]:
    """Per task type, the calm (outside every incident) live events' rates: `fallback_rate` and
    `degrade_trigger_rate` over device-entered, `route_accuracy` over labeled, `false_fallback_rate` over
    labeled quality and timeout fallbacks (docs/metrics.md §2, §3, §3b), with their denominators."""
    from router.sim.fleet import Fleet, Incidents

    start = datetime(2026, 1, 1, tzinfo=UTC)
    incidents = Incidents()
    windows = (incidents.cloud_outage, incidents.thermal, incidents.bad_threshold)
    events, labels = [], {}
    Fleet(
        seed=seed,
        start=start,
        span=span,
        on_event=events.append,
        on_label=lambda label: labels.__setitem__(label.request_id, label),
    ).run(requests)
    counts: dict[str, Counter] = {}
    for e in events:
        progress = (e.event_time - start) / span
        if e.mode != "live" or not e.entered_device or any(a <= progress < b for a, b in windows):
            continue
        c = counts.setdefault(e.task_type, Counter())
        c["device_entered"] += 1
        c["fallbacks"] += e.fallback_type in ("quality", "timeout", "error")
        c["degrade_triggered"] += any(a.level in (2, 3) for a in e.attempts)
        label = labels.get(e.request_id)
        if label is not None and label.route_correct is not None:
            c["route_labeled"] += 1
            c["route_correct"] += label.route_correct
        if label is not None and label.device_acceptable is not None and e.fallback_type in ("quality", "timeout"):
            c["false_fallback_labeled"] += 1
            c["false_fallbacks"] += label.device_acceptable
    return {task: _rates(c) for task, c in sorted(counts.items())}


def _rates(c: Counter) -> dict[str, float]:
    def share(k: str, n: str):
        return c[k] / c[n] if c[n] else None

    return {
        "fallback_rate": share("fallbacks", "device_entered"),
        "degrade_trigger_rate": share("degrade_triggered", "device_entered"),
        "route_accuracy": share("route_correct", "route_labeled"),
        "false_fallback_rate": share("false_fallbacks", "false_fallback_labeled"),
        **{k: c[k] for k in ("device_entered", "route_labeled", "false_fallback_labeled")},
    }


def pooled(seeds: list[int], requests: int = REQUESTS) -> dict[str, dict[str, float]]:
    """The calm rates over several seeded runs, each run weighted by its denominator."""
    runs = [calm_baseline(seed, requests) for seed in seeds]
    out: dict[str, dict[str, float]] = {}
    for task in sorted({t for run in runs for t in run}):
        rows = [run[task] for run in runs if task in run]
        out[task] = {}
        for rate, n in DENOMINATORS.items():
            total = sum(r[n] for r in rows if r[rate] is not None)
            out[task][rate] = sum(r[rate] * r[n] for r in rows if r[rate] is not None) / total if total else None
            out[task][n] = sum(r[n] for r in rows)
    return out


def main() -> None:
    import argparse
    import json

    parser = argparse.ArgumentParser(description="the SIMULATED fleet's calm baseline and the limits it gives")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5, 11])
    parser.add_argument("--requests", type=int, default=REQUESTS)
    args = parser.parse_args()
    calm = pooled(args.seeds, args.requests)
    limits = {
        rule: {t: tuned_limit(r[rate], margin, d) for t, r in calm.items() if r[DENOMINATORS[rate]] >= MIN_BASELINE}
        for rule, (rate, margin, d) in MARGINS.items()
    }
    print(json.dumps({"calm": calm, "limits": limits}, indent=1))


if __name__ == "__main__":
    main()
