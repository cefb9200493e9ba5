"""A stop (Ctrl-C, SIGTERM) that Python swallowed is still a stop.

Python raises a signal handler's exception in the main thread at the next bytecode it runs. When that bytecode
belongs to a weakref callback, a `__del__` or a garbage-collector callback, the interpreter prints
"Exception ignored in ..." and carries on as if no signal had come: a `load` asked to stop went on to the end and
exited 0. So the handlers installed here also remember the stop, and the long loops (the loader's drain, the OTLP
receiver) call `raise_pending` at each turn, which raises it again where it can no longer be swallowed.

`routerscope` installs the Ctrl-C handler for every command (`routerscope/cli/__init__.py`) and the SIGTERM one
for its long-running commands (`routerscope/cli/interrupt.py`); library callers keep Python's own handlers, and
`raise_pending` does nothing for them."""

from __future__ import annotations

import signal
import threading

_pending: type[KeyboardInterrupt] | None = None


def raising(stop: type[KeyboardInterrupt]):
    """A signal handler that raises `stop` and remembers it for `raise_pending`."""

    def handler(signum, frame):
        global _pending
        _pending = stop
        raise stop

    return handler


def remember_ctrl_c() -> None:
    """Ctrl-C raises KeyboardInterrupt as Python's own handler does, and is remembered. Left alone where SIGINT
    is ignored (a job started in the background) or handled by someone else, and outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, raising(KeyboardInterrupt))


def raise_pending() -> None:
    """Raise the stop a handler of this module raised since the last call, once: a no-op unless it was
    swallowed, because a stop that propagated ends the loop calling this before it comes round again. Only in
    the main thread, where Python delivers signals (a loop in another thread goes on, as it would have)."""
    global _pending
    if _pending is not None and threading.current_thread() is threading.main_thread():
        stop, _pending = _pending, None
        raise stop
