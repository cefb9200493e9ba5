"""One device call (docs/router.md, "The router enforces the budget"): a `DeviceCall`'s settings offered only as
far as the backend takes them (`accepts_keyword`), run under its level's timeout (on the guard pool for a backend
that does not honour its deadline, `routerscope.router.guard`), its result made sane, a late answer dropped, and its
outcome recorded: into the request's trace and, for a live call, the device breaker (a load failure or
out-of-memory opens it at once; every slot held by a call the device never finished opens it too)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

from routerscope.router.backends import Cancel, DeviceBackend, DeviceResult, committed, error_kind
from routerscope.router.breaker import CircuitBreaker
from routerscope.router.guard import ABANDONED, DONE, RAISED, Guard, honours_deadline
from routerscope.router.latency import L4_MS, Budget
from routerscope.router.policy import PolicySource
from routerscope.router.request import Request
from routerscope.router.sanity import sane_device_result
from routerscope.router.trace import Trace

LATE_MS = 10.0  # a backend's answer later than its timeout by more than this is dropped, never served


def accepts_keyword(fn, name: str, explicit: bool = False) -> bool:
    """Whether `fn` takes the keyword `name` (or any keyword): optional backend features are offered only then.
    `explicit`: only a parameter of that name counts (an object such as a `Cancel` is never handed to a
    `**kwargs` that may forward it over a pipe as JSON, as the model worker does)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    if name in params:
        return True
    return not explicit and any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


@dataclass(slots=True)
class DeviceCall:
    """One device call's settings (`DeviceCaller.run`): its level and output cap, the commit point, the decision
    point's judge, the input cut to the device's window, an explicit timeout, and how it is run."""

    level: int
    max_tokens: int
    commit_tokens: int
    decide: Callable[[float, int, float], bool] | None = None
    prompt: str | None = None
    timeout_ms: float | None = None
    whole: bool = False  # a structured answer: whole or nothing, never committed early
    share_level: int | None = None  # the level whose share of the budget it runs with (default its own)
    cancel: Cancel | None = None
    on_late_end: Callable[[], None] | None = None
    shadow: bool = False  # a shadow run: its outcome never reaches the device breaker


class DeviceCaller:
    """Calls `device` for the router. `enforce`: hold every call to its timeout on the router's clock (a backend
    without `honours_deadline` then runs on `guard`)."""

    def __init__(
        self,
        device: DeviceBackend,
        breaker: CircuitBreaker,
        guard: Guard,
        policy: PolicySource,
        clock: Callable[[], float],
        enforce: bool,
    ):
        self.device, self.breaker, self.guard, self.policy, self._clock = device, breaker, guard, policy, clock
        self.cancels = accepts_keyword(device.generate, "cancel", explicit=True)
        self.whole = accepts_keyword(device.generate, "commit_on_sentence")
        self.decides = accepts_keyword(device.generate, "decide")  # a device without the decision point still works
        self.guarded = enforce and not honours_deadline(device)
        # past the commit point the device may run to the end of the budget: only a device that stops by
        # itself is offered that (a guarded one is abandoned at its level's timeout)
        self.commits = accepts_keyword(device.generate, "commit_timeout_ms") and not self.guarded

    def run(self, trace: Trace, req: Request, budget: Budget, call: DeviceCall) -> tuple[DeviceResult, float, bool]:
        """One device call under its level's timeout (docs/router.md): `call.share_level`'s share of what remains
        when given (a context cut that runs with L0's share), else the level's own. `call.whole`: a structured
        answer, never committed early (no sentence commits it, no extension past the commit point).
        `call.on_late_end` runs when an abandoned call really ends (its slot is held until then). Returns the
        result, its latency on the router's clock and whether the router abandoned it. A `call.shadow` run's
        outcome never reaches the device breaker (docs/sources.md#seed-004-5: shadow never touches the main
        path)."""
        share = call.level if call.share_level is None else call.share_level
        timeout = max(0.0, budget.timeout_ms(share) if call.timeout_ms is None else call.timeout_ms)
        commit_tokens = call.max_tokens + 1 if call.whole else call.commit_tokens  # structured: no commit point
        kwargs: dict = dict(
            max_tokens=call.max_tokens, timeout_ms=timeout, degraded=call.level == 1, commit_tokens=commit_tokens
        )
        if call.prompt is not None:
            kwargs["degraded"] = False  # the router already cut the input to the device's window
        if call.whole and self.whole:
            kwargs["commit_on_sentence"] = False
        if call.cancel is not None and self.cancels:
            kwargs["cancel"] = call.cancel
        if call.decide is not None and self.decides:
            kwargs.update(decide=call.decide, decision_at_ms=budget.decision_point_in_ms())
        commit_limit = timeout
        if self.commits and call.level <= 1 and call.timeout_ms is None and not call.whole:
            # docs/sources.md#seed-000 "宁可让端侧跑完": past the commit
            # point, the whole remaining budget minus L4's 50 ms
            commit_limit = max(timeout, budget.remaining_ms() - L4_MS)
            kwargs["commit_timeout_ms"] = commit_limit
        text = req.text if call.prompt is None else call.prompt
        started = self._clock()
        result, abandoned = self._generate(text, kwargs, timeout, started, call.on_late_end)
        result = sane_device_result(result)
        latency_ms = (self._clock() - started) * 1000
        if result.outcome == "ok":
            past = not call.whole and committed(result.tokens_out, result.text, commit_tokens)
            if latency_ms > (commit_limit if past else timeout) + LATE_MS:  # after its timeout: dropped, never served
                result = DeviceResult(
                    "",
                    result.confidence,
                    result.confidence_source,
                    0,
                    result.ttft_ms,
                    latency_ms,
                    "timeout",
                    stats=result.stats,
                )
        trace.measure(result.stats if isinstance(result.stats, dict) else None)
        if not call.shadow:  # a shadow run's outcome never reaches the device breaker
            self.breaker.record(result.outcome != "ok", trigger="device_" + result.outcome)
            if result.outcome == "error" and result.error_kind in ("load_failure", "oom"):
                self.breaker.force_open(f"device_{result.error_kind}")
            if abandoned and self.guard.late >= min(self.guard.max_late, self.policy.current().device_concurrency):
                # every slot the cap allows is held by a call the device never finished: it is not answering
                self.breaker.force_open("device_not_answering")
        if trace.ttft_ms is None:
            trace.ttft_ms = result.ttft_ms
        if not trace.device_judged:  # the event's confidence is the first device attempt's
            trace.device_judged = True
            trace.confidence, trace.confidence_source = result.confidence, result.confidence_source
        trace.output_tokens = result.tokens_out
        return result, latency_ms, abandoned

    def _generate(
        self, text: str, kwargs: dict, timeout: float, started: float, on_late_end: Callable[[], None] | None
    ) -> tuple[DeviceResult, bool]:
        """The device's `generate`, on the guard pool when the router must hold it to its timeout; a failure is a
        device error result, never an exception out of route(). The result and whether it was abandoned."""
        if not self.guarded:
            try:
                return self.device.generate(text, **kwargs), False
            except Exception as exc:  # a device backend's failure is a device error, never an exception out of route()
                return DeviceResult("", None, "none", 0, 0.0, 0.0, "error", error_kind=error_kind(exc)), False
        state, value = self.guard.run(
            lambda: self.device.generate(text, **kwargs), timeout / 1000, on_late_end=on_late_end
        )
        if state == DONE and isinstance(value, DeviceResult):
            return value, False
        if state == ABANDONED:
            spent = (self._clock() - started) * 1000
            return DeviceResult("", None, "none", 0, spent, spent, "timeout"), True
        if state == RAISED and isinstance(value, BaseException) and error_kind(value):
            return DeviceResult("", None, "none", 0, 0.0, 0.0, "error", error_kind=error_kind(value)), False
        # raised, not a result, or the guard full of late calls: a device error
        return DeviceResult("", None, "none", 0, 0.0, 0.0, "error"), False
