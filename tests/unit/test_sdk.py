"""The recording SDK for any router: the same span tree and event as our own router, impossible
records refused at the call, and id scrubbing that keeps joins working (docs/contract.md: no personal
data in telemetry; docs/metrics.md §3: labels join decisions by request_id)."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from routerscope.contract.validation import DECISIONS, LABELS
from routerscope.instrumentation import attributes as A
from routerscope.instrumentation import pii
from routerscope.instrumentation.emitter import Message
from routerscope.instrumentation.pii import scrub
from routerscope.instrumentation.sdk import InstrumentedRouter, InvalidDecision, Recorder
from routerscope.router.backends import CloudResult
from routerscope.router.engine import Request, Router
from routerscope.router.request_store import RequestTextStore
from tests.support.fakes import ScriptedCloud, ScriptedDevice, dev
from tests.support.telemetry import stack


def span_tree(exporter):
    spans = exporter.get_finished_spans()
    parent = next(s for s in spans if s.name.startswith("route "))
    children = sorted(
        (s for s in spans if s.parent and s.parent.span_id == parent.context.span_id), key=lambda s: s.start_time
    )
    return parent, children


VOLATILE = {"event_id", "event_time", "latency_ms", "trace_id", "span_id", "breaker", "request_id", "ttft_ms"}


def test_the_sdk_records_the_same_span_tree_and_event_as_our_router():
    """One quality fallback L0 → L1 → L2, once through InstrumentedRouter and once recorded by hand
    through the SDK: same span names, kinds and attributes, same event apart from ids and timings."""
    tel_a, spans_a, out_a = stack()
    router = InstrumentedRouter(
        Router(
            ScriptedDevice([dev(confidence=0.2), dev(confidence=0.3)]),
            ScriptedCloud([CloudResult("answer", 300.0, "ok", 9)]),
        ),
        tel_a,
    )
    _, routed = router.route(Request(task_type="short_reply", text="hello", session_id="sess-42", input_tokens=2))

    tel_b, spans_b, out_b = stack()
    recorder = Recorder(tel_b, policy_version=routed.policy_version)
    with recorder.decision(
        task_type="short_reply", session_id="sess-42", deadline_ms=8000, elapsed_ms=0, input_tokens=2, network="wifi"
    ) as d:
        for level, a in enumerate(routed.attempts[:2]):
            d.device_attempt(
                level=level,
                outcome=a.outcome,
                latency_ms=a.latency_ms,
                confidence=[0.2, 0.3][level],
                threshold=routed.threshold,
                ttft_ms=routed.ttft_ms,
                output_tokens=routed.output_tokens,
                model="scripted-device",
            )
        d.cloud_attempt(
            level=2,
            outcome="ok",
            latency_ms=routed.attempts[2].latency_ms,
            model="cloud-small",
            output_tokens=9,
            cost_usd=routed.cost_usd,
        )
        d.served(
            fallback_type="quality",
            reason="low_confidence",
            confidence=routed.confidence,
            all_cloud_cost_usd=routed.all_cloud_cost_usd,
            rollout_stage=routed.rollout_stage,
            device_stats=msgspec.structs.asdict(routed.device_stats) if routed.device_stats else None,
        )

    a, b = out_a.decisions()[0], out_b.decisions()[0]
    assert {k: v for k, v in a.items() if k not in VOLATILE} == {k: v for k, v in b.items() if k not in VOLATILE}
    assert DECISIONS.parse(out_b.messages[0].value) == (
        msgspec.json.decode(out_b.messages[0].value, type=DECISIONS.event_type),
        [],
    )
    parent_a, children_a = span_tree(spans_a)
    parent_b, children_b = span_tree(spans_b)
    assert parent_a.name == parent_b.name == "route short_reply" and parent_a.kind == parent_b.kind
    assert dict(parent_a.attributes) == dict(parent_b.attributes)
    assert [(c.name, c.kind) for c in children_a] == [(c.name, c.kind) for c in children_b]
    # the SDK can say how many tokens each attempt produced; the router only knows the last one's
    strip = lambda c: {k: v for k, v in c.attributes.items() if k != A.GEN_AI_USAGE_OUTPUT_TOKENS}  # noqa: E731
    assert [strip(c) for c in children_a] == [strip(c) for c in children_b]
    assert b["trace_id"] == format(parent_b.context.trace_id, "032x")
    assert dict(out_b.messages[0].headers)["traceparent"].decode().split("-")[1] == b["trace_id"]


def decision(recorder, **kw):
    return recorder.decision(task_type="short_reply", session_id="s1", deadline_ms=2000, **kw)


@pytest.mark.parametrize(
    "script, message",
    [
        (
            lambda d: (
                d.cloud_attempt(level=2, outcome="error", latency_ms=5),
                d.device_attempt(level=0, outcome="ok", latency_ms=5),
            ),
            "attempt levels never decrease",
        ),
        (
            lambda d: (
                d.device_attempt(level=0, outcome="low_confidence", latency_ms=5),
                d.device_attempt(level=1, outcome="low_confidence", latency_ms=5),
                d.device_attempt(level=1, outcome="ok", latency_ms=5),
            ),
            "at most once",
        ),
        (lambda d: d.device_attempt(level=2, outcome="ok", latency_ms=5), "level 0 or 1"),
        (lambda d: d.device_attempt(level=0, outcome="maybe", latency_ms=5), "outcome 'maybe'"),
        (lambda d: d.device_attempt(level=0, outcome="ok", latency_ms=-1), "latency_ms"),
        (
            lambda d: (d.capability_miss(), d.device_attempt(level=0, outcome="ok", latency_ms=5)),
            "never enters the device",
        ),
    ],
    ids=[
        "levels-decreasing",
        "l1-twice",
        "device-at-l2",
        "unknown-outcome",
        "negative-latency",
        "device-after-capability-miss",
    ],
)
def test_impossible_attempts_are_refused_at_the_call(script, message):
    telemetry, exporter, emitter = stack()
    with pytest.raises(InvalidDecision, match=message):
        with decision(Recorder(telemetry)) as d:
            script(d)
    assert emitter.messages == [], "nothing is emitted for a refused record"


def test_a_device_ledger_with_an_unknown_field_is_refused_at_the_call():
    telemetry, _, emitter = stack()
    with pytest.raises(InvalidDecision, match="device_stats: .*warp_factor"):
        with decision(Recorder(telemetry)) as d:
            d.device_attempt(level=0, outcome="ok", latency_ms=5)
            d.served(fallback_type="none", reason="default", device_stats={"warp_factor": 9})
    assert emitter.messages == []


def test_personal_data_to_the_cloud_is_refused_unless_policy_allows_it():
    """docs/router.md hard constraint: a request with personal data stays on the device."""
    telemetry, _, emitter = stack()
    with pytest.raises(InvalidDecision, match="personal data"):
        with decision(Recorder(telemetry), has_pii=True) as d:
            d.device_attempt(level=0, outcome="error", latency_ms=5)
            d.cloud_attempt(level=2, outcome="ok", latency_ms=5)
    with decision(Recorder(telemetry), has_pii=True, pii_to_cloud=True) as d:
        d.device_attempt(level=0, outcome="error", latency_ms=5)
        d.cloud_attempt(level=2, outcome="ok", latency_ms=5)
        d.served(fallback_type="error", reason="device_error")
    assert [e["has_pii"] for e in emitter.decisions()] == [True]


@pytest.mark.parametrize(
    "attempts, served, rule",
    [
        (
            [(0, "ok")],
            dict(fallback_type="quality", reason="low_confidence"),
            "invariant.device_fallback_level_at_least_2",
        ),
        ([(0, "error"), (2, "ok")], dict(fallback_type="none", reason="default"), "invariant.served_on_device_level"),
        ([(2, "ok")], dict(fallback_type="capability", reason="default"), "invariant.capability_iff_capability_miss"),
        (
            [(2, "ok")],
            dict(fallback_type="timeout", reason="device_timeout"),
            "invariant.device_fallback_entered_device",
        ),
        ([(0, "ok")], dict(fallback_type="none", reason="pii_pin"), "invariant.pii_pin_has_pii"),
        (
            [(0, "low_confidence"), (2, "ok")],
            dict(fallback_type="quality", reason="low_confidence", confidence=0.9, threshold=0.5),
            "invariant.low_confidence_below_threshold",
        ),
    ],
    ids=[
        "quality-served-on-device",
        "none-served-in-cloud",
        "capability-without-miss",
        "timeout-never-entered",
        "pii-pin-without-pii",
        "low-confidence-above-threshold",
    ],
)
def test_served_checks_every_contract_invariant_and_names_the_rule(attempts, served, rule):
    telemetry, _, emitter = stack()
    with pytest.raises(InvalidDecision, match=rule.replace(".", r"\.")) as raised:
        with decision(Recorder(telemetry)) as d:
            for level, outcome in attempts:
                (d.device_attempt if level <= 1 else d.cloud_attempt)(level=level, outcome=outcome, latency_ms=5)
            d.served(**served)
    assert "⇒" in str(raised.value) or "⇔" in str(raised.value), "the rule is explained, not only named"
    assert emitter.messages == []


def test_a_decision_without_served_or_with_a_bad_field_is_refused():
    telemetry, _, emitter = stack()
    with pytest.raises(InvalidDecision, match="without served"):
        with decision(Recorder(telemetry)) as d:
            d.device_attempt(level=0, outcome="ok", latency_ms=5)
    with pytest.raises(InvalidDecision, match="schema.invalid.task_type"):
        with Recorder(telemetry).decision(task_type="Short Reply!", session_id="s", deadline_ms=100) as d:
            d.device_attempt(level=0, outcome="ok", latency_ms=5)
            d.served()
    with pytest.raises(RuntimeError):  # the application's own failure: propagated, nothing recorded
        with decision(Recorder(telemetry)) as d:
            d.device_attempt(level=0, outcome="ok", latency_ms=5)
            raise RuntimeError("the app broke")
    assert emitter.messages == []


def test_capability_miss_and_canned_answer_make_valid_events():
    telemetry, _, emitter = stack()
    recorder = Recorder(telemetry)
    with decision(recorder) as d:
        d.capability_miss()
        d.cloud_attempt(level=2, outcome="timeout", latency_ms=500, cost_usd=0.0)
        d.cloud_attempt(level=3, outcome="ok", latency_ms=700, model="big", cost_usd=0.002)
        d.served(fallback_type="capability", reason="capability_miss")
    with decision(recorder, has_pii=True) as d:
        d.device_attempt(level=0, outcome="timeout", latency_ms=1400)
        d.canned_answer()
        d.served(fallback_type="timeout", reason="pii_pin")
    cap, pinned = emitter.decisions()
    assert (cap["entered_device"], cap["cloud_calls"], cap["degrade_level"]) == (False, 2, 3)
    assert (cap["cost_usd"], cap["cloud_model"]) == (0.002, "big")
    assert (pinned["entered_device"], pinned["cloud_calls"], pinned["degrade_level"]) == (True, 0, 4)
    assert all(DECISIONS.parse(m.value)[1] == [] for m in emitter.messages)


# -- ids: scrubbed the same way everywhere, and only when they look personal -------------------------
@pytest.mark.parametrize(
    "value",
    [
        "req-20261130-123456789",
        "1764547200000",
        "4000000000006",
        "sess-42",
        "2026-11-30",
        "chatcmpl-97607f89-6391-453f-89cd-7aaad700463d",
        "sim-req-12345678-1234-5678-1234-567812345678",
        "order 12345678901234",
        "v1.2.3.4",
    ],
)
def test_ids_that_are_not_personal_data_are_kept(value):
    assert scrub(value) == value


@pytest.mark.parametrize(
    "value",
    [
        "canary.person@example.com",
        "+44 20 7946 0958",
        "0044 20 7946 0958",
        "(555) 123-4567",
        "555.123.4567",
        "5551234567",
        "4111 1111 1111 1111",
        "4111-1111-1111-1111",
        "378282246310005",
        "user:+1-555-123-4567",
        "4111 1111 1111 1111-2",
    ],
)
def test_personal_looking_ids_are_replaced_the_same_way_every_time(value):
    once = scrub(value)
    assert once.startswith("redacted-") and once == scrub(value) and scrub(once) == once


def test_a_label_sent_for_the_raw_id_joins_its_decision_and_the_request_text(tmp_path):
    """The same replacement in the decision event, the label and the request-text store."""
    telemetry, _, emitter = stack()
    recorder = Recorder(telemetry)
    raw = "ana.silva@example.com/2026-11-30/7"
    with decision(recorder, request_id=raw) as d:
        d.device_attempt(level=0, outcome="ok", latency_ms=5)
        d.served()
    label = recorder.label(raw, device_acceptable=False, source="human_review")
    event = emitter.decisions()[0]
    assert event["request_id"] == label.request_id == pii.pseudonymise_request_id(raw) != raw
    assert [m.key for m in emitter.messages] == [pii.pseudonymise("s1").encode(), event["request_id"].encode()]
    assert LABELS.parse(emitter.messages[1].value)[1] == []
    with RequestTextStore(tmp_path / "texts.sqlite") as store:
        store.add(raw, "short_reply", "hello")
        assert store.get([raw]) == {raw: ("short_reply", "hello")}
        assert store.get([event["request_id"]]) == {event["request_id"]: ("short_reply", "hello")}
    assert raw.encode() not in (tmp_path / "texts.sqlite").read_bytes()


def test_a_labeler_is_a_person_unless_it_names_a_method():
    """A reviewer leaves as a pseudonym; the offline replay's labeler names its method and judge version, which the
    judge's audit reads, so it is kept as written, and scrubbed whole like any free text when it holds personal
    data."""
    telemetry, _, emitter = stack()
    recorder = Recorder(telemetry)
    method = "offline-replay:fields:judge-3:kept:gemma-3-270m-q4_k_m:differs:city"
    person = recorder.label("r1", device_acceptable=True, labeler="ana.silva")
    kept = recorder.label(
        "r2", device_acceptable=False, source="offline_replay", labeler=method, labeler_is_method=True
    )
    leaked = recorder.label(
        "r3", device_acceptable=False, labeler="offline-replay:x:judge-3:kept:m:ana@example.com", labeler_is_method=True
    )
    assert person.labeler == pii.pseudonymise("ana.silva") != "ana.silva"
    assert kept.labeler == method
    assert leaked.labeler is not None and "ana@example.com" not in leaked.labeler
    assert all(LABELS.parse(m.value)[1] == [] for m in emitter.messages)
    # the offline replay labels a stored decision by its id as stored (here one sent by another road, raw)
    assert recorder.label("f0", device_acceptable=True, stored_id=True).request_id == "f0"
    assert kept.request_id == pii.pseudonymise_request_id("r2") != "r2"


CANARIES = ("canary.person@example.com", "+44 20 7946 0958", "4111 1111 1111 1111", "(555) 123-4567")


@given(
    canary=st.sampled_from(CANARIES),
    prefix=st.text("abcxyz-_:/ ", max_size=12),
    suffix=st.text("abcxyz-_:/ ", max_size=6) | st.from_regex(r"\A-[0-9]{1,3}\Z"),
)
def test_a_canary_inside_any_id_is_always_redacted_the_same_way(canary, prefix, suffix):
    """docs/contract.md: no personal data in telemetry, whatever the id wraps around it."""
    value = prefix + canary + suffix
    assert scrub(value).startswith("redacted-") and scrub(value) == scrub(value) and scrub(scrub(value)) == scrub(value)


def test_the_event_is_encoded_off_the_request_path_into_the_same_bytes_and_trace_headers():
    """The request path only queues the event and its context; the sender's first read makes the JSON
    and the W3C traceparent, byte for byte what encoding at the call gives."""
    telemetry, spans, out = stack()
    router = InstrumentedRouter(Router(ScriptedDevice([dev(confidence=0.9)]), ScriptedCloud([])), telemetry)
    _, event = router.route(Request(task_type="short_reply", text="hello", session_id="sess-42"))
    message = out.messages[0]
    assert message._value is None and message._headers is None  # nothing encoded on the caller's thread
    assert message.value == msgspec.json.encode(event)
    ((name, traceparent),) = message.headers
    assert name == "traceparent" and traceparent.decode().split("-")[:3] == ["00", event.trace_id, event.span_id]
    parent, _ = span_tree(spans)
    assert event.span_id == format(parent.context.span_id, "016x")
    assert message.to_line() == Message(message.topic, message.key, message.value, message.headers).to_line()


def test_the_decision_span_attributes_are_what_set_attributes_stores_and_limits_still_apply():
    """The decision span's attributes go straight into the SDK span's map (no per-value re-check): the same
    keys, values and types as `set_attributes` would store; with a value-length limit set, through
    `set_attributes`, so the limit is applied."""
    from opentelemetry.sdk.trace import SpanLimits, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from routerscope.instrumentation.sdk import _set_attributes

    values = {"router.task_type": "short_reply", "router.degrade_level": 2, "router.confidence": 0.41, "x.b": True}
    for limits, expected in (
        (SpanLimits(), values),
        (SpanLimits(max_span_attribute_length=5), {**values, "router.task_type": "short"}),
        (SpanLimits(max_span_attributes=2), dict(list(values.items())[2:])),
    ):
        exporter = InMemorySpanExporter()
        provider = TracerProvider(span_limits=limits)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        span = provider.get_tracer("t").start_span("route short_reply")
        _set_attributes(span, values)
        span.end()
        _set_attributes(span, {"late": 1})  # after the end: dropped, as the SDK drops it
        (finished,) = exporter.get_finished_spans()
        assert dict(finished.attributes) == expected
        assert [type(v) for v in finished.attributes.values()] == [type(v) for v in expected.values()]
