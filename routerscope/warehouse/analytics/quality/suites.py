"""A data-quality run on one window, in steps: the frames → Great Expectations → the results → stored."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from routerscope.warehouse.analytics.quality import gx
from routerscope.warehouse.analytics.quality.checks import CHECKS, Check, Thresholds
from routerscope.warehouse.analytics.quality.frames import frames
from routerscope.warehouse.analytics.quality.report import QualityReport, check_result, skipped
from routerscope.warehouse.queries import dq_results
from routerscope.warehouse.sql import QueryWindow


def run_suites(
    client,
    window: QueryWindow,
    *,
    home: Path | None = None,
    thresholds: Thresholds | None = None,
    now: datetime | None = None,
    checks: tuple[Check, ...] = CHECKS,
) -> QualityReport:
    """Run every check on `window`; build Data Docs under `home/gx` when `home` is given."""
    data = frames(client, window, now)
    # Nothing in a frame's window: nothing can be wrong, GX is not asked, and the result says skipped. So is a
    # check whose column holds no value at all (a share without a denominator): GX would pass it on nothing.
    empty = {name for name, df in data.items() if df.empty}
    outcomes = gx.run({n: df for n, df in data.items() if n not in empty}, checks, thresholds or Thresholds(), home)
    results = [
        skipped(o.check)
        if _no_values(o.check, data[o.check.frame])
        else check_result(o.check, data[o.check.frame], o.success, o.detail)
        for o in outcomes
    ]
    results += [skipped(check) for check in checks if check.frame in empty]
    order = {check.name: i for i, check in enumerate(checks)}
    results.sort(key=lambda r: order[r.check])
    docs_index = str(gx.docs_dir(home) / "index.html") if home is not None else None
    return QualityReport(window.start, window.end, results, docs_index)


def _no_values(check: Check, df) -> bool:
    column = check.kwargs.get("column")
    return column is not None and column in df.columns and bool(df[column].isna().all())


def store(client, report: QualityReport) -> None:
    """Keep the run's results in `dq_results`."""
    dq_results.insert(client, report.rows())
