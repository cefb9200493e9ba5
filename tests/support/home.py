"""A test's routerscope home: the environment a command sees, the settings over it, `routerscope` run as its
own process, and a copy of a template warehouse (built by the `warehouse_template` fixture)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from routerscope.core import procs
from routerscope.core.settings import Settings

REPO = Path(__file__).resolve().parents[2]
ROUTERSCOPE = str(Path(sys.executable).parent / "routerscope")


def clean_env(home: Path, **extra: str) -> dict:
    """The environment a command sees: this test's home, nothing inherited that points elsewhere."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROUTERSCOPE_")}
    env["ROUTERSCOPE_HOME"] = str(home)
    env.update(extra)
    return env


def run_cli(*args: str, env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `routerscope ARGS` as its own process, as a user would."""
    return subprocess.run([ROUTERSCOPE, *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO)


def spawn_exporter(home: Path, port: int, log: Path, refresh_s: float) -> subprocess.Popen:
    """`routerscope exporter` on `port` as a user runs it, its output in `log` (it dies with the test's thread)."""
    with log.open("wb") as out:
        return procs.spawn(
            [ROUTERSCOPE, "exporter", "--port", str(port), "--refresh", f"{refresh_s:g}"],
            env=clean_env(home),
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def settings_for(home: Path, **extra: str) -> Settings:
    return Settings.from_env(clean_env(home, **extra))


def copy_warehouse(template_home: Path, home: Path) -> Settings:
    """This test's own copy of a template warehouse (see `warehouse_template`) under `home`."""
    settings = settings_for(home)
    source = settings_for(template_home).warehouse.path
    shutil.copytree(source, settings.warehouse.path, symlinks=True)
    return settings
