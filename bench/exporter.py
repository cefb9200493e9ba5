"""Exporter benchmark: prints JSON figures of `routerscope exporter` scraped many times in a row.

    .venv/bin/python bench/exporter.py [--scrapes 10000] [--days 7] [--task-types 5] [--refresh 1]

Fills a fresh embedded warehouse with `--days` days of stored 5-minute windows (and daily ones) for
`--task-types` task types, starts the real command as a process, scrapes `/metrics` `--scrapes` times one
after another, and reads the resident memory of the exporter's process tree (it reads an embedded warehouse
in a worker process it replaces every 50 reads) after the first 100 scrapes, at each tenth of the run and
after the last: the full metric set must not grow memory. `--refresh` is how often the exporter re-reads the
warehouse (1 s: every second of the run, so the read path is in the figure as well as the serving one).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from routerscope.core import procs  # noqa: E402
from routerscope.core.settings import Settings  # noqa: E402
from routerscope.warehouse.analytics.metrics import empty_group  # noqa: E402
from routerscope.warehouse.client import open_warehouse  # noqa: E402
from routerscope.warehouse.queries.metric_windows import write_window  # noqa: E402

TASK_TYPES = ("intent_classify", "short_reply", "extract_fields", "rewrite", "long_summary", "tool_call", "slot")


def fill(settings: Settings, days: int, task_types: int) -> int:
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    windows = 0
    with open_warehouse(settings, purpose="bench", migrated=True) as client:
        for grain, step in (("5m", timedelta(minutes=5)), ("1d", timedelta(days=1))):
            start = end - timedelta(days=days)
            while start < end:
                groups = {}
                for k, t in enumerate(TASK_TYPES[:task_types]):
                    g = empty_group()
                    g.update(requests=100 + k, device_entered=90, quality_fallback_rate=9 / 90, route_labeled=10)
                    g["degrade_share"] = {"L0": 0.8, "L1": 0.05, "L2": 0.1, "L3": 0.04, "L4": 0.01}
                    groups[t] = g
                write_window(
                    client,
                    grain,
                    start,
                    start + step,
                    {"overall": empty_group(), "by_task_type": groups, "calibration": {}},
                )
                windows += 1
                start += step
    return windows


def tree(pid: int) -> list[int]:
    """The process and its descendants (the exporter reads an embedded warehouse in a worker process)."""
    children = []
    try:  # per thread: the worker pool starts its replacement workers from a thread of its own
        for task in Path(f"/proc/{pid}/task").iterdir():
            children += (task / "children").read_text().split()
    except OSError:
        return []
    return [pid] + [p for c in children for p in tree(int(c))]


def rss(pid: int) -> float:
    """Resident bytes of the process tree under `pid`."""
    total = 0
    for p in tree(pid):
        try:
            total += int(Path(f"/proc/{p}/statm").read_text().split()[1]) * 4096
        except OSError:
            pass
    return float(total)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scrapes", type=int, default=10_000)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--task-types", type=int, default=5)
    parser.add_argument("--refresh", type=float, default=1.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rs-bench-exporter-") as home:
        env = {"ROUTERSCOPE_HOME": home, "PATH": "/usr/bin:/bin"}
        settings = Settings.from_env(env)
        windows = fill(settings, args.days, args.task_types)
        port = procs.free_port()
        log = Path(home) / "exporter.log"
        with log.open("wb") as out:
            process = procs.spawn(
                [str(REPO / ".venv/bin/routerscope"), "exporter", "--port", str(port), "--refresh", str(args.refresh)],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        url = f"http://127.0.0.1:{port}/metrics"
        try:
            procs.wait_ready(process, lambda: procs.http_ok(url, 30), what="exporter", log_path=log)
            started = time.perf_counter()
            sizes, first_rss, trace = [], None, []
            for i in range(1, args.scrapes + 1):
                with urllib.request.urlopen(url, timeout=30) as response:
                    text = response.read().decode()
                if i == 100:
                    first_rss = rss(process.pid)
                if i % max(args.scrapes // 10, 1) == 0:
                    trace.append(round(rss(process.pid) / 2**20, 1))
                sizes.append(len(text))
            elapsed = time.perf_counter() - started
            last_rss = rss(process.pid)
        finally:
            procs.stop(process)
    series = sum(1 for x in text.splitlines() if x.startswith("routerscope_"))
    print(
        json.dumps(
            {
                "date": datetime.now(UTC).strftime("%Y-%m-%d"),
                "scrapes": args.scrapes,
                "stored_windows": windows,
                "task_types": args.task_types,
                "refresh_s": args.refresh,
                "routerscope_series": series,
                "body_bytes": sizes[-1],
                "scrapes_per_s": round(args.scrapes / elapsed, 1),
                "rss_mb_after_100": round(first_rss / 2**20, 1),
                "rss_mb_after_all": round(last_rss / 2**20, 1),
                "rss_growth_mb": round((last_rss - first_rss) / 2**20, 1),
                "rss_mb_each_tenth": trace,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
