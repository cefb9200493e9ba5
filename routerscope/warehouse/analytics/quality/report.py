"""The outcome of a data-quality run: one `CheckResult` per check, gathered in a `QualityReport`."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from routerscope.core.timeutil import utc_iso
from routerscope.warehouse.analytics.quality.checks import FRAMES, Check

if TYPE_CHECKING:
    import pandas as pd

SAMPLES = 5  # offending rows named per failed check


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
    def checked_nothing(self) -> bool:
        """Every check of the events (decisions, labels, breakers) was skipped: the window held none."""
        return all(r.observed == SKIPPED for r in self.results if r.suite != PIPELINE_SUITE)

    @property
    def blocking_failures(self) -> list[CheckResult]:
        return [r for r in self.results if r.blocking and not r.success]

    def failed(self, suite: str | None = None) -> list[CheckResult]:
        return [r for r in self.results if not r.success and (suite is None or r.suite == suite)]

    def as_dict(self) -> dict[str, Any]:
        return {
            "window": {"start": utc_iso(self.window_start, "auto"), "end": utc_iso(self.window_end, "auto")},
            "success": not self.blocking_failures,
            "checked_nothing": self.checked_nothing,
            "skipped": [r.check for r in self.results if r.observed == SKIPPED],
            "blocking_failures": [r.check for r in self.blocking_failures],
            "results": [asdict(r) for r in self.results],
            "data_docs": self.docs_index,
        }

    def rows(self) -> list[tuple]:
        """The rows of `dq_results` (in `routerscope.warehouse.queries.dq_results.COLUMNS` order)."""
        return [
            (
                r.suite,
                r.check,
                self.window_start,
                self.window_end,
                r.success,
                r.blocking,
                r.unexpected_count,
                r.element_count,
                r.sample_ids,
                r.observed,
            )
            for r in self.results
        ]


SKIPPED = "skipped: nothing to check in the window"  # `observed` of a check that had no rows
PIPELINE_SUITE = "pipeline"  # the suite of the loader's own checks (offsets, shares, freshness), not of events


def skipped(check: Check) -> CheckResult:
    """A check on an empty frame: nothing in the window, so nothing failed, and nothing was checked either
    (`observed` says so: a report of skipped checks is not an all-clear)."""
    return CheckResult(check.name, FRAMES[check.frame].suite, check.blocking, True, 0, 0, observed=SKIPPED)


def check_result(check: Check, df: pd.DataFrame, success: bool, detail: dict) -> CheckResult:
    """A check's result from its expectation's outcome on `df` (`detail`: GX's `result` dictionary,
    COMPLETE format)."""
    unexpected = int(detail.get("unexpected_count") or 0)
    if not success and not unexpected and "observed_value" in detail:
        unexpected = 1  # an aggregate expectation (e.g. distinct values): the window fails
    return CheckResult(
        check=check.name,
        suite=FRAMES[check.frame].suite,
        blocking=check.blocking,
        success=success,
        unexpected_count=unexpected,
        element_count=int(detail.get("element_count") or len(df)),
        sample_ids=_samples(df, FRAMES[check.frame].sample_id, detail),
        observed=_observed(detail),
    )


def _samples(df: pd.DataFrame, column: str | None, detail: dict) -> list[str]:
    indexes = detail.get("unexpected_index_list") or []
    if column is None or not indexes:
        return []
    picked = []
    for i in indexes[:SAMPLES]:
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
        # the distinct offending values, first seen first (one value repeated must not hide another)
        seen = [str(v) for v in detail.get("unexpected_list") or detail.get("partial_unexpected_list") or []]
        distinct = list(dict.fromkeys(seen))
        return json.dumps(distinct[:SAMPLES]) if distinct else ""
    return json.dumps(value, default=str)[:500]
