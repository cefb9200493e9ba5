"""The router's promises against hostile backends, measured (docs/router.md): wall-clock figures as JSON.

    .venv/bin/python bench/router_budget.py [--no-model]

Each probe is one request on the real clock against a backend that misbehaves; it prints the wall time
next to the budget the router promises (`deadline_ms - elapsed_ms + 50 ms`):

* `llama_long_prompt_600ms`: the real `LlamaDevice` (Gemma 3 270M) with a ~1.9k-token prompt and a 600 ms
  budget, admitted by a deliberately optimistic estimate so that its prefill has to be cut (skipped with
  `--no-model`);
* `trickling_http_cloud_1s`: `OpenAICloud` against a loopback server that sends its body a byte every 50 ms;
* `device_ignoring_timeout_1s`, `cloud_ignoring_timeout_1s`: a user's backend that works 3 s whatever it
  is told;
* `shadow_device_2s_cloud_300ms`: the time the user waits in shadow mode, and the event's latency_ms;
* `p90_breaker_replay`: a replayed 5-minute cloud slowdown and 30 minutes of recovery on a simulated
  clock: how many times the cloud breaker opened, and how many after it first closed again.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from routerscope.router.backends import CloudResult, DeviceResult, OpenAICloud  # noqa: E402
from routerscope.router.engine import Request, Router  # noqa: E402
from routerscope.router.policy import DEFAULT_POLICY, PolicyStore  # noqa: E402
from routerscope.router.sim.hostile import Trickler  # noqa: E402


class Stubborn:
    """A user's backend (device and cloud): works `need_s` whatever timeout it is given."""

    model, ttft_ms, tps = "stubborn", 1.0, 1e6

    def __init__(self, need_s: float, text: str = "answer"):
        self.need_s, self.text = need_s, text

    def generate(self, prompt, **kw):
        time.sleep(self.need_s)
        return DeviceResult(self.text, 0.99, "logprob", 3, 1.0, self.need_s * 1000, "ok")

    def model_for(self, level):
        return {2: "cloud-small", 3: "cloud-large"}[level]

    def complete(self, prompt, *, level, max_tokens, timeout_ms):
        time.sleep(self.need_s)
        return CloudResult(self.text, self.need_s * 1000, "ok", 3)


class Punctual(Stubborn):
    honours_deadline = True  # answers well within its timeout


def probe(router: Router, request: Request) -> dict:
    started = time.monotonic()
    _, event = router.route(request)
    wall = (time.monotonic() - started) * 1000
    budget = max(0, request.deadline_ms - request.elapsed_ms) + 50
    out = {"wall_ms": round(wall, 1), "promised_ms": budget, "within": wall <= budget}
    if event is not None:
        out["latency_ms"] = round(event.latency_ms, 1)
        out["attempts"] = [f"L{a.level}:{a.outcome}{'*' if a.abandoned is True else ''}" for a in event.attempts]
    return out


def breaker_replay(policy) -> dict:
    class Clock:
        t = 1000.0

        def __call__(self):
            return self.t

    clock = Clock()

    class Cloud:
        latency_ms = 900.0

        def model_for(self, level):
            return "cloud-small"

        def complete(self, prompt, *, level, max_tokens, timeout_ms):
            clock.t += self.latency_ms / 1000
            return CloudResult("ok", self.latency_ms, "ok", 3)

    cloud, seen = Cloud(), []
    router = Router(Punctual(0.0), cloud, policy=policy, clock=clock, on_breaker_event=seen.append)
    for seconds, latency in ((1800, 900.0), (300, 6000.0), (1800, 900.0)):
        cloud.latency_ms, end = latency, clock.t + seconds
        while clock.t < end:
            started = clock.t
            router.route(Request(task_type="long_summary", text="x", session_id="s", deadline_ms=60_000))
            clock.t = max(clock.t, started + 5.0)
    moves = [(e.from_state, e.to_state) for e in seen if e.boundary == "cloud"]
    first_close = next((i for i, m in enumerate(moves) if m[1] == "closed"), len(moves))
    return {
        "opened_from_closed": sum(m == ("closed", "open") for m in moves),
        "opened_after_first_close": sum(m[1] == "open" for m in moves[first_close:]),
        "final_state": router.cloud_breaker.state,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-model", action="store_true", help="skip the real-model probe")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="routerscope-bench-"))
    shadow_policy = tmp / "shadow.yaml"
    shadow_policy.write_text(DEFAULT_POLICY.read_text().replace("shadow: []", "shadow: [short_reply]"))
    policy = PolicyStore(DEFAULT_POLICY)
    out: dict = {}
    if not args.no_model:
        from routerscope.router.backends import LlamaDevice, gemma_path

        device = LlamaDevice(gemma_path(tmp), n_ctx=4096, n_threads=1)
        device.prefill_tps, device.tps, device.ttft_ms = 1e9, 1e6, 1.0  # let the long prompt in
        text = "Summarise this log. " + " ".join(f"event {i} happened at noon on the third floor." for i in range(190))
        request = Request(
            task_type="short_reply", text=text, session_id="b", deadline_ms=600, input_tokens=1900, has_pii=True
        )
        out["llama_long_prompt_600ms"] = probe(Router(device, Punctual(0.0), policy=policy), request)
    server = Trickler("body")
    cloud_only = Request(task_type="long_summary", text="x", session_id="b", deadline_ms=1000)
    out["trickling_http_cloud_1s"] = probe(Router(Punctual(0.0), OpenAICloud(server.url), policy=policy), cloud_only)
    server.close()
    short = Request(task_type="short_reply", text="x", session_id="b", deadline_ms=1000, expected_output_tokens=20)
    out["device_ignoring_timeout_1s"] = probe(Router(Stubborn(3.0), Punctual(0.0), policy=policy), short)
    out["cloud_ignoring_timeout_1s"] = probe(Router(Punctual(0.0), Stubborn(3.0), policy=policy), cloud_only)
    events = []
    router = Router(Stubborn(2.0), Punctual(0.3), policy=PolicyStore(shadow_policy), on_event=events.append)
    shadow = probe(router, Request(task_type="short_reply", text="x", session_id="b", deadline_ms=3000))
    deadline = time.monotonic() + 5
    while not events and time.monotonic() < deadline:
        time.sleep(0.01)
    if events:
        shadow.update(
            latency_ms=round(events[-1].latency_ms, 1),
            degrade_level=events[-1].degrade_level,
            attempts=[f"L{a.level}:{a.outcome}" for a in events[-1].attempts],
        )
    out["shadow_device_2s_cloud_300ms"] = shadow
    out["p90_breaker_replay"] = breaker_replay(policy)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
