"""Files in `collect`'s directory and the event spool that a crash, a careless hand or another user left:
a FIFO, a symlink to /dev/zero, a directory, a name that is no segment, flipped bytes. Start-up never hangs
or dies on them, keeps every record it can read, and sets the rest aside under a name it says. Two
receivers on one directory are refused: both would send the same outbox."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from routerscope.instrumentation.emitter import Message, Spool
from routerscope.instrumentation.otlp.receiver import Receiver, Waiting

A, B = b"a" * 16, b"b" * 16
REPO = Path(__file__).resolve().parents[2]


def part(trace_id: bytes, n: int = 1) -> bytes:
    request = ExportTraceServiceRequest()
    ss = request.resource_spans.add().scope_spans.add()
    for i in range(n):
        ss.spans.add(trace_id=trace_id, span_id=(i + 1).to_bytes(8, "big"), name="chat")
    return request.SerializeToString()


def hostile(path: Path, shape: str) -> None:
    if shape == "fifo":
        os.mkfifo(path)
    elif shape == "dev_zero":
        os.symlink("/dev/zero", path)
    elif shape == "directory":
        path.mkdir()
    elif shape == "empty":
        path.write_bytes(b"")


def run_bounded(code: str) -> subprocess.CompletedProcess:
    """`code` in a child with a memory limit and a timeout: a hang or a read without end fails the test
    instead of the machine."""
    return subprocess.run(
        [sys.executable, "-c", "import resource; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n" + code],
        capture_output=True,
        text=True,
        timeout=20,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


@pytest.mark.parametrize("shape", ["fifo", "dev_zero", "directory", "empty"])
def test_a_waiting_log_segment_that_is_no_regular_file_is_set_aside_and_the_rest_read(tmp_path, shape):
    log = Waiting(tmp_path)
    log.recover()
    log.append([(A, b"a1")])
    hostile(tmp_path / "000000000009.wait", shape)
    done = run_bounded(
        "from pathlib import Path; from routerscope.instrumentation.otlp.receiver import Waiting\n"
        f"w = Waiting(Path({str(tmp_path)!r})); print(w.recover())"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == repr({A: [b"a1"]})
    if shape != "empty":  # (an empty segment holds nothing: deleted like any other read one)
        assert "moved aside" in done.stderr
        assert os.path.lexists(tmp_path / "000000000009.wait.not-a-file")


@pytest.mark.parametrize("shape", ["fifo", "dev_zero", "directory"])
def test_an_event_spool_segment_that_is_no_regular_file_is_set_aside_and_the_rest_sent(tmp_path, shape):
    spool = Spool(tmp_path)
    spool.append([Message("t", b"k", b"one"), Message("t", b"k", b"two")])
    spool.close()
    hostile(tmp_path / "000000000009.jsonl", shape)
    done = run_bounded(
        "from pathlib import Path; from routerscope.instrumentation.emitter import Spool\n"
        f"s = Spool(Path({str(tmp_path)!r})); batch, n = s.peek(10); print(len(s), [m.value for m in batch])"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "2 [b'one', b'two']"
    assert "not a regular file" in done.stderr
    assert os.path.lexists(tmp_path / "000000000009.jsonl.not-a-file")


def test_a_fifo_in_place_of_the_spool_cursor_does_not_hang_the_start(tmp_path):
    Spool(tmp_path).append([Message("t", b"k", b"one")])
    (tmp_path / "cursor").unlink(missing_ok=True)
    os.mkfifo(tmp_path / "cursor")
    done = run_bounded(
        "from pathlib import Path; from routerscope.instrumentation.emitter import Spool\n"
        f"print(len(Spool(Path({str(tmp_path)!r}))))"
    )
    assert done.returncode == 0 and done.stdout.strip() == "1", done.stderr[-2000:]


def test_a_waiting_log_file_named_by_no_number_does_not_stop_the_start(tmp_path):
    (tmp_path / "notes.wait").write_text("hello")
    log = Waiting(tmp_path)
    assert log.recover() == {}
    assert (tmp_path / "notes.wait.unreadable").exists()
    log.append([(A, b"a1")])
    assert Waiting(tmp_path).recover() == {A: [b"a1"]}


def test_flipped_bytes_in_the_middle_of_a_waiting_segment_keep_what_came_before_and_set_the_rest_aside(tmp_path):
    log = Waiting(tmp_path)
    log.recover()
    log.append([(A, part(A))])
    log.append([(B, part(B))])
    (segment,) = tmp_path.glob("*.wait")
    data = bytearray(segment.read_bytes())
    second = len(data) - (21 + len(part(B)))
    data[second] = ord("Z")  # the second record's kind byte
    segment.write_bytes(bytes(data))
    again = Waiting(tmp_path)
    assert again.recover() == {A: [part(A)]}
    kept = (tmp_path / f"{segment.name}.corrupt").read_bytes()
    assert kept == bytes(data[second:])  # nothing silently gone: the unread bytes are kept


def test_a_waiting_part_that_does_not_decode_or_names_another_trace_is_set_aside_and_collect_starts(tmp_path):
    log = Waiting(tmp_path / "waiting")
    log.recover()
    log.append([(A, part(A, 2))])
    log.append([(B, b"\xff\xff\xff\xff garbage")])  # flipped beyond decoding
    log.append([(B, part(A))])  # a flipped trace id: these spans are not B's
    from routerscope.instrumentation.otlp.receiver import Outbox

    outbox = Outbox({"bootstrap.servers": "127.0.0.1:9"}, "t", tmp_path / "outbox")
    receiver = Receiver(outbox, tmp_path / "waiting", port=0)
    try:
        assert receiver.recovered == 1 and receiver._held == 2
        assert receiver.waiting.set_aside == 2
        assert len(list((tmp_path / "waiting").glob("*.corrupt"))) == 1
    finally:
        receiver.server.server_close()
        outbox.close(0)


def test_two_receivers_on_one_directory_the_second_is_refused_and_the_lock_goes_with_the_first(tmp_path):
    config = {"bootstrap.servers": "127.0.0.1:9"}
    first = Receiver.open(config, "t", tmp_path, port=0).start()
    try:
        with pytest.raises(OSError) as refused:
            Receiver.open(config, "t", tmp_path, port=0)
        assert refused.value.errno == errno.EBUSY
        assert str(os.getpid()) in refused.value.strerror and refused.value.filename == str(tmp_path / "lock")
    finally:
        first.close(0)
    second = Receiver.open(config, "t", tmp_path, port=0).start()  # free again once the first is closed
    second.close(0)


@pytest.mark.slow
def test_a_burst_of_connections_is_let_in_at_once_and_a_client_gone_away_is_no_traceback(tmp_path, capsys):
    """500 exporters connecting at once (after a restart of `collect`): with socketserver's listen backlog
    of 5 the kernel dropped their SYNs and each waited out TCP's 1 s, 3 s … retries (500 took 20.5 s,
    measured); none may need a retry now. A client that hangs up before its answer is one debug line, not a
    traceback on stderr each."""
    import socket
    import threading
    import time

    receiver = Receiver.open({"bootstrap.servers": "127.0.0.1:9"}, "t", tmp_path, port=0).start()
    slow, socks, lock = [], [], threading.Lock()

    def opener():
        for _ in range(20):
            t = time.monotonic()
            s = socket.create_connection(("127.0.0.1", receiver.port), timeout=10)
            s.send(b"POST /v1/tra")  # and nothing more: a slow client holding its connection
            with lock:
                socks.append(s)
                if time.monotonic() - t >= 1.0:  # TCP's first retry of a dropped SYN
                    slow.append(1)

    try:
        threads = [threading.Thread(target=opener) for _ in range(25)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        assert len(socks) == 500 and not slow
        try:
            raise BrokenPipeError(32, "Broken pipe")
        except BrokenPipeError:
            receiver.server.handle_error(None, ("127.0.0.1", 1))
        assert "Traceback" not in capsys.readouterr().err
    finally:
        for s in socks:
            s.close()
        receiver.close(0)
