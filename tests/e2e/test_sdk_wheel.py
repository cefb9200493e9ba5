"""`pip install routerscope` is the thin SDK a router team installs, on every Python it supports (3.10 and
3.13, the oldest and the newest): the wheel, installed bare with the pins of constraints.txt into a fresh
virtual environment of each, records decisions with `from routerscope.sdk import Recorder` into a real broker
(started by this test process), and they arrive intact; none of the pipeline, the dashboards, the device model
or OpenTelemetry's SDK came with it (recording needs the API only), and a part that needs them says which extra
in one line. With `[otlp]` (OpenTelemetry's SDK), docs/sdk.md's snippet runs as written and its decisions carry
their trace ids.

The Pythons are pyenv's (`~/.pyenv/versions/3.10.*`, or `python3.10` on PATH): a missing one fails the test,
saying so; it is never skipped."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from routerscope.contract.validation import DECISIONS, LABELS
from routerscope.core import names
from tests.support.home import REPO
from tests.support.kafka import consume_all
from tests.support.wheel import new_venv, pip_install, run

pytestmark = pytest.mark.timeout(300)

PYTHONS = ("3.10", "3.13")
# What the bare install may hold: the four dependencies of pyproject.toml and theirs.
BARE = {
    "routerscope",
    "msgspec",
    "opentelemetry-api",
    "opentelemetry-semantic-conventions",
    "kafka-python",
    "typing-extensions",
    "importlib-metadata",
    "zipp",
}
ABSENT = ("dagster", "streamlit", "chdb", "llama_cpp", "clickhouse_connect", "great_expectations", "pandas")
PIPELINE_LINE = "routerscope.pipelines needs the [pipeline] extra: pip install 'routerscope[pipeline]'"
ROUTER_LINE = "routerscope.router needs the [pipeline] extra: pip install 'routerscope[pipeline]'"
PROVIDERS_LINE = "setup_providers (OpenTelemetry's SDK) needs the [otlp] extra: pip install 'routerscope[otlp]'"

RECORD = r"""
import json, sys
from routerscope.sdk import Recorder, setup_providers

tag = sys.argv[1]
try:
    setup_providers("sdk-wheel-test")  # OpenTelemetry's SDK is the [otlp] extra: not here
    providers = None
except ImportError as exc:
    providers = str(exc)
recorder = Recorder.from_env()  # the API alone: the decisions are recorded all the same
ids = []
for i in range(3):
    with recorder.decision(task_type="short_reply", session_id=f"{tag}-{i}", deadline_ms=2000, elapsed_ms=120) as d:
        d.device_attempt(level=0, outcome="low_confidence", latency_ms=180.0, confidence=0.41, threshold=0.7)
        d.cloud_attempt(level=2, outcome="ok", latency_ms=420.0, model="gpt-4o-mini", output_tokens=12)
        d.served(fallback_type="quality", reason="low_confidence")
    ids.append(d.request_id)
recorder.label(ids[0], device_acceptable=True, source="human_review")
assert recorder.flush(30), recorder.emitter.counters()
counters = recorder.emitter.counters()
recorder.close(1)
print(json.dumps({"ids": ids, "counters": counters, "providers": providers, "python": "%d.%d" % sys.version_info[:2]}))
"""

ISOLATED = r"""
import importlib, importlib.metadata, json, sys
absent = {}
for module in sys.argv[1].split(","):
    try:
        importlib.import_module(module)
        absent[module] = "imported"
    except ModuleNotFoundError as exc:
        absent[module] = exc.name
def one_line(module):
    try:
        importlib.import_module(module)
        return None
    except ImportError as exc:
        return {"message": str(exc), "module_not_found": isinstance(exc, ModuleNotFoundError)}
pipelines, router = one_line("routerscope.pipelines"), one_line("routerscope.router.engine")
installed = sorted(d.metadata["Name"].lower().replace("_", "-") for d in importlib.metadata.distributions())
import importlib.resources
typed = importlib.resources.files("routerscope").joinpath("py.typed").is_file()
print(json.dumps({"absent": absent, "pipelines": pipelines, "router": router, "installed": installed, "typed": typed}))
"""


def find_python(version: str) -> str:
    """pyenv's newest Python `version` (PYENV_ROOT, else ~/.pyenv), else `pythonX.Y` on PATH; the test fails
    naming where it looked when there is none."""
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    found = sorted(
        root.glob(f"{version}.*/bin/python"),
        key=lambda p: [int(n) if n.isdigit() else -1 for n in p.parents[1].name.split(".")],
        reverse=True,
    )
    found.append(shutil.which(f"python{version}"))
    for python in filter(None, found):
        said = subprocess.run(
            [str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], capture_output=True, text=True
        )
        if said.returncode == 0 and said.stdout.strip() == version:
            return str(python)
    pytest.fail(
        f"no Python {version} on this machine (looked for {root}/{version}.*/bin/python and python{version} on "
        f"PATH): install it (`pyenv install {version}`); the SDK is tested on every Python it supports"
    )


@pytest.fixture(scope="module", params=PYTHONS, ids=lambda v: f"py{v}")
def bare(request, wheel, tmp_path_factory) -> Path:
    """A fresh virtual environment of that Python with the wheel installed bare, pinned by constraints.txt."""
    python = new_venv(tmp_path_factory.mktemp(f"sdk-py{request.param}") / "venv", find_python(request.param))
    pip_install(python, "-c", str(REPO / "constraints.txt"), str(wheel), timeout=240)
    return python


@pytest.fixture(scope="module", params=PYTHONS, ids=lambda v: f"py{v}")
def with_otlp(request, wheel, tmp_path_factory) -> Path:
    """A fresh virtual environment of that Python with `routerscope[otlp]` (OpenTelemetry's SDK) from the wheel."""
    python = new_venv(tmp_path_factory.mktemp(f"sdk-otlp-py{request.param}") / "venv", find_python(request.param))
    pip_install(python, "-c", str(REPO / "constraints.txt"), f"{wheel}[otlp]", timeout=240)
    return python


def sdk_snippet() -> str:
    """docs/sdk.md's first Python block, as a reader copies it."""
    text = (REPO / "docs" / "sdk.md").read_text()
    start = text.index("```python\n") + len("```python\n")
    return text[start : text.index("```", start)]


def test_the_bare_wheel_records_decisions_that_arrive_intact(bare, broker_settings, tmp_path):
    tag = f"sdk-wheel-{tmp_path.name}"
    done = run(
        str(bare), "-c", RECORD, tag, home=tmp_path, ROUTERSCOPE_KAFKA_BOOTSTRAP=broker_settings.kafka_bootstrap()
    )
    assert done.returncode == 0, done.stderr[-3000:]
    recorded = json.loads(done.stdout.strip().splitlines()[-1])
    assert recorded["python"] in PYTHONS and str(bare).find(f"sdk-py{recorded['python']}") > 0
    assert recorded["counters"]["delivered"] == 4 and recorded["counters"]["spooled"] == 0
    assert recorded["providers"] == PROVIDERS_LINE

    decisions = []
    for message in consume_all(broker_settings.kafka_bootstrap(), names.TOPIC_DECISIONS, expect=3):
        event, broken = DECISIONS.parse(message.value())
        if event is not None and event.request_id in recorded["ids"]:  # (its session id is a keyed hash)
            decisions.append(event)
        elif any(i.encode() in message.value() for i in recorded["ids"]):
            pytest.fail(f"a decision of this test breaks the contract: {broken}")
    assert sorted(e.request_id for e in decisions) == sorted(recorded["ids"])
    for event in decisions:
        assert (event.task_type, event.fallback_type, event.reason) == ("short_reply", "quality", "low_confidence")
        assert (event.deadline_ms, event.elapsed_ms, event.degrade_level, event.cloud_calls) == (2000, 120, 2, 1)
        assert (event.confidence, event.threshold, event.cloud_model, event.output_tokens) == (
            0.41,
            0.7,
            "gpt-4o-mini",
            12,
        )
        assert [(a.level, a.outcome, a.latency_ms) for a in event.attempts] == [
            (0, "low_confidence", 180.0),
            (2, "ok", 420.0),
        ]
        assert event.trace_id is None and event.span_id is None  # the API alone makes no trace ids

    labels = [LABELS.parse(m.value())[0] for m in consume_all(broker_settings.kafka_bootstrap(), names.TOPIC_LABELS, 1)]
    mine = [label for label in labels if label is not None and label.request_id == recorded["ids"][0]]
    assert [(label.device_acceptable, label.source) for label in mine] == [(True, "human_review")]


def test_the_bare_wheel_holds_no_extra_and_a_part_that_needs_one_says_which(bare, tmp_path):
    done = run(str(bare), "-c", ISOLATED, ",".join(ABSENT), home=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["absent"] == {module: module for module in ABSENT}
    assert set(found["installed"]) <= BARE, set(found["installed"]) - BARE
    assert found["pipelines"] == {"message": PIPELINE_LINE, "module_not_found": True}
    assert found["router"] == {"message": ROUTER_LINE, "module_not_found": True}
    assert found["typed"] is True  # PEP 561: an app's type checker reads the SDK's types

    command = run(str(bare.parent / "routerscope"), "load", home=tmp_path)
    assert command.returncode == 1 and command.stdout == ""
    assert command.stderr.splitlines() == [
        "routerscope: error: the `routerscope` command needs the [pipeline] extra: pip install 'routerscope[pipeline]'"
    ]


def test_the_sdk_snippet_runs_as_written_and_its_decisions_carry_trace_ids(with_otlp, broker_settings, tmp_path):
    """docs/sdk.md's snippet, copied as it stands into an app with `routerscope[otlp]`: its decision and its label
    arrive, and the decision carries the trace and span ids of its span."""
    script = sdk_snippet() + "\nprint(d.request_id)\n"
    done = run(
        str(with_otlp), "-c", script, home=tmp_path, ROUTERSCOPE_KAFKA_BOOTSTRAP=broker_settings.kafka_bootstrap()
    )
    assert done.returncode == 0, done.stderr[-3000:]
    request_id = done.stdout.strip().splitlines()[-1]
    found = []
    for message in consume_all(broker_settings.kafka_bootstrap(), names.TOPIC_DECISIONS, expect=1):
        event, _ = DECISIONS.parse(message.value())
        if event is not None and event.request_id == request_id:
            found.append(event)
    assert len(found) == 1
    assert len(found[0].trace_id) == 32 and len(found[0].span_id) == 16 and int(found[0].trace_id, 16) != 0
    labels = [LABELS.parse(m.value())[0] for m in consume_all(broker_settings.kafka_bootstrap(), names.TOPIC_LABELS, 1)]
    assert [label.source for label in labels if label is not None and label.request_id == request_id] == [
        "human_review"
    ]
