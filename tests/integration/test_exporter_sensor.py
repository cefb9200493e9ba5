"""The Dagster deployment's `exporter_sensor` tick by tick (the daemon itself: tests/e2e/test_daemon.py): nothing
without ROUTERSCOPE_EXPORTER_PORT, nothing started on a port something else holds, and one exporter that later
ticks only renew."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import dagster as dg
import pytest

from routerscope.core import procs
from routerscope.core.procs import free_port
from routerscope.pipelines.exporter import _started, exporter_sensor
from routerscope.pipelines.resources import RouterscopeResource
from tests.support.home import settings_for

pytestmark = pytest.mark.integration


def tick(home) -> str:
    with dg.build_sensor_context(resources={"routerscope": RouterscopeResource(home=str(home))}) as context:
        result = exporter_sensor(context)
    assert isinstance(result, dg.SkipReason)  # it never asks for a run
    return result.skip_message


def test_without_a_port_the_sensor_does_nothing(home, monkeypatch):
    monkeypatch.delenv("ROUTERSCOPE_EXPORTER_PORT", raising=False)
    assert "ROUTERSCOPE_EXPORTER_PORT is unset" in tick(home)
    assert not list(home.glob("exporter*"))


def test_a_port_something_else_holds_is_left_alone(home, monkeypatch):
    class Other(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"someone else's service\n")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Other)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    monkeypatch.setenv("ROUTERSCOPE_EXPORTER_PORT", str(port))
    try:
        assert f"port {port} is held by something that is not a routerscope exporter" in tick(home)
    finally:
        server.shutdown()
    settings = settings_for(home)
    assert settings.exporter_lease_path(port).exists() and not settings.exporter_log_path.exists()


@pytest.mark.slow
def test_one_tick_starts_the_exporter_and_the_next_only_renews_its_lease(home, monkeypatch):
    port = free_port()
    monkeypatch.setenv("ROUTERSCOPE_EXPORTER_PORT", str(port))
    settings = settings_for(home)
    try:
        assert tick(home).startswith(f"started the exporter (pid {_started[port].pid})")
        lease = settings.exporter_lease_path(port)
        assert lease.stat().st_mode & 0o777 == 0o600
        before = lease.stat().st_mtime_ns
        assert tick(home) == f"serving http://127.0.0.1:{port}/metrics (lease renewed)"
        assert lease.stat().st_mtime_ns >= before and _started[port].poll() is None
    finally:
        child = _started.pop(port, None)
        if child is not None:
            # A SIGTERM that lands while the exporter's first warehouse read runs in C is handled when the read
            # returns: seconds on a loaded 2-core machine, past procs.stop's default 10 s before SIGKILL (-9).
            stopped = procs.stop(child, timeout_s=60)
            log = settings.exporter_log_path
            # (what the exporter was doing when it did not stop: its log's end, for the next one who meets it)
            assert stopped == 0, log.read_text(errors="replace")[-3000:] if log.exists() else "no exporter log"
