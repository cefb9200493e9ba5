"""The dashboard's server process: `python -m routerscope.dashboards.serve run <app> [streamlit options]`.

Streamlit's own command line, after the work every page's first run would otherwise do in front of its first
reader: the chart library, the dashboard's data layer and the warehouse's analytics imported, and the embedded
warehouse's engine started once (opened and closed again: the loader and the metric jobs must be able to take
it between page runs). With the warehouse's first open and first queries, that was 1.5-1.9 s of the first page
a person opened after the dashboard started (a cold On-call run: 3.1-3.5 s before, 1.5-1.8 s after, on 2 cores).
The health check answers only after it, so `routerscope dashboard` says the URL when a page is ready to be fast
(docs/dashboards.md, speed)."""

from __future__ import annotations

import importlib
import sys
import time

_STARTED = time.perf_counter()

# What every page's first run would import (the point of this module: imported here, before the server answers)
import altair  # noqa: E402, F401  (the charts' library: 0.2-0.35 s)
from streamlit.web import cli  # noqa: E402

from routerscope.dashboards import charts, data, now, summary, timerange, words  # noqa: E402, F401
from routerscope.warehouse.analytics import metrics, review, whatif  # noqa: E402, F401
from routerscope.warehouse.analytics.alerting import evidence  # noqa: E402, F401
from routerscope.warehouse.client import open_warehouse  # noqa: E402


def _first_uses() -> None:
    """What a page's first run paid once per process, found by profiling a cold On-call: Streamlit's table of every
    emoji and the regular expression over them (0.1 s), loaded and compiled the first time a page draws a label
    that is not plain ASCII ("→", "·" and "🔴" on every page)."""
    try:
        importlib.import_module("streamlit.string_util").extract_leading_emoji("🔴 →")
    except Exception:  # (moved in another Streamlit version: the page then pays for it, nothing else changes)
        pass


def preload() -> float:
    """Start the embedded engine once (the imports above are done); the seconds since this process began. One that
    cannot be opened now (missing, locked by a long load) is left for the pages, which say so themselves."""
    _first_uses()
    try:
        settings = data._settings()
        if settings.warehouse.embedded:
            with open_warehouse(settings, purpose="dashboard", timeout_s=5, migrated=True) as client:
                client.query("SELECT 1")
    except Exception as exc:  # the first page opens it and names the problem
        print(f"routerscope dashboard: the warehouse was not opened ahead of the first page ({exc})", file=sys.stderr)
    return time.perf_counter() - _STARTED


def main() -> int:
    seconds = preload()
    print(f"routerscope dashboard: ready for the first page in {seconds:.1f} s", file=sys.stderr, flush=True)
    sys.argv = ["streamlit", *sys.argv[1:]]
    return cli.main()


if __name__ == "__main__":
    sys.exit(main())
