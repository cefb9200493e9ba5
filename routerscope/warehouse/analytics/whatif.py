"""docs/metrics.md §14: what the window's own live traffic would have looked like under a candidate threshold,
per task type, before anyone pushes it (`routerscope whatif`, the tuning page's "try a threshold").

The warehouse does the one pass (`routerscope/warehouse/queries/whatif.py`: counts and sums per task type and
candidate over the materialized window); this module turns them into the `current` and `candidate`
blocks, the moved requests with their label coverage, the warnings and the self-check that `current`
equals the metric set (§2, §3, §8) over the same events, and evaluates a pre-push gate
(`--fail-if "missed_fallback_rate>0.05"`)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from routerscope.core.text import ci as _ci
from routerscope.core.text import money as _money
from routerscope.core.text import pct as _pct
from routerscope.warehouse.analytics import ppi, stats
from routerscope.warehouse.analytics.metrics import iso, metric_group
from routerscope.warehouse.queries import decisions as decision_queries
from routerscope.warehouse.queries import whatif as whatif_queries
from routerscope.warehouse.queries.labels import DEFAULT_EDGES
from routerscope.warehouse.sql import QueryWindow

LOW_COVERAGE = 0.3  # below this share of labeled moved requests the estimate rests on few labels
CAVEAT = (
    "The counterfactual holds for the confidence gate only: a threshold change also changes load, and so "
    "timeouts and breaker trips, which no replay of recorded outcomes can predict."
)
# The block keys a gate (`--fail-if`) may name, besides `moved.<key>`.
BLOCK_KEYS = (
    "requests",
    "device_entered",
    "fallbacks",
    "fallback_rate",
    "quality_fallbacks",
    "device_served",
    "false_fallback_rate",
    "false_fallback_labeled",
    "missed_fallback_rate",
    "missed_fallback_labeled",
    "cloud_calls",
    "cost_usd",
)
MOVED_KEYS = ("n", "labeled", "pass_rate", "label_coverage")
# docs/metrics.md §3c in the blocks: the candidate's own routes, post-stratified; a gate names one of their parts
# (`missed_fallback_est.high>0.05`): rate, the interval's low or high end, n_eff or coverage.
ESTIMATE_KEYS = ("false_fallback_est", "missed_fallback_est")
ESTIMATE_PARTS = ("rate", "low", "high", "n_eff", "coverage")
# docs/metrics.md §3d in the blocks: the same over the candidate's routes, corrected by human review. A gate naming an
# estimate's rate, interval end or coverage reads the `_ppi` one where it exists (its line says `read …_ppi…`);
# a gate may also name it (`missed_fallback_ppi.high>0.05`).
PPI_KEYS = ("false_fallback_ppi", "missed_fallback_ppi")
PPI_PARTS = ("rate", "low", "high", "coverage", "n_judged", "n_human")
CORRECTED = {"false_fallback_est": "false_fallback_ppi", "missed_fallback_est": "missed_fallback_ppi"}
# Rates with a Wilson interval: a gate may name the interval's ends (`missed_fallback_rate.high>0.05`).
INTERVAL_KEYS = {"false_fallback_rate": "false_fallback_ci", "missed_fallback_rate": "missed_fallback_ci"}
# The labels behind each labeled rate: with fewer than `--min-labeled` of them the gate does not judge it.
LABELS_BEHIND = {
    "false_fallback_rate": "false_fallback_labeled",
    "false_fallback_est": "false_fallback_labeled",
    "missed_fallback_rate": "missed_fallback_labeled",
    "missed_fallback_est": "missed_fallback_labeled",
    "moved.pass_rate": "moved.labeled",
}
MIN_LABELED = 30  # docs/whatif.md: `--min-labeled` default, as the rollout limits' min_n


def _rate(part: dict, prefix: str, hits: int, labeled: int) -> None:
    part[f"{prefix}_rate"] = stats.ratio(hits, labeled)
    part[f"{prefix}_labeled"] = labeled
    part[f"{prefix}_ci"] = stats.wilson(hits, labeled)


def block(
    row: Mapping[str, Any],
    mean_cloud_cost: float | None,
    strata: Mapping[str, list] | None = None,
    designed: Mapping[str, list] | None = None,
) -> dict[str, Any]:
    """One `current` or `candidate` block from a row of `by_candidate`. `cost_usd` is the recorded spend
    plus each new fallback's all-cloud cost (else `mean_cloud_cost`) minus each newly served request's
    recorded cost; null when no event reports a cost (as §8), or when a new fallback has no price at all."""
    device_entered = int(row["device_entered"])
    out: dict[str, Any] = {
        "requests": int(row["requests"]),
        "device_entered": device_entered,
        "fallbacks": int(row["fallbacks"]),
        "fallback_rate": stats.ratio(int(row["fallbacks"]), device_entered),
        "quality_fallbacks": int(row["quality_fallbacks"]),
        "device_served": int(row["device_served"]),
    }
    _rate(out, "false_fallback", int(row["false_fallbacks"]), int(row["false_fallback_labeled"]))
    _rate(out, "missed_fallback", int(row["missed_fallbacks"]), int(row["missed_fallback_labeled"]))
    # §3c: over the block's own quality fallbacks and device-served events, task type × confidence bucket
    out["false_fallback_est"] = stats.post_stratified((strata or {}).get("qf", []))
    out["missed_fallback_est"] = stats.post_stratified((strata or {}).get("mf", []))
    # §3d over the same routes: the judge's verdicts corrected by people's (null below 30 audited events)
    out["false_fallback_ppi"] = ppi.ppi((designed or {}).get("ff", []))
    out["missed_fallback_ppi"] = ppi.ppi((designed or {}).get("mf", []))
    out["cloud_calls"] = int(row["calls"])
    unpriced = int(row["added_unpriced"])
    cost = None
    if int(row["cost_reported"]) and not (unpriced and mean_cloud_cost is None):
        cost = (
            float(row["cost_recorded"] or 0)
            + float(row["added_all_cloud"] or 0)
            + unpriced * (mean_cloud_cost or 0.0)
            - float(row["removed_cost"] or 0)
        )
    out["cost_usd"] = cost
    return out


def _moved_part(n: int, labeled: int, passed: int) -> dict[str, Any]:
    return {
        "n": n,
        "labeled": labeled,
        "pass_rate": stats.ratio(passed, labeled),
        "ci": stats.wilson(passed, labeled),
        "label_coverage": stats.ratio(labeled, n),
    }


def moved(row: Mapping[str, Any]) -> dict[str, Any]:
    """The gated requests whose route the candidate changes, both ways together and each way, with the
    labeled ones' pass rate (the device answer judged acceptable) and its Wilson interval."""
    to_cloud = _moved_part(int(row["to_cloud"]), int(row["to_cloud_labeled"]), int(row["to_cloud_passed"]))
    to_device = _moved_part(int(row["to_device"]), int(row["to_device_labeled"]), int(row["to_device_passed"]))
    total = _moved_part(
        to_cloud["n"] + to_device["n"],
        to_cloud["labeled"] + to_device["labeled"],
        int(row["to_cloud_passed"]) + int(row["to_device_passed"]),
    )
    return {**total, "to_cloud": to_cloud, "to_device": to_device, "unknown": int(row.get("unknown") or 0)}


def _differs(a, b) -> bool:
    if a is None or b is None:
        return (a is None) != (b is None)
    if isinstance(a, list) or isinstance(b, list):
        return len(a) != len(b) or any(_differs(x, y) for x, y in zip(a, b))
    return not math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)


def self_check(current: Mapping[str, Any], group: Mapping[str, Any]) -> list[str]:
    """Where `current` differs from the metric set's group of the same events (§2, §3, §8): one line each.
    The quality-only false fallbacks are compared with §3's `false_fallback_by_type.quality` when the group
    carries it."""
    pairs: list[tuple[str, Any, Any]] = [
        ("requests", current["requests"], group["requests"]),
        ("device_entered", current["device_entered"], group["device_entered"]),
        ("fallback_rate", current["fallback_rate"], group["fallback_rate"]),
        (
            "quality_fallbacks",
            stats.ratio(current["quality_fallbacks"], current["device_entered"]),
            group["quality_fallback_rate"],
        ),
        ("missed_fallback_rate", current["missed_fallback_rate"], group["missed_fallback_rate"]),
        ("missed_fallback_labeled", current["missed_fallback_labeled"], group["missed_fallback_labeled"]),
        ("missed_fallback_ci", current["missed_fallback_ci"], group["missed_fallback_ci"]),
        ("cost_usd", current["cost_usd"], group["cost_usd"]["total"]),
    ]
    quality = (group.get("false_fallback_by_type") or {}).get("quality")
    if quality is not None:
        pairs += [
            ("false_fallback_rate", current["false_fallback_rate"], quality["rate"]),
            ("false_fallback_labeled", current["false_fallback_labeled"], quality["labeled"]),
            ("false_fallback_ci", current["false_fallback_ci"], quality["ci"]),
        ]
    return [f"{key}: what-if {a!r}, metrics {b!r}" for key, a, b in pairs if _differs(a, b)]


def _warnings(task: dict[str, Any]) -> list[str]:
    found = []
    for key, share in (("false_fallback_est", "false_fallback_rate"), ("missed_fallback_est", "missed_fallback_rate")):
        est, labeled = task["candidate"][key], task["candidate"][share]
        if est["coverage"] is not None and est["coverage"] < LOW_ESTIMATE_COVERAGE:
            found.append(
                f"{key} covers {est['coverage']:.0%} of the candidate's population (< {LOW_ESTIMATE_COVERAGE:.0%}): "
                "strata without a label are left out"
            )
        if est["ci"] is not None and labeled is not None and not est["ci"][0] <= labeled <= est["ci"][1]:
            found.append(
                f"the labels are not spread evenly: the labeled {share} {labeled:.3f} lies outside the population "
                f"estimate's interval [{est['ci'][0]:.3f}, {est['ci'][1]:.3f}] (§3c); read the estimate"
            )
    m = task["moved"]
    if m["n"] and m["label_coverage"] < LOW_COVERAGE:
        found.append(
            f"the estimate rests on few labels: {m['labeled']} of the {m['n']} moved requests are labeled "
            f"(coverage {m['label_coverage']:.0%} < {LOW_COVERAGE:.0%})"
        )
    if m.get("unknown"):
        found.append(
            f"{m['unknown']} requests were served by the L1 retry after their first answer was turned down; the "
            "retry's confidence is not recorded, so under this stricter threshold their route is unknown: they "
            "count as fallbacks in the candidate's fallback rate (the pessimistic side) and are left out of its "
            "device-served and missed-fallback figures"
        )
    low, high = task["recorded_threshold"]["min"], task["recorded_threshold"]["max"]
    if low is not None and high is not None and low != high:
        found.append(f"the window mixes recorded thresholds {low:g}–{high:g}: `current` is what they did together")
    if task["self_check"]:
        found.append("`current` does not equal the metrics of the same events: " + "; ".join(task["self_check"]))
    return found


def empty_task(threshold: float) -> dict[str, Any]:
    """A task type without live events in the window: nothing to re-score."""
    return {"threshold": threshold, "requests": 0, "warnings": ["no live events of this task type in the window"]}


def compute(client, window: QueryWindow, thresholds: Mapping[str, float]) -> dict[str, Any]:
    """§14 for each task type of `thresholds` (task type → candidate threshold) over `window`: one read of
    those task types' events (joined to their chosen labels), one pass grouped by candidate, and the
    metric set's own summary of the same events for the self-check."""
    if not thresholds:
        raise ValueError("no candidate threshold: name at least one task type")
    for task_type, x in thresholds.items():
        if not (isinstance(x, (int, float)) and math.isfinite(x) and 0 <= x <= 1):
            raise ValueError(f"the candidate threshold of {task_type} must be a number in [0, 1], not {x!r}")
    task_types = tuple(sorted(thresholds))
    with decision_queries.materialized_window(client, window, task_types):
        candidates = {t: [float(thresholds[t])] for t in task_types}
        rows = whatif_queries.by_candidate(client, candidates)
        strata = whatif_queries.strata(client, candidates, DEFAULT_EDGES[1:-1])
        summary = decision_queries.window_summary(client)
        designed = whatif_queries.ppi_strata(client, window, candidates, DEFAULT_EDGES[1:-1])  # §3d
    out: dict[str, Any] = {
        "window": {"start": iso(window.start), "end": iso(window.end)},
        "caveat": CAVEAT,
        "by_task_type": {},
    }
    for t in task_types:
        out["by_task_type"][t] = _task(
            float(thresholds[t]), rows.get(t), strata.get(t, {}), summary.get(t), designed.get(t, {})
        )
    return out


def sweep(client, window: QueryWindow, task_type: str, thresholds: list[float]) -> dict[float, dict[str, Any]]:
    """`compute`'s block for one task type under each of `thresholds`, in the same one read and one pass (the
    queries group by candidate): the tuning page's slider then moves through numbers already computed instead of
    a query per move. candidate → what `compute(...)["by_task_type"][task_type]` gives for it."""
    values = [float(x) for x in thresholds]
    with decision_queries.materialized_window(client, window, (task_type,)):
        candidates = {task_type: values}
        rows = whatif_queries.by_candidate(client, candidates).get(task_type)
        strata = whatif_queries.strata(client, candidates, DEFAULT_EDGES[1:-1]).get(task_type, {})
        summary = decision_queries.window_summary(client).get(task_type)
        designed = whatif_queries.ppi_strata(client, window, candidates, DEFAULT_EDGES[1:-1]).get(task_type, {})
    return {x: _task(x, rows, strata, summary, designed) for x in values}


def _task(
    x: float, per: Mapping | None, strata: Mapping, summary: Mapping | None, designed: Mapping | None = None
) -> dict[str, Any]:
    """One task type's what-if under candidate `x` from the pass's rows (`per`: candidate → counts, None the
    recorded outcomes), its §3c strata and the metric set's summary of the same events."""
    if not per or not int(per[None]["requests"]):
        return empty_task(x)
    cur, cand = per[None], per[x]
    mean_cloud_cost = stats.ratio(float(cur["cloud_cost_sum"] or 0), int(cur["cloud_cost_n"]))
    designed = designed or {}
    current = block(cur, mean_cloud_cost, strata.get(None), designed.get(None))
    task = {
        "threshold": x,
        "recorded_threshold": {"min": cur["threshold_min"], "max": cur["threshold_max"]},
        "gated": int(cur["gated"]),
        "mean_cloud_cost_usd": mean_cloud_cost,
        "current": current,
        "candidate": block(cand, mean_cloud_cost, strata.get(x), designed.get(x)),
        "moved": moved(cand),
        "self_check": self_check(current, metric_group(summary)),
    }
    if not task["gated"]:
        task["recorded_threshold"] = {"min": None, "max": None}
    task["warnings"] = _warnings(task)
    return task


# -- the pre-push gate -------------------------------------------------------------------------------------
_GATE = re.compile(r"^\s*(moved\.)?([a-z_]+)(\.[a-z_]+)?\s*(>=|<=|>|<)\s*([-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?)\s*$")
_OPS = {">": lambda a, b: a > b, ">=": lambda a, b: a >= b, "<": lambda a, b: a < b, "<=": lambda a, b: a <= b}


def parse_gate(text: str) -> tuple[str, str, float]:
    """`"missed_fallback_rate>0.05"` → (key, operator, limit); key is a candidate block key, an interval's end
    of a rate (`missed_fallback_rate.high`, `moved.pass_rate.low`), an estimate's part (`missed_fallback_est.high`,
    §3c) or `moved.<key>`. ValueError naming what is wrong otherwise."""
    m = _GATE.match(text)
    if not m:
        raise ValueError(f"{text!r} is not a condition such as missed_fallback_rate.high>0.05 (operators > >= < <=)")
    moved_key, key, part, op, limit = m.group(1), m.group(2), m.group(3), m.group(4), float(m.group(5))
    if part:
        allowed = [f"{k}.{p}" for k in ESTIMATE_KEYS for p in ESTIMATE_PARTS]
        allowed += [f"{k}.{p}" for k in PPI_KEYS for p in PPI_PARTS]
        allowed += [f"{k}.{p}" for k in (*INTERVAL_KEYS, "moved.pass_rate") for p in ("low", "high")]
        name = (moved_key or "") + key + part
        if name not in allowed:
            raise ValueError(f"{text!r}: {name} is not one of " + ", ".join(allowed))
        return name, op, limit
    keys = MOVED_KEYS if moved_key else BLOCK_KEYS
    if key not in keys:
        where = "moved." if moved_key else ""
        parts = [f"{k}.{p}" for k in ESTIMATE_KEYS for p in ESTIMATE_PARTS]
        parts += [f"{k}.{p}" for k in (*INTERVAL_KEYS, "moved.pass_rate") for p in ("low", "high")]
        raise ValueError(
            f"{text!r}: {where}{key} is not one of {', '.join((moved_key or '') + k for k in keys)}; "
            f"nor an estimate's or an interval's part: {', '.join(parts)}"
        )
    return (moved_key or "") + key, op, limit


def _lookup(task: Mapping[str, Any], key: str):
    """A plain value of a task type's result: `moved.<key>` or a candidate block key."""
    if key.startswith("moved."):
        return task["moved"][key.removeprefix("moved.")]
    return task["candidate"][key]


def read_key(task: Mapping[str, Any], key: str) -> str:
    """The key a gate condition is read from: an `_est` estimate's rate, interval end or coverage from the `_ppi`
    estimate of the same population where the candidate has one (docs/metrics.md §3d), else `key` itself."""
    name, _, part = key.partition(".")
    corrected = CORRECTED.get(name)
    if corrected and part in ("rate", "low", "high", "coverage") and (task.get("candidate") or {}).get(corrected):
        return f"{corrected}.{part}"
    return key


def _value(task: Mapping[str, Any], key: str):
    """The value a gate condition names in a task type's result (None: unknown)."""
    key = read_key(task, key)
    base, _, part = key.rpartition(".") if key.endswith((".low", ".high")) else (key, "", "")
    if key.startswith("moved.") and not part:
        return _lookup(task, key)
    if part:  # an interval's end: of a rate's Wilson interval, the moved pass rate's, or an estimate's
        if base == "moved.pass_rate":
            ci = task["moved"]["ci"]
        elif base in INTERVAL_KEYS:
            ci = task["candidate"][INTERVAL_KEYS[base]]
        else:
            ci = (task["candidate"][base] or {}).get("ci")
        return None if ci is None else ci[0 if part == "low" else 1]
    name, _, est_part = key.partition(".")
    if not est_part:
        return task["candidate"][key]
    found = task["candidate"][name]
    return None if found is None else found[est_part]


def labels_behind(task: Mapping[str, Any], key: str) -> int | None:
    """The labels a labeled rate named by `key` rests on (None: the key is no labeled rate)."""
    for prefix, count in LABELS_BEHIND.items():
        if key == prefix or key.startswith(prefix + "."):
            if key.endswith((".n_eff", ".coverage")):
                return None
            return int(_lookup(task, count))
    return None


def gate(
    result: Mapping[str, Any], conditions: list[tuple[str, str, float]], min_labeled: int = MIN_LABELED
) -> list[str]:
    """The conditions the candidate meets, per task type, as lines (`short_reply: missed_fallback_rate.high 0.39 >
    0.05`). A null value (no labels) and a labeled rate on fewer than `min_labeled` labels meet none: they are
    not judged (`unjudged`)."""
    hits = []
    for t, task in result["by_task_type"].items():
        if "candidate" not in task:
            continue
        for key, op, limit in conditions:
            value = _value(task, key)
            labels = labels_behind(task, key)
            if labels is not None and labels < min_labeled:
                continue
            if value is not None and _OPS[op](value, limit):
                read = read_key(task, key)
                hits.append(f"{t}: {key} {value:.6g} {op} {limit:g}" + (f" (read {read})" if read != key else ""))
    return hits


def unjudged(
    result: Mapping[str, Any], conditions: list[tuple[str, str, float]], min_labeled: int = MIN_LABELED
) -> list[str]:
    """What the gate could not judge, as lines: a task type without live events in the window (a typo'd
    name, an empty warehouse, a window without data), a condition whose value is null for a candidate (no
    labels behind it), or a labeled rate on fewer than `min_labeled` labels. A pre-push gate that judged
    nothing must not pass."""
    lines = []
    for t, task in result["by_task_type"].items():
        if "candidate" not in task:
            lines.append(f"{t}: no live events in the window")
            continue
        for key, _, _ in conditions:
            value = _value(task, key)
            labels = labels_behind(task, key)
            if value is None:
                lines.append(f"{t}: {key} is unknown (nothing labeled behind it)")
            elif labels is not None and labels < min_labeled:
                lines.append(f"{t}: {key} rests on {labels} labels (< --min-labeled {min_labeled})")
    return lines


def recorded(threshold: dict[str, Any]) -> str:
    """The recorded threshold(s) of the gated events: `0.6`, a range when a push falls in the window, — without."""
    low, high = threshold["min"], threshold["max"]
    return "—" if low is None else (f"{low:g}" if low == high else f"{low:g}–{high:g}")


LOW_ESTIMATE_COVERAGE = stats.LOW_COVERAGE  # docs/metrics.md §3c: below it, the what-if warns


def _coverage(est: Mapping[str, Any]) -> str:
    """`, coverage 64 % (low)` beside an estimate; empty without one."""
    if est["coverage"] is None:
        return ""
    low = " (low)" if est["coverage"] < LOW_ESTIMATE_COVERAGE else ""
    return f", coverage {_pct(est['coverage'])}{low}"


# (label, the cell of one block): the rows of the side-by-side table (`routerscope whatif` and the tuning page)
def _corrected(est: Mapping[str, Any] | None) -> str:
    """A §3d estimate of a block: `20.0% [7.4%, 32.6%] judged 100, human 40`; `— (judge not audited)` below 30
    audited events, where the §3c row above stands."""
    if not est:
        return f"{_pct(None)} (judge not audited)"
    return f"{_pct(est['rate'])}{_ci(est['ci'])} judged {est['n_judged']:,}, human {est['n_human']:,}"


ROWS = (
    ("fallback rate (of device-entered)", lambda b: f"{_pct(b['fallback_rate'])} ({b['fallbacks']:,})"),
    (
        "false fallbacks (quality)",
        lambda b: f"{_pct(b['false_fallback_rate'])}{_ci(b['false_fallback_ci'])} of {b['false_fallback_labeled']:,}",
    ),
    (
        "missed fallbacks",
        lambda b: (
            f"{_pct(b['missed_fallback_rate'])}{_ci(b['missed_fallback_ci'])} of {b['missed_fallback_labeled']:,}"
        ),
    ),
    (
        "false fallbacks, estimate (§3c)",
        lambda b: (
            f"{_pct(b['false_fallback_est']['rate'])}{_ci(b['false_fallback_est']['ci'])}"
            f"{_coverage(b['false_fallback_est'])}"
        ),
    ),
    (
        "missed fallbacks, estimate (§3c)",
        lambda b: (
            f"{_pct(b['missed_fallback_est']['rate'])}{_ci(b['missed_fallback_est']['ci'])}"
            f"{_coverage(b['missed_fallback_est'])}"
        ),
    ),
    ("false fallbacks, corrected (§3d)", lambda b: _corrected(b.get("false_fallback_ppi"))),
    ("missed fallbacks, corrected (§3d)", lambda b: _corrected(b.get("missed_fallback_ppi"))),
    ("cloud calls", lambda b: f"{b['cloud_calls']:,}"),
    ("cost", lambda b: _money(b["cost_usd"])),
)
