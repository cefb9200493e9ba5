"""LiteLLM's real Router → RouterscopeCallback → the real broker → the real loader → the metrics.

Offline: deployments answer with LiteLLM's own `mock_response`; the device group's failures are
LiteLLM's `mock_timeout` (a `litellm.Timeout`) and `mock_testing_fallbacks` (an `InternalServerError`),
so the Router runs its real fallback code. Golden numbers by hand from docs/metrics.md:

* 20 requests to the device group: 10 served there, 6 device timeouts and 4 device errors that fell
  back to `cloud-small`; plus 5 requests LiteLLM sends straight to the cloud (one without metadata).
  §2: fallback_rate = 10 / 20 (device-entered denominator), not 10 / 25; naive = 10 / 25.
* §3 labels for LiteLLM's response ids: the 6 timeout fallbacks labeled, 2 of them device-acceptable
  → false_fallback_rate 2 / 6; the 10 device-served labeled, 3 not acceptable → missed 3 / 10.
  (Error fallbacks have no device answer to judge.)
* §4 sessions: device request i is in session s{i % 4}; the cloud ones in s4, the one without
  metadata in `unknown`. Cloud calls per session: s0 2, s1 2, s2 3, s3 3, s4 4, unknown 1 →
  mean 15 / 6 = 2.5, p50 2.5, p95 3 + 0.75 × (4 − 3) = 3.75.
Half the calls are sync (`router.completion`), half async (`router.acompletion`).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from routerscope.instrumentation.litellm import RouterscopeCallback
from routerscope.warehouse.analytics.metrics import compute
from routerscope.warehouse.client import open_warehouse
from routerscope.warehouse.ingest.loader import load
from tests.support.home import settings_for

litellm = pytest.importorskip("litellm")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning:pydantic.*"),
]

OFFLINE = {"api_base": "http://127.0.0.1:9/v1", "api_key": "unused"}  # never contacted: every deployment is mocked
MODEL_LIST = [
    {
        "model_name": "device",
        "litellm_params": {"model": "openai/gemma-3-270m", **OFFLINE, "mock_response": "on device"},
    },
    {
        "model_name": "cloud-small",
        "litellm_params": {"model": "openai/gpt-4o-mini", **OFFLINE, "mock_response": "from the cloud"},
    },
]
MESSAGES = [{"role": "system", "content": "Answer in one short sentence."}, {"role": "user", "content": "good morning"}]


def device_request(i: int) -> dict:
    """Request i of the scripted mix: 0–9 served on the device, 10–15 time out there, 16–19 error."""
    call = {
        "model": "device",
        "messages": MESSAGES,
        "metadata": {"session_id": f"s{i % 4}", "task_type": "short_reply"},
    }
    if 10 <= i < 16:
        call.update(mock_timeout=True, timeout=0.05)
    elif i >= 16:
        call.update(mock_testing_fallbacks=True)
    return call


def cloud_request(i: int) -> dict:
    metadata = {"session_id": "s4", "task_type": "short_reply"} if i < 4 else {}
    return {"model": "cloud-small", "messages": MESSAGES, "metadata": metadata}


@pytest.fixture
def callback(broker_settings, home, monkeypatch):
    """Constructed with only device_models: it reads the command line's environment."""
    monkeypatch.setenv("ROUTERSCOPE_HOME", str(home))
    monkeypatch.setenv("ROUTERSCOPE_KAFKA_BOOTSTRAP", broker_settings.kafka_bootstrap())
    cb = RouterscopeCallback(device_models=["device"])
    previous = litellm.callbacks
    litellm.callbacks = [cb]
    yield cb
    litellm.callbacks = previous
    cb.close()


def test_litellm_router_fallbacks_through_broker_and_loader_give_the_scripted_metrics(callback, home, broker_settings):
    settings = settings_for(home, ROUTERSCOPE_KAFKA_BOOTSTRAP=broker_settings.kafka_bootstrap())
    router = litellm.Router(
        model_list=MODEL_LIST, fallbacks=[{"device": ["cloud-small"]}], num_retries=0, disable_cooldowns=True
    )
    start = datetime.now(UTC) - timedelta(seconds=1)
    calls = [device_request(i) for i in range(20)] + [cloud_request(i) for i in range(5)]
    responses: dict[int, object] = {}
    for i in range(0, 25, 2):  # even: sync
        responses[i] = router.completion(**calls[i])

    async def odd():
        for i in range(1, 25, 2):
            responses[i] = await router.acompletion(**calls[i])
        assert await callback.aflush(60)

    asyncio.run(odd())
    assert callback.flush(60)
    assert callback.stats["recorded"] == 25 and callback.stats["rejected"] == 0
    assert (callback.stats["missing_session_id"], callback.stats["missing_task_type"]) == (1, 1)
    served = {i: r.choices[0].message.content for i, r in responses.items()}
    assert [served[i] for i in range(20)] == ["on device"] * 10 + ["from the cloud"] * 10

    load(settings, idle_timeout_s=0.5)
    with open_warehouse(settings) as client:
        unlabeled = compute(client, start, datetime.now(UTC) + timedelta(minutes=1))["overall"]
    assert (unlabeled["fallback_rate"], unlabeled["false_fallback_labeled"], unlabeled["false_fallback_rate"]) == (
        0.5,
        0,
        None,
    )
    for i in range(10, 16):  # the timeout fallbacks: was the device's answer acceptable after all?
        callback.label(responses[i].id, device_acceptable=i < 12, source="human_review")
    for i in range(10):  # the device-served
        callback.label(responses[i].id, device_acceptable=i >= 3, source="human_review")
    assert callback.flush(60)
    load(settings, idle_timeout_s=0.5)
    end = datetime.now(UTC) + timedelta(minutes=1)
    with open_warehouse(settings) as client:
        metrics = compute(client, start, end)
        ids = {
            row[0]
            for row in client.query(
                "SELECT request_id FROM routerscope.decisions FINAL WHERE event_time >= {s:DateTime64(3)}",
                parameters={"s": start},
            ).result_rows
        }
    overall = metrics["overall"]
    from routerscope.instrumentation.pii import pseudonymise_request_id

    recorded = {pseudonymise_request_id(r.id) for r in responses.values()}
    assert ids >= recorded, "request_id is the keyed hash of the id LiteLLM returned"
    assert (overall["requests"], overall["device_entered"], overall["sessions"]) == (25, 20, 6)
    assert overall["fallback_rate"] == pytest.approx(10 / 20)
    assert overall["naive_fallback_rate"] == pytest.approx(10 / 25)
    assert (overall["timeout_fallback_rate"], overall["error_fallback_rate"]) == (
        pytest.approx(6 / 20),
        pytest.approx(4 / 20),
    )
    assert (overall["false_fallback_labeled"], overall["false_fallback_rate"]) == (6, pytest.approx(2 / 6))
    assert (overall["missed_fallback_labeled"], overall["missed_fallback_rate"]) == (10, pytest.approx(3 / 10))
    assert overall["cloud_calls_per_session"] == {
        "mean": pytest.approx(2.5),
        "p50": pytest.approx(2.5),
        "p95": pytest.approx(3.75),
    }
    assert overall["degrade_share"]["L0"] == pytest.approx(10 / 25) and overall["degrade_share"]["L2"] == pytest.approx(
        15 / 25
    )
    # cost from LiteLLM's own price table: 15 answered cloud calls, 10 prompt + 20 completion tokens each
    per_call = sum(litellm.cost_per_token(model="gpt-4o-mini", prompt_tokens=10, completion_tokens=20))
    assert overall["cost_usd"]["total"] == pytest.approx(15 * per_call)
    assert metrics["by_task_type"]["unknown"]["requests"] == 1, "missing metadata is recorded as unknown"
    assert metrics["by_task_type"]["short_reply"]["fallback_rate"] == pytest.approx(10 / 20)
