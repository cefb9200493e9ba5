"""Child processes that die with their parent.

Every process routerscope starts for the length of one command (the stand-in cloud, the dashboard's
Streamlit server, the model worker) is started through `spawn`: on Linux the kernel sends it SIGKILL
when the thread that started it dies (`PR_SET_PDEATHSIG`), so a parent killed with SIGKILL, or crashed
in native code, leaves nothing behind. The child also gets its own process group, so a Ctrl-C at the
terminal reaches the parent only and the parent stops its children in order (`stop`).

The local broker started by `routerscope broker start` / the demo is the one exception: it is left
running on purpose between commands (its pid is recorded under the home; `routerscope broker status`).

`wait_ready` is the start-up half of a child's life (poll until it answers, one error line naming its log
when it exits or never answers), `http_ok` the usual probe, `free_port` a loopback port nobody holds.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

from routerscope.core.errors import RouterscopeError

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    os.setsid()
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # the parent may have died between fork and prctl: then nobody would ever kill us
        if os.getppid() == 1:
            os._exit(1)


def spawn(cmd: Sequence[str], **kwargs) -> subprocess.Popen:
    """`subprocess.Popen` for a child that must not outlive this process (see the module doc).
    The parent *thread* matters to the kernel: call it from a thread that lives as long as the child."""
    kwargs.setdefault("stdin", subprocess.DEVNULL)
    return subprocess.Popen(list(cmd), preexec_fn=_die_with_parent, **kwargs)


def stop(process: subprocess.Popen, timeout_s: float = 10.0) -> int | None:
    """SIGTERM, then SIGKILL after `timeout_s`; returns the exit code (None if it could not be reaped)."""
    if process.poll() is None:
        try:
            process.terminate()
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                return None
        except ProcessLookupError:
            pass
    return process.returncode


def close_quietly(*streams) -> None:
    """Close each stream of a child process; a pipe whose other end is gone (or whose buffer cannot be flushed
    into it) is closed as far as it can be, without an error."""
    for stream in streams:
        try:
            stream.close()
        except (OSError, ValueError):
            pass


def free_port() -> int:
    """A loopback TCP port free at the time of the call (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_ok(url: str, timeout_s: float = 1.0) -> bool:
    """Whether `url` answers an HTTP GET with a success status."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            response.read()
            return True
    except (OSError, ValueError):  # refused, reset, timed out, an HTTP error status, a bad reply
        return False


def wait_ready(
    process: subprocess.Popen,
    ready: Callable[[], bool],
    *,
    what: str,
    log_path: Path | str,
    timeout_s: float = 60.0,
    poll_s: float = 0.3,
) -> None:
    """Poll `ready()` until it holds. When the child exits first, or `timeout_s` pass (the child is then
    stopped), raise a `RouterscopeError` that names `what` and its log."""
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            raise RouterscopeError(f"{what} exited with {process.returncode}; see {log_path}")
        if ready():
            return
        if time.monotonic() >= deadline:
            stop(process)
            raise RouterscopeError(f"{what} did not answer within {timeout_s:.0f} s; see {log_path}")
        time.sleep(poll_s)
