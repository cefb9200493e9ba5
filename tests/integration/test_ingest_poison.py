"""No message can stop ingest: every poison class between good messages, on the real broker (Tansu)
and the real embedded warehouse (chDB). Every good message loads exactly once, every poison message
is in the quarantine with its rule, and `load` exits 0 on the first run and on every later one.
Also: positions that prove themselves against a refilled broker, and a broker that dies mid-load."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import threading
import time

import pytest

from routerscope.core import broker, names
from routerscope.core.errors import BrokerUnavailable
from routerscope.warehouse.client import open_warehouse
from routerscope.warehouse.ingest.loader import BrokerDataLost, LoadConfig, Loader, load
from tests.support.bad_messages import MALFORMED, POISON, good_messages
from tests.support.bad_messages import deep as _deep
from tests.support.events import decision, dumps, label
from tests.support.home import clean_env, run_cli
from tests.support.ingest import FAST, produce, query, scalar, valid_decisions

pytestmark = pytest.mark.integration

DECISIONS, LABELS = names.TOPIC_DECISIONS, names.TOPIC_LABELS


ALL_POISON = POISON + [(f"malformed: {name}", payload, rules) for name, payload, rules in MALFORMED]


def _produce_keyed(settings, items: list[tuple[bytes, bytes | None]], timestamp_ms: int | None = None) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": settings.kafka_bootstrap(), "linger.ms": 5, "message.max.bytes": 4_000_000}
    )
    for key, value in items:
        extra = {"timestamp": timestamp_ms} if timestamp_ms is not None else {}
        producer.produce(DECISIONS, value=value, key=key, **extra)
    assert producer.flush(30) == 0


@pytest.mark.slow
def test_no_poison_message_stops_ingest_and_every_good_message_loads_once(stack, home):
    """Issue: one message any Kafka writer can send stopped ingest for good. Each class, between
    good messages; `routerscope load` exits 0 on the first run and on every later one.
    (~25 s: one `load` process, a 1.5 MB message and 130 month partitions are the point of it.)"""
    with open_warehouse(stack) as client:
        from routerscope.warehouse.migrate import migrate

        migrate(client)
        client.command("ALTER TABLE routerscope.decisions ADD CONSTRAINT no_reject CHECK request_id != 'reject-me'")
    good = good_messages()
    items: list[tuple[bytes, bytes | None]] = []
    for i, payload in enumerate(good):  # poison spread among the good ones, on every partition
        items.append((f"good-{i}".encode(), payload))
        if i % 7 == 0 and i // 7 < len(ALL_POISON):
            name, poison, _ = ALL_POISON[i // 7]
            items.append((f"poison-{i // 7}".encode(), poison))
    assert sum(k.startswith(b"poison") for k, _ in items) == len(ALL_POISON)
    _produce_keyed(stack, items)
    # a producer-set CreateTime far past what the warehouse stores must not break the quarantine insert
    _produce_keyed(stack, [(b"poison-absurd-time", b"not json")], timestamp_ms=2**52)
    env = clean_env(home)

    first = run_cli("load", "--json", "--idle-timeout", "0.5", env=env)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["loaded"]["decisions"] == len(good)
    assert json.loads(first.stdout)["quarantined"]["decisions"] == len(ALL_POISON) + 1

    assert scalar(stack, "SELECT count() FROM routerscope.decisions") == len(good)
    assert scalar(stack, "SELECT uniqExact(event_id) FROM routerscope.decisions") == len(good)
    assert scalar(stack, "SELECT uniqExact(toYYYYMM(event_time)) FROM routerscope.decisions") > 100
    # the ledger names exactly the loaded messages (a row the warehouse refused is not in it)
    assert scalar(stack, "SELECT count() FROM routerscope.loaded_messages FINAL WHERE NOT rejected") == len(good)
    assert query(stack, "SELECT sum(rows_loaded), sum(rows_quarantined) FROM routerscope.ingest_offsets") == [
        (len(good), len(ALL_POISON) + 1)
    ]
    v2 = query(
        stack,
        "SELECT request_id, schema_version, reason, rollout_stage, all_cloud_cost_usd, device_peak_mem_mb, "
        "device_thermal_state, device_decode_tps, device_cold_start, answer_check, device_input_tokens "
        "FROM routerscope.decisions "
        "WHERE schema_version = 2 ORDER BY request_id",
    )
    assert v2 == [
        ("v2-answer-check", 2, "validator_failed", None, None, None, None, None, None, "labels", 10_000_000),
        ("v2-busy", 2, "device_busy", None, None, None, None, None, None, None, None),
        ("v2-ledger", 2, "default", "canary", 0.002, 400.0, "serious", 31.5, False, None, None),
    ]
    rows = {
        key: (rules, error)
        for key, rules, error in query(stack, "SELECT kafka_key, rules, error FROM routerscope.quarantine")
    }
    assert len(rows) == len(ALL_POISON) + 1
    for i, (name, _, expected) in enumerate(ALL_POISON):
        rules, error = rows[f"poison-{i}"]
        assert sorted(rules) == sorted(expected), name
    assert "no_reject" in rows[f"poison-{[n for n, _, _ in ALL_POISON].index('refused by the warehouse')}"][1]
    assert query(
        stack, "SELECT kafka_timestamp FROM routerscope.quarantine WHERE kafka_key = 'poison-absurd-time'"
    ) == [(None,)]
    # raw bytes kept as they came; an oversized message's first 64 KB with its size and sha256 (issue:
    # json.too_large messages were stored whole, 10 MB each)
    big = ALL_POISON[[n for n, _, _ in ALL_POISON].index("1.5 MB")][1]
    ((raw, error),) = query(stack, "SELECT raw, error FROM routerscope.quarantine WHERE length(raw) = 65536")
    assert raw.encode() == big[:65536] if isinstance(raw, str) else raw == big[:65536]
    assert error.endswith(f"kept the first 65536 of {len(big)} bytes, sha256 {hashlib.sha256(big).hexdigest()}")
    assert scalar(stack, "SELECT max(length(raw)) FROM routerscope.quarantine") == 65536

    # later runs (in process: the command's exit status was shown above): nothing stuck behind the
    # poison, new messages load
    again = load(stack, **FAST)
    assert again.as_dict() == {
        "loaded": {"decisions": 0, "labels": 0, "breakers": 0, "policy": 0},
        "quarantined": {"decisions": 0, "labels": 0, "breakers": 0, "policy": 0},
    }
    produce(stack, DECISIONS, valid_decisions(20, start=5000) + [dumps(decision(input_tokens=2**64))])
    third = load(stack, **FAST)
    assert (third.loaded["decisions"], third.quarantined["decisions"]) == (20, 1)
    assert scalar(stack, "SELECT count() FROM routerscope.decisions") == len(good) + 20


def test_a_quarantine_row_the_warehouse_refuses_is_kept_without_its_raw_bytes(stack):
    """The last line behind the last line: even the quarantine insert cannot stop ingest."""
    query(stack, "ALTER TABLE routerscope.quarantine ADD CONSTRAINT no_refuse CHECK NOT startsWith(raw, 'REFUSE')")
    poison = b"REFUSE me: " + b"x" * 100
    produce(stack, DECISIONS, valid_decisions(50) + [poison, b"plain garbage"])
    result = load(stack, **FAST)
    assert (result.loaded["decisions"], result.quarantined["decisions"]) == (50, 2)
    ((rules, error),) = query(stack, "SELECT rules, error FROM routerscope.quarantine WHERE raw = ''")
    assert rules == ["json.invalid", "quarantine.raw_refused"]
    assert f"{len(poison)} bytes, sha256 {hashlib.sha256(poison).hexdigest()}" in error and "no_refuse" in error
    assert scalar(stack, "SELECT count() FROM routerscope.quarantine WHERE raw = 'plain garbage'") == 1


def test_a_refilled_broker_is_caught_by_the_position_fingerprint(stack):
    """Issue item 4: a restarted memory broker that has since received *more* messages than were
    loaded has a message at the stored position; it is not the one loaded, so nothing is skipped."""
    produce(stack, DECISIONS, valid_decisions(300), keys=[b"k"] * 300)  # one partition: offsets 0..299
    assert load(stack, **FAST).loaded["decisions"] == 300
    port = int(stack.kafka_bootstrap().rsplit(":", 1)[1])
    broker.stop(stack)
    broker.start(stack, port=port)  # memory storage: the 300 are gone
    produce(stack, DECISIONS, valid_decisions(374, start=10_000), keys=[b"k"] * 374)  # offsets 0..373 again
    with pytest.raises(BrokerDataLost, match="not the one loaded"):
        load(stack, **FAST)
    assert scalar(stack, "SELECT count() FROM routerscope.decisions") == 300  # no new message silently skipped


@pytest.mark.slow
def test_a_broker_stopping_mid_load_ends_the_run_promptly_without_holding_the_warehouse(stack):
    """Issue item 5: the loader hung 12 minutes in consumer.close() holding the warehouse lock.
    200k messages (140 MB) on one partition: more than the consumer can hold (one 32 MB fetch plus its
    64 MB prefetch queue; with 100k, a busy machine let librdkafka fetch them all before the first batch
    stopped the broker), so the broker dies while the loader still has messages to fetch, however slowly
    the loader itself runs."""
    n = 200_000
    produce(stack, DECISIONS, valid_decisions(n), keys=[b"one-partition"] * n)
    query(stack, "SELECT 1")  # the warehouse exists (migrated) before the run
    waited_for_lock: list[float] = []
    state = {"done": False}

    def stop_broker_once(consumed):
        if state["done"]:
            return
        state["done"] = True
        os.kill(broker.status(stack).pid, signal.SIGKILL)  # a crash, not a graceful stop that keeps serving

        def take_the_warehouse():  # another unit of work (a dashboard, `metrics`) while the loader waits
            started = time.monotonic()
            with open_warehouse(stack, purpose="test", timeout_s=60):
                waited_for_lock.append(time.monotonic() - started)

        threading.Thread(target=take_the_warehouse, daemon=True).start()

    started = time.monotonic()
    with pytest.raises(BrokerUnavailable, match="stopped answering during the load"):
        Loader(
            stack, LoadConfig(batch_size=5000, idle_timeout_s=0.5, broker_timeout_s=3.0), progress=stop_broker_once
        ).run()
    elapsed = time.monotonic() - started
    assert elapsed < 45, f"the run took {elapsed:.0f} s after the broker stopped"
    assert waited_for_lock, "another process could not take the warehouse while the loader waited on the broker"
    # everything fetched before the broker went away was stored, with its position; nothing else
    loaded = scalar(stack, "SELECT count() FROM routerscope.decisions")
    positions = scalar(stack, "SELECT max(next_offset) FROM routerscope.ingest_offsets")
    assert 0 < loaded == positions < n


def test_produce_names_the_lines_it_cannot_send_and_sends_the_rest(broker_settings, tmp_path, monkeypatch, capsys):
    """`produce` stopped at a deep or 2 MB line with "is the broker still up?" and no line number."""
    from routerscope import cli

    path = tmp_path / "events.jsonl"
    big = b'{"pad": "' + b"x" * 2_000_000 + b'"}'
    path.write_bytes(b"\n".join([dumps(decision()), _deep(3000), b"", big, dumps(label())]) + b"\n")
    monkeypatch.setenv("ROUTERSCOPE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("ROUTERSCOPE_KAFKA_BOOTSTRAP", broker_settings.kafka_bootstrap())
    code = cli.main(["produce", str(path), "--topic", "decisions", "--quiet"])
    out, err = capsys.readouterr()
    assert code == 1
    assert out.startswith("produced 3 message(s) to router.decisions.v1")  # the deep line is sent, unkeyed
    assert err.strip() == (
        f"routerscope: error: 1 line(s) were not published: line 4: {len(big)} bytes, more than "
        "the largest message sent (1048064 bytes)"
    )
