"""The command layer sits on top: no lower package imports the command line, the demo, or the
alert engine's former home in the command layer (issue 16: alerting lives in `warehouse.alerting`)."""

from __future__ import annotations

import ast

import pytest

from tests.conftest import REPO

LOWER = ("warehouse", "pipelines", "router", "instrumentation", "dashboards")
COMMAND_LAYER = ("routerscope.cli", "routerscope.demo", "routerscope.alerts")


def imported(path) -> set[str]:
    """Every module a file imports, `from a import b` counted as both `a` and `a.b`."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return found


@pytest.mark.parametrize("package", LOWER)
def test_no_lower_package_imports_the_command_layer(package):
    offenders = {
        str(path.relative_to(REPO)): sorted(m for m in imported(path) if m.startswith(COMMAND_LAYER))
        for path in sorted((REPO / package).rglob("*.py"))
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_alert_engine_and_the_cli_unit_of_work_import_without_dagster():
    """`routerscope alerts` runs the alerts job's unit of work (`pipelines.core`) without Dagster's
    seconds of import: the engine and its delivery must not pull it in."""
    import subprocess
    import sys

    code = "import sys, pipelines.core, warehouse.alerting; print(sorted(m for m in sys.modules if m == 'dagster'))"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
