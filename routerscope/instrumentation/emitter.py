"""Decision events to Kafka without ever blocking the request path, and without losing silently.

* `emit()` (request path) encodes nothing and waits for nothing: it puts the message on a bounded
  in-memory queue (microseconds). If the queue is full — the sender is stuck — the message is
  dropped and counted. Batch producers that may wait (the simulator, the replay job) pass
  `block_when_full=True` instead: `emit()` then waits for room, so a fast producer is paced by the
  sender (which always drains the queue, to Kafka or to the spool) and nothing is dropped. A Ctrl-C
  while `emit()` waits for room counts nothing: that message was never queued, and the books balance.
* A background sender drains the queue into an idempotent kafka-python producer (`acks=all`,
  batching, compression). When the broker is unreachable or slow (sends time out), messages go to a
  **disk spool** under `ROUTERSCOPE_HOME/spool` (owner-only: 0700, files 0600); while the spool
  holds anything, new messages are appended behind it, so order is kept. When the broker answers
  again, the spool is replayed in order, each segment line by line with a persisted cursor, before anything new is sent.
* **Replay never holds new events back.** The spool is replayed by a thread of its own (with its own
  producer): an attempt against a broker that is still down can take seconds, and meanwhile the
  sender keeps moving new events from the queue to the spool, so an event recorded while the broker
  is down is on disk within about 50 ms (the sender's wait for its next batch). Until a send has
  reached the broker (at start, and again after one failed) the sender does not try the broker itself:
  its first attempt would hold its batch through the producer's bootstrap and metadata timeouts
  (~4 s) with nothing on disk. New events go behind the spool and the replayer's sends find out. A
  batch producer (`block_when_full=True`) tries the broker first, as before: paced by the sender, it
  would otherwise send everything through the disk at start, at about half its rate.
* The spool is capped in bytes: past the cap the oldest **records** are dropped (the cursor steps
  over them, a segment read to its end is deleted) and counted as dropped; new records are always
  accepted. A batch the spool cannot take (`ENOSPC`) while the broker answers is sent to the broker
  directly instead (ahead of the spool's older records): only with both gone is it dropped.
* **The sender cannot die.** A spool record that does not decode (a torn last line after a power
  cut or a full disk, a damaged file) is counted as `corrupt` and skipped; a torn tail is closed
  off at start-up so nothing is appended onto it; a segment that cannot be read at all is moved
  aside (`*.unreadable`) and its events counted as corrupt. **The spool never wedges**: a segment
  with nothing left to read at the cursor (left empty by a write on a full disk, cut short) is
  stepped over; records the books expected that no file holds any more are counted as corrupt;
  the bytes of records that do not decode are kept in `<segment>.corrupt`; a segment that fails part
  way is read up to the failure; a replayer with nothing it can read waits instead of spinning. An
  `OSError` while spooling (`ENOSPC`, a
  read-only or vanished directory) counts that batch as dropped (`spool_failed`) and the sender
  keeps going; a cursor that cannot be saved is kept in memory. The sender thread is supervised:
  if it ever raises, the batch it held is counted as dropped and it starts again (`restarts`).
* Accounting: `emitted == delivered + spooled + dropped + in_flight` at all times (`emitted`
  includes what an earlier process left in the spool; `dropped` includes `corrupt` and
  `spool_failed`), where `in_flight` is what sits in the queue, the sender's hands or the
  producer's buffer; after `flush()` or `close()` it is 0, so `emitted == delivered + spooled +
  dropped`. The four counters are exported as OTel metrics; `faults()` breaks `dropped` down by
  cause and counts sender restarts.
* Flush policy (what a crash can lose): spool writes go straight to the operating system (no
  buffering in the process), so SIGKILL loses at most what was still in the queue or in flight —
  at most `queue_size` messages: the sender's next batch and the producer's buffer, measured at
  0.4–0.9 s of traffic for an app recording faster than the sender sends. A power cut can also lose
  what reached the spool since its last `fsync`: a thread syncs it every `fsync_interval_s`
  (`ROUTERSCOPE_SPOOL_FSYNC_INTERVAL_S`, 1 s by default; 0: every append before it returns).
* **Write-ahead** (`write_ahead=True`): `emit` appends the event to the spool file itself, under the
  emitter's lock, before it returns (one `write` to the open last segment: ≈ 8 µs instead of
  ≈ 0.3 µs), and the replayer sends it from there. A SIGKILL then loses nothing `emit` returned for
  (the kernel has it); a power cut loses at most the last fsync interval. If the spool cannot take
  the event (a full disk), it goes to the queue as without write-ahead.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import logging
import os
import queue
import stat
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import msgspec

from routerscope.core.settings import spool_fsync_interval

if TYPE_CHECKING:
    from kafka import KafkaProducer

log = logging.getLogger("routerscope.instrumentation.emitter")


class Outgoing(Protocol):
    """What the emitter sends and spools: a `Message`, or anything with its interface (the SDK's messages
    encode their value and headers on first use, on the sender's thread)."""

    @property
    def topic(self) -> str: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes: ...
    @property
    def headers(self) -> tuple[tuple[str, bytes], ...]: ...
    def to_line(self) -> bytes: ...


class _SpoolRecord(msgspec.Struct, gc=False):
    """One spool line's object, `{"t": topic, "k": key, "v": value, "h": [[name, value], …]}`, in that order
    (a struct encodes in half the time of the same dict)."""

    t: str
    k: str | None
    v: str
    h: list


@dataclass(frozen=True)
class Message:
    topic: str
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()

    def to_line(self) -> bytes:
        """The spool record: one JSON object and a newline. Bytes that are not UTF-8 travel as surrogate escapes,
        which only the standard library's encoder writes (msgspec's, five times faster, refuses them)."""
        record = _SpoolRecord(
            self.topic,
            None if self.key is None else self.key.decode("utf-8", "surrogateescape"),
            self.value.decode("utf-8", "surrogateescape"),
            [[k, v.decode("utf-8", "surrogateescape")] for k, v in self.headers],
        )
        try:
            return _encode_line(record) + b"\n"
        except UnicodeEncodeError:
            return json.dumps(msgspec.structs.asdict(record)).encode() + b"\n"

    @classmethod
    def from_line(cls, line: bytes) -> Message:
        """Raises ValueError (or a subclass) on anything that is not a complete spool record."""
        try:
            try:
                d = _decode_line(line)
            except msgspec.MsgspecError:  # surrogate escapes (bytes that were not UTF-8), or not JSON at all
                d = json.loads(line)
            enc = lambda s: s.encode("utf-8", "surrogateescape")  # noqa: E731
            return cls(
                d["t"], None if d["k"] is None else enc(d["k"]), enc(d["v"]), tuple((k, enc(v)) for k, v in d["h"])
            )
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            raise ValueError(f"not a spool record: {exc}") from None


def _write_all(fd: int, data: bytes) -> None:
    """os.write until everything is written (a short write happens when the disk fills up)."""
    view = memoryview(data)
    while view:
        written = _os_write(fd, view)
        view = view[written:]


_os_write = os.write  # the one place spool bytes reach the OS (tests inject faults here)
_encode_line = msgspec.json.Encoder().encode
_decode_line = msgspec.json.Decoder().decode

# How often an open spool segment is checked to be still in the directory (one fstat), in seconds.
CHECK_LINKED_S = 0.02

# The spool holds events (session ids, task types, costs): its owner's only, whatever the umask.
SPOOL_DIR_MODE = 0o700
SPOOL_FILE_MODE = 0o600


def _regular(path: Path) -> bool:
    """A regular file itself (not a symlink, FIFO, device or directory)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _private_fd(fd: int) -> os.stat_result:
    """Make an open spool file 0600 if this process owns it and it is not already (umask-independent);
    returns its stat."""
    st = os.fstat(fd)
    if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) != SPOOL_FILE_MODE:
        os.fchmod(fd, SPOOL_FILE_MODE)
    return st


class Spool:
    """Append-only segment files of messages waiting for the broker, oldest first, capped in bytes.

    Reading position: a cursor (segment name, line) kept in memory and saved to `cursor` after
    each move (best effort: if it cannot be saved, a restart re-sends from the last saved one,
    and the loader folds the duplicates by event id)."""

    def __init__(
        self,
        directory: Path,
        cap_bytes: int = 64 * 1024 * 1024,
        segment_bytes: int = 1024 * 1024,
        *,
        fsync_interval_s: float | None = None,
    ):
        """`fsync_interval_s`: 0 makes every append durable against a power cut before it returns (an `fsync`
        each); a positive interval leaves that to `sync()`, which the owner calls on that interval (the
        emitter has a thread for it); None (the default, for a spool that is only read or written in
        bulk) syncs only when `sync()` is called. Appends are written straight to the OS either way, so a
        killed process loses nothing that `append` returned for."""
        self.dir = Path(directory)
        self.fsync_interval_s = fsync_interval_s
        self._fd: int | None = None  # the last segment, kept open for appends (the path it was opened as)
        self._fd_path: Path | None = None
        self._linked_at = 0.0  # when the open segment was last seen in the directory (monotonic)
        self._unsynced: set[Path] = set()  # segments written since the last sync
        self._dir_unsynced = False  # a segment was created since the last sync (its directory entry)
        self.dir.mkdir(parents=True, exist_ok=True, mode=SPOOL_DIR_MODE)
        self._make_private()
        self.cap_bytes, self.segment_bytes = cap_bytes, segment_bytes
        self._cursor_path = self.dir / "cursor"
        self.dropped = 0  # oldest segments deleted over the cap
        self.corrupt = 0  # records that did not decode, skipped
        self.failed = 0  # messages that could not be written (OSError)
        self._skipped: set[str] = set()  # unreadable segments that could not be moved aside
        self._tail_at: tuple[Path, int] | None = None  # (last segment, its size) after the last append
        self._bytes = 2**62  # bytes in the segments, an estimate from above (checked against the cap)
        self._set_aside_special()
        self._position = self._saved_cursor()
        self._close_torn_tail()
        self._count = self._readable_lines() - self._position[1]

    @property
    def _tail(self) -> tuple[Path, int] | None:
        return self._tail_at

    @_tail.setter
    def _tail(self, value: tuple[Path, int] | None) -> None:
        """Forgetting the last segment (segments were deleted, a write failed) also closes its open file: the
        next append finds the last segment from the directory again and opens what it finds."""
        self._tail_at = value
        if value is None or value[0] != self._fd_path:
            self._close_fd()

    def _close_fd(self) -> None:
        fd, self._fd, self._fd_path = self._fd, None, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def __del__(self) -> None:
        try:
            self._close_fd()
        except Exception:  # noqa: BLE001 - at interpreter exit `os` may be gone already
            pass

    def close(self) -> None:
        """Sync what was written and close the open segment (the spool can still be used: the next append
        opens it again)."""
        self.sync()
        self._close_fd()

    def take_unsynced(self) -> tuple[list[Path], bool]:
        """The segments written since the last call and whether a segment was created meanwhile, forgotten
        here: a caller that shares the spool between threads takes them under its lock and calls
        `fsync_paths` outside it (an fsync can take milliseconds)."""
        paths, created = list(self._unsynced), self._dir_unsynced
        self._unsynced, self._dir_unsynced = set(), False
        return paths, created

    def fsync_paths(self, paths: list[Path], created: bool) -> None:
        """fsync each segment (a segment deleted meanwhile was replayed: nothing to keep) and, if a segment was
        created, the directory that names it. Never raises: a failure is logged."""
        for path in paths:
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue
            try:
                os.fsync(fd)
            except OSError as exc:
                log.warning("event spool: cannot fsync %s (%s)", path.name, exc)
            finally:
                os.close(fd)
        if created:
            try:
                fd = os.open(self.dir, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as exc:
                log.warning("event spool: cannot fsync its directory (%s)", exc)

    def sync(self) -> None:
        """Make what was appended so far durable against a power cut (one thread: see `take_unsynced`)."""
        self.fsync_paths(*self.take_unsynced())

    def _make_private(self) -> None:
        """The directory 0700 and every file in it 0600, when this process owns them: a spool made by an
        older version, or under a home another command created with a looser umask, is fixed on open.
        Symlinks and what others own are left alone; a failure is logged, never raised."""
        try:
            if self.dir.stat().st_uid != os.geteuid():
                log.warning("event spool: %s is not owned by this user; its modes are left as they are", self.dir)
                return
            if stat.S_IMODE(self.dir.stat().st_mode) != SPOOL_DIR_MODE:
                os.chmod(self.dir, SPOOL_DIR_MODE)
            with os.scandir(self.dir) as entries:
                for entry in entries:
                    if not entry.is_file(follow_symlinks=False):
                        continue
                    st = entry.stat(follow_symlinks=False)
                    if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) != SPOOL_FILE_MODE:
                        os.chmod(entry.path, SPOOL_FILE_MODE)
        except OSError as exc:
            log.warning("event spool: cannot make %s private to its owner (%s)", self.dir, exc)

    def _set_aside_special(self) -> None:
        """Segments and a cursor that are not regular files (a FIFO, which would hang the first read; a
        symbolic link, to `/dev/zero` say, which would be read without end) are renamed `<name>.not-a-file`
        at start-up and never read; what they held is unknown, so nothing is counted. Only this process
        makes segments, as regular files."""
        try:
            with os.scandir(self.dir) as entries:
                special = [
                    e.name
                    for e in entries
                    if (e.name.endswith(".jsonl") or e.name == "cursor") and not e.is_file(follow_symlinks=False)
                ]
        except OSError:
            return
        for name in special:
            log.error("event spool: %s is not a regular file; set aside as %s.not-a-file, never read", name, name)
            try:
                os.rename(self.dir / name, self.dir / f"{name}.not-a-file")
            except OSError:
                self._skipped.add(name)

    def _segments(self) -> list[Path]:
        return sorted(p for p in self.dir.glob("*.jsonl") if p.name not in self._skipped and _regular(p))

    @staticmethod
    def _lines(path: Path) -> int:
        with open(path, "rb") as f:
            return sum(1 for _ in f)

    def _readable_lines(self) -> int:
        """Records in the spool at start-up; a segment that cannot be read is moved aside (what it
        held is unknown, so it was never counted)."""
        total = 0
        for segment in self._segments():
            try:
                total += self._lines(segment)
            except OSError as exc:
                log.error("event spool: segment %s cannot be read (%s); moved aside", segment.name, exc)
                try:
                    segment.rename(segment.with_name(segment.name + ".unreadable"))
                except OSError:
                    self._skipped.add(segment.name)
        if self._position[0] is not None and not (self.dir / self._position[0]).is_file():
            rest = self._segments()
            self._position = ((rest[0].name if rest else None), 0)
        return total

    def _close_torn_tail(self) -> None:
        """A last segment that does not end with a newline was cut mid-write: end that line, so the
        torn record stays one (corrupt) line and the next append starts a line of its own."""
        segments = self._segments()
        if not segments:
            return
        last = segments[-1]
        try:
            with open(last, "rb") as f:
                f.seek(0, os.SEEK_END)
                if f.tell() == 0:
                    return
                f.seek(-1, os.SEEK_END)
                torn = f.read(1) != b"\n"
            if torn:
                fd = os.open(last, os.O_WRONLY | os.O_APPEND)
                try:
                    _write_all(fd, b"\n")
                finally:
                    os.close(fd)
        except OSError as exc:
            log.warning("event spool: cannot close the torn last line of %s (%s)", last, exc)

    def _saved_cursor(self) -> tuple[str | None, int]:
        """The saved read position; a damaged one (negative, or past its segment's end) is held to the
        segment, so the count of spooled records can never go below zero."""
        try:
            if not _regular(self._cursor_path):
                raise ValueError("no cursor")
            name, line = self._cursor_path.read_text()[:200].split()
            if name in {p.name for p in self._segments()}:
                return name, min(max(int(line), 0), self._lines(self.dir / name))
        except (OSError, ValueError):
            pass
        segments = self._segments()
        return (segments[0].name if segments else None), 0

    def _cursor(self) -> tuple[str | None, int]:
        name, line = self._position
        if name is not None and not (self.dir / name).exists():  # removed under us: recount what is left
            self._abandon(name, FileNotFoundError(f"{name} vanished"))
        name, line = self._position
        if name is not None:
            return name, line
        segments = self._segments()
        self._position = ((segments[0].name if segments else None), 0)
        return self._position

    def _set_cursor(self, name: str, line: int) -> None:
        self._position = (name, line)
        try:
            tmp = self._cursor_path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, SPOOL_FILE_MODE)
            try:
                _private_fd(fd)
                data = f"{name} {line}".encode()
                while data:  # (not through _os_write: injected spool faults are for the segments)
                    data = data[os.write(fd, data) :]
            finally:
                os.close(fd)
            os.replace(tmp, self._cursor_path)
        except OSError as exc:
            log.warning("event spool: cannot save the cursor (%s); it is kept in memory", exc)

    def __len__(self) -> int:
        return self._count

    def append(self, messages: list[Outgoing], count_failed: bool = True) -> list[Outgoing]:
        """Write messages behind the others, starting a new segment every `segment_bytes`; returns
        the messages that could not be written (disk full, directory gone).

        Never raises: unwritten messages are counted in `failed` (unless `count_failed` is False: the
        caller then accounts for them), and a partly written chunk is cut back so no torn record is
        left behind."""
        tail = self._tail_at
        if len(messages) == 1 and tail is not None and tail[1] < self.segment_bytes:
            return self._append_one(messages[0], tail, count_failed)
        last: Path | None
        try:
            if self._tail is not None:  # the last segment and its size, as the previous append left them
                last, size = self._tail
            else:
                segments = self._segments()
                last = segments[-1] if segments else None
                size = last.stat().st_size if last else 0
        except OSError as exc:
            if count_failed:
                self._fail(len(messages), exc)
            return list(messages)
        chunk: list[tuple[Outgoing, bytes]] = []
        chunks: list[tuple[Path, list[tuple[Outgoing, bytes]]]] = []
        for m in messages:
            line = m.to_line()
            if last is None or size >= self.segment_bytes:
                if chunk and last is not None:  # (a chunk is never without its segment)
                    chunks.append((last, chunk))
                    chunk = []
                last = self.dir / f"{(int(last.stem) + 1 if last else 1):012d}.jsonl"
                size = 0
            chunk.append((m, line))
            size += len(line)
        if chunk and last is not None:
            chunks.append((last, chunk))
        unwritten: list[Outgoing] = []
        for path, items in chunks:
            data = [line for _, line in items]
            try:
                self._write(path, data)
            except OSError as exc:
                if count_failed:
                    self._fail(len(items), exc)
                unwritten.extend(m for m, _ in items)
                continue
            self._count += len(items)
            self._bytes += sum(map(len, data))
        # the last segment and its size for the next append; after a failure, read from the files again
        self._tail = (last, size) if chunks and not unwritten and last is not None else None
        self._check_cap()
        return unwritten

    def _append_one(self, message: Outgoing, tail: tuple[Path, int], count_failed: bool) -> list[Outgoing]:
        """`append` of one record into the open last segment `tail` (write-ahead, once per event): the same
        steps without the chunk lists."""
        line = message.to_line()
        try:
            self._write(tail[0], (line,))
        except OSError as exc:
            if count_failed:
                self._fail(1, exc)
            self._tail = None
            return [message]
        self._count += 1
        self._bytes += len(line)
        self._tail_at = (tail[0], tail[1] + len(line))
        self._check_cap()
        return []

    def _check_cap(self) -> None:
        """Past the cap by the count kept (an estimate from above: the replayer deletes behind it), check the
        files and delete the oldest (`_enforce_cap`); a failure is logged, never raised."""
        if self._bytes > self.cap_bytes:
            try:
                self._enforce_cap()
            except OSError as exc:
                log.warning("event spool: cannot enforce its cap (%s)", exc)

    def _fail(self, n: int, exc: OSError) -> None:
        self.failed += n
        log.warning("event spool: cannot write %d event(s) (%s): counted as dropped", n, exc)

    def _write(self, path: Path, lines: list[bytes] | tuple[bytes, ...]) -> None:
        """Append `lines` to the segment `path`, straight to the OS (a SIGKILL right after loses nothing). The
        last segment stays open between appends; every CHECK_LINKED_S at most, an `fstat` checks that it is
        still in the directory: a segment deleted by hand under the open file would swallow what is written to
        it, so what reaches it between its deletion and the check is lost with the rest of that segment (and
        counted as corrupt like it, when the replayer finds the records gone). A failed write is cut back to
        where it started, so no torn record is left for the reader."""
        fd = self._fd if (self._fd_path is path or self._fd_path == path) else None
        if fd is not None:
            now = time.monotonic()
            if now >= self._linked_at + CHECK_LINKED_S:
                try:
                    linked = os.fstat(fd).st_nlink > 0
                except OSError:
                    linked = False
                if linked:
                    self._linked_at = now
                else:
                    self._close_fd()
                    fd = None
        if fd is None:
            self._close_fd()
            created = not path.exists()
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, SPOOL_FILE_MODE)
            try:
                _private_fd(fd)
            except OSError:
                os.close(fd)
                raise
            self._fd, self._fd_path, self._linked_at = fd, path, time.monotonic()
            self._dir_unsynced |= created
        data = lines[0] if len(lines) == 1 else b"".join(lines)
        written = 0
        try:
            written = _os_write(fd, data)  # straight to the OS: survives SIGKILL
            if written < len(data):  # a short write (the disk filling up): the rest, or the error
                view = memoryview(data)[written:]
                while view:
                    n = _os_write(fd, view)
                    written += n
                    view = view[n:]
        except OSError:
            try:
                os.ftruncate(fd, os.fstat(fd).st_size - written)  # no half record left for the reader
            except OSError:
                pass  # the reader counts a torn record as corrupt
            self._close_fd()
            raise
        if self.fsync_interval_s == 0:  # durable before `append` returns
            try:
                os.fsync(fd)
                if self._dir_unsynced:
                    self.fsync_paths([], True)
                    self._dir_unsynced = False
            except OSError as exc:
                log.warning("event spool: cannot fsync %s (%s)", path.name, exc)
        else:
            self._unsynced.add(path)

    def _enforce_cap(self) -> None:
        """Past the cap, drop the oldest records one by one (the cursor steps over them; a segment read
        to its end is deleted) until the records waiting fit in it again, with room for a segment (a tenth
        of the cap at most): each pass reads the oldest segment, so at the cap it runs once a segment's
        worth of appends, not at every append (a write-ahead `emit` would pay ~1 ms and a log line each)."""
        segments = self._segments()
        total = sum(p.stat().st_size for p in segments)
        self._bytes = total
        if total <= self.cap_bytes:
            return
        target = self.cap_bytes - min(self.segment_bytes, self.cap_bytes // 10)
        self._tail = None  # segments are deleted below
        name, line = self._cursor()
        lost = 0
        while segments and name is not None:
            oldest = segments[0]
            if oldest.name != name:  # segments before the cursor's are already read: stale, delete
                total -= oldest.stat().st_size
                oldest.unlink()
                segments.pop(0)
                continue
            with open(oldest, "rb") as f:
                sizes = [len(raw) for raw in f]
            total -= sum(sizes[:line])  # read already: not waiting
            while line < len(sizes) and total > target:
                total -= sizes[line]
                line += 1
                lost += 1
            if line < len(sizes) or len(segments) == 1:
                break
            oldest.unlink()  # read (or dropped) to its end
            segments.pop(0)
            name, line = segments[0].name, 0
        self._bytes = total
        if lost:
            self._count -= lost
            self.dropped += lost
            log.warning("event spool over its cap: dropped the %d oldest events", lost)
        if name is not None and (name, line) != self._position:
            self._set_cursor(name, line)

    def peek(self, limit: int) -> tuple[list[Outgoing], int]:
        """Up to `limit` records from the cursor, in order (within the oldest segment): the messages
        that decode, and how many records were read in all (corrupt ones included).

        Never wedges: a cursor segment with nothing left to read (empty, cut short under the cursor)
        is stepped over while later segments wait, and records the books expected but no file holds
        any more are counted as corrupt; records that do not decode are counted and their bytes moved
        aside to `<segment>.corrupt`; a segment that fails part way is read up to the failure, and
        moved aside (`*.unreadable`) at the next read."""
        for _ in range(len(self._segments()) + 2):
            name, line = self._cursor()
            if name is None:
                self._reconcile(None, 0)
                return [], 0
            out: list[Outgoing] = []
            read, bad = 0, []
            try:
                with open(self.dir / name, "rb") as f:
                    for i, raw in enumerate(f):
                        if i < line:
                            continue
                        if read >= limit:
                            break
                        read += 1
                        try:
                            out.append(Message.from_line(raw))
                        except ValueError:
                            bad.append(raw)
                            log.warning("event spool: skipped a corrupt record (%s line %d)", name, i + 1)
            except OSError as exc:  # the segment cannot be read (any more): never stall on it
                if not read:
                    self._abandon(name, exc)
                    continue
                log.warning("event spool: segment %s fails past line %d (%s)", name, line + read, exc)
            if bad:
                self._set_aside(name, bad)
            if read:
                return out, read
            if not self._step_over(name, line):
                return [], 0
        return [], 0

    def _set_aside(self, name: str, lines: list[bytes]) -> None:
        """Count records that did not decode, and keep their bytes in `<segment>.corrupt` (best effort)."""
        self.corrupt += len(lines)
        self._count -= len(lines)
        try:
            fd = os.open(self.dir / f"{name}.corrupt", os.O_WRONLY | os.O_CREAT | os.O_APPEND, SPOOL_FILE_MODE)
            try:
                _write_all(fd, b"".join(raw if raw.endswith(b"\n") else raw + b"\n" for raw in lines))
            finally:
                os.close(fd)
        except OSError as exc:
            log.warning("event spool: cannot keep %d corrupt record(s) of %s aside (%s)", len(lines), name, exc)

    def _step_over(self, name: str, line: int) -> bool:
        """Nothing is left to read at the cursor (`name`, `line`). When later segments wait, this one
        is finished: delete it and move on (True: read again). Either way, records the books still
        expect that no segment holds are counted as corrupt."""
        path = self.dir / name
        later = [s for s in self._segments() if s.name > name]
        self._tail = None
        if later:
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                log.warning("event spool: cannot delete the finished segment %s (%s)", name, exc)
                self._skipped.add(name)
            self._set_cursor(later[0].name, 0)
            self._reconcile(later[0].name, 0)
            return True
        try:
            held = self._lines(path)
        except OSError:
            held = 0
        if held < line:  # cut short under the cursor: what is appended next starts at its new end
            self._set_cursor(name, held)
        self._reconcile(name, min(line, held))
        return False

    def _reconcile(self, name: str | None, line: int) -> None:
        """Hold the count of waiting records to what the segments from (`name`, `line`) on still hold."""
        remaining = 0
        for segment in self._segments():
            if name is None or segment.name < name:
                continue
            try:
                remaining += self._lines(segment) - (line if segment.name == name else 0)
            except OSError:
                continue
        lost = self._count - max(remaining, 0)
        if lost > 0:
            self.corrupt += lost
            self._count -= lost
            log.error("event spool: %d spooled event(s) are no longer in any segment; counted as corrupt", lost)

    def _abandon(self, name: str, exc: OSError) -> None:
        """Move an unreadable segment out of the spool; what it still held counts as corrupt."""
        self._tail = None
        path = self.dir / name
        try:
            if path.exists():
                path.rename(path.with_name(name + ".unreadable"))
        except OSError:
            self._skipped.add(name)
        remaining = 0
        for segment in self._segments():
            try:
                remaining += self._lines(segment)
            except OSError:
                self._skipped.add(segment.name)
        lost = max(0, self._count - remaining)
        self.corrupt += lost
        self._count -= lost
        rest = self._segments()
        self._position = ((rest[0].name if rest else None), 0)
        log.error(
            "event spool: segment %s cannot be read (%s); its %d event(s) are counted as corrupt", name, exc, lost
        )

    def advance(self, n: int, delivered: int | None = None) -> None:
        """The next `n` records were read (`delivered` of them sent; the rest were corrupt and are
        already counted): move the cursor, delete finished segments."""
        name = self._position[0]
        if name is not None and not (self.dir / name).exists():
            # The segment these records were read from vanished since (removed by hand while they were being
            # sent): they count as sent, what it held past them as corrupt, and the cursor moves to the next
            # segment's start. Never advance the next segment by this segment's records.
            self._count -= n if delivered is None else delivered
            self._abandon(name, FileNotFoundError(f"{name} vanished"))
            return
        name, line = self._cursor()
        if name is None:
            return
        path = self.dir / name
        line += n
        self._count -= n if delivered is None else delivered
        try:
            finished = line >= self._lines(path)
            if finished:
                path.unlink()
                self._tail = None
        except OSError as exc:
            log.warning("event spool: cannot finish segment %s (%s)", name, exc)
            finished = False
        if finished:
            rest = self._segments()
            if rest:
                self._set_cursor(rest[0].name, 0)
            else:
                self._position = (None, 0)
                try:
                    self._cursor_path.unlink(missing_ok=True)
                except OSError:
                    pass
        else:
            self._set_cursor(name, line)


MAX_SPOOL_DIRS = 32  # `spool`, `spool.2` … `spool.32`: emitters sharing one home at once


def _take_spool_dir(wanted: Path) -> tuple[Path, int | None]:
    """`wanted`, or its first sibling `<name>.N` no other emitter holds, with the descriptor holding its lock
    (`<dir>/lock`, an exclusive `flock` released when the descriptor closes or the process dies). Past
    MAX_SPOOL_DIRS, or where locks cannot be taken, `wanted` unlocked (said in the log)."""
    for n in range(1, MAX_SPOOL_DIRS + 1):
        path = wanted if n == 1 else wanted.with_name(f"{wanted.name}.{n}")
        try:
            path.mkdir(parents=True, exist_ok=True, mode=SPOOL_DIR_MODE)
            fd = os.open(path / "lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, SPOOL_FILE_MODE)
        except OSError as exc:
            log.warning("event spool: cannot lock %s (%s); used without a lock", wanted, exc)
            return wanted, None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        except OSError as exc:
            os.close(fd)
            log.warning("event spool: cannot lock %s (%s); used without a lock", wanted, exc)
            return wanted, None
        if n > 1:
            log.warning("event spool: %s is another emitter's; this one spools to %s", wanted, path)
        return path, fd
    log.error("event spool: %d emitters hold %s and its siblings; this one shares %s", MAX_SPOOL_DIRS, wanted, wanted)
    return wanted, None


def _close_at_exit(emitter_ref) -> None:
    emitter = emitter_ref()
    if emitter is not None:
        for producer in list(emitter._producers.values()):
            try:
                producer.close(timeout=0, null_logger=True)
            except Exception:  # noqa: BLE001 - exiting: nothing to report to
                pass


class KafkaEmitter:
    """The bounded queue, the background sender and the spool (see the module docstring)."""

    def __init__(
        self,
        producer_config: dict,
        spool_dir: Path,
        *,
        queue_size: int = 100_000,
        spool_cap_bytes: int = 64 * 1024 * 1024,
        send_timeout_s: float = 2.0,
        retry_every_s: float = 1.0,
        block_when_full: bool = False,
        write_ahead: bool = False,
        fsync_interval_s: float | None = None,
    ):
        self.producer_config = producer_config
        self.block_when_full = block_when_full
        self.write_ahead = write_ahead  # each event reaches the spool file before `emit` returns
        # How often what reached the spool is made durable against a power cut (docs/configuration.md,
        # ROUTERSCOPE_SPOOL_FSYNC_INTERVAL_S; 0: before every append returns).
        if fsync_interval_s is None:
            fsync_interval_s = spool_fsync_interval()
        self.fsync_interval_s = fsync_interval_s
        # A spool directory is one emitter's: two replaying one directory would send its events twice and
        # delete segments under each other. A second emitter on the same directory (another worker of the
        # app, or the same process) takes the first free sibling `spool.2`, `spool.3`, …
        spool_dir, self._spool_lock = _take_spool_dir(Path(spool_dir))
        self.spool = Spool(spool_dir, cap_bytes=spool_cap_bytes, fsync_interval_s=fsync_interval_s)
        # Whether a send has reached the broker since the last one failed. Until one has, the sender puts new
        # events behind the spool instead of trying the broker itself, so with the broker down at start the
        # first event is on disk within the sender's ~50 ms, not after a first attempt's timeouts (seconds);
        # the replayer's sends find out when the broker answers. A batch producer (`block_when_full`: paced by
        # the sender, and run again rather than recovered) starts by trying the broker: at start its events
        # would otherwise all go through the disk and the replayer (half its rate, measured).
        self._connected = block_when_full
        # A C queue with no lock of its own to take: `emit` checks the bound itself (a few threads racing
        # at the very edge may each add one more; what a full queue means, dropping, is unchanged).
        self.queue: queue.SimpleQueue[Outgoing] = queue.SimpleQueue()
        self.queue_size = queue_size if queue_size > 0 else float("inf")  # 0: unbounded, as queue.Queue had it
        self.send_timeout_s, self.retry_every_s = send_timeout_s, retry_every_s
        # Events an earlier process left in the spool count as emitted here, so the books balance.
        self.emitted = len(self.spool)
        self.delivered = self.queue_dropped = self.crash_dropped = self.restarts = 0
        self._holding: list[Outgoing] = []  # the batch in the sender's hands
        self._lock = threading.Lock()
        self._producers: dict[str, KafkaProducer] = {}  # one per thread: the sender's and the replayer's
        self._down_until = 0.0
        self._stop = threading.Event()
        self._on_sender: list = []  # work handed to the sender thread (see `call_on_sender`)
        self._thread = threading.Thread(target=self._supervise, name="routerscope-emitter", daemon=True)
        self._thread.start()
        self._replayer = threading.Thread(
            target=self._supervise, args=(self._replay,), name="routerscope-emitter-replay", daemon=True
        )
        self._replayer.start()
        self._syncer: threading.Thread | None = None
        if fsync_interval_s > 0:
            self._syncer = threading.Thread(target=self._sync_every, name="routerscope-emitter-fsync", daemon=True)
            self._syncer.start()
        # kafka-python closes a producer in its __del__, which at interpreter exit prints "Exception
        # ignored in KafkaProducer.__del__" into the host application's stderr: close them first.
        atexit.register(_close_at_exit, weakref.ref(self))

    # -- the request path ----------------------------------------------------------------------------
    def emit(self, message: Outgoing) -> None:
        if self.write_ahead:
            # Write-ahead: the event is in the spool file (the kernel's, so a SIGKILL of this process loses
            # nothing) before `emit` returns; the replayer sends it. A spool that cannot take it (a full
            # disk) falls back to the queue, as without write-ahead.
            with self._lock:
                if not self.spool.append([message], count_failed=False):
                    self.emitted += 1
                    return
        # A Ctrl-C (KeyboardInterrupt) can land at any call in here: the message is counted only next to
        # the put that queues it, with no call in between, so an interrupted emit counts nothing. Counted
        # before waiting, an interrupt during the wait would leave an `emitted` message that never enters
        # the queue: `in_flight` could never reach 0 and `flush()` would wait out its whole timeout.
        if self.queue.qsize() >= self.queue_size:
            if not self.block_when_full:
                self.emitted += 1
                self.queue_dropped += 1
                return
            while self.queue.qsize() >= self.queue_size:  # the sender always drains (to Kafka or the spool)
                time.sleep(0.001)
        self.emitted += 1
        self.queue.put(message)

    def call_on_sender(self, work) -> None:
        """Have `work()` called on the sender thread between batches (at least every 50 ms while the
        sender waits for messages): request-path work that can wait that long. It must not raise; if it
        does, the error is logged and the sender goes on."""
        self._on_sender.append(work)

    # -- accounting ----------------------------------------------------------------------------------
    @property
    def dropped(self) -> int:
        return self.queue_dropped + self.crash_dropped + self.spool.dropped + self.spool.corrupt + self.spool.failed

    @property
    def corrupt(self) -> int:
        return self.spool.corrupt

    @property
    def spooled(self) -> int:
        return len(self.spool)

    @property
    def in_flight(self) -> int:
        return self.emitted - self.delivered - self.spooled - self.dropped

    def counters(self) -> dict[str, int]:
        with self._lock:
            return {
                "emitted": self.emitted,
                "delivered": self.delivered,
                "spooled": self.spooled,
                "dropped": self.dropped,
                "in_flight": self.in_flight,
            }

    def faults(self) -> dict[str, int]:
        """What went wrong, by kind: the parts of `dropped` (queue full, spool over its cap, corrupt
        spool records, failed spool writes, batches held by a failed sender) and sender restarts."""
        with self._lock:
            return {
                "queue_full": self.queue_dropped,
                "spool_cap": self.spool.dropped,
                "corrupt": self.spool.corrupt,
                "spool_failed": self.spool.failed,
                "sender_crash": self.crash_dropped,
                "restarts": self.restarts,
            }

    # -- the sender ----------------------------------------------------------------------------------
    def _connect(self):
        """The calling thread's producer (the sender and the replayer each have one, so a replay attempt
        against a dead broker never holds up the sender)."""
        name = threading.current_thread().name
        producer = self._producers.get(name)
        if producer is None:
            from kafka import KafkaProducer  # deferred: ~100 ms to import, paid on the sender thread, not at start-up

            producer = self._producers[name] = KafkaProducer(**self.producer_config)
        return producer

    def _send_batch(self, batch: list[Outgoing]) -> bool:
        """Send and wait for the acks; True when every message was acknowledged."""
        from kafka.errors import KafkaError  # deferred: as KafkaProducer in _connect

        try:
            producer = self._connect()
            futures = []
            for m in batch:
                future = producer.send(m.topic, value=m.value, key=m.key, headers=list(m.headers))
                if future.is_done and future.failed():  # e.g. no metadata: fail the batch at once
                    raise future.exception
                futures.append(future)
            producer.flush(timeout=self.send_timeout_s)
            # one deadline for the whole batch, not one per message
            if all(f.is_done and not f.failed() for f in futures):
                self._connected = True
                return True
            failed = next((f.exception for f in futures if f.is_done and f.failed()), None)
            raise failed or KafkaError("not acknowledged in time")
        except (KafkaError, OSError, AssertionError) as exc:
            log.info("broker unavailable (%s): spooling events", type(exc).__name__)
            self._connected = False
            self._reset_producer()
            return False

    def _sync_every(self) -> None:
        """The spool made durable every `fsync_interval_s` while anything was written to it."""
        while not self._stop.wait(self.fsync_interval_s):
            self.sync_spool()

    def sync_spool(self) -> None:
        """fsync what reached the spool since the last sync (the segments taken under the lock, synced outside
        it: `emit` in write-ahead mode never waits for a disk flush). Never raises."""
        try:
            with self._lock:
                pending = self.spool.take_unsynced()
            self.spool.fsync_paths(*pending)
        except Exception:  # noqa: BLE001 - durability is best effort; the sender must not notice
            log.exception("event spool: sync failed")

    def _reset_producer(self, every: bool = False) -> None:
        """Close the calling thread's producer (`every`: all of them)."""
        names = list(self._producers) if every else [threading.current_thread().name]
        for name in names:
            producer = self._producers.pop(name, None)
            if producer is not None:
                try:
                    producer.close(timeout=0)
                except Exception:
                    pass

    def _drain_queue(self, limit: int = 5000) -> list[Outgoing]:
        batch = []
        try:
            batch.append(self.queue.get(timeout=0.05))
            while len(batch) < limit:
                batch.append(self.queue.get_nowait())
        except queue.Empty:
            pass
        return batch

    def _supervise(self, loop=None) -> None:
        """Run the sender (or `loop`: the replayer); if it ever raises, count what the sender held as
        dropped and start it again."""
        loop = loop or self._run
        while True:
            try:
                loop()
                return
            except BaseException as exc:  # noqa: BLE001 - the sender must outlive any fault
                with self._lock:
                    if loop == self._run:
                        self.crash_dropped += len(self._holding)
                        self._holding = []
                    self.restarts += 1
                log.error("event sender failed (%s: %s); restarted", type(exc).__name__, exc)
                self._reset_producer()
                time.sleep(min(1.0, 0.05 * self.restarts))

    def _run_handed_work(self) -> None:
        for work in self._on_sender:
            try:
                work()
            except Exception:  # noqa: BLE001 - not the sender's to fail on
                log.exception("work handed to the event sender failed")

    def _run(self) -> None:
        """The sender: new events to the broker, or behind the spool while it holds anything or the
        broker is down. It never replays (the replayer does), so it is never held up by a dead broker
        for longer than one send of its own."""
        while True:
            if self._on_sender:
                self._run_handed_work()
            batch = self._holding = self._drain_queue()
            if batch:
                with self._lock:
                    behind = len(self.spool) > 0 or not self._connected or time.monotonic() < self._down_until
                if not behind and self._send_batch(batch):
                    with self._lock:
                        self.delivered += len(batch)
                        self._holding = []
                    continue
                if not behind:
                    self._down_until = time.monotonic() + self.retry_every_s
                self._spool(batch)
                continue
            if self._stop.is_set() and self.queue.empty():
                if self._on_sender:
                    self._run_handed_work()
                return

    def _spool(self, batch: list[Outgoing]) -> None:
        """Append `batch` behind the spool; what the spool cannot take (a full disk) goes to the broker
        directly when it answers (out of order, but not lost), else is counted as dropped."""
        with self._lock:
            unwritten = self.spool.append(batch, count_failed=False)
            if not unwritten:
                self._holding = []
                return
        if time.monotonic() >= self._down_until:
            if self._send_batch(unwritten):
                with self._lock:
                    self.delivered += len(unwritten)
                    self._holding = []
                return
            self._down_until = time.monotonic() + self.retry_every_s
        with self._lock:
            self.spool._fail(len(unwritten), OSError("the spool could not take them and the broker is down"))
            self._holding = []

    def _replay(self) -> None:
        """The replayer: the spool to the broker, oldest first, whenever it holds anything and the broker
        is not known to be down; a failed attempt backs off for `retry_every_s`."""
        while not self._stop.is_set():
            if not len(self.spool) or time.monotonic() < self._down_until:
                self._stop.wait(0.02)
                continue
            with self._lock:  # peek counts corrupt records: keep the books consistent for readers
                batch, read = self.spool.peek(500)  # (it may step over what it cannot read first)
                position = self.spool._position  # where this batch starts (the cap may move it meanwhile)
            if not read:  # nothing readable at all (what was not there is counted): wait, never spin
                self._stop.wait(0.05)
                continue
            if not batch:  # only corrupt records (already counted): step over them
                with self._lock:
                    self.spool.advance(read, delivered=0)
                continue
            if batch and self._send_batch(batch):
                with self._lock:
                    if self.spool._position == position:
                        self.spool.advance(read, delivered=len(batch))
                        self.delivered += len(batch)
                    # else the cap dropped these records meanwhile (counted as dropped already)
                continue
            if batch:
                self._down_until = time.monotonic() + self.retry_every_s

    # -- lifecycle -----------------------------------------------------------------------------------
    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until everything emitted is delivered (True) or the timeout passes (False)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.in_flight == 0 and not len(self.spool):
                return True
            time.sleep(0.02)
        return False

    def close(self, timeout_s: float = 10.0) -> None:
        """Clean shutdown: send what can be sent within the timeout; the rest stays in the spool."""
        self.flush(timeout_s)
        self._stop.set()
        self._thread.join(timeout=timeout_s)
        self._replayer.join(timeout=timeout_s)
        leftover = []
        while not self.queue.empty():
            leftover.append(self.queue.get_nowait())
        if leftover:
            with self._lock:
                self.spool.append(leftover)
        if self._syncer is not None:
            self._syncer.join(timeout=timeout_s)
        with self._lock:
            self.spool.close()  # synced, the open segment closed
        self._reset_producer(every=True)
        if self._spool_lock is not None:
            os.close(self._spool_lock)  # the directory free for the next emitter
            self._spool_lock = None
