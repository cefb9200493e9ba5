"""A part whose extra is not installed says so in one line naming the extra (`routerscope.core.extras`), as an
ImportError when imported and as the command line's one error line. A module is made missing the way Python
itself knows it: None in sys.modules (the import then fails with ModuleNotFoundError), nothing installed or
uninstalled. tests/e2e/test_sdk_wheel.py checks the same in a real bare install."""

from __future__ import annotations

import importlib
import sys

import pytest

from routerscope import cli
from routerscope.core.errors import RouterscopeError
from routerscope.core.extras import EXTRA_OF_MODULE, MissingExtra, missing_extra, require

LINE = "routerscope.pipelines needs the [pipeline] extra: pip install 'routerscope[pipeline]'"


def block(monkeypatch, *modules: str) -> None:
    """`modules` cannot be imported, and the project's modules that check for them are imported afresh."""
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)
    for name in [n for n in sys.modules if n.startswith(("routerscope.pipelines", "routerscope.dashboards"))]:
        monkeypatch.delitem(sys.modules, name)


def test_importing_the_pipelines_without_dagster_is_one_line_naming_the_extra(monkeypatch):
    block(monkeypatch, "dagster")
    with pytest.raises(ImportError) as raised:
        importlib.import_module("routerscope.pipelines")
    assert str(raised.value) == LINE
    assert isinstance(raised.value, ModuleNotFoundError) and isinstance(raised.value, RouterscopeError)
    assert raised.value.name == "dagster" and raised.value.extra == "pipeline"


def test_importing_the_dashboards_without_streamlit_names_the_dashboard_extra(monkeypatch):
    block(monkeypatch, "streamlit")
    with pytest.raises(MissingExtra, match=r"^routerscope\.dashboards needs the \[dashboard\] extra: "):
        importlib.import_module("routerscope.dashboards")


def test_require_passes_when_everything_is_installed_and_checks_dotted_names():
    require("routerscope.pipelines", "pipeline", "dagster", "great_expectations")  # this venv has every extra
    with pytest.raises(MissingExtra) as raised:
        require("OTLP export", "otlp", "opentelemetry.exporter.no_such_exporter")
    assert str(raised.value) == "OTLP export needs the [otlp] extra: pip install 'routerscope[otlp]'"


def test_an_import_error_deeper_down_is_named_by_its_module_or_left_alone(monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    with pytest.raises(ModuleNotFoundError) as raised:
        import llama_cpp  # noqa: F401
    said = missing_extra("the device model", raised.value)
    assert str(said) == "the device model needs the [device] extra: pip install 'routerscope[device]'"
    # a module of no extra (a broken install, a bug) keeps its own error and traceback
    assert missing_extra("x", ModuleNotFoundError("No module named 'nowhere'", name="nowhere")) is None
    assert missing_extra("x", ImportError("cannot import name 'UTC' from 'datetime'", name="datetime")) is None
    assert set(EXTRA_OF_MODULE.values()) == {"litellm", "pipeline", "dashboard", "device"}


def test_the_command_with_a_missing_extra_prints_one_line_and_exits_non_zero(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("ROUTERSCOPE_HOME", str(tmp_path))
    block(monkeypatch, "dagster")
    code = cli.main(["metrics", "--start", "2026-11-29", "--end", "2026-11-30"])
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert err.splitlines() == [
        "routerscope: error: `routerscope metrics` needs the [pipeline] extra: pip install 'routerscope[pipeline]'"
    ]
