"""A Ctrl-C while the emitter waits for room leaves its books balanced, against the real broker (Tansu).

The demo's simulator emits with `block_when_full=True`: when the sender falls behind (a slow broker, a
starved machine) `emit()` waits for room in the queue. A Ctrl-C there used to leave the message counted
as emitted though it never entered the queue: `in_flight` stayed at 1, so the demo's `flush(120)` after
the Ctrl-C waited out its whole two minutes (and `close()` ten seconds more) before the demo stopped,
then warned that events were still in flight. Measured before the fix: 60 Ctrl-Cs at random moments of
the simulated fleet with a 50-message queue left `in_flight` stuck from the fourth on; none after it."""

from __future__ import annotations

import json
import os
import signal
import threading

import pytest

from routerscope.core import names
from routerscope.core.kafka import producer_config
from routerscope.instrumentation.emitter import KafkaEmitter, Message

pytestmark = pytest.mark.integration


def message(i: int) -> Message:
    return Message(names.TOPIC_DECISIONS, b"interrupt", json.dumps({"n": i}).encode())


@pytest.fixture
def ctrl_c_raises():
    """SIGINT raises KeyboardInterrupt in this process, even when the test run was started with it ignored."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_a_ctrl_c_while_emit_waits_for_room_counts_nothing_and_flush_returns(broker_settings, tmp_path, ctrl_c_raises):
    emitter = KafkaEmitter(producer_config(broker_settings), tmp_path / "spool", queue_size=1, block_when_full=True)
    holding, release = threading.Event(), threading.Event()

    def hold_the_sender() -> None:  # the sender runs this between batches: a sender that has fallen behind
        holding.set()
        release.wait(30)

    emitter.call_on_sender(hold_the_sender)
    assert holding.wait(10)
    emitter.emit(message(0))  # the queue (room for 1) is full now
    ctrl_c = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    ctrl_c.start()
    with pytest.raises(KeyboardInterrupt):
        emitter.emit(message(1))  # waits for room until the Ctrl-C
    ctrl_c.join()
    assert emitter.counters()["emitted"] == 1  # the interrupted message was never queued, nor counted
    release.set()
    assert emitter.flush(30)  # returns once the one queued message is delivered (it used to wait out the 30 s)
    emitter.close()
    assert emitter.counters() == {"emitted": 1, "delivered": 1, "spooled": 0, "dropped": 0, "in_flight": 0}
