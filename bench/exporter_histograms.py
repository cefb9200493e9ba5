"""Exporter histograms benchmark: prints JSON figures of the histogram read (`histograms.histograms`) over a
warehouse of generated decisions, beside the rest of the exporter's read (`read_snapshot`), in the same run.

    .venv/bin/python bench/exporter_histograms.py [--rows 1000000] [--days 8]

The exporter reads the warehouse once per refresh (15 s by default) and a scrape that falls due waits for it:
the figure to watch is the histogram read's seconds against Prometheus's 10 s scrape timeout. The histograms
are read again only when the decisions before the window boundary change (once per 5 minutes under a steady
load): `snapshot_read_s_histograms_unchanged` is every other read."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from metrics import END, filled_warehouse  # noqa: E402

from routerscope.warehouse.analytics.exporter import read_snapshot  # noqa: E402
from routerscope.warehouse.queries.histograms import histograms  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--days", type=int, default=8)
    args = parser.parse_args()
    with filled_warehouse(args.rows, args.days) as (client, _):
        times = []
        for _ in range(3):
            t = time.perf_counter()
            found = histograms(client, END)
            times.append(time.perf_counter() - t)
        t = time.perf_counter()
        first = read_snapshot(client, END)
        whole = time.perf_counter() - t
        t = time.perf_counter()
        read_snapshot(client, END, first.histograms_key)  # nothing changed: the histograms are not read again
        unchanged = time.perf_counter() - t
    print(
        json.dumps(
            {
                "rows": args.rows,
                "histogram_read_s": round(min(times), 3),
                "snapshot_read_s_with_histograms": round(whole, 3),
                "ratio_histograms_to_snapshot": round(min(times) / whole, 3),
                "snapshot_read_s_histograms_unchanged": round(unchanged, 3),
                "histogram_series": len(found),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
