"""The Prometheus endpoint inside the Dagster deployment (docs/operations.md "Running under the Dagster daemon"):
`exporter_sensor` keeps one `routerscope exporter` serving on ROUTERSCOPE_EXPORTER_PORT while the daemon runs.

Why a sensor that starts a process, and not a server inside the definitions: several processes load
`routerscope.pipelines.definitions` — every run is a new process, the webserver has its own code server, and
`dagster-daemon run -w workspace.yaml` starts a fresh code server every minute and lets the old one expire. A
server bound when the definitions load would be bound by whichever loaded first and gone when it exits. Only the
daemon ticks sensors, once per interval, so one process asks for the endpoint; the port decides the rest (a
second exporter cannot bind it). The exporter outlives the code server that started it and stops by itself once
the sensor stops renewing its lease (the daemon stopped, the sensor turned off, the setting removed).

`keep_serving` is the unit of work, without Dagster."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import dagster as dg

from routerscope.core.settings import Settings
from routerscope.pipelines import timing
from routerscope.pipelines.metrics import SENSOR_WAREHOUSE_WAIT_S
from routerscope.pipelines.resources import RouterscopeResource
from routerscope.warehouse.analytics.exporter import DEFAULT_REFRESH_S, HEALTH_BODY, HEALTH_PATH

# The exporter stops after this many sensor intervals without a renewal, plus a margin: the daemon evaluates the
# sensors one after another, and two of them may each wait SENSOR_WAREHOUSE_WAIT_S for an embedded warehouse, so
# this sensor's ticks can lie that much further apart (seen: 24 s apart at a 5 s interval).
LEASE_INTERVALS = 4
LEASE_MARGIN_S = 3 * SENSOR_WAREHOUSE_WAIT_S
START_TIMEOUT_S = 20.0
_started: dict[int, subprocess.Popen] = {}  # port → the exporter this process started (kept so it is reaped)


def lease_timeout_s(interval_s: float) -> float:
    """How long the exporter serves without a renewal (180 s at the production interval of 30 s)."""
    return LEASE_INTERVALS * interval_s + LEASE_MARGIN_S


def _probe(port: int) -> str | None:
    """'routerscope' when a routerscope exporter answers on the port, 'other' when something else does, None when
    nothing does."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{HEALTH_PATH}", timeout=2) as response:
            return "routerscope" if response.read() == HEALTH_BODY else "other"
    except urllib.error.HTTPError:
        return "other"
    except OSError:  # refused, reset or no answer in time (urllib's URLError is an OSError)
        return None


def _renew(settings: Settings, port: int) -> str:
    settings.home.mkdir(parents=True, exist_ok=True, mode=0o700)  # a fresh deployment's first tick may come first
    path = settings.exporter_lease_path(port)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    os.utime(path)
    return str(path)


def _spawn(settings: Settings, port: int, lease: str, timeout_s: float, refresh_s: float) -> subprocess.Popen:
    env = dict(os.environ) | {
        "ROUTERSCOPE_HOME": str(settings.home),
        "ROUTERSCOPE_CLICKHOUSE_DSN": settings.warehouse.raw,
    }
    cmd = [sys.executable, "-m", "routerscope", "exporter", "--port", str(port), "--refresh", f"{refresh_s:g}"]
    cmd += ["--lease", lease, "--lease-timeout", f"{timeout_s:g}"]
    fd = os.open(settings.exporter_log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "ab") as log:
        # Not procs.spawn: its children die with the thread that started them, and this code server is replaced
        # within minutes. The lease ends this one instead; its own session keeps a signal to the daemon's process
        # group from reaching it before the lease says so.
        return subprocess.Popen(
            cmd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


def keep_serving(settings: Settings, port: int, lease_timeout: float, refresh_s: float = DEFAULT_REFRESH_S) -> str:
    """Renew the lease of the exporter on `port` and start one if none answers; what was done, in one line."""
    lease = _renew(settings, port)
    url = f"http://127.0.0.1:{port}/metrics"
    found = _probe(port)
    if found == "routerscope":
        return f"serving {url} (lease renewed)"
    if found == "other":
        return f"port {port} is held by something that is not a routerscope exporter: no endpoint started"
    earlier = _started.get(port)
    if earlier is not None and earlier.poll() is None:
        return f"the exporter started earlier (pid {earlier.pid}) is not answering on {url} yet"
    child = _started[port] = _spawn(settings, port, lease, lease_timeout, refresh_s)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if child.poll() is not None:
            return f"the exporter exited at start (code {child.returncode}): see {settings.exporter_log_path}"
        if _probe(port) == "routerscope":
            return f"started the exporter (pid {child.pid}) on {url}"
        time.sleep(0.2)
    return f"started the exporter (pid {child.pid}); not answering on {url} yet"


@dg.sensor(
    minimum_interval_seconds=timing.sensor_interval(timing.EXPORTER_INTERVAL_S),
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Keep the Prometheus endpoint up on ROUTERSCOPE_EXPORTER_PORT while this deployment runs.",
)
def exporter_sensor(context: dg.SensorEvaluationContext, routerscope: RouterscopeResource):
    """Never requests a run: each tick renews the exporter's lease and starts it when nothing answers."""
    settings = routerscope.settings()
    if settings.exporter_port is None:
        return dg.SkipReason("ROUTERSCOPE_EXPORTER_PORT is unset: this deployment serves no Prometheus endpoint")
    interval = timing.sensor_interval(timing.EXPORTER_INTERVAL_S)
    return dg.SkipReason(keep_serving(settings, settings.exporter_port, lease_timeout_s(interval)))
