"""The Prometheus endpoint (`routerscope exporter`): the stored metric windows and the pipeline signals, read
from the warehouse, in Prometheus's exposition format (docs/operations.md "Prometheus").

What it serves, in base units (seconds, counts), labels bounded to task type, fallback type, level and
boundary (never an id), every series present from zero for every task type the warehouse has windows of:

* counters, summed over every finished 5-minute window (each window's latest computation), so `increase()`
  over an hour or a day counts the decisions of the windows that ended in it: `routerscope_decisions_total`,
  `routerscope_device_entered_total`, `routerscope_fallbacks_total{type}`, `routerscope_served_total{level}`,
  the labeled false and missed fallbacks, the three rollback signals' counts (FAMILIES);
* the same counts of the **latest finished window** of each grain as gauges, `routerscope_window_…{grain}`,
  with the window's end (`routerscope_window_end_timestamp_seconds`) and the L2/L3 drift flag: the rule files
  of `routerscope.warehouse.analytics.alerting.prometheus` read these, because a window's number holds for a whole
  window
  exactly as the project's own rules read it (a counter that steps once per window would leave `increase()`
  over one window empty at some evaluations);
* the pipeline: open breakers per boundary in the latest finished 5-minute window, the newest event's time and
  the last load's (freshness and ingest lag), quarantined and loaded messages, blocking data-quality failures;
* each window's end and age (`routerscope_window_age_seconds`): the exported rules count a window only while it
  is fresh (docs/operations.md "Stale windows");
* histograms of every live decision before the latest finished window's end, read from the decisions
  themselves (`HISTOGRAMS`): each model call's duration by level (`gen_ai_client_operation_duration_seconds`,
  OpenTelemetry's GenAI name and bounds), request latency, time to first token, tokens
  (`gen_ai_client_token_usage`) and cost, each bucket's exemplar the trace id of its newest decision (in the
  OpenMetrics format, which prometheus_client serves when the scraper asks for it).

The endpoint reads the warehouse at most once per `refresh_s` and serves that snapshot in between: an
embedded warehouse is one process's at a time (docs/architecture.md §3), so a scrape must not hold it from
the loader. A failed read keeps the last snapshot and counts `routerscope_exporter_refresh_failures_total`.

A replay (`Replay`, `routerscope exporter --replay-from`) serves the warehouse as it stood at a clock that starts
in the past and runs `speed` times faster until it reaches the present, every time it serves moved onto the wall
clock: Prometheus evaluates on what it scrapes now, so this is how a past incident reaches its rules (a drill).

The server holds under load: a thread per connection, at most `MAX_CONNECTIONS` at once (one past the cap is
answered 503 with Retry-After at once, never queued), each socket read and write bounded by `IO_TIMEOUT_S`
(a client that sends half a request and stops holds one thread for that long, never the endpoint). Label values
are bounded too: at most `max_task_types` task types by volume keep their name, the rest are summed under
`task_type="other"`, and the cap and the number folded are served (`routerscope_exporter_task_type_cap`,
`routerscope_exporter_task_types_folded`): invented task types cannot grow a scrape past Prometheus's timeout.

`/-/healthy` answers without reading the warehouse (the Dagster sensor's probe, `routerscope.pipelines.exporter`); a
lease
file, when given, stops the endpoint once nobody has renewed it for `lease_timeout_s`."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import select
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import IO, Any, cast
from wsgiref.handlers import SimpleHandler
from wsgiref.simple_server import ServerHandler, WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry, ProcessCollector, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.samples import Exemplar

from routerscope.core import interrupts, procs
from routerscope.core.errors import RouterscopeError
from routerscope.core.settings import Settings
from routerscope.core.timeutil import UTC
from routerscope.warehouse import schema_migrations
from routerscope.warehouse.analytics.alerting.evaluate import breaker_open_series
from routerscope.warehouse.client import open_warehouse
from routerscope.warehouse.queries import alerts as alert_queries
from routerscope.warehouse.queries import breaker_events, decisions, quarantine
from routerscope.warehouse.queries import histograms as histogram_queries
from routerscope.warehouse.queries import metric_windows as windows
from routerscope.warehouse.queries.metric_windows import WINDOW_COUNTS

DEFAULT_PORT = 9464
DEFAULT_REFRESH_S = 15.0
GRAINS = {"5m": timedelta(minutes=5), "1d": timedelta(days=1)}
BOUNDARIES = ("device", "cloud")
FALLBACK_TYPES = ("quality", "timeout", "error", "capability")
LEVELS = ("L0", "L1", "L2", "L3", "L4")
FUTURE_ALLOWANCE = timedelta(minutes=5)  # events dated further ahead are clock errors, not freshness (quality/)
HEALTH_PATH = "/-/healthy"  # Prometheus's and Alertmanager's own probe path
HEALTH_BODY = b"routerscope exporter\n"
MAX_CONNECTIONS = 64  # served at once; one more is refused with a 503 at once
IO_TIMEOUT_S = 10.0  # each read and write of a connection (Prometheus's own scrape timeout is 10 s)
LISTEN_BACKLOG = 256  # connections the kernel queues before accept: a burst of scrapes is accepted, then refused
DEFAULT_MAX_TASK_TYPES = 50
OTHER = "other"  # the task type the ones past the cap are summed under


@dataclass(frozen=True)
class Family:
    """One counted quantity: `routerscope_<name>_total` and `routerscope_window_<name>`, optionally split by
    one bounded label whose every value is always served."""

    name: str
    help: str
    label: str | None = None
    keys: dict[str, str] = field(default_factory=dict)  # label value → WINDOW_COUNTS key ('' without a label)


FAMILIES = (
    Family("decisions", "Routing decisions (live events)", None, {"": "decisions"}),
    Family(
        "device_entered",
        "Decisions that entered the device (the fallback rate's denominator)",
        None,
        {"": "device_entered"},
    ),
    Family(
        "fallbacks",
        "Fallbacks by type: quality, timeout and error entered the device; capability did not",
        "type",
        {t: f"fallbacks_{t}" for t in FALLBACK_TYPES},
    ),
    Family(
        "device_bypassed",
        "Decisions that bypassed the device as unavailable (breaker open)",
        None,
        {"": "device_bypassed"},
    ),
    Family(
        "served",
        "Decisions by the degrade level that served them (L4: the canned answer)",
        "level",
        {lv: f"served_{lv}" for lv in LEVELS},
    ),
    Family("false_fallbacks", "Labeled fallbacks the device would have answered well", None, {"": "false_fallbacks"}),
    Family(
        "false_fallback_labeled",
        "Fallbacks with a label (false fallbacks' denominator)",
        None,
        {"": "false_fallback_labeled"},
    ),
    Family("missed_fallbacks", "Labeled device answers that should have fallen back", None, {"": "missed_fallbacks"}),
    Family(
        "missed_fallback_labeled",
        "Device-served decisions with a label (missed fallbacks' denominator)",
        None,
        {"": "missed_fallback_labeled"},
    ),
    Family("route_correct", "Labeled decisions routed correctly", None, {"": "route_correct"}),
    Family(
        "route_labeled", "Decisions with a routing label (route accuracy's denominator)", None, {"": "route_labeled"}
    ),
    Family("device_attempts", "Device attempts (offload failure's denominator)", None, {"": "device_attempts"}),
    Family("offload_failures", "Device results failing validation or erroring", None, {"": "offload_failures"}),
    Family("degrade_triggered", "Device-entered decisions sent on to the cloud", None, {"": "degrade_triggered"}),
)
assert {k for f in FAMILIES for k in f.keys.values()} == set(WINDOW_COUNTS), "every count has one family"


@dataclass(frozen=True)
class Snapshot:
    """What one read of the warehouse found (see `read_snapshot`)."""

    at: datetime
    task_types: list[str]
    totals: dict[str, dict[str, int]]  # task_type → count → all finished 5-minute windows
    latest: dict[str, dict[str, Any] | None]  # grain → metric_windows.latest_window_counts
    breakers_open: dict[str, int]  # boundary → instances open in the latest finished 5-minute window
    newest_event: datetime | None
    last_load: datetime | None
    quarantined: int
    loaded: int
    dq_blocking_failures: int
    replay_as_of: datetime | None = None  # a replay's historical time; every other time here moved onto the wall clock
    histograms: list[dict[str, Any]] | None = field(default_factory=list)  # None: as the previous snapshot's
    histograms_key: str = ""  # histogram_queries.histogram_key of what `histograms` counted


def last_ended_window(now: datetime, step: timedelta) -> datetime:
    """The start of the latest window of length `step` (aligned to the epoch) that had ended by `now`."""
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    return epoch + ((now - epoch) // step) * step - step


@dataclass
class Replay:
    """A clock for serving history (`routerscope exporter --replay-from`): it starts at `start` when the exporter
    starts and runs `speed` times faster than the wall clock until it reaches the present, then keeps to it. With
    `until` (`--replay-until`) it runs to that moment instead and stays there, served as now: a moment in the
    future is how a drill shows time moving on after the data stopped (the latest window ages, `windows_stale`)."""

    start: datetime
    speed: float = 1.0
    started: float = field(default_factory=time.monotonic)
    until: datetime | None = None

    def __post_init__(self):
        if not self.speed > 0:  # NaN too
            raise ValueError("a replay's speed must be positive")

    def as_of(self, wall: datetime) -> datetime:
        end = wall if self.until is None else self.until
        ahead = (time.monotonic() - self.started) * self.speed  # inf × 0 is NaN: then too, the end
        if not ahead < (end - self.start).total_seconds():  # caught up (a speed of 1e300 or inf never overflows)
            return end
        return self.start + timedelta(seconds=ahead)


def shifted(snapshot: Snapshot, wall: datetime) -> Snapshot:
    """A snapshot read as of a past time, presented as now: every time it serves moved by the same offset onto
    `wall`, so rules that compare a time with Prometheus's `time()` (ingest freshness) judge the replayed moment
    as they would have then. The last load's time is dropped: it is the warehouse's latest, not as of the
    replayed moment."""
    by = wall - snapshot.at

    def move(t: datetime | None) -> datetime | None:
        return t + by if t else t

    latest = {g: w and {**w, "start": move(w["start"]), "end": move(w["end"])} for g, w in snapshot.latest.items()}
    return dataclasses.replace(
        snapshot,
        at=wall,
        latest=latest,
        newest_event=move(snapshot.newest_event),
        last_load=None,
        replay_as_of=snapshot.at,
    )


def read_snapshot(client, now: datetime | None = None, histograms_key: str = "") -> Snapshot:
    """Everything the endpoint serves, read as of `now` (default: the current time). The histograms are read
    only when their key differs from `histograms_key` (the caller's last); otherwise they are None: unchanged
    (a full read costs about 2.4 s per million decisions, bench/exporter_histograms.py)."""
    now = now or datetime.now(UTC)
    totals = windows.total_counts(client, "5m", now)
    latest = {grain: windows.latest_window_counts(client, grain, now) for grain in GRAINS}
    task_types = sorted(set(totals) | {t for w in latest.values() if w for t in w["counts"]})
    step = GRAINS["5m"]
    start = last_ended_window(now, step)
    breakers = {}
    for boundary in BOUNDARIES:  # the alert rules' signal (evaluate.breaker_open_series) for that one window
        found = breaker_events.signal_transitions(client, boundary, start, start + step)
        breakers[boundary] = int(breaker_open_series(found, [start], step)[0].value)
    newest = decisions.newest_event(client, now + FUTURE_ALLOWANCE)
    if newest is None:  # nothing ever arrived: as stale as the warehouse is old (the freshness rule's reading)
        newest = schema_migrations.created_at(client)
    last_load, _ = decisions.load_summary(client)
    quarantined, loaded = quarantine.totals(client)
    key = histogram_queries.histogram_key(client, start + step)  # the decisions of the finished windows
    histograms = None if key == histograms_key else histogram_queries.histograms(client, start + step)
    return Snapshot(
        at=now,
        task_types=task_types,
        totals=totals,
        latest=latest,
        breakers_open=breakers,
        newest_event=newest,
        last_load=last_load,
        quarantined=quarantined,
        loaded=loaded,
        dq_blocking_failures=int(alert_queries.blocking_dq_failures(client)),
        histograms=histograms,
        histograms_key=key,
    )


def capped(snapshot: Snapshot, cap: int) -> tuple[Snapshot, int]:
    """`snapshot` with at most `cap` task types named — those with the most decisions over every finished
    window (then the latest windows', then by name) — and every other one summed under OTHER; with the number of
    task types folded. A task type really named OTHER is summed there too."""
    requests: dict[str, int] = {}
    histograms = snapshot.histograms or []
    snapshot = dataclasses.replace(snapshot, histograms=histograms)
    for h in histograms:
        if h["metric"] == "request_duration":
            requests[h["task_type"]] = requests.get(h["task_type"], 0) + sum(h["counts"].values())
    every = set(snapshot.task_types) | {h["task_type"] for h in histograms}
    if len(every) <= cap:
        return snapshot, 0

    def volume(task_type: str) -> tuple:
        latest = sum(
            (w or {"counts": {}})["counts"].get(task_type, {}).get("decisions", 0) for w in snapshot.latest.values()
        )
        stored = snapshot.totals.get(task_type, {}).get("decisions", 0)
        return (-max(stored, requests.get(task_type, 0)), -latest, task_type)

    ranked = sorted((t for t in every if t != OTHER), key=volume)
    kept = set(ranked[:cap])
    folded = [t for t in every if t not in kept]

    def fold(counts: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
        out = {t: c for t, c in counts.items() if t in kept}
        other: dict[str, int] = {}
        for t, c in counts.items():
            if t not in kept:
                for key, n in c.items():
                    other[key] = other.get(key, 0) + n
        if other:
            out[OTHER] = other
        return out

    latest = {g: w and {**w, "counts": fold(w["counts"])} for g, w in snapshot.latest.items()}
    task_types = sorted(kept | {OTHER})
    merged: dict[tuple, dict[str, Any]] = {}
    for h in histograms:
        task_type = h["task_type"] if h["task_type"] in kept else OTHER
        into = merged.setdefault(
            (h["metric"], task_type, h["label"]),
            {**h, "task_type": task_type, "counts": {}, "sum": 0.0, "exemplars": {}},
        )
        for bucket, n in h["counts"].items():
            into["counts"][bucket] = into["counts"].get(bucket, 0) + n
        into["sum"] += h["sum"]
        for bucket, ex in h["exemplars"].items():
            if bucket not in into["exemplars"] or ex[2] > into["exemplars"][bucket][2]:
                into["exemplars"][bucket] = ex
    return dataclasses.replace(
        snapshot, task_types=task_types, totals=fold(snapshot.totals), latest=latest, histograms=list(merged.values())
    ), len([t for t in folded if t != OTHER])


def _labels(family: Family, *first: str) -> list[str]:
    return [*first, "task_type", *([family.label] if family.label else [])]


def _instant(name: str, help_text: str, at: datetime | None) -> list:
    """A gauge of one time in seconds since the epoch; none when there is no such time."""
    if at is None:
        return []
    gauge = GaugeMetricFamily(name, help_text)
    gauge.add_metric([], at.timestamp())
    return [gauge]


def families(
    snapshot: Snapshot | None, refresh_failures: int = 0, max_task_types: int = DEFAULT_MAX_TASK_TYPES
) -> list:
    """The metric families of a snapshot (None: nothing read yet, only the exporter's own), with at most
    `max_task_types` task types named (`capped`)."""
    out: list = []
    failures = CounterMetricFamily(
        "routerscope_exporter_refresh_failures", "Warehouse reads that failed (the last snapshot kept)"
    )
    failures.add_metric([], refresh_failures)
    out.append(failures)
    cap = GaugeMetricFamily(
        "routerscope_exporter_task_type_cap",
        f'Task types served by name at most; the rest are summed under task_type="{OTHER}"',
    )
    cap.add_metric([], max_task_types)
    out.append(cap)
    if snapshot is None:
        return out
    snapshot, folded = capped(snapshot, max_task_types)
    dropped = GaugeMetricFamily(
        "routerscope_exporter_task_types_folded",
        f'Task types past the cap, summed under task_type="{OTHER}" instead of served by name',
    )
    dropped.add_metric([], folded)
    out.append(dropped)
    out += _instant(
        "routerscope_exporter_refresh_timestamp_seconds",
        "When the served snapshot was read from the warehouse",
        snapshot.at,
    )
    out += _instant(
        "routerscope_exporter_replay_timestamp_seconds",
        "The past moment a replay serves (--replay-from), its times moved onto the wall clock; absent when live",
        snapshot.replay_as_of,
    )
    for family in FAMILIES:
        counter = CounterMetricFamily(
            f"routerscope_{family.name}", f"{family.help}, every finished 5-minute window", labels=_labels(family)
        )
        gauge = GaugeMetricFamily(
            f"routerscope_window_{family.name}",
            f"{family.help}, in the latest finished window of the grain",
            labels=_labels(family, "grain"),
        )
        for task_type in snapshot.task_types:
            total = snapshot.totals.get(task_type, {})
            for value, key in family.keys.items():
                extra = [value] if family.label else []
                counter.add_metric([task_type, *extra], total.get(key, 0))
                for grain in GRAINS:
                    latest = snapshot.latest.get(grain) or {"counts": {}}
                    gauge.add_metric([grain, task_type, *extra], latest["counts"].get(task_type, {}).get(key, 0))
        out += [counter, gauge]
    ends = GaugeMetricFamily(
        "routerscope_window_end_timestamp_seconds", "End of the latest finished metric window", labels=["grain"]
    )
    ages = GaugeMetricFamily(
        "routerscope_window_age_seconds",
        "How long before the served snapshot the latest finished metric window ended (its freshness: a window "
        "served past one grain and the allowance of docs/operations.md is stale)",
        labels=["grain"],
    )
    drifting = GaugeMetricFamily(
        "routerscope_window_l2_l3_drifting",
        "1 when the latest finished window's L2/L3 share drifts up against its baseline (docs/metrics.md)",
        labels=["grain"],
    )
    for grain in GRAINS:
        window = snapshot.latest.get(grain)
        if window and window["end"]:
            ends.add_metric([grain], window["end"].timestamp())
            ages.add_metric([grain], max(0.0, (snapshot.at - window["end"]).total_seconds()))
        drifting.add_metric([grain], 1 if window and window["drifting"] else 0)
    out += [ends, ages, drifting]
    breakers = GaugeMetricFamily(
        "routerscope_breakers_open",
        "Instances whose breaker of the boundary was open at any moment in the latest finished 5-minute window",
        labels=["boundary"],
    )
    for boundary in BOUNDARIES:
        breakers.add_metric([boundary], snapshot.breakers_open.get(boundary, 0))
    out.append(breakers)
    out += _instant(
        "routerscope_newest_event_timestamp_seconds",
        "Event time of the newest loaded decision (before the first: the warehouse's creation)",
        snapshot.newest_event,
    )
    out += _instant(
        "routerscope_last_load_timestamp_seconds", "When the newest decision row was loaded", snapshot.last_load
    )
    for name, help_text, messages in (
        ("routerscope_quarantined_messages", "Messages the loader quarantined", snapshot.quarantined),
        ("routerscope_loaded_messages", "Messages the loader stored", snapshot.loaded),
    ):
        counter = CounterMetricFamily(name, help_text)
        counter.add_metric([], messages)
        out.append(counter)
    dq = GaugeMetricFamily(
        "routerscope_dq_blocking_failures", "Blocking data-quality checks failed in the latest checked window"
    )
    dq.add_metric([], snapshot.dq_blocking_failures)
    out.append(dq)
    out += histogram_families(snapshot.histograms or [])
    return out


# metric of histogram_queries → (Prometheus name, help, its own label beside task_type or None)
HISTOGRAMS = {
    "attempt_duration": (
        "gen_ai_client_operation_duration_seconds",
        "Duration of each model call (attempt) of the live decisions of every finished 5-minute window, by the "
        "attempt's degrade level (OpenTelemetry gen_ai.client.operation.duration)",
        "level",
    ),
    "request_duration": (
        "routerscope_request_duration_seconds",
        "End-to-end latency of each live routed request, every attempt included",
        None,
    ),
    "ttft": (
        "routerscope_time_to_first_token_seconds",
        "Time to the first token of each live streamed request that recorded one",
        None,
    ),
    "tokens": (
        "gen_ai_client_token_usage",
        "Tokens of each live routed request, by token type (OpenTelemetry gen_ai.client.token.usage)",
        "gen_ai_token_type",
    ),
    "cost": ("routerscope_request_cost_usd", "Cloud cost of each live routed request, in US dollars", None),
}


def histogram_families(histograms: list[dict[str, Any]]) -> list:
    """One HistogramMetricFamily per metric of HISTOGRAMS, cumulative buckets with OpenTelemetry's bounds, each
    bucket's exemplar the trace id of its newest decision (served in the OpenMetrics format, when asked)."""
    out = []
    for metric, (name, help_text, label) in HISTOGRAMS.items():
        family = HistogramMetricFamily(name, help_text, labels=["task_type", *([label] if label else [])])
        bounds = histogram_queries.BOUNDS[metric]
        for h in sorted((h for h in histograms if h["metric"] == metric), key=lambda h: (h["task_type"], h["label"])):
            buckets: list = []
            running = 0
            for i, bound in enumerate([*bounds, float("inf")], start=1):
                index = str(i if i <= len(bounds) else 0)
                running += h["counts"].get(index, 0)
                ex = h["exemplars"].get(index)
                exemplar = Exemplar({"trace_id": ex[0][:64]}, ex[1], ex[2]) if ex else None
                le = "+Inf" if bound == float("inf") else repr(float(bound))
                buckets.append((le, running, exemplar) if exemplar else (le, running))
            family.add_metric([h["task_type"], *([h["label"]] if label else [])], buckets, h["sum"])
        out.append(family)
    return out


def read_warehouse(
    settings: Settings, lock_timeout_s: float = 5.0, now: datetime | None = None, histograms_key: str = ""
) -> Snapshot:
    """One snapshot as of `now` (default: the current time), the warehouse opened and closed around it
    (`open_warehouse`, waiting at most `lock_timeout_s` for an embedded warehouse's lock)."""
    with open_warehouse(settings, purpose="exporter", timeout_s=lock_timeout_s, migrated=True) as client:
        return read_snapshot(client, now, histograms_key)


# Each open and close of an embedded (chDB) warehouse leaves about 2 MB behind in the process that did it, whatever
# it queried (measured here: 300 opens with `SELECT 1` alone, 500 → 1,040 MB; 300 reads in one open stay flat).
# A process that opens it every refresh for weeks would grow without bound, so the exporter reads an embedded
# warehouse in a worker process that is replaced after this many reads (a new one every ~12 minutes at the
# default refresh), and its own memory stays flat (bench/exporter.py). The worker is a plain child on pipes, a
# JSON line a read: one the exporter can kill outright when a read hangs (multiprocessing.Pool's terminate()
# was seen to hang under pytest-xdist).
READS_PER_WORKER = 50
_DATETIMES = ("at", "newest_event", "last_load", "replay_as_of")


def snapshot_json(snapshot: Snapshot) -> str:
    return json.dumps(asdict(snapshot), default=lambda t: t.isoformat())


def snapshot_from_json(text: str) -> Snapshot:
    raw = json.loads(text)
    for key in _DATETIMES:
        raw[key] = raw[key] and datetime.fromisoformat(raw[key])
    for window in raw["latest"].values():
        if window:
            window["start"] = window["start"] and datetime.fromisoformat(window["start"])
            window["end"] = window["end"] and datetime.fromisoformat(window["end"])
    return Snapshot(**raw)


def worker_request(line: str) -> tuple[datetime | None, str]:
    """One request line of the read worker: `<ISO time or nothing>\t<histograms key or nothing>\n`. Only the line's
    end is cut: a line with no time starts with its tab, which a strip() would take away, reading the key as a time."""
    when, _, key = line.rstrip("\r\n").partition("\t")
    return (datetime.fromisoformat(when) if when.strip() else None), key.strip()


def worker_main() -> None:
    """The read worker (`python -c "…; worker_main()"`): for each line on stdin (an ISO time to read as of, or
    empty for now), one snapshot of the warehouse that ROUTERSCOPE_CLICKHOUSE_DSN names as a JSON line on stdout
    (`{"error": …}` for one the warehouse refused); exits at the end of its input."""
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything else written to stdout, native code's included, goes to stderr: not into an answer
    sys.stdout = sys.stderr
    settings = Settings.from_env()
    timeout_s = float(os.environ.get("ROUTERSCOPE_EXPORTER_LOCK_TIMEOUT_S", "5"))
    for request in sys.stdin:
        now, key = worker_request(request)
        try:
            line = snapshot_json(read_warehouse(settings, timeout_s, now, key))
        except RouterscopeError as exc:
            line = json.dumps({"error": str(exc)})
        answers.write(line + "\n")
        answers.flush()


class _Worker:
    """One read worker process and the reads it has done."""

    def __init__(self, settings: Settings, lock_timeout_s: float):
        env = {k: v for k, v in os.environ.items() if not k.startswith("ROUTERSCOPE_")}
        env |= {
            "ROUTERSCOPE_HOME": str(settings.home),
            "ROUTERSCOPE_CLICKHOUSE_DSN": settings.warehouse.raw,
            "ROUTERSCOPE_EXPORTER_LOCK_TIMEOUT_S": str(lock_timeout_s),
        }
        code = "from routerscope.warehouse.analytics.exporter import worker_main; worker_main()"
        self.process = procs.spawn(
            [sys.executable, "-c", code], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.reads = 0

    def read(self, timeout_s: float, now: datetime | None = None, histograms_key: str = "") -> Snapshot:
        self.reads += 1
        stdin, stdout = self.process.stdin, self.process.stdout
        if stdin is None or stdout is None:  # spawned with both piped (`__init__`)
            raise RouterscopeError("the exporter's read worker has no pipes")
        stdin.write(f"{now.isoformat() if now else ''}\t{histograms_key}\n")
        stdin.flush()
        poller = select.poll()  # not select(): a process with over 1,024 files open has descriptors it cannot take
        poller.register(stdout, select.POLLIN)
        line = stdout.readline() if poller.poll(timeout_s * 1000) else ""
        if not line:
            raise TimeoutError("the exporter's read worker did not answer")
        found = json.loads(line)
        if "error" in found:
            raise RouterscopeError(found["error"])
        return snapshot_from_json(line)

    def stop(self) -> None:
        procs.stop(self.process, timeout_s=5)


class WarehouseCollector:
    """A prometheus_client collector over the warehouse: one read per `refresh_s` at most (`read_warehouse`; an
    embedded warehouse in a recycled worker process, see READS_PER_WORKER); a failed read keeps the last
    snapshot and is counted. With a `replay`, each read is as of the replay's clock (`shifted` onto now)."""

    def __init__(
        self,
        settings: Settings,
        refresh_s: float = DEFAULT_REFRESH_S,
        lock_timeout_s: float = 5.0,
        replay: Replay | None = None,
        max_task_types: int = DEFAULT_MAX_TASK_TYPES,
    ):
        self.settings, self.refresh_s, self.lock_timeout_s = settings, refresh_s, lock_timeout_s
        self.max_task_types = max_task_types
        self.replay = replay
        self.snapshot: Snapshot | None = None
        self.failures = 0
        self._read_at = float("-inf")
        self._lock = threading.Lock()
        self._worker: _Worker | None = None
        self.last_error = ""

    def _read(self, now: datetime | None = None) -> Snapshot:
        snapshot = self._read_raw(now, self.snapshot.histograms_key if self.snapshot else "")
        if snapshot.histograms is None:  # unchanged since the last read
            snapshot = dataclasses.replace(snapshot, histograms=self.snapshot.histograms if self.snapshot else [])
        return snapshot

    def _read_raw(self, now: datetime | None, histograms_key: str) -> Snapshot:
        if not self.settings.warehouse.embedded:
            return read_warehouse(self.settings, self.lock_timeout_s, now, histograms_key)
        if self._worker is not None and self._worker.reads >= READS_PER_WORKER:
            self.close()
        if self._worker is None:
            self._worker = _Worker(self.settings, self.lock_timeout_s)
        return self._worker.read(self.lock_timeout_s + 120, now, histograms_key)  # a first read imports chDB

    def _read_as_of_clock(self) -> Snapshot:
        if self.replay is None:
            return self._read()
        wall = datetime.now(UTC)
        as_of = self.replay.as_of(wall)
        snapshot = self._read(as_of)
        return shifted(snapshot, wall) if as_of != wall else snapshot

    def refresh(self) -> None:
        try:
            self.snapshot = self._read_as_of_clock()
            self.last_error = ""
        except RouterscopeError as exc:
            self._failed(exc)
        except (TimeoutError, OSError, ValueError) as exc:  # a stuck or dead worker: killed, a new one next time
            self._failed(exc)
            self.close()
        self._read_at = time.monotonic()

    def _failed(self, exc: Exception) -> None:
        self.failures += 1
        self.last_error = f"{type(exc).__name__}: {exc}"
        print(f"routerscope exporter: warning: reading the warehouse failed ({self.last_error})", file=sys.stderr)

    def close(self) -> None:
        if self._worker is not None:
            self._worker.stop()
            self._worker = None

    def collect(self):
        with self._lock:
            if time.monotonic() - self._read_at >= self.refresh_s:
                self.refresh()
            snapshot, failures = self.snapshot, self.failures
        yield from families(snapshot, failures, self.max_task_types)

    def describe(self):
        return []  # registering must not read the warehouse


class _Stoppable(ServerHandler):
    """wsgiref's `run` answers every exception with a 500, KeyboardInterrupt too: the command's SIGTERM (raised as
    one, routerscope/cli/interrupt.py) landing while a scrape reads the warehouse was swallowed, and the exporter
    went on serving until killed. Such an interrupt goes on up and stops `serve_forever`."""

    # wsgiref's attributes the type stubs leave out (annotations only: nothing is set here)
    status: str | None  # BaseHandler's: None until the application starts its answer
    request_handler: WSGIRequestHandler  # ServerHandler's: what it logs through

    def handle_error(self):
        if not isinstance(sys.exc_info()[1], Exception):
            raise
        super().handle_error()

    def close(self):
        if self.status is None:  # interrupted before any answer: nothing to log (the base class would fail on it)
            SimpleHandler.close(self)
        else:
            super().close()


class _Quiet(WSGIRequestHandler):
    timeout = IO_TIMEOUT_S  # StreamRequestHandler.setup puts it on the socket: every read and write is bounded

    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        pass

    def handle(self):
        """WSGIRequestHandler.handle with `_Stoppable` as its handler."""
        self.raw_requestline = self.rfile.readline(65537)
        if len(self.raw_requestline) > 65536:
            self.requestline = self.request_version = self.command = ""
            self.send_error(414)
            return
        if not self.parse_request():  # an error code has been sent
            return
        # the streams and the server the base class's `handle` passes: the stubs type the streams as
        # BufferedIOBase and `server` as any socketserver, where the handler takes IO[bytes] and this server is
        # a WSGIServer (`_Server`)
        rfile, wfile = cast(IO[bytes], self.rfile), cast(IO[bytes], self.wfile)
        app = cast(WSGIServer, self.server).get_app()
        if app is None:  # set before the server serves (`Exporter`)
            raise RouterscopeError("the exporter's server has no application")
        handler = _Stoppable(rfile, wfile, self.get_stderr(), self.get_environ(), multithread=True)
        handler.request_handler = self  # for logging, as the base class sets it
        handler.run(app)


class _Server(ThreadingMixIn, WSGIServer):
    """A thread per connection, at most `MAX_CONNECTIONS` at once: one past it is answered 503 at once."""

    daemon_threads = True  # a connection still open never holds the process at its end
    block_on_close = False
    request_queue_size = LISTEN_BACKLOG

    def __init__(self, address, handler, max_connections: int = MAX_CONNECTIONS):
        self.slots = threading.BoundedSemaphore(max_connections)
        self.refused = 0
        self._holding: set[int] = set()  # the requests holding a slot (id), each released once
        self._holding_lock = threading.Lock()
        super().__init__(address, handler)

    def _release(self, request) -> None:
        """Give back `request`'s slot, once: the connection's thread and an interrupt of `process_request` both
        try. A SIGTERM that landed while the thread was starting released it twice; the ValueError that raised
        replaced the stop, socketserver took it for a failed request, and the exporter served on until killed."""
        with self._holding_lock:
            if id(request) not in self._holding:
                return
            self._holding.discard(id(request))
        self.slots.release()

    def service_actions(self):
        """Between polls of `serve_forever`: a SIGTERM Python or a request's error handling swallowed stops it all
        the same (routerscope/core/interrupts.py)."""
        interrupts.raise_pending()

    def process_request(self, request, client_address):
        if not self.slots.acquire(blocking=False):
            self.refused += 1
            try:
                request.settimeout(1.0)
                request.sendall(
                    b"HTTP/1.0 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: text/plain\r\n"
                    b"Content-Length: 43\r\nConnection: close\r\n\r\nrouterscope exporter: too many connections\n"
                )
            except OSError:
                pass
            self.shutdown_request(request)
            return
        with self._holding_lock:
            self._holding.add(id(request))
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release(request)
            raise

    def handle_error(self, request, client_address):
        """A client that timed out or went away is its own business: no traceback in the exporter's log."""
        if isinstance(sys.exc_info()[1], TimeoutError | ConnectionError):
            return
        super().handle_error(request, client_address)

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release(request)


def _with_health(metrics_app):
    """The metrics at every path but HEALTH_PATH, which answers at once without reading the warehouse."""

    def app(environ, start_response):
        if environ.get("PATH_INFO") == HEALTH_PATH:
            start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
            return [HEALTH_BODY]
        return metrics_app(environ, start_response)

    return app


class Lease:
    """A file someone renews (touches) while they want the endpoint up: the Dagster sensor that started it
    (`routerscope.pipelines.exporter`). Expired when it is missing or older than `timeout_s`."""

    def __init__(self, path: Path, timeout_s: float):
        self.path, self.timeout_s = Path(path), timeout_s

    def expired(self) -> bool:
        try:
            return time.time() - self.path.stat().st_mtime > self.timeout_s
        except FileNotFoundError:
            return True


class Exporter:
    """The endpoint on 127.0.0.1:`port` (`/metrics`, any path in fact; `/-/healthy`): `serve_forever()`, then
    `close()`. With a `lease`, `serve_forever` returns once the lease expires (`lease_expired` is then True)."""

    def __init__(
        self,
        settings: Settings,
        port: int = DEFAULT_PORT,
        refresh_s: float = DEFAULT_REFRESH_S,
        replay: Replay | None = None,
        lease: Lease | None = None,
        max_task_types: int = DEFAULT_MAX_TASK_TYPES,
        max_connections: int = MAX_CONNECTIONS,
    ):
        self.collector = WarehouseCollector(settings, refresh_s, replay=replay, max_task_types=max_task_types)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self.collector)
        ProcessCollector(registry=registry)  # the exporter's own memory and CPU
        try:
            self.server: WSGIServer = _Server(("127.0.0.1", port), _Quiet, max_connections)
            self.server.set_app(_with_health(make_wsgi_app(registry)))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            raise RouterscopeError(
                f"port {port} on 127.0.0.1 is already in use (another exporter of this warehouse, or another "
                "service): run one exporter per warehouse, or pick another with --port"
            ) from None
        self.port = self.server.server_address[1]
        self.lease = lease
        self.lease_expired = False
        self._stopped = threading.Event()

    def _watch_lease(self) -> None:
        lease = self.lease
        if lease is None:  # started only with a lease (`serve_forever`)
            return
        check_s = min(5.0, max(lease.timeout_s / 4, 0.2))
        while not self._stopped.wait(check_s):
            if lease.expired():
                self.lease_expired = True
                self.server.shutdown()
                return

    def serve_forever(self) -> None:
        if self.lease is not None:
            threading.Thread(target=self._watch_lease, name="exporter-lease", daemon=True).start()
        try:
            self.server.serve_forever()
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        """Stop `serve_forever` (from another thread)."""
        self.server.shutdown()

    def close(self) -> None:
        self.server.server_close()
        self.collector.close()


def make_exporter(
    settings: Settings,
    port: int = DEFAULT_PORT,
    refresh_s: float = DEFAULT_REFRESH_S,
    replay: Replay | None = None,
    lease: Lease | None = None,
    max_task_types: int = DEFAULT_MAX_TASK_TYPES,
    max_connections: int = MAX_CONNECTIONS,
) -> Exporter:
    return Exporter(
        settings,
        port,
        refresh_s,
        replay=replay,
        lease=lease,
        max_task_types=max_task_types,
        max_connections=max_connections,
    )
