"""Starting a command the way an interactive shell starts a foreground job, for tests that press Ctrl-C.

A shell without job control (a CI script's `make test &`, a runner's background job) starts its
background commands with SIGINT and SIGQUIT *ignored*, and an ignored signal stays ignored across
fork and exec: pytest, its workers and every command a test starts inherit it, and Python keeps an
inherited SIG_IGN (it installs its KeyboardInterrupt handler only over the default). A test's SIGINT
then does nothing at all: the demo goes on simulating, the dashboard keeps serving. An interactive
shell gives its foreground job the default dispositions, which is what a user pressing Ctrl-C has;
`as_foreground_job` wraps a command so it starts with them, whatever this test run inherited (the
wrapper execs the command: same pid, nothing left in between).
"""

from __future__ import annotations

import sys

_RESET_AND_EXEC = (
    "import os, signal, sys; "
    "signal.signal(signal.SIGINT, signal.SIG_DFL); signal.signal(signal.SIGQUIT, signal.SIG_DFL); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


def as_foreground_job(cmd: list[str]) -> list[str]:
    """`cmd` (its first item a path) started with SIGINT and SIGQUIT at their defaults."""
    return [sys.executable, "-c", _RESET_AND_EXEC, *cmd]
