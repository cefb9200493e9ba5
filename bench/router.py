"""Router benchmark: the decision overhead per request, backends replaced by instant ones.

    .venv/bin/python bench/router.py [--decisions 100000]

Everything but model time: policy lookup (with hot-reload checks), the short-circuit decision,
breakers, the degrade chain's bookkeeping and building the decision event. A mix of requests:
device-served, low-confidence fallbacks to the cloud, capability misses and PII pins. Prints p50,
p99 and mean in microseconds as JSON. The instant backends declare `honours_deadline` (they answer at
once), so they run on the request's thread as `LlamaDevice` and `OpenAICloud` do; `guarded_*` is the
same mix with a device that does not declare it, run on the router's guard pool (docs/router.md): the
price of holding a user's backend to its timeout, one thread handoff per device call.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from routerscope.router.backends import CloudResult, DeviceResult  # noqa: E402
from routerscope.router.engine import Request, Router  # noqa: E402
from routerscope.router.sim.backends import InstantCloud  # noqa: E402


class MixedDevice:
    model = "instant-device"
    ttft_ms, tps = 100.0, 50.0
    honours_deadline = True  # answers at once

    def __init__(self):
        self.i = 0
        # an answer of the declared form for every task type of the mix (a label is a short reply too), so the
        # serve-time checks pass it and every request takes the path it took before they existed
        self.ok = DeviceResult("weather", 0.92, "logprob", 3, 1.0, 2.0, "ok")
        self.low = DeviceResult("weather", 0.30, "logprob", 3, 1.0, 2.0, "ok")

    def generate(self, prompt, *, max_tokens, timeout_ms, degraded, commit_tokens):
        self.i += 1
        return self.low if self.i % 10 == 0 else self.ok


class GuardedDevice(MixedDevice):
    honours_deadline = False  # a user's backend: the router guards it


def measure(router: Router, decisions: int) -> list[int]:
    kinds = [
        Request(task_type="intent_classify", text="turn on the lights", session_id="s1", expected_output_tokens=4),
        Request(task_type="short_reply", text="thanks!", session_id="s2", expected_output_tokens=20),
        Request(task_type="long_summary", text="a long document", session_id="s3", input_tokens=9000),
        Request(
            task_type="short_reply", text="my address is", session_id="s4", has_pii=True, expected_output_tokens=20
        ),
    ]
    for i in range(2000):  # warm-up
        router.route(kinds[i % 4])
    samples = []
    perf = time.perf_counter_ns
    for i in range(decisions):
        t = perf()
        router.route(kinds[i % 4])
        samples.append(perf() - t)
    samples.sort()
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=100_000)
    args = parser.parse_args()
    cloud = CloudResult("weather", 5.0, "ok", 5)  # a declared label: the low-confidence fallbacks are served
    samples = measure(Router(MixedDevice(), InstantCloud(cloud)), args.decisions)
    guarded = measure(Router(GuardedDevice(), InstantCloud(cloud)), args.decisions // 10)
    us = lambda ns: round(ns / 1000, 2)  # noqa: E731
    p50 = lambda xs: xs[len(xs) // 2]  # noqa: E731
    print(
        json.dumps(
            {
                "decisions": args.decisions,
                "p50_us": us(p50(samples)),
                "p99_us": us(samples[int(len(samples) * 0.99)]),
                "mean_us": us(statistics.fmean(samples)),
                "target_p50_us": 30,
                "guarded_decisions": len(guarded),
                "guarded_p50_us": us(p50(guarded)),
                "guarded_p99_us": us(guarded[int(len(guarded) * 0.99)]),
                "ratio_guarded_to_cooperating_p50": round(p50(guarded) / p50(samples), 2),
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
