"""The loader against a real broker (Tansu) and a real embedded warehouse (chDB): exact counts,
quarantine with named rules, crash safety, replays, a failing warehouse, lost broker data."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import threading
import time
import weakref

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from routerscope.core import broker, interrupts, names
from routerscope.core.errors import WarehouseError
from routerscope.core.kafka import librdkafka_config
from routerscope.core.procs import free_port
from routerscope.warehouse.client import open_warehouse
from routerscope.warehouse.ingest.batch import Batch
from routerscope.warehouse.ingest.consumer import CONSUMER_OPTIONS, PartitionState
from routerscope.warehouse.ingest.loader import BrokerDataLost, LoadConfig, Loader, LoadResult, load
from routerscope.warehouse.migrate import migrate
from tests.support.bad_messages import MALFORMED
from tests.support.events import breaker, dumps, label
from tests.support.home import REPO, ROUTERSCOPE, clean_env, run_cli, settings_for
from tests.support.ingest import FAST, produce, query, scalar, valid_decisions

pytestmark = pytest.mark.integration

DECISIONS, LABELS, BREAKERS = names.TOPIC_DECISIONS, names.TOPIC_LABELS, names.TOPIC_BREAKERS


def test_exact_counts_duplicates_once_and_every_malformed_kind_quarantined_with_its_rules(stack):
    good = valid_decisions(300)
    duplicates = good[:25]  # the same messages again: loaded rows, but one event each
    bad = [payload for _, payload, _ in MALFORMED]
    decisions_in = good + bad + duplicates
    produce(stack, DECISIONS, decisions_in)
    labels_in = [dumps(label(request_id=f"req-{i}")) for i in range(40)] + [dumps(label(source="gut_feeling")), None]
    produce(stack, LABELS, labels_in)
    breakers_in = [
        dumps(breaker()),
        dumps(breaker(boundary="device")),
        dumps(breaker(to_state="closed", from_state="closed")),
    ]
    produce(stack, BREAKERS, breakers_in)

    result = load(stack, **FAST)

    assert result.as_dict() == {
        "loaded": {"decisions": 300 + 25, "labels": 40, "breakers": 2, "policy": 0},
        "quarantined": {"decisions": len(MALFORMED), "labels": 2, "breakers": 1, "policy": 0},
    }
    assert scalar(stack, "SELECT count() FROM routerscope.decisions FINAL") == 300
    assert scalar(stack, "SELECT uniqExact(event_id) FROM routerscope.decisions") == 300
    assert scalar(stack, "SELECT count() FROM routerscope.labels") == 40
    assert scalar(stack, "SELECT count() FROM routerscope.breaker_events") == 2
    # Each malformed message is in quarantine, byte for byte, with exactly its rules.
    rows = query(
        stack,
        "SELECT raw, rules, error FROM routerscope.quarantine WHERE kafka_topic = {t:String}",
        t=DECISIONS,
    )
    by_raw = {
        (raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogateescape")): (rules, error)
        for raw, rules, error in rows
    }
    assert len(rows) == len(MALFORMED)
    for name, payload, expected in MALFORMED:
        rules, error = by_raw[payload] if payload in by_raw else _lookup_binary(stack, payload)
        assert sorted(rules) == sorted(expected), name
        assert all(rule in error for rule in expected), name
    label_rules = query(
        stack, "SELECT rules FROM routerscope.quarantine WHERE kafka_topic = {t:String} ORDER BY kafka_offset", t=LABELS
    )
    assert sorted(r[0] for r in label_rules) == [["json.invalid"], ["schema.invalid.source"]]
    assert query(stack, "SELECT rules FROM routerscope.quarantine WHERE kafka_topic = {t:String}", t=BREAKERS) == [
        (["invariant.breaker_state_changes"],)
    ]


def _lookup_binary(settings, payload: bytes):
    """Binary payloads come back as str from clickhouse-connect; compare in SQL instead."""
    rows = query(
        settings,
        "SELECT rules, error FROM routerscope.quarantine WHERE hex(raw) = {h:String}",
        h=payload.hex().upper(),
    )
    assert len(rows) == 1, "the binary payload must be stored byte for byte"
    return rows[0]


def test_every_produced_offset_is_accounted_for_once(stack):
    produce(stack, DECISIONS, valid_decisions(500) + [b"{}", b"\x00\xff"])
    load(stack, **FAST)
    produced = {(p, o) for p, o in query(stack, "SELECT kafka_partition, kafka_offset FROM routerscope.decisions")}
    produced |= {(p, o) for p, o in query(stack, "SELECT kafka_partition, kafka_offset FROM routerscope.quarantine")}
    per_partition = dict(
        query(
            stack, "SELECT kafka_partition, max(next_offset) FROM routerscope.ingest_offsets GROUP BY kafka_partition"
        )
    )
    expected = {(p, o) for p, end in per_partition.items() for o in range(end)}
    assert produced == expected and len(expected) == 502


def test_a_second_run_loads_only_what_is_new(stack):
    produce(stack, DECISIONS, valid_decisions(100))
    first = load(stack, **FAST)
    produce(stack, DECISIONS, valid_decisions(50, start=100) + [b"nope"])
    second = load(stack, **FAST)
    third = load(stack, **FAST)
    assert first.loaded["decisions"] == 100
    assert (second.loaded["decisions"], second.quarantined["decisions"]) == (50, 1)
    assert (third.loaded["decisions"], third.quarantined["decisions"]) == (0, 0)
    assert scalar(stack, "SELECT count() FROM routerscope.decisions") == 150


def test_a_stop_python_swallowed_ends_the_drain_at_its_next_turn_and_the_next_run_loads_the_rest_once(stack):
    """A CI run's Ctrl-C landed in a weakref callback, where Python prints the KeyboardInterrupt and goes on: the
    load drained to the end and exited 0. The stop is remembered (routerscope/core/interrupts.py) and the drain
    raises it at its next turn. Here the handler runs inside a weakref callback after the first messages."""
    produce(stack, DECISIONS, valid_decisions(20_000))
    handler = interrupts.raising(KeyboardInterrupt)  # what `routerscope` installs for SIGINT
    consumed: list[int] = []

    class Thing:
        pass

    def progress(n: int) -> None:
        consumed.append(n)
        if len(consumed) == 1:
            thing = Thing()
            ref = weakref.ref(thing, lambda _: handler(signal.SIGINT, None))  # noqa: F841 - held until `del`
            del thing  # the callback raises; Python prints it and carries on

    with pytest.raises(KeyboardInterrupt):
        Loader(stack, LoadConfig(batch_size=2_000, idle_timeout_s=0.5), progress=progress).run()
    assert sum(consumed) < 20_000  # stopped at the drain's next turn, not at the end
    rest = load(stack, **FAST)
    assert scalar(stack, "SELECT count() FROM routerscope.decisions") == 20_000  # nothing lost, nothing doubled
    assert scalar(stack, "SELECT uniqExact(event_id) FROM routerscope.decisions") == 20_000
    assert 0 < rest.loaded["decisions"] <= 20_000


def _produce_batches(settings, partition: int, batches: list[list[bytes]]) -> None:
    """Each list as its own record batch (flushed before the next) into one partition."""
    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap(), "linger.ms": 50})
    for payloads in batches:
        for payload in payloads:
            producer.produce(DECISIONS, value=payload, partition=partition)
        assert producer.flush(30) == 0


def test_every_run_reads_to_the_end_of_the_last_record_batch_not_to_its_first_message(stack):
    """The embedded broker answers a ListOffsets request for a partition's end with the base offset
    of its last record batch plus one. A run that ended there left the rest of that batch behind,
    and every later run did the same to the new last batch. The end is taken from fetch responses;
    small consume calls (batch_size 5) make an early end certain, the long idle timeout makes it
    visible (a run that waited it out would still load everything)."""
    _produce_batches(stack, 1, [valid_decisions(20, start=20 * b) for b in range(3)])
    first = Loader(stack, LoadConfig(batch_size=5, idle_timeout_s=120)).run()
    _produce_batches(stack, 1, [valid_decisions(20, start=60 + 20 * b) for b in range(2)])
    second = Loader(stack, LoadConfig(batch_size=5, idle_timeout_s=120)).run()
    third = Loader(stack, LoadConfig(batch_size=5, idle_timeout_s=120)).run()  # nothing new: each partition at its end
    assert (first.loaded["decisions"], second.loaded["decisions"], third.loaded["decisions"]) == (60, 40, 0)
    assert max(first.seconds, second.seconds, third.seconds) < 60  # ended at the ends, not by the idle timeout
    assert scalar(stack, "SELECT count() FROM routerscope.decisions") == 100


def test_without_partition_eof_a_run_still_ends_at_the_fetched_end(stack, monkeypatch):
    """A broker that never reports a partition's end (no partition-EOF events) leaves the fetched
    high watermark as the only way to end before the idle timeout: with it, every message of every
    record batch is loaded and the run ends at once, for a partition read to its end and for one
    with nothing new. The broker, the consumer and the warehouse are real; only the consumer's
    option that asks for partition-EOF events is turned off."""
    monkeypatch.setitem(CONSUMER_OPTIONS, "enable.partition.eof", False)
    _produce_batches(stack, 2, [valid_decisions(20, start=20 * b) for b in range(3)])
    first = Loader(stack, LoadConfig(batch_size=5, idle_timeout_s=100)).run()
    second = Loader(stack, LoadConfig(batch_size=5, idle_timeout_s=100)).run()
    assert (first.loaded["decisions"], second.loaded["decisions"]) == (60, 0)
    assert first.seconds < 50 and second.seconds < 50


@pytest.mark.slow
def test_a_run_ends_while_a_producer_keeps_writing_and_the_next_run_takes_the_rest(stack):
    """The idle timeout never comes while a producer writes: the run ends at the partitions' ends
    (as of an early fetch from each), and the next run loads what arrived since. Nothing is lost
    or loaded twice across the two runs."""
    produce(stack, DECISIONS, valid_decisions(300))
    stop = threading.Event()
    written = []

    def keep_writing():
        producer = Producer({"bootstrap.servers": stack.kafka_bootstrap(), "linger.ms": 5, "log_level": 0})
        i = 300
        while not stop.is_set():
            producer.produce(DECISIONS, value=valid_decisions(1, start=i)[0], partition=i % 3)
            producer.poll(0)
            i += 1
            time.sleep(0.002)
        producer.flush(30)
        written.append(i - 300)

    writer = threading.Thread(target=keep_writing)
    writer.start()
    try:
        time.sleep(1.0)  # it is writing before the run starts
        result = Loader(stack, LoadConfig(batch_size=50, idle_timeout_s=120)).run()
    finally:
        stop.set()
        writer.join(60)
    assert result.seconds < 60  # it ended by the partitions' ends, not by the idle timeout
    assert result.loaded["decisions"] >= 300
    final = Loader(stack, LoadConfig(**FAST)).run()
    assert result.loaded["decisions"] + final.loaded["decisions"] == 300 + written[0]


@pytest.mark.slow
def test_replaying_the_same_offset_range_three_times_adds_no_row(stack):
    produce(stack, DECISIONS, valid_decisions(200) + [b"garbage"])
    load(stack, **FAST)
    before = (
        scalar(stack, "SELECT count() FROM routerscope.decisions"),
        scalar(stack, "SELECT count() FROM routerscope.quarantine"),
    )
    for _ in range(3):
        # Forget the stored positions: the loader re-reads the whole range from the broker.
        with open_warehouse(stack) as client:
            client.command("TRUNCATE TABLE routerscope.ingest_offsets")
        replay = load(stack, **FAST)
        assert replay.loaded["decisions"] == 0 and replay.quarantined["decisions"] == 0
        assert replay.skipped_already_loaded == 201
    after = (
        scalar(stack, "SELECT count() FROM routerscope.decisions"),
        scalar(stack, "SELECT count() FROM routerscope.quarantine"),
    )
    assert before == after == (200, 1)


def test_the_same_insert_delivered_three_times_is_deduplicated_by_its_token(stack):
    """The second line of defence: a retried insert of an identical batch (same offsets) adds nothing."""
    produce(stack, DECISIONS, valid_decisions(60) + [b"broken"], keys=[b"k"] * 61)
    consumer = Consumer(librdkafka_config(stack, **{"group.id": "test", "enable.auto.commit": False}))
    partitions = [TopicPartition(DECISIONS, p, 0) for p in range(stack.topic_partitions)]
    consumer.assign(partitions)
    messages = []
    deadline = time.monotonic() + 20
    while len(messages) < 61 and time.monotonic() < deadline:
        messages += [m for m in consumer.consume(100, timeout=0.5) if m.error() is None]
    consumer.close()
    assert len(messages) == 61
    loader = Loader(stack)
    with open_warehouse(stack) as client:
        migrate(client)
        for _ in range(3):
            batch = Batch()
            for m in messages:
                batch.add(m.topic(), m.partition(), m.offset(), m)
            states = {(DECISIONS, m.partition()): PartitionState(DECISIONS, m.partition(), None) for m in messages}
            loader.write(client, batch, states, LoadResult())
        counts = [
            client.query(f"SELECT count() FROM routerscope.{t}").result_rows[0][0] for t in ("decisions", "quarantine")
        ]
    assert counts == [60, 1]


def test_a_token_left_by_a_killed_run_whose_rows_never_landed_does_not_swallow_the_next_runs_rows(stack):
    """A SIGKILL between the warehouse writing an insert's deduplication-log entry and moving its part into
    place leaves the token remembered and the rows gone. The next run starts from the same stored position
    with the same batch size, so its batch has the same offset ranges: were tokens made of those ranges alone,
    its insert would be dropped as a duplicate and the rows lost. Simulated: the first run's quarantine rows
    are deleted and its positions forgotten (its deduplication log stays)."""
    produce(stack, DECISIONS, valid_decisions(30) + [b"bad-1", b"bad-2", b"bad-3"], keys=[b"k"] * 33)
    first = load(stack, batch_size=400, **FAST)
    assert (first.loaded["decisions"], first.quarantined["decisions"]) == (30, 3)
    with open_warehouse(stack) as client:
        client.command("ALTER TABLE routerscope.quarantine DELETE WHERE 1 SETTINGS mutations_sync = 2")
        client.command("TRUNCATE TABLE routerscope.ingest_offsets")
        assert client.query("SELECT count() FROM routerscope.quarantine").result_rows[0][0] == 0
    second = load(stack, batch_size=400, **FAST)
    assert second.skipped_already_loaded == 30  # the facts were found where they landed
    assert second.quarantined["decisions"] == 3
    assert scalar(stack, "SELECT count() FROM routerscope.quarantine") == 3
    assert scalar(stack, "SELECT count() FROM routerscope.decisions") == 30


class ClientWrapper:
    """The real client; subclasses change one call."""

    def __init__(self, client):
        self._client = client

    def __getattr__(self, name):
        return getattr(self._client, name)


class FailingClient(ClientWrapper):
    """The real client, except that inserts into one table fail (the warehouse going away mid-batch)."""

    def __init__(self, client, table: str):
        super().__init__(client)
        self._table = table

    def insert(self, table, *args, **kwargs):
        if table.endswith("." + self._table):
            raise ConnectionError(f"connection to the warehouse lost while inserting into {table}")
        return self._client.insert(table, *args, **kwargs)


@pytest.mark.parametrize("failing_table", ["quarantine", "ingest_offsets"])
def test_warehouse_failing_mid_batch_does_not_advance_offsets_and_the_next_run_completes(stack, failing_table):
    produce(stack, DECISIONS, valid_decisions(400) + [b"bad-1", b"bad-2"])
    with open_warehouse(stack) as client:
        migrate(client)
        with pytest.raises(WarehouseError, match="resumes there"):
            Loader(stack, LoadConfig(**FAST)).run(FailingClient(client, failing_table))
        positions = client.query("SELECT count() FROM routerscope.ingest_offsets").result_rows[0][0]
    assert positions == 0  # the facts landed, their positions did not
    result = load(stack, **FAST)
    # whatever landed before the failure is recognised, the rest is loaded: 402 offsets in all
    assert result.loaded["decisions"] + result.quarantined["decisions"] + result.skipped_already_loaded == 402
    assert scalar(stack, "SELECT count() FROM routerscope.decisions") == 400
    assert scalar(stack, "SELECT count() FROM routerscope.quarantine") == 2
    assert (
        scalar(
            stack,
            "SELECT sum(next_offset) FROM "
            "(SELECT max(next_offset) AS next_offset FROM routerscope.ingest_offsets GROUP BY kafka_partition)",
        )
        == 402
    )


class HeldClient(ClientWrapper):
    """The real client, except that the first facts insert waits (up to 20 s) until the run has consumed
    more messages than that insert holds (all valid: one line each); `overlapped` says whether it did."""

    def __init__(self, client):
        super().__init__(client)
        self.consumed, self.first_batch, self.more = 0, None, threading.Event()
        self.overlapped: bool | None = None

    def progress(self, n: int) -> None:
        self.consumed += n
        self._check()

    def _check(self) -> None:
        if self.first_batch is not None and self.consumed > self.first_batch:
            self.more.set()

    def raw_insert(self, table, columns, body, *args, **kwargs):
        if self.overlapped is None:
            self.first_batch = body.count(b"\n") + 1
            self._check()
            self.overlapped = self.more.wait(20)
        return self._client.raw_insert(table, columns, body, *args, **kwargs)


def test_the_next_batch_is_consumed_while_a_batch_is_written_and_positions_follow_their_rows(stack):
    """Writes run beside the drain (the embedded warehouse inserts without the GIL): while the first batch's
    insert is held, the run consumes the next batch. One batch is written at a time, in order, so every
    position still follows its rows: the run loads everything once and stores the end of every partition."""
    produce(stack, DECISIONS, valid_decisions(300), keys=[b"k"] * 300)
    with open_warehouse(stack) as client:
        migrate(client)
        held = HeldClient(client)
        result = Loader(stack, LoadConfig(batch_size=100, **FAST), progress=held.progress).run(held)
        rows = client.query("SELECT count(), uniqExact(kafka_offset) FROM routerscope.decisions").result_rows[0]
        stored = client.query("SELECT max(next_offset) FROM routerscope.ingest_offsets").result_rows[0][0]
    assert held.overlapped is True
    assert result.loaded["decisions"] == 300 and result.batches >= 2
    assert rows == (300, 300) and stored == 300


def test_a_failed_write_of_a_later_batch_keeps_the_earlier_batches_positions(stack):
    """The second batch's write fails in the writing thread: the run raises it as a warehouse error and the
    first batch, written before it, keeps its rows and its position; the next run loads exactly the rest."""

    class SecondFails(ClientWrapper):
        calls = 0

        def raw_insert(self, *args, **kwargs):
            self.calls += 1
            if self.calls >= 2:  # the warehouse refuses every insert from the second on
                raise ConnectionError("connection to the warehouse lost while inserting")
            return self._client.raw_insert(*args, **kwargs)

    produce(stack, DECISIONS, valid_decisions(300), keys=[b"k"] * 300)
    with open_warehouse(stack) as client:
        migrate(client)
        with pytest.raises(WarehouseError, match="resumes there"):
            Loader(stack, LoadConfig(batch_size=100, **FAST)).run(SecondFails(client))
        stored = client.query("SELECT max(next_offset) FROM routerscope.ingest_offsets").result_rows[0][0]
        below = client.query(f"SELECT uniqExact(kafka_offset) FROM routerscope.decisions WHERE kafka_offset < {stored}")
    # (a batch closes at the first consume that takes it to 100 messages or more: its end is not exactly 100)
    assert 100 <= stored < 300 and below.result_rows[0][0] == stored
    result = load(stack, **FAST)
    assert result.loaded["decisions"] == 300 - stored
    assert scalar(stack, "SELECT count() FROM routerscope.decisions") == 300


@pytest.mark.slow
def test_a_restarted_memory_broker_is_reported_not_skipped(stack, home):
    produce(stack, DECISIONS, valid_decisions(90))
    load(stack, **FAST)
    port = int(stack.kafka_bootstrap().rsplit(":", 1)[1])
    broker.stop(stack)
    broker.start(stack, port=port)  # memory storage: the 90 messages are gone
    produce(stack, DECISIONS, valid_decisions(3, start=1000))
    with pytest.raises(BrokerDataLost, match="no longer holds"):
        load(stack, **FAST)
    assert scalar(stack, "SELECT count() FROM routerscope.decisions") == 90
    # From the command line: one clear line and a non-zero exit.
    done = run_cli("load", env=clean_env(home))
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith("routerscope: error: the broker no longer holds")
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_load_command_prints_the_documented_json(stack, home):
    produce(stack, DECISIONS, valid_decisions(12) + [b"x"])
    produce(stack, BREAKERS, [dumps(breaker())])
    done = run_cli("load", "--json", "--idle-timeout", "0.5", env=clean_env(home))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "loaded": {"decisions": 12, "labels": 0, "breakers": 1, "policy": 0},
        "quarantined": {"decisions": 1, "labels": 0, "breakers": 0, "policy": 0},
        "windows_5m": 0,  # the decisions are dated long before the last day: no window brought up to date
    }
    human = run_cli("load", "--idle-timeout", "0.5", env=clean_env(home))
    assert human.returncode == 0 and "decisions  loaded         0" in human.stdout


@pytest.mark.slow
@pytest.mark.timeout(600)  # up to 24 loader processes killed mid-drain, then a full load
def test_sigkill_at_random_moments_loses_and_doubles_nothing(stack, home):
    n_valid, n_bad = 30_000, 300
    payloads = valid_decisions(n_valid) + [b"\x00not-json-%d" % i for i in range(n_bad)]
    random.Random(7).shuffle(payloads)
    produce(stack, DECISIONS, payloads)
    env = clean_env(home)
    rng = random.Random(11)
    kills = 0

    def stored() -> int:  # rows the killed runs left behind (the lock is free once the loader is dead)
        return scalar(stack, "SELECT count() FROM routerscope.decisions")

    # Kill at least five times, and go on until the killed runs have stored something: on a busy machine
    # start-up (migrations, consumer assignment) can outlast the first waits, and a kill before the first
    # committed batch proves nothing about surviving kills. Later attempts wait longer.
    for attempt in range(24):
        if kills >= 5 and stored() > 0:
            break
        process = subprocess.Popen(
            [ROUTERSCOPE, "load", "--batch-size", "400", "--idle-timeout", "0.5"],
            env=env,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        # Once the loader holds the warehouse lock it is draining: kill it somewhere in there.
        lock = home / "warehouse.lock"
        deadline = time.monotonic() + 60
        while process.poll() is None and time.monotonic() < deadline:
            if lock.exists() and f"pid {process.pid} " in lock.read_text(errors="replace"):
                break
            time.sleep(0.02)
        time.sleep(0.3 + 0.15 * attempt + rng.uniform(0, 0.5))  # (a loader draining 30k events takes seconds)
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.wait()
            kills += 1
        else:
            break  # it finished before the kill: everything is loaded
    assert kills >= 5, "the loader finished too fast to be killed mid-drain five times"
    print(f"killed {kills} times")
    final = run_cli("load", "--json", "--idle-timeout", "0.5", env=env, timeout=300)
    assert final.returncode == 0, final.stderr
    # the killed runs did part of the work (their batches must survive the kills)
    assert json.loads(final.stdout)["loaded"]["decisions"] < n_valid
    assert scalar(stack, "SELECT uniqExact(event_id) FROM routerscope.decisions") == n_valid
    assert scalar(stack, "SELECT count() FROM routerscope.decisions") == n_valid  # not even unmerged doubles
    assert scalar(stack, "SELECT count() FROM routerscope.quarantine") == n_bad
    # the ledger names every loaded offset once, with the record it became
    assert scalar(stack, "SELECT count() FROM routerscope.loaded_messages FINAL") == n_valid
    assert scalar(stack, "SELECT uniqExact(record_id) FROM routerscope.loaded_messages") == n_valid
    stored = set(query(stack, "SELECT kafka_partition, kafka_offset FROM routerscope.decisions"))
    stored |= set(query(stack, "SELECT kafka_partition, kafka_offset FROM routerscope.quarantine"))
    ends = dict(
        query(
            stack, "SELECT kafka_partition, max(next_offset) FROM routerscope.ingest_offsets GROUP BY kafka_partition"
        )
    )
    assert sum(ends.values()) == n_valid + n_bad
    assert stored == {(p, o) for p, end in ends.items() for o in range(end)}


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(payloads=st.lists(st.binary(max_size=300), min_size=1, max_size=8))
def test_arbitrary_bytes_never_crash_the_loader_and_are_quarantined(arbitrary_stack, payloads):
    settings_, seen = arbitrary_stack
    produce(settings_, LABELS, payloads)
    result = load(settings_, **FAST)
    assert result.loaded["labels"] == 0
    assert result.quarantined["labels"] == len(payloads)
    seen[0] += len(payloads)
    assert scalar(settings_, "SELECT count() FROM routerscope.quarantine") == seen[0]


@pytest.fixture(scope="module")
def arbitrary_stack(tmp_path_factory):
    home = tmp_path_factory.mktemp("arbitrary")
    settings_ = settings_for(home)
    broker.start(settings_, port=free_port())
    yield settings_, [0]
    broker.stop(settings_)


@pytest.mark.slow
def test_loaders_owning_disjoint_partition_sets_together_load_everything_once(stack, home):
    produce(stack, DECISIONS, valid_decisions(240) + [b"bad"])
    first = run_cli("load", "--json", "--partitions", "0", "--idle-timeout", "0.5", env=clean_env(home))
    assert first.returncode == 0, first.stderr
    only_zero = query(stack, "SELECT DISTINCT kafka_partition FROM routerscope.decisions")
    assert only_zero == [(0,)]
    second = run_cli("load", "--json", "--partitions", "1,2", "--idle-timeout", "0.5", env=clean_env(home))
    assert second.returncode == 0, second.stderr
    totals = [json.loads(r.stdout) for r in (first, second)]
    assert sum(t["loaded"]["decisions"] for t in totals) == 240
    assert sum(t["quarantined"]["decisions"] for t in totals) == 1
    assert scalar(stack, "SELECT count() FROM routerscope.decisions") == 240
    bad = run_cli("load", "--partitions", "zero", env=clean_env(home))
    assert bad.returncode == 2 and "partition numbers" in bad.stderr
