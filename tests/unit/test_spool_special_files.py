"""Spool entries that are not regular files never hang or flood the application that starts on them: a FIFO
named like a segment hung `Recorder.from_env()` on its first read, and a segment symlinked to `/dev/zero`
was read without end (8.5 GB). Both are set aside at start-up as `<name>.not-a-file`, never read, and the
real segments' events are still counted."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from routerscope.core.procs import free_port
from routerscope.instrumentation.emitter import Message, Spool
from tests.support.home import REPO

SCRIPT = """
import json, sys
from routerscope.instrumentation.sdk import Recorder
recorder = Recorder.from_env({"ROUTERSCOPE_HOME": sys.argv[1], "ROUTERSCOPE_KAFKA_BOOTSTRAP": sys.argv[2]})
counts = recorder.emitter.counters()
recorder.emitter._stop.set()
print(json.dumps({"spooled": counts["spooled"]}))
"""


def test_a_fifo_and_a_link_to_dev_zero_in_the_spool_are_set_aside_and_never_read(tmp_path):
    home = tmp_path / "home"
    spool = home / "spool"
    Spool(spool).append([Message("router.decisions.v1", b"k", json.dumps({"n": i}).encode()) for i in range(5)])
    os.mkfifo(spool / "0-fifo.jsonl")  # sorts before the real segment: the first one read
    (spool / "zz-zero.jsonl").symlink_to("/dev/zero")
    (home / "pii.key").write_text("ab" * 32 + "\n")
    os.chmod(home / "pii.key", 0o600)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(home), f"127.0.0.1:{free_port()}"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"spooled": 5}
    assert (spool / "0-fifo.jsonl.not-a-file").exists() and (spool / "zz-zero.jsonl.not-a-file").is_symlink()
    assert not (spool / "0-fifo.jsonl").exists() and not (spool / "zz-zero.jsonl").exists()
    assert "not a regular file" in done.stderr
