"""Data quality of the decision logs: Great Expectations suites over one window of the warehouse.

The owner of the decision logs needs to know, before anyone tunes on them, that the events are
well-formed (contract domains and ranges, required fields), consistent (the cross-field invariants
of DESIGN §2, written again here in SQL on purpose: a second line against a loader bug), complete
(unique event ids, no Kafka offset gaps among loaded and quarantined rows), fresh, of a plausible
volume, rarely quarantined, and labeled.

Each check is one GX expectation on one of a few data frames the warehouse computes for the window
(`FRAMES`). Checks that protect the metrics are **blocking**; the Dagster asset turns a blocking
failure into a failed blocking asset check, which stops the window's metric asset. Results go to
`dq_results`; GX Data Docs are built under `ROUTERSCOPE_HOME/gx/data_docs`.

Great Expectations is imported lazily (it takes seconds); its analytics and progress bars are off.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from instrumentation.contract import DECISION_INVARIANTS
from instrumentation.events import (
    BREAKER_STATES,
    CONFIDENCE_SOURCES,
    FALLBACK_TYPES,
    LABEL_SOURCES,
    NETWORKS,
    REASONS,
    ROLLOUT_STAGES,
    THERMAL_STATES,
)
from instrumentation.events import DECISION_SCHEMA_VERSIONS as DECISION_SCHEMA_VERSIONS_
from routerscope import names
from warehouse.queries.common import QueryWindow, named, utc_text
from warehouse.rows import DECISION_COLUMNS

SCHEMA_VERSIONS = [1]  # labels and breaker events
DECISION_SCHEMA_VERSIONS = list(DECISION_SCHEMA_VERSIONS_)
# An event_time later than now plus this allowance (clock skew between devices and the loader) is
# from the future: freshness and the default data-quality day ignore it, and `pipeline.future_events`
# counts it. Without this, one event dated 2100 would hide stale ingest for good.
FUTURE_ALLOWANCE = timedelta(minutes=5)


@dataclass(frozen=True)
class Thresholds:
    """The configurable limits of the non-contract checks."""

    freshness_lag_s: float = 600.0  # newest event at most 10 minutes old (DESIGN §4)
    quarantine_share: float = 0.01  # at most 1 % of the window's messages quarantined
    volume_low: float = 0.5  # requests within [0.5, 2] × the same window a week earlier
    volume_high: float = 2.0
    label_coverage: float = 0.01  # at least 1 % of judged fallbacks labeled


# The invariants of DESIGN §2 as SQL over a `decisions` row: TRUE when the row respects it. Names
# match `instrumentation.contract.DECISION_INVARIANTS` (a test keeps the two lists equal).
INVARIANT_SQL: dict[str, str] = {
    "capability_iff_capability_miss": "(fallback_type = 'capability') = (reason = 'capability_miss')",
    "capability_not_entered": "NOT (fallback_type = 'capability' AND entered_device)",
    "device_fallback_entered_device": "NOT (fallback_type IN ('quality', 'timeout', 'error') AND NOT entered_device)",
    "device_fallback_level_at_least_2": "NOT (fallback_type IN ('quality', 'timeout', 'error') AND degrade_level < 2)",
    "served_on_device_level": "NOT (fallback_type = 'none' AND entered_device AND degrade_level > 1)",
    "not_entered_no_device_attempt": "entered_device OR NOT arrayExists(l -> l <= 1, attempt_levels)",
    "entered_first_attempt_on_device": "NOT entered_device OR (length(attempt_levels) > 0 AND attempt_levels[1] <= 1)",
    "attempt_levels_non_decreasing": "arraySort(attempt_levels) = attempt_levels",
    "level_1_at_most_once": "countEqual(attempt_levels, 1) <= 1",
    "last_attempt_is_degrade_level": "length(attempt_levels) > 0 AND attempt_levels[-1] = degrade_level",
    "cloud_calls_cover_cloud_attempts": "cloud_calls >= arrayCount(l -> l IN (2, 3), attempt_levels)",
    "pii_pin_has_pii": "reason != 'pii_pin' OR ifNull(has_pii, false)",
    "pii_pin_no_cloud_attempt": "reason != 'pii_pin' OR NOT arrayExists(l -> l IN (2, 3), attempt_levels)",
    "pii_pin_no_cloud_calls": "reason != 'pii_pin' OR cloud_calls = 0",
    "low_confidence_below_threshold": "reason != 'low_confidence' OR ifNull(confidence < threshold, false)",
}

_INVARIANT_COLUMNS = ",\n       ".join(f"toBool({sql}) AS ok_{name}" for name, sql in INVARIANT_SQL.items())
# Everything a decision row says, lineage aside: two rows with one event_id and sorting key but
# different contents are two different events that ReplacingMergeTree would silently fold into one.
_CONTENT = "tuple(" + ", ".join(c for c in DECISION_COLUMNS if not c.startswith("kafka_")) + ")"

DECISIONS_FRAME_SQL = named(
    "dq_decisions",
    f"""
SELECT toString(event_id) AS event_id, event_time, schema_version, request_id, session_id, task_type, mode,
       entered_device, fallback_type, reason, degrade_level, attempt_levels, cloud_calls, confidence,
       confidence_source, threshold, latency_ms, deadline_ms, has_pii, network, policy_version,
       device_thermal_state, rollout_stage, device_peak_mem_mb, device_decode_tps, device_prefill_tps, device_load_ms,
       all_cloud_cost_usd,
       {_INVARIANT_COLUMNS},
       toBool((event_id, task_type, event_time) NOT IN (
           SELECT event_id, task_type, event_time FROM routerscope.decisions
           WHERE event_time >= {{start:DateTime64(3, 'UTC')}} AND event_time < {{end:DateTime64(3, 'UTC')}}
             AND event_id IN (  -- only ids delivered more than once pay for comparing contents
                 SELECT event_id FROM routerscope.decisions
                 WHERE event_time >= {{start:DateTime64(3, 'UTC')}} AND event_time < {{end:DateTime64(3, 'UTC')}}
                 GROUP BY event_id HAVING count() > 1)
           GROUP BY event_id, task_type, event_time HAVING uniqExact({_CONTENT}) > 1)) AS ok_one_content
FROM routerscope.decisions FINAL
WHERE event_time >= {{start:DateTime64(3, 'UTC')}} AND event_time < {{end:DateTime64(3, 'UTC')}}
""",
)

LABELS_FRAME_SQL = named(
    "dq_labels",
    """
SELECT toString(label_id) AS label_id, event_time, schema_version, request_id, source, device_acceptable
FROM routerscope.labels FINAL
WHERE event_time >= {start:DateTime64(3, 'UTC')} AND event_time < {end:DateTime64(3, 'UTC')}
""",
)

BREAKERS_FRAME_SQL = named(
    "dq_breakers",
    """
SELECT toString(event_id) AS event_id, event_time, schema_version, boundary, from_state, to_state, failure_rate,
       toBool(from_state != to_state) AS ok_breaker_state_changes
FROM routerscope.breaker_events FINAL
WHERE event_time >= {start:DateTime64(3, 'UTC')} AND event_time < {end:DateTime64(3, 'UTC')}
""",
)

# Completeness per Kafka partition, from the loader's ledger (`loaded_messages`, which keeps every
# loaded offset with its record's id and event_time): between the first and the last offset of the
# window's messages, every offset is in the ledger or in the quarantine; and every record the
# ledger says was loaded in the window still exists in `decisions`. `missing` counts both holes.
OFFSETS_FRAME_SQL = named(
    "dq_offsets",
    """
WITH ledger AS (
    SELECT kafka_topic, kafka_partition, kafka_offset, record_id FROM routerscope.loaded_messages FINAL
    WHERE kafka_topic = 'router.decisions.v1'
      AND event_time >= {start:DateTime64(3, 'UTC')} AND event_time < {end:DateTime64(3, 'UTC')}
),
span AS (
    SELECT kafka_topic, kafka_partition, min(kafka_offset) AS first, max(kafka_offset) AS last, count() AS loaded,
           countIf(record_id NOT IN (
               SELECT event_id FROM routerscope.decisions
               WHERE event_time >= {start:DateTime64(3, 'UTC')} AND event_time < {end:DateTime64(3, 'UTC')})) AS lost
    FROM ledger
    GROUP BY kafka_topic, kafka_partition
),
accounted AS (
    SELECT s.kafka_topic AS kafka_topic, s.kafka_partition AS kafka_partition, uniqExact(x.kafka_offset) AS present
    FROM span AS s
    INNER JOIN (
        SELECT kafka_topic, kafka_partition, kafka_offset FROM routerscope.loaded_messages
        UNION ALL
        SELECT kafka_topic, kafka_partition, kafka_offset FROM routerscope.quarantine
    ) AS x ON x.kafka_topic = s.kafka_topic AND x.kafka_partition = s.kafka_partition
    WHERE x.kafka_offset BETWEEN s.first AND s.last
    GROUP BY kafka_topic, kafka_partition
)
SELECT s.kafka_topic AS kafka_topic, s.kafka_partition AS kafka_partition, s.first AS first, s.last AS last,
       toInt64(s.last - s.first + 1) AS expected,
       toInt64(ifNull(a.present, 0)) AS present,
       toInt64(s.lost) AS lost,
       expected - present + lost AS missing
FROM span AS s
LEFT JOIN accounted AS a ON a.kafka_topic = s.kafka_topic AND a.kafka_partition = s.kafka_partition
ORDER BY kafka_partition
""",
)

# One row of pipeline figures for the window.
STATS_FRAME_SQL = named(
    "dq_window_stats",
    """
WITH span AS (
    SELECT kafka_topic, kafka_partition, min(kafka_offset) AS first, max(kafka_offset) AS last, count() AS loaded
    FROM routerscope.decisions
    WHERE event_time >= {start:DateTime64(3, 'UTC')} AND event_time < {end:DateTime64(3, 'UTC')}
    GROUP BY kafka_topic, kafka_partition
)
SELECT
    (SELECT count() FROM routerscope.decisions FINAL
     WHERE event_time >= {start:DateTime64(3, 'UTC')} AND event_time < {end:DateTime64(3, 'UTC')}) AS requests,
    (SELECT count() FROM routerscope.decisions FINAL
     WHERE event_time >= {prev_start:DateTime64(3, 'UTC')} AND event_time < {prev_end:DateTime64(3, 'UTC')}) AS requests_week_before,
    (SELECT count() FROM routerscope.quarantine AS q
     WHERE (q.kafka_topic, q.kafka_partition) IN (SELECT kafka_topic, kafka_partition FROM span)
       AND q.kafka_offset >= (SELECT min(first) FROM span) AND q.kafka_offset <= (SELECT max(last) FROM span)) AS quarantined,
    (SELECT max(event_time) FROM routerscope.decisions WHERE event_time <= {horizon:DateTime64(3, 'UTC')}) AS newest_event,
    (SELECT count() FROM routerscope.decisions FINAL WHERE event_time > {horizon:DateTime64(3, 'UTC')}) AS future_events,
    (SELECT countIf(entered_device AND fallback_type IN ('quality', 'timeout') AND mode = 'live')
     FROM routerscope.decisions FINAL
     WHERE event_time >= {start:DateTime64(3, 'UTC')} AND event_time < {end:DateTime64(3, 'UTC')}) AS judged_fallbacks,
    (SELECT countIf(entered_device AND fallback_type IN ('quality', 'timeout') AND mode = 'live'
                    AND request_id IN (SELECT request_id FROM routerscope.labels))
     FROM routerscope.decisions FINAL
     WHERE event_time >= {start:DateTime64(3, 'UTC')} AND event_time < {end:DateTime64(3, 'UTC')}) AS labeled_fallbacks
""",
)


@dataclass(frozen=True)
class Check:
    """One expectation: a stable name, the frame it runs on, and whether a failure blocks metrics."""

    name: str
    frame: str
    blocking: bool
    make: Callable[[Any, Thresholds], Any]  # (gx.expectations module, thresholds) -> Expectation
    doc: str


def _checks() -> list[Check]:
    c: list[Check] = []

    def add(name, frame, blocking, make, doc):
        c.append(Check(name, frame, blocking, make, doc))

    for col in ("request_id", "session_id", "task_type", "policy_version"):
        add(
            f"decisions.required.{col}",
            "decisions",
            True,
            lambda x, t, col=col: x.ExpectColumnValueLengthsToBeBetween(column=col, min_value=1),
            f"{col} is present (not empty)",
        )
    for col, values in (
        ("mode", ["live", "shadow"]),
        ("fallback_type", FALLBACK_TYPES),
        ("reason", REASONS),
        ("network", NETWORKS),
        ("confidence_source", CONFIDENCE_SOURCES),
        ("device_thermal_state", THERMAL_STATES),
        ("rollout_stage", ROLLOUT_STAGES),
    ):
        add(
            f"decisions.domain.{col}",
            "decisions",
            True,
            lambda x, t, col=col, values=values: x.ExpectColumnValuesToBeInSet(column=col, value_set=list(values)),
            f"{col} is one of the contract's values",
        )
    for col, low, high in (
        ("degrade_level", 0, 4),
        ("confidence", 0, 1),
        ("threshold", 0, 1),
        ("latency_ms", 0, None),
        ("deadline_ms", 1, None),
        # contract v2 (seeds 003/004): the device ledger and the all-cloud counterfactual
        ("device_peak_mem_mb", 0, None),
        ("device_decode_tps", 0, None),
        ("device_prefill_tps", 0, None),
        ("device_load_ms", 0, None),
        ("all_cloud_cost_usd", 0, None),
    ):
        add(
            f"decisions.range.{col}",
            "decisions",
            True,
            lambda x, t, col=col, low=low, high=high: x.ExpectColumnValuesToBeBetween(
                column=col, min_value=low, max_value=high
            ),
            f"{col} within the contract's range",
        )
    add(
        "decisions.unique.event_id",
        "decisions",
        True,
        lambda x, t: x.ExpectColumnValuesToBeUnique(column="event_id"),
        "each event_id once after de-duplication (two different events never share an id)",
    )
    add(
        "decisions.unique.event_content",
        "decisions",
        True,
        lambda x, t: x.ExpectColumnValuesToBeInSet(column="ok_one_content", value_set=[True]),
        "no two different events under one event_id (de-duplication would keep one and hide the other)",
    )
    add(
        "decisions.schema_versions",
        "decisions",
        True,
        lambda x, t: x.ExpectColumnValuesToBeInSet(column="schema_version", value_set=DECISION_SCHEMA_VERSIONS),
        "only schema versions this release understands",
    )
    for name in INVARIANT_SQL:
        add(
            f"decisions.invariant.{name}",
            "decisions",
            True,
            lambda x, t, name=name: x.ExpectColumnValuesToBeInSet(column=f"ok_{name}", value_set=[True]),
            f"DESIGN §2 invariant {name}",
        )

    add(
        "labels.required.request_id",
        "labels",
        True,
        lambda x, t: x.ExpectColumnValueLengthsToBeBetween(column="request_id", min_value=1),
        "request_id present",
    )
    add(
        "labels.domain.source",
        "labels",
        True,
        lambda x, t: x.ExpectColumnValuesToBeInSet(column="source", value_set=list(LABEL_SOURCES)),
        "known label source",
    )
    add(
        "labels.unique.label_id",
        "labels",
        True,
        lambda x, t: x.ExpectColumnValuesToBeUnique(column="label_id"),
        "each label_id once",
    )
    add(
        "labels.schema_versions",
        "labels",
        True,
        lambda x, t: x.ExpectColumnValuesToBeInSet(column="schema_version", value_set=SCHEMA_VERSIONS),
        "only known schema versions",
    )

    for col, values in (
        ("boundary", ["device", "cloud"]),
        ("from_state", BREAKER_STATES),
        ("to_state", BREAKER_STATES),
    ):
        add(
            f"breakers.domain.{col}",
            "breakers",
            True,
            lambda x, t, col=col, values=values: x.ExpectColumnValuesToBeInSet(column=col, value_set=list(values)),
            f"{col} is one of the contract's values",
        )
    add(
        "breakers.range.failure_rate",
        "breakers",
        True,
        lambda x, t: x.ExpectColumnValuesToBeBetween(column="failure_rate", min_value=0, max_value=1),
        "a share",
    )
    add(
        "breakers.invariant.breaker_state_changes",
        "breakers",
        True,
        lambda x, t: x.ExpectColumnValuesToBeInSet(column="ok_breaker_state_changes", value_set=[True]),
        "a breaker event is a transition",
    )
    add(
        "breakers.unique.event_id",
        "breakers",
        True,
        lambda x, t: x.ExpectColumnValuesToBeUnique(column="event_id"),
        "each event_id once",
    )

    add(
        "pipeline.offsets.no_gaps",
        "offsets",
        True,
        lambda x, t: x.ExpectColumnValuesToBeBetween(column="missing", max_value=0),
        "per Kafka partition, every offset between the window's first and last is loaded or quarantined",
    )
    add(
        "pipeline.quarantine_share",
        "stats",
        True,
        lambda x, t: x.ExpectColumnValuesToBeBetween(column="quarantine_share", max_value=t.quarantine_share),
        "quarantined share of the window's messages at most the limit",
    )
    add(
        "pipeline.freshness",
        "stats",
        False,
        lambda x, t: x.ExpectColumnValuesToBeBetween(column="freshness_lag_s", max_value=t.freshness_lag_s),
        "the newest event is recent (checked on the current window only)",
    )
    add(
        "pipeline.future_events",
        "stats",
        False,
        lambda x, t: x.ExpectColumnValuesToBeBetween(column="future_events", max_value=0),
        "no event dated later than now plus 5 minutes (ignored by freshness and the default day)",
    )
    add(
        "pipeline.volume",
        "stats",
        False,
        lambda x, t: x.ExpectColumnValuesToBeBetween(
            column="volume_ratio", min_value=t.volume_low, max_value=t.volume_high
        ),
        "requests not far from the same window a week earlier (skipped without one)",
    )
    add(
        "pipeline.label_coverage",
        "stats",
        False,
        lambda x, t: x.ExpectColumnValuesToBeBetween(column="fallback_label_coverage", min_value=t.label_coverage),
        "enough fallbacks labeled to judge false fallbacks",
    )
    return c


CHECKS: tuple[Check, ...] = tuple(_checks())
SAMPLE_IDS = {"decisions": "event_id", "labels": "label_id", "breakers": "event_id", "offsets": "kafka_partition"}


@dataclass
class CheckResult:
    check: str
    suite: str
    blocking: bool
    success: bool
    unexpected_count: int
    element_count: int
    sample_ids: list[str] = field(default_factory=list)
    observed: str = ""


@dataclass
class QualityReport:
    window_start: datetime
    window_end: datetime
    results: list[CheckResult]
    docs_index: str | None = None

    @property
    def blocking_failures(self) -> list[CheckResult]:
        return [r for r in self.results if r.blocking and not r.success]

    def failed(self, suite: str | None = None) -> list[CheckResult]:
        return [r for r in self.results if not r.success and (suite is None or r.suite == suite)]

    def as_dict(self) -> dict[str, Any]:
        return {
            "window": {"start": _iso(self.window_start), "end": _iso(self.window_end)},
            "success": not self.blocking_failures,
            "blocking_failures": [r.check for r in self.blocking_failures],
            "results": [asdict(r) for r in self.results],
            "data_docs": self.docs_index,
        }


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def frames(client, window: QueryWindow, now: datetime | None = None):
    """The data frames the checks run on, for one window."""
    import pandas as pd

    parameters = window.parameters()
    span = window.end - window.start
    prev = QueryWindow(window.start - timedelta(days=7), window.end - timedelta(days=7))
    out = {
        "decisions": client.query_df(DECISIONS_FRAME_SQL, parameters=parameters),
        "labels": client.query_df(LABELS_FRAME_SQL, parameters=parameters),
        "breakers": client.query_df(BREAKERS_FRAME_SQL, parameters=parameters),
        "offsets": client.query_df(OFFSETS_FRAME_SQL, parameters=parameters),
    }
    now = now or datetime.now(UTC)
    stats = client.query(
        STATS_FRAME_SQL,
        parameters={
            **parameters,
            "prev_start": prev.parameters()["start"],
            "prev_end": prev.parameters()["end"],
            "horizon": utc_text(now + FUTURE_ALLOWANCE),
        },
    )
    row = dict(zip(stats.column_names, stats.result_rows[0]))
    current = window.start <= now < window.end + span  # the latest window: freshness applies
    newest = row["newest_event"]
    newest = newest.replace(tzinfo=UTC) if newest is not None and newest.tzinfo is None else newest
    messages = row["requests"] + row["quarantined"]
    out["stats"] = pd.DataFrame(
        [
            {
                "quarantine_share": (row["quarantined"] / messages) if messages else None,
                "freshness_lag_s": (now - newest).total_seconds()
                if current and newest and newest.year > 1970
                else None,
                "future_events": int(row["future_events"]),
                "volume_ratio": (row["requests"] / row["requests_week_before"])
                if row["requests_week_before"]
                else None,
                "fallback_label_coverage": (row["labeled_fallbacks"] / row["judged_fallbacks"])
                if row["judged_fallbacks"]
                else None,
            }
        ]
    )
    return out


def _gx():
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    import logging

    import great_expectations as gx
    import great_expectations.expectations as gxe

    logging.getLogger("great_expectations").setLevel(logging.ERROR)
    return gx, gxe


def run_suites(
    client,
    window: QueryWindow,
    *,
    home: Path | None = None,
    thresholds: Thresholds = Thresholds(),
    now: datetime | None = None,
    checks: tuple[Check, ...] = CHECKS,
) -> QualityReport:
    """Run every check on `window`; build Data Docs under `home/gx` when `home` is given."""
    gx, gxe = _gx()
    data = frames(client, window, now)
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = {"globally": False, "profilers": False, "metric_calculations": False}
    docs_index = None
    actions = []
    if home is not None:
        docs_dir = Path(home) / "gx" / "data_docs"
        docs_dir.mkdir(parents=True, exist_ok=True)
        context.add_data_docs_site(
            site_name="routerscope",
            site_config={
                "class_name": "SiteBuilder",
                "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(docs_dir)},
                "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
            },
        )
        actions.append(gx.checkpoint.UpdateDataDocsAction(name="data_docs", site_names=["routerscope"]))
        docs_index = str(docs_dir / "index.html")
    source = context.data_sources.add_or_update_pandas("routerscope")
    results: list[CheckResult] = []
    for frame_name, df in data.items():
        frame_checks = [ch for ch in checks if ch.frame == frame_name]
        if not frame_checks:
            continue
        suite_name = frame_name if frame_name in ("decisions", "labels", "breakers") else "pipeline"
        if df.empty:  # nothing in the window: nothing can be wrong
            results += [CheckResult(ch.name, suite_name, ch.blocking, True, 0, 0) for ch in frame_checks]
            continue
        asset = source.add_dataframe_asset(name=frame_name)
        batch = asset.add_batch_definition_whole_dataframe(f"{frame_name}_window")
        suite = context.suites.add(gx.ExpectationSuite(name=f"routerscope_{frame_name}"))
        by_id = {}
        for ch in frame_checks:
            expectation = ch.make(gxe, thresholds)
            expectation.meta = {"check": ch.name}
            suite.add_expectation(expectation)
            by_id[ch.name] = ch
        validation = context.validation_definitions.add(
            gx.ValidationDefinition(name=f"routerscope_{frame_name}_window", data=batch, suite=suite)
        )
        checkpoint = context.checkpoints.add(
            gx.Checkpoint(
                name=f"routerscope_{frame_name}",
                validation_definitions=[validation],
                actions=actions,
                result_format={"result_format": "COMPLETE"},
            )
        )
        run = checkpoint.run(batch_parameters={"dataframe": df})
        for validation_result in run.run_results.values():
            for r in validation_result.results:
                ch = by_id[r.expectation_config.meta["check"]]
                detail = r.result or {}
                unexpected = int(detail.get("unexpected_count") or 0)
                if not r.success and not unexpected and "observed_value" in detail:
                    unexpected = 1  # an aggregate expectation (e.g. distinct values): the window fails
                results.append(
                    CheckResult(
                        check=ch.name,
                        suite=suite_name,
                        blocking=ch.blocking,
                        success=bool(r.success),
                        unexpected_count=unexpected,
                        element_count=int(detail.get("element_count") or len(df)),
                        sample_ids=_samples(df, frame_name, detail),
                        observed=_observed(detail),
                    )
                )
    order = {ch.name: i for i, ch in enumerate(checks)}
    results.sort(key=lambda r: order[r.check])
    return QualityReport(window.start, window.end, results, docs_index)


def _samples(df, frame_name: str, detail: dict) -> list[str]:
    column = SAMPLE_IDS.get(frame_name)
    indexes = detail.get("unexpected_index_list") or []
    if column is None or not indexes:
        return []
    picked = []
    for i in indexes[:5]:
        if isinstance(i, dict):  # GX may return the index columns by name
            i = i.get("index", next(iter(i.values())))
        try:
            picked.append(str(df.loc[i, column]))
        except (KeyError, TypeError):
            continue
    return picked


def _observed(detail: dict) -> str:
    value = detail.get("observed_value")
    if value is None:
        partial = detail.get("partial_unexpected_list") or []
        return json.dumps([str(v) for v in partial[:5]]) if partial else ""
    return json.dumps(value, default=str)[:500]


DQ_COLUMNS = (
    "suite",
    "check_name",
    "window_start",
    "window_end",
    "success",
    "blocking",
    "unexpected_count",
    "element_count",
    "sample_ids",
    "observed",
)


def store(client, report: QualityReport) -> None:
    rows = [
        (
            r.suite,
            r.check,
            report.window_start,
            report.window_end,
            r.success,
            r.blocking,
            r.unexpected_count,
            r.element_count,
            r.sample_ids,
            r.observed,
        )
        for r in report.results
    ]
    if rows:
        client.insert(f"{names.DATABASE}.{names.TABLE_DQ_RESULTS}", rows, column_names=list(DQ_COLUMNS))


LATEST_DAY_SQL = named(
    "dq_latest_day",
    "SELECT max(event_time) FROM routerscope.decisions WHERE event_time <= {horizon:DateTime64(3, 'UTC')}",
)


def latest_window(client, now: datetime | None = None) -> QueryWindow:
    """The UTC day of the newest decision event not from the future (today when there is none)."""
    now = now or datetime.now(UTC)
    newest = client.query(LATEST_DAY_SQL, parameters={"horizon": utc_text(now + FUTURE_ALLOWANCE)}).result_rows[0][0]
    if newest is None or newest.year <= 1970:
        newest = now
    day = datetime(newest.year, newest.month, newest.day, tzinfo=UTC)
    return QueryWindow(day, day + timedelta(days=1))


def invariant_names_match_contract() -> bool:
    return [inv.name for inv in DECISION_INVARIANTS] == list(INVARIANT_SQL)
