"""A non-editable install works: the wheel carries the migrations, the policy, the alert rules and the
dashboard's pages, and the CLI finds them where the wheel put them, not in this checkout.

The wheel is installed into a fresh virtual environment whose only other packages are the project's
dependencies, borrowed from the bootstrap's venv by a path file (path files in a borrowed directory are not
processed, so the checkout's editable install stays out). Commands run outside the checkout."""

from __future__ import annotations

import json
import subprocess
import sysconfig
from pathlib import Path

import pytest

from tests.support.home import REPO
from tests.support.wheel import new_venv, pip_install, run

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    env_dir = tmp_path_factory.mktemp("wheel") / "venv"
    python = new_venv(env_dir)
    site = Path(
        subprocess.check_output(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
        ).strip()
    )
    (site / "borrowed-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip_install(python, "--no-deps", "--no-index", str(wheel))
    return env_dir


def test_the_installed_cli_runs_its_migrations_from_the_wheel(installed, tmp_path):
    python = str(installed / "bin" / "python")
    where = run(python, "-c", "import routerscope.warehouse as w; print(w.__file__)", home=tmp_path)
    assert where.returncode == 0, where.stderr
    assert str(installed) in where.stdout and str(REPO) not in where.stdout  # the wheel's copy, not the checkout
    help_ = run(str(installed / "bin" / "routerscope"), "--help", home=tmp_path)
    assert help_.returncode == 0, help_.stderr
    assert "migrate" in help_.stdout and "dashboard" in help_.stdout
    migrated = run(str(installed / "bin" / "routerscope"), "migrate", home=tmp_path)
    assert migrated.returncode == 0, migrated.stderr
    check = (
        "import json; from routerscope.core.settings import Settings\n"
        "from routerscope.warehouse.client import open_warehouse\n"
        "from routerscope.warehouse.migrate import MIGRATIONS_DIR\n"
        "with open_warehouse(Settings.from_env(), purpose='test') as c:\n"
        "    n = c.query('SELECT count() FROM routerscope.schema_migrations').result_rows[0][0]\n"
        "print(json.dumps({'applied': n, 'files': len(list(MIGRATIONS_DIR.glob('*.sql')))}))"
    )
    counted = run(python, "-c", check, home=tmp_path)
    assert counted.returncode == 0, counted.stderr
    figures = json.loads(counted.stdout)
    assert (
        figures["applied"]
        == figures["files"]
        == len(list((REPO / "routerscope" / "warehouse" / "migrations").glob("*.sql")))
    )


def test_the_installed_dashboard_renders_every_page_and_the_policy_and_alert_rules_load(installed, tmp_path):
    assert run(str(installed / "bin" / "routerscope"), "migrate", home=tmp_path).returncode == 0
    script = (
        "import pathlib\nfrom routerscope import dashboards\n"
        "from streamlit import config\nfrom streamlit.testing.v1 import AppTest\n"
        "config.set_option('runner.magicEnabled', False)\n"  # as the dashboard runs them (cmd_dashboard.py)
        "app = pathlib.Path(dashboards.__file__).with_name('streamlit_app.py')\n"
        "pages = sorted(p.name for p in app.with_name('app_pages').glob('*.py'))\n"
        "print(pages)\n"
        "for page in pages:\n"
        "    at = AppTest.from_file(str(app.with_name('app_pages') / page), default_timeout=60).run()\n"
        # a page that drew nothing did not compile (tests/support/pages.py)
        "    assert len(at.main) and not at.exception, (page, at.exception)\n"
        "from routerscope.router.policy import DEFAULT_POLICY, parse\n"
        "print('policy', parse(DEFAULT_POLICY.read_text()).version)\n"
        "from routerscope.warehouse.analytics.alerting import load_rules\n"
        "print('rules', len(load_rules()[1]))\n"
    )
    result = run(str(installed / "bin" / "python"), "-c", script, home=tmp_path, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (
        "oncall.py" in result.stdout
        and "tuning.py" in result.stdout
        and "policy" in result.stdout
        and "rules" in result.stdout
    )
