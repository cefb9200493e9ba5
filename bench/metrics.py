"""Metrics benchmark: prints JSON figures measured in one run on the same warehouse.

    .venv/bin/python bench/metrics.py [--rows 10000000] [--days 8] [--per-query]

Fills a fresh embedded warehouse with generated decisions spread over `--days` days (direct
INSERT … SELECT, no Kafka) and labels for 2 % of them, derives which copies come first as a load run's end
does (`derive_copies_seconds`), then times (a) a plain
`SELECT count() FROM decisions FINAL` over the rows the metric set reads (the day and its baseline) and
(b) the full metric set of docs/metrics.md for the last day with its 7-day baseline
(`routerscope.warehouse.analytics.metrics.compute`), and reports their ratio (of wall times, and of the CPU
time of this process, which holds the embedded warehouse) and the RSS (best of 3; the
first call, which also counts the baseline's hours and keeps them, `metrics_1d_first_call_seconds`); also the
metric set of one 5-minute window (what the pipeline computes every 5 minutes) against the same count.
`peak_rss_mb` is the process's whole peak, the fill's included; `metrics_peak_rss_mb` the peak from the first
metric set on (the count, the day's metric sets and the 5-minute ones, over the filled warehouse).
With `--per-query`, also the best-of-3 seconds of each step of the metric set (where the time goes).
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import sys
import tempfile
import time
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from routerscope.core import names  # noqa: E402
from routerscope.core.settings import Settings  # noqa: E402
from routerscope.warehouse.analytics import metrics  # noqa: E402
from routerscope.warehouse.analytics.metrics import compute  # noqa: E402
from routerscope.warehouse.client import open_warehouse  # noqa: E402
from routerscope.warehouse.queries import decision_copies, level_hours  # noqa: E402
from routerscope.warehouse.queries import decisions as decision_queries  # noqa: E402
from routerscope.warehouse.queries import review as review_queries  # noqa: E402
from routerscope.warehouse.sql import QueryWindow, named, utc_text  # noqa: E402

END = datetime(2026, 11, 29, tzinfo=UTC)

# Generated decisions: five task types, ~10 % capability misses, ~12 % device fallbacks, 1 % shadow.
FILL_DECISIONS = """
INSERT INTO routerscope.decisions ({columns})
SELECT
    generateUUIDv4(number) AS event_id,
    toDateTime64({start:DateTime64(3, 'UTC')}, 3, 'UTC')
        + toIntervalMillisecond(intDiv(number * {span_ms:UInt64}, {rows:UInt64})) AS event_time,
    1 AS schema_version,
    concat('r', toString(number)) AS request_id,
    concat('s', toString(number % 200000)) AS session_id,
    ['intent_classify', 'short_reply', 'extract_fields', 'rewrite', 'long_summary'][number % 5 + 1] AS task_type,
    if(number % 100 = 0, 'shadow', 'live') AS mode,
    number % 10 != 9 AS entered_device,
    multiIf(number % 10 = 9, 'capability', number % 25 = 1, 'quality', number % 25 = 2, 'timeout',
            number % 50 = 3, 'error', 'none') AS fallback_type,
    multiIf(number % 10 = 9, 'capability_miss', number % 25 = 1, 'low_confidence', number % 25 = 2, 'device_timeout',
            number % 50 = 3, 'device_error', 'default') AS reason,
    toUInt8(multiIf(number % 10 = 9, 2, number % 25 IN (1, 2), 2, number % 50 = 3, 3,
                    number % 40 = 5, 1, 0)) AS degrade_level,
    [degrade_level] AS attempt_levels, ['ok'] AS attempt_outcomes, [100.0] AS attempt_latency_ms,
    toUInt32(degrade_level >= 2) AS cloud_calls,
    if(number % 10 = 9, NULL, (number % 1000) / 1000) AS confidence,
    'logprob' AS confidence_source,
    0.7 AS threshold,
    2000 AS deadline_ms, 100 AS elapsed_ms, 50 + number % 900 AS latency_ms, NULL AS ttft_ms,
    number % 3000 AS input_tokens, 20 AS output_tokens,
    NULL AS app_id, NULL AS app_version, ['wifi', 'cellular', 'weak'][number % 3 + 1] AS network,
    'mid' AS device_tier, false AS has_pii, '2026-11-01.1' AS policy_version,
    'gemma3-270m' AS device_model, if(degrade_level >= 2, 'cloud-small', NULL) AS cloud_model,
    if(number % 100 = 0, number % 7 != 0, NULL) AS shadow_agree,
    NULL AS breaker_device, NULL AS breaker_cloud, 0.0001 * cloud_calls AS cost_usd,
    NULL AS trace_id, NULL AS span_id,
    NULL AS device_peak_mem_mb, NULL AS device_thermal_state, NULL AS device_decode_tps, NULL AS device_prefill_tps,
    NULL AS device_cold_start, NULL AS device_load_ms, NULL AS all_cloud_cost_usd, NULL AS rollout_stage,
    NULL AS device_resident_mem_mb,
    'router.decisions.v1' AS kafka_topic, toUInt32(number % 3) AS kafka_partition, number AS kafka_offset,
    now64(3) AS ingested_at
FROM numbers({rows:UInt64})
"""
# The columns the generator fills, by name: a column added to the table later keeps its default here instead of
# shifting every generated value one place.
FILL_DECISIONS = FILL_DECISIONS.replace("{columns}", ", ".join(re.findall(r"\bAS (\w+)", FILL_DECISIONS)))


FILL_LABELS = """
INSERT INTO routerscope.labels
SELECT generateUUIDv4(number),
       toDateTime64({start:DateTime64(3, 'UTC')}, 3, 'UTC')
           + toIntervalMillisecond(intDiv(number * {span_ms:UInt64}, {rows:UInt64})) + toIntervalHour(1),
       1, concat('r', toString(number)), ['human_review', 'validator'][number % 2 + 1],
       number % 1000 > 300, number % 3 != 0, NULL,
       'router.labels.v1', toUInt32(number % 3), number, now64(3)
FROM numbers({rows:UInt64}) WHERE number % 50 = 0
"""


def timed(fn, repeat=3):
    """(best seconds of `repeat` calls, the last call's value)."""
    best, _, value = timed_with_cpu(fn, repeat)
    return best, value


def timed_with_cpu(fn, repeat=3):
    """(best wall seconds, best CPU seconds of this process, every thread, the last call's value) of `repeat`
    calls. The embedded warehouse runs in this process, so its CPU is the statement's work: a figure that other
    work on the machine's two cores moves far less than the wall time (docs/benchmarks.md)."""
    best = best_cpu = None
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        value = fn()
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        best = elapsed if best is None else min(best, elapsed)
        best_cpu = cpu if best_cpu is None else min(best_cpu, cpu)
    return best, best_cpu, value


def reset_peak_rss() -> None:
    """Start this process's peak RSS (VmHWM) again from its current RSS (Linux: /proc/self/clear_refs)."""
    Path("/proc/self/clear_refs").write_text("5")


def peak_rss_mb() -> float | None:
    """This process's peak RSS since the last reset, MB (None where /proc does not say)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return None


def settle(client, timeout_s: float = 120) -> None:
    """Time a settled warehouse, as a running system mostly is: let background merges finish."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and client.query("SELECT count() FROM system.merges").result_rows[0][0]:
        time.sleep(0.5)


def without_lookback(fn):
    """`fn()` with the metric window read as it was before the look-back (FINAL alone)."""
    saved = dict(decision_queries.MATERIALIZE_EVENTS_SQL)
    for tasks, fold, first in saved:
        if not tasks:
            decision_queries.MATERIALIZE_EVENTS_SQL[tasks, fold, first] = named(
                "materialize_metric_window_events_without_lookback",
                decision_queries._MATERIALIZE_EVENTS,
                {
                    **decision_queries.FRAGMENTS,
                    "task_filter": "",
                    "wide_columns": "",
                    "first_copy": "1",
                    **(decision_queries._FOLDED if fold else decision_queries._UNFOLDED),
                },
            )
    try:
        return fn()
    finally:
        decision_queries.MATERIALIZE_EVENTS_SQL.update(saved)


def pending(client, fn):
    """`fn()` with every stored decision pending, as after a load killed before deriving its later copies
    (the window then applies the 7-day look-back itself: routerscope/warehouse/sql.py, FIRST_COPY); the
    record of the derivation is put back after."""
    table = f"{names.DATABASE}.{names.TABLE_DECISION_COPIES_DERIVED}"
    through = client.query(f"SELECT max(derived_through) FROM {table}").result_rows[0][0]
    client.command(f"TRUNCATE TABLE {table}")
    try:
        return fn()
    finally:
        client.command(
            decision_copies.RECORD_SQL, parameters={"through": through.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]}
        )


def per_query_seconds(client, timed) -> dict[str, float]:
    """Each step of `compute` on its own (best of 3): the materialized window, the queries over it and
    the baseline scan."""
    window = QueryWindow(END - timedelta(days=1), END)
    baseline = QueryWindow(END - timedelta(days=8), END - timedelta(days=1))
    five_minutes = QueryWindow(END - timedelta(minutes=5), END)

    steps = {
        "materialize_window": lambda: decision_queries.materialize_window(client, window),
        # the same read without the look-back of docs/metrics.md (its cost, in the same run)
        "materialize_window_without_lookback": lambda: without_lookback(
            lambda: decision_queries.materialize_window(client, window)
        ),
        "materialize_5m_window": lambda: decision_queries.materialize_window(client, five_minutes),
        "materialize_5m_window_without_lookback": lambda: without_lookback(
            lambda: decision_queries.materialize_window(client, five_minutes)
        ),
        # the same two reads while rows are pending (a load killed before deriving): the look-back's cost
        "materialize_window_pending": lambda: pending(
            client, lambda: decision_queries.materialize_window(client, window)
        ),
        "materialize_5m_window_pending": lambda: pending(
            client, lambda: decision_queries.materialize_window(client, five_minutes)
        ),
        # the statements below read the day's window (the steps above leave the last one read in place)
        "materialize_window_again": lambda: decision_queries.materialize_window(client, window),
        "summary": lambda: decision_queries.window_summary(client),
        "by_policy_version": lambda: decision_queries.by_policy_version(client),
        "cloud_calls_per_session": lambda: decision_queries.cloud_calls_per_session(client),
        "shadow_by_input_length": lambda: decision_queries.shadow_by_input_length(client),
        "latency": lambda: decision_queries.latency_by_side_and_network(client),
        "calibration": lambda: metrics.calibration(
            client, window, 0.95, 30, window_table=decision_queries.WINDOW_TABLE
        ),
        # §5's baseline read FINAL at once, and as compute adds it up from the hours kept by its first call
        "baseline_levels_7d": lambda: decision_queries.level_counts(client, baseline),
        "baseline_levels_7d_kept_hours": lambda: level_hours.baseline_level_counts(client, baseline),
        "all_cloud_cost": lambda: review_queries.all_cloud_cost(client, window, from_window=True),
        "device_ledger": lambda: review_queries.device_ledger(client, window, from_window=True),
    }
    try:
        return {name: round(timed(step)[0], 3) for name, step in steps.items()}
    finally:
        decision_queries.drop_window(client)


@contextmanager
def filled_warehouse(rows: int, days: int):
    """A fresh embedded warehouse holding `rows` generated decisions over the `days` days before END and labels
    for 2 % of them, settled; yields (client, seconds the fill took). `bench/whatif.py` measures on the same."""
    start = END - timedelta(days=days)
    with tempfile.TemporaryDirectory(prefix="routerscope-bench-") as tmp:
        settings = Settings.from_env({"ROUTERSCOPE_HOME": tmp})
        with open_warehouse(settings, purpose="bench", migrated=True) as client:
            params = {"start": utc_text(start), "span_ms": days * 86_400_000, "rows": rows}
            print(f"bench: inserting {rows} decisions over {days} days ...", file=sys.stderr, flush=True)
            t = time.perf_counter()
            client.command(FILL_DECISIONS, parameters=params)
            client.command(FILL_LABELS, parameters=params)
            fill_s = time.perf_counter() - t
            settle(client)
            # which copies come first, as a load run ends by deriving it
            # (routerscope/warehouse/queries/decision_copies.py)
            t = time.perf_counter()
            decision_copies.derive(client)
            filled_warehouse.derive_seconds = time.perf_counter() - t
            yield client, fill_s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--days", type=int, default=8)
    parser.add_argument("--per-query", action="store_true", help="also time each step of the metric set")
    args = parser.parse_args()
    with filled_warehouse(args.rows, args.days) as (client, fill_s):
        # The same rows the metric set reads: the day and its 7-day baseline.
        span = {
            "lo": utc_text(END - timedelta(days=8)),
            "hi": utc_text(END),
        }
        count_sql = (
            "SELECT count() FROM routerscope.decisions FINAL "
            "WHERE event_time >= {lo:DateTime64(3, 'UTC')} AND event_time < {hi:DateTime64(3, 'UTC')}"
        )
        count_s, count_cpu, count = timed_with_cpu(lambda: client.query(count_sql, parameters=span).result_rows[0][0])
        # the first call counts the baseline's hours and keeps them (level_hours); the next ones read them
        reset_peak_rss()  # from here on the peak is the metric set's (and the count's), not the fill's
        first_s, _ = timed(lambda: compute(client, END - timedelta(days=1), END), repeat=1)
        metrics_s, metrics_cpu, result = timed_with_cpu(lambda: compute(client, END - timedelta(days=1), END))
        # the window the pipeline computes every 5 minutes (its look-back reads the same 7 days)
        five_s, _ = timed(lambda: compute(client, END - timedelta(minutes=5), END))
        metrics_rss_mb = peak_rss_mb()
        steps = per_query_seconds(client, timed) if args.per_query else None
    figures = {
        "rows": args.rows,
        "days": args.days,
        "fill_seconds": round(fill_s, 2),
        "derive_copies_seconds": round(filled_warehouse.derive_seconds, 2),
        "count_final_seconds": round(count_s, 3),
        "metrics_1d_with_7d_baseline_seconds": round(metrics_s, 3),
        "ratio_metrics_to_count": round(metrics_s / count_s, 2),
        "count_final_cpu_seconds": round(count_cpu, 3),
        "metrics_1d_with_7d_baseline_cpu_seconds": round(metrics_cpu, 3),
        "ratio_metrics_to_count_cpu": round(metrics_cpu / count_cpu, 2),
        "metrics_1d_first_call_seconds": round(first_s, 3),
        "ratio_metrics_first_call_to_count": round(first_s / count_s, 2),
        "metrics_5m_seconds": round(five_s, 3),
        "ratio_metrics_5m_to_count": round(five_s / count_s, 2),
        "counted_rows": count,
        "window_requests": result["overall"]["requests"],
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "metrics_peak_rss_mb": metrics_rss_mb,
    }
    if steps:
        figures["per_query_seconds"] = steps
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
