"""A non-editable install works: the wheel carries the migrations, the policy, the alert rules and the
dashboard's pages, and the CLI finds them where the wheel put them, not in this checkout.

The wheel is installed into a fresh virtual environment whose only other packages are the project's
dependencies, borrowed from the bootstrap's venv by a path file (path files in a borrowed directory are not
processed, so the checkout's editable install stays out). Commands run outside the checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from tests.support.home import REPO

pytestmark = pytest.mark.timeout(300)

SKIP = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", "tests")


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    shutil.copytree(REPO, source, ignore=SKIP)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(root / "dist"), str(source)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    wheel = next((root / "dist").glob("routerscope-*.whl"))
    env_dir = root / "venv"
    venv.create(env_dir, with_pip=False)
    site = Path(
        subprocess.check_output(
            [str(env_dir / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            text=True,
        ).strip()
    )
    (site / "borrowed-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    installed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(env_dir / "bin" / "python"),
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    return env_dir


def run(env_dir: Path, *args: str, home: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROUTERSCOPE_", "PYTHON"))}
    env["ROUTERSCOPE_HOME"] = str(home)
    return subprocess.run(list(args), cwd=home, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_installed_cli_runs_its_migrations_from_the_wheel(installed, tmp_path):
    python = str(installed / "bin" / "python")
    where = run(installed, python, "-c", "import routerscope.warehouse as w; print(w.__file__)", home=tmp_path)
    assert where.returncode == 0, where.stderr
    assert str(installed) in where.stdout and str(REPO) not in where.stdout  # the wheel's copy, not the checkout
    help_ = run(installed, str(installed / "bin" / "routerscope"), "--help", home=tmp_path)
    assert help_.returncode == 0, help_.stderr
    assert "migrate" in help_.stdout and "dashboard" in help_.stdout
    migrated = run(installed, str(installed / "bin" / "routerscope"), "migrate", home=tmp_path)
    assert migrated.returncode == 0, migrated.stderr
    check = (
        "import json; from routerscope.core.settings import Settings\n"
        "from routerscope.warehouse.client import open_warehouse\n"
        "from routerscope.warehouse.migrate import MIGRATIONS_DIR\n"
        "with open_warehouse(Settings.from_env(), purpose='test') as c:\n"
        "    n = c.query('SELECT count() FROM routerscope.schema_migrations').result_rows[0][0]\n"
        "print(json.dumps({'applied': n, 'files': len(list(MIGRATIONS_DIR.glob('*.sql')))}))"
    )
    counted = run(installed, python, "-c", check, home=tmp_path)
    assert counted.returncode == 0, counted.stderr
    figures = json.loads(counted.stdout)
    assert (
        figures["applied"]
        == figures["files"]
        == len(list((REPO / "routerscope" / "warehouse" / "migrations").glob("*.sql")))
    )


def test_the_installed_dashboard_renders_every_page_and_the_policy_and_alert_rules_load(installed, tmp_path):
    assert run(installed, str(installed / "bin" / "routerscope"), "migrate", home=tmp_path).returncode == 0
    script = (
        "import pathlib\nfrom routerscope import dashboards\n"
        "from streamlit.testing.v1 import AppTest\n"
        "app = pathlib.Path(dashboards.__file__).with_name('streamlit_app.py')\n"
        "pages = sorted(p.name for p in app.with_name('app_pages').glob('*.py'))\n"
        "print(pages)\n"
        "for page in pages:\n"
        "    at = AppTest.from_file(str(app.with_name('app_pages') / page), default_timeout=60).run()\n"
        "    assert not at.exception, (page, at.exception)\n"
        "from routerscope.router.policy import DEFAULT_POLICY, parse\n"
        "print('policy', parse(DEFAULT_POLICY.read_text()).version)\n"
        "from routerscope.warehouse.analytics.alerting import load_rules\n"
        "print('rules', len(load_rules()[1]))\n"
    )
    result = run(installed, str(installed / "bin" / "python"), "-c", script, home=tmp_path, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (
        "oncall.py" in result.stdout
        and "tuning.py" in result.stdout
        and "policy" in result.stdout
        and "rules" in result.stdout
    )
