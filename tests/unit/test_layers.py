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
