"""Cached, read-only loaders for the dashboard: thin `st.cache_data` wrappers around the query modules
(`routerscope.warehouse.queries`), which hold the SQL; every filter value is a bound parameter there.

The warehouse is opened for one query at a time (`routerscope.warehouse.client.open_warehouse`), so in embedded
mode the dashboard takes turns with the loader and the metric jobs instead of locking them out."""

from __future__ import annotations

import functools
import inspect
import os
import threading
from contextlib import ExitStack, contextmanager
from dataclasses import asdict
from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd
import streamlit as st

from routerscope.core.kafka import end_offsets
from routerscope.core.settings import Settings
from routerscope.core.timeutil import UTC, utc
from routerscope.dashboards import words
from routerscope.router.policy import PolicyStore
from routerscope.router.request_store import RequestTextStore
from routerscope.warehouse.analytics import metrics as metric_analytics
from routerscope.warehouse.analytics import review as rv
from routerscope.warehouse.analytics import rollback
from routerscope.warehouse.analytics import whatif as whatif_analytics
from routerscope.warehouse.analytics.alerting import evidence as ev
from routerscope.warehouse.analytics.alerting.rules import load_rules
from routerscope.warehouse.analytics.quality import FUTURE_ALLOWANCE
from routerscope.warehouse.client import open_warehouse
from routerscope.warehouse.queries import alerts as alert_queries
from routerscope.warehouse.queries import breaker_events, dq_results, facts, ingest_offsets, metric_windows
from routerscope.warehouse.queries import decisions as decision_queries
from routerscope.warehouse.queries import quarantine as quarantine_queries
from routerscope.warehouse.sql import QueryWindow, named

# A cached result is kept until the data under it changes (`data_version`, read at most every VERSION_TTL s on a
# page run), not for a fixed 30 s: the what-if slider's first move after 30 s on the page took 4-17 s while its
# sweep was recomputed over data that had not changed. TTL is a ceiling only.
TTL = 3600
VERSION_TTL = 30
VERSION_SQL = named(
    "dashboard_data_version",
    """
SELECT (SELECT count() FROM $metric_windows), (SELECT max(ingested_at) FROM $decisions),
       (SELECT max(ingested_at) FROM $labels), (SELECT count() FROM $alerts), (SELECT count() FROM $dq_results),
       (SELECT count() FROM $quarantine), (SELECT count() FROM $breaker_events)
""",
)
DATA_START_SQL = named(
    "dashboard_data_start",
    "SELECT (SELECT min(window_start) FROM $metric_windows), (SELECT min(event_time) FROM $decisions)",
)
_version_seen: list = [None]  # the data version the caches were filled under (one per dashboard process)


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


_visit = threading.local()  # the page run in this thread (Streamlit runs a session's script in its own thread)


@contextmanager
def visit():
    """One run of a page: the warehouse is opened at most once, on the first loader that misses its cache, and
    closed when the run ends. Opening the embedded warehouse costs 0.3–0.7 s on 2 busy cores, and a cold page
    made 10–15 units of work; now it makes one, and a page served from the cache none. (The loader and the
    metric jobs wait for the run, a few seconds at most, instead of for each query.) Nested: the outer one holds."""
    if getattr(_visit, "stack", None) is not None:
        yield
        return
    _visit.stack, _visit.client = ExitStack(), None
    try:
        _forget_if_changed()
        yield
    finally:
        stack, _visit.stack, _visit.client = _visit.stack, None, None
        stack.close()


@st.cache_data(ttl=VERSION_TTL, show_spinner=False)
def data_version() -> tuple:
    """What the warehouse holds, in a few cheap numbers (windows stored, newest load, episodes, checks): a change
    of any means the cached results may be stale."""
    with _warehouse() as client:
        return tuple(str(v) for v in client.query(VERSION_SQL).result_rows[0])


def _forget_if_changed() -> None:
    """Clear every cached result when the data changed since they were computed (never merely because time
    passed: a person reading a page finds it as fast a minute later)."""
    try:
        version = data_version()
    except Exception:  # (a warehouse that cannot be read: the pages say so themselves)
        return
    if _version_seen[0] is not None and version != _version_seen[0]:
        st.cache_data.clear()
        data_version()  # (cached again under the new version)
    _version_seen[0] = version


@st.cache_data(ttl=TTL, show_spinner=False)
def data_start() -> datetime | None:
    """The oldest stored 5-minute window's start or decision's time, whichever is older (None before any)."""
    with _warehouse() as client:
        row = client.query(DATA_START_SQL).result_rows[0]
    found = [utc(pd.Timestamp(t).to_pydatetime()) for t in row if t is not None and pd.Timestamp(t).year > 1970]
    return min(found) if found else None


def stable(start: datetime, end: datetime) -> tuple[datetime, datetime]:
    """[start, end) narrowed to where data can be: from the oldest stored data, to just past the newest. A preset
    ends now, so its ends move every minute; the results over it do not while no data arrives, and a cache keyed
    on the narrowed range is still there a minute later (the slider's first move after a minute idle)."""
    first, last = data_start(), newest_data_end()
    if first is not None:  # (to its 5-minute window, as the windows are cut)
        first = first.replace(minute=first.minute - first.minute % 5, second=0, microsecond=0)
    lo = max(start, first) if first is not None else start
    hi = min(end, last)
    return (lo, hi) if lo < hi else (start, end)


def _in_data(fn):
    """`fn` (a cached loader with `start` and `end` arguments) over `stable(start, end)`."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def narrowed(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.arguments["start"], bound.arguments["end"] = stable(bound.arguments["start"], bound.arguments["end"])
        return fn(*bound.args, **bound.kwargs)

    return narrowed


@contextmanager
def _warehouse():
    """One unit of work on the warehouse (within a page run, the run's); migrations only where the dashboard may
    write (embedded)."""
    stack = getattr(_visit, "stack", None)
    if stack is not None:
        if _visit.client is None:
            _visit.client = stack.enter_context(_open())
        yield _visit.client
        return
    with _open() as client:
        yield client


def _open():
    settings = _settings()
    # a read-only server user cannot migrate; `routerscope migrate` does it there
    return open_warehouse(settings, purpose="dashboard", migrated=settings.warehouse.embedded)


def query(sql: str, **parameters) -> pd.DataFrame:
    """The rows as a frame. (With no rows, the embedded engine may report no columns either: callers
    check `empty` before reading a column.)"""
    with _warehouse() as client:
        result = client.query(sql, parameters=parameters)
    return pd.DataFrame(result.result_rows, columns=list(result.column_names))


def _read(query, *args, **kwargs):
    """A query function's result (`routerscope.warehouse.queries`), in one unit of work on the warehouse."""
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
def newest_quarantined() -> datetime | None:
    """The newest quarantined message's time (its own, else its load's: `quarantine.MESSAGE_TIME`)."""
    return _read(quarantine_queries.newest)


def newest_data_end() -> datetime:
    """Where the shared time range's presets end: just past the newest data — the newest 5-minute window's
    end, the newest loaded event or the newest quarantined message (to the next minute), whichever is latest;
    now when there is none. (The quarantine counts: the demo's broken messages are loaded a minute after its
    newest event, and a preset must not end before them: docs/dashboards.md#data-quality.)"""
    candidates = (latest_window_end(), freshness()["newest_event"].iloc[0], newest_quarantined())
    newest = [t for t in candidates if t is not None and not pd.isna(t)]
    newest = [utc(pd.Timestamp(t).to_pydatetime()) for t in newest if pd.Timestamp(t).year > 1970]
    if not newest:
        return datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
    latest = max(newest)
    return (
        latest.replace(second=0, microsecond=0) + timedelta(minutes=1)
        if latest.second or latest.microsecond
        else latest
    )


def presets_end() -> datetime:
    """Where the shared time range's presets end: the present (the next minute), or the newest data when that lies
    later (a clock behind the producers'). A preset ending at the newest data hid what fired after it: two alerts
    firing at 01:13 lay outside every preset while the newest window ended at 00:55."""
    present = wall_now() + timedelta(minutes=1)
    return max(present, newest_data_end())


# The per-window figures the on-call page draws (docs/metrics.md keys; `l4_share` is degrade_share.L4).
SERIES_KEYS = (
    "requests",
    "device_entered",
    "fallback_rate",
    "quality_fallback_rate",
    "timeout_fallback_rate",
    "error_fallback_rate",
    "naive_fallback_rate",
    "device_bypass_rate",
    "l2_l3_share",
    "l4_share",
    "l2_l3_drifting",
)


def _series_row(task_type: str, start: datetime, group: dict) -> dict:
    row = {"task_type": task_type, "window_start": start}
    for key in SERIES_KEYS:
        if key == "l4_share":
            row[key] = (group.get("degrade_share") or {}).get("L4")
        elif key == "l2_l3_drifting":
            row[key] = bool((group.get("l2_l3_drift") or {}).get("drifting"))
        else:
            row[key] = group.get(key)
    return row


@_in_data
@st.cache_data(ttl=TTL)
def window_series(start: datetime, end: datetime, grain: str = "5m") -> pd.DataFrame:
    """Every stored window of `grain` starting in [start, end), overall (task_type '') and per task type,
    with SERIES_KEYS as columns (None where a window had no denominator)."""
    rows = _read(metric_windows.groups_in_range, grain, start, end)
    frame = pd.DataFrame(
        [_series_row(t, w0, g) for t, w0, g in rows], columns=["task_type", "window_start", *SERIES_KEYS]
    )
    if not frame.empty:
        frame["window_start"] = pd.to_datetime(frame["window_start"], utc=True)
    return frame


@st.cache_data(ttl=TTL)
def incidents(start: datetime, end: datetime) -> pd.DataFrame:
    """Alert episodes firing now or breaching / resolved within [start, end), firing first."""
    return _table(alert_queries.INCIDENT_COLUMNS, alert_queries.incidents, start, end)


def wall_now() -> datetime:
    """Now, to the minute (UTC)."""
    return datetime.now(UTC).replace(second=0, microsecond=0)


@st.cache_data(ttl=10, show_spinner=False)
def firing_now() -> list[dict]:
    """Every alert episode firing now, whatever a page's range (the firing-now strip): a tiny read, kept 10 s."""
    episodes = _read(alert_queries.incidents, wall_now(), wall_now())
    return [e for e in episodes if e["status"] == "firing"]


@st.cache_data(ttl=10, show_spinner=False)
def alerts_evaluated_at() -> datetime | None:
    """When the alert rules were last evaluated (the wall clock of the newest recorded evaluation; None: never), for
    the firing-now strip: an old evaluation is not "now" (`now.stale`)."""
    last = _read(alert_queries.last_evaluation)
    return last["evaluated_at"] if last else None


@st.cache_data(ttl=10, show_spinner=False)
def failing_blocking_checks() -> list[str]:
    """The blocking checks the latest data-quality run failed (what a `data_quality_blocking` alert stands on)."""
    dq = dq_latest()
    if dq.empty:
        return []
    return [str(c) for c in dq[(~dq["success"]) & dq["blocking"]]["check_name"]]


@st.cache_data(ttl=600, show_spinner=False)
def episodes_named(episodes: tuple[tuple[str, str, datetime, datetime], ...]) -> list[dict]:
    """Each (rule, task type, start, end) episode named by its evidence
    (`routerscope.warehouse.analytics.alerting.evidence`): cause, what moved with values and baseline, next step,
    runbook section, the Explorer's filter. Read in one batch (four queries, not four per episode: 0.5 s of a cold
    On-call with seven incidents); keyed by the episodes' own windows, so a range of resolved ones is read once and a
    firing one's end moves with the minute."""
    with _warehouse() as client:
        found = ev.evidence_many(client, [(task_type, start, end) for _, task_type, start, end in episodes])
    return [asdict(ev.name(rule, one, words.rule_name(rule))) for (rule, *_), one in zip(episodes, found)]


@st.cache_data(ttl=TTL)
def rollback_states(start: datetime, end: datetime) -> dict[str, dict]:
    """Task type → its rollback recommendation over [start, end) (`routerscope.warehouse.analytics.rollback`: the
    reading the
    tuning page, the Offload review and `report rollout` share), as `{recommended, signals, …, words}`; only task
    types with a recommendation."""
    return {t: s.public() for t, s in _read(rollback.rollback_states, start, end).items()}


@st.cache_data(ttl=TTL)
def judged_rules() -> str | None:
    """The alert rules file the pages read: ROUTERSCOPE_ALERT_RULES when set, else the one the warehouse's latest
    alert evaluation recorded (the demo's fleet rules after `make demo`), else None (the shipped defaults)."""
    configured = _settings().alert_rules
    if configured is not None:
        return str(configured)
    last = _read(alert_queries.last_evaluation)
    return last["rules_path"] if last and Path(last["rules_path"]).is_file() else None


@st.cache_data(ttl=TTL, show_spinner=False)
def judged_rule_list() -> list:
    """The alert rules the warehouse is judged with (`judged_rules`), parsed."""
    return list(load_rules(judged_rules())[1])


@_in_data
@st.cache_data(ttl=TTL, show_spinner=False)
def whatif_many(moves: tuple[tuple[str, float], ...], start: datetime, end: datetime) -> dict[str, dict]:
    """The what-if of several task types' candidate thresholds over [start, end) in one read (the weekly table's
    recommended moves, each checked against the alert limits before it is offered)."""
    with _warehouse() as client:
        result = whatif_analytics.compute(client, QueryWindow(start, end), dict(moves))
    return result["by_task_type"]


@st.cache_data(ttl=TTL)
def sample_minimums() -> dict[str, tuple[int, str | None]]:
    """metric -> (the smallest `min_n` any 5-minute alert rule on it asks for, its denominator): a tile
    with fewer events shows its value greyed instead of a verdict the alert rules would not give."""
    out: dict[str, tuple[int, str | None]] = {}
    for rule in load_rules(judged_rules())[1]:  # the rules the alerts were judged with
        if rule.grain != "5m" or not rule.min_n:
            continue
        metric = rule.metric.split(".")[0]
        if metric not in out or rule.min_n < out[metric][0]:
            out[metric] = (rule.min_n, rule.denominator)
    return out


@st.cache_data(ttl=TTL)
def windows(grain: str, hours: float, task_type: str = "") -> pd.DataFrame:
    return _table(metric_windows.TREND_COLUMNS, metric_windows.trend, grain, task_type, _hours_before_latest(hours))


@st.cache_data(ttl=TTL)
def latest_day_end() -> datetime | None:
    """The end of the newest daily metric window: the weekly review looks at the 7 days before it."""
    return _read(metric_windows.latest_end, "1d")


@st.cache_data(ttl=TTL)
def daily_groups(task_type: str, days: int = 30) -> pd.DataFrame:
    """The daily metric windows of one task type ('' = overall) with their full docs/metrics.md group
    parsed (`group` column: a dict)."""
    end = latest_day_end()
    if end is None:
        return pd.DataFrame()
    rows = _read(metric_windows.groups, "1d", task_type, end - timedelta(days=days))
    return pd.DataFrame(rows, columns=["window_start", "group"]) if rows else pd.DataFrame()


@_in_data
@st.cache_data(ttl=TTL)
def week_and_review(start: datetime, end: datetime) -> tuple[dict, dict]:
    """Every docs/metrics.md number over [start, end) (the weekly review's 7 days, computed now) and the weekly review
    (`review`) of the same range, from one read of the week: Weekly tuning shows both."""
    store = PolicyStore()
    with _warehouse() as client:
        return rv.week_and_review(
            client, store.current(), QueryWindow(start, end), _settings().home, rv.declared_streamable(store.path)
        )


@_in_data
@st.cache_data(ttl=TTL)
def policy_versions(task_type: str, start: datetime, end: datetime) -> dict:
    """docs/metrics.md §9 alone over [start, end) for one task type (a push's baseline span)."""
    with _warehouse() as client:
        return metric_analytics.policy_versions(client, start, end, task_type)


@_in_data
@st.cache_data(ttl=TTL)
def cloud_calls_histogram(task_type: str, start: datetime, end: datetime) -> pd.DataFrame:
    """Sessions by their number of cloud calls over [start, end) (docs/metrics.md §4 as a distribution)."""
    rows = _read(decision_queries.cloud_calls_histogram, QueryWindow(start, end), task_type)
    return pd.DataFrame(rows, columns=["cloud_calls", "sessions"])


@st.cache_data(ttl=TTL)
def task_types() -> list[str]:
    return _read(metric_windows.task_types)


@st.cache_data(ttl=TTL)
def alerts() -> pd.DataFrame:
    """The newest alert episodes, firing first."""
    with _warehouse() as client:
        columns, rows = alert_queries.recent(client)
    return pd.DataFrame(rows, columns=columns)


@st.cache_data(ttl=TTL)
def breaker_transitions() -> pd.DataFrame:
    return _table(breaker_events.TRANSITION_COLUMNS, breaker_events.transitions)


@st.cache_data(ttl=TTL)
def freshness() -> pd.DataFrame:
    # events dated further ahead than the allowance do not count as fresh
    fresh = _read(ingest_offsets.freshness, horizon=datetime.now(UTC) + FUTURE_ALLOWANCE)
    return pd.DataFrame([fresh], columns=["newest_event", "last_load", "rows"])


@st.cache_data(ttl=30)  # the broker's end offsets move without the warehouse changing
def consumer_lag() -> pd.DataFrame:
    """Messages behind per (topic, partition): the broker's end offsets against the loader's stored
    positions; `broker_end`/`behind` are empty when the broker does not answer (the page then shows
    the newest event's age alone)."""
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


@_in_data
@st.cache_data(ttl=TTL)
def calibration_for_target(task_type: str, start: datetime, end: datetime, target: float, min_n: int) -> dict | None:
    """Calibration of one task type over [start, end) for a chosen target pass rate (docs/metrics.md §6). At the
    metric set's own target and minimum sample it is the range's metric set's, already computed with the week's
    review for Weekly tuning (0.4-0.7 s saved on a cold Weekly tuning)."""
    if round(target, 4) == round(metric_analytics.DEFAULT_TARGET, 4) and min_n == metric_analytics.DEFAULT_MIN_N:
        return week_and_review(start, end)[0]["calibration"].get(task_type)
    with _warehouse() as client:
        return metric_analytics.calibration(client, QueryWindow(start, end), target, min_n).get(task_type)


SLIDER_STEPS = [round(k / 100, 2) for k in range(101)]  # the tuning page's what-if slider: 0.00 to 1.00 by 0.01


@_in_data
@st.cache_data(ttl=TTL, show_spinner=False)
def whatif_sweep(task_type: str, start: datetime, end: datetime) -> dict[float, dict]:
    """The what-if of one task type over [start, end) under every position of the slider, in one pass (0.3 s on
    the demo's week, against 0.1 s for one threshold): each move then reads a number already computed."""
    with _warehouse() as client:
        return whatif_analytics.sweep(client, QueryWindow(start, end), task_type, SLIDER_STEPS)


@_in_data
@st.cache_data(ttl=TTL)
def whatif(task_type: str, start: datetime, end: datetime, threshold: float) -> dict:
    """One task type's live traffic over [start, end) re-scored under a candidate threshold (the what-if
    of `routerscope.warehouse.analytics.whatif`): current and candidate blocks, the moved requests, warnings. A slider
    position comes from the sweep; another threshold is computed on its own."""
    if round(threshold, 2) == threshold and 0 <= threshold <= 1:
        return whatif_sweep(task_type, start, end)[round(threshold, 2)]
    with _warehouse() as client:
        result = whatif_analytics.compute(client, QueryWindow(start, end), {task_type: threshold})
    return result["by_task_type"][task_type]


@st.cache_data(ttl=TTL)
def policy_threshold(task_type: str) -> float:
    """The threshold the router's policy in force gives a task type (its file, as the router reads it)."""
    return float(PolicyStore().current().capability(task_type).threshold)


@st.cache_data(ttl=TTL)
def rollout_min_n() -> int:
    """The sample a bucket, a cohort or a rate needs to count (the policy in force's `rollout_limits.min_n`): the
    weekly pages draw anything below it hollow, with its n, never as a full bar or a change in points."""
    return int(PolicyStore().current().rollout_limits.min_n)


@st.cache_data(ttl=TTL)
def dq_latest() -> pd.DataFrame:
    with _warehouse() as client:
        return dq_results.latest_run(client)


@st.cache_data(ttl=TTL)
def quarantine(limit: int = 20, start: datetime | None = None, end: datetime | None = None) -> pd.DataFrame:
    """The newest `limit` messages quarantined in [start, end) (default: ever)."""
    rows = _read(quarantine_queries.recent, limit, 120, start, end)
    return _frame(rows, quarantine_queries.RECENT_COLUMNS)


@st.cache_data(ttl=TTL)
def explorer(
    start: datetime, end: datetime, where: decision_queries.ExplorerFilter, limit: int = 100, offset: int = 0
) -> tuple[pd.DataFrame, int]:
    """One page of the decisions in [start, end) that pass `where` (newest first) and how many pass in all."""
    with _warehouse() as client:
        rows = decision_queries.explorer(client, start, where, limit, end=end, offset=offset)
        total = decision_queries.explorer_count(client, start, end, where)
    return _frame(rows, decision_queries.EXPLORER_COLUMNS), total


@st.cache_data(ttl=TTL)
def explorer_histogram(start: datetime, end: datetime, where: decision_queries.ExplorerFilter) -> pd.DataFrame:
    """The decisions in [start, end) that pass `where` per time bucket (about 60 over the range) and mode."""
    seconds, rows = _read(decision_queries.explorer_histogram, start, end, where)
    frame = pd.DataFrame(rows, columns=["bucket", "mode", "decisions"])
    frame["bucket"] = pd.to_datetime(frame["bucket"], utc=True)
    frame["bucket_end"] = frame["bucket"] + pd.Timedelta(seconds=seconds)
    return frame


def pseudonyms(session_id: str, request_id: str) -> tuple[str, str]:
    """A searched session and request id as the SDK records them (their keyed hashes under the deployment's
    key, docs/operations.md): the Explorer finds a decision by the id the user knows."""
    from routerscope.instrumentation import pii  # deferred: the key is read only when an id is searched

    if not session_id and not request_id:
        return "", ""
    if pii._key is None:
        pii.configure(_settings().home)
    return (
        pii.pseudonymise(session_id) if session_id else "",
        pii.pseudonymise_request_id(request_id) if request_id else "",
    )


@st.cache_data(ttl=TTL)
def device_tiers() -> list[str]:
    return _read(decision_queries.device_tiers)


@st.cache_data(ttl=TTL)
def quarantine_counts(start: datetime | None = None, end: datetime | None = None) -> pd.DataFrame:
    """Messages quarantined in [start, end) per topic and broken rule (a message breaking two rules counts
    under both)."""
    return _frame(_read(quarantine_queries.counts, start, end), quarantine_queries.COUNTS_COLUMNS)


@st.cache_data(ttl=TTL)
def schema_versions() -> pd.DataFrame:
    """Rows per schema version of each facts table: a producer on a new version shows up here."""
    rows = _read(facts.schema_versions)
    return pd.DataFrame(rows, columns=list(facts.SCHEMA_VERSION_COLUMNS))


@st.cache_data(ttl=TTL)
def review(start: datetime | None = None, end: datetime | None = None, days: float = 7.0) -> dict:
    """The weekly review over [start, end) (docs/metrics.md §10–§13, the stage tracker), by default the last
    `days` full days of data: the window, the device ledger and all-cloud saving, grading, readiness side by
    side, and rollout."""
    store = PolicyStore()
    policy = store.current()
    with _warehouse() as client:
        window = QueryWindow(start, end) if start and end else rv.review_window(client, days)
        return rv.weekly_review(client, policy, window, _settings().home, rv.declared_streamable(store.path))


@st.cache_data(ttl=TTL)
def divergence_samples(limit: int = 20) -> pd.DataFrame:
    """The newest divergence samples from the request-text store, without their texts (those stay in the
    store, for the review and the replay): request id, task type, stage, input length, answer hashes."""
    path = _settings().request_texts_path
    if not path.exists():
        return pd.DataFrame()
    with RequestTextStore(path) as store:
        rows = store.divergences(limit=limit)
    return pd.DataFrame([{k: v for k, v in r.items() if not k.endswith("_text")} for r in rows])


def readiness_evidence(gates: dict) -> str:
    """What a readiness verdict's gates stood on (n, intervals, why unknown), as one line
    (`routerscope.warehouse.analytics.review.evidence`, the same words as `routerscope report readiness`)."""
    return rv.evidence(gates)
