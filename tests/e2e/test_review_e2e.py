"""The seeds' ledgers and reports end to end: the SIMULATED fleet through the real router → Kafka (the
session's real broker) → the loader → the embedded warehouse → the metrics' device ledger and all-cloud
saving, and the grading, readiness and rollout reports. The fleet runs on a day of its own (2031-03-01)
so that other tests' events on the shared broker cannot enter the review window."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from routerscope.cli import cmd_report, render
from routerscope.core import names
from routerscope.core.kafka import producer_config
from routerscope.instrumentation.emitter import KafkaEmitter
from routerscope.instrumentation.telemetry import Telemetry
from routerscope.router.request_store import RequestTextStore, store_path
from routerscope.router.sim.fleet import Fleet
from routerscope.warehouse.analytics.metrics import compute
from routerscope.warehouse.client import open_warehouse
from routerscope.warehouse.ingest.loader import load
from tests.support.home import settings_for

pytestmark = pytest.mark.integration

DAY = datetime(2031, 3, 1, tzinfo=UTC)
START, SPAN, REQUESTS = DAY + timedelta(hours=10), timedelta(hours=2), 4000


def test_router_to_kafka_to_loader_to_the_ledger_and_the_reports(broker_settings, home, monkeypatch, capsys):
    settings = settings_for(home, ROUTERSCOPE_KAFKA_BOOTSTRAP=broker_settings.kafka_bootstrap())
    emitter = KafkaEmitter(producer_config(settings), home / "spool", block_when_full=True)
    tel = Telemetry(emitter)
    routed = []

    def on_event(e):
        routed.append(e)
        tel.send(names.TOPIC_DECISIONS, e.session_id, e)

    with RequestTextStore(store_path(home)) as texts:
        fleet = Fleet(
            seed=5,
            start=START,
            span=SPAN,
            texts=texts,
            on_event=on_event,
            on_label=lambda e: tel.send(names.TOPIC_LABELS, e.request_id, e),
        )
        fleet.run(REQUESTS)
    assert emitter.flush(60)
    emitter.close()
    load(settings, idle_timeout_s=0.5)
    from routerscope.cli.demo import store_simulated_reruns

    store_simulated_reruns(settings, fleet.simulated_reruns())  # the replay's determinism groups, SIMULATED

    with open_warehouse(settings) as client:
        stored = client.query(
            "SELECT count() FROM routerscope.decisions FINAL WHERE toDate(event_time) = '2031-03-01'"
        ).result_rows[0][0]
        stages = client.query(
            "SELECT max(n) FROM (SELECT session_id, uniqExact(rollout_stage) AS n FROM routerscope.decisions "
            "WHERE task_type = 'slot_extract' AND toDate(event_time) = '2031-03-01' GROUP BY session_id)"
        ).result_rows
        metrics = compute(client, START, START + SPAN)
    assert stored == REQUESTS
    assert stages[0][0] == 1  # a session stays in or out of slot_extract's canary: sticky, never per request

    # §10: every tier in the ledger; the low tier swaps, so its p5 decode rate collapses against the high tier's
    ledger = metrics["device_ledger"]
    assert set(ledger) == {"high", "mid", "low"}
    assert ledger["low"]["decode_tps"]["p5"] < 0.5 * ledger["high"]["decode_tps"]["p5"]
    assert all(0 < t["throttled_share"] < 0.5 for t in ledger.values())  # the thermal episode: a fifth of the span
    assert ledger["low"]["cold_start_share"] > ledger["high"]["cold_start_share"] and ledger["low"]["load_ms_p95"] > 0
    # §11: the device path saves part of the all-cloud bill; the router's own per-event counterfactual adds up
    cost = metrics["overall"]["cost_usd"]
    # (over the window the metrics read: requests overlap, so the last ones may end just past the span)
    in_span = [e for e in routed if e.mode == "live" and e.event_time < START + SPAN]
    assert cost["all_cloud"] == pytest.approx(sum(e.all_cloud_cost_usd for e in in_span))
    assert 0 < cost["saved_share"] < 1

    end = DAY + timedelta(days=1)
    grading = cmd_report.build("grading", settings, days=1, end=end)["task_types"]
    assert (grading["tool_call"]["tier"], grading["tool_call"]["reason"]) == ("keep-cloud", "error_cost_veto")
    # classification agrees with itself on re-runs and is short and frequent: offload; free text is less determined
    assert grading["intent_classify"]["tier"] == "offload" and grading["intent_classify"]["determinism_groups"] == 20
    assert grading["short_reply"]["determinism"] < grading["intent_classify"]["determinism"]
    ready = cmd_report.build("readiness", settings, days=1, end=end)
    assert set(ready["task_types"]["intent_classify"]["gates"]) == {"gate_memory", "gate_duration", "gate_quality"}
    assert ready["beside_grading"]["tool_call"]["grading_reason"] == "error_cost_veto"
    rollout = cmd_report.build("rollout", settings, days=1, end=end)
    slot, code = rollout["task_types"]["slot_extract"], rollout["task_types"]["code_snippet"]
    assert (slot["stage"], slot["percent"]) == ("canary", 50.0)
    assert [c["condition"] for c in slot["conditions"]][:3] == [
        "fallback rate",
        "false fallback rate (estimate)",  # judged on §3c's estimate, the labeled share beside it
        "offload failure rate",
    ]
    assert code["stage"] == "shadow" and any(c["condition"].startswith("agreement") for c in code["conditions"])
    assert rollout["divergence_samples"]["code_snippet"]["shadow"] > 0  # disagreements kept beside the texts
    text = render.review("rollout", rollout)
    assert "slot_extract" in text and "canary 50% of sessions" in text

    # the command, in process: the documented JSON, and one-line errors for hostile input
    from routerscope.cli import main

    monkeypatch.setenv("ROUTERSCOPE_HOME", str(home))
    monkeypatch.setenv("ROUTERSCOPE_KAFKA_BOOTSTRAP", broker_settings.kafka_bootstrap())
    capsys.readouterr()
    assert main(["report", "grading", "--json", "--days", "1", "--end", "2031-03-02T00:00:00Z"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["task_types"]["tool_call"]["reason"] == "error_cost_veto"
    assert main(["report", "readiness", "--end", "not a time"]) == 2
    assert capsys.readouterr().err.startswith("routerscope: error: --end 'not a time' is not an ISO 8601 time")
    assert main(["report", "rollout", "--days", "99999"]) == 2
