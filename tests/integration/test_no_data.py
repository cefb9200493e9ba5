"""No all-green on no data: a data-quality run over an empty window says it checked nothing (and `dq` exits
with its own code), and a pipeline that never received an event goes stale like one that stopped."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from routerscope.warehouse.analytics import alerting
from routerscope.warehouse.client import open_warehouse
from routerscope.warehouse.schema_migrations import created_at
from tests.support.home import clean_env, run_cli, settings_for

pytestmark = pytest.mark.integration


@pytest.fixture
def empty(home):
    """Settings of a migrated warehouse that holds no data."""
    with open_warehouse(settings_for(home), purpose="test", migrated=True):
        return settings_for(home)


@pytest.mark.slow
def test_dq_on_an_empty_warehouse_says_skipped_and_exits_4(empty, home):
    done = run_cli("dq", env=clean_env(home), timeout=300)
    assert done.returncode == 4, done.stderr
    lines = [line.strip() for line in done.stdout.splitlines() if line.startswith("  ")]
    # never "ok" for a rule that saw nothing; only the count of future-dated events (zero) was really checked
    assert len(lines) > 50 and {line.split()[1] for line in lines if not line.startswith("skip ")} == {
        "pipeline.future_events"
    }, lines
    assert "nothing was checked: no events in this window" in done.stderr
    assert "routerscope load" in done.stderr  # what to do next
    as_json = run_cli("dq", "--json", env=clean_env(home), timeout=300)
    report = json.loads(as_json.stdout)
    assert as_json.returncode == 4 and report["checked_nothing"] is True
    assert len(report["skipped"]) == len(report["results"]) - 1 and report["blocking_failures"] == []


def test_a_pipeline_that_never_received_an_event_goes_stale_after_the_freshness_limit(empty):
    """ingest_stale (600 s): nothing arrived since the warehouse was created; quiet before the limit, firing
    after it, and never for a time before the warehouse existed."""
    with open_warehouse(empty) as client:
        born = created_at(client)
        assert born is not None
        stale = lambda seconds: {a.rule for a in alerting.run(client, now=born + timedelta(seconds=seconds)).firing}  # noqa: E731
        assert "ingest_stale" not in stale(-3600)  # replaying a time before the pipeline existed
        assert "ingest_stale" not in stale(599)
        assert "ingest_stale" in stale(601)


@pytest.mark.slow
def test_the_quality_page_warns_when_every_check_was_skipped(empty, home, monkeypatch):
    from routerscope.dashboards import data
    from tests.support.pages import run_page

    assert run_cli("dq", env=clean_env(home), timeout=300).returncode == 4  # stores a run of skipped checks
    monkeypatch.setenv("ROUTERSCOPE_HOME", str(home))
    data.clear_caches()
    app = run_page("quality.py")
    assert not app.exception
    metrics = {m.label: m.value for m in app.metric}
    assert int(metrics["Skipped (no rows)"]) == int(metrics["Checks"]) - 1 > 50  # future_events: zero, checked
    assert any("not an all-clear" in w.value for w in app.warning)
