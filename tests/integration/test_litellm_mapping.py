"""How RouterscopeCallback maps what LiteLLM's real Router did onto the decision contract: the cases
the end-to-end test's mix does not cover (context-window fallbacks, a second cloud group, nothing
answering, a cloud group falling back to the device, badly formed metadata). Real LiteLLM, offline
(`mock_response` deployments); events collected in memory and checked against the contract."""

from __future__ import annotations

import pytest

from routerscope.contract.validation import DECISIONS
from routerscope.instrumentation.sdk import Recorder
from tests.support.litellm_models import DEVICE, MESSAGES, METADATA, MODEL_LIST
from tests.support.telemetry import stack

litellm = pytest.importorskip("litellm")
from routerscope.instrumentation.litellm import RouterscopeCallback  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning:pydantic.*")


@pytest.fixture
def collected():
    telemetry, spans, emitter = stack()
    callback = RouterscopeCallback(device_models=DEVICE, recorder=Recorder(telemetry, policy_version="litellm"))
    previous = litellm.callbacks
    litellm.callbacks = [callback]
    yield callback, emitter, spans
    litellm.callbacks = previous
    callback.close()


def route(model, fallbacks=None, context_window_fallbacks=None, **call):
    router = litellm.Router(
        model_list=MODEL_LIST,
        fallbacks=fallbacks or [],
        context_window_fallbacks=context_window_fallbacks or [],
        num_retries=0,
        disable_cooldowns=True,
    )
    try:
        return router.completion(model=model, messages=MESSAGES, **{"metadata": dict(METADATA), **call})
    except Exception as exc:  # the application sees LiteLLM's exception; routerscope still records the request
        return exc


def only_event(callback, emitter):
    assert callback.flush(10)
    events = emitter.decisions()
    assert len(events) == 1 and all(DECISIONS.parse(m.value)[1] == [] for m in emitter.messages)
    return events[0]


def summary(e):
    return (
        e["entered_device"],
        e["fallback_type"],
        e["reason"],
        [(a["level"], a["outcome"]) for a in e["attempts"]],
        e["cloud_calls"],
    )


def test_a_context_window_miss_is_capability_and_never_entered_the_device(collected):
    callback, emitter, _ = collected
    route("device-small-window", context_window_fallbacks=[{"device-small-window": ["cloud-small"]}])
    assert summary(only_event(callback, emitter)) == (False, "capability", "capability_miss", [(2, "ok")], 1)


def test_the_second_cloud_group_is_level_3_and_every_cloud_call_counts(collected):
    callback, emitter, _ = collected
    response = route("device-broken", fallbacks=[{"device-broken": ["cloud-small-down", "cloud-large"]}])
    event = only_event(callback, emitter)
    assert summary(event) == (True, "error", "device_error", [(0, "error"), (2, "error"), (3, "ok")], 2)
    from routerscope.instrumentation import pii

    request_id = pii.pseudonymise_request_id(response.id)  # an id LiteLLM chose: recorded as its keyed hash
    assert (event["request_id"], event["cloud_model"], event["degrade_level"]) == (request_id, "openai/gpt-4o", 3)


def test_when_nothing_answers_the_request_ends_at_level_4(collected):
    callback, emitter, _ = collected
    raised = route("device-broken", fallbacks=[{"device-broken": ["cloud-small-down"]}])
    assert isinstance(raised, Exception)
    callback.failure_settle_s = 0.1  # as after 30 s of silence
    event = only_event(callback, emitter)
    assert summary(event) == (True, "error", "device_error", [(0, "error"), (2, "error"), (4, "error")], 1)


def test_a_cloud_group_falling_back_to_the_device_keeps_levels_in_order(collected):
    callback, emitter, _ = collected
    route("cloud-small-down", fallbacks=[{"cloud-small-down": ["device"]}])
    assert summary(only_event(callback, emitter)) == (True, "none", "cloud_unavailable", [(0, "ok")], 1)


@pytest.mark.parametrize(
    "metadata, expected, counted",
    [
        ({"session_id": "s9", "task_type": "Short-Reply"}, ("s9", "short_reply"), {}),
        (
            {"session_id": "", "task_type": "9lives"},
            ("unknown", "unknown"),
            {"missing_session_id": 1, "missing_task_type": 1},
        ),
        ({"session_id": "canary.person@example.com", "task_type": None}, (None, "unknown"), {"missing_task_type": 1}),
    ],
    ids=["normalised", "unusable", "personal-session"],
)
def test_metadata_is_normalised_missing_is_unknown_and_counted(collected, metadata, expected, counted):
    callback, emitter, _ = collected
    route("device", metadata=metadata)
    event = only_event(callback, emitter)
    session, task_type = expected
    assert event["task_type"] == task_type
    from routerscope.instrumentation import pii

    # a session id is recorded as its keyed hash whatever it holds (docs/operations.md, the PII key)
    assert event["session_id"] == pii.pseudonymise(session or metadata["session_id"]) != metadata["session_id"]
    assert {k: callback.stats[k] for k in ("missing_session_id", "missing_task_type") if callback.stats[k]} == counted


def test_attempt_spans_carry_litellm_models_and_providers(collected):
    callback, emitter, exporter = collected
    route("device-broken", fallbacks=[{"device-broken": ["cloud-small"]}])
    only_event(callback, emitter)
    spans = exporter.get_finished_spans()
    parent = next(s for s in spans if s.name == "route short_reply")
    children = sorted(
        (s for s in spans if s.parent and s.parent.span_id == parent.context.span_id), key=lambda s: s.start_time
    )
    assert [(c.name, c.attributes["gen_ai.provider.name"]) for c in children] == [
        ("chat openai/gemma-3-270m-broken", "openai"),
        ("chat openai/gpt-4o-mini", "openai"),
    ]
    assert parent.end_time >= children[-1].end_time >= children[0].start_time >= parent.start_time


def test_retries_within_the_device_group_are_each_an_l0_attempt_and_streams_are_recorded(collected):
    callback, emitter, _ = collected
    router = litellm.Router(
        model_list=MODEL_LIST,
        fallbacks=[{"device-broken": ["cloud-small"]}],
        num_retries=1,
        retry_after=0,
        disable_cooldowns=True,
    )
    router.completion(model="device-broken", messages=MESSAGES, metadata=dict(METADATA))
    stream = router.completion(model="device", messages=MESSAGES, metadata=dict(METADATA), stream=True)
    assert "".join(chunk.choices[0].delta.content or "" for chunk in stream) == "on device"
    assert callback.flush(10)
    retried, streamed = sorted(emitter.decisions(), key=lambda e: e["degrade_level"], reverse=True)
    assert summary(retried) == (True, "error", "device_error", [(0, "error")] * 2 + [(2, "ok")], 1)
    assert summary(streamed) == (True, "none", "default", [(0, "ok")], 0)


def test_a_content_policy_refusal_on_the_device_is_a_device_error(collected):
    """Only timeouts and context-window misses have their own fallback type; other errors are `error`."""
    callback, emitter, _ = collected
    router = litellm.Router(
        model_list=MODEL_LIST,
        content_policy_fallbacks=[{"device": ["cloud-small"]}],
        num_retries=0,
        disable_cooldowns=True,
    )
    router.completion(
        model="device", messages=MESSAGES, metadata=dict(METADATA), mock_testing_content_policy_fallbacks=True
    )
    assert summary(only_event(callback, emitter)) == (True, "error", "device_error", [(0, "error"), (2, "ok")], 1)


def test_long_ids_are_hashed_and_out_of_range_budgets_clamped_and_the_decision_recorded(collected):
    """Issue: an id over 128 characters or a deadline over a day dropped the whole decision (counted
    only in `stats['rejected']`)."""
    callback, emitter, _ = collected
    long_session, long_request = "s" * 300, "r" * 200
    metadata = {**METADATA, "session_id": long_session, "request_id": long_request, "deadline_ms": 10**12}
    metadata["elapsed_ms"] = 5 * 86_400_000
    route("device", metadata=metadata)
    event = only_event(callback, emitter)
    assert event["session_id"].startswith("hashed-") and len(event["session_id"]) == len("hashed-") + 32
    assert event["request_id"].startswith("hashed-") and event["request_id"] != event["session_id"]
    assert (event["deadline_ms"], event["elapsed_ms"]) == (86_400_000, 86_400_000)
    assert (callback.stats["hashed_ids"], callback.stats["clamped"], callback.stats["rejected"]) == (2, 2, 0)
    route("device", metadata={**METADATA, "session_id": long_session})  # the same long id: the same hash
    assert callback.flush(10)
    assert emitter.decisions()[-1]["session_id"] == event["session_id"]


def test_flush_returns_within_its_timeout_when_a_request_failed_on_every_deployment(collected):
    """Issue: flush() took 29.3 s when a request failed on every deployment (a call LiteLLM started but
    never logged held it until its 30 s default)."""
    import time

    callback, _, _ = collected
    route("device-broken", fallbacks=[{"device-broken": ["cloud-small-down"]}])
    started = time.monotonic()
    callback.flush(timeout_s=5.0)
    assert time.monotonic() - started < 5.5
    started = time.monotonic()
    assert callback.flush()  # default timeout: quiet after at most PENDING_GRACE_S of silence
    assert time.monotonic() - started < 5.0
    assert callback.stats["recorded"] == 1
