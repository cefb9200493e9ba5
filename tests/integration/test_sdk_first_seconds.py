"""The SDK's first seconds and a kill right after `record` returns (docs/instrumentation.md, the loss bound of
each mode).

A hostile tester started an application with the broker down: for about 4 s nothing was spooled (the sender's
first attempt waited out the producer's bootstrap and metadata timeouts with the batch in its hands), 11,200
decisions were recorded and 1 was on disk, and a `kill -9` then lost them all. Now new events go behind the
spool until the broker has answered once, so the first one is on disk within the sender's ~50 ms wait.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from routerscope.core import names
from routerscope.core.kafka import producer_config
from routerscope.instrumentation.emitter import KafkaEmitter, Message, Spool
from tests.support.home import REPO
from tests.support.kafka import consume_all, start

# Records decisions through the SDK as an application does; request ids are canonical UUIDs (kept as they are
# by the scrubber) numbered from 0. After each `record` returns, the count is written to `mark`.
#   first: the first decision, then the time until a spool segment holds a line is written to `first`;
#   then records until `stop_after_s` from the start (then idles), or `kill_after` decisions (then kills itself
#   with SIGKILL right after the last `record` returned).
RECORD_SCRIPT = r"""
import os, signal, sys, time, uuid
from pathlib import Path
from routerscope.sdk import Recorder
mode, spool, mark, first, stop_after_s, kill_after = sys.argv[1:7]
stop_after_s, kill_after = float(stop_after_s), int(kill_after)
recorder = Recorder.from_env(write_ahead=mode == "write_ahead")
fd = os.open(mark, os.O_WRONLY | os.O_CREAT)
started = time.monotonic()

def record(i):
    with recorder.decision(task_type="short_reply", session_id=f"s{i % 50}", deadline_ms=2000,
                           request_id=str(uuid.UUID(int=i))) as d:
        d.device_attempt(level=0, outcome="ok", latency_ms=120, confidence=0.9, threshold=0.7)
        d.served(fallback_type="none", reason="default")

record(0)
os.pwrite(fd, b"%012d" % 1, 0)
recorded = time.monotonic()
while not any(p.stat().st_size for p in Path(spool).glob("*.jsonl")) and time.monotonic() - recorded < 10:
    time.sleep(0.002)
Path(first).write_text(str(time.monotonic() - recorded))
i = 1
while True:
    if kill_after and i == kill_after:
        os.kill(os.getpid(), signal.SIGKILL)  # right after the last `record` returned
    if stop_after_s and time.monotonic() - started > stop_after_s:
        time.sleep(60)  # waits for the kill
        continue
    record(i)
    i += 1
    os.pwrite(fd, b"%012d" % i, 0)
    time.sleep(0.0002)
"""


def _request_ids(lines: list[bytes]) -> set[str]:
    out = set()
    for line in lines:
        message = Message.from_line(line)
        if message.topic == names.TOPIC_DECISIONS:
            out.add(json.loads(message.value)["request_id"])
    return out


def _spooled_lines(spool_dir) -> list[bytes]:
    return [line for p in sorted(spool_dir.glob("*.jsonl")) for line in p.read_bytes().splitlines() if line]


def _run(home, tmp_path, bootstrap: str, mode: str, stop_after_s: float = 0, kill_after: int = 0):
    mark, first = tmp_path / "recorded", tmp_path / "first"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("ROUTERSCOPE_")},
        "PYTHONPATH": str(REPO),
        "ROUTERSCOPE_HOME": str(home),
        "ROUTERSCOPE_KAFKA_BOOTSTRAP": bootstrap,
    }
    args = [mode, str(home / "spool"), str(mark), str(first), str(stop_after_s), str(kill_after)]
    return subprocess.Popen([sys.executable, "-c", RECORD_SCRIPT, *args], env=env), mark, first


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["queue", "write_ahead"])
def test_with_the_broker_down_at_start_the_sdk_spools_from_the_first_event_and_a_kill_at_4s_loses_nothing(
    down_broker, home, tmp_path, mode
):
    """Issue 54, finding 7. The broker is down when the application starts: its first decision is on disk within
    a fraction of a second (~50 ms documented; 0.5 s allowed on a shared machine), and a `kill -9` at 4 s loses
    nothing recorded. In the queue mode the application stops recording at 3.5 s (what a kill can lose there is
    the sender's last ~50 ms, docs/instrumentation.md); with write-ahead it records until the kill."""
    bootstrap = down_broker["settings"].kafka_bootstrap()
    child, mark, first = _run(home, tmp_path, bootstrap, mode, stop_after_s=3.5 if mode == "queue" else 0)
    time.sleep(4)
    child.send_signal(signal.SIGKILL)
    child.wait()
    recorded = int(mark.read_bytes())
    first_on_disk_s = float(first.read_text())
    spooled = _request_ids(_spooled_lines(home / "spool"))
    lost = {str(uuid.UUID(int=i)) for i in range(recorded)} - spooled
    print(f"{mode}: first event on disk after {first_on_disk_s * 1000:.0f} ms; {recorded} recorded, lost {len(lost)}")
    assert recorded > 1_000
    assert first_on_disk_s < 0.5
    assert not lost, f"{len(lost)} of {recorded} recorded decisions lost"


@pytest.mark.slow
def test_a_write_ahead_recorder_killed_right_after_record_returns_loses_nothing(down_broker, home, tmp_path):
    """With the broker up and its replayer sending from the spool, the application kills itself (SIGKILL) right
    after its 3,000th `record` returns: a restarted emitter delivers the spool, and every one of the 3,000
    decisions is in Kafka."""
    start(down_broker)
    bootstrap = down_broker["settings"].kafka_bootstrap()
    child, mark, _ = _run(home, tmp_path, bootstrap, "write_ahead", kill_after=3_000)
    assert child.wait(timeout=120) == -signal.SIGKILL
    recorded = int(mark.read_bytes())
    assert recorded == 3_000
    restarted = KafkaEmitter(producer_config(down_broker["settings"]), home / "spool", retry_every_s=0.2)
    assert restarted.flush(60), restarted.counters()
    restarted.close()
    assert not Spool(home / "spool").__len__()
    got = consume_all(bootstrap, names.TOPIC_DECISIONS, recorded)
    delivered = {json.loads(m.value())["request_id"] for m in got}
    lost = {str(uuid.UUID(int=i)) for i in range(recorded)} - delivered
    assert not lost, f"{len(lost)} of {recorded} recorded decisions lost, e.g. {sorted(lost)[:3]}"
