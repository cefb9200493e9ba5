"""The local broker and `produce`, as separate processes against a real Tansu broker."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from routerscope.core import broker, kafka, names
from routerscope.core.procs import free_port
from tests.support.events import decision, dumps, label
from tests.support.home import clean_env, run_cli, settings_for
from tests.support.kafka import count_admin_clients

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def broker_settings(tmp_path_factory):
    """This file's own broker (it overrides the session one): its tests read back whole topics, which
    other files' messages on a shared broker would add to."""
    settings = settings_for(tmp_path_factory.mktemp("own-broker"))
    broker.start(settings, port=free_port(), keep=False)
    yield settings
    broker.stop(settings)


def consume_all(settings, topic: str, expected: int, timeout_s: float = 30.0) -> list:
    """Read every partition of `topic` from the start until `expected` messages arrived."""
    consumer = Consumer(kafka.librdkafka_config(settings, **{"group.id": "test-reader", "enable.auto.commit": False}))
    parts = kafka.partitions_of(settings, topic)
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    got = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                assert not msg.error(), msg.error()
                got.append(msg)
        # anything beyond `expected` would be a duplicate: give it a moment to show up
        for msg in consumer.consume(num_messages=1000, timeout=1.0):
            got.append(msg)
    finally:
        consumer.close()
    return got


def test_start_status_stop_as_separate_processes(home):
    env = clean_env(home)
    port = free_port()
    started = run_cli("broker", "start", "--port", str(port), env=env)
    assert started.returncode == 0, started.stderr
    assert started.stdout.strip() == f"127.0.0.1:{port}"
    try:
        # a later command with the same home finds it, and a second start is a no-op
        again = run_cli("broker", "start", "--port", str(port), env=env)
        assert again.returncode == 0 and "already running" in again.stderr
        status = run_cli("broker", "status", env=env)
        assert status.returncode == 0 and f"127.0.0.1:{port}" in status.stdout
        settings = settings_for(home)
        assert settings.kafka_bootstrap() == f"127.0.0.1:{port}"
        topics = kafka.check_reachable(settings).topics
        for topic in names.TOPICS.values():
            assert len(topics[topic].partitions) == settings.topic_partitions
    finally:
        stopped = run_cli("broker", "stop", env=env)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    after = run_cli("broker", "status", env=env)
    assert after.returncode == 3 and "not running" in after.stdout


def test_port_taken_by_someone_else_is_a_clear_error(home, broker_settings):
    taken = int(broker_settings.kafka_bootstrap().rsplit(":", 1)[1])
    result = run_cli("broker", "start", "--port", str(taken), env=clean_env(home))
    assert result.returncode == 1
    assert "already in use" in result.stderr and "--port" in result.stderr
    assert "Traceback" not in result.stderr


def test_produce_round_trip_is_byte_identical_and_keyed(tmp_path, broker_settings):
    lines = [dumps(decision(session_id=f"s-{i % 7}", request_id=f"r-{i}")) for i in range(500)]
    lines += [b"not json", b"\x00\xff binary \xfe", b'{"session_id": 5}']
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n\n")  # a trailing blank line is not a message
    topic = names.TOPIC_DECISIONS
    env = clean_env(broker_settings.home)
    result = run_cli("produce", str(path), "--topic", "decisions", env=env)
    assert result.returncode == 0, result.stderr
    assert f"produced {len(lines)} message(s) to {topic}" in result.stdout
    assert "3 without a key" in result.stdout

    got = consume_all(broker_settings, topic, len(lines))
    assert sorted(m.value() for m in got) == sorted(lines)  # nothing lost, nothing doubled, bytes as sent
    for msg in got:
        if msg.value().startswith(b'{"schema_version"'):
            assert msg.key() == msg.value().split(b'"session_id":"')[1].split(b'"')[0]
        else:
            assert msg.key() is None
    # one session's messages share a partition, in the order they were produced
    by_session: dict[bytes, set[int]] = {}
    for msg in got:
        if msg.key():
            by_session.setdefault(msg.key(), set()).add(msg.partition())
    assert all(len(parts) == 1 for parts in by_session.values())


def test_labels_are_keyed_by_request_id(tmp_path, broker_settings):
    path = tmp_path / "labels.jsonl"
    events = [dumps(label(request_id=f"lab-req-{i}")) for i in range(20)]
    path.write_bytes(b"\n".join(events))
    result = run_cli("produce", str(path), "--topic", "labels", "--quiet", env=clean_env(broker_settings.home))
    assert result.returncode == 0, result.stderr
    got = consume_all(broker_settings, names.TOPIC_LABELS, 20)
    assert {m.key() for m in got} == {f"lab-req-{i}".encode() for i in range(20)}


@pytest.mark.slow
def test_produce_to_unreachable_broker_is_one_clear_line(tmp_path, home):
    path = tmp_path / "one.jsonl"
    path.write_bytes(dumps(decision()))
    env = clean_env(home, ROUTERSCOPE_KAFKA_BOOTSTRAP=f"127.0.0.1:{free_port()}")
    started = time.monotonic()
    result = run_cli("produce", str(path), "--topic", "decisions", env=env)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    error_lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(error_lines) == 1 and error_lines[0].startswith("routerscope: error: no Kafka broker answers")
    assert time.monotonic() - started < 30


def test_produce_without_any_broker_says_how_to_start_one(tmp_path, home):
    path = tmp_path / "one.jsonl"
    path.write_bytes(dumps(decision()))
    result = run_cli("produce", str(path), "--topic", "decisions", env=clean_env(home))
    assert result.returncode == 2
    assert "routerscope broker start" in result.stderr and "Traceback" not in result.stderr


def test_stop_when_nothing_runs_is_harmless(home):
    settings = settings_for(home)
    assert broker.stop(settings) is False
    assert broker.status(settings).running is False


def _start_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[19])


@pytest.mark.parametrize("shape", ["record_before_identities", "same_program_started_later"])
def test_stop_with_a_stale_record_leaves_the_process_now_holding_that_pid_alone(home, shape):
    """Issue 40: with a stale pid in `broker.json`, `status` said not running, yet `stop` sent SIGTERM
    (then SIGKILL) to whatever process held that pid now. Here a bystander holds the recorded pid: a
    record as written before executables and start times were recorded, and a record naming the
    bystander's own executable with another start time (the pid reused by the same program)."""
    settings = settings_for(home)
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        record = {"bootstrap": "127.0.0.1:9", "pid": bystander.pid, "port": free_port(), "started_at": 1.0}
        if shape == "same_program_started_later":
            record["exe"] = str(Path(f"/proc/{bystander.pid}/exe").readlink())
            record["start_ticks"] = _start_ticks(bystander.pid) - 1
        home.mkdir(parents=True, exist_ok=True)
        settings.broker_record_path.write_text(json.dumps(record))
        stopped = run_cli("broker", "stop", env=clean_env(home))
        assert stopped.returncode == 0 and "no broker was running" in stopped.stdout, stopped
        time.sleep(0.3)
        assert bystander.poll() is None, "stop signalled a process that is not our broker"
        assert not settings.broker_record_path.exists()
        assert run_cli("broker", "status", env=clean_env(home)).returncode == 3
    finally:
        bystander.kill()
        bystander.wait()


def test_a_started_broker_records_what_stop_checks_and_stop_stops_it(home):
    """The record names the broker's executable and start time; `stop` checks them and stops it."""
    settings = settings_for(home)
    started = broker.start(settings, port=free_port(), keep=False)
    record = json.loads(settings.broker_record_path.read_text())
    assert record["pid"] == started.pid and "tansu" in Path(record["exe"]).name
    assert record["start_ticks"] == _start_ticks(started.pid)
    assert broker.stop(settings) is True
    assert broker.status(settings).running is False


@pytest.mark.slow
def test_end_offsets_count_every_message_of_the_last_record_batch(home):
    """The lag on the on-call page is the broker's end minus the loaded position. The embedded
    broker answers a ListOffsets request with the base offset of the last record batch plus one;
    the end comes from a fetch response, which counts the whole batch."""
    settings = settings_for(home)
    broker.start(settings, port=free_port(), keep=False)
    try:
        producer = Producer({"bootstrap.servers": settings.kafka_bootstrap(), "linger.ms": 50, "log_level": 0})
        for _ in range(3):  # three record batches of seven
            for _ in range(7):
                producer.produce(names.TOPIC_BREAKERS, value=b"{}", partition=1)
            assert producer.flush(30) == 0
        ends = kafka.end_offsets(settings)
        every = {(t, p) for t in names.TOPICS.values() for p in kafka.partitions_of(settings, t)}
    finally:
        broker.stop(settings)
    assert set(ends) == every
    assert ends[(names.TOPIC_BREAKERS, 1)] == 21
    assert {end for key, end in ends.items() if key != (names.TOPIC_BREAKERS, 1)} == {0}


@pytest.mark.slow
def test_end_offsets_of_a_stopped_broker_are_unknown_at_once_and_of_a_restarted_one_known_again(home, monkeypatch):
    """On-call's consumer lag with the real broker stopped: unknown, without making a Kafka client (the refused TCP
    connection answers first; the client's 2 s wait was 2 of a cold On-call's 4.6 s). Started again on the same port:
    the ends are read again."""
    settings = settings_for(home)
    port = free_port()
    broker.start(settings, port=port, keep=False)
    made = count_admin_clients(monkeypatch)  # the real clients, counted
    try:
        assert kafka.end_offsets(settings) is not None and made == ["admin"]
        broker.stop(settings)
        made.clear()
        assert kafka.end_offsets(settings) is None and made == []
        broker.start(settings, port=port, keep=False)  # (which makes a client of its own: counted from after it)
        made.clear()
        assert kafka.end_offsets(settings) is not None and made == ["admin"]
    finally:
        broker.stop(settings)


def test_a_home_made_by_broker_start_and_its_log_are_the_owners_alone(tmp_path):
    """`broker start` on a home that does not exist yet: the home is 0700 and the broker's log, pid and record
    0600 (they were 0755 and 0644); a log left 0644 by an earlier version is made 0600 too."""
    import stat

    home = tmp_path / "fresh-home"
    settings = settings_for(home)
    try:
        broker.start(settings, port=free_port(), keep=False)
        assert stat.S_IMODE(home.stat().st_mode) == 0o700
        for path in (settings.broker_log_path, settings.broker_pid_path, settings.broker_record_path):
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        broker.stop(settings)
        settings.broker_log_path.chmod(0o644)
        broker.start(settings, port=free_port(), keep=False)
        assert stat.S_IMODE(settings.broker_log_path.stat().st_mode) == 0o600
    finally:
        broker.stop(settings)
