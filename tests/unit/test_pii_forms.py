"""Personal data in any form people write it never leaves through the SDK: e-mails with a quoted local part, an
IP-literal domain or no TLD; phone and card numbers separated by en dashes, non-breaking hyphens, middle
dots, commas or double spaces; Mir, Maestro and RuPay cards; IBANs, IPv4/IPv6, national ids; encoded forms;
an address or a number split across two fields (`tests/support/pii_canaries.py`, 68 canaries + 3 split
forms). Identifiers (session ids, request ids an application chose, labelers) are pseudonymised whatever
they hold, the same id always the same pseudonym."""

from __future__ import annotations

import pytest

from routerscope.instrumentation import pii
from routerscope.instrumentation.sdk import Recorder
from tests.support.pii_canaries import CANARIES, SPLIT, probes, record_everywhere, record_split
from tests.support.telemetry import stack


@pytest.fixture(autouse=True)
def keyed():
    before, hash_ids = pii._key, pii.HASH_IDS
    pii.configure(key=b"k" * 32)
    yield
    pii._key, pii.HASH_IDS = before, hash_ids


def _leaks(emitter, exporter, values) -> list[str]:
    sent = b"".join(m.value + (m.key or b"") + b"".join(v for _, v in m.headers) for m in emitter.messages)
    shown = repr([(s.name, dict(s.attributes)) for s in exporter.get_finished_spans()]).encode()
    return [f"{v!r} as {p!r}" for v in values for p in probes(v) if p in sent or p in shown]


def test_there_are_at_least_56_canaries_across_the_forms():
    assert len(CANARIES) >= 56 and len({v for _, v in CANARIES}) == len(CANARIES)


@pytest.mark.parametrize("form, value", CANARIES, ids=[f for f, _ in CANARIES])
def test_every_form_is_scrubbed_in_free_text_and_in_names(form, value):
    assert pii.scrub(value).startswith("redacted-"), form
    assert pii.scrub_name(value).startswith("redacted-"), form
    assert pii.scrub(pii.scrub(value)) == pii.scrub(value)


def test_no_canary_reaches_an_event_a_label_a_key_a_header_or_a_span_through_the_sdk():
    tel, exporter, emitter = stack()
    recorder = Recorder(tel)
    for n, (_, value) in enumerate(CANARIES):
        record_everywhere(recorder, value, n)
    recorder.flush(5)
    assert len(emitter.decisions()) == len(CANARIES)
    assert _leaks(emitter, exporter, [v for _, v in CANARIES]) == []


@pytest.mark.parametrize("form, first, second", SPLIT, ids=[f for f, *_ in SPLIT])
def test_an_address_or_a_number_split_across_two_fields_is_hashed_in_both(form, first, second):
    tel, exporter, emitter = stack()
    record_split(Recorder(tel), first, second)
    assert len(emitter.decisions()) == 3
    assert _leaks(emitter, exporter, [first, second]) == []
    assert pii.split_across([first, "default", second]) >= {0, 2}


def test_half_an_address_in_a_session_or_request_id_takes_the_other_half_in_the_text_with_it():
    """The ids are pseudonymised; the free-text field holding the other half of the address is hashed too."""
    tel, exporter, emitter = stack()
    recorder = Recorder(tel)
    for ids in ({"session_id": "canary.sess@"}, {"session_id": "s", "request_id": "canary.sess@"}):
        with recorder.decision(task_type="short_reply", deadline_ms=2000, app_id="example.org", **ids) as d:
            d.device_attempt(level=0, outcome="ok", latency_ms=5)
            d.served()
    assert [e["app_id"] for e in emitter.decisions()] == [pii.hash_value("example.org")] * 2
    assert _leaks(emitter, exporter, ["canary.sess@", "example.org"]) == []


def test_identifiers_are_pseudonymised_whatever_they_hold_and_join_their_labels():
    tel, exporter, emitter = stack()
    recorder = Recorder(tel)
    for session in ("sess-42", "sess-42", "5f0c1c1e-8a3b-4c2d-9e7f-0123456789ab"):
        with recorder.decision(
            task_type="short_reply", session_id=session, deadline_ms=2000, request_id="order-7"
        ) as d:
            d.device_attempt(level=0, outcome="ok", latency_ms=5)
            d.served()
    label = recorder.label("order-7", device_acceptable=True, labeler="reviewer.anna")
    first, again, uuid_session = emitter.decisions()
    assert first["session_id"] == again["session_id"] == pii.pseudonymise("sess-42")
    assert first["session_id"].startswith("id-") and uuid_session["session_id"].startswith("id-")
    assert first["request_id"] == label.request_id == pii.pseudonymise_request_id("order-7") != "order-7"
    assert label.labeler == pii.pseudonymise("reviewer.anna")
    assert pii.pseudonymise(first["session_id"]) == first["session_id"]  # a pseudonym is kept as it is
    spans = repr([dict(s.attributes) for s in exporter.get_finished_spans()])
    assert "sess-42" not in spans and first["session_id"] in spans
    # a request id the SDK made (a UUID) is random: kept
    with recorder.decision(task_type="short_reply", session_id="s", deadline_ms=2000) as d:
        d.device_attempt(level=0, outcome="ok", latency_ms=5)
        d.served()
    assert emitter.decisions()[-1]["request_id"] == d.request_id


def test_with_ids_scrubbed_only_ids_that_look_personal_are_replaced():
    """`ROUTERSCOPE_PII_IDS=scrub`: the behaviour before pseudonymisation became the default."""
    pii.HASH_IDS = False
    assert pii.pseudonymise("sess-42") == "sess-42"
    assert pii.pseudonymise("canary.plain@example.com").startswith("redacted-")


@pytest.mark.parametrize(
    "value",
    [
        "short_reply",
        "default",
        "gpt-4o-mini",
        "gpt-4o-2024-08-06",
        "Meta-Llama-3.1-8B-Instruct-Q4_K_M",
        "v1.2.3",
        "v1.2.3.4",
        "app/ios/17.4",
        "build_2026_11_30",
        "req-20261130-123456789",
        "1733270400123",
        "12:30:45",
        "a1b2c3d4-0000-4000-8000-000000000000",
    ],
)
def test_names_that_are_not_personal_are_kept(value):
    assert pii.scrub_name(value) == value
