"""Fakes for tests: stand-ins where a real part adds nothing to what a test proves."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from routerscope.pipelines.resources import AlertDelivery
from routerscope.router.backends import CloudResult, DeviceResult
from routerscope.warehouse.analytics.alerting import slack_body


# -- router: clocks, devices and clouds for the decision engine's tests -----------------------------
def dev(outcome="ok", confidence=0.9, text="positive", committed=False):
    """A device answer for a scripted device: logprob confidence, 5 tokens, first token at 50 ms, done at 100 ms."""
    return DeviceResult(text, confidence, "logprob", 5, 50.0, 100.0, outcome, committed)


def cloud(outcome="ok", tokens=7):
    """A cloud answer for a scripted cloud: 300 ms, `tokens` output tokens, no text unless it is ok."""
    return CloudResult("cloud answer" if outcome == "ok" else "", 300.0, outcome, tokens)


class FakeClock:
    """The router's monotonic clock, moved by hand (`t` seconds); `now()` is `start + t`, for event times."""

    def __init__(self, t: float = 1000.0, start: datetime = datetime(2026, 11, 30, tzinfo=UTC)):
        self.t, self.start = t, start

    def __call__(self) -> float:
        return self.t

    def now(self) -> datetime:
        return self.start + timedelta(seconds=self.t)


class ScriptedDevice:
    """Answers with the next scripted result (repeating the last); counts calls."""

    model = "scripted-device"

    def __init__(self, results, ttft_ms=100.0, tps=50.0):
        self.results, self.calls, self.ttft_ms, self.tps = list(results), 0, ttft_ms, tps

    def generate(self, prompt, *, max_tokens, timeout_ms, degraded, commit_tokens):
        result = self.results[min(self.calls, len(self.results) - 1)]
        self.calls += 1
        return result


class ScriptedCloud:
    """Answers with the next scripted result (repeating the last); counts calls."""

    def __init__(self, results):
        self.results, self.calls = list(results), 0

    def model_for(self, level):
        return {2: "cloud-small", 3: "cloud-large"}[level]

    def complete(self, prompt, *, level, max_tokens, timeout_ms):
        result = self.results[min(self.calls, len(self.results) - 1)]
        self.calls += 1
        return result


class GreedyDevice:
    """Uses every millisecond it is given (on the fake clock): `need_ms` of work, cut at the timeout."""

    model = "greedy-device"

    def __init__(
        self,
        clock: FakeClock,
        need_ms: float = 1e9,
        confidence: float = 0.9,
        text: str = "positive",
        ttft_ms: float = 1.0,
        tps: float = 1e6,
        error_kind: str | None = None,
    ):
        self.clock, self.need_ms, self.confidence, self.text = clock, need_ms, confidence, text
        self.ttft_ms, self.tps, self.error_kind = ttft_ms, tps, error_kind
        self.timeouts: list[float] = []

    def generate(self, prompt, *, max_tokens, timeout_ms, degraded, commit_tokens):
        self.timeouts.append(timeout_ms)
        if self.error_kind:
            return DeviceResult("", None, "none", 0, 0.0, 0.0, "error", error_kind=self.error_kind)
        took = min(self.need_ms, timeout_ms)
        self.clock.t += took / 1000
        outcome = "ok" if self.need_ms <= timeout_ms else "timeout"
        return DeviceResult(self.text, self.confidence, "logprob", 5, 1.0, took, outcome)


class StreamingDevice:
    """Streams `tokens` tokens on the fake clock: first after `ttft_ms`, then one per `per_token_ms`;
    honours the decision point, the commit point (`commit_tokens` tokens) and the timeout. Cut at its timeout,
    its partial answer holds one complete sentence ("A part.")."""

    model = "streaming-device"

    def __init__(self, clock: FakeClock, ttft_ms: float, per_token_ms: float, tps_estimate: float = 100.0):
        self.clock, self.first, self.per_token = clock, ttft_ms, per_token_ms
        self.ttft_ms, self.tps = ttft_ms, tps_estimate  # the estimates the latency gate reads
        self.decided: list[tuple[float, int]] = []

    def generate(self, prompt, *, max_tokens, timeout_ms, degraded, commit_tokens, decide=None, **kw):
        decision_at_ms, commit_timeout_ms = kw.get("decision_at_ms", 0.0), kw.get("commit_timeout_ms")
        total_ms = self.first + (max_tokens - 1) * self.per_token
        started = self.clock.t
        self.limits = (timeout_ms, commit_timeout_ms)
        if commit_timeout_ms is not None and self.first + (commit_tokens - 1) * self.per_token <= timeout_ms:
            timeout_ms = max(timeout_ms, commit_timeout_ms)  # past the commit point in time: it may run on
        if decide is not None:
            at = max(decision_at_ms, self.first)
            so_far = 1 + int((at - self.first) // self.per_token)
            if at < min(total_ms, timeout_ms) and so_far < commit_tokens:
                self.clock.t = started + at / 1000
                self.decided.append((at, so_far))
                if not decide(at, so_far, self.first):
                    return DeviceResult("part", 0.9, "logprob", so_far, self.first, at, "timeout", preempted=True)
        if total_ms > timeout_ms:
            self.clock.t = started + timeout_ms / 1000
            so_far = 1 + int((timeout_ms - self.first) // self.per_token)
            return DeviceResult(
                "A part. And the rest of it",
                0.9,
                "logprob",
                so_far,
                self.first,
                timeout_ms,
                "timeout",
                so_far >= commit_tokens,
            )
        self.clock.t = started + total_ms / 1000
        return DeviceResult("A full answer.", 0.9, "logprob", max_tokens, self.first, total_ms, "ok")


class GreedyCloud:
    """Uses every millisecond it is given, or answers after `need_ms` (on the fake clock)."""

    def __init__(
        self, clock: FakeClock, need_ms: float = 1e9, outcome_when_done: str = "ok", text: str = "cloud answer"
    ):
        self.clock, self.need_ms, self.outcome_when_done, self.text = clock, need_ms, outcome_when_done, text
        self.timeouts: list[float] = []

    def model_for(self, level):
        return {2: "cloud-small", 3: "cloud-large"}[level]

    def complete(self, prompt, *, level, max_tokens, timeout_ms):
        self.timeouts.append(timeout_ms)
        took = min(self.need_ms, timeout_ms)
        self.clock.t += took / 1000
        if self.need_ms > timeout_ms:
            return CloudResult("", took, "timeout")
        return CloudResult(self.text, took, self.outcome_when_done, 5)


class QuickCloud:
    """Answers at once (real time), and says it honours its timeout: the router calls it without a guard."""

    honours_deadline = True

    def __init__(self, text: str = "cloud answer"):
        self.text = text  # a task type with a declared answer needs one of its form (docs/router.md)

    def model_for(self, level):
        return {2: "cloud-small", 3: "cloud-large"}[level]

    def complete(self, prompt, *, level, max_tokens, timeout_ms):
        return CloudResult(self.text, 1.0, "ok", 3)


class BlockingDevice:
    """Holds the device (real time) from `entered` until the test sets `release` (at most 10 s)."""

    model, ttft_ms, tps = "blocking-device", 1.0, 1e6

    def __init__(self):
        self.entered, self.release = threading.Event(), threading.Event()

    def generate(self, prompt, **kw):
        self.entered.set()
        self.release.wait(10)
        return DeviceResult("positive", 0.9, "logprob", 1, 1.0, 1.0, "ok")


class SleepingDevice:
    """Real time: streams a token every `per_token_s`, honouring the timeout and the decision point."""

    model, ttft_ms, tps = "sleeping-device", 1.0, 1000.0

    def __init__(self, per_token_s: float):
        self.per_token_s = per_token_s

    def generate(self, prompt, *, max_tokens, timeout_ms, degraded, commit_tokens, decide=None, decision_at_ms=0.0):
        started = time.monotonic()
        ttft = None
        for n in range(1, max_tokens + 1):
            time.sleep(self.per_token_s)
            now_ms = (time.monotonic() - started) * 1000
            ttft = ttft if ttft is not None else now_ms
            if decide is not None and now_ms >= decision_at_ms and n < commit_tokens:
                fits, decide = decide(now_ms, n, ttft), None
                if not fits:
                    return DeviceResult("part", 0.9, "logprob", n, ttft, now_ms, "timeout", preempted=True)
            if now_ms >= timeout_ms:
                return DeviceResult("part", 0.9, "logprob", n, ttft, now_ms, "timeout")
        return DeviceResult("done", 0.9, "logprob", max_tokens, ttft, (time.monotonic() - started) * 1000, "ok")


class SamplingScriptedDevice:
    """Answers (text, outcome) from a script, one per call, and records the sampling temperature it was asked
    for (the replay's determinism re-runs)."""

    model = "scripted"
    ttft_ms, tps = 10.0, 50.0

    def __init__(self, *answers: tuple[str, str]):
        self.answers, self.temperatures = list(answers), []

    def generate(
        self,
        prompt,
        *,
        max_tokens,
        timeout_ms,
        degraded,
        commit_tokens,
        decide=None,
        decision_at_ms=0.0,
        temperature=0.0,
    ) -> DeviceResult:
        self.temperatures.append(temperature)
        text, outcome = self.answers.pop(0)
        return DeviceResult(text, None, "none", 3, 1.0, 2.0, outcome)


class SteadyDevice:
    """Serves every request with its current `confidence` (settable), taking 0.2 s on the fake clock."""

    model, ttft_ms, tps = "scripted-device", 50.0, 1000.0

    def __init__(self, clock: FakeClock):
        self.clock, self.confidence = clock, 0.8

    def generate(self, prompt, *, max_tokens, timeout_ms, degraded, commit_tokens, **kw):
        self.clock.t += 0.2
        return DeviceResult("an answer.", self.confidence, "logprob", 10, 50.0, 200.0, "ok")


class SwitchableCloud:
    """Answers in 0.6 s on the fake clock; every call fails while `down` is set (an outage)."""

    def __init__(self, clock: FakeClock):
        self.clock, self.down = clock, False

    def model_for(self, level):
        return {2: "cloud-small", 3: "cloud-large"}[level]

    def complete(self, prompt, *, level, max_tokens, timeout_ms):
        self.clock.t += 0.6
        return CloudResult("", 600.0, "error") if self.down else CloudResult("cloud answer", 600.0, "ok", 10)


class FakeWebhook(AlertDelivery):
    """An alert webhook that records each delivery (the Slack-compatible body it would have POSTed)
    instead of sending it; the first `failures` deliveries fail as a webhook answering 500 would.

    Dagster builds its own copy of a resource for each run, so the record is kept per `key` on the
    class: a test reads `FakeWebhook(key=...).deliveries` with the key it gave the run's resource."""

    key: str = "default"
    failures: int = 0
    _log: ClassVar[dict[str, list[dict[str, Any]]]] = {}

    def configured(self) -> bool:
        return True

    @property
    def deliveries(self) -> list[dict[str, Any]]:
        """Every delivery in order: alert_key, event (firing | resolved), body, delivered."""
        return self._log.setdefault(self.key, [])

    def deliver(self, alert) -> tuple[bool, list[list]]:
        ok = len(self.deliveries) >= self.failures
        event = "firing" if alert.status == "firing" else "resolved"
        self.deliveries.append(
            {"alert_key": alert.alert_key, "event": event, "body": slack_body(alert), "delivered": ok}
        )
        return ok, [[alert.alert_key, alert.first_seen, event, 1, 200 if ok else 500, "" if ok else "HTTP 500"]]
