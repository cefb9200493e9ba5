"""Alerts into a real Alertmanager (Debian's `prometheus-alertmanager`, installed by `make bootstrap`) on a
loopback port, routing to a webhook receiver this test runs: an episode arrives there firing, stays one alert
while routerscope re-sends it, then arrives resolved; the Slack-style webhook beside it still gets both."""

from __future__ import annotations

import json
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlparse

import pytest

from routerscope.warehouse.analytics import alerting
from routerscope.warehouse.analytics.alerting.delivery import AlertmanagerNotifier, WebhookNotifier
from routerscope.warehouse.analytics.metrics import empty_group
from routerscope.warehouse.queries.metric_windows import write_window
from tests.support import oncall
from tests.support.oncall import Receiver

pytestmark = pytest.mark.integration

STEP = timedelta(minutes=5)
A = "intent_classify"
RULES = """
version: "am-1"
rules:
  - name: fallback_rate_high
    summary: Device fallback rate over its limit
    metric: fallback_rate
    scope: per_task_type
    grain: 5m
    op: ">"
    limit: 0.3
    windows: 3
    min_n: 30
    denominator: device_entered
    severity: ticket
"""


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def alertmanager(tmp_path, receiver):
    with oncall.alertmanager(tmp_path, f"{receiver.base}/am") as url:
        yield url


def store(client, start: datetime, fallback_rate: float) -> None:
    group = empty_group()
    group.update(requests=100, device_entered=100, fallback_rate=fallback_rate)
    write_window(
        client, "5m", start, start + STEP, {"overall": empty_group(), "by_task_type": {A: group}, "calibration": {}}
    )


@pytest.mark.slow
def test_an_episode_reaches_alertmanager_firing_then_resolved(warehouse, receiver, alertmanager, tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    notifier = AlertmanagerNotifier(
        alertmanager, "http://dash.example:8501", WebhookNotifier(f"{receiver.base}/slack", backoff_s=0.01)
    )
    # windows in the recent past, so that the resolution's endsAt is already behind Alertmanager's clock
    now = datetime.now(UTC)
    base = datetime.fromtimestamp((now.timestamp() // 300) * 300, UTC) - 5 * STEP
    for i in range(3):
        store(warehouse, base + i * STEP, 0.4)  # 40 of 100 fell back: over 0.3 three windows in a row
    fired = alerting.run(warehouse, rules_path=rules, notifier=notifier, now=base + 3 * STEP + timedelta(minutes=1))
    assert [a.alert_key for a in fired.fired] == [f"fallback_rate_high|{A}"]

    firing = receiver.wait_for("/am", 1)
    assert [n["status"] for n in firing] == ["firing"]
    (sent,) = firing[0]["alerts"]
    assert sent["labels"] == {
        "alertname": "fallback_rate_high",
        "severity": "ticket",
        "routerscope_rule_version": "am-1",
        "routerscope_episode": base.strftime("%Y-%m-%dT%H:%M:%SZ"),  # the episode's start
        "task_type": A,
    }
    assert sent["startsAt"].startswith(base.strftime("%Y-%m-%dT%H:%M:%S"))
    assert sent["annotations"]["summary"] == "Device fallback rate over its limit"
    assert sent["annotations"]["value"] == "0.4 (n=100)"
    latest = base + 2 * STEP
    assert sent["annotations"]["description"] == (
        f"fallback_rate was 0.4 over 100 events in the window from {latest:%Y-%m-%d %H:%M} UTC (limit: > 0.3), "
        "3 windows in a row."
    )
    link = urlparse(sent["annotations"]["explorer"])
    assert (link.netloc, link.path) == ("dash.example:8501", "/explorer")
    assert parse_qs(link.query)["task_type"] == [A] and parse_qs(link.query)["range"] == ["custom"]
    assert sent["generatorURL"] == sent["annotations"]["explorer"]

    # a later evaluation while it still fires re-sends it (Alertmanager's expectation); still one alert
    again = alerting.run(warehouse, rules_path=rules, notifier=notifier, now=base + 3 * STEP + timedelta(minutes=2))
    assert again.fired == [] and len(again.firing) == 1
    time.sleep(2.5)  # past group_interval: a changed group would have been notified by now
    assert len(receiver.at("/am")) == 1

    store(warehouse, base + 3 * STEP, 0.1)  # 10 of 100: under the limit
    done = alerting.run(warehouse, rules_path=rules, notifier=notifier, now=base + 4 * STEP + timedelta(minutes=1))
    assert [a.alert_key for a in done.resolved] == [f"fallback_rate_high|{A}"]
    notes = receiver.wait_for("/am", 2)
    assert [n["status"] for n in notes] == ["firing", "resolved"]
    assert notes[1]["alerts"][0]["endsAt"].startswith(
        (base + 4 * STEP + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S")
    )
    # the Slack-style webhook beside it got the same two
    assert [m["text"].split()[0] for m in receiver.at("/slack")] == ["FIRING", "RESOLVED"]
    attempts = warehouse.query("SELECT event, status_code FROM routerscope.alert_deliveries ORDER BY event").result_rows
    assert sorted(attempts) == [("firing", 200), ("firing", 200), ("resolved", 200), ("resolved", 200)]


ONE_WINDOW_RULES = RULES.replace("windows: 3", "windows: 1").replace('"am-1"', '"am-2"')


@pytest.mark.slow
def test_episodes_of_one_rule_stay_distinct_in_alertmanager(warehouse, receiver, alertmanager, tmp_path):
    """Two episodes of one rule and task type, each firing then resolved within seconds (as a replay drill
    delivers them): Alertmanager used to see one alert, the second episode's firing and resolution folded into
    the first's. Each episode now carries its start, so both arrive firing and both arrive resolved."""
    rules = tmp_path / "rules.yaml"
    rules.write_text(ONE_WINDOW_RULES)
    notifier = AlertmanagerNotifier(alertmanager, "http://dash.example:8501")
    now = datetime.now(UTC)
    base = datetime.fromtimestamp((now.timestamp() // 300) * 300, UTC) - 6 * STEP
    for i, rate in enumerate((0.4, 0.1, 0.4, 0.1)):  # breach, calm, breach, calm
        store(warehouse, base + i * STEP, rate)
        alerting.run(warehouse, rules_path=rules, notifier=notifier, now=base + (i + 1) * STEP + timedelta(minutes=1))
    deadline = time.monotonic() + 30
    seen: set[tuple[str, str]] = set()
    while time.monotonic() < deadline and len(seen) < 4:
        seen = {(a["labels"]["routerscope_episode"], a["status"]) for n in receiver.at("/am") for a in n["alerts"]}
        time.sleep(0.5)
    first, second = base.strftime("%Y-%m-%dT%H:%M:%SZ"), (base + 2 * STEP).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert {(first, "resolved"), (second, "resolved")} <= seen, seen
    assert {episode for episode, _ in seen} == {first, second}


def test_a_signal_without_a_count_reads_as_a_sentence_without_n_none():
    """A breaker's or the ingest lag's episode has no events behind its value: the annotations say the value
    alone, never `n=None`."""
    from routerscope.warehouse.analytics.alerting.delivery import _value_n, sentence

    trip = {
        "metric": "pipeline.breaker_open.device",
        "op": ">",
        "limit": 0,
        "windows": [{"start": "2026-12-07T12:05:00Z", "value": 1, "n": None}],
    }
    assert sentence(trip) == "pipeline.breaker_open.device was 1 in the window from 2026-12-07 12:05 UTC (limit: > 0)."
    assert _value_n(trip["windows"][0]) == "1"
    counted = {**trip, "metric": "fallback_rate", "windows": [{"start": "2026-12-07T12:05:00Z", "value": 0.4, "n": 30}]}
    assert "over 30 events" in sentence(counted) and _value_n(counted["windows"][0]) == "0.4 (n=30)"


INHIBIT = """
inhibit_rules:
  - source_matchers: ['routerscope_rule_version=~".+"', 'routerscope_episode=""']
    target_matchers: ['routerscope_episode=~".+"']
    equal: [alertname, task_type]
"""


@pytest.mark.slow
def test_the_documented_inhibit_rule_pages_once_when_both_paths_raise_an_alert(warehouse, receiver, tmp_path):
    """docs/operations.md's inhibit rule, in a real Alertmanager: Prometheus's alert (the exported rule's labels,
    no episode) and routerscope's own episode of the same rule and task type arrive; only Prometheus's is
    notified, and routerscope's alone (Prometheus not raising it) still is."""
    from routerscope.core.procs import free_port

    config = tmp_path / "alertmanager.yml"
    config.write_text(oncall.ROUTES.format(url=f"{receiver.base}/am") + INHIBIT)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [
        oncall.binary("prometheus-alertmanager", "alertmanager"),
        f"--config.file={config}",
        f"--storage.path={tmp_path / 'am-data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",
    ]
    rules = tmp_path / "rules.yaml"
    rules.write_text(ONE_WINDOW_RULES)
    now = datetime.now(UTC)
    base = datetime.fromtimestamp((now.timestamp() // 300) * 300, UTC) - 2 * STEP
    store(warehouse, base, 0.4)
    with oncall.running(cmd, f"{url}/-/ready", "alertmanager", tmp_path / "am.log"):
        from routerscope.warehouse.analytics.alerting.delivery import post_json

        prometheus_alert = {
            "labels": {
                "alertname": "fallback_rate_high",
                "severity": "ticket",
                "routerscope_rule_version": "am-2",
                "task_type": A,
            },
            "annotations": {"summary": "from Prometheus"},
            "startsAt": now.isoformat(),
        }
        assert post_json(f"{url}/api/v2/alerts", [prometheus_alert])[-1][0] == 200
        time.sleep(1.5)  # Prometheus's is in before routerscope's arrives
        evaluation = alerting.run(
            warehouse, rules_path=rules, notifier=AlertmanagerNotifier(url), now=base + STEP + timedelta(minutes=1)
        )
        assert [a.alert_key for a in evaluation.fired] == [f"fallback_rate_high|{A}"]
        time.sleep(3)  # past group_wait and group_interval: anything not inhibited has been notified
        held = json.loads(urllib.request.urlopen(f"{url}/api/v2/alerts", timeout=10).read())
        states = {("routerscope_episode" in a["labels"], a["status"]["state"]) for a in held}
        assert states == {(False, "active"), (True, "suppressed")}, states
        firing = {
            (a["labels"]["alertname"], "routerscope_episode" in a["labels"])
            for n in receiver.at("/am")
            for a in n["alerts"]
            if a["status"] == "firing"
        }
    assert firing == {("fallback_rate_high", False)}, firing
