"""The Prometheus endpoint against a real embedded warehouse holding known windows: the latest finished window
as gauges, the finished windows summed as counters, every series present from zero, and the HTTP endpoint
that Prometheus scrapes, parsed by prometheus_client's own parser."""

from __future__ import annotations

import os
import threading
import time
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from routerscope.contract.validation import BREAKERS
from routerscope.core import names, procs
from routerscope.core.errors import RouterscopeError
from routerscope.core.procs import free_port
from routerscope.warehouse.analytics.exporter import (
    HEALTH_BODY,
    Lease,
    Replay,
    WarehouseCollector,
    families,
    make_exporter,
    read_snapshot,
)
from routerscope.warehouse.analytics.metrics import empty_group
from routerscope.warehouse.client import open_warehouse
from routerscope.warehouse.ingest.rows import FACTS
from routerscope.warehouse.queries.metric_windows import write_window
from tests.support.events import breaker, dumps, iso
from tests.support.home import clean_env, run_cli, settings_for, spawn_exporter

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
STEP = timedelta(minutes=5)
NOW = T0 + timedelta(minutes=12)  # windows 0 and 1 have ended, window 2 has not
A, B = "intent_classify", "short_reply"


def group(**values) -> dict:
    g = empty_group()
    shares = values.pop("degrade_share", {})
    g.update(values)
    g["degrade_share"] = {**g["degrade_share"], **shares}
    return g


def store(client, i: int, by_task_type: dict, drifting: bool = False, grain: str = "5m", step: timedelta = STEP):
    overall = empty_group()
    overall["l2_l3_drift"] = {"delta_pp": None, "z": None, "psi": None, "drifting": drifting}
    start = T0 + i * step
    write_window(
        client, grain, start, start + step, {"overall": overall, "by_task_type": by_task_type, "calibration": {}}
    )


def insert_breaker(client, event: dict) -> None:
    parsed, rules = BREAKERS.parse(dumps(event))
    assert not rules, rules
    table, columns, build = FACTS[names.TOPIC_BREAKERS]
    client.insert(
        f"routerscope.{table}",
        build([parsed], names.TOPIC_BREAKERS, [0], [0]),
        column_names=list(columns),
        column_oriented=True,
    )


@pytest.fixture
def known(home):
    """Window 0: A 40 requests, 32 device-entered, 6 quality + 2 timeout fallbacks, 8 capability rejects,
    served L0 28 · L2 10 · L3 1 · L4 1, 2 false of 5 labeled fallbacks, 1 missed of 4 labeled, 9 of 10 routes
    right, 3 offload failures of 34 attempts, 8 degrade triggers; B 10 requests, all served at L3.
    Window 1: A 20 requests, all device-entered, 5 quality fallbacks, L0 15 · L2 5; L2/L3 drifting overall.
    Window 2 (not ended at NOW): A 1000 requests — in neither the counters nor the gauges.
    A device breaker opens at 10:06, inside window 1. Returns the settings, the warehouse closed."""
    settings = settings_for(home)
    with open_warehouse(settings, purpose="test", migrated=True) as warehouse:
        _store_known(warehouse)
    return settings


def _store_known(warehouse) -> None:
    store(
        warehouse,
        0,
        {
            A: group(
                requests=40,
                device_entered=32,
                quality_fallback_rate=6 / 32,
                timeout_fallback_rate=2 / 32,
                error_fallback_rate=0.0,
                capability_reject_rate=8 / 40,
                device_bypass_rate=0.0,
                degrade_share={"L0": 28 / 40, "L1": 0.0, "L2": 10 / 40, "L3": 1 / 40, "L4": 1 / 40},
                false_fallback_rate=2 / 5,
                false_fallback_labeled=5,
                missed_fallback_rate=1 / 4,
                missed_fallback_labeled=4,
                route_accuracy=9 / 10,
                route_labeled=10,
                device_attempts=34,
                offload_failure_rate=3 / 34,
                degrade_trigger_rate=8 / 32,
            ),
            B: group(requests=10, degrade_share={"L0": 0.0, "L1": 0.0, "L2": 0.0, "L3": 1.0, "L4": 0.0}),
        },
    )
    store(
        warehouse,
        1,
        {
            A: group(
                requests=20,
                device_entered=20,
                quality_fallback_rate=5 / 20,
                degrade_share={"L0": 15 / 20, "L1": 0.0, "L2": 5 / 20, "L3": 0.0, "L4": 0.0},
            )
        },
        drifting=True,
    )
    store(warehouse, 2, {A: group(requests=1000, device_entered=1000)})
    insert_breaker(warehouse, breaker(boundary="device", event_time=iso(T0 + timedelta(minutes=6))))


def samples(fams) -> dict[tuple, float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in fams
        for s in (f.samples if hasattr(f, "samples") else [])
    }


def value(found: dict, name: str, **labels) -> float:
    return found[(name, tuple(sorted(labels.items())))]


def test_counters_sum_the_finished_windows_and_gauges_hold_the_latest_one(known):
    with open_warehouse(known, purpose="test") as client:
        found = samples(families(read_snapshot(client, NOW)))
    # counters: windows 0 and 1 (window 2 had not ended)
    assert value(found, "routerscope_decisions_total", task_type=A) == 40 + 20
    assert value(found, "routerscope_decisions_total", task_type=B) == 10
    assert value(found, "routerscope_device_entered_total", task_type=A) == 32 + 20
    assert value(found, "routerscope_fallbacks_total", task_type=A, type="quality") == 6 + 5
    assert value(found, "routerscope_fallbacks_total", task_type=A, type="timeout") == 2
    assert value(found, "routerscope_fallbacks_total", task_type=A, type="error") == 0
    assert value(found, "routerscope_fallbacks_total", task_type=A, type="capability") == 8
    assert value(found, "routerscope_served_total", task_type=A, level="L0") == 28 + 15
    assert value(found, "routerscope_served_total", task_type=A, level="L2") == 10 + 5
    assert value(found, "routerscope_served_total", task_type=A, level="L4") == 1
    assert value(found, "routerscope_served_total", task_type=B, level="L3") == 10
    for name, expected in (
        ("false_fallbacks", 2),
        ("false_fallback_labeled", 5),
        ("missed_fallbacks", 1),
        ("missed_fallback_labeled", 4),
        ("route_correct", 9),
        ("route_labeled", 10),
        ("device_attempts", 34),
        ("offload_failures", 3),  # 3/34 is no exact float: rounded back to 3
        ("degrade_triggered", 8),
    ):
        assert value(found, f"routerscope_{name}_total", task_type=A) == expected, name
    # gauges: the latest finished 5-minute window is window 1; B had no events there and still has its series
    assert value(found, "routerscope_window_decisions", grain="5m", task_type=A) == 20
    assert value(found, "routerscope_window_fallbacks", grain="5m", task_type=A, type="quality") == 5
    assert value(found, "routerscope_window_decisions", grain="5m", task_type=B) == 0
    assert value(found, "routerscope_window_served", grain="5m", task_type=B, level="L3") == 0
    assert value(found, "routerscope_window_end_timestamp_seconds", grain="5m") == (T0 + 2 * STEP).timestamp()
    assert value(found, "routerscope_window_l2_l3_drifting", grain="5m") == 1
    # no daily window yet: zeros, and no end time to claim
    assert value(found, "routerscope_window_decisions", grain="1d", task_type=A) == 0
    assert ("routerscope_window_end_timestamp_seconds", (("grain", "1d"),)) not in found
    # the breaker opened inside window 1, the latest finished one
    assert value(found, "routerscope_breakers_open", boundary="device") == 1
    assert value(found, "routerscope_breakers_open", boundary="cloud") == 0
    assert value(found, "routerscope_quarantined_messages_total") == 0
    assert value(found, "routerscope_dq_blocking_failures") == 0


def test_before_any_window_every_pipeline_series_is_there_at_zero(warehouse):
    found = samples(families(read_snapshot(warehouse, NOW)))
    assert value(found, "routerscope_breakers_open", boundary="device") == 0
    assert value(found, "routerscope_window_l2_l3_drifting", grain="5m") == 0
    assert value(found, "routerscope_loaded_messages_total") == 0
    assert not any(name.startswith("routerscope_decisions") for name, _ in found)  # no task type known yet


def test_the_endpoint_serves_bounded_labels_and_counters_named_total(known):
    server = make_exporter(known, port=free_port(), refresh_s=60)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        text = urllib.request.urlopen(url, timeout=120).read().decode()
    finally:
        server.shutdown()
        server.close()
    assert not server.collector.last_error
    parsed = list(text_string_to_metric_families(text))
    ours = [f for f in parsed if f.name.startswith("routerscope_")]
    assert {"routerscope_decisions", "routerscope_fallbacks", "routerscope_window_fallbacks"} <= {f.name for f in ours}
    labels = {k for f in ours for s in f.samples for k in s.labels}
    assert labels == {"task_type", "type", "level", "grain", "boundary"}
    for f in ours:
        for s in f.samples:
            assert not f.type == "counter" or s.name.endswith(("_total", "_created")), s.name
    # live: every stored window has ended by now, window 2 included
    found = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in ours for s in f.samples}
    assert found[("routerscope_decisions_total", (("task_type", A),))] == 40 + 20 + 1000
    assert "process_resident_memory_bytes" in {f.name + "_bytes" for f in parsed} | {
        s.name for f in parsed for s in f.samples
    }


def test_the_exporter_command_serves_until_sigterm_and_leaves_the_warehouse_to_others(known, home):
    """`routerscope exporter` as a user runs it: it serves the windows, and between its reads the embedded
    warehouse is free (a command that needs it runs at once), and SIGTERM stops it cleanly."""
    port = free_port()
    log = home / "exporter.log"
    process = spawn_exporter(home, port, log, refresh_s=60)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        procs.wait_ready(process, lambda: procs.http_ok(url, 120), what="exporter", log_path=log)
        text = urllib.request.urlopen(url, timeout=120).read().decode()
        assert f'routerscope_decisions_total{{task_type="{A}"}} 1060.0' in text
        migrate = run_cli("migrate", env=clean_env(home), timeout=60)
        assert migrate.returncode == 0 and "waiting" not in migrate.stderr.lower(), migrate.stderr
    finally:
        assert procs.stop(process) == 0
    assert "serving http://127.0.0.1:" in log.read_text()


def test_a_sigterm_during_a_scrape_stops_the_exporter(known, home):
    """A SIGTERM that lands while a scrape waits for the warehouse (held here by this test, so the read worker
    waits for its lock) stops the command with 0 at once. wsgiref answered the interrupt as a 500 and the exporter
    went on serving until killed (seen as the sensor test's exit -9 after 60 s)."""
    port = free_port()
    log = home / "exporter.log"
    process = spawn_exporter(home, port, log, refresh_s=60)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        procs.wait_ready(
            process, lambda: procs.http_ok(f"http://127.0.0.1:{port}/-/healthy", 30), what="exporter", log_path=log
        )
        with open_warehouse(settings_for(home), purpose="test"):  # the read worker now waits for the lock
            scrape = threading.Thread(target=lambda: procs.http_ok(url, 60), daemon=True)
            scrape.start()
            time.sleep(2.0)  # the scrape is in its read
            assert process.poll() is None
            process.terminate()
            code = process.wait(timeout=20)
    finally:
        if process.poll() is None:
            procs.stop(process)
    assert code == 0, log.read_text()
    assert "routerscope exporter: stopped" in log.read_text()


@pytest.mark.parametrize(
    ("replayed_s", "latest", "decisions_a", "device_breakers"),
    [
        (0, T0, 40, 0),  # 10:07: window 0 is the latest finished one
        (300, T0 + STEP, 40 + 20, 1),  # five replayed minutes on (10:12): window 1, its breaker; window 2 not yet
    ],
    ids=["at-10:07", "at-10:12"],
)
def test_a_replay_serves_the_warehouse_as_it_stood_then_with_its_times_moved_onto_now(
    known, replayed_s, latest, decisions_a, device_breakers
):
    """Through the read worker, as `routerscope exporter --replay-from 10:07` serves it at speed 1."""
    replay = Replay(T0 + timedelta(minutes=7), 1.0, started=time.monotonic() - replayed_s)
    collector = WarehouseCollector(known, refresh_s=0, replay=replay)
    try:
        wall = datetime.now(UTC)
        found = samples(list(collector.collect()))
    finally:
        collector.close()
    assert not collector.last_error
    as_of = datetime.fromtimestamp(value(found, "routerscope_exporter_replay_timestamp_seconds"), UTC)
    assert timedelta(0) <= as_of - (T0 + timedelta(minutes=7, seconds=replayed_s)) < timedelta(seconds=60)
    assert value(found, "routerscope_window_decisions", grain="5m", task_type=A) == (40 if latest == T0 else 20)
    assert value(found, "routerscope_decisions_total", task_type=A) == decisions_a
    assert value(found, "routerscope_breakers_open", boundary="device") == device_breakers
    # the window's end as far before the served "now" as it was before the replayed moment
    served_end = value(found, "routerscope_window_end_timestamp_seconds", grain="5m")
    refreshed = value(found, "routerscope_exporter_refresh_timestamp_seconds")
    assert refreshed - wall.timestamp() < 60
    assert abs((refreshed - served_end) - (as_of - (latest + STEP)).total_seconds()) < 1e-3
    assert not [name for name, _ in found if name == "routerscope_last_load_timestamp_seconds"]


def test_a_replay_that_reaches_the_present_serves_live():
    now = datetime.now(UTC)
    replay = Replay(now - timedelta(hours=1), speed=3600, started=time.monotonic() - 2)
    assert replay.as_of(now) == now
    assert Replay(now - timedelta(hours=1), speed=60).as_of(now) < now - timedelta(minutes=59)


def test_a_replay_until_a_future_moment_serves_the_latest_window_as_old_as_it_will_be_then(known):
    """`--replay-until` past the data: time moves on after the data stopped, so the latest window's served end
    ages as it will have by then (what raises `routerscope_windows_stale` in a drill), while the served counts
    stay the latest window's."""

    def read(replay):
        collector = WarehouseCollector(known, refresh_s=0, replay=replay)
        try:
            found = samples(list(collector.collect()))
        finally:
            collector.close()
        assert not collector.last_error
        return found

    live = read(None)
    end = value(live, "routerscope_window_end_timestamp_seconds", grain="5m")
    until = datetime.now(UTC) + timedelta(hours=3)
    found = read(Replay(datetime.now(UTC), float("inf"), until=until))
    assert value(found, "routerscope_exporter_replay_timestamp_seconds") == until.timestamp()
    age = value(found, "routerscope_exporter_refresh_timestamp_seconds") - value(
        found, "routerscope_window_end_timestamp_seconds", grain="5m"
    )
    assert abs(age - (until.timestamp() - end)) < 1e-3
    assert value(found, "routerscope_window_decisions", grain="5m", task_type=A) == value(
        live, "routerscope_window_decisions", grain="5m", task_type=A
    )


def test_replay_until_without_a_start_is_one_error_saying_what_is_missing(tmp_path):
    done = run_cli(
        "exporter", "--port", str(free_port()), "--replay-until", "2030-01-01T00:00:00Z", env=clean_env(tmp_path)
    )
    assert done.returncode == 2
    assert done.stderr.strip() == "routerscope: error: --replay-until needs --replay-from (where the replay starts)"


def test_the_health_path_answers_without_reading_and_a_taken_port_is_one_error(known):
    server = make_exporter(known, port=free_port(), refresh_s=60)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{server.port}/-/healthy", timeout=10).read()
        assert body == HEALTH_BODY and server.collector.snapshot is None  # the warehouse was not read
        with pytest.raises(RouterscopeError, match=f"port {server.port} on 127.0.0.1 is already in use"):
            make_exporter(known, port=server.port)
    finally:
        server.shutdown()
        server.close()


@pytest.mark.slow
def test_an_exporter_on_a_lease_stops_once_nobody_renews_it(known, tmp_path):
    lease = tmp_path / "exporter.lease"
    lease.touch()
    server = make_exporter(known, port=free_port(), refresh_s=60, lease=Lease(lease, timeout_s=1.0))
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    try:
        for _ in range(6):  # renewed every 0.3 s for ~2 s: still serving
            time.sleep(0.3)
            os.utime(lease)
        assert serving.is_alive() and not server.lease_expired
        serving.join(timeout=10)  # no renewal: it stops within the timeout and a check
        assert not serving.is_alive() and server.lease_expired
    finally:
        server.close()


def _serving(settings, **options):
    server = make_exporter(settings, port=free_port(), refresh_s=60, **options)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.slow
def test_a_client_that_sends_a_request_line_and_stops_blocks_nothing(known, capsys):
    """A client that opens a connection, sends a request line and goes silent (slowloris) used to hold the one
    connection the exporter served for minutes: now `/-/healthy` and `/metrics` answer while it hangs, and its
    connection is closed once the read timeout passes."""
    import socket

    from routerscope.warehouse.analytics import exporter as module

    server = _serving(known)
    stuck = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    try:
        stuck.sendall(b"GET /metrics HTTP/1.1\r\n")  # no headers' end: the server waits for more
        time.sleep(0.3)
        started = time.monotonic()
        body = urllib.request.urlopen(f"http://127.0.0.1:{server.port}/-/healthy", timeout=5).read()
        assert body == HEALTH_BODY and time.monotonic() - started < 2
        text = urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=120).read().decode()
        assert f'routerscope_decisions_total{{task_type="{A}"}} 1060.0' in text
        stuck.settimeout(module.IO_TIMEOUT_S + 10)
        assert stuck.recv(1024) == b""  # closed by the server after its read timeout, without an answer
        time.sleep(0.2)
        assert "Traceback" not in capsys.readouterr().err  # a client timing out is no error of the exporter's
    finally:
        stuck.close()
        server.shutdown()
        server.close()


@pytest.mark.slow
def test_two_hundred_concurrent_scrapes_all_succeed_or_are_refused_at_once(known):
    """200 scrapes at once (10 once served one at a time): each is answered 200 with the metrics, or refused
    503 with Retry-After within a second, never left waiting; with a cap of 8 connections some are refused."""
    import urllib.error
    from concurrent.futures import ThreadPoolExecutor

    server = _serving(known, max_connections=8)
    url = f"http://127.0.0.1:{server.port}/metrics"
    urllib.request.urlopen(url, timeout=120).read()  # the first read (a worker importing chDB) out of the way

    def scrape(_):
        started = time.monotonic()
        try:
            with urllib.request.urlopen(url, timeout=30) as answer:
                ok = b"routerscope_decisions_total" in answer.read()
                return ("ok" if ok else "empty", time.monotonic() - started)
        except urllib.error.HTTPError as exc:
            assert exc.headers["Retry-After"] == "1"
            return (exc.code, time.monotonic() - started)

    try:
        with ThreadPoolExecutor(200) as pool:
            results = list(pool.map(scrape, range(200)))
    finally:
        server.shutdown()
        server.close()
    outcomes = {r for r, _ in results}
    assert outcomes <= {"ok", 503}, outcomes
    assert sum(r == "ok" for r, _ in results) >= 8
    assert all(s < 1.0 for r, s in results if r == 503), sorted(s for r, s in results if r == 503)[-3:]
    assert all(s < 20 for _, s in results)
    refused = sum(r == 503 for r, _ in results)
    assert refused == server.server.refused


def test_task_types_past_the_cap_are_summed_as_other_and_counted(known):
    """3,000 invented task types would give hundreds of thousands of series: with a cap of 1 the busiest task
    type (A, 1,060 decisions) keeps its name, B's 10 are summed under `other`, and the cap and the one folded
    task type are served. Nothing is lost: the sums over task types are the same."""
    snapshot = read_snapshot_as_of_now(known)
    full = samples(families(snapshot))
    found = samples(families(snapshot, max_task_types=1))
    assert value(found, "routerscope_decisions_total", task_type=A) == 1060
    assert value(found, "routerscope_decisions_total", task_type="other") == 10
    assert ("routerscope_decisions_total", (("task_type", B),)) not in found
    assert value(found, "routerscope_window_served", grain="5m", task_type="other", level="L3") == value(
        full, "routerscope_window_served", grain="5m", task_type=B, level="L3"
    )
    assert value(found, "routerscope_exporter_task_type_cap") == 1
    assert value(found, "routerscope_exporter_task_types_folded") == 1
    assert value(samples(families(snapshot)), "routerscope_exporter_task_types_folded") == 0


def test_three_thousand_invented_task_types_make_a_bounded_scrape():
    """The hostile case itself, on a snapshot: 3,000 task types fold to the default cap plus `other`."""
    from routerscope.warehouse.analytics.exporter import DEFAULT_MAX_TASK_TYPES, Snapshot

    now = datetime(2026, 12, 1, tzinfo=UTC)
    totals = {f"t{i:04d}": {"decisions": i} for i in range(3000)}
    snapshot = Snapshot(now, sorted(totals), totals, {"5m": None, "1d": None}, {}, now, now, 0, 0, 0)
    found = samples(families(snapshot))
    named = {dict(k[1]).get("task_type") for k in found if k[0] == "routerscope_decisions_total"}
    assert len(named) == DEFAULT_MAX_TASK_TYPES + 1 and "other" in named and "t2999" in named and "t0000" not in named
    assert value(found, "routerscope_decisions_total", task_type="other") == sum(range(3000 - DEFAULT_MAX_TASK_TYPES))
    assert value(found, "routerscope_exporter_task_types_folded") == 3000 - DEFAULT_MAX_TASK_TYPES


def read_snapshot_as_of_now(settings):
    with open_warehouse(settings, purpose="test", migrated=True) as client:
        return read_snapshot(client)


def insert_decisions(client, events: list[dict]) -> None:
    from routerscope.contract.validation import DECISIONS

    parsed = []
    for event in events:
        one, rules = DECISIONS.parse(dumps(event))
        assert not rules, rules
        parsed.append(one)
    table, columns, build = FACTS[names.TOPIC_DECISIONS]
    n = len(parsed)
    client.insert(
        f"routerscope.{table}",
        build(parsed, names.TOPIC_DECISIONS, [0] * n, list(range(n))),
        column_names=list(columns),
        column_oriented=True,
    )


TRACE_1, TRACE_2 = "a" * 32, "b" * 32


def test_histograms_of_latency_tokens_ttft_and_cost_with_trace_exemplars(home):
    """Two live decisions before the last finished window's end, one after it and one shadow (neither counted):
    1. intent_classify: a device attempt that failed after 0.3 s (L0), the cloud serving after 0.9 s (L2),
       1.25 s in all, first token at 0.15 s, 12 in / 7 out tokens, $0.002, trace TRACE_1;
    2. intent_classify: the device serving in 0.18 s (L0), 0.1905 s in all, 42 in / 6 out, no cost, no TTFT,
       trace TRACE_2.
    Buckets by hand from OpenTelemetry's bounds: attempt L0 0.18 ≤ 0.32 and 0.3 ≤ 0.32 (both in le 0.32), L2
    0.9 ≤ 1.28; request 0.1905 ≤ 0.32, 1.25 ≤ 1.28; tokens input 12 ≤ 16, 42 ≤ 64; output 7 ≤ 16, 6 ≤ 16; TTFT
    0.15 ≤ 0.25; cost 0.002 ≤ 0.01. The OpenMetrics form carries each bucket's newest trace id."""
    from tests.support.events import decision

    settings = settings_for(home)
    base = NOW - timedelta(minutes=20)
    events = [
        decision(
            event_time=iso(base),
            request_id="r1",
            entered_device=True,
            fallback_type="error",
            reason="device_error",
            degrade_level=2,
            attempts=[
                {"level": 0, "outcome": "error", "latency_ms": 300.0},
                {"level": 2, "outcome": "ok", "latency_ms": 900.0},
            ],
            cloud_calls=1,
            latency_ms=1250.0,
            ttft_ms=150.0,
            input_tokens=12,
            output_tokens=7,
            cost_usd=0.002,
            trace_id=TRACE_1,
        ),
        decision(event_time=iso(base + timedelta(minutes=1)), request_id="r2", trace_id=TRACE_2),
        decision(event_time=iso(NOW), request_id="r3", latency_ms=99_000.0),  # its window has not ended
        decision(event_time=iso(base), request_id="r4", mode="shadow", latency_ms=99_000.0),
    ]
    with open_warehouse(settings, purpose="test", migrated=True) as client:
        insert_decisions(client, events)
        snapshot = read_snapshot(client, NOW)
    found = samples(families(snapshot))

    def bucket(name, le, **labels):
        return value(found, f"{name}_bucket", task_type=A, le=le, **labels)

    op = "gen_ai_client_operation_duration_seconds"
    assert (bucket(op, "0.16", level="L0"), bucket(op, "0.32", level="L0"), bucket(op, "+Inf", level="L0")) == (0, 2, 2)
    assert (bucket(op, "0.64", level="L2"), bucket(op, "1.28", level="L2")) == (0, 1)
    assert value(found, f"{op}_sum", task_type=A, level="L0") == pytest.approx(0.48)
    req = "routerscope_request_duration_seconds"
    assert (bucket(req, "0.16"), bucket(req, "0.32"), bucket(req, "0.64"), bucket(req, "1.28")) == (0, 1, 1, 2)
    assert value(found, f"{req}_count", task_type=A) == 2
    assert value(found, f"{req}_sum", task_type=A) == pytest.approx(1.4405)
    tok = "gen_ai_client_token_usage"
    assert (bucket(tok, "4.0", gen_ai_token_type="input"), bucket(tok, "16.0", gen_ai_token_type="input")) == (0, 1)
    assert bucket(tok, "64.0", gen_ai_token_type="input") == 2
    assert bucket(tok, "16.0", gen_ai_token_type="output") == 2
    assert value(found, f"{tok}_sum", task_type=A, gen_ai_token_type="input") == 54
    ttft = "routerscope_time_to_first_token_seconds"
    assert (bucket(ttft, "0.1"), bucket(ttft, "0.25"), value(found, f"{ttft}_count", task_type=A)) == (0, 1, 1)
    cost = "routerscope_request_cost_usd"
    assert (bucket(cost, "0.001"), bucket(cost, "0.01"), value(found, f"{cost}_count", task_type=A)) == (0, 1, 1)

    # the endpoint: Prometheus's text by default, OpenMetrics with exemplars when the scraper asks for it
    server = make_exporter(settings, port=free_port(), refresh_s=60)
    server.collector.snapshot, server.collector._read_at = snapshot, time.monotonic()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        plain = urllib.request.urlopen(url, timeout=30).read().decode()
        asked = urllib.request.Request(url, headers={"Accept": "application/openmetrics-text; version=1.0.0"})
        with urllib.request.urlopen(asked, timeout=30) as answer:
            open_metrics = answer.read().decode()
            assert answer.headers["Content-Type"].startswith("application/openmetrics-text")
    finally:
        server.shutdown()
        server.close()
    assert "trace_id" not in plain
    line = next(x for x in open_metrics.splitlines() if x.startswith(f'{req}_bucket{{le="1.28",task_type="{A}"}}'))
    assert f'# {{trace_id="{TRACE_1}"}} 1.25' in line
    line = next(x for x in open_metrics.splitlines() if x.startswith(f'{req}_bucket{{le="0.32",task_type="{A}"}}'))
    assert f'# {{trace_id="{TRACE_2}"}} 0.1905' in line
    assert open_metrics.rstrip().endswith("# EOF")


def test_the_histograms_are_read_again_only_when_their_decisions_change(home):
    """A read with the last key gives None (unchanged: the exporter keeps what it has); a decision stored before
    the boundary changes the key, and the next read counts it. The collector serves the kept histograms."""
    from tests.support.events import decision

    settings = settings_for(home)
    with open_warehouse(settings, purpose="test", migrated=True) as client:
        insert_decisions(client, [decision(event_time=iso(NOW - timedelta(minutes=20)), request_id="r1")])
        first = read_snapshot(client, NOW)
        assert first.histograms and first.histograms_key
        again = read_snapshot(client, NOW, first.histograms_key)
        assert again.histograms is None and again.histograms_key == first.histograms_key
        insert_decisions(client, [decision(event_time=iso(NOW - timedelta(minutes=19)), request_id="r2")])
        third = read_snapshot(client, NOW, first.histograms_key)
    assert third.histograms_key != first.histograms_key
    count = next(h for h in third.histograms if h["metric"] == "request_duration")["counts"]
    assert sum(count.values()) == 2
    collector = WarehouseCollector(settings, refresh_s=0)
    try:
        collector.refresh()
        kept = collector.snapshot.histograms
        collector.refresh()  # nothing changed: the same histograms, not read again
        assert collector.snapshot.histograms == kept and kept
    finally:
        collector.close()
