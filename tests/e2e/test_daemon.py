"""The deployed path, for real (docs/architecture.md §4: "deployed as users deploy it, everything runs by itself").

`dagster-daemon run -w workspace.yaml` (it starts the code server the workspace names) with a
temporary DAGSTER_HOME, a real broker and the embedded warehouse. The test produces decision events
timed in the last 15 minutes and then runs no other command: the daemon's sensors and schedules alone
must load the events, compute every finished 5-minute window (never one before it ended plus the settle
delay), evaluate the alerts after them, and ask for yesterday's daily run that nobody ran at 00:15.

Slow by nature (the daemon, the code server and each run are separate Python processes: ≈ 1–2 min
here); the sensors' intervals are shortened with ROUTERSCOPE_SENSOR_INTERVAL_S (production: 60 s,
`routerscope.pipelines.timing`). Its own broker, not the session one: the daemon drains whole topics, and other
tests' messages would be loaded too. Every process it starts is stopped, even on failure."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from routerscope.cli.produce import produce_file
from routerscope.core import broker
from routerscope.core.procs import free_port
from routerscope.pipelines.exporter import lease_timeout_s
from routerscope.pipelines.timing import (
    DAILY_CATCH_UP_GRACE,
    FIVE_MINUTES,
    SETTLE_5M,
    SETTLE_DAILY,
    day_key,
    finished_day,
    floor_5m,
)
from routerscope.warehouse.client import open_warehouse
from routerscope.warehouse.migrate import migrate
from tests.support.events import decision, iso, new_id
from tests.support.home import REPO, clean_env, settings_for

pytestmark = [pytest.mark.integration, pytest.mark.daemon]

DAEMON = str(Path(sys.executable).parent / "dagster-daemon")
SENSOR_INTERVAL_S = "5"  # the daemon looks at its sensors every 5 s at most anyway
DEADLINE_S = 300


def bypass(**overrides) -> dict:
    """The device breaker is open: the router sends the request straight to the cloud."""
    return decision(
        **{
            "entered_device": False,
            "fallback_type": "none",
            "reason": "device_unavailable",
            "degrade_level": 2,
            "attempts": [{"level": 2, "outcome": "ok", "latency_ms": 600.0}],
            "cloud_calls": 1,
            "confidence": None,
            "threshold": None,
            "cloud_model": "cloud-small",
            **overrides,
        }
    )


def events_of_the_last_15_minutes(now: datetime) -> list[dict]:
    """One request every 4 s over [now − 15 min, now); 4 in 5 bypass the device (device_bypass rule:
    more than half of ≥ 20 requests in one window pages at once)."""
    out = []
    for i in range(225):
        t = now - timedelta(minutes=15) + i * timedelta(seconds=4)
        make = decision if i % 5 == 0 else bypass
        out.append(
            make(event_id=new_id(), event_time=iso(t), request_id=f"daemon-req-{i}", session_id=f"daemon-sess-{i % 7}")
        )
    return out


def _pids_with(marker: bytes) -> list[int]:
    """Processes of ours whose environment carries `marker` (this test's DAGSTER_HOME)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _ours(marker: bytes, *words: str) -> list[int]:
    """Processes carrying `marker` whose command line holds each of `words`."""
    found = []
    for pid in _pids_with(marker):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if all(w.encode() in cmdline for w in words):
            found.append(pid)
    return found


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def _deployment(tmp_path: Path):
    """(home, DAGSTER_HOME, settings): a home with its own broker and a migrated warehouse (the test reads the
    tables from the first poll on)."""
    home, dagster_home = tmp_path / "home", tmp_path / "dagster_home"
    home.mkdir()
    dagster_home.mkdir()
    (dagster_home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    settings = settings_for(home)
    broker.start(settings, port=free_port())
    with open_warehouse(settings) as client:
        migrate(client)
    return home, dagster_home, settings


def _start_daemon(env: dict, log_path: Path) -> subprocess.Popen:
    """`dagster-daemon run -w workspace.yaml` in a session of its own, its output in `log_path`."""
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            [DAEMON, "run", "-w", str(REPO / "workspace.yaml")],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _stop(daemon: subprocess.Popen, marker: bytes) -> None:
    """The daemon, its code server and any run worker: the process group first, then whatever still
    carries this test's DAGSTER_HOME (by pid)."""
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(daemon.pid, sig)
        except ProcessLookupError:
            break
        try:
            daemon.wait(wait)
            break
        except subprocess.TimeoutExpired:
            continue
    deadline = time.monotonic() + 10
    while (left := _pids_with(marker)) and time.monotonic() < deadline:
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)


def _log_excerpt(path: Path) -> str:
    """The daemon log's first error (where a failure starts) and its last lines."""
    text = path.read_text(errors="replace")
    first = min((i for i in (text.find("Traceback"), text.find("Error")) if i >= 0), default=-1)
    head = f"first error:\n{text[max(first - 300, 0) : first + 2500]}\n" if first >= 0 else ""
    return f"{head}last lines:\n{text[-1500:]}"


def _query(settings, sql: str):
    with open_warehouse(settings, purpose="daemon test") as client:
        return client.query(sql).result_rows


@pytest.mark.timeout(480)  # a real dagster-daemon and code server start, then sensors tick until windows settle
def test_the_daemon_alone_loads_events_computes_finished_windows_and_evaluates_alerts(tmp_path):
    home, dagster_home, settings = _deployment(tmp_path)
    log_path = tmp_path / "daemon.log"
    daemon = None
    marker = f"DAGSTER_HOME={dagster_home}".encode()
    try:
        now = datetime.now(UTC)
        events = events_of_the_last_15_minutes(now)
        path = tmp_path / "decisions.jsonl"
        path.write_text("".join(json.dumps(e) + "\n" for e in events))
        assert produce_file(settings, path, "decisions", show_progress=False).sent == len(events)
        # Windows that had ended at least the settle delay before the events arrived: late on
        # arrival, so the late-data sensor computes them (later ones are the schedule's).
        settled_end = floor_5m(now - SETTLE_5M)
        expected: dict[datetime, int] = {}
        for e in events:
            t = datetime.fromisoformat(e["event_time"].replace("Z", "+00:00"))
            if t < settled_end:
                expected[floor_5m(t)] = expected.get(floor_5m(t), 0) + 1

        env = clean_env(home, DAGSTER_HOME=str(dagster_home), ROUTERSCOPE_SENSOR_INTERVAL_S=SENSOR_INTERVAL_S)
        daemon = _start_daemon(env, log_path)

        loaded, windows, bypass_alerts = 0, {}, []
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline and daemon.poll() is None:
            time.sleep(3)
            loaded = _query(settings, "SELECT count() FROM routerscope.decisions FINAL")[0][0]
            windows = {
                start.replace(tzinfo=UTC): (requests, computed_at.replace(tzinfo=UTC))
                for start, requests, computed_at in _query(
                    settings,
                    "SELECT window_start, requests, computed_at FROM routerscope.metric_windows FINAL "
                    "WHERE grain = '5m' AND task_type = ''",
                )
            }
            bypass_alerts = _query(
                settings, "SELECT status, first_seen FROM routerscope.alerts FINAL WHERE rule = 'device_bypass'"
            )
            if loaded == len(events) and all(w in windows for w in expected) and bypass_alerts:
                break
        tail = _log_excerpt(log_path)
        assert daemon.poll() is None, f"the daemon exited with {daemon.returncode}:\n{tail}"
        assert loaded == len(events), f"loaded {loaded} of {len(events)}\n{tail}"
        assert expected and {w: windows[w][0] for w in expected if w in windows} == expected, (expected, windows, tail)
        # never computed before the window ended plus the settle delay (the open window is not a partition to compute)
        early = {w: at for w, (_, at) in windows.items() if at < w + FIVE_MINUTES + SETTLE_5M}
        assert not early, early
        assert bypass_alerts, f"no device_bypass alert was evaluated\n{tail}"
        _runs_came_from_the_daemon_and_ingest_never_overlapped(dagster_home)
    finally:
        if daemon is not None:
            _stop(daemon, marker)
        broker.stop(settings)
    assert not _pids_with(marker)


def _runs_came_from_the_daemon_and_ingest_never_overlapped(dagster_home: Path) -> None:
    import dagster as dg

    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        runs = instance.get_run_records()
    by_job: dict[str, list] = {}
    for record in runs:
        by_job.setdefault(record.dagster_run.job_name, []).append(record)
    assert {"ingest", "metrics_5m_job", "alerts_job"} <= set(by_job), sorted(by_job)
    # yesterday's 00:15 run never happened (no daemon then): it is caught up (due from 01:00 UTC)
    yesterday, today = finished_day(datetime.now(UTC))
    if datetime.now(UTC) >= today + SETTLE_DAILY + DAILY_CATCH_UP_GRACE:
        daily = [r.dagster_run.tags for r in by_job.get("metrics_daily_job", [])]
        expected = {"dagster/partition": day_key(yesterday), "dagster/sensor_name": "late_labels_sensor"}
        assert any(expected.items() <= tags.items() for tags in daily), daily
    sources = {r.dagster_run.job_name: r.dagster_run.tags.get("dagster/sensor_name") for r in runs}
    assert sources["ingest"] == "ingest_sensor" and sources["alerts_job"] == "alerts_after_metrics", sources
    spans = sorted((r.start_time, r.end_time or time.time()) for r in by_job["ingest"] if r.start_time)
    assert all(end <= next_start for (_, end), (next_start, _) in zip(spans, spans[1:])), spans


def _served_decisions(port: int) -> float | None:
    """The sum of `routerscope_decisions_total` the endpoint serves (None: it does not answer)."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    except OSError:
        return None
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        if f.name == "routerscope_decisions"
        for s in f.samples
        if s.name == "routerscope_decisions_total"
    )


# the daemon replaces its code server once a minute, the first one lingers ~40 s after; the lease then runs 80 s
@pytest.mark.timeout(540)
def test_the_deployment_keeps_one_exporter_across_its_code_servers_and_stops_it_with_the_daemon(tmp_path):
    """ROUTERSCOPE_EXPORTER_PORT set: the daemon's `exporter_sensor` starts `routerscope exporter` once; the code
    server that started it is replaced (every 60 s, dagster's RELOAD_WORKSPACE_INTERVAL) and exits, the runs load
    the definitions too, and the same exporter keeps serving the windows the daemon computes; once the daemon
    stops, the exporter stops by itself when its lease runs out."""
    home, dagster_home, settings = _deployment(tmp_path)
    port = free_port()
    log_path = tmp_path / "daemon.log"
    marker = f"DAGSTER_HOME={dagster_home}".encode()
    daemon = None
    try:
        events = events_of_the_last_15_minutes(datetime.now(UTC))
        path = tmp_path / "decisions.jsonl"
        path.write_text("".join(json.dumps(e) + "\n" for e in events))
        assert produce_file(settings, path, "decisions", show_progress=False).sent == len(events)
        env = clean_env(
            home,
            DAGSTER_HOME=str(dagster_home),
            ROUTERSCOPE_SENSOR_INTERVAL_S=SENSOR_INTERVAL_S,
            ROUTERSCOPE_EXPORTER_PORT=str(port),
        )
        daemon = _start_daemon(env, log_path)
        exporters: set[int] = set()
        code_servers: set[int] = set()
        starter, starter_gone_at, served, stored = None, None, None, None
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline and daemon.poll() is None:
            time.sleep(3)
            exporters |= set(_ours(marker, "routerscope", "exporter"))
            code_servers |= set(_ours(marker, "api", "grpc"))
            if exporters and starter is None:
                starter = _parent(min(exporters))  # the code server whose sensor tick started it
            if starter and starter_gone_at is None and not _alive(starter):
                starter_gone_at = time.monotonic()
            served = _served_decisions(port)
            stored = _query(
                settings,
                "SELECT sum(requests) FROM routerscope.metric_windows FINAL WHERE grain = '5m' AND task_type = '' "
                "AND window_end <= now64()",
            )[0][0]
            settled = starter_gone_at is not None and time.monotonic() - starter_gone_at > 3 * int(SENSOR_INTERVAL_S)
            if settled and served and served == stored:
                break
        tail = _log_excerpt(log_path)
        exporter_log = settings.exporter_log_path.read_text() if settings.exporter_log_path.exists() else ""
        assert daemon.poll() is None, f"the daemon exited with {daemon.returncode}:\n{tail}"
        assert len(exporters) == 1, (exporters, exporter_log, tail)  # one, never a second, never restarted
        assert starter in code_servers and starter_gone_at is not None, (starter, code_servers, tail)
        assert len(code_servers) >= 2, code_servers
        (exporter,) = exporters
        assert _alive(exporter), exporter_log
        assert served and served == stored, (served, stored, exporter_log)  # what the daemon's runs computed

        os.killpg(daemon.pid, signal.SIGTERM)  # the daemon and its code servers; the exporter has its own session
        daemon.wait(60)
        lease_s = lease_timeout_s(int(SENSOR_INTERVAL_S))
        gone_by = time.monotonic() + lease_s + 15
        while _alive(exporter) and time.monotonic() < gone_by:
            time.sleep(0.5)
        assert not _alive(exporter), f"the exporter outlived its lease ({lease_s} s)"
        assert "its lease" in settings.exporter_log_path.read_text()
    finally:
        if daemon is not None:
            _stop(daemon, marker)
        broker.stop(settings)
    assert not _pids_with(marker)
