"""Data-quality suites (Great Expectations) on a real embedded warehouse: a clean window passes every
check; each fixture below breaks exactly one check (rows written straight into the tables, as a
loader bug would) and fails exactly it, with its unexpected count."""

from __future__ import annotations

import json
from datetime import timedelta

import dagster as dg
import pytest

from routerscope.contract.validation import BREAKERS, DECISION_INVARIANTS, DECISIONS, LABELS
from routerscope.core import names
from routerscope.pipelines.metrics import metrics_daily
from routerscope.pipelines.quality import data_quality
from routerscope.pipelines.resources import RouterscopeResource
from routerscope.warehouse.analytics import quality
from routerscope.warehouse.client import open_warehouse
from routerscope.warehouse.ingest.rows import FACTS, ledger_columns
from routerscope.warehouse.migrate import migrate
from routerscope.warehouse.queries import decision_copies
from routerscope.warehouse.schema import LEDGER_COLUMNS
from routerscope.warehouse.sql import QueryWindow
from tests.support.events import breaker, capability_miss, decision, dumps, iso, label, quality_fallback
from tests.support.golden_day import A1, A2, DECISION_EVENTS, END, LABEL_EVENTS, START, at, eid, insert
from tests.support.home import clean_env, copy_warehouse, run_cli, settings_for

pytestmark = pytest.mark.integration

WINDOW = QueryWindow(START, END)
NOW = END + timedelta(seconds=60)  # the newest fixture event is at END: one minute old
CLEAN_BREAKERS = [
    breaker(event_id=eid(500), event_time=at(3)),
    breaker(event_id=eid(501), event_time=at(4), from_state="open", to_state="half_open"),
]


def raw_rows(client, topic: str, events: list[dict], partition: int = 1, first_offset: int = 0, **overrides) -> None:
    """Write rows as a buggy loader would: built from (valid) events, then overridden column by column."""
    contract = {names.TOPIC_DECISIONS: DECISIONS, names.TOPIC_LABELS: LABELS, names.TOPIC_BREAKERS: BREAKERS}[topic]
    table, columns, build = FACTS[topic]
    parsed = [contract.parse(dumps(e))[0] for e in events]
    assert all(parsed), "the base events must be valid; the overrides break them"
    offsets = list(range(first_offset, first_offset + len(parsed)))
    data = build(parsed, topic, [partition] * len(parsed), offsets)
    by_name = dict(zip(columns, data))
    for column, value in overrides.items():
        by_name[column] = [value] * len(parsed)
    client.insert(
        f"routerscope.{table}", [by_name[c] for c in columns], column_names=list(columns), column_oriented=True
    )
    ids = by_name[columns[0]]  # event_id / label_id, possibly overridden
    ledger = ledger_columns(parsed, topic, [partition] * len(parsed), offsets)
    ledger[-2] = ids
    client.insert("routerscope.loaded_messages", ledger, column_names=list(LEDGER_COLUMNS), column_oriented=True)


def clean(client) -> None:
    insert(client, DECISION_EVENTS, LABEL_EVENTS)
    raw_rows(client, names.TOPIC_BREAKERS, CLEAN_BREAKERS, partition=0)


@pytest.fixture
def warehouse(home, warehouse_template):
    """A copy of the clean window's warehouse (migrated and filled once per run)."""
    with open_warehouse(copy_warehouse(warehouse_template("quality-clean", clean), home)) as client:
        yield client


def D(**fields):  # a valid live decision in the window, on Kafka partition 1
    return decision(event_id=eid(900), request_id="bad", session_id="bad", event_time=at(12), **fields)


def dec(client, event=None, **overrides):
    raw_rows(client, names.TOPIC_DECISIONS, [event or D()], **overrides)


# A transition of a breaker of its own (its first: nothing to chain to), for the column-by-column breaks.
OWN_BREAKER = breaker(event_time=at(5), instance_id="router-x")

# (check that must fail, how to break it, its unexpected count). Each breaks exactly that check.
CASES = [
    ("decisions.required.request_id", lambda c: dec(c, request_id=""), 1),
    ("decisions.required.session_id", lambda c: dec(c, session_id=""), 1),
    ("decisions.required.task_type", lambda c: dec(c, task_type=""), 1),
    ("decisions.required.policy_version", lambda c: dec(c, policy_version=""), 1),
    ("decisions.domain.mode", lambda c: dec(c, mode="canary"), 1),
    ("decisions.domain.fallback_type", lambda c: dec(c, fallback_type="sideways"), 1),
    ("decisions.domain.reason", lambda c: dec(c, reason="bored"), 1),
    ("decisions.domain.network", lambda c: dec(c, network="carrier_pigeon"), 1),
    ("decisions.domain.confidence_source", lambda c: dec(c, confidence_source="vibes"), 1),
    # contract v2: the device ledger's thermal state, the rollout stage, the measured values and the counterfactual
    ("decisions.domain.device_thermal_state", lambda c: dec(c, device_thermal_state="toasty"), 1),
    ("decisions.domain.rollout_stage", lambda c: dec(c, rollout_stage="beta"), 1),
    ("decisions.range.device_peak_mem_mb", lambda c: dec(c, device_peak_mem_mb=-1.0), 1),
    ("decisions.range.device_decode_tps", lambda c: dec(c, device_decode_tps=-3.0), 1),
    ("decisions.range.device_prefill_tps", lambda c: dec(c, device_prefill_tps=-3.0), 1),
    ("decisions.range.device_load_ms", lambda c: dec(c, device_load_ms=-10.0), 1),
    ("decisions.range.all_cloud_cost_usd", lambda c: dec(c, all_cloud_cost_usd=-0.01), 1),
    # level 7 on a validator fallback whose last attempt is 7: only the range is wrong
    (
        "decisions.range.degrade_level",
        lambda c: dec(
            c,
            D(
                fallback_type="quality",
                reason="validator_failed",
                degrade_level=2,
                attempts=[
                    {"level": 0, "outcome": "validator_failed", "latency_ms": 1.0},
                    {"level": 2, "outcome": "ok", "latency_ms": 1.0},
                ],
                cloud_calls=1,
            ),
            degrade_level=7,
            attempt_levels=[0, 7],
        ),
        1,
    ),
    ("decisions.range.confidence", lambda c: dec(c, confidence=1.5), 1),
    ("decisions.range.threshold", lambda c: dec(c, threshold=-0.1), 1),
    ("decisions.range.latency_ms", lambda c: dec(c, latency_ms=-5.0), 1),
    ("decisions.range.deadline_ms", lambda c: dec(c, deadline_ms=0), 1),
    # a different event (other task type and time) reusing A2's id: both rows are non-unique
    ("decisions.unique.event_id", lambda c: dec(c, event_id=A2["event_id"]), 2),
    ("decisions.schema_versions", lambda c: dec(c, schema_version=3), 1),
    # A1 again with other contents under the same id, task type and time: FINAL would keep one silently
    # (A1 itself is in the clean data twice, byte for byte: a re-delivery, which is fine)
    ("decisions.unique.event_content", lambda c: dec(c, {**A1, "latency_ms": 999.0}), 1),
    # the same id on two days (issue: counted twice in metrics, flagged on neither day): the copy dated
    # three days before the window makes the window's row fail the look-back over the 7-day horizon
    (
        "decisions.unique.event_id_in_horizon",
        lambda c: (
            dec(c, decision(event_id=eid(901), request_id="twice", event_time=at(12 - 72))),
            dec(c, decision(event_id=eid(901), request_id="twice", event_time=at(12)), first_offset=1),
        ),
        1,
    ),
    # the same, the pairs derived as a load's end does (the check then reads the pairs, not the 7 days)
    (
        "decisions.unique.event_id_in_horizon",
        lambda c: (
            dec(c, decision(event_id=eid(901), request_id="twice", event_time=at(12 - 72))),
            dec(c, decision(event_id=eid(901), request_id="twice", event_time=at(12)), first_offset=1),
            decision_copies.derive(c),
        ),
        1,
    ),
    (
        "decisions.invariant.capability_iff_capability_miss",
        lambda c: dec(c, capability_miss(event_id=eid(900), event_time=at(12)), reason="default"),
        1,
    ),
    (
        "decisions.invariant.capability_not_entered",
        lambda c: dec(
            c, capability_miss(event_id=eid(900), event_time=at(12)), entered_device=True, attempt_levels=[0, 2]
        ),
        1,
    ),
    (
        "decisions.invariant.device_fallback_entered_device",
        lambda c: dec(
            c, quality_fallback(event_id=eid(900), event_time=at(12)), entered_device=False, attempt_levels=[2]
        ),
        1,
    ),
    (
        "decisions.invariant.device_fallback_level_at_least_2",
        lambda c: dec(
            c, quality_fallback(event_id=eid(900), event_time=at(12)), degrade_level=1, attempt_levels=[0, 1]
        ),
        1,
    ),
    (
        "decisions.invariant.served_on_device_level",
        lambda c: dec(
            c, quality_fallback(event_id=eid(900), event_time=at(12)), fallback_type="none", reason="default"
        ),
        1,
    ),
    (
        "decisions.invariant.not_entered_no_device_attempt",
        lambda c: dec(c, capability_miss(event_id=eid(900), event_time=at(12)), attempt_levels=[0, 2]),
        1,
    ),
    (
        "decisions.invariant.entered_first_attempt_on_device",
        lambda c: dec(c, quality_fallback(event_id=eid(900), event_time=at(12)), attempt_levels=[2, 2], cloud_calls=2),
        1,
    ),
    (
        "decisions.invariant.attempt_levels_non_decreasing",
        lambda c: dec(
            c, quality_fallback(event_id=eid(900), event_time=at(12)), attempt_levels=[0, 3, 2], cloud_calls=2
        ),
        1,
    ),
    (
        "decisions.invariant.level_1_at_most_once",
        lambda c: dec(
            c, D(degrade_level=1, attempts=[{"level": 1, "outcome": "ok", "latency_ms": 1.0}]), attempt_levels=[1, 1]
        ),
        1,
    ),
    (
        "decisions.invariant.last_attempt_is_degrade_level",
        lambda c: dec(c, quality_fallback(event_id=eid(900), event_time=at(12)), degrade_level=3),
        1,
    ),
    (
        "decisions.invariant.cloud_calls_cover_cloud_attempts",
        lambda c: dec(c, quality_fallback(event_id=eid(900), event_time=at(12)), cloud_calls=0),
        1,
    ),
    ("decisions.invariant.pii_pin_has_pii", lambda c: dec(c, D(reason="pii_pin", has_pii=True), has_pii=False), 1),
    (
        "decisions.invariant.pii_pin_no_cloud_calls",
        lambda c: dec(c, D(reason="pii_pin", has_pii=True), cloud_calls=1),
        1,
    ),
    (
        "decisions.invariant.low_confidence_below_threshold",
        lambda c: dec(c, quality_fallback(event_id=eid(900), event_time=at(12)), confidence=0.9),
        1,
    ),
    (
        "labels.required.request_id",
        lambda c: raw_rows(c, names.TOPIC_LABELS, [label(event_time=at(5))], request_id=""),
        1,
    ),
    (
        "labels.domain.source",
        lambda c: raw_rows(c, names.TOPIC_LABELS, [label(event_time=at(5))], source="gut_feeling"),
        1,
    ),
    (
        "labels.unique.label_id",
        lambda c: raw_rows(
            c, names.TOPIC_LABELS, [label(event_time=at(5), request_id="zz")], label_id=LABEL_EVENTS[0]["label_id"]
        ),
        2,
    ),
    (
        "labels.schema_versions",
        lambda c: raw_rows(c, names.TOPIC_LABELS, [label(event_time=at(5))], schema_version=3),
        1,
    ),
    (
        "breakers.domain.boundary",
        lambda c: raw_rows(c, names.TOPIC_BREAKERS, [OWN_BREAKER], boundary="network"),
        1,
    ),
    (
        "breakers.domain.from_state",
        lambda c: raw_rows(c, names.TOPIC_BREAKERS, [OWN_BREAKER], from_state="melted"),
        1,
    ),
    (
        "breakers.domain.to_state",
        lambda c: raw_rows(c, names.TOPIC_BREAKERS, [OWN_BREAKER], to_state="melted"),
        1,
    ),
    (
        "breakers.range.failure_rate",
        lambda c: raw_rows(c, names.TOPIC_BREAKERS, [OWN_BREAKER], failure_rate=1.5),
        1,
    ),
    (
        "breakers.invariant.breaker_state_changes",
        lambda c: raw_rows(c, names.TOPIC_BREAKERS, [OWN_BREAKER], to_state="closed"),
        1,
    ),
    # router-a's cloud breaker went closed → open → half_open (CLEAN_BREAKERS); a transition from closed
    # does not start where it stood
    (
        "breakers.invariant.breaker_transitions_chain",
        lambda c: raw_rows(c, names.TOPIC_BREAKERS, [breaker(event_time=at(5))]),
        1,
    ),
    ("pipeline.known_task_types", lambda c: dec(c, D(task_type="mystery_task")), 1),
    (
        "breakers.unique.event_id",
        lambda c: raw_rows(
            c,
            names.TOPIC_BREAKERS,
            [breaker(event_time=at(6), instance_id="router-b")],
            event_id=CLEAN_BREAKERS[0]["event_id"],
        ),
        2,
    ),
    # a loaded row of the window deleted: partition 0 misses one offset between its first and last
    (
        "pipeline.offsets.no_gaps",
        lambda c: c.command(
            "DELETE FROM routerscope.decisions WHERE event_id = {id:UUID}", parameters={"id": A2["event_id"]}
        ),
        1,
    ),
    # one quarantined message among the window's 8 → 1/9 > 1 %
    (
        "pipeline.quarantine_share",
        lambda c: c.insert(
            "routerscope.quarantine",
            [[names.TOPIC_DECISIONS, 0, 3, "not json", ["json.invalid"], "broke json.invalid"]],
            column_names=["kafka_topic", "kafka_partition", "kafka_offset", "raw", "rules", "error"],
        ),
        1,
    ),
    # an event dated 2100 (allowed by the contract): counted, and ignored by freshness
    (
        "pipeline.future_events",
        lambda c: raw_rows(
            c,
            names.TOPIC_DECISIONS,
            [decision(event_id=eid(3000), request_id="future", event_time="2100-01-01T00:00:00Z")],
            partition=2,
        ),
        1,
    ),
    # 30 requests the same day a week earlier vs 8 now → ratio 0.27 < 0.5
    (
        "pipeline.volume",
        lambda c: raw_rows(
            c,
            names.TOPIC_DECISIONS,
            [
                decision(
                    event_id=eid(1000 + i),
                    request_id=f"w{i}",
                    event_time=iso(START - timedelta(days=7) + timedelta(hours=1)),
                )
                for i in range(30)
            ],
            partition=2,
        ),
        1,
    ),
    # 200 more judged fallbacks, unlabeled → coverage 2/202 < 1 %
    (
        "pipeline.label_coverage",
        lambda c: raw_rows(
            c,
            names.TOPIC_DECISIONS,
            [quality_fallback(event_id=eid(2000 + i), request_id=f"u{i}", event_time=at(13)) for i in range(200)],
            partition=2,
        ),
        1,
    ),
]


def failures(report) -> dict[str, int]:
    return {r.check: r.unexpected_count for r in report.results if not r.success}


@pytest.mark.slow
def test_a_clean_window_passes_every_check(warehouse, home):
    report = quality.run_suites(warehouse, WINDOW, home=home, now=NOW)
    assert failures(report) == {}
    assert {r.check for r in report.results} == {c.name for c in quality.CHECKS}
    assert (home / "gx" / "data_docs" / "index.html").exists()


@pytest.mark.slow
@pytest.mark.parametrize("check, breaking, unexpected", CASES, ids=[c[0] for c in CASES])
def test_each_fixture_breaks_exactly_its_check(warehouse, check, breaking, unexpected):
    breaking(warehouse)
    report = quality.run_suites(warehouse, WINDOW, now=NOW)
    assert failures(report) == {check: unexpected}


def test_every_check_has_a_breaking_fixture():
    covered = {c[0] for c in CASES} | {"pipeline.freshness"} | PAIRED
    assert covered == {c.name for c in quality.CHECKS}


# pii_pin_no_cloud_attempt cannot break alone: a cloud attempt needs a cloud call (or it breaks
# cloud_calls_cover_cloud_attempts), and a cloud call under a PII pin breaks pii_pin_no_cloud_calls.
PAIRED = {"decisions.invariant.pii_pin_no_cloud_attempt"}


def test_a_pii_pinned_cloud_attempt_fails_its_two_checks(warehouse):
    dec(
        warehouse,
        D(reason="pii_pin", has_pii=True),
        fallback_type="quality",
        attempt_levels=[0, 2],
        degrade_level=2,
        cloud_calls=1,
    )
    report = quality.run_suites(warehouse, WINDOW, now=NOW)
    assert failures(report) == {
        "decisions.invariant.pii_pin_no_cloud_attempt": 1,
        "decisions.invariant.pii_pin_no_cloud_calls": 1,
    }


def test_breaker_transitions_chain_by_their_seq_not_their_time(warehouse):
    """The router numbers each breaker's transitions (seq); a router clock that stepped back between two of
    them does not break the chain, a lost transition (a gap in seq) does."""
    chain = [
        breaker(instance_id="router-s", seq=1, from_state="closed", to_state="open", event_time=at(5)),
        breaker(instance_id="router-s", seq=2, from_state="open", to_state="half_open", event_time=at(4.5)),
        breaker(instance_id="router-s", seq=3, from_state="half_open", to_state="closed", event_time=at(6)),
    ]
    raw_rows(warehouse, names.TOPIC_BREAKERS, chain, partition=3)
    assert failures(quality.run_suites(warehouse, WINDOW, now=NOW)) == {}
    # seq 5 after 3: the transition numbered 4 never arrived (its states even match: closed → open)
    lost = breaker(instance_id="router-s", seq=5, from_state="closed", to_state="open", event_time=at(7))
    raw_rows(warehouse, names.TOPIC_BREAKERS, [lost], partition=3, first_offset=3)
    report = quality.run_suites(warehouse, WINDOW, now=NOW)
    assert failures(report) == {"breakers.invariant.breaker_transitions_chain": 1}
    assert [r.sample_ids for r in report.results if not r.success] == [[lost["event_id"]]]


def test_unknown_task_types_are_loaded_and_listed_by_a_warning(warehouse):
    """Decisions of a task type the policy does not know are real traffic: loaded, counted, and named by a
    non-blocking check (the data-quality page lists the names)."""
    dec(warehouse, D(task_type="mystery_task"))
    raw_rows(
        warehouse,
        names.TOPIC_DECISIONS,
        [
            decision(event_id=eid(901 + i), request_id=f"odd{i}", event_time=at(12), task_type=t)
            for i, t in enumerate("bbc")
        ],
        first_offset=1,
    )
    report = quality.run_suites(warehouse, WINDOW, now=NOW)
    (result,) = [r for r in report.results if not r.success]
    assert (result.check, result.blocking, result.unexpected_count) == ("pipeline.known_task_types", False, 4)
    assert sorted(json.loads(result.observed)) == ["b", "c", "mystery_task"]  # each unknown name once
    assert report.blocking_failures == []
    configured = quality.run_suites(warehouse, WINDOW, now=NOW, thresholds=quality.Thresholds(known_task_types=("x",)))
    assert {r.check for r in configured.results if not r.success} == {"pipeline.known_task_types"}


def test_freshness_applies_to_the_current_window_only(warehouse):
    stale = quality.run_suites(warehouse, WINDOW, now=END + timedelta(hours=2))
    assert failures(stale) == {"pipeline.freshness": 1}
    assert not [r for r in stale.results if r.check == "pipeline.freshness"][0].blocking
    history = quality.run_suites(warehouse, WINDOW, now=END + timedelta(days=5))
    assert failures(history) == {}


def test_a_far_future_event_neither_hides_stale_ingest_nor_moves_the_dq_day(warehouse):
    """Issue item 8: one event dated 2100 made the newest event look fresh for ever and made `dq`
    check 2100; one dated 2299 (the column's last year) overflowed the day after it."""
    for i, when in enumerate(("2100-01-01T00:00:00Z", "2299-12-31T23:00:00Z")):
        raw_rows(
            warehouse,
            names.TOPIC_DECISIONS,
            [decision(event_id=eid(3100 + i), request_id=f"f{i}", event_time=when)],
            partition=2,
            first_offset=i,
        )
    stale = quality.run_suites(warehouse, WINDOW, now=END + timedelta(hours=2))
    assert failures(stale) == {"pipeline.freshness": 1, "pipeline.future_events": 1}
    from routerscope.warehouse.analytics.alerting import pipeline_signal

    # the alert's view
    assert pipeline_signal(warehouse, "pipeline.freshness_lag_s", END + timedelta(hours=2)) == 2 * 3600
    # the newest event that is not from the future is A_AT_END, at END exactly
    assert quality.latest_window(warehouse, now=END + timedelta(hours=2)) == QueryWindow(END, END + timedelta(days=1))
    # a clock a few minutes behind the device's is not "the future" (5-minute allowance)
    raw_rows(
        warehouse,
        names.TOPIC_DECISIONS,
        [decision(event_id=eid(3200), request_id="skew", event_time=iso(NOW + timedelta(minutes=4)))],
        partition=2,
        first_offset=5,
    )
    assert failures(quality.run_suites(warehouse, WINDOW, now=NOW)) == {"pipeline.future_events": 1}


def test_samples_name_the_offending_events(warehouse):
    dec(warehouse, mode="canary")
    report = quality.run_suites(warehouse, WINDOW, now=NOW)
    (bad,) = [r for r in report.results if not r.success]
    assert bad.sample_ids == [eid(900)]


def test_sql_invariants_mirror_the_contract():
    assert list(quality.INVARIANT_SQL) == [inv.name for inv in DECISION_INVARIANTS]


@pytest.mark.slow
def test_a_blocking_failure_stops_the_days_metrics(home):
    settings = settings_for(home)
    with open_warehouse(settings) as client:
        migrate(client)
        clean(client)
        dec(client, fallback_type="sideways")
    resources = {"routerscope": RouterscopeResource(home=str(home))}
    result = dg.materialize(
        [data_quality, metrics_daily],
        partition_key="2026-11-29",
        resources=resources,
        instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
    )
    assert not result.success
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks["decisions_contract"] is False and checks["labels_contract"] is True
    materialized = {e.asset_key.path[-1] for e in result.get_asset_materialization_events()}
    assert "metrics_daily" not in materialized
    with open_warehouse(settings) as client:
        assert client.query("SELECT count() FROM routerscope.metric_windows").result_rows[0][0] == 0
        stored = client.query(
            "SELECT check_name FROM routerscope.dq_results WHERE NOT success AND blocking"
        ).result_rows
    assert stored == [("decisions.domain.fallback_type",)]


@pytest.mark.slow
def test_a_clean_day_lets_the_metrics_through(home):
    settings = settings_for(home)
    with open_warehouse(settings) as client:
        migrate(client)
        clean(client)
    resources = {"routerscope": RouterscopeResource(home=str(home))}
    result = dg.materialize(
        [data_quality, metrics_daily],
        partition_key="2026-11-29",
        resources=resources,
        instance=dg.DagsterInstance.ephemeral(),
    )
    assert result.success
    assert {e.asset_key.path[-1] for e in result.get_asset_materialization_events()} == {
        "data_quality",
        "metrics_daily",
    }


@pytest.mark.slow
def test_dq_command_exit_code_and_json(home):
    settings = settings_for(home)
    with open_warehouse(settings) as client:
        migrate(client)
        clean(client)
    ok = run_cli("dq", "--json", env=clean_env(home), timeout=180)
    assert ok.returncode == 0, ok.stderr
    report = json.loads(ok.stdout)
    assert report["window"] == {
        "start": "2026-11-30T00:00:00Z",
        "end": "2026-12-01T00:00:00Z",
    }  # the newest event's day
    with open_warehouse(settings) as client:
        dec(client, decision(event_id=eid(900), request_id="bad", event_time=at(20)), mode="canary")
    bad = run_cli("dq", "--day", "2026-11-29", env=clean_env(home), timeout=180)
    assert bad.returncode == 1
    assert "FAIL decisions.domain.mode  1 unexpected" in bad.stdout
    # the Data quality page's words (issue 39 §8: the page said "Failed 1" where this said "1 warnings")
    assert "1 blocking failure (metrics for this window are held back), " in bad.stdout, bad.stdout
