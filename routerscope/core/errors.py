"""Errors that the command line turns into one clear line (no traceback), each with its exit code."""

from __future__ import annotations

import errno
import re
import shutil
from pathlib import Path


class RouterscopeError(Exception):
    """A problem the user can act on. The message says what happened and what to do next."""

    exit_code = 1


class ConfigError(RouterscopeError):
    """A setting is invalid (unknown DSN scheme, bad number, ...)."""

    exit_code = 2


class BrokerUnavailable(RouterscopeError):
    """No Kafka broker answers at the configured bootstrap address."""


class WarehouseError(RouterscopeError):
    """The warehouse cannot be opened or a migration cannot be applied."""


class WarehouseOutage(WarehouseError):
    """The warehouse cannot take writes now (its disk is full, out of memory, too many parts, gone):
    a fault of the warehouse, never of the rows; the run stops with its positions where they were."""


class LoadInProgress(RouterscopeError):
    """Another load holds this warehouse (`routerscope load --no-wait`)."""

    exit_code = 75  # EX_TEMPFAIL: try again later


_FULL_DISK = re.compile(r"no space left|disk is full|not enough space|disk quota exceeded", re.IGNORECASE)


def is_full_disk(exc: BaseException) -> bool:
    """True for a write that failed because its disk (or quota) is full: ENOSPC, EDQUOT, or the words of
    a library that reports it in its own way (SQLite's "database or disk is full")."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return bool(_FULL_DISK.search(str(exc)))


def disk_note(path: Path) -> str:
    """`the disk under PATH has 1.2 MB free of 64.0 MB`, for an error line about a full disk."""
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        usage = shutil.disk_usage(probe)
    except OSError:
        return f"the disk under {path} is full"
    return f"the disk under {path} has {usage.free / 2**20:.1f} MB free of {usage.total / 2**20:.1f} MB"


def full_disk_error(path: Path, exc: BaseException, doing: str) -> RouterscopeError:
    """One line for a full disk met while `doing`, naming the disk and what to do."""
    first = (str(exc).splitlines() or [repr(exc)])[0][:200]
    return RouterscopeError(f"{doing} failed: {disk_note(path)} ({first}); free space there and run it again")
