"""`routerscope.router.sanity` and `routerscope.router.trace`: what the router is handed read into its type and
range; a request's trace merging the device's measurements and charging the cloud's calls."""

from __future__ import annotations

import pytest

from routerscope.router.backends import CloudResult, DeviceResult
from routerscope.router.request import Request
from routerscope.router.sanity import INVALID, finite, sane_cloud_result, sane_device_result, sane_request
from routerscope.router.trace import Trace


def test_only_finite_numbers_are_numbers():
    assert finite(3, -1.0) == 3.0 and finite(2.5, -1.0) == 2.5
    assert [finite(v, -1.0) for v in (float("nan"), float("inf"), True, "3", None, 10**400)] == [-1.0] * 6


def test_a_request_with_no_budget_or_undeclared_declarations_is_read_safely():
    req = sane_request(
        Request("tool_call", "t", "s", deadline_ms=float("nan"), elapsed_ms=-3, tools=["a", 1], files=2.5)
    )
    assert (req.deadline_ms, req.elapsed_ms, req.tools, req.files) == (0.0, 0.0, INVALID, -1)
    fine = Request("tool_call", "t", "s", tools=("lookup",))
    assert sane_request(fine) is fine  # nothing to change: the same object


def test_a_backends_result_out_of_range_is_clamped_or_an_error():
    assert sane_device_result("not a result").outcome == "error"
    odd = sane_device_result(DeviceResult("a", 1.5, "logprob", -2, float("nan"), 5.0, "ok"))
    assert (odd.confidence, odd.tokens_out, odd.ttft_ms, odd.latency_ms) == (0.0, 0, 0.0, 5.0)  # never passes
    assert sane_cloud_result(CloudResult("a", 1.0, "sideways")).outcome == "error"
    assert sane_cloud_result(CloudResult("a", float("inf"), "ok", True)) == CloudResult("a", 0.0, "ok", 0)


def test_the_trace_keeps_the_highest_peak_and_a_cold_start_and_charges_input_plus_output():
    trace = Trace(input_tokens=1000, prices={"cloud-small": 0.002})
    trace.measure({"peak_mem_mb": 300.0, "cold_start": True, "load_ms": 900.0, "decode_tps": 20.0})
    trace.measure({"peak_mem_mb": 250.0, "cold_start": False, "load_ms": None, "decode_tps": 25.0})
    assert trace.device_stats == {"peak_mem_mb": 300.0, "cold_start": True, "load_ms": 900.0, "decode_tps": 25.0}
    trace.charge("cloud-small", 500)
    assert trace.cost_usd == pytest.approx(0.003)  # 1500 tokens at $0.002 per 1k
    trace.add(2, "ok", -4.0, abandoned=True)
    assert (trace.attempts[0].latency_ms, trace.attempts[0].abandoned) == (0.0, True)
