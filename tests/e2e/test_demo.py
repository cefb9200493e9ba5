"""The main job end to end with a small simulated fleet: broker, real router, Kafka, the loader,
metric windows with alerts, the daily data-quality suites and metrics."""

from __future__ import annotations

from datetime import timedelta

import pytest

from routerscope import broker
from routerscope.demo import run
from tests.conftest import clean_env, free_port, run_cli, settings_for
from warehouse.client import open_warehouse
from warehouse.metrics import compute

pytestmark = pytest.mark.integration


def test_demo_runs_end_to_end_and_the_incidents_raise_their_alerts(home):
    settings = settings_for(home)
    try:
        # 20k requests over 2 h: ~40 short_reply requests per 5-minute window, above the rules' min_n of 30
        out = run(settings, requests=20_000, seed=11, port=free_port(), span_minutes=120, corrupt=3)
        sim = out["simulated"]
        assert sim["requests"] == 20_000 and sim["delivered"] == sim["emitted"] and sim["dropped"] == 0
        assert out["loaded"]["decisions"] == 20_000  # the 3 corrupted messages are quarantined, not loaded
        fired = " ".join(out["fired"])
        assert "rollback_offload_failure" in fired  # the cloud outage: capability misses end at L4
        assert "fallback_rate_high|short_reply" in fired  # the bad threshold push
        assert all(not q["blocking_failed"] for q in out["quality"].values())
        start = sim["start"]
        with open_warehouse(settings) as client:
            rows = client.query("SELECT rules FROM routerscope.quarantine").result_rows
            thermal = compute(client, start + timedelta(minutes=0.45 * 120), start + timedelta(minutes=0.65 * 120))
            calm = compute(client, start + timedelta(minutes=0.30 * 120), start + timedelta(minutes=0.45 * 120))
            push = compute(client, start + timedelta(minutes=0.75 * 120), start + timedelta(minutes=0.90 * 120))
        assert len(rows) == 3  # the quarantine holds exactly what the simulator corrupted
        # the thermal episode shows as timeout fallbacks; the threshold push as quality fallbacks
        assert thermal["overall"]["timeout_fallback_rate"] > calm["overall"]["timeout_fallback_rate"]
        assert push["by_task_type"]["short_reply"]["quality_fallback_rate"] > 3 * calm["by_task_type"]["short_reply"]["quality_fallback_rate"]
        summary = out["summary"]["overall"]
        assert summary["fallback_rate"] < summary["naive_fallback_rate"]
    finally:
        broker.stop(settings)


def test_demo_command_prints_the_summary(home):
    done = run_cli("demo", "--requests", "800", "--port", str(free_port()), "--no-dashboard", env=clean_env(home), timeout=600)
    try:
        assert done.returncode == 0, done.stderr
        assert "SIMULATED" in done.stdout and "fallback rate" in done.stdout and "alerts raised" in done.stdout
    finally:
        run_cli("broker", "stop", env=clean_env(home))
