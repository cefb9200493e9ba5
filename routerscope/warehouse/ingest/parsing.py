"""Parsing a chunk of Kafka messages for the loader, in this process or in a worker process beside it.

Validating a message in Python (routerscope/contract/validation.py) costs several times what consuming it
does, and the loader's process spends most of its time there while the machine's other cores wait.
Beside a warehouse server, whose inserts run on the server's cores, the loader hands large chunks
of message values to one worker process (a new interpreter, not a fork: the loader's own process
holds the warehouse engine's threads) and goes on consuming and inserting while the worker parses.
With the embedded warehouse it does not by default: the warehouse's insert, written in a thread beside
the drain, already takes the second core (docs/loader.md). The worker is a pure function of the bytes it is given: it
writes nothing, keeps nothing, and every warehouse write, position and ledger row stays in the
loader's process and in the loader's order, so the guarantees of routerscope/warehouse/ingest/loader.py are unchanged.
If the worker cannot be started or dies, the loader parses in its own process (and says so once).
"""

from __future__ import annotations

import gc
import pickle
import queue
import signal
import subprocess
import sys
import threading
from collections import deque
from concurrent.futures import Future
from typing import IO

from routerscope.contract.validation import CONTRACTS
from routerscope.core.procs import close_quietly
from routerscope.warehouse.schema import RECORD_ID

# A chunk's result not back after this long (a stuck worker) is parsed in the loader's process.
WORKER_TIMEOUT_S = 120.0
# A chunk this small is parsed in the loader's process: sending it costs more than it saves, and
# the worker is only started for a backlog.
MIN_WORKER_CHUNK = 2_000


def parse_chunk(topic: str, items: list[tuple[int, int, bytes | None, bool]]) -> list[tuple]:
    """Parse (partition, offset, value, landed) items of one topic. Per item, in order:
    `(line, month, record_id, event_time)` for a valid event (its JSON line for the input table,
    year * 12 + month of its time; the record id and time only for a `landed` one, whose ledger row
    is written again) or `(None, rules)` for an invalid one."""
    contract = CONTRACTS[topic]
    id_field = RECORD_ID[topic]
    out: list[tuple] = []
    append = out.append
    for partition, offset, raw, landed in items:
        event, rules, encoded = contract.parse_encoded(raw) if raw is not None else (None, ["json.invalid"], b"")
        if event is None:
            append((None, rules))
            continue
        t = event.event_time
        if landed:
            append((None, None, getattr(event, id_field), t))
            continue
        append(
            (b'{"kafka_partition":%d,"kafka_offset":%d,%b' % (partition, offset, encoded[1:]), t.year * 12 + t.month)
        )
    return out


class ParseWorker:
    """One worker process parsing chunks, in the order they are submitted; `submit` returns a
    future of `parse_chunk`'s result. The process is started with this process's interpreter and
    module path (`python -c`), not through `multiprocessing`, which would import the caller's main
    script again in the worker. Two threads move the chunks and results, so a full pipe never
    blocks the loader."""

    def __init__(self):
        self._process: subprocess.Popen | None = None
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._futures: deque[Future] = deque()
        self._lock = threading.Lock()
        self._dead = False  # set by the reader when the worker's output ends
        self.failed: str | None = None  # why the worker is not used (it could not start, or it died)
        self.closed = False  # closed at the end of a run: never started again
        self.submitted = 0  # chunks handed to the worker

    def submit(self, topic: str, items: list) -> Future | None:
        """The future result, or None when the worker is unavailable (parse in-process then)."""
        if self.failed is not None or self.closed:
            return None
        if self._process is None:
            try:
                self._start()
            except Exception as exc:  # cannot start a process (limits, memory): parse here
                self.give_up(exc)
                return None
        future: Future = Future()
        with self._lock:
            if self._dead:  # it exited: its reader has failed what was pending
                self.give_up(RuntimeError("the parse worker stopped"))
                return None
            self._futures.append(future)
        self._requests.put((topic, items))
        self.submitted += 1
        return future

    def _start(self) -> None:
        path = [p for p in sys.path if p]
        code = f"import sys; sys.path[:0] = {path!r}; import routerscope.warehouse.ingest.parsing as w; w.serve()"
        # A session of its own: a terminal's Ctrl-C goes to the loader's process group, and the loader
        # (which prints one line) decides; the worker ends when its input does, however the loader ends.
        process = self._process = subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            close_fds=True,
            start_new_session=True,
        )
        if process.stdin is None or process.stdout is None:  # never: both are pipes (and so typed)
            raise RuntimeError("the parse worker was started without its pipes")
        for target, stream, name in ((self._write, process.stdin, "writer"), (self._read, process.stdout, "reader")):
            threading.Thread(
                target=target, args=(process, stream), name=f"routerscope-parse-{name}", daemon=True
            ).start()

    def _write(self, process: subprocess.Popen, stdin: IO[bytes]) -> None:
        while True:
            request = self._requests.get()
            if request is None or process.poll() is not None:
                return
            try:
                pickle.dump(request, stdin, protocol=pickle.HIGHEST_PROTOCOL)
                stdin.flush()
            except (OSError, ValueError):  # the worker is gone: the reader reports it
                return

    def _read(self, process: subprocess.Popen, stdout: IO[bytes]) -> None:
        while True:
            try:
                result = pickle.load(stdout)
            except Exception as exc:  # EOF: the worker exited or was killed
                error = RuntimeError(f"the parse worker stopped ({type(exc).__name__}, exit {process.poll()})")
                with self._lock:
                    self._dead = True
                    while self._futures:
                        self._futures.popleft().set_exception(error)
                return
            with self._lock:
                future = self._futures.popleft() if self._futures else None
            if future is not None:
                future.set_result(result)

    def give_up(self, exc: BaseException) -> None:
        if self.failed is None:
            self.failed = f"{type(exc).__name__}: {exc}"
            print(
                f"routerscope: the loader's parse worker is unavailable ({self.failed}); parsing in-process",
                file=sys.stderr,
                flush=True,
            )
        self.close()

    def close(self) -> None:
        """Stop the worker; what it has not returned is dropped (it is a pure function: nothing is
        lost). Killed, not asked: a writer thread blocked on a full pipe to a stuck worker would make
        closing its input wait for ever."""
        process, self._process = self._process, None
        if process is None:
            return
        self.closed = True
        self._requests.put(None)
        process.kill()
        process.wait()
        close_quietly(process.stdin, process.stdout)


def serve() -> None:
    """The worker's loop: (topic, items) in, `parse_chunk`'s result out, until its input ends.
    Ctrl-C on a terminal reaches the whole process group: the loader handles it (one line) and
    kills this process, which must not print a traceback of its own meanwhile."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A chunk's results are tens of thousands of new objects: with the default thresholds the collector
    # walks them again and again (the loader's own drain does the same, routerscope/warehouse/ingest/loader.py).
    gc.freeze()
    gc.set_threshold(100_000, 50, 1_000)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            topic, items = pickle.load(stdin)
        except EOFError:
            return
        pickle.dump(parse_chunk(topic, items), stdout, protocol=pickle.HIGHEST_PROTOCOL)
        stdout.flush()
