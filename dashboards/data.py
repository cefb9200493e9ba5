"""Cached, read-only loaders for the dashboard. Every filter value is a bound parameter.

The warehouse is opened for one query at a time (`warehouse.client.open_warehouse`), so in embedded
mode the dashboard takes turns with the loader and the metric jobs instead of locking them out."""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pandas as pd
import streamlit as st

from routerscope.settings import Settings
from warehouse.client import open_warehouse
from warehouse.migrate import migrate

TTL = 30


def clear_caches() -> None:
    """Forget every cached result (tests, or after pointing at another warehouse)."""
    st.cache_data.clear()


def _settings() -> Settings:
    """The CLI's settings; against a server, ROUTERSCOPE_CLICKHOUSE_READONLY_DSN (a user granted
    SELECT only) replaces the read-write DSN when it is set."""
    env = dict(os.environ)
    if env.get("ROUTERSCOPE_CLICKHOUSE_READONLY_DSN"):
        env["ROUTERSCOPE_CLICKHOUSE_DSN"] = env["ROUTERSCOPE_CLICKHOUSE_READONLY_DSN"]
    return Settings.from_env(env)


@contextmanager
def _warehouse():
    """One unit of work on the warehouse; migrations only where the dashboard may write (embedded)."""
    settings = _settings()
    with open_warehouse(settings, purpose="dashboard") as client:
        if settings.warehouse.embedded:
            migrate(client)  # a read-only server user cannot migrate; `routerscope migrate` does it there
        yield client


def query(sql: str, **parameters) -> pd.DataFrame:
    """The rows as a frame. (With no rows, the embedded engine may report no columns either: callers
    check `empty` before reading a column.)"""
    with _warehouse() as client:
        result = client.query(sql, parameters=parameters)
    return pd.DataFrame(result.result_rows, columns=list(result.column_names))


def _latest_end(grain: str) -> datetime | None:
    """The end of the newest metric window of `grain`, or None before the first."""
    df = query(
        "SELECT max(window_end) AS t FROM routerscope.metric_windows FINAL WHERE grain = {grain:String}", grain=grain
    )
    t = df["t"].iloc[0] if len(df) else None
    if t is None or pd.isna(t) or t.year <= 1970:
        return None
    return pd.Timestamp(t).to_pydatetime().replace(tzinfo=UTC)


@st.cache_data(ttl=TTL)
def latest_window_end() -> datetime | None:
    return _latest_end("5m")


def _hours_before_latest(hours: float) -> str:
    """The start of the last `hours` before the newest 5-minute window (or now), as a bound value."""
    end = latest_window_end() or datetime.now(UTC)
    return (end - timedelta(hours=hours)).strftime("%Y-%m-%d %H:%M:%S")


def _distinct(sql: str) -> list[str]:
    """The values of a one-column query."""
    df = query(sql)
    return [] if df.empty else list(df.iloc[:, 0])


@st.cache_data(ttl=TTL)
def windows(grain: str, hours: float, task_type: str = "") -> pd.DataFrame:
    return query(
        "SELECT window_start, requests, device_entered, fallback_rate, naive_fallback_rate, device_bypass_rate, "
        "l2_l3_share, l2_l3_drifting, false_fallback_rate, false_fallback_labeled "
        "FROM routerscope.metric_windows FINAL WHERE grain = {grain:String} AND task_type = {task:String} "
        "AND window_start >= {start:DateTime64(3, 'UTC')} ORDER BY window_start",
        grain=grain,
        task=task_type,
        start=_hours_before_latest(hours),
    )


@st.cache_data(ttl=TTL)
def latest_day_end() -> datetime | None:
    """The end of the newest daily metric window: the weekly review looks at the 7 days before it."""
    return _latest_end("1d")


@st.cache_data(ttl=TTL)
def daily_groups(task_type: str, days: int = 30) -> pd.DataFrame:
    """The daily metric windows of one task type ('' = overall) with their full METRICS.md group
    parsed (`group` column: a dict)."""
    end = latest_day_end()
    if end is None:
        return pd.DataFrame()
    df = query(
        "SELECT window_start, metrics FROM routerscope.metric_windows FINAL WHERE grain = '1d' "
        "AND task_type = {task:String} AND window_start >= {start:DateTime64(3, 'UTC')} ORDER BY window_start",
        task=task_type,
        start=(end - timedelta(days=days)).strftime("%Y-%m-%d %H:%M:%S"),
    )
    if df.empty:
        return df
    return df.assign(group=[json.loads(m) for m in df.pop("metrics")])


@st.cache_data(ttl=TTL)
def period_metrics(start: datetime, end: datetime) -> dict:
    """Every METRICS.md number over [start, end) (the weekly review's 7 days), computed now."""
    from warehouse.metrics import compute

    with _warehouse() as client:
        return compute(client, start, end)


@st.cache_data(ttl=TTL)
def cloud_calls_histogram(task_type: str, start: datetime, end: datetime) -> pd.DataFrame:
    """Sessions by their number of cloud calls over [start, end) (METRICS.md §4 as a distribution)."""
    from warehouse.queries.common import QueryWindow
    from warehouse.queries.decisions import cloud_calls_histogram as histogram

    with _warehouse() as client:
        rows = histogram(client, QueryWindow(start, end), task_type)
    return pd.DataFrame(rows, columns=["cloud_calls", "sessions"])


@st.cache_data(ttl=TTL)
def task_types() -> list[str]:
    return _distinct(
        "SELECT DISTINCT task_type FROM routerscope.metric_windows WHERE task_type != '' ORDER BY task_type"
    )


@st.cache_data(ttl=TTL)
def alerts() -> pd.DataFrame:
    return query(
        "SELECT severity, summary, task_type, status, first_seen, last_seen, resolved_at, action, trip_values "
        "FROM routerscope.alerts FINAL ORDER BY status = 'firing' DESC, last_seen DESC LIMIT 50"
    )


@st.cache_data(ttl=TTL)
def breaker_transitions() -> pd.DataFrame:
    return query(
        "SELECT event_time, instance_id, boundary, from_state, to_state, trigger FROM routerscope.breaker_events FINAL "
        "ORDER BY event_time DESC LIMIT 200"
    )


@st.cache_data(ttl=TTL)
def freshness() -> pd.DataFrame:
    # events dated more than 5 minutes ahead (warehouse.quality.FUTURE_ALLOWANCE) do not count as fresh
    return query(
        "SELECT maxIf(event_time, event_time <= now64(3) + INTERVAL 5 MINUTE) AS newest_event, "
        "max(ingested_at) AS last_load, count() AS rows FROM routerscope.decisions"
    )


@st.cache_data(ttl=TTL)
def consumer_lag() -> pd.DataFrame:
    """Messages behind per (topic, partition): the broker's end offsets against the loader's stored
    positions; `broker_end`/`behind` are empty when the broker does not answer (the page then shows
    the newest event's age alone)."""
    from routerscope.kafka import end_offsets
    from warehouse.queries import ingest_offsets

    with _warehouse() as client:
        stored = ingest_offsets.positions(client)
    return pd.DataFrame(
        ingest_offsets.consumer_lag(stored, end_offsets(_settings())),
        columns=["topic", "partition", "loaded_to", "broker_end", "behind", "stored_at"],
    )


@st.cache_data(ttl=TTL)
def calibration(task_type: str) -> pd.DataFrame:
    return query(
        "SELECT window_start, labeled, monotonic, recommended_threshold, current_threshold, calibration "
        "FROM routerscope.calibration_windows FINAL WHERE task_type = {task:String} ORDER BY window_start DESC LIMIT 1",
        task=task_type,
    )


@st.cache_data(ttl=TTL)
def calibration_for_target(task_type: str, start: datetime, end: datetime, target: float, min_n: int) -> dict | None:
    """Calibration of one task type over [start, end) for a chosen target pass rate (METRICS.md §6)."""
    from warehouse.metrics import calibration as compute_calibration
    from warehouse.queries.common import QueryWindow

    with _warehouse() as client:
        return compute_calibration(client, QueryWindow(start, end), target, min_n).get(task_type)


@st.cache_data(ttl=TTL)
def dq_latest() -> pd.DataFrame:
    from warehouse.queries import dq_results

    with _warehouse() as client:
        return dq_results.latest_run(client)


@st.cache_data(ttl=TTL)
def quarantine(limit: int = 20) -> pd.DataFrame:
    return query(
        "SELECT kafka_topic, kafka_partition, kafka_offset, rules, substring(raw, 1, 120) AS raw_start, quarantined_at "
        "FROM routerscope.quarantine ORDER BY quarantined_at DESC LIMIT {limit:UInt32}",
        limit=limit,
    )


@st.cache_data(ttl=TTL)
def decisions(
    task_type: str,
    fallback_type: str,
    hours: float,
    request_id: str = "",
    limit: int = 200,
    reason: str = "",
    level: int = -1,
    network: str = "",
    device_tier: str = "",
) -> pd.DataFrame:
    """Decisions of the last `hours` (before the latest metric window), filtered ('' or -1: any);
    every value bound."""
    return query(
        "SELECT event_time, request_id, task_type, mode, fallback_type, reason, degrade_level, attempt_levels, "
        "attempt_outcomes, attempt_latency_ms, confidence, threshold, network, device_tier, device_model, cloud_model "
        "FROM routerscope.decisions FINAL WHERE event_time >= {start:DateTime64(3, 'UTC')} "
        "AND ({task:String} = '' OR task_type = {task:String}) AND ({fb:String} = '' OR fallback_type = {fb:String}) "
        "AND ({reason:String} = '' OR reason = {reason:String}) AND ({level:Int8} < 0 OR degrade_level = {level:Int8}) "
        "AND ({net:String} = '' OR network = {net:String}) AND ({tier:String} = '' OR device_tier = {tier:String}) "
        "AND ({rid:String} = '' OR position(request_id, {rid:String}) > 0) "
        "ORDER BY event_time DESC LIMIT {limit:UInt32}",
        start=_hours_before_latest(hours),
        task=task_type,
        fb=fallback_type,
        reason=reason,
        level=level,
        net=network,
        tier=device_tier,
        rid=request_id,
        limit=limit,
    )


@st.cache_data(ttl=TTL)
def device_tiers() -> list[str]:
    return _distinct(
        "SELECT DISTINCT device_tier FROM routerscope.decisions WHERE device_tier IS NOT NULL ORDER BY device_tier"
    )


@st.cache_data(ttl=TTL)
def quarantine_counts() -> pd.DataFrame:
    """Quarantined messages per topic and broken rule (a message breaking two rules counts under both)."""
    return query(
        "SELECT kafka_topic, arrayJoin(rules) AS rule, count() AS messages FROM routerscope.quarantine "
        "GROUP BY kafka_topic, rule ORDER BY messages DESC"
    )


@st.cache_data(ttl=TTL)
def schema_versions() -> pd.DataFrame:
    """Rows per schema version of each facts table: a producer on a new version shows up here."""
    return query(
        "SELECT * FROM ("
        "SELECT 'decisions' AS events_table, schema_version, count() AS events FROM routerscope.decisions GROUP BY schema_version "
        "UNION ALL SELECT 'labels', schema_version, count() FROM routerscope.labels GROUP BY schema_version "
        "UNION ALL SELECT 'breaker_events', schema_version, count() FROM routerscope.breaker_events GROUP BY schema_version"
        ") ORDER BY events_table, schema_version"
    )


@st.cache_data(ttl=TTL)
def review(days: float = 7.0) -> dict:
    """The weekly review over the last `days` full days of data (METRICS.md §10–§13, the stage tracker):
    the window, the device ledger and all-cloud saving, grading, readiness side by side, and rollout."""
    from router.policy import PolicyStore
    from routerscope.review import divergence_counts
    from warehouse import review as rv
    from warehouse.metrics import iso
    from warehouse.queries import review as rq

    policy = PolicyStore().current()
    with _warehouse() as client:
        window = rv.review_window(client, days)
        grading = rv.grading_report(client, policy, window)
        ready = rv.readiness_report(client, policy, window)
        out = {
            "window": {"start": iso(window.start), "end": iso(window.end)},
            "ledger": rq.device_ledger(client, window),
            "cost": rq.all_cloud_cost(client, window),
            "grading": grading,
            "readiness": ready,
            "side_by_side": rv.side_by_side(grading, ready),
            "rollout": rv.rollout_report(client, policy, window),
            "tier_memory_mb": {t: v["memory_mb"] for t, v in policy.device_tiers.items()},
        }
    out["divergences"] = divergence_counts(_settings())
    return out


@st.cache_data(ttl=TTL)
def divergence_samples(limit: int = 20) -> pd.DataFrame:
    """The newest divergence samples from the request-text store, without their texts (those stay in the
    store, for the review and the replay): request id, task type, stage, input length, answer hashes."""
    from router.request_store import RequestTextStore, store_path

    path = store_path(_settings().home)
    if not path.exists():
        return pd.DataFrame()
    with RequestTextStore(path) as store:
        rows = store.divergences(limit=limit)
    return pd.DataFrame([{k: v for k, v in r.items() if not k.endswith("_text")} for r in rows])
