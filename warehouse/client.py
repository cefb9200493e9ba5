"""The warehouse client: clickhouse-connect over embedded chDB (`chdb:///path`) or a server (`http(s)://`).

chDB locks its data directory per process (DESIGN §3): two processes cannot open the same embedded
warehouse at once. Every user therefore opens it for one unit of work with `open_warehouse(...)`,
under an advisory file lock beside the data directory, and closes it straight after; a process that
has to wait says so on stderr. Within one process the context manager is re-entrant: a nested unit
of work reuses the open client instead of deadlocking on its own lock. Against a server none of
this applies and each unit of work gets its own HTTP client.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from routerscope.errors import WarehouseError
from routerscope.settings import Settings, WarehouseDsn

LOCK_SUFFIX = ".lock"

# clickhouse-connect logs a connection failure before raising it; we raise one clear error instead.
logging.getLogger("clickhouse_connect").setLevel(logging.CRITICAL)

_local_lock = threading.RLock()  # one holder per process at a time, re-entrant for nesting
_open: dict[str, tuple[object, int]] = {}  # data dir -> (client, nesting depth)


def _say(message: str) -> None:
    print(f"routerscope: {message}", file=sys.stderr, flush=True)


@contextmanager
def _file_lock(lock_path: Path, purpose: str, timeout_s: float | None) -> Iterator[None]:
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
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
    import clickhouse_connect  # imported here: ~0.3 s, and only commands that need it pay

    attempts = 0
    while True:
        try:
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
            raise WarehouseError(
                f"cannot open the warehouse {dsn.redacted()}: {first_line[:300]}; "
                "check ROUTERSCOPE_CLICKHOUSE_DSN (or unset it to use the embedded warehouse)"
            ) from exc


@contextmanager
def open_warehouse(settings: Settings, purpose: str = "routerscope", timeout_s: float | None = None):
    """Open the warehouse for one unit of work; yields a clickhouse-connect client.

    Embedded: holds the per-directory lock for the duration (waiting, and saying so, if another
    process has it). Server: a fresh client, closed at the end."""
    dsn = settings.warehouse
    if not dsn.embedded:
        client = _connect(dsn)
        try:
            yield client
        finally:
            client.close()
        return

    key = str(dsn.path)
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
        dsn.path.parent.mkdir(parents=True, exist_ok=True)
        with _file_lock(Path(key + LOCK_SUFFIX), purpose, timeout_s):
            client = _connect(dsn)
            _open[key] = (client, 1)
            try:
                yield client
            finally:
                del _open[key]
                client.close()
