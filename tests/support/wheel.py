"""The project as a user installs it: its wheel, built once from a copy of this checkout, a fresh virtual
environment to install it into (`tests/e2e/test_wheel.py`, `tests/e2e/test_sdk_wheel.py`), and commands run
there, outside the checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

from tests.support.home import REPO

SKIP = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", "tests")


def build_wheel(root: Path) -> Path:
    """The project's wheel, built under `root` from a copy of the checkout (nothing of its .venv or tests)."""
    source = root / "source"
    shutil.copytree(REPO, source, ignore=SKIP)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(root / "dist"), str(source)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    return next((root / "dist").glob("routerscope-*.whl"))


def new_venv(env_dir: Path, python: str | None = None) -> Path:
    """A fresh virtual environment without pip (pip_install installs into it from outside); `python`: the
    interpreter to make it with (default this one). Returns its python."""
    if python is None:
        venv.create(env_dir, with_pip=False)
    else:
        made = subprocess.run(
            [python, "-m", "venv", "--without-pip", str(env_dir)], capture_output=True, text=True, timeout=120
        )
        assert made.returncode == 0, made.stderr[-3000:]
    return env_dir / "bin" / "python"


def pip_install(python: Path, *args: str, timeout: float = 120) -> None:
    """`pip install ARGS` into the environment of `python`, with this interpreter's pip (`pip --python`)."""
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]


def run(*args: str, home: Path, timeout: float = 120, **extra: str) -> subprocess.CompletedProcess:
    """Run a command of an installed environment in `home` (its cwd and ROUTERSCOPE_HOME), nothing of this
    checkout's environment inherited (no ROUTERSCOPE_*, no PYTHON*)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROUTERSCOPE_", "PYTHON"))}
    env["ROUTERSCOPE_HOME"] = str(home)
    env.update(extra)
    return subprocess.run(list(args), cwd=home, env=env, capture_output=True, text=True, timeout=timeout)
