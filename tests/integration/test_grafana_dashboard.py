"""The Grafana provisioning files (`deploy/grafana/`): the provider and the data source load as YAML and agree on
the data source's uid, the dashboard has its fixed uid, and every panel's and annotation's SQL runs against a real
embedded warehouse holding a known window, an alert and a breaker transition — with the plugin's time macros
expanded as the ClickHouse data source expands them — and returns the stored numbers."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from routerscope.contract.validation import BREAKERS
from routerscope.core import names
from routerscope.warehouse.analytics.metrics import empty_group
from routerscope.warehouse.ingest.rows import FACTS
from routerscope.warehouse.queries.alerts import ALERT_COLUMNS, write_alerts
from routerscope.warehouse.queries.metric_windows import write_window
from tests.support.events import breaker, dumps, iso
from tests.support.home import REPO

pytestmark = pytest.mark.integration

GRAFANA = REPO / "deploy" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "routerscope-oncall.json"
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
STEP = timedelta(minutes=5)
FROM, TO = T0 - timedelta(hours=1), T0 + timedelta(hours=1)


def expand(sql: str) -> str:
    """The ClickHouse plugin's macros over [FROM, TO] (its `$__timeFilter(c)`: c >= toDateTime(from) AND c <=
    toDateTime(to), in seconds)."""
    start, end = int(FROM.timestamp()), int(TO.timestamp())
    sql = re.sub(r"\$__timeFilter\((\w+)\)", rf"\1 >= toDateTime({start}) AND \1 <= toDateTime({end})", sql)
    sql = sql.replace("$__fromTime", f"toDateTime({start})").replace("$__toTime", f"toDateTime({end})")
    assert "$" not in sql, sql
    return sql


def queries() -> dict[str, str]:
    doc = json.loads(DASHBOARD.read_text())
    found = {p["title"]: t["rawSql"] for p in doc["panels"] for t in p["targets"]}
    found |= {a["name"]: a["target"]["rawSql"] for a in doc["annotations"]["list"]}
    return found


def test_the_provisioning_files_agree_on_the_data_source_and_the_dashboard_keeps_its_uid():
    provider = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "routerscope.yaml").read_text())
    assert provider["providers"][0]["type"] == "file"
    source = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "routerscope-clickhouse.yaml").read_text())
    (ds,) = source["datasources"]
    assert ds["type"] == "grafana-clickhouse-datasource" and ds["jsonData"]["defaultDatabase"] == "routerscope"
    doc = json.loads(DASHBOARD.read_text())
    assert doc["uid"] == "routerscope-oncall"
    used = {t["datasource"]["uid"] for p in doc["panels"] for t in p["targets"]}
    used |= {a["datasource"]["uid"] for a in doc["annotations"]["list"]}
    assert used == {ds["uid"]}
    assert len({p["id"] for p in doc["panels"]}) == len(doc["panels"])


def test_every_panel_query_runs_on_the_warehouse_and_reads_the_stored_window(warehouse):
    # one window: 100 requests, 80 entered the device, 12 fallbacks of them (6 quality, 4 timeout, 2 error),
    # 10 capability rejects, 3 canned answers, L2/L3 share 0.2 and drifting
    group = empty_group()
    group.update(
        requests=100,
        device_entered=80,
        fallback_rate=12 / 80,
        naive_fallback_rate=22 / 100,
        quality_fallback_rate=6 / 80,
        timeout_fallback_rate=4 / 80,
        error_fallback_rate=2 / 80,
        capability_reject_rate=10 / 100,
        l2_l3_share=0.2,
    )
    group["degrade_share"] = {"L0": 0.7, "L1": 0.07, "L2": 0.15, "L3": 0.05, "L4": 0.03}
    group["l2_l3_drift"] = {"delta_pp": 12.0, "z": 3.1, "psi": 0.3, "drifting": True}
    write_window(
        warehouse,
        "5m",
        T0,
        T0 + STEP,
        {"overall": group, "by_task_type": {"intent_classify": group}, "calibration": {}},
    )
    write_alerts(
        warehouse,
        [
            [
                {
                    "alert_key": "device_bypass|",
                    "first_seen": T0,
                    "rule": "device_bypass",
                    "task_type": "",
                    "severity": "page",
                    "action": "",
                    "summary": "Requests bypass the device",
                    "status": "resolved",
                    "last_seen": T0 + STEP,
                    "resolved_at": T0 + 2 * STEP,
                    "trip_values": "{}",
                    "rule_version": "1",
                    "notify_state": "sent",
                }[c]
                for c in ALERT_COLUMNS
            ]
        ],
    )
    parsed, rules = BREAKERS.parse(dumps(breaker(boundary="device", event_time=iso(T0 + timedelta(minutes=1)))))
    assert not rules
    table, columns, build = FACTS[names.TOPIC_BREAKERS]
    warehouse.insert(
        f"routerscope.{table}",
        build([parsed], names.TOPIC_BREAKERS, [0], [0]),
        column_names=list(columns),
        column_oriented=True,
    )

    results = {}
    for title, sql in queries().items():
        result = warehouse.query(expand(sql))
        results[title] = [dict(zip(result.column_names, row)) for row in result.result_rows]
        assert results[title], f"{title}: no rows"
    (first,) = results["Fallback rate over device-entered, beside the naive rate"]
    assert (first["fallback rate (of device-entered)"], first["naive rate (of all requests)"]) == (0.15, 0.22)
    (by_type,) = results["Fallbacks by type (share of device-entered)"]
    assert (by_type["quality"], by_type["timeout"], by_type["error"]) == (6 / 80, 4 / 80, 2 / 80)
    assert results["Canned-answer share (L4)"][0]["L4 canned answer"] == 0.03
    (l2l3,) = results["L2/L3 share and drift"]
    assert (l2l3["L2/L3 share"], l2l3["drifting"]) == (0.2, 1.0)
    assert [r["task_type"] for r in results["Fallback rate per task type"]] == ["intent_classify"]
    assert results["Breaker transitions"][0]["to_state"] == "open"
    assert results["Alerts (firing and resolved in the range)"][0]["rule"] == "device_bypass"
    (note,) = results["routerscope alerts"]
    assert note["text"] == "PAGE device_bypass (overall): Requests bypass the device"
