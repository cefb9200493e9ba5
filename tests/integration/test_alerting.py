"""Alert lifecycle and delivery against a real warehouse and a real HTTP receiver on loopback; and
an injected incident that goes through the broker and the loader and raises exactly its alerts."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from routerscope.core import broker
from routerscope.core.procs import free_port
from routerscope.pipelines.resources import AlertWebhookResource
from routerscope.warehouse.analytics import alerting
from routerscope.warehouse.analytics.metrics import compute, empty_group
from routerscope.warehouse.client import open_warehouse
from routerscope.warehouse.ingest.loader import load
from routerscope.warehouse.migrate import migrate
from routerscope.warehouse.queries.metric_windows import write_window
from tests.support.events import breaker, decision, dumps, iso
from tests.support.home import clean_env, run_cli, settings_for

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
STEP = timedelta(minutes=5)
RULES = """
version: "test-1"
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


def webhook(url: str, **options) -> AlertWebhookResource:
    """The real webhook resource, with backoff short enough for a test."""
    return AlertWebhookResource(url=url, **{"backoff_s": 0.01, **options})


class Receiver:
    """A webhook on loopback that answers with the given status codes in turn (then 200)."""

    def __init__(self, statuses=()):
        self.statuses = list(statuses)
        self.received: list[dict] = []
        self.attempts = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.attempts += 1
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                if status == 200:
                    receiver.received.append(json.loads(body))
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def window(client, i: int, fallback_rate: float | None, entered: int = 100, task_type: str = "intent_classify"):
    """Store 5-minute window number i with one task type's fallback rate."""
    group = empty_group()
    group.update(requests=entered, device_entered=entered, fallback_rate=fallback_rate)
    start = T0 + i * STEP
    write_window(
        client,
        "5m",
        start,
        start + STEP,
        {"overall": empty_group(), "by_task_type": {task_type: group}, "calibration": {}},
    )


def test_fire_once_stay_quiet_then_resolve_once(warehouse, receiver, tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)

    def run():
        return alerting.run(warehouse, rules_path=rules, notifier=webhook(receiver.url))

    window(warehouse, 0, 0.5)
    window(warehouse, 1, 0.5)
    assert run().fired == []  # two breaching windows: N-1, nothing yet
    window(warehouse, 2, 0.5)
    first = run()
    assert [a.alert_key for a in first.fired] == ["fallback_rate_high|intent_classify"]
    assert first.firing[0].first_seen == T0
    window(warehouse, 3, 0.6)
    still = run()
    assert still.fired == [] and len(still.firing) == 1  # no repeat notification
    window(warehouse, 4, 0.1)
    done = run()
    assert [a.alert_key for a in done.resolved] == ["fallback_rate_high|intent_classify"]
    assert done.firing == [] and len(done.recently_resolved) == 1
    assert [m["text"].split()[0] for m in receiver.received] == ["FIRING", "RESOLVED"]
    assert "intent_classify" in receiver.received[0]["text"]
    # the stored episode: first/last seen, the tripping values, the rules' version
    row = warehouse.query(
        "SELECT status, first_seen, last_seen, trip_values, rule_version FROM routerscope.alerts FINAL"
    ).result_rows
    assert len(row) == 1
    status, first_seen, last_seen, trip, version = row[0]
    assert status == "resolved" and version == "test-1"
    assert first_seen.replace(tzinfo=UTC) == T0 and last_seen.replace(tzinfo=UTC) == T0 + 4 * STEP
    assert [w["value"] for w in json.loads(trip)["windows"]] == [0.5, 0.5, 0.5, 0.6]


def test_two_server_errors_then_success_delivers_exactly_once(warehouse, tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    receiver = Receiver(statuses=[500, 500])
    try:
        for i in range(3):
            window(warehouse, i, 0.9)
        result = alerting.run(warehouse, rules_path=rules, notifier=webhook(receiver.url))
        assert result.delivery_failures == 0
        assert receiver.attempts == 3 and len(receiver.received) == 1
        attempts = warehouse.query(
            "SELECT attempt, status_code FROM routerscope.alert_deliveries ORDER BY attempt"
        ).result_rows
        assert attempts == [(1, 500), (2, 500), (3, 200)]
    finally:
        receiver.close()


def test_an_undeliverable_alert_stays_pending_and_is_sent_later(warehouse, tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    for i in range(3):
        window(warehouse, i, 0.9)
    dead = f"http://127.0.0.1:{free_port()}/nobody-listens"
    failed = alerting.run(warehouse, rules_path=rules, notifier=webhook(dead, retries=2))
    assert failed.delivery_failures == 1 and len(failed.firing) == 1
    assert failed.firing[0].notify_state == "pending"
    receiver = Receiver()
    try:
        later = alerting.run(warehouse, rules_path=rules, notifier=webhook(receiver.url))
        assert later.fired == []  # the same episode, not a new alert
        assert len(receiver.received) == 1 and receiver.received[0]["text"].startswith("FIRING")
        again = alerting.run(warehouse, rules_path=rules, notifier=webhook(receiver.url))
        assert len(receiver.received) == 1 and again.delivery_failures == 0
    finally:
        receiver.close()


@pytest.mark.slow
def test_an_injected_device_outage_raises_exactly_its_alerts(home, receiver):
    """An hour of traffic whose last 15 minutes lose the device: through Kafka and the loader, the
    5-minute metrics, then the default rules."""
    settings = settings_for(home)
    broker.start(settings, port=free_port())
    try:
        start = T0
        outage = start + timedelta(minutes=45)
        lines = []
        for i in range(60 * 12):  # one request every 5 s for an hour
            t = start + timedelta(seconds=5 * i)
            common = dict(
                event_id=f"00000000-0000-4000-8000-{i:012d}",
                request_id=f"r{i}",
                session_id=f"s{i % 40}",
                event_time=iso(t),
            )
            if t < outage:
                lines.append(dumps(decision(**common)))
            else:
                lines.append(
                    dumps(
                        decision(
                            **common,
                            entered_device=False,
                            reason="device_unavailable",
                            degrade_level=2,
                            cloud_calls=1,
                            confidence=None,
                            cloud_model="cloud-small",
                            attempts=[{"level": 2, "outcome": "ok", "latency_ms": 600.0}],
                        )
                    )
                )
        (home / "decisions.jsonl").write_bytes(b"\n".join(lines) + b"\n")
        (home / "breakers.jsonl").write_bytes(
            dumps(
                breaker(
                    boundary="device",
                    from_state="closed",
                    to_state="open",
                    event_time=iso(outage),
                    trigger="load_failure",
                )
            )
            + b"\n"
        )
        env = clean_env(home)
        for topic, name in (("decisions", "decisions.jsonl"), ("breakers", "breakers.jsonl")):
            assert run_cli("produce", str(home / name), "--topic", topic, "--quiet", env=env).returncode == 0
        loaded = load(settings, idle_timeout_s=0.5)
        assert loaded.loaded["decisions"] == 720
        with open_warehouse(settings) as client:
            for k in range(12):
                w0 = start + k * STEP
                write_window(client, "5m", w0, w0 + STEP, compute(client, w0, w0 + STEP))
            result = alerting.run(client, notifier=webhook(receiver.url), now=start + timedelta(hours=1, minutes=1))
        # Expected: the bypass page (>50 % of 60 requests per window, from the first outage window), the
        # open device breaker, and L2/L3 drift: all traffic moved to L2 against a 7-day baseline that
        # (here) is the 45 device-served minutes, for the 3 outage windows. Nothing else: fallback
        # rates over the device-entered denominator stay 0, no labels, no quarantine, fresh data.
        assert sorted(a.alert_key for a in result.firing) == ["device_breaker_open|", "device_bypass|", "l2_l3_drift|"]
        bypass = next(a for a in result.firing if a.rule == "device_bypass")
        assert bypass.severity == "page"
        assert bypass.first_seen == outage  # the first bypassed window
        assert len(receiver.received) == 3
    finally:
        broker.stop(settings)


@pytest.mark.slow
def test_alerts_command_lists_firing_alerts(home, tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    with open_warehouse(settings_for(home)) as client:
        migrate(client)
        for i in range(3):
            window(client, i, 0.9)
    env = clean_env(home, ROUTERSCOPE_ALERT_RULES=str(rules))
    done = run_cli("alerts", "--evaluate", "--json", env=env)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert [a["alert_key"] for a in out["firing"]] == ["fallback_rate_high|intent_classify"]
    assert out["firing"][0]["notify_state"] == "no_webhook"
    human = run_cli("alerts", env=env)
    assert "FIRING [ticket] Device fallback rate over its limit (intent_classify)" in human.stdout
    bad = run_cli(
        "alerts", "--evaluate", "--new-rules", env=clean_env(home, ROUTERSCOPE_ALERT_RULES=str(tmp_path / "x.yaml"))
    )
    assert bad.returncode == 2 and "cannot read alert rules" in bad.stderr


def stored_counts(home) -> tuple[int, int]:
    with open_warehouse(settings_for(home)) as client:
        return tuple(
            client.query(f"SELECT count() FROM routerscope.{table}").result_rows[0][0]
            for table in ("alerts", "alert_evaluations")
        )


@pytest.mark.slow
def test_alerts_reads_without_evaluate_and_evaluates_under_the_rules_the_warehouse_was_judged_with(home, tmp_path):
    """Issue 39 §2: `routerscope alerts`, which the README and the demo suggest, evaluated the demo's warehouse under
    the shipped defaults and wrote incidents the demo never raised. Reading writes nothing now; `--evaluate` judges
    with the rules recorded by the warehouse's own evaluations, and refuses other ones unless told (--new-rules)."""
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    with open_warehouse(settings_for(home)) as client:
        migrate(client)
        for i in range(3):
            window(client, i, 0.9)
    plain = clean_env(home)  # no ROUTERSCOPE_ALERT_RULES: what a person types after the demo

    read = run_cli("alerts", "--json", env=plain)
    assert read.returncode == 0, read.stderr
    assert json.loads(read.stdout)["firing"] == [] and json.loads(read.stdout)["evaluated"] is False
    assert stored_counts(home) == (0, 0)  # nothing evaluated, nothing written

    judged = run_cli("alerts", "--evaluate", "--json", env=clean_env(home, ROUTERSCOPE_ALERT_RULES=str(rules)))
    assert judged.returncode == 0, judged.stderr
    written = stored_counts(home)
    assert written[1] == 1 and written[0] >= 1

    read = run_cli("alerts", "--json", env=plain)  # lists what is stored, under the version that judged it
    out = json.loads(read.stdout)
    assert [a["alert_key"] for a in out["firing"]] == ["fallback_rate_high|intent_classify"]
    assert out["rule_version"] == "test-1" and stored_counts(home) == written

    again = run_cli("alerts", "--evaluate", "--json", env=plain)  # not the defaults: the rules recorded
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["rule_version"] == "test-1"

    other = run_cli("alerts", "--evaluate", env=clean_env(home, ROUTERSCOPE_ALERT_RULES=str(alerting.DEFAULT_RULES)))
    assert other.returncode == 2 and "differs from the rules this warehouse was judged with" in other.stderr
    rules.write_text(RULES.replace("limit: 0.3", "limit: 0.95"))
    changed = run_cli("alerts", "--evaluate", env=plain)
    assert changed.returncode == 2 and "are changed" in changed.stderr and "--new-rules" in changed.stderr
    forced = run_cli("alerts", "--evaluate", "--new-rules", env=clean_env(home, ROUTERSCOPE_ALERT_RULES=str(rules)))
    assert forced.returncode == 0 and "WARNING" in forced.stderr


def test_replayed_as_of_a_past_time_an_evaluation_sees_only_the_windows_that_had_ended(warehouse, tmp_path):
    """The demo stores a whole span, then evaluates as of each window's end: each evaluation must see
    what the sensor saw then, not the windows stored after it."""
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    for i, rate in enumerate([0.5, 0.5, 0.5, 0.1]):  # breaching for windows 0-2, clear in window 3
        window(warehouse, i, rate)

    def as_of(i: int):  # one minute after window i ended
        return alerting.run(warehouse, rules_path=rules, now=T0 + (i + 1) * STEP + timedelta(minutes=1))

    assert as_of(1).fired == []  # windows 2 and 3 had not ended yet
    assert [a.alert_key for a in as_of(2).fired] == ["fallback_rate_high|intent_classify"]
    assert [a.alert_key for a in as_of(3).resolved] == ["fallback_rate_high|intent_classify"]


def test_the_alerts_job_delivers_through_its_webhook_resource(home, tmp_path, monkeypatch):
    """The deployed path: `alerts_job` (what the sensor runs after each window) evaluates as of each
    time it is given and delivers through the `alert_webhook` resource — here the recording fake."""
    from routerscope.pipelines.alerting import evaluate_alerts
    from routerscope.pipelines.resources import RouterscopeResource
    from routerscope.pipelines.run import run_job
    from tests.support.fakes import FakeWebhook

    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    monkeypatch.setenv("ROUTERSCOPE_ALERT_RULES", str(rules))
    with open_warehouse(settings_for(home)) as client:
        migrate(client)
        for i, rate in enumerate([0.9, 0.9, 0.9, 0.1]):
            window(client, i, rate)
    fake = FakeWebhook(key=str(tmp_path))
    as_of = [(T0 + (i + 1) * STEP + timedelta(minutes=1)).isoformat() for i in (2, 3)]
    result = run_job(
        "alerts_job",
        ops_config={evaluate_alerts.name: {"config": {"as_of": as_of}}},
        resources={"routerscope": RouterscopeResource(home=str(home)), "alert_webhook": fake},
    )
    fired, resolved = result.output_for_node(evaluate_alerts.name)
    assert fired["fired_now"] == ["fallback_rate_high|intent_classify"]
    assert resolved["resolved_now"] == ["fallback_rate_high|intent_classify"]
    assert [(d["event"], d["body"]["text"].split()[0]) for d in fake.deliveries] == [
        ("firing", "FIRING"),
        ("resolved", "RESOLVED"),
    ]
    with open_warehouse(settings_for(home)) as client:
        stored = client.query("SELECT event, status_code FROM routerscope.alert_deliveries ORDER BY event").result_rows
        state = client.query("SELECT status, notify_state FROM routerscope.alerts FINAL").result_rows
    assert stored == [("firing", 200), ("resolved", 200)] and state == [("resolved", "sent")]


ROUTE_RULES = """
version: "test-late"
rules:
  - name: rollback_route_accuracy
    summary: Rollback recommended
    metric: route_accuracy
    interval: route_accuracy_ci
    scope: per_task_type
    grain: 5m
    op: "<"
    limit: 0.95
    windows: 3
    min_n: 30
    denominator: route_labeled
    severity: page
    action: rollback
"""


def test_an_incident_replayed_with_late_labels_fires_no_earlier_than_the_labels_arrived(warehouse, tmp_path):
    """docs/metrics.md "Labels as of their arrival": three windows of 40 short_reply requests each, half judged
    wrong (route accuracy 0.5, Wilson high ≈ 0.65 < 0.95, 40 ≥ 30 labeled), whose labels are dated an hour after
    the third window ended. The stored windows were recomputed once the labels came (as the late-labels sensor
    does), so they hold the labels; an evaluation replayed as of a time before the labels' own event_time must
    not see them, and the alert fires only at the first evaluation after they arrived."""
    from tests.support.events import label
    from tests.support.golden_day import insert

    arrived = T0 + 3 * STEP + timedelta(hours=1)
    events, labels = [], []
    for w in range(3):
        for i in range(40):
            rid = f"late-{w}-{i}"
            at = T0 + w * STEP + i * STEP / 40
            events.append(
                decision(
                    event_id=f"00000000-0000-4000-8000-{w * 100 + i:012d}",
                    request_id=rid,
                    task_type="short_reply",
                    event_time=iso(at),
                )
            )
            labels.append(
                label(
                    request_id=rid,
                    source="human_review",
                    device_acceptable=i % 2 == 0,
                    route_correct=i % 2 == 0,
                    event_time=iso(arrived),
                )
            )
    insert(warehouse, events, labels)
    for w in range(3):  # computed after the labels arrived: the stored windows hold them
        start = T0 + w * STEP
        stored = compute(warehouse, start, start + STEP)
        assert stored["by_task_type"]["short_reply"]["route_labeled"] == 40
        write_window(warehouse, "5m", start, start + STEP, stored)
    rules = tmp_path / "rules.yaml"
    rules.write_text(ROUTE_RULES)

    def fired_as_of(now):
        return [a.alert_key for a in alerting.run(warehouse, rules_path=rules, now=now).fired]

    assert fired_as_of(T0 + 3 * STEP + timedelta(minutes=1)) == []  # the incident's end: no label yet
    assert fired_as_of(arrived - timedelta(seconds=1)) == []  # a second before they arrived
    assert fired_as_of(arrived) == ["rollback_route_accuracy|short_reply"]  # at their arrival, not before


def test_late_labels_on_an_incident_already_over_fire_once_when_they_arrive_and_then_resolve(warehouse, tmp_path):
    """The same incident (windows 0-2, labels an hour late), followed by three calm windows whose labels came at
    once: the latest window never breaches, so only the late labels can reveal the incident. It fires at their
    arrival — its episode begins at window 0, marked late — resolves at the next evaluation, and is not raised
    again."""
    from tests.support.events import label
    from tests.support.golden_day import insert

    arrived = T0 + 6 * STEP + timedelta(hours=1)
    events, labels = [], []
    for w in range(6):
        for i in range(40):
            rid = f"inc-{w}-{i}"
            at = T0 + w * STEP + i * STEP / 40
            good = w >= 3 or i % 2 == 0
            events.append(
                decision(
                    event_id=f"00000000-0000-4000-8000-{w * 100 + i:012d}",
                    request_id=rid,
                    task_type="short_reply",
                    event_time=iso(at),
                )
            )
            labels.append(
                label(
                    request_id=rid,
                    source="human_review",
                    device_acceptable=good,
                    route_correct=good,
                    event_time=iso(arrived if w < 3 else at),
                )
            )
    insert(warehouse, events, labels)
    for w in range(6):
        start = T0 + w * STEP
        write_window(warehouse, "5m", start, start + STEP, compute(warehouse, start, start + STEP))
    rules = tmp_path / "rules.yaml"
    rules.write_text(ROUTE_RULES)
    for w in range(6):  # as the sensor evaluated after each window: no label of the incident yet
        assert alerting.run(warehouse, rules_path=rules, now=T0 + (w + 1) * STEP + timedelta(minutes=1)).fired == []
    at_arrival = alerting.run(warehouse, rules_path=rules, now=arrived)
    assert [a.alert_key for a in at_arrival.fired] == ["rollback_route_accuracy|short_reply"]
    episode = at_arrival.fired[0]
    trip = json.loads(episode.trip_values)
    assert (episode.first_seen, episode.last_seen, trip["late"], len(trip["windows"])) == (T0, T0 + 3 * STEP, True, 3)
    after = alerting.run(warehouse, rules_path=rules, now=arrived + STEP)
    assert [a.alert_key for a in after.resolved] == ["rollback_route_accuracy|short_reply"]
    assert alerting.run(warehouse, rules_path=rules, now=arrived + 2 * STEP).fired == []  # once only


def shipped_rule(tmp_path, name: str):
    """A rules file holding the shipped default rule `name` alone (the rule under test, not a copy of it)."""
    import yaml

    from routerscope.warehouse.analytics.alerting.rules import DEFAULT_RULES

    doc = yaml.safe_load(DEFAULT_RULES.read_text())
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump({"version": doc["version"], "rules": [r for r in doc["rules"] if r["name"] == name]})
    )
    return path


@pytest.mark.parametrize(
    "acceptable_in_low_band, fires, estimate",
    [
        # band [0.45, 0.65): 100 quality fallbacks, 10 labeled, none acceptable; band [0.65, 0.85): 20, all labeled,
        # 6 acceptable. Labeled share 6/30 = 0.20, over the 0.10 limit; estimate (100/120)·0 + (20/120)·0.3 = 0.05.
        (0, False, 0.05),
        # 2 of the 10 acceptable: labeled 8/30 = 0.267; estimate (100/120)·0.2 + (20/120)·0.3 = 13/60 = 0.216667
        (2, True, 13 / 60),
    ],
)
def test_false_fallback_high_reads_the_quality_estimate_not_the_combined_labeled_rate(
    warehouse, tmp_path, acceptable_in_low_band, fires, estimate
):
    """Issue 38: the shipped `false_fallback_high` (daily) reads §3c's estimate of the quality false fallbacks. The
    day also holds 40 timeout fallbacks, all labeled acceptable (a latency problem): the combined labeled rate
    (46/70 = 0.657 or 48/70 = 0.686) would fire either way. The labels are dated two hours after the day: an
    evaluation before that sees none (0 labeled < min_n 30)."""
    from tests.support.events import label
    from tests.support.golden_day import insert, quality_fallback, timeout_fallback

    day = datetime(2026, 11, 20, tzinfo=UTC)
    arrived = day + timedelta(days=1, hours=2)
    events, labels = [], []

    def add(event: dict, acceptable: bool | None) -> None:
        k = len(events)
        event = {**event, "event_id": f"00000000-0000-4000-8000-{k:012d}", "request_id": f"ff-{k}"}
        events.append({**event, "event_time": iso(day + timedelta(minutes=5 * k)), "session_id": f"s{k % 7}"})
        if acceptable is not None:
            labels.append(
                label(
                    request_id=event["request_id"],
                    device_acceptable=acceptable,
                    route_correct=not acceptable,
                    event_time=iso(arrived),
                )
            )

    for i in range(100):  # the low band: one in ten labeled
        add(
            quality_fallback(task_type="intent_classify", confidence=0.5, threshold=0.9),
            (i < acceptable_in_low_band) if i < 10 else None,
        )
    for i in range(20):  # the high band, densely labeled (as the replay labels a band it samples)
        add(quality_fallback(task_type="intent_classify", confidence=0.7, threshold=0.9), i < 6)
    for _ in range(40):  # timeouts whose device answer was fine: not the threshold's doing
        add(timeout_fallback(task_type="intent_classify"), True)
    insert(warehouse, events, labels)
    stored = compute(warehouse, day, day + timedelta(days=1))
    group = stored["by_task_type"]["intent_classify"]
    assert group["false_fallback_rate"] == pytest.approx((acceptable_in_low_band + 6 + 40) / 70)
    assert group["false_fallback_by_type"]["quality"]["rate"] == pytest.approx((acceptable_in_low_band + 6) / 30)
    assert group["false_fallback_by_type"]["quality_est"]["rate"] == pytest.approx(estimate)
    assert group["false_fallback_by_type"]["quality_est"]["coverage"] == 1.0
    write_window(warehouse, "1d", day, day + timedelta(days=1), stored)
    rules = shipped_rule(tmp_path, "false_fallback_high")

    def fired_as_of(now):
        return alerting.run(warehouse, rules_path=rules, now=now).fired

    assert fired_as_of(arrived - timedelta(minutes=1)) == []  # no label had arrived: nothing to judge
    fired = fired_as_of(arrived)
    assert [a.alert_key for a in fired] == (["false_fallback_high|intent_classify"] if fires else [])
    if fires:
        trip = json.loads(fired[0].trip_values)
        assert trip["metric"] == "false_fallback_by_type.quality_est.rate" and trip["limit"] == 0.10
        assert trip["windows"][0]["value"] == pytest.approx(13 / 60) and trip["windows"][0]["n"] == 30
        # its words say what it read: the quality fallbacks, as an estimate
        assert fired[0].summary.startswith("An estimated more than 0.1 of quality fallbacks were unnecessary")


@pytest.mark.parametrize(
    "low_band, fires, estimate",
    [
        # per window: [0.45, 0.65) holds `low_band` requests, 10 of them labeled, 5 routed right; [0.85, 1] holds
        # 100 − low_band, 30 labeled, all right. Labeled share 35/40 = 0.875 (Wilson high 0.945 < 0.95: the
        # labeled share would page). Estimate with 10 low: 0.1·0.5 + 0.9·1 = 0.95, V = 0 (the low band is
        # labeled whole) → n_eff = 40, Wilson high 0.986: no breach.
        (10, False, 0.95),
        # with 60 low: 0.6·0.5 + 0.4·1 = 0.7, V = 0.36·0.25/10·(1 − 10/60) = 0.0075, n_eff = 28, high 0.8369: pages
        (60, True, 0.7),
    ],
)
def test_the_route_accuracy_rollback_reads_the_estimate_and_its_interval(
    warehouse, tmp_path, low_band, fires, estimate
):
    """Issue 37: the shipped `rollback_route_accuracy` judges §3c's estimate of route accuracy over every request of
    the task type (strata: confidence bucket) by its interval, not the labeled share: 3 windows of 100 short_reply
    requests whose labels pile up in the low-confidence band."""
    from tests.support.events import label
    from tests.support.golden_day import insert, quality_fallback

    events, labels = [], []
    for w in range(3):
        for i in range(100):
            k = w * 100 + i
            at = iso(T0 + w * STEP + i * STEP / 100)
            low = i < low_band
            common = {
                "event_id": f"00000000-0000-4000-8000-{k:012d}",
                "request_id": f"ra-{k}",
                "task_type": "short_reply",
                "event_time": at,
                "session_id": f"s{k % 9}",
            }
            events.append(quality_fallback(confidence=0.5, **common) if low else decision(confidence=0.9, **common))
            j = i if low else i - low_band  # the first 10 of the low band, the first 30 of the high one
            if (low and j < 10) or (not low and j < 30):
                right = j < 5 if low else True
                labels.append(
                    label(
                        request_id=f"ra-{k}", device_acceptable=not low or not right, route_correct=right, event_time=at
                    )
                )
    insert(warehouse, events, labels)
    for w in range(3):
        start = T0 + w * STEP
        stored = compute(warehouse, start, start + STEP)
        group = stored["by_task_type"]["short_reply"]
        assert (group["route_accuracy"], group["route_labeled"]) == (35 / 40, 40)
        assert group["route_accuracy_ci"][1] == pytest.approx(0.945405, abs=1e-6)  # the labeled share would page
        assert group["route_accuracy_est"]["rate"] == pytest.approx(estimate)
        write_window(warehouse, "5m", start, start + STEP, stored)
    est = group["route_accuracy_est"]
    assert est["n_eff"] == pytest.approx(40 if low_band == 10 else 28)
    assert est["ci"][1] == pytest.approx(0.986179 if low_band == 10 else 0.836860, abs=1e-5)
    rules = shipped_rule(tmp_path, "rollback_route_accuracy")
    fired = alerting.run(warehouse, rules_path=rules, now=T0 + 3 * STEP + timedelta(minutes=1)).fired
    assert [a.alert_key for a in fired] == (["rollback_route_accuracy|short_reply"] if fires else [])
    if fires:
        last = json.loads(fired[0].trip_values)["windows"][-1]
        assert last["value"] == pytest.approx(0.7) and last["interval"][1] == pytest.approx(0.836860, abs=1e-5)
