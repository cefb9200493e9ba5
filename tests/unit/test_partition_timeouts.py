"""The loader's waits on partition answers grow with the partition count (docs/ingest.md): with 5,000
partitions per topic fixed waits (5 s for the metadata, 3 s for the probe, 10 s without an answer) declared
a broker gone that was only slow, two runs in a row."""

from __future__ import annotations

import pytest

from routerscope.core import names
from routerscope.core.errors import BrokerUnavailable
from routerscope.warehouse.ingest import loader as loader_module
from routerscope.warehouse.ingest.batch import ParseQueue
from routerscope.warehouse.ingest.consumer import (
    CLOSE_TIMEOUT_S,
    DEFAULT_BROKER_TIMEOUT_S,
    METADATA_TIMEOUT_S,
    PROBE_TIMEOUT_S,
    Drain,
    PartitionState,
)
from routerscope.warehouse.ingest.loader import LoadConfig, Loader, LoadResult, partition_timeout
from routerscope.warehouse.ingest.writer import BesideWriter, Writer
from tests.support.home import settings_for


@pytest.mark.parametrize("partitions", [0, 1, 3, 36, 1_000])
def test_up_to_a_thousand_partitions_every_wait_keeps_its_base_value(partitions):
    for base in (PROBE_TIMEOUT_S, METADATA_TIMEOUT_S, DEFAULT_BROKER_TIMEOUT_S, CLOSE_TIMEOUT_S):
        assert partition_timeout(base, partitions) == base


def test_past_a_thousand_partitions_each_one_adds_4_ms():
    assert partition_timeout(10.0, 1_001) == pytest.approx(10.004)
    assert partition_timeout(3.0, 5_000) == pytest.approx(3.0 + 4_000 * 0.004)  # the probe of one topic: 19 s
    assert partition_timeout(10.0, 15_000) == pytest.approx(66.0)  # 3 topics x 5,000: the broker timeout
    assert partition_timeout(5.0, 15_000) == pytest.approx(61.0)  # the metadata of all three at the start
    waits = [partition_timeout(10.0, n) for n in range(0, 20_001, 250)]
    assert waits == sorted(waits)  # never shrinks as partitions are added


def _states(topics: tuple[str, ...], partitions: int) -> dict:
    return {(t, p): PartitionState(t, p, None) for t in topics for p in range(partitions)}


def _drain(home, config: LoadConfig, states: dict) -> Drain:
    """The drain a run over `states` would start with (its consumer made, nothing assigned or fetched)."""
    settings = settings_for(home, ROUTERSCOPE_KAFKA_BOOTSTRAP="127.0.0.1:9")  # never reached: nothing is assigned
    writer = BesideWriter(settings, Writer(settings, config.consumer_name, "run"))
    return Drain(settings, config, states, LoadResult(), writer=writer, parsing=ParseQueue(False))


def test_a_run_over_5000_partitions_per_topic_waits_in_proportion(home):
    topics = ("a", "b", "c")
    drain = _drain(home, LoadConfig(topics=topics), _states(topics, 5_000))
    drain.close()
    assert drain.timeouts.broker_s == pytest.approx(66.0)
    assert drain.timeouts.probe_s == pytest.approx(19.0)  # the probe asks for one topic
    assert drain.timeouts.close_s == pytest.approx(61.0)
    small = _drain(home, LoadConfig(topics=topics), _states(topics, 3))
    small.close()
    assert (small.timeouts.broker_s, small.timeouts.probe_s, small.timeouts.close_s) == (10.0, 3.0, 5.0)


def test_a_broker_timeout_given_is_kept_as_given(home):
    drain = _drain(home, LoadConfig(topics=("a",), broker_timeout_s=3.0), _states(("a",), 5_000))
    drain.close()
    assert drain.timeouts.broker_s == 3.0
    assert drain.timeouts.probe_s == pytest.approx(19.0)  # the other waits still grow


def test_the_metadata_wait_at_the_start_grows_with_the_configured_partitions(home, monkeypatch):
    """Before the metadata arrives, the count is the configured one (ROUTERSCOPE_TOPIC_PARTITIONS)."""
    asked: list[float] = []

    def check_reachable(settings, bootstrap=None, timeout_s=5.0):
        asked.append(timeout_s)
        raise BrokerUnavailable("not in a unit test")

    monkeypatch.setattr(loader_module, "check_reachable", check_reachable)
    settings = settings_for(home, ROUTERSCOPE_TOPIC_PARTITIONS="5000", ROUTERSCOPE_KAFKA_BOOTSTRAP="127.0.0.1:9")
    with pytest.raises(BrokerUnavailable):
        Loader(settings).run()
    assert asked == [pytest.approx(1 + len(names.TOPICS) * 5_000 / 250)]  # every topic x 5,000 partitions
