"""The layers, bottom to top: `routerscope.core` (settings, names, errors, time, Kafka options, child
processes) imports nothing of the project above it; the packages (`warehouse`, `pipelines`, `router`,
`instrumentation`, `dashboards`) stand on it; the command layer (every other module of `routerscope`: the
command line, the demo, the reports, the local broker) sits on top, and nothing below imports it. The
command modules are derived from the files, so a new one is covered without an edit here. `make lint` runs
this file."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from tests.conftest import REPO

PROJECT = ("routerscope", "warehouse", "pipelines", "router", "instrumentation", "dashboards")
LOWER = ("routerscope/core", "warehouse", "pipelines", "router", "instrumentation", "dashboards")
COMMAND_LAYER = tuple(
    f"routerscope.{path.stem}" for path in sorted((REPO / "routerscope").glob("*.py")) if path.stem != "__init__"
)


def imported(path) -> set[str]:
    """Every module a file imports, `from a import b` counted as both `a` and `a.b`."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def _is_command(module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in COMMAND_LAYER)


def test_the_command_layer_is_derived_from_the_files():
    assert {"routerscope.cli", "routerscope.demo", "routerscope.review", "routerscope.broker"} <= set(COMMAND_LAYER)
    assert not any(m.startswith("routerscope.core") for m in COMMAND_LAYER)


@pytest.mark.parametrize("package", LOWER)
def test_no_lower_package_imports_the_command_layer(package):
    offenders = {
        str(path.relative_to(REPO)): sorted(m for m in imported(path) if _is_command(m))
        for path in sorted((REPO / package).rglob("*.py"))
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_ground_floor_imports_nothing_of_the_project_above_it():
    offenders = {
        str(path.relative_to(REPO)): sorted(
            m for m in imported(path) if m.split(".")[0] in PROJECT and not m.startswith("routerscope.core")
        )
        for path in sorted((REPO / "routerscope" / "core").rglob("*.py"))
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_alert_engine_and_the_cli_unit_of_work_import_without_dagster():
    """`routerscope alerts` runs the alerts job's unit of work (`pipelines.core`) without Dagster's
    seconds of import: the engine and its delivery must not pull it in."""
    code = (
        "import sys, pipelines.core, warehouse.analytics.alerting;"
        " print(sorted(m for m in sys.modules if m == 'dagster'))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
