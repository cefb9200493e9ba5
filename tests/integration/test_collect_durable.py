"""`routerscope collect` (the command, its own process) against the real broker paused, restarted and killed
under it: every span answered 200 reaches Kafka, exactly once while `collect` itself lives; traces waiting
for their root survive a `kill -9`; hostile bodies cost a bounded amount of memory and CPU."""

from __future__ import annotations

import gzip
import http.client
import json
import os
import signal
import subprocess
import threading
import time

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from routerscope.core import broker
from routerscope.core.procs import free_port
from tests.support.home import REPO, ROUTERSCOPE, clean_env, settings_for
from tests.support.kafka import consume_all

pytestmark = [pytest.mark.integration, pytest.mark.slow]
TRACES_PER_REQUEST = 16


def body(first: int, n: int = TRACES_PER_REQUEST, roots: bool = True, children: bool = True) -> bytes:
    """`n` traces numbered from `first`, each a root and two model calls (as an app's exporter sends them)."""
    request = ExportTraceServiceRequest()
    rs = request.resource_spans.add()
    kv = rs.resource.attributes.add()
    kv.key, kv.value.string_value = "service.name", "durable-app"
    ss = rs.scope_spans.add()
    t0 = time.time_ns()
    for no in range(first, first + n):
        trace_id = no.to_bytes(16, "big")
        root_id = (no * 4).to_bytes(8, "big")
        for i in range(3):
            if (i == 0 and not roots) or (i > 0 and not children):
                continue
            span = ss.spans.add(trace_id=trace_id, span_id=(no * 4 + i).to_bytes(8, "big"))
            span.name = "handle" if i == 0 else "chat gpt-4o-mini"
            span.parent_span_id = b"" if i == 0 else root_id
            span.kind = Span.SPAN_KIND_SERVER if i == 0 else Span.SPAN_KIND_CLIENT
            span.start_time_unix_nano, span.end_time_unix_nano = t0 + i, t0 + 1_000_000 + i
            if i:
                a = span.attributes.add()
                a.key, a.value.string_value = "gen_ai.provider.name", "openai"
    return request.SerializeToString()


def post(port: int, data: bytes, timeout: float = 60, **headers) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", "/v1/traces", body=data, headers={"Content-Type": "application/x-protobuf", **headers})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def get(port: int, path: str) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def start_collect(home, port: int, *extra: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [ROUTERSCOPE, "collect", "--port", str(port), *extra],
        env=clean_env(home),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    assert "OTLP/HTTP on" in line, proc.stderr.read() if proc.poll() is not None else line
    proc.first_line = line  # type: ignore[attr-defined]
    return proc


def stop_collect(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return err


def wait_drained(port: int, timeout_s: float = 90) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status, doc = get(port, "/-/ready")
        if doc["outbox"] == 0 and doc["held"] == 0:
            return doc
        time.sleep(0.2)
    raise AssertionError(f"the outbox never drained: {doc}")


def trace_numbers(messages) -> list[int]:
    """The trace number of every message (one message per trace)."""
    return [int(m.key(), 16) for m in messages]


class Sender(threading.Thread):
    """Posts numbered traces until stopped; remembers which were answered 200 and every status."""

    def __init__(self, port: int, start_no: int):
        super().__init__(daemon=True)
        self.port, self.next = port, start_no
        self.accepted: list[int] = []
        self.statuses: dict[int, int] = {}
        self.stop = threading.Event()
        self.slowest = 0.0

    def run(self) -> None:
        while not self.stop.is_set():
            started = time.monotonic()
            status = post(self.port, body(self.next))
            self.slowest = max(self.slowest, time.monotonic() - started)
            self.statuses[status] = self.statuses.get(status, 0) + 1
            if status == 200:
                self.accepted.extend(range(self.next, self.next + TRACES_PER_REQUEST))
                self.next += TRACES_PER_REQUEST
            time.sleep(0.01)


def test_a_broker_paused_then_restarted_under_collect_loses_and_doubles_nothing_answered_200(home):
    """The broker SIGSTOPped for 12 s, then killed and started again (memory storage: the new one starts
    empty, and the producer's id is unknown to it, a fatal UNKNOWN_PRODUCER_ID) while `collect` keeps
    taking traces: every request is answered 200, and every trace answered 200 is in Kafka exactly once
    (in the first broker, or in the second for those taken after the first was killed)."""
    settings = settings_for(home)
    kafka_port = free_port()
    broker.start(settings, port=kafka_port)
    port = free_port()
    collect = start_collect(home, port)
    try:
        sender = Sender(port, 1)
        sender.start()
        time.sleep(1.0)
        pid = broker.status(settings).pid
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(12)
            paused = get(port, "/-/ready")
            assert paused[0] == 200 and paused[1]["outbox"] > 0  # taking spans, holding them on disk
        finally:
            os.kill(pid, signal.SIGCONT)
        time.sleep(2)
        sender.stop.set()
        sender.join(timeout=60)
        wait_drained(port)
        first = trace_numbers(consume_all(settings.kafka_bootstrap(), settings.otlp_topic, expect=len(sender.accepted)))
        assert sorted(first) == sender.accepted  # each once
        before = len(first)

        # the broker killed (memory storage: what it held goes with it) and started again, empty, while
        # traces keep coming: those answered 200 meanwhile wait on disk, then all reach the new broker once
        broker.stop(settings)
        sender2 = Sender(port, sender.next)
        sender2.start()
        time.sleep(3)
        broker.start(settings, port=kafka_port)
        time.sleep(3)
        sender2.stop.set()
        sender2.join(timeout=60)
        doc = wait_drained(port)
        second = consume_all(settings.kafka_bootstrap(), settings.otlp_topic, expect=len(sender2.accepted))
        assert sorted(trace_numbers(second)) == sender2.accepted
        assert set(sender.statuses) == {200} and set(sender2.statuses) == {200}, (sender.statuses, sender2.statuses)
        assert doc["producers"] >= 2, doc  # the first one failed for good (unknown to the new broker): replaced
    finally:
        err = stop_collect(collect)
        broker.stop(settings)
    assert "0 messages undelivered" in err
    assert before > 0 and len(second) > 0


def test_kill_9_keeps_what_was_answered_200_complete_or_waiting_for_its_root(home):
    """SIGKILL with complete traces not yet in Kafka (the broker paused) and traces still waiting for their
    root: a new `collect` sends the first and keeps the others waiting; their roots complete them."""
    settings = settings_for(home)
    broker.start(settings, port=free_port())
    port = free_port()
    collect = start_collect(home, port, "--trace-wait", "600")
    pid = broker.status(settings).pid
    try:
        assert post(port, body(1000, n=20, roots=False)) == 200  # children only: waiting for their roots
        os.kill(pid, signal.SIGSTOP)
        try:
            assert post(port, body(2000, n=30)) == 200  # complete, but Kafka is not answering
            collect.kill()
            collect.wait(timeout=10)
        finally:
            os.kill(pid, signal.SIGCONT)
        collect = start_collect(home, port, "--trace-wait", "600")
        assert "20 traces still waiting from the last run" in collect.first_line
        assert post(port, body(1000, n=10, children=False)) == 200  # the roots of the first 10
        complete = consume_all(settings.kafka_bootstrap(), settings.otlp_topic, expect=40)
        numbers = trace_numbers(complete)
        # (after a crash a message may be sent twice — the loader keeps one event per trace — but none is lost)
        assert set(numbers) == set(range(2000, 2030)) | set(range(1000, 1010))
        for m in complete:
            if int(m.key(), 16) < 2000:  # the children from before the kill and the root from after
                request = ExportTraceServiceRequest.FromString(m.value())
                assert sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans) == 3
        err = stop_collect(collect)  # the 10 still waiting are written at exit
        assert "0 messages undelivered" in err
        rest = consume_all(settings.kafka_bootstrap(), settings.otlp_topic, expect=50)
        assert set(trace_numbers(rest)) >= set(range(1010, 1020))
    finally:
        if collect.poll() is None:
            collect.kill()
        broker.stop(settings)


def test_stopped_while_kafka_does_not_answer_it_says_what_it_kept_and_sends_it_at_the_next_start(home):
    """SIGTERM with the broker paused: the exit line counts the messages Kafka has not taken, kept on disk;
    the next `collect` sends them."""
    settings = settings_for(home)
    broker.start(settings, port=free_port())
    port = free_port()
    collect = start_collect(home, port)
    pid = broker.status(settings).pid
    try:
        os.kill(pid, signal.SIGSTOP)
        try:
            assert post(port, body(1, n=7)) == 200
            err = stop_collect(collect)  # gives Kafka 10 s
        finally:
            os.kill(pid, signal.SIGCONT)
        assert "7 messages undelivered (kept in " in err and "sent at the next start" in err
        collect = start_collect(home, port)
        messages = consume_all(settings.kafka_bootstrap(), settings.otlp_topic, expect=7)
        assert sorted(trace_numbers(messages)) == list(range(1, 8))
        assert "0 messages undelivered" in stop_collect(collect)
    finally:
        if collect.poll() is None:
            collect.kill()
        broker.stop(settings)


def test_started_while_no_broker_answers_it_takes_spans_and_delivers_them_once_one_does(home):
    """No broker at start: a warning, not an exit; what it answers 200 for reaches the broker started later."""
    port, kafka_port = free_port(), free_port()
    settings = settings_for(home, ROUTERSCOPE_KAFKA_BOOTSTRAP=f"127.0.0.1:{kafka_port}")
    proc = subprocess.Popen(
        [ROUTERSCOPE, "collect", "--port", str(port)],
        env=clean_env(home, ROUTERSCOPE_KAFKA_BOOTSTRAP=f"127.0.0.1:{kafka_port}"),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert "OTLP/HTTP on" in proc.stdout.readline()
        assert post(port, body(1, n=5)) == 200
        broker.start(settings, port=kafka_port)
        messages = consume_all(settings.kafka_bootstrap(), settings.otlp_topic, expect=5, timeout_s=60)
        assert sorted(trace_numbers(messages)) == [1, 2, 3, 4, 5]
        err = stop_collect(proc)
        assert "routerscope collect: warning:" in err and "wait on disk" in err
    finally:
        if proc.poll() is None:
            proc.kill()
        broker.stop(settings)


def _rss_peak_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _nested(field: int, inner: bytes) -> bytes:
    from google.protobuf.internal.encoder import _VarintBytes

    return _VarintBytes(field << 3 | 2) + _VarintBytes(len(inner)) + inner


def test_memory_bombs_are_answered_413_within_a_second_and_cost_little_memory_or_cpu(home):
    """The ~119 KiB gzip of millions of empty ResourceSpans (no span at all, so no span limit applies), three
    at once; a 7 KiB gzip of one span with millions of empty attributes; a JSON body of empty objects: each
    answered 413 within a second, `collect` staying under 300 MB and spending well under a second of CPU."""
    settings = settings_for(home)
    broker.start(settings, port=free_port())
    port = free_port()
    collect = start_collect(home, port)
    try:
        bomb = gzip.compress(b"\x0a\x00" * 60_000_000, compresslevel=9)
        assert 100_000 < len(bomb) < 140_000
        span = _nested(9, b"") * 3_500_000  # Span.attributes, empty
        attributes = gzip.compress(_nested(1, _nested(2, _nested(2, span))), compresslevel=9)
        assert len(attributes) < 12_000
        json_bomb = gzip.compress(b'{"resourceSpans":[' + b"{}," * 5_000_000 + b"{}]}", compresslevel=9)
        cpu0 = _cpu_s(collect.pid)
        results: list[tuple[int, float]] = []

        def one(data: bytes, ctype: str = "application/x-protobuf") -> None:
            started = time.monotonic()
            status = post(port, data, **{"Content-Encoding": "gzip", "Content-Type": ctype})
            results.append((status, time.monotonic() - started))

        threads = [threading.Thread(target=one, args=(bomb,)) for _ in range(3)]
        threads += [threading.Thread(target=one, args=(attributes,))]
        threads += [threading.Thread(target=one, args=(json_bomb, "application/json"))]
        [t.start() for t in threads]
        [t.join(timeout=30) for t in threads]
        assert [s for s, _ in results] == [413] * 5
        assert max(seconds for _, seconds in results) < 1.0, results
        assert _rss_peak_mb(collect.pid) < 300
        assert _cpu_s(collect.pid) - cpu0 < 1.0
        assert post(port, body(1)) == 200  # and it goes on serving
        assert get(port, "/-/healthy")[0] == 200
    finally:
        stop_collect(collect)
        broker.stop(settings)
