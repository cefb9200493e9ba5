"""Write-ahead benchmark: what `emit` costs when each event must reach the spool file before it returns.

    .venv/bin/python bench/write_ahead.py [--events 20000]

Against a local broker started for the run (so the replayer sends from the spool while events are written,
as in an application), in one process:

(a) `KafkaEmitter.emit` of the SDK's own messages (`EventMessage`: a decision event of the bench's shape with
    the trace context of a live decision span, encoded on first use), write-ahead and queue-only emitters timed
    in blocks of 500 calls in turn: `emit_write_ahead_us` and `emit_queue_us` (p50, p99, max), and the wall time
    until every event is acknowledged by the broker (`write_ahead_delivered_seconds`, `queue_delivered_seconds`);
(b) the whole SDK call, `Recorder.decision(...)` with one device attempt and `served()`, with and without
    write-ahead, the same way (`record_write_ahead_us`, `record_queue_us`, and `ratio_record_write_ahead_to_queue_p50`);
(c) (a) again with the broker stopped (every event spooled; `emit_write_ahead_broker_down_us`).

Each mode writes to a spool of its own with fsync on the default interval
(`ROUTERSCOPE_SPOOL_FSYNC_INTERVAL_S`, docs/configuration.md). Prints JSON; targets: write-ahead ≤ 10 µs p50 and
≤ 1 ms p99 an event.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from routerscope.core import broker, names  # noqa: E402
from routerscope.core.kafka import producer_config  # noqa: E402
from routerscope.core.procs import free_port  # noqa: E402
from routerscope.core.settings import Settings  # noqa: E402


def pct(samples: list[int], q: float) -> float:
    samples = sorted(samples)
    return round(samples[min(len(samples) - 1, int(q * len(samples)))] / 1000, 2)


def summary(samples: list[int]) -> dict:
    return {"p50": pct(samples, 0.5), "p99": pct(samples, 0.99), "max": round(max(samples) / 1000, 1)}


def blocked(fns, n: int, block: int = 500) -> list[list[int]]:
    """Each of `fns` called n times, `block` calls in a row each, in turn; the duration of every call in ns."""
    perf = time.perf_counter_ns
    outs: list[list[int]] = [[] for _ in fns]
    for start in range(0, n, block):
        for fn, out in zip(fns, outs):
            for i in range(start, min(n, start + block)):
                t = perf()
                fn(i)
                out.append(perf() - t)
    return outs


def wait_delivered(emitters, n: int, timeout_s: float = 120.0) -> list[float | None]:
    """Seconds from now until each emitter has delivered `n` events (None past the timeout)."""
    started, done = time.perf_counter(), [None] * len(emitters)
    while time.perf_counter() - started < timeout_s and any(d is None for d in done):
        for i, e in enumerate(emitters):
            if done[i] is None and e.delivered >= n:
                done[i] = round(time.perf_counter() - started, 2)
        time.sleep(0.01)
    return done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    args = parser.parse_args()
    n = args.events

    import msgspec
    from loader import payloads
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import set_span_in_context

    from routerscope.contract.events import DecisionEvent
    from routerscope.instrumentation.emitter import KafkaEmitter
    from routerscope.instrumentation.sdk import Recorder
    from routerscope.instrumentation.telemetry import EventMessage, Telemetry

    events = [msgspec.json.decode(raw, type=DecisionEvent) for _, raw in payloads(2000, malformed_share=0)]
    tracer = TracerProvider().get_tracer("bench")
    figures: dict = {"events": n, "fsync_interval_s": None}
    with tempfile.TemporaryDirectory(prefix="routerscope-bench-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ROUTERSCOPE_")}
        env["ROUTERSCOPE_HOME"] = str(Path(tmp) / "home")
        settings = Settings.from_env(env)
        figures["fsync_interval_s"] = settings.spool_fsync_interval_s
        broker.start(settings, port=free_port())
        try:
            config = producer_config(settings)
            span = tracer.start_span("route short_reply")
            context = set_span_in_context(span)

            def emitter(name: str, write_ahead: bool) -> KafkaEmitter:
                return KafkaEmitter(
                    config,
                    Path(tmp) / name,
                    write_ahead=write_ahead,
                    queue_size=2 * n,
                    fsync_interval_s=settings.spool_fsync_interval_s,
                )

            ahead, queued = emitter("ahead", True), emitter("queued", False)
            for e in (ahead, queued):  # connected, producers made, before the timed part
                e.emit(EventMessage(names.TOPIC_DECISIONS, b"warm", events[0], context))
                wait_delivered([e], 1, 30)
                e.delivered = 0
            message = lambda i: EventMessage(  # noqa: E731
                names.TOPIC_DECISIONS, events[i % len(events)].session_id.encode(), events[i % len(events)], context
            )
            started = time.perf_counter()
            wa, q = blocked([lambda i: ahead.emit(message(i)), lambda i: queued.emit(message(i))], n)
            emitted_s = time.perf_counter() - started
            delivered = wait_delivered([ahead, queued], n)
            figures.update(
                {
                    "emit_write_ahead_us": summary(wa),
                    "emit_queue_us": summary(q),
                    "emit_both_seconds": round(emitted_s, 2),
                    "write_ahead_delivered_seconds": delivered[0],
                    "queue_delivered_seconds": delivered[1],
                    "write_ahead_delivered": ahead.delivered,
                    "queue_delivered": queued.delivered,
                }
            )
            for e in (ahead, queued):
                e.close(5)

            recorders = []
            for name, write_ahead in (("record-ahead", True), ("record-queued", False)):
                telemetry = Telemetry(emitter(name, write_ahead), TracerProvider(), None)
                recorders.append(Recorder(telemetry))

            def record(recorder):
                def run(i: int) -> None:
                    with recorder.decision(task_type="short_reply", session_id=f"s{i % 500}", deadline_ms=2000) as d:
                        d.device_attempt(level=0, outcome="ok", latency_ms=120, confidence=0.9, threshold=0.7)
                        d.served(fallback_type="none", reason="default")

                return run

            for r in recorders:
                record(r)(0)
                wait_delivered([r.emitter], 1, 30)
                r.emitter.delivered = 0
            started = time.perf_counter()
            ra, rq = blocked([record(recorders[0]), record(recorders[1])], n)
            recorded_s = time.perf_counter() - started
            delivered = wait_delivered([r.emitter for r in recorders], n)
            figures.update(
                {
                    "record_write_ahead_us": summary(ra),
                    "record_queue_us": summary(rq),
                    "ratio_record_write_ahead_to_queue_p50": round(pct(ra, 0.5) / pct(rq, 0.5), 2),
                    "record_both_seconds": round(recorded_s, 2),
                    "record_write_ahead_delivered_seconds": delivered[0],
                    "record_queue_delivered_seconds": delivered[1],
                }
            )
            for r in recorders:
                r.close(5)
        finally:
            broker.stop(settings)
        down = emitter("down", True)
        (wd,) = blocked([lambda i: down.emit(message(i))], n)
        figures["emit_write_ahead_broker_down_us"] = summary(wd)
        figures["emit_write_ahead_broker_down_spooled"] = len(down.spool)
        down._stop.set()
    figures["targets"] = {"write_ahead_p50_us": 10, "write_ahead_p99_us": 1000}
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
