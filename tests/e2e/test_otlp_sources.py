"""Any OpenTelemetry-instrumented LLM app is a source: the real instrumentations from PyPI (OpenTelemetry's
openai-v2, OpenLLMetry's openai, OpenInference's openai and litellm) wrap a client calling the stand-in
cloud (`llama_cpp.server` with Gemma, as the demo starts it), export with the real OTLP/HTTP exporter to
`routerscope collect` run as its own process, and `routerscope load` and `routerscope metrics` count the
decisions: a served request, and a fallback (the device call fails, the cloud serves) shown as one."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest

from routerscope.core import broker, procs
from routerscope.router.backends import gemma_path
from routerscope.router.sim.standin_cloud import StandInCloud
from tests.support.home import REPO, ROUTERSCOPE, clean_env, run_cli, settings_for
from tests.support.ingest import query
from tests.support.otlp_app import SOURCES


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    cloud = StandInCloud(gemma_path(tmp_path_factory.mktemp("models")), tmp_path_factory.mktemp("cloud") / "s.log")
    yield cloud.wait_ready()
    cloud.stop()


@pytest.fixture(scope="module")
def collecting(tmp_path_factory):
    """A broker, a mapping file that puts a local runtime's port on the device, and `routerscope collect`."""
    home = tmp_path_factory.mktemp("otlp-home")
    dead_port = procs.free_port()  # the device runtime: not running, so its calls fail
    mapping = home / "mapping.yaml"
    mapping.write_text(f"device:\n  server_addresses: ['127.0.0.1:{dead_port}']\n")
    env = clean_env(home, ROUTERSCOPE_OTLP_MAPPING=str(mapping))
    settings = settings_for(home, ROUTERSCOPE_OTLP_MAPPING=str(mapping))
    broker.start(settings, port=procs.free_port())
    port = procs.free_port()
    collect = subprocess.Popen(
        [ROUTERSCOPE, "collect", "--port", str(port)], env=env, cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    assert "OTLP/HTTP on" in collect.stdout.readline()
    yield {"env": env, "settings": settings, "port": port, "dead_port": dead_port, "process": collect}
    collect.terminate()
    collect.wait(timeout=30)
    broker.stop(settings)


@pytest.mark.timeout(600)
def test_each_real_instrumentation_lands_its_decisions_and_its_fallback(standin, collecting):
    started = datetime.now(UTC) - timedelta(minutes=1)
    for source in SOURCES:
        app = subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.support.otlp_app",
                source,
                str(collecting["port"]),
                f"{standin.url}/v1",
                str(collecting["dead_port"]),
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
            env=collecting["env"],
        )
        assert app.returncode == 0, app.stderr[-3000:]
    time.sleep(1)  # the receiver writes each trace once its root span is in
    load = run_cli("load", "--json", env=collecting["env"])
    assert load.returncode == 0, load.stderr
    otlp = json.loads(load.stdout)["otlp"]
    assert otlp == {"messages": 8, "traces": 8, "mapped": 8, "quarantined": {}}, otlp
    rows = query(
        collecting["settings"],
        "SELECT app_id, session_id, task_type, entered_device, fallback_type, reason, attempt_levels,"
        " attempt_outcomes, cloud_calls, output_tokens > 0"
        " FROM routerscope.decisions FINAL ORDER BY app_id, session_id",
    )
    expected = []
    for source in sorted(SOURCES):
        expected.append((source, f"{source}-a", "unknown", False, "none", "default", [2], ["ok"], 1, True))
        expected.append(
            (source, f"{source}-b", "short_reply", True, "error", "device_error", [0, 2], ["error", "ok"], 1, True)
        )
    assert rows == expected
    # nothing of the prompt travelled (its words, its card number in any spacing; a bare "4111" can occur by
    # chance in a random UUID or a timestamp of the rows)
    stored = repr(query(collecting["settings"], "SELECT * FROM routerscope.decisions"))
    for fragment in ("hello", "My card", "4111 1111", "41111111", "1111 1111 1111"):
        assert fragment not in stored, fragment
    end = datetime.now(UTC) + timedelta(minutes=1)
    metrics = run_cli(
        "metrics", "--start", started.isoformat(), "--end", end.isoformat(), "--json", env=collecting["env"]
    )
    assert metrics.returncode == 0, metrics.stderr
    overall = json.loads(metrics.stdout)["overall"]
    assert (overall["requests"], overall["device_entered"], overall["error_fallback_rate"]) == (8, 4, 1.0)
