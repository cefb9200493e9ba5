"""Why one CI run's Ctrl-C did not stop `routerscope load` (it drained to the end and exited 0, its stderr
"Exception ignored in: <function WeakSet.__init__.<locals>._remove ...> ... KeyboardInterrupt"): Python raises
a signal handler's exception at the next bytecode of the main thread, and when that bytecode belongs to a weakref
callback the interpreter prints the exception and goes on. `routerscope/core/interrupts.py` remembers the stop,
and the long loops raise it again at their next turn."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

import pytest

from routerscope.core import interrupts
from tests.support.home import REPO

# A SIGINT that arrives while a weakref callback runs, as the CI run's did; then what a long loop would do next.
# The first line gives the process Python's own Ctrl-C handler whatever the test runner passed down.
SWALLOWED = """
import os, signal, sys, weakref
signal.signal(signal.SIGINT, signal.default_int_handler)
from routerscope.core import interrupts
from routerscope.cli.interrupt import stop_on_term
if "remember" in sys.argv:
    interrupts.remember_ctrl_c()
    stop_on_term()
sig = signal.SIGTERM if "term" in sys.argv else signal.SIGINT

class Thing:
    pass

def gone(ref):
    os.kill(os.getpid(), sig)
    for _ in range(10_000):  # the handler runs here, inside the callback
        pass

thing = Thing()
ref = weakref.ref(thing, gone)
del thing
print("went on", flush=True)
try:
    interrupts.raise_pending()
except KeyboardInterrupt as stop:
    print("stopped by", type(stop).__name__, flush=True)
    sys.exit(130)
print("ran to the end", flush=True)
"""


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", SWALLOWED, *argv], cwd=REPO, capture_output=True, text=True, timeout=60
    )


def test_with_pythons_own_handler_a_ctrl_c_inside_a_weakref_callback_is_swallowed():
    """The fault itself, so that the test below is known to meet it."""
    done = run()
    assert "Exception ignored in" in done.stderr and "KeyboardInterrupt" in done.stderr
    assert done.stdout.splitlines() == ["went on", "ran to the end"]
    assert done.returncode == 0


@pytest.mark.parametrize("how, stop", [("ctrl-c", "KeyboardInterrupt"), ("term", "Terminated")])
def test_a_remembered_stop_that_python_swallowed_is_raised_at_the_loops_next_turn(how, stop):
    done = run("remember", how)
    assert "Exception ignored in" in done.stderr  # swallowed once, as before
    assert done.stdout.splitlines() == ["went on", f"stopped by {stop}"]
    assert done.returncode == 130


def test_a_remembered_stop_is_raised_once_and_only_in_the_main_thread(monkeypatch):
    monkeypatch.setattr(interrupts, "_pending", KeyboardInterrupt)
    raised_elsewhere: list[BaseException] = []

    def elsewhere():
        try:
            interrupts.raise_pending()
        except BaseException as exc:  # noqa: BLE001 - the assertion below names it
            raised_elsewhere.append(exc)

    worker = threading.Thread(target=elsewhere)
    worker.start()
    worker.join()
    assert raised_elsewhere == []
    with pytest.raises(KeyboardInterrupt):
        interrupts.raise_pending()
    interrupts.raise_pending()  # raised once: nothing now


def test_ctrl_c_is_left_alone_where_it_is_ignored_or_someone_else_handles_it():
    """A job started in the background ignores SIGINT; a caller of the library may have its own handler."""
    before = signal.getsignal(signal.SIGINT)
    try:
        for other in (signal.SIG_IGN, lambda signum, frame: None):
            signal.signal(signal.SIGINT, other)
            interrupts.remember_ctrl_c()
            assert signal.getsignal(signal.SIGINT) is other
    finally:
        signal.signal(signal.SIGINT, before)
