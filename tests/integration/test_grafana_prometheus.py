"""The Grafana dashboard on PromQL (`deploy/grafana/dashboards/routerscope-prometheus.json`): its provisioning
files agree on the data source, and every panel's expression, its template variable and its annotation,
evaluated by a real Prometheus (Debian's) scraping a real `routerscope exporter` over a demo-like embedded
warehouse, resolves to at least one series — with the number it should show where the number is known."""

from __future__ import annotations

import json
import math
import time
import urllib.parse
import urllib.request
from datetime import timedelta

import pytest
import yaml

from routerscope.core import procs
from routerscope.core.procs import free_port
from routerscope.warehouse.analytics.alerting.prometheus import rule_file
from routerscope.warehouse.analytics.alerting.rules import load_rules
from routerscope.warehouse.client import open_warehouse
from tests.integration.test_exporter import insert_decisions
from tests.integration.test_prometheus_scrape import A, B, fill
from tests.support import oncall
from tests.support.events import decision, iso
from tests.support.home import REPO, settings_for, spawn_exporter

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GRAFANA = REPO / "deploy" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "routerscope-prometheus.json"
VARIABLES = {"$task_type": ".+", "$__rate_interval": "1m", "$__range": "1h", "$__interval": "15s"}


def expressions() -> dict[str, str]:
    """{panel title · refId: PromQL} of every target, and the annotation's."""
    doc = json.loads(DASHBOARD.read_text())
    found = {f"{p['title']} · {t['refId']}": t["expr"] for p in doc["panels"] for t in p["targets"]}
    found |= {f"annotation {a['name']}": a["expr"] for a in doc["annotations"]["list"]}
    return found


def substitute(expr: str) -> str:
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, expr
    return expr


def test_the_provisioning_files_name_the_prometheus_data_source_every_panel_reads():
    source = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "routerscope-prometheus.yaml").read_text())
    (ds,) = source["datasources"]
    assert ds["type"] == "prometheus"
    doc = json.loads(DASHBOARD.read_text())
    assert doc["uid"] == "routerscope-prometheus"
    used = {t["datasource"]["uid"] for p in doc["panels"] for t in p["targets"]}
    used |= {p["datasource"]["uid"] for p in doc["panels"]}
    used |= {a["datasource"]["uid"] for a in doc["annotations"]["list"]}
    used |= {v["datasource"]["uid"] for v in doc["templating"]["list"]}
    assert used == {ds["uid"]}
    assert len({p["id"] for p in doc["panels"]}) == len(doc["panels"]) >= 10
    assert not any("rawSql" in t for p in doc["panels"] for t in p["targets"])  # PromQL only
    # the histogram panels ask for exemplars: a latency bucket links to its newest decision's trace
    assert all(t.get("exemplar") for p in doc["panels"] for t in p["targets"] if "_bucket" in t["expr"])
    assert ds["jsonData"]["exemplarTraceIdDestinations"][0]["name"] == "trace_id"


def query(prometheus: str, expr: str) -> list[dict]:
    url = f"{prometheus}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    body = json.loads(urllib.request.urlopen(url, timeout=10).read())
    assert body["status"] == "success", body
    return body["data"]["result"]


def test_every_panel_resolves_to_series_on_a_demo_like_warehouse(home, tmp_path):
    """The warehouse: the latest finished window (A 100 requests, 40 device-entered, 10 quality fallbacks; B 50,
    20 entered, 5 timeouts; 90 bypassed the device, a device breaker open) and six live decisions of A in it with
    attempts at L0 and L2, streamed first tokens and a cloud cost. The exported rules are loaded, so the alerts'
    annotation has something to show (`device_bypass` fires at once)."""
    settings = settings_for(home)
    start = fill(settings)
    events = []
    for i in range(6):
        fell_back = i % 2 == 0
        events.append(
            decision(
                event_time=iso(start + timedelta(seconds=10 + i)),
                request_id=f"r{i}",
                trace_id=f"{i:032x}",
                ttft_ms=120.0 + i,
                **(
                    {
                        "fallback_type": "timeout",
                        "reason": "device_timeout",
                        "degrade_level": 2,
                        "attempts": [
                            {"level": 0, "outcome": "timeout", "latency_ms": 2000.0},
                            {"level": 2, "outcome": "ok", "latency_ms": 700.0},
                        ],
                        "cloud_calls": 1,
                        "latency_ms": 2750.0,
                        "cost_usd": 0.0012,
                    }
                    if fell_back
                    else {}
                ),
            )
        )
    with open_warehouse(settings, purpose="test", migrated=True) as client:
        insert_decisions(client, events)
    version, rules = load_rules()
    rules_path = tmp_path / "routerscope.rules.yml"
    rules_path.write_text(yaml.safe_dump(rule_file(version, rules, interval="1s"), sort_keys=False))
    port = free_port()
    log = tmp_path / "exporter.log"
    exporter = spawn_exporter(home, port, log, refresh_s=2)
    try:
        procs.wait_ready(
            exporter, lambda: procs.http_ok(f"http://127.0.0.1:{port}/metrics", 30), what="exporter", log_path=log
        )
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(rules_path)],
            "scrape_configs": [{"job_name": "routerscope", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}],
        }
        with oncall.prometheus(tmp_path, config) as prom:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not (
                query(prom, 'ALERTS{alertstate="firing"}') and query(prom, "routerscope_request_duration_seconds_count")
            ):
                time.sleep(0.5)
            time.sleep(3)  # a few scrapes more: increase() has two samples at least
            empty = {}
            results = {}
            for name, expr in expressions().items():
                found = query(prom, substitute(expr))
                results[name] = found
                if not found:
                    empty[name] = expr
            assert not empty, f"panels with no series: {json.dumps(empty, indent=1)}"
            # the template variable lists both task types
            match = urllib.parse.urlencode({"match[]": "routerscope_decisions_total"})
            url = f"{prom}/api/v1/label/task_type/values?{match}"
            assert set(json.loads(urllib.request.urlopen(url, timeout=10).read())["data"]) == {A, B}
    finally:
        assert procs.stop(exporter) == 0

    def values(prefix: str) -> dict[str, float]:
        (key,) = [k for k in results if k.startswith(prefix)]
        return {json.dumps(r["metric"], sort_keys=True): float(r["value"][1]) for r in results[key]}

    # numbers known by hand: 10 / 40 and 5 / 20 fell back; the naive rates over all requests 10 / 100, 5 / 50
    rate = values("Fallback rate of the latest window, over device-entered requests · A")
    assert sorted(rate.values()) == [0.25, 0.25]
    naive = values("Fallback rate of the latest window, over device-entered requests · B")
    assert sorted(naive.values()) == [0.1, 0.1]
    # three of the six decisions cost $0.0012 each: the mean over costed requests
    cost = values("Tokens and cloud cost per request (mean) · B")
    assert list(cost.values()) == [pytest.approx(0.0012)]
    # every attempt at L0 in the first buckets up to 0.32 s (180 ms, the default) or 2 s (the timeouts): p95 finite
    p95 = values("Model call duration p50 and p95, by attempt level · A")
    assert {json.loads(k)["level"] for k in p95} == {"L0", "L2"} and all(math.isfinite(v) for v in p95.values())
    assert values("Freshness: the latest window's age and the newest event's · A")
    breakers = values("L2/L3 drift and open breakers · B")
    assert {json.loads(k)["boundary"]: v for k, v in breakers.items()} == {"device": 1.0, "cloud": 0.0}
