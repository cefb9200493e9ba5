"""On-call tools as the tests run them: a webhook receiver on loopback that records every POST by path, and
real Debian `prometheus-alertmanager` and `prometheus` processes on free loopback ports (both installed by
`make bootstrap`; a test that needs one and does not find it fails saying so, never skips)."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from routerscope.core import procs
from routerscope.core.procs import free_port

ROUTES = """
route:
  receiver: test
  group_by: [alertname, task_type]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: test
    webhook_configs:
      - url: {url}
        send_resolved: true
"""


class Receiver:
    """Records every POST by path (e.g. Alertmanager's notifications at /am, routerscope's webhook at /slack)."""

    def __init__(self):
        self.received: list[tuple[str, dict]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append((self.path, json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def at(self, path: str) -> list[dict]:
        return [body for p, body in self.received if p == path]

    def wait_for(self, path: str, count: int, timeout_s: float = 30.0) -> list[dict]:
        deadline = time.monotonic() + timeout_s
        while len(self.at(path)) < count and time.monotonic() < deadline:
            time.sleep(0.1)
        return self.at(path)

    def close(self) -> None:
        self.server.shutdown()


def binary(*names: str) -> str:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    pytest.fail(
        f"{names[0]} not found: `make bootstrap` installs it (Debian packages prometheus, prometheus-alertmanager)"
    )


@contextmanager
def running(cmd: list[str], ready_url: str, what: str, log: Path) -> Iterator[None]:
    with log.open("wb") as out:
        process = procs.spawn(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        procs.wait_ready(process, lambda: procs.http_ok(ready_url), what=what, log_path=log)
        yield
    finally:
        procs.stop(process)


@contextmanager
def alertmanager(workdir: Path, webhook_url: str) -> Iterator[str]:
    """A real Alertmanager routing every alert to `webhook_url`; yields its base URL."""
    config = workdir / "alertmanager.yml"
    config.write_text(ROUTES.format(url=webhook_url))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [
        binary("prometheus-alertmanager", "alertmanager"),
        f"--config.file={config}",
        f"--storage.path={workdir / 'alertmanager-data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",  # no gossip: one instance, no port beyond its own
    ]
    with running(cmd, f"{url}/-/ready", "alertmanager", workdir / "alertmanager.log"):
        yield url


@contextmanager
def prometheus(workdir: Path, config: dict) -> Iterator[str]:
    """A real Prometheus with `config` (prometheus.yml as a mapping); yields its base URL."""
    import yaml

    path = workdir / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [
        binary("prometheus"),
        f"--config.file={path}",
        f"--storage.tsdb.path={workdir / 'prometheus-data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    with running(cmd, f"{url}/-/ready", "prometheus", workdir / "prometheus.log"):
        yield url
