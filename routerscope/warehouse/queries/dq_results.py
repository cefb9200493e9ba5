"""Data-quality results (`dq_results`): one row per check and run of a window, kept as history; readers
take the latest run of the newest window."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from routerscope.core import names
from routerscope.warehouse.sql import named

if TYPE_CHECKING:
    import pandas as pd

# The columns a run writes, in this order (`run_at` is the table's default, the time of the insert).
COLUMNS = (
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

LATEST_RUN_SQL = named(
    "dq_latest_run",
    """
SELECT check_name, suite, blocking, success, unexpected_count, element_count, sample_ids, observed, window_start
FROM $dq_results
WHERE (window_start, run_at) IN (
    SELECT window_start, max(run_at) FROM $dq_results GROUP BY window_start ORDER BY window_start DESC LIMIT 1)
ORDER BY success, check_name
""",
)


def insert(client, rows: Sequence[Sequence]) -> int:
    """Store one run's rows (values in `COLUMNS` order); returns how many."""
    if rows:
        client.insert(names.TABLES[names.TABLE_DQ_RESULTS], list(rows), column_names=list(COLUMNS))
    return len(rows)


def latest_run(client) -> pd.DataFrame:
    """The latest run of the newest window, failures first (no rows before the first run)."""
    import pandas as pd  # deferred: pandas, a third of a second; only the Data quality page reads a frame

    result = client.query(LATEST_RUN_SQL)
    return pd.DataFrame(result.result_rows, columns=list(result.column_names))
