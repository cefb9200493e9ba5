"""The router with the real model: Gemma 3 270M through llama-cpp-python on the device side and
`llama_cpp.server` on loopback as the stand-in cloud."""

from __future__ import annotations

import pytest

from instrumentation.contract import DECISIONS
from router.backends import LlamaDevice, OpenAICloud, gemma_path, thermal_state
from router.engine import Request, Router
from router.policy import DEFAULT_POLICY, PolicyStore
from router.sim.standin_cloud import StandInCloud
from tests.support.fakes import QuickCloud

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return gemma_path(tmp_path_factory.mktemp("models-home"))


@pytest.fixture(scope="module")
def standin(model, tmp_path_factory):
    cloud = StandInCloud(model, tmp_path_factory.mktemp("cloud") / "server.log").wait_ready()
    yield cloud
    cloud.stop()


@pytest.fixture(scope="module")
def device(model):
    return LlamaDevice(model, n_ctx=512, n_threads=1)


@pytest.mark.timeout(300)  # the stand-in cloud loads Gemma first
def test_real_requests_carry_logprob_confidence(device, standin, tmp_path):
    router = Router(
        device, OpenAICloud(standin.url, {2: "cloud-small", 3: "cloud-small"}), policy=PolicyStore(DEFAULT_POLICY)
    )
    prompts = ["Reply with one word: hello", "What colour is the sky? One word."]
    for i, prompt in enumerate(prompts):
        response, event = router.route(
            Request(
                task_type="short_reply", text=prompt, session_id="real", deadline_ms=60_000, expected_output_tokens=8
            )
        )
        assert DECISIONS.parse(event.to_json())[1] == []
        assert event.entered_device and event.device_model == "gemma-3-270m-q4_k_m"
        assert event.confidence_source == "logprob" and 0.0 <= event.confidence <= 1.0
        assert response.text
        # the ledger of docs/sources.md#seed-003, measured for real: the first call after loading is the cold
        # start, with its load time; the rates are llama.cpp's own timings; the thermal state is the OS's
        # (`unknown` without thermal zones)
        stats = event.device_stats
        assert stats.cold_start is (i == 0) and (stats.load_ms > 0 if i == 0 else stats.load_ms is None)
        assert stats.peak_mem_mb > 100 and stats.decode_tps > 0 and stats.prefill_tps > 0
        assert stats.thermal_state == thermal_state()
        assert event.rollout_stage == "full" and event.all_cloud_cost_usd > 0


def test_a_threshold_above_any_confidence_sends_the_request_to_the_cloud(device, standin, tmp_path):
    strict = tmp_path / "policy.yaml"
    strict.write_text(
        DEFAULT_POLICY.read_text()
        .replace("threshold: 0.60", "threshold: 1.0")
        .replace("l1_enabled: true", "l1_enabled: false")
    )
    router = Router(device, OpenAICloud(standin.url, {2: "cloud-small", 3: "cloud-small"}), policy=PolicyStore(strict))
    response, event = router.route(
        Request(
            task_type="short_reply",
            text="Write a short greeting for a friend.",
            session_id="real",
            deadline_ms=60_000,
            expected_output_tokens=16,
        )
    )
    assert event.confidence < 1.0
    assert (event.fallback_type, event.reason) == ("quality", "low_confidence")
    assert [a.level for a in event.attempts] == [0, 2] and event.cloud_calls == 1
    assert response.served_by == "cloud" and response.text and event.cloud_model == "cloud-small"


# -- the real device under a short budget (docs/router.md, "The router enforces the budget") ----------
LONG_PROMPT = "Summarise this log. " + " ".join(f"event {i} happened at noon on the third floor." for i in range(190))


@pytest.fixture(scope="module")
def long_device(model):
    return LlamaDevice(model, n_ctx=4096, n_threads=1)


def test_a_long_prompt_whose_prefill_cannot_fit_never_enters_the_device(long_device, tmp_path):
    """~1.9k tokens of prompt, 600 ms left: the device's ETA includes prefill (input / prefill_tps), which
    alone is seconds: the cloud serves it and the device is never tried."""
    router = Router(long_device, QuickCloud(), policy=PolicyStore(DEFAULT_POLICY))
    _, event = router.route(
        Request(task_type="short_reply", text=LONG_PROMPT, session_id="real", deadline_ms=600, input_tokens=1900)
    )
    assert (event.entered_device, event.reason, event.degrade_level) == (False, "latency_pressure", 2)


@pytest.mark.parametrize("has_pii", [False, True])
def test_the_real_device_is_cut_mid_prefill_at_its_timeout(long_device, tmp_path, has_pii):
    """Measured before: 16,629 ms for a 600 ms budget (prefill could not be interrupted). With an estimate
    that wrongly lets the long prompt in, the device is stopped mid-prefill at L0's 420 ms (llama.cpp's
    abort callback, between prefill chunks and compute-graph nodes) and the request ends within 650 ms
    (+ slack), the cloud serving it (or L4 for a PII request, which never goes to the cloud)."""
    import time

    router = Router(long_device, QuickCloud(), policy=PolicyStore(DEFAULT_POLICY))
    long_device.prefill_tps, long_device.tps, long_device.ttft_ms = 1e9, 1e6, 1.0  # a wrong, optimistic estimate
    started = time.monotonic()
    response, event = router.route(
        Request(
            task_type="short_reply",
            text=LONG_PROMPT,
            session_id="real",
            deadline_ms=600,
            input_tokens=1900,
            expected_output_tokens=8,
            has_pii=has_pii,
        )
    )
    wall_ms = (time.monotonic() - started) * 1000
    assert DECISIONS.parse(event.to_json())[1] == []
    # budget + L4's 50 ms + scheduling slack; the slack is wider than the hostile-backend tests' 40 ms because
    # llama.cpp's abort lands between compute-graph nodes, which on two cores shared with other work took up to
    # ~250 ms more (732 ms with the suite alone, 846 ms under a load average of 10; the prefill alone would take
    # 16 s). The tight figure on a quiet machine is bench/router_budget.py's.
    assert wall_ms <= 600 + 50 + 350
    assert event.latency_ms == pytest.approx(wall_ms, abs=15)
    assert event.entered_device and event.attempts[0].outcome == "timeout"
    # stopped at its 420 ms (later on a loaded machine: the abort lands between graph nodes; 628 ms was seen
    # with the whole suite running), not after the seconds its prefill would take: within the request's own
    # bounded wall time, the 30 % of the budget after L0 absorbing the overshoot
    assert 415 <= event.attempts[0].latency_ms <= wall_ms
    levels = [a.level for a in event.attempts]
    if has_pii:  # never to the cloud: L4 after the device
        assert response.served_by == "fallback" and levels == [0, 4]
    elif response.served_by == "cloud":
        assert levels == [0, 2]
    else:  # the abort landed so late (a loaded machine) that only L4's reserved 50 ms remained: the canned answer
        # (the router's own time after L0 is counted too, hence the 15 ms margin under the 549 ms line)
        assert response.served_by == "fallback" and levels == [0, 4]
        assert event.attempts[0].latency_ms >= 600 - 50 - 1 - 15
