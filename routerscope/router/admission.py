"""Device admission (docs/router.md, "The concurrency cap"; docs/sources.md#seed-004-6): the breaker's verdict, then
a slot under the device's concurrency cap, or the reason there is none (`device_unavailable`, `device_busy`): the
excess goes to the cloud, never into a queue. Shadow runs take only capacity live traffic does not need, and a
live request takes the device back from a shadow run that can yield (docs/sources.md#seed-004-5: shadow never
touches the main path)."""

from __future__ import annotations

import threading
import time

from routerscope.router.backends import Cancel
from routerscope.router.breaker import OPEN, CircuitBreaker
from routerscope.router.policy import Policy

YIELD_S = (
    0.25  # how long a live request waits for a shadow run asked to yield (the real device: 2-85 ms, docs/router.md)
)


class DeviceSlots:
    """The device's in-flight counts and its shadow runs' cancels. `cancels`: the device takes a `Cancel` (a shadow
    run on it can yield); `enforce`: a live request waits (up to YIELD_S, on the real clock) for the shadow runs
    it asked to yield."""

    def __init__(self, breaker: CircuitBreaker, *, cancels: bool, enforce: bool):
        self.breaker, self.cancels, self.enforce = breaker, cancels, enforce
        self._slots = threading.Lock()  # guards the in-flight counts only: nothing ever waits on the device
        self._yielded = threading.Condition(self._slots)  # a shadow run ended (a live request may wait YIELD_S)
        self.device_in_flight = 0  # live device calls running, an abandoned one until it really ends
        self.shadow_in_flight = 0  # shadow runs: only on a device no live request wants (docs/router.md)
        self._shadow_cancels: set[Cancel] = set()

    def enter(self, policy: Policy) -> str | None:
        """None when the device may run this live request (a slot is taken: release it); else the reason. The
        cap counts live calls, an abandoned one until it really ends, and the shadow runs of a device that cannot
        yield; a shadow run on a device that can is asked to yield at once (docs/sources.md#seed-004-5: shadow
        never touches the main path)."""
        if self.breaker.state == OPEN:
            return "device_unavailable"
        cap = policy.device_concurrency
        with self._slots:
            held = self.device_in_flight + (self._ignoring() if self.cancels else self.shadow_in_flight)
            if held >= cap:
                return "device_busy"
            self.device_in_flight += 1
            yielding = [c for c in self._shadow_cancels if not c.is_set()] if self._shadow_cancels else ()
        for cancel in yielding:
            cancel.set()
        if yielding and self.enforce and not self._yield(cap):
            self.release()  # the shadow run ignored its cancel: it still holds the device
            return "device_busy"
        if not self.breaker.allow():  # half-open with its one trial already out
            self.release()
            return "device_unavailable"
        return None

    def _ignoring(self) -> int:
        """Shadow runs asked to yield that are still running (under `_slots`): a backend that takes `cancel` and
        ignores it still holds the device, so they count against the cap (docs/router.md)."""
        return sum(1 for c in self._shadow_cancels if c.is_set())

    def _yield(self, cap: int) -> bool:
        """Wait up to YIELD_S for the shadow runs just asked to yield to end, while they and the live calls are
        over the cap; False when they did not (a backend that ignores `cancel`)."""
        deadline = time.monotonic() + YIELD_S
        with self._yielded:
            while self.device_in_flight + self._ignoring() > cap:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._yielded.wait(left)
        return True

    def release(self) -> None:
        with self._slots:
            self.device_in_flight -= 1

    def enter_shadow(self, policy: Policy) -> Cancel | str:
        """A shadow run's slot, on capacity live traffic does not need; the Cancel a live request sets to take the
        device back. A device that can yield (`cancel`) runs one shadow while no live request is on it; one that
        cannot only in a slot the cap leaves spare beyond one kept for live traffic (with `device_concurrency: 1`,
        never). Else the reason."""
        if self.breaker.state == OPEN:
            return "device_unavailable"
        cancel = Cancel()
        with self._slots:
            if self.cancels:
                busy = self.device_in_flight > 0 or self.shadow_in_flight >= 1
            else:
                held = self.device_in_flight + self.shadow_in_flight
                busy = self.shadow_in_flight >= 1 or held + 1 >= policy.device_concurrency
            if busy:
                return "device_busy"
            self.shadow_in_flight += 1
            self._shadow_cancels.add(cancel)
        if not self.breaker.allow():
            self.release_shadow(cancel)
            return "device_unavailable"
        return cancel

    def release_shadow(self, cancel: Cancel) -> None:
        with self._yielded:
            self.shadow_in_flight -= 1
            self._shadow_cancels.discard(cancel)
            self._yielded.notify_all()
