"""The exporter's connection slots and its stop (routerscope/warehouse/analytics/exporter.py, `_Server`). A CI run's
exporter did not stop on SIGTERM and was killed after 60 s; its log showed why: the SIGTERM landed while a
connection's thread was starting, the slot was released by the thread and again by the interrupted
`process_request`, and the second release's ValueError replaced the stop, which socketserver then took for one
failed request."""

from __future__ import annotations

import socket
import threading
import time
from socketserver import ThreadingMixIn

import pytest

from routerscope.cli.interrupt import Terminated
from routerscope.core import interrupts
from routerscope.warehouse.analytics import exporter


def test_a_stop_while_a_connections_thread_starts_goes_on_up_and_every_slot_comes_back(monkeypatch):
    done = threading.Event()
    server = exporter._Server(("127.0.0.1", 0), exporter._Quiet, max_connections=2)
    started_then_stopped = ThreadingMixIn.process_request

    def interrupted(self, request, client_address):
        started_then_stopped(self, request, client_address)  # the thread runs (and will release its slot) …
        raise Terminated  # … and the SIGTERM lands before process_request returns

    monkeypatch.setattr(ThreadingMixIn, "process_request", interrupted)
    monkeypatch.setattr(
        exporter._Server, "finish_request", lambda self, request, address: done.set()
    )  # (the connection's work: nothing)
    ours, theirs = socket.socketpair()
    try:
        with pytest.raises(Terminated):  # not "ValueError: Semaphore released too many times"
            server.process_request(ours, ("127.0.0.1", 1))
        assert done.wait(10)
        deadline = time.monotonic() + 10
        while server._holding and time.monotonic() < deadline:  # the connection's thread ends and lets go
            time.sleep(0.01)
        assert server.slots.acquire(blocking=False) and server.slots.acquire(blocking=False)  # both free again
        assert not server.slots.acquire(blocking=False)
    finally:
        theirs.close()
        server.server_close()


def test_a_stop_that_was_swallowed_ends_serve_forever_at_its_next_poll(monkeypatch):
    server = exporter._Server(("127.0.0.1", 0), exporter._Quiet)
    monkeypatch.setattr(interrupts, "_pending", Terminated)  # remembered by the SIGTERM handler, then swallowed
    try:
        with pytest.raises(Terminated):
            server.serve_forever(poll_interval=0.05)
    finally:
        server.server_close()
