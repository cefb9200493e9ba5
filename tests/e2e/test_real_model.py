"""The router with the real model: Gemma 3 270M through llama-cpp-python on the device side and
`llama_cpp.server` on loopback as the stand-in cloud."""

from __future__ import annotations

import pytest

from instrumentation.contract import DECISIONS
from router.backends import LlamaDevice, OpenAICloud, gemma_path, thermal_state
from router.engine import Request, Router
from router.policy import DEFAULT_POLICY, PolicyStore
from router.sim.standin_cloud import StandInCloud

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
        # seed 003's ledger, measured for real: the first call after loading is the cold start, with its load time;
        # the rates are llama.cpp's own timings; the thermal state is the OS's (`unknown` without thermal zones)
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
