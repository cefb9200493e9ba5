"""End to end on the Prometheus path: a real Prometheus (Debian's) scrapes a real `routerscope exporter`,
evaluates the exported rule file, and sends what fires to a real Alertmanager, which routes it to a webhook
receiver this test runs."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from routerscope.contract.validation import BREAKERS
from routerscope.core import names, procs
from routerscope.core.procs import free_port
from routerscope.warehouse.analytics.alerting.prometheus import rule_file
from routerscope.warehouse.analytics.alerting.rules import load_rules
from routerscope.warehouse.analytics.metrics import empty_group
from routerscope.warehouse.client import open_warehouse
from routerscope.warehouse.ingest.rows import FACTS
from routerscope.warehouse.queries.metric_windows import write_window
from tests.support import oncall
from tests.support.events import breaker, dumps, iso
from tests.support.home import settings_for, spawn_exporter

pytestmark = [pytest.mark.integration, pytest.mark.slow]

STEP = timedelta(minutes=5)
A, B = "intent_classify", "short_reply"


def group(requests: int, bypassed: int, **rates) -> dict:
    g = empty_group()
    entered = requests - bypassed
    g.update(requests=requests, device_entered=entered, device_bypass_rate=bypassed / requests, **rates)
    return g


def fill(settings, ago: timedelta = timedelta(0)) -> datetime:
    """The latest finished 5-minute window: A 100 requests, 60 bypassed the device, 10 quality fallbacks of the
    40 that entered; B 50 requests, 30 bypassed, 5 timeouts of 20. A device breaker opened in it and stays open.
    Overall bypass 90 / 150 = 0.6 over 150 requests: `device_bypass` (> 0.5, at least 20) fires at once, and so
    does `device_breaker_open`; fallback rates 10 / 40 and 5 / 20 are 0.25 each, under 0.3."""
    now = datetime.now(UTC) - ago
    start = datetime.fromtimestamp((now.timestamp() // 300) * 300, UTC) - STEP
    groups = {
        A: group(100, 60, quality_fallback_rate=10 / 40, fallback_rate=10 / 40),
        B: group(50, 30, timeout_fallback_rate=5 / 20, fallback_rate=5 / 20),
    }
    with open_warehouse(settings, purpose="test", migrated=True) as client:
        write_window(
            client, "5m", start, start + STEP, {"overall": empty_group(), "by_task_type": groups, "calibration": {}}
        )
        parsed, rules = BREAKERS.parse(dumps(breaker(boundary="device", event_time=iso(start + timedelta(minutes=1)))))
        assert not rules
        table, columns, build = FACTS[names.TOPIC_BREAKERS]
        client.insert(
            f"routerscope.{table}",
            build([parsed], names.TOPIC_BREAKERS, [0], [0]),
            column_names=list(columns),
            column_oriented=True,
        )
    return start


def query(prometheus: str, expr: str) -> dict[str, float]:
    """{task_type (or ''): value} of an instant query."""
    url = f"{prometheus}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    body = json.loads(urllib.request.urlopen(url, timeout=10).read())
    return {r["metric"].get("task_type", ""): float(r["value"][1]) for r in body["data"]["result"]}


def eventually(read, want, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while True:
        got = read()
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(0.5)


def test_prometheus_scrapes_the_exporter_evaluates_the_rules_and_pages_through_alertmanager(home, tmp_path):
    settings = settings_for(home)
    fill(settings)
    version, rules = load_rules()
    rules_path = tmp_path / "routerscope.rules.yml"
    rules_path.write_text(yaml.safe_dump(rule_file(version, rules, interval="1s"), sort_keys=False))
    receiver = oncall.Receiver()
    port = free_port()
    log = tmp_path / "exporter.log"
    exporter = spawn_exporter(home, port, log, refresh_s=2)
    try:
        procs.wait_ready(
            exporter, lambda: procs.http_ok(f"http://127.0.0.1:{port}/metrics", 30), what="exporter", log_path=log
        )
        with oncall.alertmanager(tmp_path, f"{receiver.base}/am") as am:
            config = {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(rules_path)],
                "scrape_configs": [{"job_name": "routerscope", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}],
                "alerting": {"alertmanagers": [{"static_configs": [{"targets": [am.removeprefix("http://")]}]}]},
            }
            with oncall.prometheus(tmp_path, config) as prom:
                # the rates, divided after summing per task type and overall
                assert eventually(
                    lambda: query(prom, "task_type:routerscope_fallback_rate:ratio_5m"), {A: 0.25, B: 0.25}
                ) == {
                    A: 0.25,
                    B: 0.25,
                }
                assert query(prom, "overall:routerscope_device_bypass_rate:ratio_5m") == {"": 0.6}
                assert query(prom, "sum(routerscope_decisions_total)") == {"": 150.0}
                # what fired reached the receiver through Alertmanager
                deadline = time.monotonic() + 60
                fired: set[str] = set()
                while fired != {"device_bypass", "device_breaker_open"} and time.monotonic() < deadline:
                    fired = {
                        a["labels"]["alertname"]
                        for n in receiver.at("/am")
                        for a in n["alerts"]
                        if a["status"] == "firing"
                    }
                    time.sleep(0.5)
                assert fired == {"device_bypass", "device_breaker_open"}
                sent = [a for n in receiver.at("/am") for a in n["alerts"]]
                bypass = next(a for a in sent if a["labels"]["alertname"] == "device_bypass")
                assert bypass["labels"]["severity"] == "page"
                assert bypass["labels"]["routerscope_rule_version"] == version
                assert bypass["annotations"]["description"].startswith("device_bypass_rate > limit: 0.6")
    finally:
        assert procs.stop(exporter) == 0
        receiver.close()


def test_a_window_served_after_the_data_stopped_raises_windows_stale_and_nothing_else(home, tmp_path):
    """The data stopped: the latest stored window (breaching `device_bypass`, 0.6 over 150 requests, and a
    3-window drift would read it too) ended 10 or more minutes ago, past one grain plus the 4-minute allowance.
    The real Prometheus reads no rate from it, `routerscope_windows_stale` reaches Alertmanager's receiver, and
    no window rule fires. The device breaker that opened in that window never closed: the exporter reads the
    breaker per window from its transitions, so it is open now, rightly paging on its own."""
    settings = settings_for(home)
    start = fill(settings, ago=timedelta(minutes=10))
    version, rules = load_rules()
    rules_path = tmp_path / "routerscope.rules.yml"
    rules_path.write_text(yaml.safe_dump(rule_file(version, rules, interval="1s"), sort_keys=False))
    receiver = oncall.Receiver()
    port = free_port()
    log = tmp_path / "exporter.log"
    exporter = spawn_exporter(home, port, log, refresh_s=2)
    try:
        procs.wait_ready(
            exporter, lambda: procs.http_ok(f"http://127.0.0.1:{port}/metrics", 30), what="exporter", log_path=log
        )
        with oncall.alertmanager(tmp_path, f"{receiver.base}/am") as am:
            config = {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(rules_path)],
                "scrape_configs": [{"job_name": "routerscope", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}],
                "alerting": {"alertmanagers": [{"static_configs": [{"targets": [am.removeprefix("http://")]}]}]},
            }
            with oncall.prometheus(tmp_path, config) as prom:
                end = (start + STEP).timestamp()
                assert eventually(
                    lambda: query(prom, 'routerscope_window_end_timestamp_seconds{grain="5m"}'), {"": end}
                ) == {"": end}
                age = query(prom, 'routerscope_window_age_seconds{grain="5m"}')[""]
                assert 600 <= age < 900 + 30
                deadline = time.monotonic() + 60
                fired: set[str] = set()
                while "routerscope_windows_stale" not in fired and time.monotonic() < deadline:
                    fired = {a["labels"]["alertname"] for n in receiver.at("/am") for a in n["alerts"]}
                    time.sleep(0.5)
                time.sleep(2)
                fired = {a["labels"]["alertname"] for n in receiver.at("/am") for a in n["alerts"]}
                assert fired == {"routerscope_windows_stale", "device_breaker_open"}
                stale = next(
                    a
                    for n in receiver.at("/am")
                    for a in n["alerts"]
                    if a["labels"]["alertname"] == "routerscope_windows_stale"
                )
                assert stale["labels"]["grain"] == "5m" and stale["labels"]["severity"] == "page"
                assert stale["annotations"]["description"].startswith("The latest 5m metric window ended 1")
                # the counts the rules read vanish with a stale window: nothing breaches
                assert query(prom, "overall:routerscope_device_bypass_rate:ratio_5m") == {}
                assert query(prom, "sum(routerscope_decisions_total)") == {"": 150.0}  # the counters stay
                time.sleep(3)  # a few evaluations more: still nothing but the stale alert
                assert {a["labels"]["alertname"] for n in receiver.at("/am") for a in n["alerts"]} == fired
    finally:
        assert procs.stop(exporter) == 0
        receiver.close()
