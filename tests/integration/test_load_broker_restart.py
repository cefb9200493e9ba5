"""A broker that loses its data while a load runs (the in-memory broker restarted, a topic recreated) is said,
in one line, with a non-zero exit; what was read before is stored, and the next load's lost-data rule says
the same. Before, `load` exited 0 with 96,142 of 100,000 loaded and no word: the rest went with the broker."""

from __future__ import annotations

import threading

import pytest

from routerscope.core import broker, names
from routerscope.warehouse.ingest.loader import BrokerDataLost, LoadConfig, Loader
from tests.support.home import clean_env, run_cli
from tests.support.ingest import produce, scalar, valid_decisions

pytestmark = pytest.mark.integration


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_broker_restarted_mid_load_is_said_and_the_next_load_says_it_too(stack, home):
    n = 150_000
    produce(stack, names.TOPIC_DECISIONS, valid_decisions(n))
    consumed, halfway, restarted = [0], threading.Event(), threading.Event()

    def progress(count: int) -> None:
        consumed[0] += count
        if consumed[0] >= 20_000:
            halfway.set()
            restarted.wait(60)  # the drain holds here until the broker has restarted: mid-load on any machine

    outcome: dict = {}

    def run() -> None:
        try:
            # small batches: the load is still reading when the broker restarts, whatever the loader's speed
            outcome["result"] = Loader(stack, LoadConfig(idle_timeout_s=1.0, batch_size=200), progress=progress).run()
        except BaseException as exc:  # noqa: BLE001 - the test asserts on it
            outcome["error"] = exc

    loader = threading.Thread(target=run)
    loader.start()
    assert halfway.wait(120), "the load never got going"
    port = int(stack.kafka_bootstrap().rsplit(":", 1)[1])
    broker.stop(stack)
    broker.start(stack, port=port)  # memory storage: every message is gone, the topics are empty again
    restarted.set()
    loader.join(240)
    assert not loader.is_alive()
    error = outcome.get("error")
    assert isinstance(error, BrokerDataLost), outcome
    message = str(error)
    assert "the broker lost its data during the load" in message and "\n" not in message
    assert f"{names.TOPIC_DECISIONS}[" in message and "positions stored" in message
    stored = scalar(stack, "SELECT count() FROM routerscope.decisions")
    assert 20_000 <= stored < n  # what was read before is kept; the rest went with the broker

    # the next load: the stored positions are past the broker's end, one line and exit 1
    again = run_cli("load", env=clean_env(home))
    assert again.returncode == 1, again.stdout + again.stderr
    last = again.stderr.strip().splitlines()[-1]
    assert last.startswith("routerscope: error: the broker no longer holds") and "Traceback" not in again.stderr
    assert scalar(stack, "SELECT count() FROM routerscope.decisions") == stored
