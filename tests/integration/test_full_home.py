"""A full disk under ROUTERSCOPE_HOME is one line naming the disk, for every way in (issue 40: `simulate`
printed a `sqlite3.OperationalError` traceback, `broker start` failed without naming the full disk, and
`Recorder.from_env()` raised a raw `OSError` while creating the PII key). A real 1 MB tmpfs, filled."""

from __future__ import annotations

import os
import subprocess

import pytest

from routerscope.core.procs import free_port
from routerscope.instrumentation import pii
from routerscope.instrumentation.sdk import Recorder
from tests.support.home import clean_env, run_cli

pytestmark = pytest.mark.integration


@pytest.fixture
def full_home(tmp_path):
    """A home on a 1 MB tmpfs with no byte free; needs root (CI runs as root)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    disk = tmp_path / "disk"
    disk.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(disk)], check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot mount a tmpfs here ({exc})")
    home = disk / "home"
    home.mkdir()
    with open(disk / "filler", "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    yield home
    subprocess.run(["umount", "-l", str(disk)], check=False)


def _one_line(result: subprocess.CompletedProcess, home) -> str:
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("routerscope: error: ") and f"the disk under {home} has 0.0 MB free" in line
    return line


def test_simulate_on_a_full_home_is_one_line_naming_the_disk(full_home, broker_settings):
    env = clean_env(full_home, ROUTERSCOPE_KAFKA_BOOTSTRAP=broker_settings.kafka_bootstrap())
    line = _one_line(run_cli("simulate", "--requests", "5", env=env), full_home)
    assert "free space there and run it again" in line


def test_broker_start_on_a_full_home_is_one_line_naming_the_disk(full_home):
    line = _one_line(run_cli("broker", "start", "--port", str(free_port()), env=clean_env(full_home)), full_home)
    assert "free space there and start it again" in line


def test_the_sdk_on_a_full_home_says_it_cannot_create_the_pii_key_in_one_line(full_home, broker_settings):
    before = pii._key
    pii._key = None  # an application starting: it reads (here: would create) the key
    try:
        with pytest.raises(pii.PiiKeyUnwritable) as raised:
            Recorder.from_env(
                {"ROUTERSCOPE_HOME": str(full_home), "ROUTERSCOPE_KAFKA_BOOTSTRAP": broker_settings.kafka_bootstrap()}
            )
    finally:
        pii._key = before
    message = str(raised.value)
    assert "\n" not in message and f"cannot create the PII key {full_home / 'pii.key'}" in message
    assert "No space left on device" in message and "free space" in message
    assert not list(full_home.glob(".pii.key.*"))  # no half-written key left behind
