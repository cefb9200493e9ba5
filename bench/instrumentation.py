"""Instrumentation benchmark: the cost of a bare OpenTelemetry span against the full per-decision
instrumentation, in the same run, and the enqueue cost with the broker down.

    .venv/bin/python bench/instrumentation.py [--decisions 50000]

(a) a bare span with as many attributes as the decision span; (b) the full request-path
instrumentation of one decision — the decision span, scrubbing, the event copy with the trace ids,
enqueue, and queueing the decision for the sender thread, which makes its attempt spans, counts it and
records its latency — measured as InstrumentedRouter.route minus Router.route on instant backends,
with the emitter's sender paused so its background work (which shares the GIL) is not charged to (b);
`sender_work_per_decision_us` is that background work per decision (attempt spans, count, latency
histogram), timed by recording the decisions the instrumented loops left queued, all in one go;
(c) `KafkaEmitter.emit` alone with a live sender and no broker listening (everything goes to the
spool in the background), and (d) the same with `write_ahead=True` (`enqueue_write_ahead_us`: each
event appended to the spool file before `emit` returns). Prints p50/p99 in µs and the ratio of (b) to
(a), measured two ways:
one loop per function (the target's measure: each loop runs hot in the caches), taken in blocks of
500 calls in turn — bare span, router, instrumented router, again and again — so that a busy spell on
the shared machine falls on all three alike instead of on whichever loop it met; and interleaved
(`..._interleaved`: the three are timed in turn, one call each, so no loop has the caches to itself;
the bare span is slower this way). `ratio_sdk_calls_alone_to_bare_span_p50` times, the same way, only
the OpenTelemetry SDK calls a decision makes (spans, attributes, histogram; nothing of ours), all on
the request path as they were before the attempt spans and the histogram moved to the sender thread.
`scrub_new_decision_us` is what scrubbing a decision whose session and free text are all new costs (the
keyed hash of the session, every rule over each text, the split forms), `scrub_seen_decision_us` what one
whose values were seen before costs (two dict lookups: the usual case, values recur).
`ratio_instrumentation_to_bare_span_p50_by_round` is the same ratio taken within each round of blocks
(p50 of the instrumented block minus p50 of the router's, over p50 of the bare span's, the three timed
within about 0.1 s of each other), median over the rounds: on a shared machine that switches between
a fast and a slow state, a p50 over the whole run can land on the fast state for one loop and on the
slow one for another, and this one cannot.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from opentelemetry import context as otel_context  # noqa: E402
from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.trace import SpanKind, set_span_in_context  # noqa: E402

from routerscope.instrumentation.emitter import KafkaEmitter, Message  # noqa: E402
from routerscope.instrumentation.sdk import InstrumentedRouter  # noqa: E402
from routerscope.instrumentation.telemetry import Telemetry  # noqa: E402
from routerscope.router.engine import Request, Router  # noqa: E402
from routerscope.router.sim.backends import InstantCloud, InstantDevice  # noqa: E402


def pct(samples, q):
    samples = sorted(samples)
    return round(samples[min(len(samples) - 1, int(q * len(samples)))] / 1000, 2)


def timed(fn, n):
    perf, out = time.perf_counter_ns, []
    for _ in range(n):
        t = perf()
        fn()
        out.append(perf() - t)
    return out


def blocked(fns, n, block=500):
    """Time each of `fns` n times, `block` calls in a row each in turn: every block runs hot in the
    caches, and the blocks of all the functions share the machine's busy and quiet spells."""
    outs = [[] for _ in fns]
    for start in range(0, n, block):
        for fn, out in zip(fns, outs):
            out.extend(timed(fn, min(block, n - start)))
    return outs


def by_round(bare, base, full, block=500):
    """The median over rounds of blocks (as `blocked` times them) of (p50 full - p50 base) / p50 bare."""

    def p50(samples):
        return sorted(samples)[len(samples) // 2]

    ratios = [
        (p50(full[i : i + block]) - p50(base[i : i + block])) / p50(bare[i : i + block])
        for i in range(0, len(bare), block)
    ]
    return round(sorted(ratios)[len(ratios) // 2], 2)


def interleaved(fns, n):
    """Time each of `fns` n times, in turn, so that a busy spell on a shared machine falls on all of
    them alike and their ratios hold; one list of durations per function."""
    perf, outs = time.perf_counter_ns, [[] for _ in fns]
    for _ in range(n):
        for fn, out in zip(fns, outs):
            t = perf()
            fn()
            out.append(perf() - t)
    return outs


def sdk_calls_alone(tracer, histogram, route, event):
    """The OpenTelemetry SDK calls one instrumented decision makes, and nothing of ours: the decision
    span (started, current while `route` runs, its 11 attributes, ended), one attempt span with its 8
    attributes and the latency histogram, with attribute dicts built beforehand (the floor under (b))."""
    decision = {
        "router.task_type": event.task_type,
        "router.fallback_type": event.fallback_type,
        "router.reason": event.reason,
        "router.degrade_level": event.degrade_level,
        "router.cloud_calls": event.cloud_calls,
        "router.policy_version": event.policy_version,
        "router.entered_device": event.entered_device,
        "router.mode": event.mode,
        "gen_ai.conversation.id": event.session_id,
        "router.confidence": event.confidence,
        "router.threshold": event.threshold,
    }
    attempt = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "llama.cpp",
        "gen_ai.request.model": "device",
        "gen_ai.conversation.id": event.session_id,
        "router.attempt.level": 0,
        "router.attempt.outcome": "ok",
        "gen_ai.usage.input_tokens": event.input_tokens,
        "gen_ai.usage.output_tokens": event.output_tokens,
    }
    latency = {"task_type": event.task_type, "degrade_level": event.degrade_level}

    def run():
        started = time.time_ns()
        span = tracer.start_span("route short_reply", kind=SpanKind.INTERNAL, start_time=started)
        current = set_span_in_context(span, otel_context.get_current())
        token = otel_context.attach(current)
        route()
        span.set_attributes(decision)
        child = tracer.start_span(
            "chat device", current, kind=SpanKind.INTERNAL, start_time=started, attributes=attempt
        )
        child.end(end_time=started + 1000)
        histogram.record(0.001, latency)
        otel_context.detach(token)
        span.end()

    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=50_000)
    args = parser.parse_args()
    n = args.decisions
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        config = {"bootstrap_servers": "127.0.0.1:9", "max_block_ms": 500, "bootstrap_timeout_ms": 500}
        queued = KafkaEmitter(config, Path(tmp) / "queued", queue_size=2 * n + 10000)
        queued._stop.set()  # sender paused: (b) measures the request path only
        queued._thread.join(5)
        emitter = KafkaEmitter(config, Path(tmp) / "spool", queue_size=n + 10)
        tracer_provider, meter_provider = TracerProvider(), MeterProvider()
        tracer = tracer_provider.get_tracer("bench")
        attrs = {f"router.attr{i}": i for i in range(10)}

        def bare_span():
            with tracer.start_as_current_span("route x") as span:
                span.set_attributes(attrs)

        req = Request(task_type="short_reply", text="hello", session_id="s1", expected_output_tokens=20)
        plain = Router(InstantDevice(), InstantCloud())
        instrumented = InstrumentedRouter(
            Router(InstantDevice(), InstantCloud()), Telemetry(queued, tracer_provider, meter_provider)
        )
        for _ in range(2000):  # warm-up
            bare_span(), plain.route(req), instrumented.route(req)
        bare, base, full = blocked([bare_span, lambda: plain.route(req), lambda: instrumented.route(req)], n)
        bare_i, base_i, full_i = interleaved([bare_span, lambda: plain.route(req), lambda: instrumented.route(req)], n)
        overhead_i = [max(0, f - b) for f, b in zip(sorted(full_i), sorted(base_i))]
        message = Message("router.decisions.v1", b"k", b'{"event_id": "x"}')
        enqueue = timed(lambda: emitter.emit(message), n)
        ahead = KafkaEmitter(config, Path(tmp) / "ahead", write_ahead=True)
        write_ahead = timed(lambda: ahead.emit(message), n)
        ahead._stop.set()
        overhead = [max(0, f - b) for f, b in zip(sorted(full), sorted(base))]
        waiting = len(instrumented.telemetry._decided)
        started = time.perf_counter_ns()
        instrumented.telemetry.record_decisions()  # what the sender thread would have done meanwhile
        sender_work = (time.perf_counter_ns() - started) / max(1, waiting) / 1000
        _, event = instrumented.route(req)
        histogram = meter_provider.get_meter("bench").create_histogram("bench.latency", unit="ms")
        sdk_alone = sdk_calls_alone(tracer, histogram, lambda: plain.route(req), event)
        bare_s, base_s, sdk_s = blocked([bare_span, lambda: plain.route(req), sdk_alone], n // 2)
        sdk_overhead = [max(0, f - b) for f, b in zip(sorted(sdk_s), sorted(base_s))]
        # the scrubbing a decision whose every text is new pays (no value seen before: the caches miss), and
        # what one seen before pays (the usual case: sessions, task types, versions and models recur)
        recorder = instrumented.recorder
        fresh = iter(range(10**9))

        def scrub_new():
            i = next(fresh)
            recorder._scrub_texts(("short_reply", f"app-{i}", "high", f"1.{i}.0", f"policy-{i}", "gemma-270m", None))
            recorder._pseudonymise_session(f"session-{i}")

        scrub_new_samples = timed(scrub_new, min(n, 20_000))
        texts = ("short_reply", "app-1", "high", "1.1.0", "policy-1", "gemma-270m", None)
        scrub_seen_samples = timed(lambda: (recorder._texts.get(texts), recorder._sessions.get("session-1")), n)
        figures = {
            "decisions": n,
            "bare_span_us": {"p50": pct(bare, 0.5), "p99": pct(bare, 0.99)},
            "router_alone_us": {"p50": pct(base, 0.5), "p99": pct(base, 0.99)},
            "router_instrumented_us": {"p50": pct(full, 0.5), "p99": pct(full, 0.99)},
            "instrumentation_us": {"p50": pct(overhead, 0.5), "p99": pct(overhead, 0.99)},
            "ratio_instrumentation_to_bare_span_p50": round(pct(overhead, 0.5) / pct(bare, 0.5), 2),
            "ratio_instrumentation_to_bare_span_p50_by_round": by_round(bare, base, full),
            "bare_span_interleaved_us": {"p50": pct(bare_i, 0.5), "p99": pct(bare_i, 0.99)},
            "instrumentation_interleaved_us": {"p50": pct(overhead_i, 0.5), "p99": pct(overhead_i, 0.99)},
            "ratio_instrumentation_to_bare_span_interleaved_p50": round(pct(overhead_i, 0.5) / pct(bare_i, 0.5), 2),
            "sdk_calls_alone_us": {"p50": pct(sdk_overhead, 0.5), "p99": pct(sdk_overhead, 0.99)},
            "ratio_sdk_calls_alone_to_bare_span_p50": round(pct(sdk_overhead, 0.5) / pct(bare_s, 0.5), 2),
            "enqueue_broker_down_us": {"p50": pct(enqueue, 0.5), "p99": pct(enqueue, 0.99)},
            "enqueue_write_ahead_us": {"p50": pct(write_ahead, 0.5), "p99": pct(write_ahead, 0.99)},
            "sender_work_per_decision_us": round(sender_work, 2),
            "scrub_new_decision_us": {"p50": pct(scrub_new_samples, 0.5), "p99": pct(scrub_new_samples, 0.99)},
            "scrub_seen_decision_us": {"p50": pct(scrub_seen_samples, 0.5), "p99": pct(scrub_seen_samples, 0.99)},
            "targets": {"ratio": 3, "enqueue_p99_us": 100},
        }
        emitter._stop.set()  # the unsent rest stays in the (temporary) spool: let the sender finish writing it
        emitter._thread.join(60)
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
