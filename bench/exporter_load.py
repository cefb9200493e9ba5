"""Exporter under load: prints JSON figures of `routerscope exporter`'s server with clients that misbehave.

    .venv/bin/python bench/exporter_load.py [--scrapes 200] [--stuck 20]

A fresh embedded warehouse with one stored 5-minute window; the exporter serves it in this process. `--stuck`
clients each send a request line and go silent (they hold a connection until the read timeout), then
`--scrapes` scrapes of `/metrics` start at once: how many got the metrics, how many were refused with a 503, and
the seconds each took (median and slowest), with `/-/healthy`'s seconds while all that goes on."""

from __future__ import annotations

import argparse
import json
import socket
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from routerscope.core.procs import free_port  # noqa: E402
from routerscope.core.settings import Settings  # noqa: E402
from routerscope.warehouse.analytics.exporter import make_exporter  # noqa: E402
from routerscope.warehouse.analytics.metrics import empty_group  # noqa: E402
from routerscope.warehouse.client import open_warehouse  # noqa: E402
from routerscope.warehouse.queries.metric_windows import write_window  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=200)
    parser.add_argument("--stuck", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="routerscope-bench-") as tmp:
        settings = Settings.from_env({"ROUTERSCOPE_HOME": tmp})
        end = datetime.fromtimestamp((time.time() // 300) * 300, UTC)
        group = empty_group()
        group.update(requests=100, device_entered=80, fallback_rate=0.25)
        with open_warehouse(settings, purpose="bench", migrated=True) as client:
            write_window(
                client,
                "5m",
                end - timedelta(minutes=5),
                end,
                {"overall": empty_group(), "by_task_type": {"intent_classify": group}, "calibration": {}},
            )
        server = make_exporter(settings, port=free_port(), refresh_s=60)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.port}"
        urllib.request.urlopen(f"{base}/metrics", timeout=120).read()  # the first read (chDB's import) aside
        stuck = []
        for _ in range(args.stuck):
            s = socket.create_connection(("127.0.0.1", server.port))
            s.sendall(b"GET /metrics HTTP/1.1\r\n")
            stuck.append(s)

        def scrape(_):
            started = time.perf_counter()
            try:
                urllib.request.urlopen(f"{base}/metrics", timeout=30).read()
                return "ok", time.perf_counter() - started
            except urllib.error.HTTPError as exc:
                return exc.code, time.perf_counter() - started
            except OSError:
                return "failed", time.perf_counter() - started

        with ThreadPoolExecutor(args.scrapes) as pool:
            results = list(pool.map(scrape, range(args.scrapes)))
        started = time.perf_counter()
        urllib.request.urlopen(f"{base}/-/healthy", timeout=30).read()
        healthy_s = time.perf_counter() - started
        for s in stuck:
            s.close()
        server.shutdown()
        server.close()
    seconds = sorted(s for _, s in results)
    print(
        json.dumps(
            {
                "scrapes": args.scrapes,
                "stuck_clients": args.stuck,
                "ok": sum(r == "ok" for r, _ in results),
                "refused_503": sum(r == 503 for r, _ in results),
                "failed": sum(r not in ("ok", 503) for r, _ in results),
                "median_s": round(seconds[len(seconds) // 2], 3),
                "slowest_s": round(seconds[-1], 3),
                "healthy_s_with_stuck_clients": round(healthy_s, 4),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
