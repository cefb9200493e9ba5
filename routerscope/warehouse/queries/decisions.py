"""Queries over `decisions` for one window (docs/metrics.md §1–§5, §7, §8), overall and per task type.

Each query groups by task_type `WITH ROLLUP` (or by grouping sets) with `group_by_use_nulls`, so the row
whose task_type is NULL is the overall one. ROLLUP computes the overall row by merging the per-task-type
aggregation states instead of aggregating every row a second time (measured: the summary in ~60 % of
the CPU time of `GROUPING SETS ((task_type), ())`). Rates are computed here, in SQL, with
`nullIf(denominator, 0)` so that an empty denominator gives NULL, never 0."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from routerscope.core.timeutil import UTC, utc
from routerscope.warehouse.queries.labels import chosen_labels_of, label_source_parameters
from routerscope.warehouse.sql import (
    BASELINE_CTE,
    FIRST_COPY,
    FOLD_CHECK,
    WINDOW_CTE,
    QueryWindow,
    dict_rows,
    named,
    utc_or_none,
    utc_text,
)

OVERALL = None  # the task_type key of the overall row
INPUT_LENGTH_EDGES = (128, 512, 2048)  # docs/metrics.md §7: [0,128), [128,512), [512,2048), [2048,∞)
INPUT_LENGTH_BUCKETS = ("0-128", "128-512", "512-2048", "2048+")

# The metric set reads one window many times (summary, §4, §6–§11). Rather than have every query read
# `decisions FINAL` and join the chosen labels again, the window is read and joined once into a
# session-scoped temporary table, WINDOW_TABLE (`materialized_window`), and the metric queries read that.
# Three steps, measured ~15 % cheaper than one statement with the join: the window's events (the
# columns of WINDOW_CTE and the v2 ones §10/§11 read); the chosen labels of their requests; the two
# joined. The chosen label's columns are 0/NULL where a request has none (LEFT JOIN defaults: labeled
# 0, acceptable and route_ok NULL), as in the per-query joins. The request ids stay: §3d joins the judge's and
# the people's labels on them (routerscope/warehouse/queries/ppi.py).
WINDOW_TABLE = "metric_window"
_EVENTS_TABLE = "metric_window_events"
_LABELS_TABLE = "metric_window_labels"

EXPLORER_COLUMNS = tuple(
    "event_time request_id session_id task_type mode fallback_type reason degrade_level latency_ms attempt_levels "
    "attempt_outcomes attempt_latency_ms confidence threshold network device_tier device_model "
    "cloud_model input_tokens output_tokens cost_usd policy_version app_id answer_check device_input_tokens".split()
)

# Constant pieces the statements below share (named() puts them in before it spells the tables).
FRAGMENTS = {
    "window_cte": WINDOW_CTE,
    "baseline_cte": BASELINE_CTE,
    "first_copy": FIRST_COPY,
    "window_table": WINDOW_TABLE,
    "events_table": _EVENTS_TABLE,
    "labels_table": _LABELS_TABLE,
    "chosen_labels_cte": chosen_labels_of(_EVENTS_TABLE),
    "chosen_fewer_labels_cte": chosen_labels_of(_EVENTS_TABLE, fewer_labels=True),
    "explorer_columns": ", ".join(EXPLORER_COLUMNS),
}

_MATERIALIZE_EVENTS = """
CREATE TEMPORARY TABLE $events_table ENGINE = Memory AS
SELECT event_time, task_type, mode, session_id, request_id, entered_device, fallback_type, reason, degrade_level,
       cloud_calls, confidence, threshold, shadow_agree, input_tokens, latency_ms, network, cost_usd,
       attempt_levels, attempt_outcomes, policy_version,
       schema_version, ttft_ms, device_tier, device_peak_mem_mb, device_thermal_state, device_decode_tps,
       device_prefill_tps, device_cold_start, device_load_ms, all_cloud_cost_usd, answer_check$wide_columns
FROM $decisions $final
WHERE event_time >= {start:DateTime64(3, 'UTC')} AND event_time < {end:DateTime64(3, 'UTC')} $task_filter
  AND $first_copy $stored_by
"""
# FINAL, or not when the window holds nothing it would fold (sql.FOLD_CHECK): then only the rows stored up to
# the derivation the check read; and without FIRST_COPY's condition when, besides, no row of the window has an
# earlier copy (no pair: the usual window, whose events were each sent once), which saves reading every row's
# event_id for it (~0.03 s of CPU on the bench's day).
_FOLDED = {"final": "FINAL", "stored_by": ""}
_UNFOLDED = {"final": "", "stored_by": "AND ingested_at <= {through:DateTime64(3, 'UTC')}"}
# The window restricted to some task types is the what-if's (docs/metrics.md §14 reads only those): the
# sorting key starts with task_type, so the other task types' rows are not read at all.
_TASK_FILTER = "AND task_type IN {task_types:Array(String)}"
# The weekly review's window (routerscope/warehouse/queries/review.py reads it: `materialized_window(wide=True)`):
# the columns of the metric set's and those only the review reads.
WIDE_COLUMNS = ("event_id", "output_tokens", "attempt_latency_ms", "rollout_stage", "device_resident_mem_mb")


def _events_sql(tasks: bool, fold: bool, first: bool, wide: bool) -> str:
    """The events statement restricted to task types or not, folded or not, with FIRST_COPY's condition or not (an
    unfolded read without pairs skips it), with WIDE_COLUMNS or not."""
    name = "materialize_review_window" if wide else "materialize_metric_window"
    return named(
        f"{name}{'_task' if tasks else ''}_events" + ("" if fold else "_unfolded" if first else "_unfolded_unpaired"),
        _MATERIALIZE_EVENTS,
        {
            **FRAGMENTS,
            "task_filter": _TASK_FILTER if tasks else "",
            "wide_columns": ",\n       " + ", ".join(WIDE_COLUMNS) if wide else "",
            **(_FOLDED if fold else _UNFOLDED),
            **({} if first else {"first_copy": "1"}),
        },
    )


# (restricted to task types, folded, with FIRST_COPY) -> statement, the metric set's columns and the review's
_KEYS = [
    (tasks, fold, first) for tasks in (False, True) for fold, first in ((True, True), (False, True), (False, False))
]
MATERIALIZE_EVENTS_SQL = {key: _events_sql(*key, wide=False) for key in _KEYS}
MATERIALIZE_WIDE_EVENTS_SQL = {key: _events_sql(*key, wide=True) for key in _KEYS}
FOLD_CHECK_SQL = named("metric_window_fold_check", FOLD_CHECK)

_MATERIALIZE_LABELS = """
CREATE TEMPORARY TABLE $labels_table ENGINE = Memory AS
WITH $chosen
SELECT request_id, labeled, acceptable, route_ok FROM chosen
"""
MATERIALIZE_LABELS_SQL = named(
    "materialize_metric_window_labels", _MATERIALIZE_LABELS, {**FRAGMENTS, "chosen": FRAGMENTS["chosen_labels_cte"]}
)
# The same labels found from the labeled side, for a window with more events than stored labels
# (labels.chosen_labels_of: `fewer_labels`); `materialize_window` compares the two counts.
MATERIALIZE_FEWER_LABELS_SQL = named(
    "materialize_metric_window_fewer_labels",
    _MATERIALIZE_LABELS,
    {**FRAGMENTS, "chosen": FRAGMENTS["chosen_fewer_labels_cte"]},
)
FEWER_LABELS_SQL = named(
    "metric_window_fewer_labels",
    "SELECT (SELECT count() FROM $labels) < (SELECT count() FROM $events_table)",
    FRAGMENTS,
)

MATERIALIZE_WINDOW_SQL = named(
    "materialize_metric_window",
    """
CREATE TEMPORARY TABLE $window_table ENGINE = Memory AS
SELECT e.*, c.labeled AS labeled, c.acceptable AS acceptable, c.route_ok AS route_ok
FROM $events_table AS e LEFT JOIN $labels_table AS c ON e.request_id = c.request_id
""",
    FRAGMENTS,
)

DROP_WINDOW_SQL = [
    named(f"drop_{table}", "DROP TEMPORARY TABLE IF EXISTS $table", table=table)
    for table in (_EVENTS_TABLE, _LABELS_TABLE, WINDOW_TABLE)
]

SUMMARY_SQL = named(
    "window_summary",
    """
WITH j AS (
    SELECT *,
           mode = 'live' AS live,
           live AND entered_device AND fallback_type IN ('quality', 'timeout') AS judged_fallback,
           live AND entered_device AND fallback_type = 'none' AND degrade_level IN (0, 1) AS device_served
    FROM $window_table
)
SELECT
    task_type,
    -- §1 volumes
    countIf(live) AS requests,
    countIf(live AND entered_device) AS device_entered,
    -- §2 fallback rates over the requests that entered the device
    countIf(live AND entered_device AND fallback_type IN ('quality', 'timeout', 'error')) / nullIf(device_entered, 0)
        AS fallback_rate,
    countIf(live AND entered_device AND fallback_type = 'quality') / nullIf(device_entered, 0) AS quality_fallback_rate,
    countIf(live AND entered_device AND fallback_type = 'timeout') / nullIf(device_entered, 0) AS timeout_fallback_rate,
    countIf(live AND entered_device AND fallback_type = 'error') / nullIf(device_entered, 0) AS error_fallback_rate,
    countIf(live AND fallback_type != 'none') / nullIf(requests, 0) AS naive_fallback_rate,
    countIf(live AND fallback_type = 'capability') / nullIf(requests, 0) AS capability_reject_rate,
    countIf(live AND NOT entered_device AND reason = 'device_unavailable') / nullIf(requests, 0) AS device_bypass_rate,
    -- §3 false and missed fallbacks (the chosen label per request)
    countIf(judged_fallback) AS judged_fallbacks,
    countIf(device_served) AS device_served_count,
    countIf(judged_fallback AND labeled = 1) AS false_fallback_labeled,
    countIf(judged_fallback AND labeled = 1 AND acceptable) AS false_fallbacks,
    -- §3 by fallback type: a quality fallback judged fine is a threshold set too high; a timeout one is latency
    countIf(judged_fallback AND fallback_type = 'quality' AND labeled = 1) AS quality_false_fallback_labeled,
    countIf(judged_fallback AND fallback_type = 'quality' AND labeled = 1 AND acceptable) AS quality_false_fallbacks,
    countIf(judged_fallback AND fallback_type = 'timeout' AND labeled = 1) AS timeout_false_fallback_labeled,
    countIf(judged_fallback AND fallback_type = 'timeout' AND labeled = 1 AND acceptable) AS timeout_false_fallbacks,
    countIf(device_served AND labeled = 1) AS missed_fallback_labeled,
    countIf(device_served AND labeled = 1 AND NOT acceptable) AS missed_fallbacks,
    countIf(live AND route_ok IS NOT NULL) AS route_labeled,
    countIf(live AND route_ok) AS route_correct,
    -- §3b rollback signals: device attempts (levels 0, 1) that failed validation or errored; device-entered
    -- requests that then called the cloud (an attempt at level 2 or 3, whatever its outcome)
    sumIf(arrayCount(l -> l IN (0, 1), attempt_levels), live) AS device_attempts,
    sumIf(arrayCount((l, o) -> l IN (0, 1) AND o IN ('validator_failed', 'error'), attempt_levels, attempt_outcomes),
          live)
        AS offload_failures,
    countIf(live AND entered_device AND arrayExists(l -> l IN (2, 3), attempt_levels)) AS degrade_triggered,
    -- §5 degrade levels (counts; shares below)
    countIf(live AND degrade_level = 0) AS l0,
    countIf(live AND degrade_level = 1) AS l1,
    countIf(live AND degrade_level = 2) AS l2,
    countIf(live AND degrade_level = 3) AS l3,
    countIf(live AND degrade_level = 4) AS l4,
    -- §7 shadow traffic
    countIf(mode = 'shadow' AND shadow_agree IS NOT NULL) AS shadow_compared,
    countIf(mode = 'shadow' AND shadow_agree) / nullIf(shadow_compared, 0) AS shadow_agreement_rate,
    -- §8 cost
    sumIf(cost_usd, live) AS cost_total,
    countIf(live AND cost_usd IS NOT NULL) AS cost_reported
FROM j
GROUP BY task_type WITH ROLLUP
ORDER BY task_type
SETTINGS group_by_use_nulls = 1
""",
    FRAGMENTS,
)

# §9: the §1–§3 numbers per policy_version (overall and per task type), so a threshold push can be
# attributed; first and last event time of each version order them. ROLLUP over (version, task type) gives each
# version's overall row by merging its per-task-type states (HAVING drops the grand total): ~25 % less CPU
# than the grouping sets ((task_type, policy_version), (policy_version)) it replaces, the same rows.
BY_POLICY_VERSION_SQL = named(
    "by_policy_version",
    """
WITH j AS (
    SELECT *,
           entered_device AND fallback_type IN ('quality', 'timeout') AS judged_fallback,
           entered_device AND fallback_type = 'none' AND degrade_level IN (0, 1) AS device_served
    FROM $window_table
    WHERE mode = 'live'
)
SELECT
    task_type,
    policy_version,
    count() AS requests,
    countIf(entered_device) AS device_entered,
    countIf(entered_device AND fallback_type IN ('quality', 'timeout', 'error')) / nullIf(device_entered, 0)
        AS fallback_rate,
    countIf(judged_fallback AND labeled = 1) AS false_fallback_labeled,
    countIf(judged_fallback AND labeled = 1 AND acceptable) AS false_fallbacks,
    countIf(device_served AND labeled = 1) AS missed_fallback_labeled,
    countIf(device_served AND labeled = 1 AND NOT acceptable) AS missed_fallbacks,
    countIf(route_ok IS NOT NULL) AS route_labeled,
    countIf(route_ok) AS route_correct,
    min(event_time) AS first_event,
    max(event_time) AS last_event
FROM j
GROUP BY policy_version, task_type WITH ROLLUP
HAVING policy_version IS NOT NULL
ORDER BY task_type, first_event, policy_version
SETTINGS group_by_use_nulls = 1
""",
    FRAGMENTS,
)

# §4: per session, the sum of cloud_calls of its live events in the window (per task type: of
# its events of that type); then the mean and exact quantiles of those sums, and §1's distinct sessions
# (the number of those per-session rows: exact, and half the summary's time as a uniqExact there).
# The per-task-type sums group by one string key, task type and session joined by a space (a task
# type matches ^[a-z][a-z0-9_]*$, so the first space ends it): measured ~3x cheaper than grouping by
# the pair (LowCardinality, String), which takes ClickHouse's serialized-key path, or by grouping sets.
CLOUD_CALLS_SQL = named(
    "cloud_calls_per_session",
    """
SELECT task, count() AS sessions, avg(calls) AS mean, quantilesExactInclusive(0.5, 0.95)(calls) AS q
FROM (
    SELECT any(task_type)::Nullable(String) AS task, sum(cloud_calls) AS calls
    FROM $window_table WHERE mode = 'live'
    GROUP BY concat(task_type, ' ', session_id)
    UNION ALL
    SELECT NULL AS task, sum(cloud_calls) AS calls
    FROM $window_table WHERE mode = 'live'
    GROUP BY session_id
)
GROUP BY task
ORDER BY task
""",
    FRAGMENTS,
)

# §4 as a distribution: how many sessions made 0, 1, 2, … cloud calls (the weekly tuning histogram).
CLOUD_CALLS_HISTOGRAM_SQL = named(
    "cloud_calls_histogram",
    """
WITH $window_cte
SELECT calls, count() AS sessions
FROM (
    SELECT session_id, sum(cloud_calls) AS calls
    FROM w WHERE mode = 'live' AND ({task:String} = '' OR task_type = {task:String})
    GROUP BY session_id
)
GROUP BY calls
ORDER BY calls
""",
    FRAGMENTS,
)

SHADOW_BY_LENGTH_SQL = named(
    "shadow_agreement_by_input_length",
    """
SELECT task_type, arrayCount(e -> e <= input_tokens, {edges:Array(UInt64)}) AS bucket,
       count() AS compared, countIf(shadow_agree) / count() AS agreement
FROM $window_table WHERE mode = 'shadow' AND shadow_agree IS NOT NULL
GROUP BY GROUPING SETS ((task_type, bucket), (bucket))
ORDER BY task_type, bucket
SETTINGS group_by_use_nulls = 1
""",
    FRAGMENTS,
)

# §8: latency quantiles by served side × network, overall only (the on-call view's table).
LATENCY_SQL = named(
    "latency_by_side_and_network",
    """
SELECT if(degrade_level IN (0, 1), 'device', 'cloud') AS side, ifNull(network, 'unknown') AS net,
       count() AS n,
       quantilesExactInclusive(0.5, 0.95, 0.99)(latency_ms) AS q
FROM $window_table WHERE mode = 'live' AND degrade_level IN (0, 1, 2, 3)
GROUP BY side, net
ORDER BY side, net
""",
    FRAGMENTS,
)

# §5 baseline: level counts only (of the events FINAL folds: BASELINE_CTE has no look-back).
LEVELS_SQL = named(
    "degrade_level_counts",
    """
WITH $baseline_cte
SELECT task_type, count() AS requests,
       countIf(degrade_level = 0) AS l0, countIf(degrade_level = 1) AS l1, countIf(degrade_level = 2) AS l2,
       countIf(degrade_level = 3) AS l3, countIf(degrade_level = 4) AS l4
FROM w WHERE mode = 'live'
GROUP BY task_type WITH ROLLUP
ORDER BY task_type
SETTINGS group_by_use_nulls = 1
""",
    FRAGMENTS,
)


@dataclass(frozen=True)
class LevelCounts:
    requests: int
    levels: tuple[int, int, int, int, int]  # L0..L4

    @classmethod
    def of(cls, row: dict[str, Any]) -> LevelCounts:
        """From a row with `requests` and `l0`..`l4`."""
        l0, l1, l2, l3, l4 = (int(row[f"l{i}"]) for i in range(5))
        return cls(int(row["requests"]), (l0, l1, l2, l3, l4))


def drop_window(client) -> None:
    for sql in DROP_WINDOW_SQL:
        client.command(sql)


def events_statement(
    client, window: QueryWindow, task_types: tuple[str, ...] | None = None, wide: bool = False
) -> tuple[str, dict]:
    """The statement that reads the window's events into the events table, and its parameters: FINAL, or
    not when sql.FOLD_CHECK finds nothing in the window FINAL would fold (and then without FIRST_COPY's
    condition when no row of the window has an earlier copy); `wide`: with WIDE_COLUMNS."""
    parameters: dict = window.parameters()
    through, fold, paired = client.query(FOLD_CHECK_SQL, parameters=parameters).result_rows[0]
    if not fold:
        parameters["through"] = utc_text(utc(through))
    if task_types is not None:
        parameters["task_types"] = list(task_types)
    statements = MATERIALIZE_WIDE_EVENTS_SQL if wide else MATERIALIZE_EVENTS_SQL
    return statements[task_types is not None, bool(fold), bool(fold or paired)], parameters


def materialize_window(
    client, window: QueryWindow, task_types: tuple[str, ...] | None = None, wide: bool = False
) -> None:
    """Create WINDOW_TABLE for `window` (see MATERIALIZE_WINDOW_SQL), of `task_types` only when given, with
    WIDE_COLUMNS besides when `wide`; drop it with `drop_window`."""
    drop_window(client)
    client.command(*events_statement(client, window, task_types, wide))
    fewer_labels = client.query(FEWER_LABELS_SQL).result_rows[0][0]
    labels_sql = MATERIALIZE_FEWER_LABELS_SQL if fewer_labels else MATERIALIZE_LABELS_SQL
    client.command(labels_sql, parameters=label_source_parameters())
    client.command(MATERIALIZE_WINDOW_SQL)
    client.command(DROP_WINDOW_SQL[0])  # the events and labels tables served only the join
    client.command(DROP_WINDOW_SQL[1])


@contextmanager
def materialized_window(
    client, window: QueryWindow, task_types: tuple[str, ...] | None = None, wide: bool = False
) -> Iterator[None]:
    """The window's de-duplicated events (of `task_types` only, when given) joined to their chosen labels,
    as the session's temporary table `WINDOW_TABLE`, for the metric queries below (which read only that
    table) and, `wide`, the weekly review's (queries/review.py, `from_window`); dropped after."""
    try:
        materialize_window(client, window, task_types, wide)
        yield
    finally:
        drop_window(client)


# §3c: the strata the population estimates are post-stratified on — task type × confidence bucket (§6's edges,
# bucket -1 for a null confidence) — with, per measure, the population's events in the stratum (N), those with
# a chosen label (n) and the hits among them (k): `ra` every live event (labeled: its chosen label has a route
# verdict; hit: the route was right), `ff` the judged fallbacks (hit: acceptable), `qf` the quality fallbacks
# alone, `mf` the device-served (hit: not acceptable). Over the materialized window.
_STRATA = """
WITH j AS (
    SELECT task_type, fallback_type, labeled, acceptable, route_ok,
           if(confidence IS NULL, -1, $bucket) AS bucket,
           entered_device AND fallback_type IN ('quality', 'timeout') AS judged_fallback,
           entered_device AND fallback_type = 'none' AND degrade_level IN (0, 1) AS device_served
    FROM $window_table
    WHERE mode = 'live'
)
SELECT task_type, bucket,
       count() AS ra_N,
       countIf(route_ok IS NOT NULL) AS ra_n,
       countIf(route_ok) AS ra_k,
       countIf(judged_fallback) AS ff_N,
       countIf(judged_fallback AND labeled = 1) AS ff_n,
       countIf(judged_fallback AND labeled = 1 AND acceptable) AS ff_k,
       countIf(judged_fallback AND fallback_type = 'quality') AS qf_N,
       countIf(judged_fallback AND fallback_type = 'quality' AND labeled = 1) AS qf_n,
       countIf(judged_fallback AND fallback_type = 'quality' AND labeled = 1 AND acceptable) AS qf_k,
       countIf(device_served) AS mf_N,
       countIf(device_served AND labeled = 1) AS mf_n,
       countIf(device_served AND labeled = 1 AND NOT acceptable) AS mf_k
FROM j
GROUP BY task_type, bucket
ORDER BY task_type, bucket
"""
STRATA_MEASURES = ("ra", "ff", "qf", "mf")


@cache
def strata_sql(edges: int) -> str:
    """The §3c strata statement for `edges` inner edges, bound as {e0:Float64}, {e1:Float64}, …: a confidence's
    bucket is the number of edges at or below it, spelled as that many comparisons (about a quarter less CPU
    for the whole statement than `arrayCount(e -> e <= confidence, edges)`, a lambda called per event)."""
    bucket = " + ".join(f"(confidence >= {{e{i}:Float64}})" for i in range(edges)) or "0"
    return named("label_strata", _STRATA, {**FRAGMENTS, "bucket": f"toInt8({bucket})"})


def label_strata(client, inner_edges: tuple[float, ...]) -> dict[str, dict[str, list[tuple[int, int, int]]]]:
    """§3c (materialized window): task_type → measure (`ra`, `ff`, `qf`, `mf`) → [(N_h, n_h, k_h)] per confidence
    bucket of `inner_edges` (§6's edges without 0 and 1), null confidence its own stratum."""
    found: dict[str, dict[str, list[tuple[int, int, int]]]] = {}
    parameters = {f"e{i}": float(edge) for i, edge in enumerate(inner_edges)}
    for row in dict_rows(client, strata_sql(len(inner_edges)), parameters):
        per = found.setdefault(row["task_type"], {m: [] for m in STRATA_MEASURES})
        for m in STRATA_MEASURES:
            per[m].append((int(row[f"{m}_N"]), int(row[f"{m}_n"]), int(row[f"{m}_k"])))
    return found


def window_summary(client) -> dict[str | None, dict[str, Any]]:
    """task_type (None: overall) → the §1/§2/§3/§5/§7/§8 columns of SUMMARY_SQL (materialized window);
    §1's `sessions` comes with `cloud_calls_per_session`."""
    return {row.pop("task_type"): row for row in dict_rows(client, SUMMARY_SQL, {})}


def by_policy_version(client) -> dict[str | None, dict[str, dict[str, Any]]]:
    """task_type (None: overall) → policy_version → the §9 columns, versions in order of first event
    (materialized window)."""
    found: dict[str | None, dict[str, dict[str, Any]]] = {}
    for row in dict_rows(client, BY_POLICY_VERSION_SQL, {}):
        found.setdefault(row.pop("task_type"), {})[row.pop("policy_version")] = row
    return found


# The live validator_failed fallbacks by the serve-time check that failed (contract v2 `answer_check`, migration
# 0060; docs/metrics.md §2): `unnamed` for events that do not name it (routers from before the checks, v1).
VALIDATOR_FAILED_BY_CHECK_SQL = named(
    "validator_failed_by_check",
    """
SELECT task_type, ifNull(answer_check, 'unnamed') AS check, count() AS n
FROM $window_table
WHERE mode = 'live' AND reason = 'validator_failed'
GROUP BY task_type, check
ORDER BY task_type, check
""",
    FRAGMENTS,
)


def validator_failed_by_check(client) -> dict[str | None, dict[str, int]]:
    """task_type (None: overall) → serve-time check → live `validator_failed` fallbacks (materialized window)."""
    found: dict[str | None, dict[str, int]] = {}
    for row in dict_rows(client, VALIDATOR_FAILED_BY_CHECK_SQL, {}):
        for key in (row["task_type"], None):
            checks = found.setdefault(key, {})
            checks[row["check"]] = checks.get(row["check"], 0) + int(row["n"])
    return {key: dict(sorted(checks.items())) for key, checks in found.items()}


def cloud_calls_per_session(client) -> dict[str | None, dict[str, Any]]:
    """§4 (materialized window): task_type (None: overall) → mean, p50, p95, and §1's `sessions` (the
    distinct sessions with live events; a task type without live events has no entry)."""
    return {
        row["task"]: {
            "sessions": int(row["sessions"]),
            "mean": float(row["mean"]),
            "p50": float(row["q"][0]),
            "p95": float(row["q"][1]),
        }
        for row in dict_rows(client, CLOUD_CALLS_SQL, {})
    }


def cloud_calls_histogram(client, window: QueryWindow, task_type: str = "") -> list[tuple[int, int]]:
    """(cloud calls per session, sessions) pairs, ascending; one task type's events or ('') all."""
    rows = dict_rows(client, CLOUD_CALLS_HISTOGRAM_SQL, {**window.parameters(), "task": task_type})
    return [(int(r["calls"]), int(r["sessions"])) for r in rows]


def shadow_by_input_length(client) -> dict[str | None, dict[str, float]]:
    """§7 by input length (materialized window)."""
    found: dict[str | None, dict[str, float]] = {}
    for row in dict_rows(client, SHADOW_BY_LENGTH_SQL, {"edges": list(INPUT_LENGTH_EDGES)}):
        found.setdefault(row["task_type"], {})[INPUT_LENGTH_BUCKETS[row["bucket"]]] = float(row["agreement"])
    return found


def latency_by_side_and_network(client) -> dict[str, dict[str, dict[str, float]]]:
    """§8 (materialized window)."""
    found: dict[str, dict[str, dict[str, float]]] = {}
    for row in dict_rows(client, LATENCY_SQL, {}):
        p50, p95, p99 = row["q"]
        found.setdefault(row["side"], {})[row["net"]] = {"n": int(row["n"]), "p50": p50, "p95": p95, "p99": p99}
    return found


def level_counts(client, window: QueryWindow) -> dict[str | None, LevelCounts]:
    return {row["task_type"]: LevelCounts.of(row) for row in dict_rows(client, LEVELS_SQL, window.parameters())}


# -- single reads: the newest decision, the dashboard's explorer and filters ------------------------

# The newest decision's event_time, not after `horizon` when one is given (an event dated further ahead
# is a device clock error: it would hide stale ingest for good), of live traffic only when asked.
NEWEST_EVENT_SQL = named(
    "newest_decision",
    """
SELECT max(event_time) FROM $decisions
WHERE ({horizon:Nullable(DateTime64(3, 'UTC'))} IS NULL OR event_time <= {horizon:Nullable(DateTime64(3, 'UTC'))})
  AND (NOT {live_only:Bool} OR mode = 'live')
""",
)


def newest_event(client, horizon: datetime | None = None, live_only: bool = False) -> datetime | None:
    """The newest decision's event_time (aware, UTC) not after `horizon`; None when there is none."""
    parameters = {"horizon": None if horizon is None else utc_text(horizon), "live_only": live_only}
    return utc_or_none(client.query(NEWEST_EVENT_SQL, parameters=parameters).result_rows[0][0])


LOAD_SUMMARY_SQL = named("decisions_loaded", "SELECT max(ingested_at), count() FROM $decisions")


def load_summary(client) -> tuple[datetime | None, int]:
    """When the newest decision row was loaded (None before the first), and the rows stored."""
    last_load, rows = client.query(LOAD_SUMMARY_SQL).result_rows[0]
    return utc_or_none(last_load), int(rows)


# The explorer: decisions since `start`, newest first, each filter a bound value ('' or -1: any).
_FAR_FUTURE = datetime(2299, 12, 31, tzinfo=UTC)  # DateTime64's last day: "no end"
# The explorer's filters over [start, end); '' (or level -1) means any.
_EXPLORER_WHERE = """
WHERE event_time >= {start:DateTime64(3, 'UTC')} AND event_time < {end:DateTime64(3, 'UTC')}
  AND ({task:String} = '' OR task_type = {task:String})
  AND ({fb:String} = '' OR fallback_type = {fb:String})
  AND ({reason:String} = '' OR reason = {reason:String})
  AND ({level:Int8} < 0 OR degrade_level = {level:Int8})
  AND ({net:String} = '' OR network = {net:String})
  AND ({tier:String} = '' OR device_tier = {tier:String})
  AND ({rid:String} = '' OR position(request_id, {rid:String}) > 0 OR request_id = {ridh:String})
  AND ({sid:String} = '' OR session_id = {sid:String} OR session_id = {sidh:String})
  AND ({pv:String} = '' OR policy_version = {pv:String})
  AND ({app:String} = '' OR app_id = {app:String})
  AND ({mode:String} = '' OR mode = {mode:String})
"""
EXPLORER_SQL = named(
    "decisions_explorer",
    """
SELECT $explorer_columns
FROM $decisions FINAL
$explorer_where
ORDER BY event_time DESC, request_id
LIMIT {limit:UInt32} OFFSET {offset:UInt64}
""",
    {**FRAGMENTS, "explorer_where": _EXPLORER_WHERE},
)
EXPLORER_COUNT_SQL = named(
    "decisions_explorer_count",
    "SELECT count() FROM $decisions FINAL $explorer_where",
    {"explorer_where": _EXPLORER_WHERE},
)
# The explorer's time histogram: the matching decisions per bucket of {bucket_s} seconds (the range cut in ~60).
EXPLORER_HISTOGRAM_SQL = named(
    "decisions_explorer_histogram",
    """
SELECT toStartOfInterval(event_time, toIntervalSecond({bucket_s:UInt32}), 'UTC') AS bucket, mode, count() AS decisions
FROM $decisions FINAL $explorer_where
GROUP BY bucket, mode
ORDER BY bucket, mode
""",
    {"explorer_where": _EXPLORER_WHERE},
)


@dataclass(frozen=True)
class ExplorerFilter:
    """The explorer's filters; '' (or level -1) means any. `request_id` matches a substring; the session,
    policy version and app match exactly. `session_hash` / `request_hash`: the searched id as the SDK
    records it (its pseudonym, docs/operations.md), matched exactly besides the id as typed."""

    task_type: str = ""
    fallback_type: str = ""
    reason: str = ""
    level: int = -1
    network: str = ""
    device_tier: str = ""
    request_id: str = ""
    session_id: str = ""
    policy_version: str = ""
    app_id: str = ""
    mode: str = ""  # live or shadow
    session_hash: str = ""
    request_hash: str = ""


def _explorer_parameters(start: datetime, end: datetime, where: ExplorerFilter) -> dict[str, Any]:
    return {
        "start": utc_text(start),
        "end": utc_text(end),
        "task": where.task_type,
        "fb": where.fallback_type,
        "reason": where.reason,
        "level": where.level,
        "net": where.network,
        "tier": where.device_tier,
        "rid": where.request_id,
        "ridh": where.request_hash or where.request_id,
        "sid": where.session_id,
        "sidh": where.session_hash or where.session_id,
        "pv": where.policy_version,
        "app": where.app_id,
        "mode": where.mode,
    }


def explorer(
    client,
    start: datetime,
    where: ExplorerFilter = ExplorerFilter(),
    limit: int = 200,
    end: datetime | None = None,
    offset: int = 0,
) -> list[dict]:
    """Decisions in [start, end) (no end: up to any time) that pass `where`, newest first (EXPLORER_COLUMNS):
    `limit` of them from position `offset` (a page)."""
    parameters = _explorer_parameters(start, end or _FAR_FUTURE, where)
    return dict_rows(client, EXPLORER_SQL, {**parameters, "limit": limit, "offset": offset})


def explorer_count(client, start: datetime, end: datetime, where: ExplorerFilter = ExplorerFilter()) -> int:
    """How many decisions in [start, end) pass `where` (the explorer's total, for paging)."""
    return int(client.query(EXPLORER_COUNT_SQL, parameters=_explorer_parameters(start, end, where)).result_rows[0][0])


def explorer_histogram(
    client, start: datetime, end: datetime, where: ExplorerFilter = ExplorerFilter(), buckets: int = 60
) -> tuple[int, list[tuple[datetime, str, int]]]:
    """The decisions in [start, end) that pass `where`, counted per time bucket and mode (live / shadow): (the
    bucket's length in seconds — a whole minute, about `buckets` of them over the range — and the rows
    (bucket start, mode, decisions))."""
    seconds = max(60, round((end - start).total_seconds() / buckets / 60) * 60)
    parameters = {**_explorer_parameters(start, end, where), "bucket_s": seconds}
    rows = client.query(EXPLORER_HISTOGRAM_SQL, parameters=parameters).result_rows
    return seconds, [(utc(b), m, int(n)) for b, m, n in rows]


DEVICE_TIERS_SQL = named(
    "device_tiers",
    "SELECT DISTINCT device_tier FROM $decisions WHERE device_tier IS NOT NULL ORDER BY device_tier",
)


def device_tiers(client) -> list[str]:
    """The device tiers seen in the decisions, sorted."""
    return [row[0] for row in client.query(DEVICE_TIERS_SQL).result_rows]


STORED_IDS_SQL = named(
    "decisions_stored_ids", "SELECT DISTINCT toString(event_id) FROM $decisions WHERE event_id IN {ids:Array(UUID)}"
)


def stored_event_ids(client, event_ids: list[str]) -> set[str]:
    """Which of `event_ids` the decisions table holds (any copy): the OTLP step maps a trace only once."""
    if not event_ids:
        return set()
    rows = client.query(STORED_IDS_SQL, parameters={"ids": sorted(set(event_ids))}).result_rows
    return {r[0] for r in rows}
