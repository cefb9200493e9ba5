"""`routerscope collect`: an OTLP/HTTP receiver for traces (docs/otlp.md).

`POST /v1/traces` takes an `ExportTraceServiceRequest` in protobuf (`application/x-protobuf`) or in the
spec's JSON (`application/json`), gzip or not. Each body is bounded before it is parsed (`proto.inflate`,
`proto.check_protobuf`, `proto.check_json`, `proto.check_counts`), and its spans are rebuilt with only
the allow-listed values (`proto.split`, `allow`) and grouped per trace. A trace is written to Kafka — one
protobuf `ExportTraceServiceRequest` per message, keyed by its trace id in hex, the same shape an
OpenTelemetry Collector's Kafka exporter writes with `partition_traces_by_id` — once its local root span
has arrived, or `trace_wait_s` after its first span did (an exporter sends a trace's children before its
root, in earlier batches when the trace is long). The loader maps each trace to a decision event.

**A 200 means durable.** Before a request is answered 200, every span it brought is on disk: a complete
trace in the outbox (`Outbox`: the event spool of `routerscope.instrumentation.emitter.Spool`, the SDK's
own write-ahead mechanism), a trace still waiting for its root in the waiting log (`Waiting`). Both are
written straight to the operating system, so a `kill -9` loses nothing answered 200; both are fsynced
every `fsync_interval_s` (0: before every answer), so a power cut loses at most that much. The outbox is
sent by a thread of its own with an idempotent confluent-kafka producer; a record leaves the outbox only
once Kafka acknowledged it, and a producer that fails for good (a fatal `UNKNOWN_PRODUCER_ID` after a
broker restart, any fatal error) is replaced by a new one that sends what was not acknowledged. A broker
that is down or paused does not stop `collect` taking spans: they wait in the outbox.

Answers, as the OTLP/HTTP spec has them: 200 with the export response (`partial_success` counts the
spans refused: no 16-byte trace id or 8-byte span id); 400 for a body that does not parse (with a
`google.rpc.Status`); 404, 405, 411, 413 (body over `max_body`, unzipped past `proto.MAX_INFLATED`, or
past a count limit), 415 (another content type or encoding); 429 with `Retry-After` when the spans
waiting for their root would pass `max_spans`; 503 with `Retry-After` only while `collect` cannot take
more: the outbox's backlog at `max_backlog_bytes`, the disk refusing writes, or the bodies being read at
once holding MAX_READING bytes (memory). `GET /-/healthy` and
`GET /-/ready` answer 200 or 503 with the counters as JSON.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import stat
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException, Producer
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from routerscope.core import interrupts
from routerscope.instrumentation.emitter import SPOOL_DIR_MODE, SPOOL_FILE_MODE, Message, Outgoing, Spool
from routerscope.instrumentation.otlp import proto

log = logging.getLogger("routerscope.collect")

PATH = "/v1/traces"
HEALTHY, READY = "/-/healthy", "/-/ready"
MAX_BODY = 32 * 1024 * 1024  # a request body larger than this is refused unread (413)
MAX_READING = 256 * 1024 * 1024  # bytes of bodies being read at once; past it a request gets 503 (memory)
MAX_SPANS = 200_000  # spans waiting for their trace's root before 429
MAX_BACKLOG = 1024 * 1024 * 1024  # bytes of trace messages waiting for Kafka on disk before 503
TRACE_WAIT_S = 10.0  # a trace whose local root never arrives is written this long after its first span
FSYNC_INTERVAL_S = 1.0  # the outbox and the waiting log are fsynced this often (a power cut loses at most that)
RETRY_AFTER_FULL_S = 1
RETRY_AFTER_DOWN_S = 5
# A trace larger than this is written in several messages (the loader merges them by trace id): under
# the broker's default message size limit of 1 MB.
MAX_MESSAGE = 900_000
SEND_BATCH = 2000  # outbox records sent per round (each round waits for Kafka's acknowledgements)
STUCK_S = 5.0  # after a lost connection, a producer with nothing acknowledged for this long is replaced
MESSAGE_TIMEOUT_MS = 300_000  # a message not acknowledged in 5 minutes: the producer is replaced
REQUEST_TIMEOUT_MS = 180_000  # a broker paused for up to 3 minutes is waited for on the same connection
_PROTOBUF, _JSON = "application/x-protobuf", "application/json"


class Refused(Exception):
    """A request not taken now: answered with `status` and `Retry-After: retry_after` (the exporter retries)."""

    def __init__(self, status: int, message: str, retry_after: int):
        super().__init__(message)
        self.status, self.retry_after = status, retry_after


# -- the outbox: trace messages on disk until Kafka has them -----------------------------------------------
class Outbox:
    """Trace messages on their way to Kafka, in a `Spool` (the SDK's) before `put` returns; a thread sends
    them in order with an idempotent producer and moves the spool's cursor only past what Kafka
    acknowledged. Any producer error is retried; a fatal one (the broker lost the producer's state)
    replaces the producer. Survives its process: what a previous run left is sent first."""

    def __init__(
        self,
        config: dict,
        topic: str,
        directory: Path,
        *,
        max_backlog_bytes: int = MAX_BACKLOG,
        segment_bytes: int = 4 * 1024 * 1024,
    ):
        self.config, self.topic = config, topic
        self.max_backlog_bytes = max_backlog_bytes
        # the spool's own cap (dropping the oldest) is never reached: `put` refuses first
        self.spool = Spool(Path(directory), cap_bytes=4 * max_backlog_bytes + 2**30, segment_bytes=segment_bytes)
        self.backlog_bytes = self._on_disk()
        self.delivered = 0  # messages Kafka acknowledged
        self.retries = 0  # sends tried again (the same producer, or a new one)
        self.producers = 0  # producers made (more than one: a fatal error replaced one)
        self.last_error: str | None = None
        self.last_delivery = time.monotonic()
        self.disk_error: str | None = None
        self._fatal = False
        self._lost_connection = 0.0  # when the producer last lost its connection (monotonic)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._deadline = float("inf")  # close(): stop trying at this time
        self._thread = threading.Thread(target=self._supervise, name="routerscope-collect-kafka", daemon=True)
        self._thread.start()

    def _on_disk(self) -> int:
        try:
            return sum(p.stat().st_size for p in self.spool.dir.glob("*.jsonl"))
        except OSError:
            return 0

    # -- taking messages ---------------------------------------------------------------------------------
    @property
    def full(self) -> bool:
        return self.backlog_bytes >= self.max_backlog_bytes

    def put(self, messages: list[Outgoing]) -> None:
        """On disk before this returns, or Refused (503): the backlog is full or the disk refuses."""
        if not messages:
            return
        with self._lock:
            if self.full:
                raise Refused(503, "the receiver's backlog for Kafka is full", RETRY_AFTER_DOWN_S)
            unwritten = self.spool.append(messages, count_failed=False)
            written = len(messages) - len(unwritten)
            self.backlog_bytes += sum(len(m.value) for m in messages[:written])
            if unwritten:
                self.disk_error = "the outbox cannot be written"
                raise Refused(503, "the receiver cannot write to its outbox (is the disk full?)", RETRY_AFTER_DOWN_S)
            self.disk_error = None
        self._wake.set()

    def __len__(self) -> int:
        return len(self.spool)

    @property
    def kafka_up(self) -> bool:
        """Whether Kafka took something lately (or nothing is waiting for it)."""
        return not len(self.spool) or time.monotonic() - self.last_delivery < 10

    # -- sending -----------------------------------------------------------------------------------------
    def _producer(self) -> Producer:
        self.producers += 1
        self._fatal = False
        return Producer(
            {
                **self.config,
                "linger.ms": 5,
                "batch.size": 1_000_000,
                "queue.buffering.max.messages": 4 * SEND_BATCH,
                "message.timeout.ms": MESSAGE_TIMEOUT_MS,  # a paused broker is waited for, not resent to:
                # its requests are not timed out (a timed-out request closes the connection, and the broker,
                # once it runs again, may still read what was sent on it)
                "request.timeout.ms": REQUEST_TIMEOUT_MS,
                "socket.timeout.ms": REQUEST_TIMEOUT_MS,
                "enable.idempotence": True,  # a retry after a broker hiccup never doubles a trace
                "error_cb": self._on_error,
            }
        )

    def _on_error(self, error) -> None:
        self.last_error = error.str()
        if error.fatal():
            self._fatal = True
        elif error.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
            self._lost_connection = time.monotonic()

    def _stuck(self, since: float) -> bool:
        """No acknowledgement since `since` for STUCK_S although the connection was lost and is back: a
        broker that restarted without the producer's state (librdkafka may retry such a producer's id
        forever without calling it fatal). A paused broker keeps its connections, so it is waited for."""
        now = time.monotonic()
        return self._lost_connection > since and now - since > STUCK_S and now - self._lost_connection > 1.0

    def _supervise(self) -> None:
        while True:
            try:
                self._run()
                return
            except Exception as exc:  # noqa: BLE001 - the sender must outlive any fault
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("the Kafka sender failed; started again")
                time.sleep(0.5)

    def _run(self) -> None:
        producer: Producer | None = None
        while True:
            if self._stop.is_set() and (not len(self.spool) or time.monotonic() >= self._deadline):
                break
            with self._lock:
                batch, read = self.spool.peek(SEND_BATCH)
            if not read:
                self._wake.wait(0.05)
                self._wake.clear()
                continue
            if batch:
                producer = self._send(producer, batch)
                if producer is None and self._stop.is_set():
                    break  # out of time while closing: the batch stays in the outbox
            with self._lock:
                self.spool.advance(read, delivered=len(batch))
                self.backlog_bytes = max(0, self.backlog_bytes - sum(len(m.value) for m in batch))
            self.delivered += len(batch)
        if producer is not None:
            producer.flush(0)

    def _send(self, producer: Producer | None, batch: list) -> Producer | None:
        """Every message of `batch` acknowledged by Kafka (the producer to go on with), or None when
        `close` ran out of time first."""
        acked = [False] * len(batch)
        errors: list[str] = []

        def report(i):
            def done(error, _message):
                if error is None:
                    acked[i] = True
                else:
                    errors.append(error.str())
                    if error.fatal() or error.code() == KafkaError._MSG_TIMED_OUT:
                        self._fatal = True

            return done

        todo = list(range(len(batch)))
        while todo:
            if producer is None or self._fatal:
                if producer is not None:
                    log.warning("the Kafka producer failed for good (%s); a new one sends the rest", self.last_error)
                    _abandon(producer)
                producer = self._producer()
            errors.clear()
            self._produce(producer, batch, todo, report)
            progress, acks = time.monotonic(), sum(acked)
            while not self._fatal and producer.flush(0.1) > 0:
                if self._stop.is_set() and time.monotonic() >= self._deadline:
                    _abandon(producer)
                    return None
                if sum(acked) != acks:
                    progress, acks = time.monotonic(), sum(acked)
                elif self._stuck(progress):
                    self.last_error = "the broker came back without this producer's state"
                    self._fatal = True
            if self._fatal and not any(acked[i] for i in todo):
                time.sleep(0.2)  # a new producer at once, but never a spin
            todo = [i for i in todo if not acked[i]]
            if errors:
                self.last_error = errors[-1]
            if todo:
                self.retries += 1
                if not self._fatal:
                    time.sleep(0.2)
                if self._stop.is_set() and time.monotonic() >= self._deadline:
                    _abandon(producer)
                    return None
        self.last_delivery = time.monotonic()
        return producer

    def _produce(self, producer: Producer, batch: list, todo: list[int], report: Callable[[int], Callable]) -> None:
        """Hand the messages `todo` of `batch` to `producer` (`report(i)`: message i's delivery callback), waiting
        while its queue is full; a fatal producer refuses new messages, which stops the round."""
        for i in todo:
            m = batch[i]
            while True:
                try:
                    producer.produce(m.topic, value=m.value, key=m.key, on_delivery=report(i))
                    break
                except BufferError:
                    producer.poll(0.05)
                except KafkaException as exc:
                    self.last_error = str(exc)
                    self._fatal = True
                    break
            if self._fatal:
                break

    def close(self, timeout_s: float = 10.0) -> int:
        """Send what waits (at most `timeout_s`); returns the messages left in the outbox, sent at the next
        start."""
        self._deadline = time.monotonic() + timeout_s
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=timeout_s + 5)
        with self._lock:
            self.spool.close()  # synced, and its open segment closed
        return len(self.spool)


def _sync_files(directory: Path, pattern: str, since: float) -> None:
    """fsync the files of `directory` matching `pattern` changed since `since` (wall clock), and the
    directory itself (so new files survive a power cut too). Errors are logged, never raised."""
    try:
        for path in directory.glob(pattern):
            try:
                if path.stat().st_mtime < since - 1.0:
                    continue
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except FileNotFoundError:
                continue  # sent and deleted meanwhile
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        log.warning("collect: cannot fsync %s (%s)", directory, exc)


def _lock(directory: Path) -> int:
    """An exclusive lock on `directory/lock` (held while the returned descriptor is open, released by the
    kernel when the process dies, `kill -9` included). OSError EBUSY naming the holder when another
    process has it."""
    path = directory / "lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, SPOOL_FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise OSError(
            errno.EBUSY,
            f"another `routerscope collect` (pid {holder}) is using it; stop that one or give this one "
            "another ROUTERSCOPE_HOME",
            str(path),
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def _regular(path: Path) -> bool:
    """A regular file itself (not a symlink, FIFO, device or directory: reading those can hang or never end)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _abandon(producer: Producer) -> None:
    try:
        producer.purge()
        producer.flush(0)
    except Exception:  # noqa: BLE001 - a failed producer may refuse even this
        pass


# -- the waiting log: traces waiting for their root, on disk --------------------------------------------
_PART, _DONE = b"P", b"D"
_HEAD = struct.Struct(">c16sI")


class Waiting:
    """Parts of traces still waiting for their root span, appended to segment files before the request is
    answered; a trace written to the outbox gets a `done` record. A restart (`kill -9` included) reads the
    segments back and the traces wait again. A segment is deleted once every trace it holds is done."""

    def __init__(self, directory: Path, segment_bytes: int = 16 * 1024 * 1024):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True, mode=SPOOL_DIR_MODE)
        self.segment_bytes = segment_bytes
        self._open: dict[str, set[bytes]] = {}  # segment -> traces with parts in it not yet done
        self._where: dict[bytes, set[str]] = {}  # trace -> segments holding its parts
        self._current: str | None = None
        self._size = 0
        self.torn = 0  # segments cut short or damaged (a crash mid-write), read up to there at start-up
        self.set_aside = 0  # files and byte ranges moved out of the log at start-up (said in the log)

    def _segments(self) -> list[Path]:
        return sorted(p for p in self.dir.glob("*.wait") if p.stem.isdigit() and _regular(p))

    def _set_aside(self, path: Path, why: str, data: bytes | None = None, suffix: str = ".unreadable") -> None:
        """Keep what cannot be read back out of the log, and say so: the file itself renamed
        `<name>.unreadable`, or the bytes `data` written to `<name>.corrupt`."""
        self.set_aside += 1
        try:
            if data is None:
                path.rename(path.with_name(path.name + suffix))
                log.error("collect: %s %s; moved aside as %s%s", path.name, why, path.name, suffix)
            else:
                fd = os.open(path.with_name(path.name + ".corrupt"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                try:
                    _write_all(fd, data)
                finally:
                    os.close(fd)
                log.error("collect: %s %s; its %d bytes kept in %s.corrupt", path.name, why, len(data), path.name)
        except OSError as exc:
            log.error("collect: %s %s, and cannot be set aside (%s)", path.name, why, exc)

    def recover(self, check=None) -> dict[bytes, list[bytes]]:
        """The parts of every trace not done, per trace, in order; written again to a fresh segment (the
        old ones deleted), so the log holds only what waits. What cannot be read is set aside, never lost
        silently: a file that is not a regular segment (a FIFO, a symlink, a directory), the bytes from a
        damaged or torn record on, and each part `check(trace_id, part)` refuses."""
        traces: dict[bytes, list[bytes]] = {}
        for path in self.dir.glob("*.wait"):
            if not _regular(path):
                self._set_aside(path, "is not a regular file, never read", suffix=".not-a-file")
            elif not path.stem.isdigit():
                self._set_aside(path, "is not a segment of the waiting log (a file named by a number)")
        old = self._segments()
        for path in old:
            try:
                data = path.read_bytes()
            except OSError as exc:
                self._set_aside(path, f"cannot be read ({exc})")
                continue
            at = 0
            while at + _HEAD.size <= len(data):
                kind, trace_id, size = _HEAD.unpack_from(data, at)
                end = at + _HEAD.size + size
                if end > len(data) or kind not in (_PART, _DONE) or (kind == _DONE and size):
                    break
                if kind == _PART:
                    part = data[at + _HEAD.size : end]
                    if check is None or check(trace_id, part):
                        traces.setdefault(trace_id, []).append(part)
                    else:
                        self._set_aside(path, "holds a part that does not decode as its trace's spans", data[at:end])
                else:
                    traces.pop(trace_id, None)
                at = end
            if at < len(data):
                self.torn += 1
                self._set_aside(path, f"is torn or damaged at byte {at} (the records before it were read)", data[at:])
        next_no = int(old[-1].stem) + 1 if old else 1
        self._current, self._size = f"{next_no:012d}.wait", 0
        if traces:
            self.append([(t, p) for t, parts in traces.items() for p in parts])
        for path in old:
            try:
                path.unlink()
            except OSError as exc:
                log.warning("collect: cannot delete %s (%s)", path, exc)
        return traces

    def append(self, parts: list[tuple[bytes, bytes]]) -> None:
        """(trace id, part) records on disk before this returns; OSError when they cannot be (nothing is
        left half-written)."""
        if not parts:
            return
        data = b"".join(_HEAD.pack(_PART, t, len(p)) + p for t, p in parts)
        name = self._write(data)
        for trace_id, _ in parts:
            self._open.setdefault(name, set()).add(trace_id)
            self._where.setdefault(trace_id, set()).add(name)

    def done(self, trace_ids: list[bytes]) -> None:
        """These traces are in the outbox: mark them, and delete segments nothing waits in any more."""
        ids = [t for t in trace_ids if t in self._where]
        if not ids:
            return
        try:
            self._write(b"".join(_HEAD.pack(_DONE, t, 0) for t in ids))
        except OSError as exc:  # a restart would write them again: the loader keeps one event per trace
            log.warning("collect: cannot mark %d trace(s) done in the waiting log (%s)", len(ids), exc)
        for trace_id in ids:
            for name in self._where.pop(trace_id, ()):
                waiting = self._open.get(name)
                if waiting is not None:
                    waiting.discard(trace_id)
                    if not waiting and name != self._current:
                        self._delete(name)

    def _delete(self, name: str) -> None:
        self._open.pop(name, None)
        try:
            (self.dir / name).unlink(missing_ok=True)
        except OSError as exc:
            log.warning("collect: cannot delete %s (%s)", name, exc)

    def _write(self, data: bytes) -> str:
        if self._current is None or self._size >= self.segment_bytes:
            previous = self._current
            segments = self._segments()
            last = max([int(p.stem) for p in segments] + [int(previous[:-5]) if previous else 0])
            self._current, self._size = f"{last + 1:012d}.wait", 0
            if previous is not None and not self._open.get(previous):
                self._delete(previous)
        name = self._current
        assert name is not None
        fd = os.open(self.dir / name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, SPOOL_FILE_MODE)
        try:
            start = os.fstat(fd).st_size
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            except OSError:
                try:
                    os.ftruncate(fd, start)
                except OSError:
                    pass
                raise
        finally:
            os.close(fd)
        self._size += len(data)
        return name


# -- the receiver ---------------------------------------------------------------------------------------
@dataclass
class _Trace:
    request: ExportTraceServiceRequest
    spans: int
    first: float
    complete: bool = False


@dataclass
class Stats:
    requests: int = 0
    spans_in: int = 0
    spans_rejected: int = 0  # refused in partial_success
    spans_out: int = 0  # in the outbox (durable), on their way to Kafka
    traces_out: int = 0
    bad_requests: int = 0  # 400, 411, 413, 415
    refused_full: int = 0  # 429
    refused_down: int = 0  # 503
    dropped_attributes: int = 0  # not on the allow-list
    dropped_values: int = 0  # on it, but not of their kind
    dropped_names: int = 0  # span names emptied
    dropped_events: int = 0  # span events not on the allow-list, or past what a span keeps of them
    by_status: dict = field(default_factory=dict)


class Receiver:
    """The HTTP server and the per-trace assembly, writing trace messages to `outbox`; traces waiting for
    their root are kept in `waiting_dir` as well as in memory."""

    def __init__(
        self,
        outbox: Outbox,
        waiting_dir: Path,
        *,
        host: str = "127.0.0.1",
        port: int = 4318,
        max_body: int = MAX_BODY,
        max_inflated: int = proto.MAX_INFLATED,
        max_spans: int = MAX_SPANS,
        trace_wait_s: float = TRACE_WAIT_S,
        span_name_globs: tuple[str, ...] = (),
        fsync_interval_s: float = FSYNC_INTERVAL_S,
    ):
        self.outbox = outbox
        self._lock_fd: int | None = None  # the directory's lock (`open`)
        self.max_body, self.max_inflated, self.max_spans = max_body, max_inflated, max_spans
        self.trace_wait_s = trace_wait_s
        self.fsync_interval_s = fsync_interval_s  # 0: before every answer
        self._synced = time.time()
        self.span_name_globs = span_name_globs
        self.stats = Stats()
        self._traces: dict[bytes, _Trace] = {}
        self._held = 0
        self._reading = 0  # bytes of the bodies being read now
        self._lock = threading.Lock()
        self._decoding = threading.Semaphore(2)  # bodies unzipped and parsed at once: memory stays bounded
        self._stop = threading.Event()
        self.waiting = Waiting(waiting_dir)
        now = time.monotonic()
        for trace_id, parts in self.waiting.recover(_part_of).items():  # traces a previous run left waiting
            request = ExportTraceServiceRequest()
            for raw in parts:
                request.MergeFromString(raw)
            spans = [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
            self._traces[trace_id] = _Trace(request, len(spans), now, any(map(proto.is_local_root, spans)))
            self._held += len(spans)
        self.recovered = len(self._traces)
        receiver = self

        class Handler(_Handler):
            owner = receiver

        self.server = _Server((host, port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._flusher = threading.Thread(target=self._flush_loop, name="routerscope-collect-flush", daemon=True)

    @classmethod
    def open(cls, config: dict, topic: str, directory: Path, **options) -> Receiver:
        """A receiver with its outbox and waiting log under `directory` (`routerscope collect` uses
        ROUTERSCOPE_HOME/collect)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True, mode=SPOOL_DIR_MODE)  # owner-only, as the SDK's spool
        lock = _lock(directory)  # one receiver per directory: two would send the same outbox twice
        try:
            outbox = Outbox(
                config, topic, directory / "outbox", max_backlog_bytes=options.pop("max_backlog", MAX_BACKLOG)
            )
        except BaseException:
            os.close(lock)
            raise
        try:
            receiver = cls(outbox, directory / "waiting", **options)
        except BaseException:
            outbox.close(0)
            os.close(lock)
            raise
        receiver._lock_fd = lock
        return receiver

    # -- running ----------------------------------------------------------------------------------------
    def start(self) -> Receiver:
        """Serve in a background thread (tests, the bench); `serve_forever` serves in this one."""
        self._flusher.start()
        threading.Thread(target=self.server.serve_forever, name="routerscope-collect-http", daemon=True).start()
        return self

    def serve_forever(self) -> None:
        self._flusher.start()
        self.server.serve_forever()

    def close(self, timeout_s: float = 10.0) -> dict:
        """Stop taking requests, write every trace held (complete or not) to the outbox and give Kafka up to
        `timeout_s`; what it has not taken stays in the outbox for the next start."""
        self.server.shutdown()
        self.server.server_close()
        self._stop.set()
        if self._flusher.is_alive():
            self._flusher.join(timeout=2)
        try:
            self._emit(everything=True)
        except Refused as exc:
            log.error("collect: %s; the traces waiting stay in %s for the next start", exc, self.waiting.dir)
        self.sync()
        left = self.outbox.close(timeout_s)
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # (the lock goes with it)
            self._lock_fd = None
        return {**self.stats_dict(), "held_at_exit": self._held, "undelivered_at_exit": left}

    def stats_dict(self) -> dict:
        s = self.stats
        out = {k: v for k, v in vars(s).items() if k != "by_status"}
        out["held"] = self._held
        out["kafka_delivered"] = self.outbox.delivered
        out["outbox"] = len(self.outbox)
        out["outbox_bytes"] = self.outbox.backlog_bytes
        out["producers"] = self.outbox.producers
        out["recovered_traces"] = self.recovered
        return out

    def health(self) -> tuple[bool, bool, dict]:
        """(healthy: its threads run; ready: it takes spans now; the counters)."""
        healthy = self.outbox._thread.is_alive() and (self._flusher.is_alive() or not self._flusher.ident)
        ready = healthy and not self.outbox.full and self.outbox.disk_error is None and not self._stop.is_set()
        doc = {
            **self.stats_dict(),
            "healthy": healthy,
            "ready": ready,
            "kafka_up": self.outbox.kafka_up,
            "last_kafka_error": self.outbox.last_error,
        }
        return healthy, ready, doc

    # -- one request ----------------------------------------------------------------------------------
    def reserve(self, length: int) -> bool:
        """Room to read a body of `length` bytes (False: the bodies being read already hold MAX_READING)."""
        with self._lock:
            if self._reading and self._reading + length > MAX_READING:
                self.stats.refused_down += 1
                return False
            self._reading += length
            return True

    def release(self, length: int) -> None:
        with self._lock:
            self._reading -= length

    def decode(self, body: bytes, gzipped: bool, as_json: bool) -> ExportTraceServiceRequest:
        """A body as a request, every limit checked before what it expands to is built (proto)."""
        with self._decoding:
            if gzipped:
                body = proto.inflate(body, self.max_inflated, as_json)
            return proto.decode_json(body) if as_json else proto.decode(body)

    def accept(self, request) -> tuple[int, str]:
        """Take a parsed export request: (spans rejected, why). Every span taken is on disk when this
        returns. Raises Refused (429 when the spans waiting would pass `max_spans`; 503 when the outbox
        cannot take them), proto.TooLarge."""
        parts, rejected, why, filtered = proto.split(request, self.span_name_globs)
        spans = sum(p.spans for p in parts.values())
        with self._lock:
            if self.outbox.full:
                self.stats.refused_down += 1
                raise Refused(503, "the receiver's backlog for Kafka is full", RETRY_AFTER_DOWN_S)
            waiting_spans = sum(p.spans for p in parts.values() if not p.complete)
            # (nothing held: taken whatever its size, or a request larger than the bound would be refused forever)
            if self._held and self._held + waiting_spans > self.max_spans:
                self.stats.refused_full += 1
                raise Refused(429, "the receiver's queue of traces waiting for their root is full", RETRY_AFTER_FULL_S)
            now = time.monotonic()
            ready: list[tuple[bytes, ExportTraceServiceRequest, int]] = []
            later: list[tuple[bytes, proto.Part]] = []
            for trace_id, part in parts.items():
                held = self._traces.get(trace_id)
                if held is None:
                    if part.complete:
                        ready.append((trace_id, part.request, part.spans))
                    else:
                        later.append((trace_id, part))
                elif part.complete or held.complete:
                    merged = ExportTraceServiceRequest()
                    merged.CopyFrom(held.request)
                    merged.resource_spans.extend(part.request.resource_spans)
                    ready.append((trace_id, merged, held.spans + part.spans))
                else:
                    later.append((trace_id, part))
            try:
                self._write(ready)  # complete traces: in the outbox
            except Refused:
                self.stats.refused_down += 1
                raise
            if later:
                try:
                    self.waiting.append([(t, p.request.SerializeToString()) for t, p in later])
                except OSError as exc:
                    self.stats.refused_down += 1
                    raise Refused(
                        503, f"the receiver cannot write its waiting traces ({exc})", RETRY_AFTER_DOWN_S
                    ) from None
                for trace_id, part in later:
                    held = self._traces.get(trace_id)
                    if held is None:
                        self._traces[trace_id] = _Trace(part.request, part.spans, now)
                    else:
                        held.request.resource_spans.extend(part.request.resource_spans)
                        held.spans += part.spans
                    self._held += part.spans
            if not self.fsync_interval_s:
                self.sync()
            self.stats.requests += 1
            self.stats.spans_in += spans + rejected
            self.stats.spans_rejected += rejected
            self.stats.dropped_attributes += filtered.attributes
            self.stats.dropped_values += filtered.values
            self.stats.dropped_names += filtered.names
            self.stats.dropped_events += filtered.events
        return rejected, why

    def _write(self, ready: list[tuple[bytes, ExportTraceServiceRequest, int]]) -> None:
        """Complete traces to the outbox (raises Refused), then off the books of what waits. Holds the lock."""
        if not ready:
            return
        messages: list[Outgoing] = []
        for trace_id, request, _ in ready:
            key = trace_id.hex().encode()
            messages.extend(Message(self.outbox.topic, key, value) for value in _messages(request))
        self.outbox.put(messages)
        done = []
        for trace_id, _, spans in ready:
            held = self._traces.pop(trace_id, None)
            if held is not None:
                self._held -= held.spans
                done.append(trace_id)
            self.stats.spans_out += spans
            self.stats.traces_out += 1
        self.waiting.done(done)

    def _emit(self, everything: bool = False) -> None:
        """Write the traces held long enough (`everything`: all of them) to the outbox."""
        with self._lock:
            now = time.monotonic()
            ready = [
                (trace_id, t.request, t.spans)
                for trace_id, t in self._traces.items()
                if everything or t.complete or now - t.first >= self.trace_wait_s
            ]
            self._write(ready)

    def sync(self) -> None:
        """fsync what was written to the outbox and the waiting log since the last sync (power loss)."""
        since, self._synced = self._synced, time.time()
        with self.outbox._lock:  # the spool's own bookkeeping of what it wrote since its last sync
            paths, created = self.outbox.spool.take_unsynced()
        self.outbox.spool.fsync_paths(paths, created)
        _sync_files(self.waiting.dir, "*.wait", since)

    def _flush_loop(self) -> None:
        while not self._stop.wait(0.1):
            if self.fsync_interval_s and time.time() - self._synced >= self.fsync_interval_s:
                self.sync()
            try:
                self._emit()
            except Refused:
                pass  # kept (in memory and in the waiting log): tried again
            except Exception:  # never let the flusher die: log and go on
                log.exception("writing traces to the outbox failed")


def _part_of(trace_id: bytes, raw: bytes) -> bool:
    """A waiting-log part read back decodes, and every span in it belongs to `trace_id` (a flipped byte
    in a record must not stop the start-up nor move spans to another trace)."""
    request = ExportTraceServiceRequest()
    try:
        request.MergeFromString(raw)
    except Exception:  # noqa: BLE001 - protobuf's DecodeError, or worse for bytes this damaged
        return False
    return all(s.trace_id == trace_id for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans)


def _messages(request) -> list[bytes]:
    """One trace as one message, or several under MAX_MESSAGE each (spans split, resource and scope kept)."""
    whole = request.SerializeToString()
    if len(whole) <= MAX_MESSAGE:
        return [whole]
    out, part, size = [], ExportTraceServiceRequest(), 0
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            for span in ss.spans:
                n = span.ByteSize() + 16
                if size and size + n > MAX_MESSAGE:
                    out.append(part.SerializeToString())
                    part, size = ExportTraceServiceRequest(), 0
                target = proto.scope_for(part, rs, ss)
                target.spans.append(span)
                size += n
    if size:
        out.append(part.SerializeToString())
    return out


class _Server(ThreadingHTTPServer):
    # connections waiting to be accepted: socketserver's 5 drops a burst of exporters connecting at once
    # (after a restart of `collect`), which then wait out TCP's 1 s, 3 s, 7 s … retries to get in
    request_queue_size = 1024

    def service_actions(self):
        """Between polls (every 0.5 s at most) of `serve_forever`: a Ctrl-C or SIGTERM Python swallowed stops
        it all the same (routerscope/core/interrupts.py)."""
        interrupts.raise_pending()

    def handle_error(self, request, client_address):
        """A client that went away mid-answer is its own business: one debug line, not a traceback on
        stderr per connection (a flood of them would bury the log)."""
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            log.debug("collect: %s went away (%s)", client_address, sys.exc_info()[1])
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    owner: Receiver
    protocol_version = "HTTP/1.1"
    server_version = "routerscope-collect"
    timeout = 30  # a client that stops sending mid-request lets go of its thread after this long

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        log.debug("%s " + format, self.address_string(), *args)

    def _answer(self, code: int, body: bytes = b"", content_type: str = _PROTOBUF, headers: dict | None = None):
        stats = self.owner.stats
        with self.owner._lock:  # handlers run in threads of their own
            stats.by_status[code] = stats.by_status.get(code, 0) + 1
            if code >= 400 and code not in (429, 503):
                stats.bad_requests += 1
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if code >= 400 and code not in (429, 503):
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def _error(self, code: int, message: str, as_json: bool, headers: dict | None = None):
        status = status_pb2.Status(code={400: 3, 413: 8, 415: 3, 429: 8, 503: 14}.get(code, 2), message=message)
        if as_json:
            self._answer(code, json.dumps({"code": status.code, "message": message}).encode(), _JSON, headers)
        else:
            self._answer(code, status.SerializeToString(), _PROTOBUF, headers)

    def do_GET(self):  # noqa: N802 - the base class's naming
        path = self.path.split("?")[0]
        if path in (HEALTHY, READY):
            healthy, ready, doc = self.owner.health()
            ok = healthy if path == HEALTHY else ready
            return self._answer(200 if ok else 503, json.dumps(doc).encode(), _JSON)
        self._error(405 if path == PATH else 404, "POST OTLP traces to /v1/traces", False)

    do_PUT = do_DELETE = do_PATCH = do_GET  # noqa: N815

    def do_POST(self):  # noqa: N802
        if self.path.split("?")[0] != PATH:
            return self._error(404, f"only {PATH} is served here", False)
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        as_json = ctype == _JSON
        if ctype not in (_PROTOBUF, _JSON):
            return self._error(415, f"Content-Type must be {_PROTOBUF} or {_JSON}, not {ctype[:80]!r}", False)
        encoding = (self.headers.get("Content-Encoding") or "identity").strip().lower()
        if encoding not in ("identity", "gzip"):
            return self._error(415, f"Content-Encoding must be gzip or none, not {encoding[:40]!r}", as_json)
        declared = self.headers.get("Content-Length")
        if declared is None or not declared.isdigit():
            return self._error(411, "a Content-Length is required", as_json)
        length = int(declared)
        if length > self.owner.max_body:
            return self._error(413, f"a body of {length} bytes is over the limit of {self.owner.max_body}", as_json)
        if not self.owner.reserve(length):
            self.close_connection = True  # the body is left unread
            return self._error(
                503, "the receiver is reading as many bodies as it can hold", as_json, {"Retry-After": "1"}
            )
        try:
            body = self.rfile.read(length)
            if len(body) < length:
                return self._error(400, "the body ended before its Content-Length", as_json)
            request = self.owner.decode(body, encoding == "gzip", as_json)
            del body
            rejected, why = self.owner.accept(request)
        except proto.TooLarge as exc:
            return self._error(413, str(exc), as_json)
        except proto.BadRequest as exc:
            return self._error(400, str(exc), as_json)
        except RecursionError:
            return self._error(400, "nested too deep", as_json)
        except Refused as exc:
            return self._error(exc.status, str(exc), as_json, {"Retry-After": str(exc.retry_after)})
        finally:
            self.owner.release(length)
        self._answer(200, proto.response(rejected, why, as_json), _JSON if as_json else _PROTOBUF)
