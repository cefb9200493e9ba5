"""Hard deadlines for backends that cannot cooperate (docs/router.md, "The router enforces the budget").

A Python thread cannot be killed. A backend that honours its timeout by itself (`LlamaDevice` stops
between prefill chunks and tokens, `OpenAICloud` holds one total deadline over connect and stream; the
simulated ones) declares `honours_deadline = True` and is called on the request's own thread. Any
other backend (a user's, the model worker's pipe) is called on a `Guard`'s bounded pool: the router
waits for it until the level's timeout on its own clock, and past that *abandons* it: the attempt is a
`timeout` marked `abandoned`, the call's late result is dropped when it arrives and never served.

An abandoned call still runs on its pool thread until the backend returns, so the pool bounds them:
at most `workers` calls run at once (on time or late), and once `max_late` abandoned calls are still
running, a new call is refused at once (`full`: the attempt is an `error`, the breaker counts it)
instead of queueing behind a hung backend. `abandoned_total` counts every abandonment; `late` is how
many abandoned calls are running now.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

DONE, RAISED, ABANDONED, FULL = "done", "raised", "abandoned", "full"
IDLE_S = 30.0  # a pool thread with nothing to do for this long ends (a router of many quiet ones keeps none)


def honours_deadline(backend) -> bool:
    """Whether `backend` returns within the timeout it is given by itself (no guard thread needed)."""
    return getattr(backend, "honours_deadline", False) is True


class _Call:
    __slots__ = ("fn", "done", "result", "error", "abandoned", "on_late_end")

    def __init__(self, fn: Callable[[], Any], on_late_end: Callable[[], None] | None = None):
        self.fn, self.done = fn, threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self.abandoned = False
        self.on_late_end = on_late_end


class Guard:
    def __init__(self, name: str, workers: int = 8, max_late: int = 4):
        if not 1 <= max_late <= workers:
            raise ValueError("Guard: need 1 <= max_late <= workers")
        self.name, self.workers, self.max_late = name, workers, max_late
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[_Call] = queue.SimpleQueue()
        self._threads = 0  # started on demand: a router whose backends all cooperate starts none
        self._idle = 0
        self.in_flight = 0  # calls on the pool now, on time or late
        self.late = 0  # abandoned calls still running
        self.abandoned_total = 0

    def run(
        self, fn: Callable[[], Any], timeout_s: float, on_late_end: Callable[[], None] | None = None
    ) -> tuple[str, Any]:
        """`fn()` on the pool, waited for at most `timeout_s`: (done, result), (raised, exception),
        (abandoned, None) past the timeout, or (full, None) when the pool has no room. `on_late_end` runs on the
        pool thread when an abandoned call really ends (the router holds the device's slot until then)."""
        call = _Call(fn, on_late_end)
        with self._lock:
            if self.in_flight >= self.workers or self.late >= self.max_late:
                return FULL, None
            self.in_flight += 1
            if self._idle == 0:  # every thread is busy (or late): one more, never past `workers`
                self._threads += 1
                self._idle += 1
                threading.Thread(target=self._work, name=f"routerscope-{self.name}-guard", daemon=True).start()
            self._idle -= 1
        self._queue.put(call)
        if not call.done.wait(max(0.0, timeout_s)):
            with self._lock:
                if not call.done.is_set():
                    call.abandoned = True
                    self.late += 1
                    self.abandoned_total += 1
                    return ABANDONED, None
        if call.error is not None:
            return RAISED, call.error
        return DONE, call.result

    def _work(self) -> None:
        # daemon threads: a backend that never returns cannot keep the process from exiting
        while True:
            try:
                call = self._queue.get(timeout=IDLE_S)
            except queue.Empty:
                with self._lock:
                    if self._idle > 0:  # no call is on its way to this thread (run() reserves one first)
                        self._idle -= 1
                        self._threads -= 1
                        return
                continue
            try:
                call.result = call.fn()
            except BaseException as exc:  # handed to the caller as an error attempt
                call.error = exc
            with self._lock:
                call.done.set()
                self.in_flight -= 1
                self._idle += 1
                late_end = call.abandoned
                if late_end:
                    self.late -= 1
            if late_end and call.on_late_end is not None:
                try:
                    call.on_late_end()
                except Exception:  # noqa: BLE001 (a pool thread has no one to raise to)
                    pass
