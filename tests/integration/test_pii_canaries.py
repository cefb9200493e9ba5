"""Personal data in any free-text field never reaches a span, Kafka or the warehouse: canaries (an
e-mail address, a phone number, a card number) put in every field an application controls, through
each way in: the SDK, the LiteLLM callback and `routerscope produce`; then looked for in the spans, in
every message on the real broker (Tansu), in the warehouse's rows and in its files (chDB).

Issue: e-mail and card canaries in `labeler`, `app_version`, `policy_version` and an attempt's
`model` went through (7 decision rows, 1 label row, raw warehouse files); a phone number in LiteLLM
`metadata.app_version` reached Kafka."""

from __future__ import annotations

import json

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from routerscope.core import names
from routerscope.core.kafka import producer_config
from routerscope.instrumentation.emitter import KafkaEmitter
from routerscope.instrumentation.sdk import Recorder
from routerscope.instrumentation.telemetry import Telemetry
from routerscope.warehouse.client import open_warehouse
from routerscope.warehouse.ingest.loader import load
from tests.support.events import decision, label
from tests.support.home import clean_env, run_cli
from tests.support.kafka import consume_all
from tests.support.litellm_models import MESSAGES, MODEL_LIST

litellm = pytest.importorskip("litellm")
from routerscope.instrumentation.litellm import RouterscopeCallback  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

EMAIL, PHONE, CARD = "canary.person@example.com", "+44 20 7946 0958", "4111 1111 1111 1111"
CANARIES = (EMAIL, PHONE, CARD)


def _sdk(recorder: Recorder) -> None:
    """Every free-text argument of the SDK, each canary in turn."""
    for i, canary in enumerate(CANARIES):
        with recorder.decision(
            task_type="short_reply",
            session_id=canary,
            deadline_ms=2000,
            request_id=f"{canary}-sdk-{i}",
            app_id=canary,
            app_version=canary,
            policy_version=canary,
            device_tier=canary,
        ) as d:
            d.device_attempt(
                level=0, outcome="low_confidence", latency_ms=10, confidence=0.2, threshold=0.7, model=canary
            )
            d.cloud_attempt(level=2, outcome="ok", latency_ms=20, model=canary, provider=canary)
            d.served(fallback_type="quality", reason="low_confidence")
        recorder.label(f"{canary}-sdk-{i}", device_acceptable=False, labeler=canary)


def _litellm(recorder: Recorder) -> None:
    """The callback's metadata, each canary in every field it reads."""
    callback = RouterscopeCallback(device_models=["device"], recorder=recorder)
    previous = litellm.callbacks
    litellm.callbacks = [callback]
    try:
        router = litellm.Router(model_list=MODEL_LIST, num_retries=0, disable_cooldowns=True)
        for i, canary in enumerate(CANARIES):
            metadata = {
                "session_id": canary,
                "task_type": "short_reply",
                "request_id": f"{canary}-litellm-{i}",
                "app_id": canary,
                "app_version": canary,
                "device_tier": canary,
            }
            router.completion(model="device", messages=MESSAGES, metadata=metadata)
        assert callback.flush(30)
        assert callback.stats["recorded"] == 3
    finally:
        litellm.callbacks = previous


def _produce_file(path) -> None:
    """A JSON-lines file of valid events with the canaries in their free-text fields."""
    lines = []
    for i, canary in enumerate(CANARIES):
        lines.append(
            decision(
                event_id=f"00000000-0000-4000-8000-{i:012d}",
                request_id=f"{canary}-produce-{i}",
                session_id=canary,
                app_id=canary,
                app_version=canary[:64],
                policy_version=canary,
                device_tier=canary[:32],
                device_model=canary,
                cloud_model=canary,
            )
        )
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    labels = [label(request_id=f"{c}-produce-{i}", labeler=c) for i, c in enumerate(CANARIES)]
    path.with_suffix(".labels").write_text("\n".join(json.dumps(line) for line in labels) + "\n")


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_canaries_in_every_free_text_field_reach_no_span_no_message_no_row_and_no_warehouse_file(stack, home, tmp_path):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    emitter = KafkaEmitter(producer_config(stack), home / "spool")
    recorder = Recorder(Telemetry(emitter, provider))
    _sdk(recorder)
    _litellm(recorder)
    assert recorder.flush(30)
    recorder.close()
    events = tmp_path / "events.jsonl"
    _produce_file(events)
    for file, topic in ((events, "decisions"), (events.with_suffix(".labels"), "labels")):
        sent = run_cli("produce", str(file), "--topic", topic, "--quiet", env=clean_env(home))
        assert sent.returncode == 0, sent.stderr

    spans = repr([(s.name, dict(s.attributes)) for s in exporter.get_finished_spans()])
    assert spans.count("route short_reply") == 6
    decisions = consume_all(stack.kafka_bootstrap(), names.TOPIC_DECISIONS, 9)
    labels = consume_all(stack.kafka_bootstrap(), names.TOPIC_LABELS, 6)
    kafka = b"".join(
        (m.key() or b"") + m.value() + b"".join(v for _, v in (m.headers() or [])) for m in decisions + labels
    )
    assert kafka.count(b'"event_id"') == 9 and kafka.count(b'"label_id"') == 6
    result = load(stack, idle_timeout_s=0.5)
    assert result.loaded["decisions"] == 9 and result.loaded["labels"] == 6
    assert sum(result.quarantined.values()) == 0
    with open_warehouse(stack, purpose="test") as client:
        rows = repr(client.query("SELECT * FROM routerscope.decisions").result_rows)
        rows += repr(client.query("SELECT * FROM routerscope.labels").result_rows)
        rows += repr(client.query("SELECT * FROM routerscope.quarantine").result_rows)
    assert rows.count("redacted-") >= 9 * 6
    files = b"".join(p.read_bytes() for p in (home / "warehouse").rglob("*") if p.is_file())
    for canary in CANARIES:
        for where, text in (("spans", spans), ("rows", rows)):
            assert canary not in text, f"{canary} in the {where}"
        assert canary.encode() not in kafka, f"{canary} in Kafka"
        assert canary.encode() not in files, f"{canary} in the warehouse files"
        assert canary.replace(" ", "").encode() not in files


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_no_canary_of_any_form_reaches_kafka_through_the_sdk_and_the_explorer_finds_a_session_by_its_raw_id(
    stack, home
):
    """68 canaries (tests/support/pii_canaries.py: e-mails however written, phone and card numbers with any
    separator, Mir, Maestro and RuPay cards, IBANs, IP addresses, national ids, encoded forms) in every text
    argument of the SDK, and the split forms across two fields, through a real broker: no probe of any of
    them in any key, value or header on Kafka, nor in the warehouse's rows. The Explorer, given the raw
    session id, finds its decisions by the same keyed hash."""
    from datetime import UTC, datetime, timedelta

    from routerscope.instrumentation import pii
    from routerscope.warehouse.queries import decisions as decision_queries
    from tests.support.pii_canaries import CANARIES, SPLIT, probes, record_everywhere, record_split

    emitter = KafkaEmitter(producer_config(stack), home / "spool")
    recorder = Recorder(Telemetry(emitter, TracerProvider()))
    for n, (_, value) in enumerate(CANARIES):
        record_everywhere(recorder, value, n)
    for _, first, second in SPLIT:
        record_split(recorder, first, second)
    with recorder.decision(task_type="short_reply", session_id="alice-session-7", deadline_ms=2000) as d:
        d.device_attempt(level=0, outcome="ok", latency_ms=5)
        d.served()
    assert recorder.flush(30)
    recorder.close()
    n_decisions = len(CANARIES) + 3 * len(SPLIT) + 1
    decisions = consume_all(stack.kafka_bootstrap(), names.TOPIC_DECISIONS, n_decisions)
    labels = consume_all(stack.kafka_bootstrap(), names.TOPIC_LABELS, len(CANARIES))
    kafka = b"".join(
        (m.key() or b"") + m.value() + b"".join(v for _, v in (m.headers() or [])) for m in decisions + labels
    )
    assert kafka.count(b'"event_id"') == n_decisions and kafka.count(b'"label_id"') == len(CANARIES)
    values = [v for _, v in CANARIES] + [v for _, *pair in SPLIT for v in pair]
    leaks = [f"{v!r} as {p!r}" for v in values for p in probes(v) if p in kafka]
    assert leaks == []
    result = load(stack, idle_timeout_s=0.5)
    assert result.loaded["decisions"] == n_decisions and sum(result.quarantined.values()) == 0
    with open_warehouse(stack, purpose="test") as client:
        rows = repr(client.query("SELECT * FROM routerscope.decisions").result_rows).encode()
        assert [v for v in values for p in probes(v) if p in rows] == []
        start, end = datetime.now(UTC) - timedelta(hours=1), datetime.now(UTC) + timedelta(hours=1)
        typed = decision_queries.ExplorerFilter(session_id="alice-session-7")
        hashed = decision_queries.ExplorerFilter(
            session_id="alice-session-7", session_hash=pii.pseudonymise("alice-session-7")
        )
        assert decision_queries.explorer_count(client, start, end, typed) == 0  # no raw id is stored
        assert decision_queries.explorer_count(client, start, end, hashed) == 1
