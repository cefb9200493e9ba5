"""Windows without the daemon: an OTLP-only user runs `routerscope collect` and `routerscope load`, never the
Dagster daemon, and still gets every series of the exporter — the load brings the finished 5-minute metric
windows up to date (docs/otlp.md, "Windows without the daemon")."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest

from routerscope.core import broker
from routerscope.core.procs import free_port
from routerscope.warehouse.analytics.exporter import read_snapshot
from routerscope.warehouse.client import open_warehouse
from tests.support import otlp as otlp_support
from tests.support.home import clean_env, run_cli, settings_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def otlp_home(home):
    mapping = home / "otlp-mapping.yaml"
    mapping.write_text("device:\n  server_addresses: ['127.0.0.1:8081']\n")
    settings = settings_for(home, ROUTERSCOPE_OTLP_MAPPING=str(mapping))
    broker.start(settings, port=free_port())
    yield home, settings, mapping
    broker.stop(settings)


def test_collect_and_load_alone_give_the_exporter_every_series(otlp_home, monkeypatch):
    """Three traces of an app (a device call that fails, the cloud serving: an error fallback each), made 12
    minutes ago, collected and loaded: the load computes the windows they fall in and every finished window
    since, so the exporter serves 3 decisions, 3 device-entered, 3 error fallbacks, and a latest window that
    ended at the last 5-minute boundary (fresh: no `routerscope_windows_stale`). Before, it served no
    decisions, no fallbacks and no window."""
    home, settings, mapping = otlp_home
    then = time.time_ns() - 12 * 60 * 10**9
    monkeypatch.setattr(otlp_support.time, "time_ns", lambda: then)
    spans = [s for i in range(3) for s in otlp_support.finished_spans(otlp_support.fallback_trace, session=f"s{i}")]
    with otlp_support.running_receiver(settings) as receiver:
        assert otlp_support.export(spans, receiver.port).name == "SUCCESS"

    def finished_since_then() -> int:  # the windows from the traces' own to the last that has ended
        return int((time.time() // 300) - (then / 1e9 // 300))

    before = finished_since_then()
    done = run_cli(
        "load", "--json", "--idle-timeout", "0.5", env=clean_env(home, ROUTERSCOPE_OTLP_MAPPING=str(mapping))
    )
    after = finished_since_then()
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["loaded"]["decisions"] == 3
    # the window of the traces and each one after it that has ended (2 or 3 for 12 minutes, by the clock's phase)
    assert before <= summary["windows_5m"] <= after and summary["windows_5m"] >= 2
    now = datetime.now(UTC)
    with open_warehouse(settings, purpose="test", migrated=True) as client:
        snapshot = read_snapshot(client, now)
    total = snapshot.totals["unknown"]
    assert (total["decisions"], total["device_entered"], total["fallbacks_error"]) == (3, 3, 3)
    boundary = datetime.fromtimestamp((now.timestamp() // 300) * 300, UTC)
    # the window that ended last as the load finished (a boundary may have passed since): fresh for the rules
    assert snapshot.latest["5m"]["end"] in (boundary, boundary - timedelta(minutes=5))
    assert now - snapshot.latest["5m"]["end"] < timedelta(minutes=9)
    # a second load with nothing new computes the windows that ended since (none, or the one just ended)
    again = run_cli(
        "load", "--json", "--idle-timeout", "0.5", env=clean_env(home, ROUTERSCOPE_OTLP_MAPPING=str(mapping))
    )
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["windows_5m"] <= 1
    skipped = run_cli(
        "load",
        "--json",
        "--no-windows",
        "--idle-timeout",
        "0.5",
        env=clean_env(home, ROUTERSCOPE_OTLP_MAPPING=str(mapping)),
    )
    assert "windows_5m" not in json.loads(skipped.stdout)


def test_windows_that_cannot_be_computed_are_one_warning_never_the_loads_failure(capsys):
    """The load's rows are stored when the windows are computed: a warehouse gone in between (here a server
    that refuses the connection) is one line on stderr and no window, never a traceback or a failed load."""
    from routerscope.cli.cmd_warehouse import _catch_up_windows
    from routerscope.core.settings import Settings

    settings = Settings.from_env(
        {"ROUTERSCOPE_HOME": "/nonexistent-home", "ROUTERSCOPE_CLICKHOUSE_DSN": "http://127.0.0.1:9/routerscope"}
    )
    assert _catch_up_windows(settings, datetime.now(UTC)) == []
    err = capsys.readouterr().err.strip()
    assert err.startswith("routerscope load: warning: the metric windows were not brought up to date (")
    assert "run `routerscope load` again" in err and len(err.splitlines()) == 1
