"""The router with the real model: Gemma 3 270M through llama-cpp-python on the device side and
`llama_cpp.server` on loopback as the stand-in cloud."""

from __future__ import annotations

import pytest

from routerscope.contract.validation import DECISIONS
from routerscope.router.backends import LlamaDevice, OpenAICloud, gemma_path, thermal_state
from routerscope.router.engine import Request, Router
from routerscope.router.policy import DEFAULT_POLICY, PolicyStore
from routerscope.router.sim.standin_cloud import StandInCloud
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
    # 16 s), and up to 1,062 ms in full-suite runs with the other worker busy. The tight figure on a quiet machine
    # is bench/router_budget.py's.
    assert wall_ms <= 600 + 50 + 600
    assert event.latency_ms == pytest.approx(wall_ms, abs=15)
    assert event.entered_device and event.attempts[0].outcome == "timeout"
    # stopped at its 420 ms (later on a loaded machine: the abort lands between graph nodes; 628 ms was seen
    # with the whole suite running), not after the seconds its prefill would take: within the request's own
    # bounded wall time, the 30 % of the budget after L0 absorbing the overshoot
    assert 415 <= event.attempts[0].latency_ms <= wall_ms
    levels = [a.level for a in event.attempts]
    if has_pii:  # never to the cloud: L4 after the device; the model counts the prompt over short_reply's
        # 2,048-token window (the gateway said 1,900), so it runs cut to the window, as L1 with L0's share
        assert response.served_by == "fallback" and levels == [1, 4]
    elif response.served_by == "cloud":
        assert levels == [0, 2]
    else:  # the abort landed so late (a loaded machine) that only L4's reserved 50 ms remained: the canned answer
        # (the router's own time after L0 is counted too, hence the 15 ms margin under the 549 ms line)
        assert response.served_by == "fallback" and levels == [0, 4]
        assert event.attempts[0].latency_ms >= 600 - 50 - 1 - 15


# -- the real device at the router's edges (docs/router.md) ------------------------------------------------------
PHONES = "Call me on any of these numbers: " + ", ".join(
    f"+49 30 {1000 + i * 37:04d}-{i * 7919 % 10000:04d}" for i in range(100)
)


def test_seed000_pii_over_the_real_window_is_counted_by_the_models_tokenizer_and_cut_to_fit(device):
    """docs/sources.md#seed-000: personal data stays on the device or gets a conservative answer. Phone numbers take
    about three Gemma tokens for every four characters, so the usual `len // 4` estimate says the text fits the
    512-token window while the model's own count is several times that: it entered uncut and llama.cpp failed in
    3 ms (canned answer). Counted by the model's tokenizer, it is cut to the window less the output budget, runs
    as L1 with L0's share of the budget, and the device answers."""
    real = device.count_tokens(PHONES)
    assert len(PHONES) // 4 < 512 < real  # the estimate would have let it in whole
    router = Router(device, QuickCloud(), policy=PolicyStore(DEFAULT_POLICY))
    response, event = router.route(
        Request(
            task_type="short_reply",
            text=PHONES,
            session_id="real",
            deadline_ms=60_000,
            expected_output_tokens=8,
            has_pii=True,
        )
    )
    assert DECISIONS.parse(event.to_json())[1] == []
    estimates = (device.ttft_ms, device.tps, device.prefill_tps)
    assert (event.reason, event.degrade_level, event.cloud_calls) == ("pii_pin", 1, 0), (event.attempts, estimates)
    assert event.attempts[0].outcome == "ok" and response.served_by == "device" and response.text
    assert event.input_tokens == real


def test_the_eta_learns_the_real_devices_speed(model):
    """docs/sources.md#seed-000: the gate compares the predicted finish with what remains. After four calls the ETA
    read 489 ms for a reply that took 3,466 ms: the priors barely moved, timeouts taught nothing, and the TTFT
    average already held the prefill the ETA adds again. Now the first measurement replaces the prior and the
    TTFT estimate excludes prefill: the ETA of the fifth call is within a factor of two of what it takes."""
    from routerscope.router.engine import device_eta_ms, prefill_ms

    device = LlamaDevice(model, n_ctx=512, n_threads=1)
    prompt = "Count from one to fifty in words, separated by commas."
    for _ in range(4):
        device.generate(prompt, max_tokens=24, timeout_ms=60_000, degraded=False, commit_tokens=120)
    eta = device_eta_ms(device.ttft_ms, 24, device.tps, prefill_ms(device.count_tokens(prompt), device.prefill_tps))
    result = device.generate(prompt, max_tokens=24, timeout_ms=60_000, degraded=False, commit_tokens=120)
    assert result.outcome == "ok" and result.tokens_out == 24
    assert 0.5 <= eta / result.latency_ms <= 2.0, (eta, result.latency_ms)


def test_a_timeout_mid_prefill_teaches_the_device_its_prefill_is_slower(long_device):
    """A call cut off before its first token is a censored observation: the prompt did not prefill in the time it
    had, so the prefill rate is at most its tokens over that time."""
    long_device.prefill_tps = 1e9  # a wrong, optimistic estimate
    result = long_device.generate(LONG_PROMPT, max_tokens=8, timeout_ms=300, degraded=False, commit_tokens=120)
    assert result.outcome == "timeout" and result.tokens_out == 0
    tokens = long_device.count_tokens(LONG_PROMPT)
    assert long_device.prefill_tps <= tokens / (result.latency_ms / 1000) * 1.01


def test_seed000_llama_decode_failing_for_memory_opens_the_device_breaker(model):
    """docs/sources.md#seed-000 "端侧 … 内存不足 … 时全量上云": llama.cpp reports a full KV cache as `llama_decode
    returned 1`; it was a generic device error and the breaker stayed closed."""
    device = LlamaDevice(model, n_ctx=512, n_threads=1)
    chunked = device._llm.eval

    def full(tokens):
        raise RuntimeError("llama_decode returned 1")

    device._llm.eval = full
    try:
        router = Router(device, QuickCloud(), policy=PolicyStore(DEFAULT_POLICY))
        response, event = router.route(
            Request(task_type="short_reply", text="hello", session_id="real", deadline_ms=20_000)
        )
    finally:
        device._llm.eval = chunked
    assert (event.fallback_type, event.reason, response.served_by) == ("error", "device_error", "cloud")
    assert router.device_breaker.state == "open"
    _, next_event = router.route(Request(task_type="short_reply", text="hello", session_id="real"))
    assert next_event.reason == "device_unavailable"


def test_seed004_a_shadow_run_on_the_real_device_yields_to_a_pii_request(long_device, tmp_path, monkeypatch):
    """docs/sources.md#seed-004-5: shadow never touches the main path. `code_snippet` is in shadow with a prompt whose
    prefill takes seconds; a PII request arrives (cap 1): it was refused the device and got the canned answer in
    0.2 ms. Now the shadow run is stopped (llama.cpp's abort, mid-chunk) and the PII request is served by the
    device. (The router waits `admission.YIELD_S`, 250 ms, for a shadow to yield; the real device yields in 2-85 ms on
    a quiet machine, but its abort lands between compute-graph nodes, which under a full suite's load has taken up
    to ~1 s, and then the request rightly got the canned answer. This test is about the shadow yielding at all, so it
    allows 3 s; the 250 ms rule itself is tested in tests/unit/test_router_admission.py.)"""
    import threading
    import time

    from routerscope.router import admission

    monkeypatch.setattr(admission, "YIELD_S", 3.0)

    long_device.prefill_tps, long_device.tps, long_device.ttft_ms = 400.0, 40.0, 150.0
    lenient = tmp_path / "policy.yaml"  # any confidence serves: the test is about who gets the device
    lenient.write_text(DEFAULT_POLICY.read_text().replace("threshold: 0.60", "threshold: 0.0"))
    router = Router(long_device, QuickCloud(), policy=PolicyStore(lenient))
    shadow_events = []
    router.on_shadow_event = shadow_events.append
    snippet = "Summarise this log. " + " ".join(f"event {i} happened at noon on the third floor." for i in range(70))
    assert 600 < long_device.count_tokens(snippet) < 1024  # admitted (code_snippet takes 1,024), seconds of prefill
    threading.Thread(
        target=router.route,
        args=(Request(task_type="code_snippet", text=snippet, session_id="s1", files=1, deadline_ms=60_000),),
        daemon=True,
    ).start()
    deadline = time.monotonic() + 10
    while router.shadow_in_flight == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)  # well inside the shadow's prefill
    response, event = router.route(
        Request(
            task_type="short_reply",
            text="Say hello.",
            session_id="s2",
            deadline_ms=30_000,
            expected_output_tokens=4,
            has_pii=True,
        )
    )
    assert DECISIONS.parse(event.to_json())[1] == []
    assert (response.served_by, event.reason, event.entered_device) == ("device", "pii_pin", True)
    deadline = time.monotonic() + 10
    while not shadow_events and time.monotonic() < deadline:
        time.sleep(0.05)
    assert shadow_events and shadow_events[0].attempts[0].outcome == "timeout"
    assert shadow_events[0].attempts[0].latency_ms < 5_000  # stopped, not run to the end of its prefill
