"""The metrics of docs/metrics.md for one window, in the exact JSON shape `routerscope metrics --json` prints.

The warehouse queries (`routerscope/warehouse/queries/`) compute the counts and rates in SQL; this module puts
them in the documented shape and applies the statistics of `routerscope/warehouse/analytics/stats.py` (Wilson intervals,
two-proportion z, PSI) to those counts. `compute` reads the window once, into the temporary table of
`decisions.materialized_window` that its window queries read.

Beyond the documented keys (docs/metrics.md allows additions): `shadow_agreement_by_input_length`,
`cost_usd` (total, per request, per session) per group, `device_attempts` (the denominator of
`offload_failure_rate`, §3b), `first_event`/`last_event` per policy version (§9), and a top-level
`latency_ms` by served side × network (§8). §10's `device_ledger` is top-level (overall only); §11's
`all_cloud`, `saved` and `saved_share` sit in each group's `cost_usd`, with where the spend went
(`spent_after_device`: fallbacks and re-tries after the device was tried; `spent_cloud_direct`)."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import nullcontext
from datetime import datetime, timedelta
from typing import Any

from routerscope.core.timeutil import UTC
from routerscope.warehouse.analytics import ppi, stats
from routerscope.warehouse.queries import decisions as decision_queries
from routerscope.warehouse.queries import labels as label_queries
from routerscope.warehouse.queries import level_hours
from routerscope.warehouse.queries import ppi as ppi_queries
from routerscope.warehouse.queries import review as review_queries
from routerscope.warehouse.sql import QueryWindow

LEVEL_KEYS = ("L0", "L1", "L2", "L3", "L4")
JUDGED_FALLBACK_TYPES = ("quality", "timeout")  # §3: the fallbacks that left a device answer to judge
# The tunable inputs, defined once (the metric assets, `routerscope metrics` and the demo use these).
DEFAULT_BASELINE_DAYS = 7.0  # L2/L3 drift baseline: the days before the window
DEFAULT_TARGET = 0.95  # threshold recommender: target pass rate
DEFAULT_MIN_N = 30  # threshold recommender: minimum events behind a recommended threshold
DEFAULT_LOCAL_FLOOR = 0.85  # threshold recommender: calibrated pass rate required at the cut itself


def iso(t: datetime) -> str:
    t = t.astimezone(UTC)
    text = t.isoformat(timespec="milliseconds" if t.microsecond else "seconds")
    return text.replace("+00:00", "Z")


def _float(value) -> float | None:
    return None if value is None else float(value)


def by_type(false_fallbacks: int, labeled: int) -> dict[str, Any]:
    """§3 `false_fallback_by_type.<type>`: the false-fallback share of one fallback type's labeled fallbacks."""
    return {
        "rate": stats.ratio(false_fallbacks, labeled),
        "labeled": labeled,
        "ci": stats.wilson(false_fallbacks, labeled),
    }


def empty_group() -> dict[str, Any]:
    """Every key of a group with no events: counts 0, everything else null."""
    return {
        "requests": 0,
        "device_entered": 0,
        "sessions": 0,
        "fallback_rate": None,
        "quality_fallback_rate": None,
        "timeout_fallback_rate": None,
        "error_fallback_rate": None,
        "naive_fallback_rate": None,
        "capability_reject_rate": None,
        "device_bypass_rate": None,
        "false_fallback_rate": None,
        "false_fallback_labeled": 0,
        "false_fallback_ci": None,
        "missed_fallback_rate": None,
        "missed_fallback_labeled": 0,
        "missed_fallback_ci": None,
        "route_accuracy": None,
        "false_fallback_by_type": {
            **{t: by_type(0, 0) for t in JUDGED_FALLBACK_TYPES},
            "quality_est": dict(stats.EMPTY_ESTIMATE),
        },
        "false_fallback_est": dict(stats.EMPTY_ESTIMATE),
        "missed_fallback_est": dict(stats.EMPTY_ESTIMATE),
        "route_accuracy_est": dict(stats.EMPTY_ESTIMATE),
        # §3d: the judge's verdicts corrected by people's (null until MIN_AUDITED audited events), the audit
        **ppi.block(None),
        "route_labeled": 0,
        "route_accuracy_ci": None,
        "device_attempts": 0,
        "offload_failure_rate": None,
        "offload_failure_ci": None,
        "degrade_trigger_rate": None,
        "degrade_trigger_ci": None,
        "by_policy_version": {},
        "validator_failed_by_check": {},
        "label_coverage": {"fallbacks": None, "device_served": None},
        "cloud_calls_per_session": {"mean": None, "p50": None, "p95": None},
        "degrade_share": {k: None for k in LEVEL_KEYS},
        "l2_l3_share": None,
        "l2_l3_drift": {"delta_pp": None, "z": None, "psi": None, "drifting": False},
        "shadow_agreement_rate": None,
        "shadow_agreement_by_input_length": {b: None for b in decision_queries.INPUT_LENGTH_BUCKETS},
        "cost_usd": {
            "total": None,
            "per_request": None,
            "per_session": None,
            "all_cloud": None,
            "saved": None,
            "saved_share": None,
            "spent_after_device": None,
            "spent_cloud_direct": None,
        },
    }


def _version(row: dict[str, Any]) -> dict[str, Any]:
    """docs/metrics.md §9: one policy version's numbers."""
    return {
        "requests": int(row["requests"]),
        "device_entered": int(row["device_entered"]),
        "fallback_rate": _float(row["fallback_rate"]),
        "false_fallback_rate": stats.ratio(row["false_fallbacks"], row["false_fallback_labeled"]),
        "false_fallback_labeled": int(row["false_fallback_labeled"]),
        "missed_fallback_rate": stats.ratio(row["missed_fallbacks"], row["missed_fallback_labeled"]),
        "missed_fallback_labeled": int(row["missed_fallback_labeled"]),
        "route_accuracy": stats.ratio(row["route_correct"], row["route_labeled"]),
        "first_event": iso(row["first_event"]),
        "last_event": iso(row["last_event"]),
    }


def _group(
    row: dict[str, Any] | None,
    calls: dict | None,
    shadow: dict | None,
    current: decision_queries.LevelCounts | None,
    baseline: decision_queries.LevelCounts | None,
    versions: dict[str, dict] | None = None,
) -> dict[str, Any]:
    g = empty_group()
    if row is not None:
        for key in (
            "requests",
            "device_entered",
            "sessions",
            "false_fallback_labeled",
            "missed_fallback_labeled",
            "route_labeled",
            "device_attempts",
        ):
            g[key] = int(row[key])
        # §3b: each rollback signal with its Wilson interval over its own denominator
        for key, hits, n in (
            ("offload_failure", "offload_failures", "device_attempts"),
            ("degrade_trigger", "degrade_triggered", "device_entered"),
            ("route_accuracy", "route_correct", "route_labeled"),
        ):
            rate_key = key if key == "route_accuracy" else f"{key}_rate"
            g[rate_key] = stats.ratio(row[hits], row[n])
            g[f"{key}_ci"] = stats.wilson(int(row[hits]), int(row[n]))
        for key in (
            "fallback_rate",
            "quality_fallback_rate",
            "timeout_fallback_rate",
            "error_fallback_rate",
            "naive_fallback_rate",
            "capability_reject_rate",
            "device_bypass_rate",
            "shadow_agreement_rate",
        ):
            g[key] = _float(row[key])
        g["false_fallback_rate"] = stats.ratio(row["false_fallbacks"], row["false_fallback_labeled"])
        g["false_fallback_ci"] = stats.wilson(int(row["false_fallbacks"]), int(row["false_fallback_labeled"]))
        g["missed_fallback_rate"] = stats.ratio(row["missed_fallbacks"], row["missed_fallback_labeled"])
        g["missed_fallback_ci"] = stats.wilson(int(row["missed_fallbacks"]), int(row["missed_fallback_labeled"]))
        g["false_fallback_by_type"].update(
            {
                t: by_type(int(row[f"{t}_false_fallbacks"]), int(row[f"{t}_false_fallback_labeled"]))
                for t in JUDGED_FALLBACK_TYPES
            }
        )
        g["label_coverage"] = {
            "fallbacks": stats.ratio(row["false_fallback_labeled"], row["judged_fallbacks"]),
            "device_served": stats.ratio(row["missed_fallback_labeled"], row["device_served_count"]),
        }
        requests = int(row["requests"])
        if requests:
            shares = [int(row[f"l{i}"]) / requests for i in range(5)]
            g["degrade_share"] = dict(zip(LEVEL_KEYS, shares))
            g["l2_l3_share"] = shares[2] + shares[3]
        if row["cost_reported"]:
            total = float(row["cost_total"])
            g["cost_usd"].update(
                total=total,
                per_request=stats.ratio(total, requests),
                per_session=stats.ratio(total, int(row["sessions"])),
            )
    if versions:
        g["by_policy_version"] = {version: _version(r) for version, r in versions.items()}
    if calls is not None:
        g["cloud_calls_per_session"] = {k: calls[k] for k in ("mean", "p50", "p95")}
    if shadow:
        g["shadow_agreement_by_input_length"].update(shadow)
    g["l2_l3_drift"] = drift(current, baseline)
    return g


def estimates(group: dict[str, Any], strata: dict[str, list[tuple[int, int, int]]] | None) -> None:
    """§3c: put the post-stratified population estimates of `strata` (decisions.label_strata's measures of the
    group: every task type × bucket stratum of it) into `group`."""
    if not strata:
        return
    group["false_fallback_est"] = stats.post_stratified(strata["ff"])
    group["missed_fallback_est"] = stats.post_stratified(strata["mf"])
    group["false_fallback_by_type"]["quality_est"] = stats.post_stratified(strata["qf"])
    group["route_accuracy_est"] = stats.post_stratified(strata["ra"])


def merged_strata(by_task: dict[str, dict[str, list]]) -> dict[str, list]:
    """The overall strata: every task type's (task type × bucket), side by side (§3c)."""
    return {m: [s for per in by_task.values() for s in per[m]] for m in decision_queries.STRATA_MEASURES}


def metric_group(row: Mapping[str, Any] | None) -> dict[str, Any]:
    """The §1–§3 and §8 keys of one group from its `window_summary` row alone (no sessions, §4, §5
    baseline, §7 or §9; `sessions` 0): what the what-if of §14 checks its `current` against."""
    return _group(None if row is None else {"sessions": 0, **row}, None, None, None, None)


def drift(
    current: decision_queries.LevelCounts | None, baseline: decision_queries.LevelCounts | None
) -> dict[str, Any]:
    """docs/metrics.md §5: L2/L3 share of the current window against the baseline window."""
    if not current or not baseline or not current.requests or not baseline.requests:
        return {"delta_pp": None, "z": None, "psi": None, "drifting": False}
    x1, n1 = current.levels[2] + current.levels[3], current.requests
    x2, n2 = baseline.levels[2] + baseline.levels[3], baseline.requests
    delta_pp = 100 * (x1 / n1 - x2 / n2)
    z = stats.two_proportion_z(x1, n1, x2, n2)
    psi = stats.psi([c / n1 for c in current.levels], [b / n2 for b in baseline.levels])
    return {"delta_pp": delta_pp, "z": z, "psi": psi, "drifting": stats.drifting(delta_pp, z, psi)}


def evidence_floor(min_confidence: float | None, grid: list[float]) -> float | None:
    """docs/metrics.md §6: the largest grid value <= the smallest labeled confidence (null without labels), so
    that no threshold is recommended where there is no evidence (labels only above 0.66 → 0.65, never 0.00)."""
    if min_confidence is None:
        return None
    below = [c for c in grid if c <= min_confidence + 1e-9]
    return max(below) if below else None


def local_pass_rate(blocks: list[tuple[float, int, int]], fitted: list[float], c: float | None) -> float | None:
    """docs/metrics.md §6: the calibrated pass rate *at* confidence `c`: the fitted value (pool-adjacent-violators,
    `stats.isotonic_blocks`) of the block with the smallest confidence >= c; null without one (or for c null)."""
    if c is None:
        return None
    return next((value for (confidence, _, _), value in zip(blocks, fitted) if confidence >= c), None)


def threshold_change(
    blocks: list[tuple[float, int, int]], current: float | None, recommended: float | None
) -> dict[str, Any] | None:
    """docs/metrics.md §6: the labeled events the move from the current to the recommended threshold would move
    between device and cloud (confidence in [low, high)), and how they fared; null when there is no move."""
    if current is None or recommended is None or current == recommended:
        return None
    low, high = min(current, recommended), max(current, recommended)
    n = sum(k for c, k, _ in blocks if low <= c < high)
    passed = sum(p for c, _, p in blocks if low <= c < high)
    band = {"low": low, "high": high, "n": n, "pass_rate": stats.ratio(passed, n), "ci": stats.wilson(passed, n)}
    return {"from": current, "to": recommended, "band": band}


def comparable_span(push: dict[str, Any], at_least: timedelta = timedelta(hours=1)) -> tuple[datetime, datetime]:
    """The span just before a policy push, as long as the push's own (first to last event; at least
    `at_least`): where its baseline is looked for (docs/metrics.md §9)."""
    first = datetime.fromisoformat(push["first_event"].replace("Z", "+00:00"))
    last = datetime.fromisoformat(push["last_event"].replace("Z", "+00:00"))
    length = max(last - first, at_least)
    return first - length, first


def push_baseline(earlier: dict[str, dict[str, Any]], push_version: str) -> str | None:
    """The policy version a push is compared with: of the versions in the comparable span before it
    (`earlier`: §9's by_policy_version over that span), the one that served the most live requests (ties: the
    later first event), never the push itself; None when no other version served a request there. Not the
    latest-but-one version seen: a handful of requests under some other version (a live sample, a canary)
    would stand in for the real baseline."""
    candidates = [(v["requests"], v["first_event"], name) for name, v in earlier.items() if name != push_version]
    candidates = [c for c in candidates if c[0] > 0]
    return max(candidates)[2] if candidates else None


def threshold_change_text(change: dict[str, Any] | None) -> str:
    """One sentence for §6's `threshold_change`: "moving 0.70 → 0.50 serves 55 more labeled requests on the
    device; they passed 33 % [21 %, 46 %]"; empty without a change."""
    if not change:
        return ""
    band = change["band"]
    move = "serves" if change["to"] < change["from"] else "sends"
    where = "more labeled requests on the device" if move == "serves" else "labeled requests to the cloud instead"
    text = f"moving {change['from']:.2f} → {change['to']:.2f} {move} {band['n']} {where}"
    if not band["n"]:
        return text + " (no labeled request lies between the two thresholds)"
    low, high = band["ci"]
    return text + f"; they passed {100 * band['pass_rate']:.0f} % [{100 * low:.0f} %, {100 * high:.0f} %]"


def calibration(
    client,
    window: QueryWindow,
    target: float,
    min_n: int,
    edges: tuple[float, ...] = label_queries.DEFAULT_EDGES,
    window_table: str | None = None,
    local_floor: float = DEFAULT_LOCAL_FLOOR,
    check: bool = True,
) -> dict[str, Any]:
    """docs/metrics.md §6, per task type that has labeled device attempts with a confidence (read from
    `window_table`, the metric set's materialized window; without one, the window is materialized here).
    `check`: each recommendation checked (`checked`); `compute` checks them itself, in its own §3d read."""
    if window_table is None:
        with decision_queries.materialized_window(client, window):
            return calibration(client, window, target, min_n, edges, decision_queries.WINDOW_TABLE, local_floor, check)
    blocks_by_type = label_queries.confidence_blocks(client, window_table)
    served_by_type = label_queries.served_strata(client, window_table, edges)
    found: dict[str, Any] = {}
    for cal in label_queries.calibration(client, window, edges, window_table=window_table):
        total = sum(cal.bucket_n)
        rows, best_so_far, non_monotonic = [], None, []
        for i, (n, passed) in enumerate(zip(cal.bucket_n, cal.bucket_passed)):
            pass_rate = passed / n if n else None
            if pass_rate is not None:
                if best_so_far is not None and pass_rate < best_so_far:
                    non_monotonic.append(i)
                best_so_far = pass_rate if best_so_far is None else max(best_so_far, pass_rate)
            rows.append(
                {
                    "low": float(edges[i]),
                    "high": float(edges[i + 1]),
                    "n": n,
                    "share": stats.ratio(n, total),
                    "pass_rate": pass_rate,
                }
            )
        blocks = blocks_by_type.get(cal.task_type, [])
        fitted = stats.isotonic_blocks(blocks)

        def local(c, blocks=blocks, fitted=fitted):
            return local_pass_rate(blocks, fitted, c)

        floor = evidence_floor(cal.min_confidence, [c for c, _, _ in cal.grid])
        # the cumulative pass rate of what the device would serve, and the requests right at the cut pass too
        recommended = next(
            (
                c
                for c, n, passed in cal.grid
                if floor is not None
                and c >= floor
                and n >= min_n
                and passed / n >= target
                and (local(c) or 0.0) >= local_floor
            ),
            None,
        )
        # §3c: the same rule on the post-stratified pass rate of what each threshold serves (labels pile up in the
        # bands the replay samples, which moves the labeled rate, not the estimate)
        served = [stats.post_stratified(strata) for strata in served_by_type.get(cal.task_type, [])]
        recommended_est = next(
            (
                c
                for (c, n, _), est in zip(cal.grid, served)
                if floor is not None
                and c >= floor
                and n >= min_n
                and est["rate"] is not None
                and est["rate"] >= target
                and (local(c) or 0.0) >= local_floor
            ),
            None,
        )
        # keyed by float | None: no recommendation (None) finds no estimate and takes the empty one
        at: dict[float | None, dict] = {c: est for (c, _, _), est in zip(cal.grid, served)}
        found[cal.task_type] = {
            "recommended_threshold_est": recommended_est,
            "served_pass_est": at.get(recommended_est, dict(stats.EMPTY_ESTIMATE)),
            "threshold_change_est": threshold_change(blocks, cal.current_threshold, recommended_est),
            "buckets": rows,
            "monotonic": not non_monotonic,
            "non_monotonic_buckets": non_monotonic,
            "recommended_threshold": recommended,
            "evidence_floor": floor,
            "current_threshold": cal.current_threshold,
            "target": target,
            "min_n": min_n,
            "local_floor": local_floor,
            "local_pass_rate_at_recommended": local(recommended),
            "local_pass_rate_at_current": local(cal.current_threshold),
            "threshold_change": threshold_change(blocks, cal.current_threshold, recommended),
        }
    if not check:
        return found
    return checked(client, window, found, target, edges, from_window=window_table == decision_queries.WINDOW_TABLE)


def check_cuts(found: dict[str, Any], edges: tuple[float, ...]) -> dict[float, tuple[float, ...]]:
    """Each distinct recommended threshold of `found` (`calibration`'s) → the inner edges its check stratifies on:
    `edges`' inner ones with the threshold added."""
    cuts: dict[float, tuple[float, ...]] = {}
    for detail in found.values():
        threshold = detail["recommended_threshold_est"]
        if threshold is not None and threshold not in cuts:
            cut = round(float(threshold), 6)
            cuts[threshold] = tuple(sorted({round(float(e), 6) for e in edges[1:-1]} | {cut}))
    return dict(sorted(cuts.items()))


def checked(
    client,
    window: QueryWindow,
    found: dict[str, Any],
    target: float,
    edges: tuple[float, ...],
    designed: dict[float, dict[str, dict]] | None = None,
    from_window: bool = False,
) -> dict[str, Any]:
    """docs/metrics.md §6, the recommendation checked against the judge's audit: each task type's
    `recommendation_check` (§3d's missed-fallback estimate over what `recommended_threshold_est` would serve where
    the judge is audited, else §3c's; null without a recommendation) and `recommended_threshold_checked` (the
    recommendation, null when the check withholds it). `designed`: each of `check_cuts`' thresholds → its §3d
    strata (`ppi_strata_sets`), read by the caller beside its own; without it, one §3d read for them all (of the
    materialized window when `from_window`)."""
    cuts = check_cuts(found, edges)
    if designed is None:
        designed = dict(zip(cuts, ppi_queries.ppi_strata_sets(client, window, list(cuts.values()), from_window)))
    for task_type, detail in found.items():
        threshold = detail["recommended_threshold_est"]
        if threshold is None:
            detail["recommendation_check"], detail["recommended_threshold_checked"] = None, None
            continue
        check = ppi.check_recommendation(
            designed[threshold].get(task_type),
            cuts[threshold].index(round(float(threshold), 6)) + 1,  # the first bucket at or above the cut
            threshold,
            target,
            detail["served_pass_est"],
        )
        detail["recommendation_check"] = check
        detail["recommended_threshold_checked"] = None if check["withheld"] else threshold
    return found


def policy_versions(client, start: datetime, end: datetime, task_type: str | None = None) -> dict[str, dict[str, Any]]:
    """docs/metrics.md §9 alone over [start, end): one task type's (None: overall) numbers per policy version, in
    order of first event; `compute`'s `by_policy_version` without the rest of the metric set (a page that needs
    only a push's baseline span skips the rest: 0.5 s on the demo's week)."""
    window = QueryWindow(start, end)
    with decision_queries.materialized_window(client, window, None if task_type is None else (task_type,)):
        versions = decision_queries.by_policy_version(client)
    return {version: _version(row) for version, row in (versions.get(task_type) or {}).items()}


def compute(client, start: datetime, end: datetime, **options: Any) -> dict[str, Any]:
    """Every metric of docs/metrics.md for [start, end), overall and per task type (`options`: those of
    `compute_and_audit`: baseline_days, target, min_n, local_floor, and `materialized`, the caller holding this window
    materialized on `client`, `decisions.materialized_window` narrow or wide, so it is not read again)."""
    return compute_and_audit(client, start, end, **options)[0]


def compute_and_audit(
    client,
    start: datetime,
    end: datetime,
    *,
    baseline_days: float = DEFAULT_BASELINE_DAYS,
    target: float = DEFAULT_TARGET,
    min_n: int = DEFAULT_MIN_N,
    local_floor: float = DEFAULT_LOCAL_FLOOR,
    materialized: bool = False,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """`compute`, and §3d on §6's buckets as `ppi.ppi_estimates` gives it for the same window (read in the same
    statement as the metric set's own §3d): the weekly review's readiness takes it instead of reading it again."""
    window = QueryWindow(start, end)
    baseline_window = QueryWindow(start - timedelta(days=baseline_days), start)
    with nullcontext() if materialized else decision_queries.materialized_window(client, window):
        summary = decision_queries.window_summary(client)
        calls = decision_queries.cloud_calls_per_session(client)
        for key, row in summary.items():
            row["sessions"] = calls[key]["sessions"] if key in calls else 0
        shadow = decision_queries.shadow_by_input_length(client)
        versions = decision_queries.by_policy_version(client)
        checks = decision_queries.validator_failed_by_check(client)
        latency = decision_queries.latency_by_side_and_network(client)
        calibrated = calibration(
            client,
            window,
            target,
            min_n,
            window_table=decision_queries.WINDOW_TABLE,
            local_floor=local_floor,
            check=False,
        )
        strata = decision_queries.label_strata(client, label_queries.DEFAULT_EDGES[1:-1])  # §3c
        # §3d on §6's edges, and each recommendation's check on its own edges, in one read
        cuts = check_cuts(calibrated, label_queries.DEFAULT_EDGES)
        designed, *for_cuts = ppi_queries.ppi_strata_sets(
            client, window, [label_queries.DEFAULT_EDGES[1:-1], *cuts.values()], from_window=True
        )
        checked(client, window, calibrated, target, label_queries.DEFAULT_EDGES, dict(zip(cuts, for_cuts)))
        all_cloud = review_queries.all_cloud_cost(client, window, from_window=True)
        ledger = review_queries.device_ledger(client, window, from_window=True)
    current_levels = {key: decision_queries.LevelCounts.of(row) for key, row in summary.items()}
    baseline_levels = level_hours.baseline_level_counts(client, baseline_window)  # §5, from kept hours

    def group(key):
        g = _group(
            summary.get(key),
            calls.get(key),
            shadow.get(key),
            current_levels.get(key),
            baseline_levels.get(key),
            versions.get(key),
        )
        g["validator_failed_by_check"] = checks.get(key, {})  # §2: which serve-time check failed
        g["cost_usd"].update(all_cloud.get(key) or {})  # §11
        estimates(g, merged_strata(strata) if key is None else strata.get(key))  # §3c
        g.update(ppi.block((ppi.merged(designed) if designed else None) if key is None else designed.get(key)))
        return g

    audited = {
        "overall": ppi.block(ppi.merged(designed) if designed else None),
        "by_task_type": {t: ppi.block(v) for t, v in designed.items()},
    }
    return {
        "window": {"start": iso(start), "end": iso(end)},
        "baseline": {"start": iso(baseline_window.start), "end": iso(baseline_window.end)},
        "overall": group(decision_queries.OVERALL),
        "by_task_type": {t: group(t) for t in sorted(k for k in summary if k is not None)},
        "calibration": calibrated,
        "latency_ms": latency,
        "device_ledger": ledger,  # §10
    }, audited
