"""Cached, read-only loaders for the dashboard: thin `st.cache_data` wrappers around the query modules
(`warehouse.queries`), which hold the SQL; every filter value is a bound parameter there.

The warehouse is opened for one query at a time (`warehouse.client.open_warehouse`), so in embedded
mode the dashboard takes turns with the loader and the metric jobs instead of locking them out."""

from __future__ import annotations

import os
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pandas as pd
import streamlit as st

from routerscope.settings import Settings
from warehouse.client import open_warehouse
from warehouse.migrate import migrate
from warehouse.queries import breaker_events, facts, ingest_offsets, metric_windows
from warehouse.queries import decisions as decision_queries
from warehouse.queries import quarantine as quarantine_queries
from warehouse.queries.common import QueryWindow

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


def _read(query, *args, **kwargs):
    """A query function's result (`warehouse.queries`), in one unit of work on the warehouse."""
    with _warehouse() as client:
        return query(client, *args, **kwargs)


def _frame(rows: list[dict], columns: tuple[str, ...]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=list(columns))


def _table(columns: tuple[str, ...], query, *args) -> pd.DataFrame:
    """A query function's rows as a frame with `columns` (which an empty result keeps)."""
    return _frame(_read(query, *args), columns)


@st.cache_data(ttl=TTL)
def latest_window_end() -> datetime | None:
    return _read(metric_windows.latest_end, "5m")


def _hours_before_latest(hours: float) -> datetime:
    """The start of the last `hours` before the newest 5-minute window (or now). (It opens the warehouse
    when not cached: pass it as an argument of `_read`, never call it inside a unit of work.)"""
    return (latest_window_end() or datetime.now(UTC)) - timedelta(hours=hours)


@st.cache_data(ttl=TTL)
def windows(grain: str, hours: float, task_type: str = "") -> pd.DataFrame:
    return _table(metric_windows.TREND_COLUMNS, metric_windows.trend, grain, task_type, _hours_before_latest(hours))


@st.cache_data(ttl=TTL)
def latest_day_end() -> datetime | None:
    """The end of the newest daily metric window: the weekly review looks at the 7 days before it."""
    return _read(metric_windows.latest_end, "1d")


@st.cache_data(ttl=TTL)
def daily_groups(task_type: str, days: int = 30) -> pd.DataFrame:
    """The daily metric windows of one task type ('' = overall) with their full METRICS.md group
    parsed (`group` column: a dict)."""
    end = latest_day_end()
    if end is None:
        return pd.DataFrame()
    rows = _read(metric_windows.groups, "1d", task_type, end - timedelta(days=days))
    return pd.DataFrame(rows, columns=["window_start", "group"]) if rows else pd.DataFrame()


@st.cache_data(ttl=TTL)
def period_metrics(start: datetime, end: datetime) -> dict:
    """Every METRICS.md number over [start, end) (the weekly review's 7 days), computed now."""
    from warehouse.metrics import compute

    with _warehouse() as client:
        return compute(client, start, end)


@st.cache_data(ttl=TTL)
def cloud_calls_histogram(task_type: str, start: datetime, end: datetime) -> pd.DataFrame:
    """Sessions by their number of cloud calls over [start, end) (METRICS.md §4 as a distribution)."""
    rows = _read(decision_queries.cloud_calls_histogram, QueryWindow(start, end), task_type)
    return pd.DataFrame(rows, columns=["cloud_calls", "sessions"])


@st.cache_data(ttl=TTL)
def task_types() -> list[str]:
    return _read(metric_windows.task_types)


@st.cache_data(ttl=TTL)
def alerts() -> pd.DataFrame:
    """The newest alert episodes, firing first."""
    from warehouse.queries import alerts as alert_queries

    with _warehouse() as client:
        columns, rows = alert_queries.recent(client)
    return pd.DataFrame(rows, columns=columns)


@st.cache_data(ttl=TTL)
def breaker_transitions() -> pd.DataFrame:
    return _table(breaker_events.TRANSITION_COLUMNS, breaker_events.transitions)


@st.cache_data(ttl=TTL)
def freshness() -> pd.DataFrame:
    from warehouse.quality import FUTURE_ALLOWANCE  # events dated further ahead do not count as fresh

    fresh = _read(ingest_offsets.freshness, horizon=datetime.now(UTC) + FUTURE_ALLOWANCE)
    return pd.DataFrame([fresh], columns=["newest_event", "last_load", "rows"])


@st.cache_data(ttl=TTL)
def consumer_lag() -> pd.DataFrame:
    """Messages behind per (topic, partition): the broker's end offsets against the loader's stored
    positions; `broker_end`/`behind` are empty when the broker does not answer (the page then shows
    the newest event's age alone)."""
    from routerscope.kafka import end_offsets

    with _warehouse() as client:
        stored = ingest_offsets.positions(client)
    return pd.DataFrame(
        ingest_offsets.consumer_lag(stored, end_offsets(_settings())),
        columns=["topic", "partition", "loaded_to", "broker_end", "behind", "stored_at"],
    )


@st.cache_data(ttl=TTL)
def calibration(task_type: str) -> pd.DataFrame:
    row = _read(metric_windows.latest_calibration, task_type)
    return _frame([row] if row else [], metric_windows.LATEST_CALIBRATION_COLUMNS)


@st.cache_data(ttl=TTL)
def calibration_for_target(task_type: str, start: datetime, end: datetime, target: float, min_n: int) -> dict | None:
    """Calibration of one task type over [start, end) for a chosen target pass rate (METRICS.md §6)."""
    from warehouse.metrics import calibration as compute_calibration

    with _warehouse() as client:
        return compute_calibration(client, QueryWindow(start, end), target, min_n).get(task_type)


@st.cache_data(ttl=TTL)
def whatif(task_type: str, start: datetime, end: datetime, threshold: float) -> dict:
    """One task type's live traffic over [start, end) re-scored under a candidate threshold (the what-if
    of `warehouse.whatif`): current and candidate blocks, the moved requests, warnings."""
    from warehouse.whatif import compute

    with _warehouse() as client:
        return compute(client, QueryWindow(start, end), {task_type: threshold})["by_task_type"][task_type]


@st.cache_data(ttl=TTL)
def policy_threshold(task_type: str) -> float:
    """The threshold the router's policy in force gives a task type (its file, as the router reads it)."""
    from router.policy import PolicyStore

    return float(PolicyStore().current().capability(task_type).threshold)


@st.cache_data(ttl=TTL)
def dq_latest() -> pd.DataFrame:
    from warehouse.queries import dq_results

    with _warehouse() as client:
        return dq_results.latest_run(client)


@st.cache_data(ttl=TTL)
def quarantine(limit: int = 20) -> pd.DataFrame:
    return _table(quarantine_queries.RECENT_COLUMNS, quarantine_queries.recent, limit)


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
    """Decisions of the last `hours` (before the latest metric window), filtered ('' or -1: any)."""
    where = decision_queries.ExplorerFilter(
        task_type=task_type,
        fallback_type=fallback_type,
        reason=reason,
        level=level,
        network=network,
        device_tier=device_tier,
        request_id=request_id,
    )
    return _table(
        decision_queries.EXPLORER_COLUMNS, decision_queries.explorer, _hours_before_latest(hours), where, limit
    )


@st.cache_data(ttl=TTL)
def device_tiers() -> list[str]:
    return _read(decision_queries.device_tiers)


@st.cache_data(ttl=TTL)
def quarantine_counts() -> pd.DataFrame:
    """Quarantined messages per topic and broken rule (a message breaking two rules counts under both)."""
    return _table(quarantine_queries.COUNTS_COLUMNS, quarantine_queries.counts)


@st.cache_data(ttl=TTL)
def schema_versions() -> pd.DataFrame:
    """Rows per schema version of each facts table: a producer on a new version shows up here."""
    rows = _read(facts.schema_versions)
    return pd.DataFrame(rows, columns=list(facts.SCHEMA_VERSION_COLUMNS))


@st.cache_data(ttl=TTL)
def review(days: float = 7.0) -> dict:
    """The weekly review over the last `days` full days of data (METRICS.md §10–§13, the stage tracker):
    the window, the device ledger and all-cloud saving, grading, readiness side by side, and rollout."""
    from router.policy import PolicyStore
    from routerscope.review import divergence_counts
    from warehouse import review as rv
    from warehouse.metrics import iso
    from warehouse.queries import review as review_queries

    policy = PolicyStore().current()
    with _warehouse() as client:
        window = rv.review_window(client, days)
        rows = review_queries.task_review(client, window)  # read once for both reports
        grading = rv.grading_report(client, policy, window, rows)
        ready = rv.readiness_report(client, policy, window, rows)
        out = {
            "window": {"start": iso(window.start), "end": iso(window.end)},
            "ledger": review_queries.device_ledger(client, window),
            "cost": review_queries.all_cloud_cost(client, window),
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
