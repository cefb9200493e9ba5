"""The suite cannot hang: every test runs under pytest-timeout (pyproject.toml), so a hang fails that
test with a stack and the run goes on to the next."""

from __future__ import annotations

import subprocess
import sys


def test_a_hanging_test_is_stopped_by_the_timeout_with_a_stack_and_the_run_goes_on(tmp_path):
    (tmp_path / "test_hang.py").write_text(
        "import time\n\ndef test_hangs():\n    time.sleep(600)\n\ndef test_after_the_hang():\n    assert True\n"
    )
    started = __import__("time").monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "timeout=2", "-o", "addopts=", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert __import__("time").monotonic() - started < 60
    assert done.returncode == 1, done.stdout
    assert "Timeout" in done.stdout and "time.sleep(600)" in done.stdout  # the stack of the hung test
    assert "1 failed, 1 passed" in done.stdout
