"""Child processes (`routerscope.core.procs`): waiting for a child to answer, and the one error line when it
exits first or never answers (the stand-in cloud starts this way)."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from routerscope.core import procs
from routerscope.core.errors import RouterscopeError


def test_a_free_port_can_be_bound():
    with socket.socket() as s:
        s.bind(("127.0.0.1", procs.free_port()))


def test_wait_ready_returns_once_the_child_answers_http(tmp_path):
    port = procs.free_port()
    log = tmp_path / "server.log"
    with open(log, "ab") as out:
        child = procs.spawn(
            [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(tmp_path)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        url = f"http://127.0.0.1:{port}/"
        assert not procs.http_ok(f"http://127.0.0.1:{procs.free_port()}/")  # nobody listens there
        procs.wait_ready(child, lambda: procs.http_ok(url), what="the test server", log_path=log, timeout_s=30)
        assert procs.http_ok(url) and child.poll() is None
    finally:
        procs.stop(child)


def test_a_child_that_exits_first_is_one_error_line_naming_its_log(tmp_path):
    child = procs.spawn([sys.executable, "-c", "raise SystemExit(3)"])
    with pytest.raises(RouterscopeError) as caught:
        procs.wait_ready(child, lambda: False, what="the test child", log_path=tmp_path / "child.log", timeout_s=30)
    assert str(caught.value) == f"the test child exited with 3; see {tmp_path / 'child.log'}"


def test_a_child_that_never_answers_is_stopped_after_the_timeout(tmp_path):
    child = procs.spawn([sys.executable, "-c", "import time; time.sleep(60)"])
    with pytest.raises(RouterscopeError, match=r"^the test child did not answer within 1 s; see .*child.log$"):
        procs.wait_ready(
            child, lambda: False, what="the test child", log_path=tmp_path / "child.log", timeout_s=1, poll_s=0.05
        )
    assert child.poll() is not None  # stopped, not left running
