"""The warehouse client: clickhouse-connect over embedded chDB (`chdb:///path`) or a server (`http(s)://`).

chDB locks its data directory per process (docs/architecture.md §3): two processes cannot open the same embedded
warehouse at once. Every user therefore opens it for one unit of work with `open_warehouse(...)`,
under an advisory file lock beside the data directory, and closes it straight after; a process that
has to wait says so on stderr. Within one process the context manager is re-entrant: a nested unit
of work reuses the open client instead of deadlocking on its own lock. Against a server none of
this applies and each unit of work gets its own HTTP client.

Also here, what the loader needs to tell a warehouse fault from a refusal of its rows (`outage`), the
free space on an embedded warehouse's disk (`check_free_space`), and the run-level lock that keeps
loads of one warehouse one at a time (`load_lock`).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import logging
import os
import re
import shutil
import stat
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from routerscope.core import names
from routerscope.core.errors import LoadInProgress, WarehouseError, WarehouseOutage
from routerscope.core.extras import require
from routerscope.core.settings import Settings, WarehouseDsn
from routerscope.warehouse.migrate import migrate

require("routerscope.warehouse.client", "pipeline", "clickhouse_connect", "chdb")

LOCK_SUFFIX = ".lock"
LOAD_LOCK_SUFFIX = ".load.lock"

# clickhouse-connect logs a connection failure before raising it; we raise one clear error instead.
logging.getLogger("clickhouse_connect").setLevel(logging.CRITICAL)

_local_lock = threading.RLock()  # one holder per process at a time, re-entrant for nesting
_open: dict[str, tuple[object, int]] = {}  # data dir -> (client, nesting depth)


def real_path(path: Path) -> Path:
    """The path with every symlink resolved: the locks of an embedded warehouse are keyed on it, so a
    command reaching the warehouse through a symlink (or `..`) meets the lock one through its real path
    holds, instead of taking a lock file of its own."""
    return Path(os.path.realpath(path))


def data_dir(dsn: WarehouseDsn) -> Path:
    """An embedded warehouse's data directory; a server's DSN has none (ValueError: a caller that reaches the
    files checks `dsn.embedded` first)."""
    if dsn.path is None:
        raise ValueError(f"the warehouse {dsn.redacted()} is a server: it has no data directory here")
    return dsn.path


def _say(message: str) -> None:
    print(f"routerscope: {message}", file=sys.stderr, flush=True)


def open_lock_file(path: Path) -> int:
    """The lock file's descriptor, never through a symbolic link (writing the holder's pid would overwrite the
    link's target) nor of anything but a regular file; WarehouseError in one line saying what to do."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP or os.path.islink(path):
            raise WarehouseError(
                f"the lock file {path} is a symbolic link (to {os.readlink(path)}): routerscope never writes "
                "through one; remove the link (it is made again as a plain file) and run the command again"
            ) from None
        raise WarehouseError(
            f"the lock file {path} cannot be opened ({exc.strerror}): check it and its directory"
        ) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise WarehouseError(
            f"the lock file {path} is not a regular file: move it away (it is made again) and run the command again"
        )
    return fd


@contextmanager
def _file_lock(lock_path: Path, purpose: str, timeout_s: float | None) -> Iterator[None]:
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = open_lock_file(lock_path)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 256, 0).decode(errors="replace").strip() or "another process"
            _say(f"waiting for the warehouse at {lock_path.parent} (in use by {holder}) ...")
            deadline = None if timeout_s is None else time.monotonic() + timeout_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if deadline is not None and time.monotonic() > deadline:
                        raise WarehouseError(
                            f"the warehouse at {lock_path.parent} stayed in use by {holder} for "
                            f"{timeout_s:.0f} s; stop that process or point ROUTERSCOPE_CLICKHOUSE_DSN "
                            "at a ClickHouse server"
                        ) from None
                    time.sleep(0.05)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} ({purpose})".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the flock


def _connect(dsn: WarehouseDsn):
    import clickhouse_connect  # deferred: ~0.3 s, and only commands that need it pay

    attempts = 0
    while True:
        try:
            if not dsn.embedded:
                return clickhouse_connect.get_client(dsn=dsn.raw)
            with _engine_stderr():  # the embedded engine writes its own errors to fd 2: kept out of the output
                return clickhouse_connect.get_client(dsn=dsn.raw)
        except Exception as exc:  # clickhouse-connect raises several unrelated types
            message = str(exc)
            # chDB's own lock: a process outside this lock protocol (e.g. a stray `chdb` shell).
            if "Cannot lock file" in message and attempts < 100:
                attempts += 1
                if attempts == 1:
                    _say(f"waiting for the warehouse at {dsn.path}: its engine lock is held elsewhere ...")
                time.sleep(0.1)
                continue
            first_line = (message.splitlines() or [repr(exc)])[0]
            if "Connection refused" in message:
                first_line = "connection refused"
            if dsn.embedded:
                raise WarehouseError(_embedded_open_error(dsn, first_line)) from exc
            raise WarehouseError(
                f"cannot open the warehouse {dsn.redacted()}: {first_line[:300]}; "
                "check ROUTERSCOPE_CLICKHOUSE_DSN (or unset it to use the embedded warehouse)"
            ) from exc


MUTATION_HEADER = b"format version: 1"


def table_dirs(warehouse: Path) -> dict[str, Path]:
    """Table name → its data directory (an Atomic database links `data/<db>/<table>` into `store/`)."""
    base = warehouse / "data" / names.DATABASE
    if not base.is_dir():
        return {}
    return {link.name: link.resolve() for link in sorted(base.iterdir()) if link.resolve().is_dir()}


_MUTATION = re.compile(rb"format version: 1\ncreate time: \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\ncommands: .+\n", re.S)


def torn_mutation(mutation: Path) -> str | None:
    """Why a mutation file cannot be read by the engine (None: it can): empty, another header, or cut
    short after its header (`format version: 1`, `create time: …`, `commands: …`, each on its line)."""
    try:
        with open(mutation, "rb") as f:
            text = f.read(1 << 20)
    except OSError as exc:
        return f"unreadable: {exc.strerror}"
    if not text.startswith(MUTATION_HEADER):
        return f"{len(text)} bytes"
    if not _MUTATION.match(text):
        return f"{len(text)} bytes, cut short after its header"
    return None


def _embedded_open_error(dsn: WarehouseDsn, first_line: str) -> str:
    """Why an embedded warehouse does not open, and what to do: a torn mutation file is named with
    `doctor --repair`; anything else sends to `doctor`, which finds what a crash or a disk left."""
    path = data_dir(dsn)
    torn = [
        (table, mutation.name, why)
        for table, directory in (table_dirs(path).items() if path.is_dir() else ())
        for mutation in sorted(directory.glob("mutation_*.txt"))
        if (why := torn_mutation(mutation)) is not None
    ]
    if torn:
        where = ", ".join(f"{table}/{name} ({why})" for table, name, why in torn[:3])
        return (
            f"the warehouse {dsn.redacted()} does not open: a mutation file is torn ({where}); run "
            "`routerscope doctor --repair` to move it aside, then run the command again"
        )
    return (
        f"cannot open the warehouse {dsn.redacted()}: {first_line[:300]}; run `routerscope doctor` to find what "
        "keeps it from opening (or point ROUTERSCOPE_CLICKHOUSE_DSN at another warehouse)"
    )


@contextmanager
def _engine_stderr() -> Iterator[None]:
    """While the embedded engine opens, its raw error lines (it writes them to file descriptor 2 itself,
    17 lines of them for one torn file) go to a temporary file instead of the user's terminal; what it
    wrote is passed on when the engine opened after all (nothing is lost), and dropped when it did not
    (the error that follows says it in one line)."""
    import tempfile  # deferred: only while the embedded engine opens

    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    opened = False
    with tempfile.TemporaryFile() as captured:
        try:
            os.dup2(captured.fileno(), 2)
            yield
            opened = True
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            if opened and captured.tell():
                captured.seek(0)
                os.write(2, captured.read(1 << 16))


_migrated: dict[str, int] = {}  # warehouse DSN -> open units of work in this process that applied the migrations


@contextmanager
def open_warehouse(
    settings: Settings, purpose: str = "routerscope", timeout_s: float | None = None, migrated: bool = False
):
    """Open the warehouse for one unit of work; yields a clickhouse-connect client. The one door every
    command, job, page and bench goes through.

    Embedded: holds the per-directory lock for the duration (waiting, and saying so, if another
    process has it). Server: a fresh client, closed at the end. `migrated`: apply the pending migrations
    first; a unit nested inside an open one that did reuses it and skips the check (the demo runs every
    window's jobs inside one). A read-only server user cannot migrate: `routerscope migrate` does it there."""
    with _opened(settings, purpose, timeout_s) as client:
        if not migrated:
            yield client
            return
        key = settings.warehouse.raw
        if not _migrated.get(key):
            migrate(client)
        _migrated[key] = _migrated.get(key, 0) + 1
        try:
            yield client
        finally:
            _migrated[key] -= 1


@contextmanager
def _opened(settings: Settings, purpose: str, timeout_s: float | None):
    """The warehouse's client for one unit of work, without migrations (see `open_warehouse`)."""
    dsn = settings.warehouse
    if not dsn.embedded:
        client = _connect(dsn)
        try:
            yield client
        finally:
            client.close()
        return

    path = data_dir(dsn)
    key = str(real_path(path))  # a symlinked path meets the lock of the real one
    with _local_lock:
        if key in _open:  # nested unit of work in this process: reuse
            client, depth = _open[key]
            _open[key] = (client, depth + 1)
            try:
                yield client
            finally:
                client, depth = _open[key]
                _open[key] = (client, depth - 1)
            return
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with _file_lock(Path(key + LOCK_SUFFIX), purpose, timeout_s):
            client = _connect(dsn)
            try:
                os.chmod(path, 0o700)  # the warehouse holds every event: its owner's only
            except OSError:
                pass
            _open[key] = (client, 1)
            try:
                yield client
            finally:
                del _open[key]
                client.close()


# -- faults of the warehouse, not of the rows ---------------------------------------------------------
# ClickHouse error codes (src/Common/ErrorCodes.cpp) that say the warehouse cannot take writes now,
# whatever the rows: its disk, memory, parts, files, network, replication or access. An insert
# failing with one of these is never split in halves and its rows are never quarantined.
OUTAGE_CODES = frozenset(
    {
        23,  # CANNOT_READ_FROM_ISTREAM
        24,  # CANNOT_WRITE_TO_OSTREAM
        60,  # UNKNOWN_TABLE
        74,  # CANNOT_READ_FROM_FILE_DESCRIPTOR
        75,  # CANNOT_WRITE_TO_FILE_DESCRIPTOR
        76,  # CANNOT_OPEN_FILE
        77,  # CANNOT_CLOSE_FILE
        81,  # UNKNOWN_DATABASE
        159,  # TIMEOUT_EXCEEDED
        164,  # READONLY
        173,  # CANNOT_ALLOCATE_MEMORY
        202,  # TOO_MANY_SIMULTANEOUS_QUERIES
        209,  # SOCKET_TIMEOUT
        210,  # NETWORK_ERROR
        225,  # NO_ZOOKEEPER
        236,  # ABORTED
        241,  # MEMORY_LIMIT_EXCEEDED
        242,  # TABLE_IS_READ_ONLY
        243,  # NOT_ENOUGH_SPACE
        252,  # TOO_MANY_PARTS
        279,  # ALL_CONNECTION_TRIES_FAILED
        285,  # TOO_FEW_LIVE_REPLICAS
        319,  # UNKNOWN_STATUS_OF_INSERT
        394,  # QUERY_WAS_CANCELLED
        425,  # SYSTEM_ERROR
        439,  # CANNOT_SCHEDULE_TASK
        497,  # ACCESS_DENIED
        516,  # AUTHENTICATION_FAILED
        999,  # KEEPER_EXCEPTION
        1000,  # POCO_EXCEPTION (file system errors among them)
        1001,  # STD_EXCEPTION (std::filesystem errors: "No space left on device")
    }
)
_CODE = re.compile(r"\bCode:\s*(\d+)")
_OUTAGE_TEXT = re.compile(
    r"no space left|not enough space|cannot reserve|errno:? *28\b|enospc|disk quota|read-only file system"
    r"|memory limit|cannot allocate memory|too many parts|connection (?:refused|reset|aborted)|broken pipe",
    re.IGNORECASE,
)


def outage(exc: BaseException) -> bool:
    """True when an insert failed because of the warehouse or the way to it (its disk, memory, parts,
    the server gone), not because of the rows' content."""
    if isinstance(exc, (OSError, MemoryError, WarehouseError)):
        return True
    try:
        from clickhouse_connect.driver.exceptions import OperationalError  # deferred: clickhouse_connect, ~0.1 s
    except ImportError:  # pragma: no cover
        pass
    else:
        if isinstance(exc, OperationalError):
            return True
    text = str(exc)
    if any(int(code) in OUTAGE_CODES for code in _CODE.findall(text)):
        return True
    return bool(_OUTAGE_TEXT.search(text))


# ClickHouse's codes for data that does not read back as written: CHECKSUM_DOESNT_MATCH (40),
# CANNOT_READ_ALL_DATA (33), CORRUPTED_DATA (246), CANNOT_DECOMPRESS (271).
DAMAGE_CODES = frozenset({33, 40, 246, 271})


def damaged(exc: BaseException) -> bool:
    """True when a query failed because a part of the warehouse does not read back as written (a flipped
    byte, a file cut short): `routerscope doctor --repair` sets such a part aside."""
    text = str(exc)
    return (
        any(int(code) in DAMAGE_CODES for code in _CODE.findall(text))
        or "Checksum doesn't match" in text
        or "(TOO_LARGE_SIZE_COMPRESSED)" in text  # a flipped byte in a block's header: its size reads absurd
    )


def damage_error(exc: BaseException) -> WarehouseError:
    """One line for a query that met a damaged part, naming `doctor`."""
    text = str(exc)
    part = re.search(r"while reading from part (\S+?)/? in table (\S+)", text)
    where = f" (part {Path(part.group(1)).name} of {part.group(2)})" if part else ""
    first = (text.splitlines() or [repr(exc)])[0]
    first = re.split(r"\. Reference:|: [Ww]hile reading", first)[0][:160]
    return WarehouseError(
        f"the warehouse holds a damaged part{where}: {first}; run `routerscope doctor --repair` to set it aside, "
        "then `routerscope load` to load its rows again from the broker"
    )


# -- free space on an embedded warehouse's disk ---------------------------------------------------
@dataclass(frozen=True)
class DiskSpace:
    mount: Path  # the mount point holding the warehouse
    free: int
    total: int
    floor: int  # the least free space a load keeps

    @property
    def low(self) -> bool:
        return self.free < self.floor

    def describe(self) -> str:
        return f"the warehouse's disk ({self.mount}) has {_size(self.free)} free of {_size(self.total)}" + (
            f" (the floor is {_size(self.floor)}, ROUTERSCOPE_WAREHOUSE_MIN_FREE)" if self.floor else ""
        )


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"  # pragma: no cover


def _mount_point(path: Path) -> Path:
    path = path.resolve()
    while not path.exists():
        path = path.parent
    while not os.path.ismount(path):
        path = path.parent
    return path


def disk_space(settings: Settings) -> DiskSpace | None:
    """The embedded warehouse's disk and its floor; None against a server (its disk is its own)."""
    dsn = settings.warehouse
    if not dsn.embedded:
        return None
    directory = data_dir(dsn)
    path = directory if directory.exists() else directory.parent
    while not path.exists():
        path = path.parent
    usage = shutil.disk_usage(path)
    share, size = settings.warehouse_min_free
    floors = [f for f in (None if share is None else int(usage.total * share), size) if f is not None]
    return DiskSpace(_mount_point(path), usage.free, usage.total, min(floors) if floors else 0)


OUTAGE_ADVICE = (
    "nothing past the last stored position was recorded as loaded and nothing was quarantined, so the next "
    "`routerscope load` resumes there"
)


def check_free_space(settings: Settings) -> None:
    """Raise WarehouseOutage when the embedded warehouse's disk is below its floor (a load stops there,
    before its next batch, instead of in the middle of a write)."""
    space = disk_space(settings)
    if space is not None and space.low:
        raise WarehouseOutage(
            f"{space.describe()}: the load stopped before writing more; {OUTAGE_ADVICE} once space is freed "
            "or the disk grown"
        )


def outage_error(settings: Settings, exc: BaseException, doing: str) -> WarehouseOutage:
    """One line for a warehouse fault met while `doing`: the disk and its free space when the warehouse
    is embedded (a full disk is the usual cause), the server's first line otherwise."""
    first = (str(exc).splitlines() or [repr(exc)])[0][:300]
    try:
        space = disk_space(settings)
    except OSError:
        space = None
    full = isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)
    full = full or bool(re.search(r"no space left|not enough space|cannot reserve|\bCode:\s*243\b", str(exc), re.I))
    if space is not None and (full or space.low):
        return WarehouseOutage(f"{doing} failed: {space.describe()} ({first}); {OUTAGE_ADVICE} once space is freed")
    where = f"; {space.describe()}" if space is not None else ""
    return WarehouseOutage(
        f"{doing} failed, a fault of the warehouse, not of the rows ({first}{where}); {OUTAGE_ADVICE}"
    )


# -- one load at a time per warehouse -------------------------------------------------------------
def load_lock_path(settings: Settings) -> Path:
    """Beside an embedded warehouse's real path (a load through a symlink meets the lock of a load through
    the real path); under the home for a server (one file per server and database)."""
    dsn = settings.warehouse
    if dsn.embedded:
        return Path(str(real_path(data_dir(dsn))) + LOAD_LOCK_SUFFIX)
    return settings.home / f"load-{hashlib.sha256(dsn.redacted().encode()).hexdigest()[:12]}{LOAD_LOCK_SUFFIX}"


@contextmanager
def load_lock(
    settings: Settings, partitions: Iterable[int] | None = None, wait: bool = True, say=None
) -> Iterator[None]:
    """Hold the run-level load lock of this warehouse: every partition (`partitions` None) or just
    those (loaders owning disjoint partition sets may run side by side). POSIX byte-range locks, one
    byte per partition, so two sets that overlap exclude each other. A second load waits, saying so
    once (`say`, default stderr), or with `wait=False` raises LoadInProgress. Held by the process, so
    released when it exits however it ends."""
    say = say or _say
    path = load_lock_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    ranges = [(0, 0)] if partitions is None else [(1, int(p)) for p in sorted(set(partitions))]
    fd = open_lock_file(path)
    held: list[tuple[int, int]] = []
    try:
        waited = False
        for length, start in ranges:
            while True:
                try:
                    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, length, start, os.SEEK_SET)
                    held.append((length, start))
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EACCES, errno.EAGAIN):
                        raise
                    holder = _holder(path)
                    if not wait:
                        raise LoadInProgress(
                            f"another load is running on the warehouse {settings.warehouse.redacted()} "
                            f"({holder}); run again when it has finished, or without --no-wait to wait for it"
                        ) from None
                    if not waited:
                        say(f"waiting for the load already running on this warehouse ({holder}) to finish ...")
                        waited = True
                    time.sleep(0.2)
        try:
            path.with_name(path.name + ".holder").write_text(f"pid {os.getpid()}, since {time.strftime('%H:%M:%S')}")
        except OSError:
            pass
        yield
    finally:
        for length, start in held:
            try:
                fcntl.lockf(fd, fcntl.LOCK_UN, length, start, os.SEEK_SET)
            except OSError:
                pass
        os.close(fd)


def _holder(path: Path) -> str:
    try:
        return path.with_name(path.name + ".holder").read_text().strip() or "another process"
    except OSError:
        return "another process"
