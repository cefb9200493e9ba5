"""Time: the request's budget, each level's timeout, the device's ETA and the latency gate (docs/router.md, "The
latency gate, with prefill"; docs/sources.md#seed-000).

The budget only subtracts ("路由层只做减法"): every level's timeout is its share of the budget *remaining when it
starts* — L0 device 0.7, L1 device degraded (once) 0.3, L2 cloud small 0.5, L3 cloud large 0.8 — and never more
than what remains minus L4's 50 ms. The device's ETA includes prefill; when neither the device nor the cloud
fits, the output cap is lowered to what fits. At 30 % of the deadline spent a streaming L0's finish is
re-estimated from its observed token rate (`device_fits`). The device's own estimates are read through
`device_estimates`, never trusted to be numbers.
"""

from __future__ import annotations

from collections.abc import Callable

from routerscope.router.policy import Capability
from routerscope.router.sanity import INF, finite

LEVEL_BUDGET = {0: 0.7, 1: 0.3, 2: 0.5, 3: 0.8}  # share of the budget remaining when the level starts
L4_MS = 50.0  # L4's bound, reserved out of every other level's timeout
MIN_LEVEL_MS = 1.0  # a level given less than this is skipped (no backend answers in under a millisecond)
DECISION_POINT = 0.3  # share of the deadline spent when the router re-judges a streaming L0
GATE_SHARE = 0.9  # stay on device if its ETA fits in 90 % of the remaining budget


def latency_gate(
    remaining_ms: float, device_eta_ms: float, cloud_p90_ms: float, device_cut_ms: float | None = None
) -> str:
    """device if its ETA fits in 90 % of the time the device is given before it is cut (`device_cut_ms`: L0's
    own share for an answer served whole, docs/router.md "The latency gate, with prefill"; default what is
    left); else cloud if its p90 fits; else truncate."""
    if device_eta_ms <= GATE_SHARE * (remaining_ms if device_cut_ms is None else device_cut_ms):
        return "device"
    if cloud_p90_ms <= remaining_ms:
        return "cloud"
    return "truncate"


def device_eta_ms(ttft_ms: float, expected_output_tokens: int, tps: float, prefill_ms: float = 0.0) -> float:
    """The device's finish: time to first token, plus prefilling the input (docs/router.md: a long prompt's
    prefill is most of a small model's time), plus decoding the expected output."""
    return ttft_ms + prefill_ms + expected_output_tokens / max(tps, 1e-6) * 1000


def prefill_ms(input_tokens: int, prefill_tps: float | None) -> float:
    """`input_tokens / prefill_tps` in ms; 0 for a device that does not report a prefill rate."""
    if not prefill_tps or prefill_tps <= 0:
        return 0.0
    return input_tokens / prefill_tps * 1000


def tokens_that_fit(remaining_ms: float, ttft_ms: float, prefill: float, tps: float) -> int:
    """docs/sources.md#seed-000 "裁剪输出": the output cap that still fits 90 % of what the device is *given* (L0's
    share of what remains, `level_timeout_ms(0, …)`) after its first token and prefill, at the device's rate
    (0: none), so a truncated answer finishes inside its own timeout."""
    room_ms = GATE_SHARE * level_timeout_ms(0, remaining_ms) - ttft_ms - prefill
    return max(0, int(room_ms * max(tps, 0.0) / 1000))


def level_timeout_ms(level: int, remaining_ms: float) -> float:
    """A level's timeout: its share of the budget remaining when it starts, never more than what
    remains minus L4's 50 ms (docs/sources.md#seed-000: each level its own timeout, the router only subtracts)."""
    return min(LEVEL_BUDGET[level] * remaining_ms, remaining_ms - L4_MS)


def device_fits(
    remaining_ms: float, elapsed_ms: float, tokens: int, ttft_ms: float, expected_tokens: int, fallback_tps: float
) -> bool:
    """The decision point's re-estimate: the device's time to finish from its observed token rate
    (after the first token; the device's estimate when fewer than two tokens were seen) fits in 90 % of
    the remaining budget."""
    decode_ms = elapsed_ms - ttft_ms
    per_token_ms = decode_ms / (tokens - 1) if tokens >= 2 and decode_ms > 0 else 1000 / max(fallback_tps, 1e-6)
    return max(0, expected_tokens - tokens) * per_token_ms <= GATE_SHARE * remaining_ms


class Budget:
    """The request's budget on the router's clock: what remains, and each level's timeout."""

    def __init__(self, clock: Callable[[], float], deadline_ms: float, elapsed_ms: float):
        self._clock = clock
        self.started = clock()
        self.deadline_ms, self.elapsed_ms = float(deadline_ms), float(elapsed_ms)
        self.total_ms = max(0.0, self.deadline_ms - self.elapsed_ms)

    def spent_ms(self) -> float:
        return (self._clock() - self.started) * 1000

    def remaining_ms(self) -> float:
        return self.total_ms - self.spent_ms()

    def timeout_ms(self, level: int) -> float:
        return level_timeout_ms(level, self.remaining_ms())

    def decision_point_in_ms(self) -> float:
        """How far from now the deadline is 30 % spent (0 when it already is)."""
        return max(0.0, DECISION_POINT * self.deadline_ms - self.elapsed_ms - self.spent_ms())


def device_estimates(device) -> tuple[float, float, float | None]:
    """`device`'s time to first token, decode and prefill rates as the gate reads them: an estimate that is
    not a finite non-negative number reads as a slow device (1 s, 1 token/s; no prefill rate), never as a
    reason to crash or to admit on hope."""
    ttft, tps = getattr(device, "ttft_ms", None), getattr(device, "tps", None)
    prefill = getattr(device, "prefill_tps", None)
    if (  # the common case: finite positive floats (NaN fails every comparison)
        type(ttft) is float
        and type(tps) is float
        and 0 <= ttft < INF
        and 0 < tps < INF
        and (prefill is None or (type(prefill) is float and 0 < prefill < INF))
    ):
        return ttft, tps, prefill
    ttft, tps = finite(ttft, -1.0), finite(tps, -1.0)
    prefill = None if prefill is None else finite(prefill, -1.0)
    return (
        ttft if ttft >= 0 else 1000.0,
        tps if tps > 0 else 1.0,
        prefill if prefill is None or prefill > 0 else None,
    )


def cut_at_l0(cap: Capability) -> bool:
    """Whether the device must finish inside L0's own share of the budget: an answer served whole never
    commits, so L0's cut ends it, and a cut answer is never served. A free-text answer past its commit point
    runs on (or is served up to its last sentence), so it is judged against the budget (docs/router.md)."""
    return cap.whole
