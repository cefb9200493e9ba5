"""The data-quality checks as data: one `Check` per row, each one Great Expectations expectation (by
class name, with its keyword arguments) on one frame of `routerscope.warehouse.queries.quality`.

Checks that protect the metrics are **blocking**: a failure stops the window's metric asset. A
keyword argument whose value is a `Limit` takes the named field of `Thresholds` at run time (the
configurable limits of the non-contract checks). Every check is listed here and nowhere else; a test
breaks each one with a fixture of its own.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, fields
from typing import Any

from routerscope.contract.events import (
    BREAKER_STATES,
    CONFIDENCE_SOURCES,
    DECISION_SCHEMA_VERSIONS,
    FALLBACK_TYPES,
    LABEL_SOURCES,
    NETWORKS,
    REASONS,
    ROLLOUT_STAGES,
    THERMAL_STATES,
)
from routerscope.router.policy import PolicyStore
from routerscope.warehouse.queries.quality import INVARIANT_SQL

SCHEMA_VERSIONS = [1]  # labels and breaker events


@dataclass(frozen=True)
class Thresholds:
    """The configurable limits of the non-contract checks: the defaults of `routerscope dq` and of the
    `data_quality` asset's config."""

    freshness_lag_s: float = 600.0  # newest event at most 10 minutes old (docs/architecture.md §4)
    quarantine_share: float = 0.01  # at most 1 % of the window's messages quarantined
    volume_low: float = 0.5  # requests within [0.5, 2] × the same window a week earlier
    volume_high: float = 2.0
    label_coverage: float = 0.01  # at least 1 % of judged fallbacks labeled
    # the task types the routing policy knows (None: the router's policy in force, read by `run_suites`)
    known_task_types: tuple[str, ...] | None = None


THRESHOLD_FIELDS = tuple(f.name for f in fields(Thresholds))


def policy_task_types() -> tuple[str, ...]:
    """The task types of the routing policy in force (ROUTERSCOPE_POLICY, else the default policy)."""
    return tuple(sorted(PolicyStore().current().capabilities))


@dataclass(frozen=True)
class Limit:
    """An expectation argument read from `Thresholds` when the suite is built."""

    threshold: str

    def value(self, thresholds: Thresholds):
        found = getattr(thresholds, self.threshold)
        if self.threshold == "known_task_types":
            # an empty task type is `decisions.required.task_type`'s to report, not an unknown one
            return (*(policy_task_types() if found is None else found), "")
        return found

    def __post_init__(self):
        if self.threshold not in THRESHOLD_FIELDS:
            raise ValueError(f"no threshold {self.threshold!r}; known: {', '.join(THRESHOLD_FIELDS)}")


@dataclass(frozen=True)
class Frame:
    """A frame the checks read: the suite its results belong to and the column naming a row in samples."""

    suite: str
    sample_id: str | None = None


FRAMES: dict[str, Frame] = {
    "decisions": Frame("decisions", "event_id"),
    "labels": Frame("labels", "label_id"),
    "breakers": Frame("breakers", "event_id"),
    "offsets": Frame("pipeline", "kafka_partition"),
    "stats": Frame("pipeline"),
}

# Great Expectations expectation classes (`great_expectations.expectations.<name>`).
REQUIRED = "ExpectColumnValueLengthsToBeBetween"
IN_SET = "ExpectColumnValuesToBeInSet"
BETWEEN = "ExpectColumnValuesToBeBetween"
UNIQUE = "ExpectColumnValuesToBeUnique"


@dataclass(frozen=True)
class Check:
    """One expectation: a stable name, the frame it runs on, whether a failure blocks the metrics, the
    expectation class and its keyword arguments, and what it protects."""

    name: str
    frame: str
    blocking: bool
    expectation: str
    kwargs: dict[str, Any]
    description: str

    def arguments(self, thresholds: Thresholds) -> dict[str, Any]:
        """The expectation's keyword arguments (a copy: the table stays as written), limits filled in
        from `thresholds`."""
        out = {k: v.value(thresholds) if isinstance(v, Limit) else copy.deepcopy(v) for k, v in self.kwargs.items()}
        return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}


def _required(frame: str, column: str, description: str) -> Check:
    return Check(f"{frame}.required.{column}", frame, True, REQUIRED, {"column": column, "min_value": 1}, description)


def _domain(frame: str, column: str, values) -> Check:
    kwargs = {"column": column, "value_set": list(values)}
    return Check(f"{frame}.domain.{column}", frame, True, IN_SET, kwargs, f"{column} is one of the contract's values")


def _range(frame: str, column: str, low, high, description: str | None = None) -> Check:
    kwargs = {"column": column, "min_value": low, "max_value": high}
    return Check(
        f"{frame}.range.{column}", frame, True, BETWEEN, kwargs, description or f"{column} within the contract's range"
    )


def _invariant(frame: str, name: str, description: str) -> Check:
    """A rule the frame computes as the column `ok_<name>` (TRUE when the row respects it)."""
    return Check(
        f"{frame}.invariant.{name}", frame, True, IN_SET, {"column": f"ok_{name}", "value_set": [True]}, description
    )


CHECKS: tuple[Check, ...] = (
    _required("decisions", "request_id", "request_id is present (not empty)"),
    _required("decisions", "session_id", "session_id is present (not empty)"),
    _required("decisions", "task_type", "task_type is present (not empty)"),
    _required("decisions", "policy_version", "policy_version is present (not empty)"),
    _domain("decisions", "mode", ["live", "shadow"]),
    _domain("decisions", "fallback_type", FALLBACK_TYPES),
    _domain("decisions", "reason", REASONS),
    _domain("decisions", "network", NETWORKS),
    _domain("decisions", "confidence_source", CONFIDENCE_SOURCES),
    _domain("decisions", "device_thermal_state", THERMAL_STATES),
    _domain("decisions", "rollout_stage", ROLLOUT_STAGES),
    _range("decisions", "degrade_level", 0, 4),
    _range("decisions", "confidence", 0, 1),
    _range("decisions", "threshold", 0, 1),
    _range("decisions", "latency_ms", 0, None),
    _range("decisions", "deadline_ms", 1, None),
    # contract v2 (docs/sources.md#seed-003 and #seed-004): the device ledger and the all-cloud counterfactual
    _range("decisions", "device_peak_mem_mb", 0, None),
    _range("decisions", "device_decode_tps", 0, None),
    _range("decisions", "device_prefill_tps", 0, None),
    _range("decisions", "device_load_ms", 0, None),
    _range("decisions", "all_cloud_cost_usd", 0, None),
    Check(
        "decisions.unique.event_id",
        "decisions",
        True,
        UNIQUE,
        {"column": "event_id"},
        "each event_id once after de-duplication (two different events never share an id)",
    ),
    Check(
        "decisions.unique.event_content",
        "decisions",
        True,
        IN_SET,
        {"column": "ok_one_content", "value_set": [True]},
        "no two different events under one event_id (de-duplication would keep one and hide the other)",
    ),
    Check(
        "decisions.unique.event_id_in_horizon",
        "decisions",
        True,
        IN_SET,
        {"column": "ok_id_once_in_horizon", "value_set": [True]},
        "no event_id already seen on an earlier day within the de-duplication horizon (7 days): copies "
        "dated on different days are each counted on their own day and no single window sees both",
    ),
    Check(
        "decisions.schema_versions",
        "decisions",
        True,
        IN_SET,
        {"column": "schema_version", "value_set": list(DECISION_SCHEMA_VERSIONS)},
        "only schema versions this release understands",
    ),
    *(_invariant("decisions", name, f"docs/contract.md invariant {name}") for name in INVARIANT_SQL),
    _required("labels", "request_id", "request_id present"),
    Check(
        "labels.domain.source",
        "labels",
        True,
        IN_SET,
        {"column": "source", "value_set": list(LABEL_SOURCES)},
        "known label source",
    ),
    Check("labels.unique.label_id", "labels", True, UNIQUE, {"column": "label_id"}, "each label_id once"),
    Check(
        "labels.schema_versions",
        "labels",
        True,
        IN_SET,
        {"column": "schema_version", "value_set": SCHEMA_VERSIONS},
        "only known schema versions",
    ),
    _domain("breakers", "boundary", ["device", "cloud"]),
    _domain("breakers", "from_state", BREAKER_STATES),
    _domain("breakers", "to_state", BREAKER_STATES),
    _range("breakers", "failure_rate", 0, 1, "a share"),
    _invariant("breakers", "breaker_state_changes", "a breaker event is a transition"),
    # a warning: decisions of a task type the policy does not know are real traffic and stay loaded, but
    # no threshold, capability or review input applies to them; GX lists the unknown names it met
    Check(
        "pipeline.known_task_types",
        "decisions",
        False,
        IN_SET,
        {"column": "task_type", "value_set": Limit("known_task_types")},
        "every decision's task type is one the routing policy knows (unknown ones are listed)",
    ),
    _invariant(
        "breakers",
        "breaker_transitions_chain",
        "each breaker's transitions chain in its own order (seq): from_state is the previous to_state, seq +1",
    ),
    Check("breakers.unique.event_id", "breakers", True, UNIQUE, {"column": "event_id"}, "each event_id once"),
    Check(
        "pipeline.offsets.no_gaps",
        "offsets",
        True,
        BETWEEN,
        {"column": "missing", "max_value": 0},
        "per Kafka partition, every offset between the window's first and last is loaded or quarantined",
    ),
    Check(
        "pipeline.quarantine_share",
        "stats",
        True,
        BETWEEN,
        {"column": "quarantine_share", "max_value": Limit("quarantine_share")},
        "quarantined share of the window's messages at most the limit",
    ),
    Check(
        "pipeline.freshness",
        "stats",
        False,
        BETWEEN,
        {"column": "freshness_lag_s", "max_value": Limit("freshness_lag_s")},
        "the newest event is recent (checked on the current window only)",
    ),
    Check(
        "pipeline.future_events",
        "stats",
        False,
        BETWEEN,
        {"column": "future_events", "max_value": 0},
        "no event dated later than now plus 5 minutes (ignored by freshness and the default day)",
    ),
    Check(
        "pipeline.volume",
        "stats",
        False,
        BETWEEN,
        {"column": "volume_ratio", "min_value": Limit("volume_low"), "max_value": Limit("volume_high")},
        "requests not far from the same window a week earlier (skipped without one)",
    ),
    Check(
        "pipeline.label_coverage",
        "stats",
        False,
        BETWEEN,
        {"column": "fallback_label_coverage", "min_value": Limit("label_coverage")},
        "enough fallbacks labeled to judge false fallbacks",
    ),
)
