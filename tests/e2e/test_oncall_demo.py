"""Issue 44's "done when", for real: after `routerscope demo`, the demo's cloud outage reaches a webhook receiver
through a real Alertmanager (Debian's `prometheus-alertmanager`) as firing, then resolved — by both paths a team
can run (docs/operations.md "Which path sees a past incident"):

* routerscope's own evaluation, with ROUTERSCOPE_ALERTMANAGER_URL set during the demo: it judges each window as
  of its end, so the episode arrives with the outage's own times;
* a real Prometheus (Debian's `prometheus`) scraping `routerscope exporter` and evaluating the exported rule file.
  Prometheus judges only what it scrapes now, and after the demo the outage is an hour and a half old: the
  exporter replays the warehouse from before the outage, 100 times faster than real time, until it reaches the
  present, where Prometheus's recorded rates must equal the stored latest window's.

Then the data stops (issue 56's stale case on the demo's own warehouse): the demo's span has ended, and a second
exporter replays from the present to half an hour past it (`--replay-until`) for a second Prometheus, so the latest
window ages past its allowance in seconds: `routerscope_windows_stale` must reach Alertmanager, and no streak rule
(every exported alert with a `for:` but the stale alert's) may be pending or firing then, nor ever reach it.

One small demo (4,000 requests over the usual 2 hours, no live model): the outage's breaker windows do not depend
on the volume."""

from __future__ import annotations

import json
import math
import subprocess
import time
import urllib.parse
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from routerscope.core import procs
from routerscope.core.procs import free_port
from routerscope.core.timeutil import parse_utc
from routerscope.router.sim.baseline import SIM_RULES
from routerscope.warehouse.client import open_warehouse
from tests.support import oncall
from tests.support.home import ROUTERSCOPE, clean_env, run_cli, settings_for

pytestmark = pytest.mark.integration

OUTAGE = "cloud_breaker_open"  # the demo's cloud outage (20-30 % of its span) raises this rule, one window at a time
SPEED = 100  # replayed seconds per second: a 5-minute window lasts 3 s, scraped and evaluated every second
LEAD = timedelta(minutes=10)  # the replay starts this long before the outage's first window
REPLAY = "routerscope_replay"  # the drill's Prometheus marks what it sends (external label)
STALE = "routerscope_windows_stale"
STOPPED = "stopped"  # the external label of the second phase's Prometheus: the data has stopped
STOPPED_FOR = timedelta(minutes=30)  # how far the second phase's clock runs on past the data: 18 s at SPEED
REPLAY_GAUGE = "routerscope_exporter_replay_timestamp_seconds"  # served while the exporter replays


def statuses(receiver: oncall.Receiver, rule: str, replayed: bool) -> list[tuple[str, dict]]:
    """(status, alert) of `rule` in each notification the receiver got from Alertmanager, in order, consecutive
    repeats folded (a notification carries every alert of its group), for one path."""
    out: list[tuple[str, dict]] = []
    for note in receiver.at("/am"):
        for alert in note["alerts"]:
            if alert["labels"]["alertname"] == rule and (REPLAY in alert["labels"]) == replayed:
                if not out or out[-1][0] != alert["status"]:
                    out.append((alert["status"], alert))
    return out


def wait_for_firing_then_resolved(receiver, rule: str, replayed: bool, timeout_s: float) -> list[tuple[str, dict]]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        seen = statuses(receiver, rule, replayed)
        if [s for s, _ in seen][:2] == ["firing", "resolved"]:
            return seen
        time.sleep(0.5)
    return statuses(receiver, rule, replayed)


def query(prometheus: str, expr: str) -> dict[str, float]:
    """{task_type (or ''): value} of an instant query."""
    url = f"{prometheus}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    body = json.loads(urllib.request.urlopen(url, timeout=10).read())
    return {r["metric"].get("task_type", ""): float(r["value"][1]) for r in body["data"]["result"]}


def scrape(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()


def live_rates(prometheus: str) -> dict[str, float]:
    """Prometheus's recorded fallback rate per task type, those without device-entered requests (NaN) left out."""
    rates = query(prometheus, "task_type:routerscope_fallback_rate:ratio_5m")
    return {t: v for t, v in rates.items() if not math.isnan(v)}


def eventually(read, want, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while True:
        got = read()
        if got.keys() == want.keys() and all(abs(got[k] - want[k]) < 1e-9 for k in want):
            return got
        if time.monotonic() > deadline:
            return got
        time.sleep(0.5)


def stored_latest_fallback_rates(settings) -> dict[str, float]:
    """Each task type's fallback rate in the latest finished 5-minute window, as the metric job stored it."""
    with open_warehouse(settings, purpose="test") as client:
        rows = client.query(
            "SELECT task_type, fallback_rate FROM routerscope.metric_windows FINAL WHERE grain = '5m' "
            "AND task_type != '' AND device_entered > 0 AND window_end = (SELECT max(window_end) FROM "
            "routerscope.metric_windows WHERE grain = '5m' AND window_end <= now64())"
        ).result_rows
    return dict(rows)


def start_exporter(home, log, start: datetime, until: datetime | None = None):
    """`routerscope exporter` replaying the warehouse from `start` at SPEED (to `until`, or the present)."""
    port = free_port()
    argv = [ROUTERSCOPE, "exporter", "--port", str(port), "--refresh", "0.5"]
    argv += ["--replay-from", start.isoformat(), "--replay-speed", str(SPEED)]
    argv += ["--replay-until", until.isoformat()] if until else []
    with log.open("wb") as out:
        exporter = procs.spawn(argv, env=clean_env(home), stdout=out, stderr=subprocess.STDOUT)
    procs.wait_ready(
        exporter, lambda: procs.http_ok(f"http://127.0.0.1:{port}/-/healthy"), what="exporter", log_path=log
    )
    return exporter, port


def streak_rules(rules_file) -> set[str]:
    """The exported alerts that wait `for:` a streak of windows (every one with a `for:`, but the stale alert's)."""
    groups = yaml.safe_load(rules_file.read_text())["groups"]
    return {r["alert"] for g in groups for r in g["rules"] if "alert" in r and r.get("for") and r["alert"] != STALE}


def alerts(receiver: oncall.Receiver, replay: str) -> list[dict]:
    return [a for n in receiver.at("/am") for a in n["alerts"] if a["labels"].get(REPLAY) == replay]


def labelled(receiver: oncall.Receiver, rule: str, replay: str, status: str) -> list[dict]:
    return [a for a in alerts(receiver, replay) if a["labels"]["alertname"] == rule and a["status"] == status]


def query_all(prometheus: str, expr: str) -> list[dict]:
    url = f"{prometheus}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    return json.loads(urllib.request.urlopen(url, timeout=10).read())["data"]["result"]


@pytest.mark.timeout(300)  # the demo (~15-40 s), about a minute of replay into the present, ~20 s stopped
def test_the_demos_outage_reaches_alertmanager_firing_then_resolved_through_routerscope_and_through_prometheus(
    home, tmp_path
):
    settings = settings_for(home)
    receiver = oncall.Receiver()
    exporter = None
    try:
        with oncall.alertmanager(tmp_path, f"{receiver.base}/am") as am:
            demo = run_cli(
                *(
                    "demo",
                    "--requests",
                    "4000",
                    "--seed",
                    "11",
                    "--no-dashboard",
                    "--live-sample",
                    "0",
                    "--no-loop-week",
                ),
                *("--port", str(free_port())),
                env=clean_env(home, ROUTERSCOPE_ALERTMANAGER_URL=am),
                timeout=240,
            )
            assert demo.returncode == 0, demo.stderr[-3000:]
            with open_warehouse(settings, purpose="test") as client:
                episodes = client.query(
                    "SELECT status, first_seen, resolved_at FROM routerscope.alerts FINAL WHERE rule = {rule:String}",
                    parameters={"rule": OUTAGE},
                ).result_rows
            # the scripted outage is the first episode, over by the end of the demo (a later, shorter one may come in
            # the thermal windows, when more requests go to the cloud: resolved too); the test follows the outage
            episodes = sorted(episodes, key=lambda e: e[1])
            assert episodes and all(e[0] == "resolved" for e in episodes), episodes
            status, first_seen, resolved_at = episodes[0]
            first_seen, resolved_at = first_seen.replace(tzinfo=UTC), resolved_at.replace(tzinfo=UTC)
            assert status == "resolved" and first_seen < resolved_at < datetime.now(UTC) - timedelta(minutes=30)

            # routerscope's own evaluation: the episode with the outage's times, firing, then resolved
            own = wait_for_firing_then_resolved(receiver, OUTAGE, replayed=False, timeout_s=30)
            assert [s for s, _ in own][:2] == ["firing", "resolved"], own
            assert parse_utc(own[0][1]["startsAt"]) == first_seen
            assert parse_utc(own[1][1]["endsAt"]) == resolved_at
            assert own[0][1]["labels"]["severity"] == "ticket"

            # Prometheus: the exported rules of the demo's fleet over a replay of the warehouse from before the outage
            rules = tmp_path / "routerscope.rules.yml"
            export = run_cli(
                *("rules", "export", "--format", "prometheus", "--rules", str(SIM_RULES), "--interval", "1s"),
                *("-o", str(rules)),
                env=clean_env(home),
            )
            assert export.returncode == 0, export.stderr
            log = tmp_path / "exporter.log"
            exporter, port = start_exporter(home, log, first_seen - LEAD)
            config = {
                "global": {
                    "scrape_interval": "1s",
                    "evaluation_interval": "1s",
                    "external_labels": {REPLAY: "demo"},
                },
                "rule_files": [str(rules)],
                "scrape_configs": [{"job_name": "routerscope", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}],
                "alerting": {"alertmanagers": [{"static_configs": [{"targets": [am.removeprefix("http://")]}]}]},
            }
            with oncall.prometheus(tmp_path, config) as prom:
                replayed = wait_for_firing_then_resolved(receiver, OUTAGE, replayed=True, timeout_s=90)
                assert [s for s, _ in replayed][:2] == ["firing", "resolved"], (replayed, log.read_text())
                # faster than real time only the one-window rules (`for: 0s`) can fire: of the demo's episodes, the
                # outage's alone (the others need 3 windows in a row: `for: 10m` of wall time)
                fired = {
                    a["labels"]["alertname"]
                    for n in receiver.at("/am")
                    for a in n["alerts"]
                    if REPLAY in a["labels"] and a["status"] == "firing"
                }
                assert fired == {OUTAGE}, fired

                # the replay reaches the present and serves live (asked of the exporter itself: a scrape Prometheus
                # timed out also makes the series vanish for a moment), and the rates Prometheus then records for
                # each task type with device-entered requests are the stored latest window's
                deadline = time.monotonic() + 120
                while REPLAY_GAUGE in scrape(port) and time.monotonic() < deadline:
                    time.sleep(1)
                assert REPLAY_GAUGE not in scrape(port), "the replay never reached the present"
                stored = stored_latest_fallback_rates(settings)
                recorded = eventually(lambda: live_rates(prom), stored, timeout_s=30)
                assert stored and recorded.keys() == stored.keys(), (recorded, stored)
                assert all(abs(recorded[t] - stored[t]) < 1e-9 for t in stored), (recorded, stored)
            assert procs.stop(exporter) == 0
            exporter = None

            # the data stops: the demo's span ended, and the replay's clock runs on past its last window (into the
            # future: time moving on) at the same speed; the latest window ages past its allowance, so
            # `routerscope_windows_stale` reaches Alertmanager and no streak rule even stays pending on it
            exporter, port = start_exporter(
                home, tmp_path / "exporter-stopped.log", datetime.now(UTC), until=datetime.now(UTC) + STOPPED_FOR
            )
            config["global"]["external_labels"] = {REPLAY: STOPPED}
            config["scrape_configs"][0]["static_configs"] = [{"targets": [f"127.0.0.1:{port}"]}]
            streaks = streak_rules(rules)
            assert {"l2_l3_drift", "fallback_rate_high", "rollback_offload_failure"} <= streaks, streaks
            (tmp_path / "stopped").mkdir()
            with oncall.prometheus(tmp_path / "stopped", config) as prom:
                deadline = time.monotonic() + 60
                while not labelled(receiver, STALE, STOPPED, "firing") and time.monotonic() < deadline:
                    time.sleep(0.5)
                stale = labelled(receiver, STALE, STOPPED, "firing")
                assert stale and {a["labels"]["grain"] for a in stale} >= {"5m"}, receiver.at("/am")[-5:]
                # from then on no streak rule holds, pending or firing, in any evaluation (a range over the last 3 s,
                # a few evaluations after: one instant could miss them, as a timed-out scrape empties every rule)
                time.sleep(4)
                held = query_all(prom, f'max_over_time(ALERTS{{alertname=~"{"|".join(sorted(streaks))}"}}[3s])')
                assert not held, held
            fired = {a["labels"]["alertname"] for a in alerts(receiver, STOPPED) if a["status"] == "firing"}
            assert STALE in fired and not fired & streaks, fired
    finally:
        if exporter is not None:
            assert procs.stop(exporter) == 0
        receiver.close()
        run_cli("broker", "stop", env=clean_env(home))
