"""SIGTERM stops a command as Ctrl-C does: every long-running command (`demo`, `collect`, `dashboard`,
`exporter`) installs `stop_on_term` and handles `KeyboardInterrupt` once."""

from __future__ import annotations

import signal

from routerscope.core.interrupts import raising


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C would be (`stop_on_term`)."""


def stop_on_term() -> None:
    """SIGTERM (a service manager, `kill`, a test) stops the command the way Ctrl-C does, through its
    KeyboardInterrupt path: what was routed is flushed or spooled, and the command says where things stand.
    Remembered, as Ctrl-C is, should Python swallow it (routerscope/core/interrupts.py)."""
    signal.signal(signal.SIGTERM, raising(Terminated))
