"""Nothing the router is handed is trusted to be what its type says: a gateway's request, a backend's result, a
device's estimate. Each is read through here into values in their type and range (docs/router.md), so a NaN or a
string never crashes a request nor admits one on hope."""

from __future__ import annotations

import math
from dataclasses import replace

from routerscope.contract.events import OUTCOMES
from routerscope.router.backends import CloudResult, DeviceResult
from routerscope.router.request import Request

INF = float("inf")
DAY_MS, MAX_TOKENS = 86_400_000, 10_000_000  # the contract's ranges of milliseconds and tokens
INVALID = ("\x00undeclared",)  # a declaration of another type than the contract's: no whitelist holds it


def finite(value, default: float) -> float:
    """`value` as a float when it is a finite number (not a bool), else `default`: what a backend or a gateway
    hands the router is never trusted to be a number."""
    kind = type(value)
    if kind is float:  # the common case first: the router calls this several times a request
        return value if math.isfinite(value) else default
    if kind is int:
        return float(value) if -1e300 < value < 1e300 else default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    value = float(value)
    return value if math.isfinite(value) else default


def sane_device_result(result) -> DeviceResult:
    """A backend's result with every field the router reads within its type and range; anything else is a
    device error (a text that is not text, an unknown outcome). A confidence that is not a finite number in
    [0, 1] reads 0: it can never pass a threshold."""
    if not isinstance(result, DeviceResult) or not isinstance(result.text, str) or result.outcome not in OUTCOMES:
        return DeviceResult("", None, "none", 0, 0.0, 0.0, "error")
    c, n, t, lat = result.confidence, result.tokens_out, result.ttft_ms, result.latency_ms
    if (  # the common case: every field already in range (NaN fails every comparison)
        (c is None or (type(c) is float and 0.0 <= c <= 1.0))
        and type(n) is int
        and n >= 0
        and type(t) in (float, int)
        and 0 <= t < INF
        and type(lat) in (float, int)
        and 0 <= lat < INF
    ):
        return result
    confidence = result.confidence
    if confidence is not None:
        confidence = finite(confidence, 0.0)
        confidence = confidence if 0.0 <= confidence <= 1.0 else 0.0
    tokens = result.tokens_out if isinstance(result.tokens_out, int) and not isinstance(result.tokens_out, bool) else 0
    ttft, latency = finite(result.ttft_ms, 0.0), finite(result.latency_ms, 0.0)
    clean = (confidence, max(0, tokens), max(0.0, ttft), max(0.0, latency))
    if clean == (result.confidence, result.tokens_out, result.ttft_ms, result.latency_ms):
        return result
    return replace(result, confidence=clean[0], tokens_out=clean[1], ttft_ms=clean[2], latency_ms=clean[3])


def sane_cloud_result(result) -> CloudResult:
    if not isinstance(result, CloudResult) or not isinstance(result.text, str) or result.outcome not in OUTCOMES:
        return CloudResult("", 0.0, "error")
    n, lat = result.tokens_out, result.latency_ms
    if type(n) is int and n >= 0 and type(lat) in (float, int) and 0 <= lat < INF:
        return result
    tokens = result.tokens_out if isinstance(result.tokens_out, int) and not isinstance(result.tokens_out, bool) else 0
    return replace(result, tokens_out=max(0, tokens), latency_ms=max(0.0, finite(result.latency_ms, 0.0)))


def sane_request(req: Request) -> Request:
    """The request with every number finite and every declaration of its type: a NaN or infinite budget is no
    budget (0), a negative elapsed time none; `tools` that are not a list of names and a file count that is not
    an integer are kept as declarations the capability matrix never admits (docs/router.md)."""
    d, e, tools, files = req.deadline_ms, req.elapsed_ms, req.tools, req.files
    if (  # the common case: plain numbers in range, no declarations or well-typed ones
        type(d) is int
        and -DAY_MS <= d <= DAY_MS
        and type(e) is int
        and 0 <= e <= DAY_MS
        and (req.input_tokens is None or (type(req.input_tokens) is int and req.input_tokens >= 0))
        and (
            req.expected_output_tokens is None
            or (type(req.expected_output_tokens) is int and req.expected_output_tokens >= 0)
        )
        and (tools is None or (type(tools) is tuple and all(type(x) is str for x in tools)))
        and (files is None or type(files) is int)
    ):
        return req
    changes: dict[str, object] = {}
    deadline, elapsed = finite(req.deadline_ms, 0.0), max(0.0, finite(req.elapsed_ms, 0.0))
    if deadline != req.deadline_ms:
        changes["deadline_ms"] = max(-DAY_MS, min(DAY_MS, deadline))
    if elapsed != req.elapsed_ms:
        changes["elapsed_ms"] = min(DAY_MS, elapsed)
    for name in ("input_tokens", "expected_output_tokens"):
        value = getattr(req, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            changes[name] = None
    tools = req.tools
    if tools is not None:
        listed = tuple(tools) if isinstance(tools, (list, tuple)) else None
        if listed is None or not all(isinstance(t, str) for t in listed):
            changes["tools"] = INVALID
        elif listed is not tools:
            changes["tools"] = listed
    if req.files is not None and (isinstance(req.files, bool) or not isinstance(req.files, int)):
        changes["files"] = -1
    if not changes:
        return req
    return replace(req, **changes)  # type: ignore[arg-type]  # each value was checked for its field above
