"""What an application imports (`routerscope.sdk`: core, contract, instrumentation, router) stands without the
pipeline's heavy dependencies: with Dagster, Streamlit, Great Expectations, chDB (and the warehouse client)
blocked, every module imports (but the optional LiteLLM integration, which imports LiteLLM itself) and a
decision is recorded through the SDK into the emitter's spool."""

from __future__ import annotations

import json
import subprocess
import sys

from routerscope.core.procs import free_port
from tests.support.home import REPO, clean_env

BLOCKED = ("dagster", "streamlit", "great_expectations", "chdb", "clickhouse_connect")

SCRIPT = r"""
import importlib, importlib.abc, json, pkgutil, sys
BLOCKED = tuple(sys.argv[1].split(","))

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is blocked: the core must not need it")

sys.meta_path.insert(0, Block())
skipped = []
for package in ("routerscope.core", "routerscope.contract", "routerscope.instrumentation", "routerscope.router"):
    for module in pkgutil.iter_modules(importlib.import_module(package).__path__, package + "."):
        if module.name == "routerscope.instrumentation.litellm":
            skipped.append(module.name)  # the optional extra (`routerscope[litellm]`): tested where it is used
            continue
        importlib.import_module(module.name)

from routerscope.sdk import Recorder
recorder = Recorder.from_env()
with recorder.decision(task_type="short_reply", session_id="s1", deadline_ms=2000) as d:
    d.device_attempt(level=0, outcome="ok", latency_ms=12.0)
    d.served()
assert recorder.flush(10)
recorder.close(0.5)
print(json.dumps({"counters": recorder.emitter.counters(), "skipped": skipped,
                  "loaded": sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)}))
"""


def test_the_core_imports_and_records_without_dagster_streamlit_gx_or_chdb(tmp_path):
    # a loopback port with no broker: the event goes to the disk spool, nothing leaves the machine
    env = clean_env(tmp_path, ROUTERSCOPE_KAFKA_BOOTSTRAP=f"127.0.0.1:{free_port()}", PYTHONPATH=str(REPO))
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, ",".join(BLOCKED)], env=env, cwd=REPO, capture_output=True, text=True, timeout=90
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["loaded"] == [] and result["skipped"] == ["routerscope.instrumentation.litellm"]
    assert result["counters"]["emitted"] == 1 and result["counters"]["spooled"] + result["counters"]["delivered"] == 1
