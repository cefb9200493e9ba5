"""Data quality of the decision logs: Great Expectations suites over one window of the warehouse.

The owner of the decision logs needs to know, before anyone tunes on them, that the events are
well-formed (contract domains and ranges, required fields), consistent (the cross-field invariants
of docs/contract.md, written again in SQL on purpose: a second line against a loader bug), complete
(unique event ids, no Kafka offset gaps among loaded and quarantined rows), fresh, of a plausible
volume, rarely quarantined, and labeled.

* `checks`: the checks as data — each one GX expectation on one frame, blocking or not — and the
  `Thresholds` of the non-contract checks;
* `frames`: the frames the checks read, for one window (SQL in `routerscope.warehouse.queries.quality`);
* `gx`: the Great Expectations runner (ephemeral context, a suite per frame, Data Docs);
* `report`: the results; `suites`: a run in steps (frames → GX → results) and `store`
  (`routerscope.warehouse.queries.dq_results`).

Checks that protect the metrics are **blocking**; the Dagster asset turns a blocking failure into a
failed blocking asset check, which stops the window's metric asset. GX Data Docs are built under
`ROUTERSCOPE_HOME/gx/data_docs`.
"""

from routerscope.warehouse.analytics.quality.checks import CHECKS, FRAMES, SCHEMA_VERSIONS, Check, Limit, Thresholds
from routerscope.warehouse.analytics.quality.frames import FUTURE_ALLOWANCE, frames, latest_window
from routerscope.warehouse.analytics.quality.report import CheckResult, QualityReport
from routerscope.warehouse.analytics.quality.suites import run_suites, store
from routerscope.warehouse.queries.quality import INVARIANT_SQL

__all__ = [
    "CHECKS",
    "FRAMES",
    "FUTURE_ALLOWANCE",
    "INVARIANT_SQL",
    "SCHEMA_VERSIONS",
    "Check",
    "CheckResult",
    "Limit",
    "QualityReport",
    "Thresholds",
    "frames",
    "latest_window",
    "run_suites",
    "store",
]
