"""`routerscope collect` at rate with durable acknowledgement: spans per second answered 200 (each one on disk
when answered) from several clients at once, and the time until every trace is in Kafka. Prints JSON.

    .venv/bin/python bench/collect.py [--spans 400000] [--batch 512] [--clients 4] [--fsync-interval 1]

A local broker and `routerscope collect` (the command, its own process) are started; `--clients` sender
processes, each with one keep-alive connection, post pre-encoded OTLP/HTTP protobuf requests of `--batch`
spans (bench/otlp.py's traces: the app's root span, a device call that failed, the cloud call that served
and an HTTP span, with prompt and completion attributes the receiver drops). Every trace id is distinct.

* `spans_per_s_acknowledged`: spans answered 200 per second, from the first request to the last answer.
  A 200 means the spans are on disk (docs/otlp.md), so this is the rate at which `collect` takes spans
  durably.
* `spans_per_s_to_kafka`: spans per second from the first request until every trace is in the topic
  (counted by a consumer); `traces_in_kafka` must equal `traces`.
* `collect_cpu_s`: the CPU `collect` used (user + system) over the run, and its peak RSS.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from routerscope.core import broker  # noqa: E402
from routerscope.core.procs import free_port  # noqa: E402
from routerscope.core.settings import Settings  # noqa: E402

_spec = importlib.util.spec_from_file_location("bench_otlp", REPO / "bench" / "otlp.py")
assert _spec is not None and _spec.loader is not None
otlp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(otlp)

CLIENT = r"""
import http.client, pickle, sys, time
bodies, port, go = pickle.load(sys.stdin.buffer)
while time.time() < go:
    time.sleep(0.001)
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
statuses, first, last = {}, time.time(), 0.0
for body in bodies:
    while True:
        conn.request("POST", "/v1/traces", body=body, headers={"Content-Type": "application/x-protobuf"})
        r = conn.getresponse(); r.read()
        statuses[r.status] = statuses.get(r.status, 0) + 1
        if r.status == 200:
            last = time.time()
            break
        time.sleep(float(r.getheader("Retry-After") or 1) / 10)
print(repr((statuses, first, last)))
"""


def _proc_figures(pid: int) -> tuple[float, float]:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    rss = 0.0
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                rss = int(line.split()[1]) / 1024
    return cpu, rss


def main() -> None:
    import pickle

    parser = argparse.ArgumentParser(description="spans/s `routerscope collect` acknowledges durably")
    parser.add_argument("--spans", type=int, default=400_000, help="spans to send (rounded up to whole requests)")
    parser.add_argument("--batch", type=int, default=512, help="spans per request (the SDK exporter's default)")
    parser.add_argument("--clients", type=int, default=4, help="sender processes, one connection each")
    parser.add_argument(
        "--fsync-interval", default="1", help="passed to `collect` (0: fsync before every answer; default 1)"
    )
    args = parser.parse_args()
    bodies = otlp.requests(args.spans, args.batch)
    per_request = (args.batch // otlp.SPANS_PER_TRACE) * otlp.SPANS_PER_TRACE
    spans = len(bodies) * per_request
    traces = spans // otlp.SPANS_PER_TRACE
    with tempfile.TemporaryDirectory(prefix="rs-bench-collect-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ROUTERSCOPE_")}
        env["ROUTERSCOPE_HOME"] = tmp
        settings = Settings.from_env(env)
        broker.start(settings, port=free_port(), keep=False)
        port = free_port()
        collect = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "routerscope"),
                "collect",
                "--port",
                str(port),
                "--fsync-interval",
                args.fsync_interval,
            ],
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            if "OTLP/HTTP on" not in collect.stdout.readline():
                raise SystemExit(f"bench: collect did not start: {collect.stderr.read()}")
            cpu0, _ = _proc_figures(collect.pid)
            otlp.log(f"sending {spans} spans in {len(bodies)} requests from {args.clients} clients")
            go = time.time() + 1.0
            clients = [
                subprocess.Popen(
                    [sys.executable, "-c", CLIENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=REPO
                )
                for _ in range(args.clients)
            ]
            for i, client in enumerate(clients):
                assert client.stdin is not None
                client.stdin.write(pickle.dumps((bodies[i :: args.clients], port, go)))
                client.stdin.close()
            results = [eval(c.stdout.read().decode()) for c in clients]  # type: ignore[union-attr]  # noqa: S307 - our own repr
            first = min(r[1] for r in results)
            last = max(r[2] for r in results)
            [c.wait() for c in clients]
            cpu_acked, _ = _proc_figures(collect.pid)
            seen = otlp.count_messages(settings, settings.otlp_topic, traces, timeout_s=180)
            to_kafka = time.time() - first
            cpu1, rss = _proc_figures(collect.pid)
        finally:
            collect.terminate()
            _, err = collect.communicate(timeout=120)
            broker.stop(settings)
    statuses: dict[int, int] = {}
    for r in results:
        for code, n in r[0].items():
            statuses[code] = statuses.get(code, 0) + n
    print(
        json.dumps(
            {
                "spans": spans,
                "traces": traces,
                "requests": len(bodies),
                "spans_per_request": per_request,
                "clients": args.clients,
                "fsync_interval_s": float(args.fsync_interval),
                "statuses": statuses,
                "seconds_to_acknowledge": round(last - first, 3),
                "spans_per_s_acknowledged": round(spans / (last - first)),
                "traces_in_kafka": seen,
                "seconds_to_kafka": round(to_kafka, 3),
                "spans_per_s_to_kafka": round(spans / to_kafka) if seen == traces else None,
                "collect_cpu_s_to_acknowledge": round(cpu_acked - cpu0, 2),
                "collect_cpu_s": round(cpu1 - cpu0, 2),
                "collect_peak_rss_mb": round(rss, 1),
                "collect_exit": err.strip().splitlines()[-1] if err.strip() else "",
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
