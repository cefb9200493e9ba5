"""Reading Kafka for the loader (routerscope/warehouse/ingest/loader.py): each partition's state, the positions
stored in the warehouse (rows found past them skipped as landed, rows missing below them read again), the
lost-data probe (the message before a stored position must still be the one loaded), the drain loop that
hands batches to the writer and ends at the partitions' ends, and the waits on the broker, which grow with
the partition count (`partition_timeout`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, TopicPartition

from routerscope.core import interrupts, names
from routerscope.core.errors import BrokerUnavailable, RouterscopeError
from routerscope.core.kafka import Option, fetched_end, librdkafka_config
from routerscope.core.settings import Settings
from routerscope.warehouse.ingest.batch import Batch, ParseQueue, fingerprint
from routerscope.warehouse.ingest.config import LoadConfig
from routerscope.warehouse.ingest.rows import FACTS
from routerscope.warehouse.ingest.state import LoadResult, PartitionState
from routerscope.warehouse.ingest.writer import BesideWriter, Tally
from routerscope.warehouse.queries import ingest_offsets

log = logging.getLogger("routerscope.ingest")

# A broker that answers nothing for this long during a load ends the run (after storing what arrived);
# with many partitions it grows (`partition_timeout`).
DEFAULT_BROKER_TIMEOUT_S = 10.0
# The liveness probe (a metadata request for one topic) and the metadata request at the start of a run.
PROBE_TIMEOUT_S = 3.0
METADATA_TIMEOUT_S = 5.0
# Waits on answers about partitions (metadata, first fetch responses, the probe, closing the consumer and
# so its assignment) keep their base value up to SCALE_FROM_PARTITIONS partitions and grow by
# PER_PARTITION_S for each one past that: a broker answering for 15,000 partitions on a busy 2-core
# machine took up to a minute, and fixed waits declared it gone when it was only slow (docs/ingest.md).
SCALE_FROM_PARTITIONS = 1_000
PER_PARTITION_S = 0.004
# With the warehouse held for writing, the drain waits at most this long for messages before letting go of it.
HELD_WAIT_S = 0.5
# Closing the consumer waits at most this long (librdkafka can otherwise wait minutes for a dead broker);
# with many partitions it grows (`partition_timeout`).
CLOSE_TIMEOUT_S = 5.0
# Chunks handed to the parse worker and not yet added to a batch (each at most one consume call).
MAX_PENDING_CHUNKS = 2
# The loader's consumer (with its group id and error callback).
CONSUMER_OPTIONS: dict[str, Option] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "auto.offset.reset": "error",  # a position past the log end is an error, not a reset
    "enable.partition.eof": True,
    # Prefetch bounds: enough to keep the parser busy, small enough that memory stays bounded whatever
    # the backlog. The queue is librdkafka's default, 64 MB (about three batches of router events): at
    # 16 MB the drain waited on the broker after every batch, a fetch round trip on cores the broker
    # shares with the loader and the warehouse (a 500k load took 10.6-11.0 s against 7.3-8.3 s; docs/loader.md).
    "fetch.max.bytes": 32 * 1024 * 1024,
    "max.partition.fetch.bytes": 8 * 1024 * 1024,
    "queued.max.messages.kbytes": 64 * 1024,
}


class BrokerDataLost(RouterscopeError):
    """The broker no longer holds offsets the warehouse says were loaded."""


# No partition: what `Drain._take` holds before the first message of a consume call names one (never read).
_NO_PARTITION = PartitionState("", -1, None)


def partition_timeout(base_s: float, partitions: int) -> float:
    """A wait on the broker's answers about `partitions` partitions: `base_s` up to SCALE_FROM_PARTITIONS
    of them, plus PER_PARTITION_S for each one past that (5,000 partitions in each of 3 topics: a 10 s wait
    becomes 66 s). Never less than `base_s`."""
    return base_s + max(0, int(partitions) - SCALE_FROM_PARTITIONS) * PER_PARTITION_S


@dataclass
class Timeouts:
    """A run's waits on the broker: without an answer during the load (`broker_s`; None given: grown with the
    partition count once it is known), the liveness probe (`probe_s`) and closing the consumer (`close_s`)."""

    given_s: float | None = None
    broker_s: float = DEFAULT_BROKER_TIMEOUT_S
    probe_s: float = PROBE_TIMEOUT_S
    close_s: float = CLOSE_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.given_s is not None:
            self.broker_s = self.given_s

    def scale(self, states: dict[tuple[str, int], PartitionState], topics: tuple[str, ...]) -> None:
        """The waits on partition answers, for the partitions this run reads (`partition_timeout`)."""
        total = len(states)
        largest = max((sum(1 for t, _ in states if t == topic) for topic in topics), default=0)
        if self.given_s is None:
            self.broker_s = partition_timeout(DEFAULT_BROKER_TIMEOUT_S, total)
        self.probe_s = partition_timeout(PROBE_TIMEOUT_S, largest)  # the probe asks for one topic
        self.close_s = partition_timeout(CLOSE_TIMEOUT_S, total)


# -- the stored positions --------------------------------------------------------------------------------
def read_positions(
    client, settings: Settings, config: LoadConfig, metadata, result: LoadResult
) -> tuple[dict[tuple[str, int], tuple[int, str]], dict[tuple[str, int], PartitionState]]:
    """The stored positions (next offset, fingerprint) per (topic, partition) and the state of every partition
    the run reads, with the offsets past its position that already landed (to skip)."""
    stored = ingest_offsets.stored_positions(client, config.consumer_name)
    _rewind_missing(client, config, stored, result)
    states: dict[tuple[str, int], PartitionState] = {}
    for topic in config.topics:
        if topic not in metadata.topics:
            raise BrokerUnavailable(
                f"topic {topic} does not exist at {settings.kafka_bootstrap()}; "
                "create the topics with `routerscope broker start` (local) or your cluster's tooling"
            )
        for partition in sorted(metadata.topics[topic].partitions):
            if not config.owns(partition):
                continue
            offset, mark = stored.get((topic, partition), (None, ""))
            states[(topic, partition)] = PartitionState(topic, partition, offset, mark)
        starts = {p: st.stored or 0 for (t, p), st in states.items() if t == topic}
        landed = ingest_offsets.landed_offsets(client, (FACTS[topic][0], names.TABLE_QUARANTINE), topic, starts)
        for partition, offsets in landed.items():
            if (topic, partition) in states:
                states[(topic, partition)].skip = offsets
    return stored, states


def _rewind_missing(
    client, config: LoadConfig, stored: dict[tuple[str, int], tuple[int, str]], result: LoadResult
) -> None:
    """Reconcile the stored positions with the facts actually stored: a partition whose rows below its
    position are gone (a damaged part the engine set aside) is read again from its first missing
    offset; what is still stored is skipped as landed, so only the missing rows are loaded again."""
    for topic in config.topics:
        nexts = {p: o for (t, p), (o, _) in stored.items() if t == topic and config.owns(p)}
        for partition, ranges in ingest_offsets.missing(client, topic, FACTS[topic][0], nexts).items():
            count = sum(last - first + 1 for first, last in ranges)
            result.refetched[f"{topic}[{partition}]"] = count
            log.warning(
                "routerscope: warning: %s[%d] was loaded to offset %d but the warehouse no longer holds %d "
                "of its messages (from offset %d): loading them again from the broker",
                topic,
                partition,
                nexts[partition],
                count,
                ranges[0][0],
            )
            stored[(topic, partition)] = (ranges[0][0], "")


def check_partitions_kept(settings: Settings, config: LoadConfig, stored: dict, states: dict) -> None:
    """Every partition with a stored position that this run owns must still be on the broker."""
    for (topic, partition), (offset, _) in stored.items():
        if (topic, partition) not in states and topic in config.topics and config.owns(partition):
            raise BrokerDataLost(
                f"{topic}[{partition}] was loaded up to offset {offset} but the broker has no such "
                "partition any more; " + lost_hint(settings)
            )


# -- the drain -------------------------------------------------------------------------------------------
class Drain:
    """One run's reading of its partitions: consume, check the probe message, hand each full batch to the
    writer, and end once every partition is read to its end (or nothing arrives and the broker still
    answers); a broker that stops answering ends it with an error once what arrived is stored.

    What it is handed is all it touches: the run's settings (the broker) and `config`, the partitions' `states`
    and the run's `result` (counts, updated as batches are written), the `writer` each full batch goes to (and
    that holds the warehouse between batches), the `parsing` queue chunks are parsed through, and `progress`
    (messages consumed). Its waits on the broker grow with the partitions it reads (`Timeouts.scale`)."""

    def __init__(
        self,
        settings: Settings,
        config: LoadConfig,
        states: dict[tuple[str, int], PartitionState],
        result: LoadResult,
        *,
        writer: BesideWriter,
        parsing: ParseQueue,
        progress: Callable[[int], object] = lambda n: None,
    ):
        self.settings, self.config = settings, config
        self.states = states
        self.result = result
        self.writer, self.parsing, self.progress = writer, parsing, progress
        self.timeouts = Timeouts(config.broker_timeout_s)
        self.timeouts.scale(states, config.topics)
        self.bootstrap = settings.kafka_bootstrap()  # the broker's address, as the run found it
        self.tally = Tally(states, result)
        self.broker_error: str | None = None  # the last broker-wide error since a message arrived
        options = librdkafka_config(settings, **{"group.id": config.consumer_name, **CONSUMER_OPTIONS})
        self.consumer = Consumer({**options, "error_cb": self._on_broker_error})  # a callable: no librdkafka Option
        self.batch = Batch()
        self.pending = set(states)  # partitions not yet known to be at their end
        self.fetched = 0  # partitions with a fetch response so far
        self.last_message = self.last_flush = self.last_fetched = time.monotonic()

    def _on_broker_error(self, error) -> None:
        """librdkafka's client-wide errors (all brokers down, transport): remembered until a message arrives."""
        if (
            error.code()
            in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT, KafkaError._RESOLVE, KafkaError._TIMED_OUT)
            or error.fatal()
        ):
            self.broker_error = error.str()

    def drain(self) -> None:
        """Read every partition from its start (one before its stored position) to its end."""
        self.consumer.assign([TopicPartition(t, p, st.start) for (t, p), st in self.states.items()])
        self.batch = Batch()
        self.last_message = self.last_flush = self.last_fetched = time.monotonic()
        batch_size, writer = min(self.config.batch_size, 50_000), self.writer
        while self.pending:
            interrupts.raise_pending()  # a Ctrl-C or SIGTERM Python swallowed (routerscope/core/interrupts.py)
            # Holding the warehouse (a batch written or being written), wait briefly: the consumer's queue
            # runs dry between fetches, and letting go of the warehouse and opening it again costs more.
            messages = self.consumer.consume(num_messages=batch_size, timeout=HELD_WAIT_S if writer.held else 0.2)
            now = time.monotonic()
            if messages:
                self._take(messages, now)
            elif self._idle(now):
                break
        self._finish()

    def _flush(self, now: float | None = None) -> None:
        """Hand the batch to the writer and start the next (`now`: when; None: once handed over)."""
        self.writer.flush(self.batch, self.consumer, self.tally)
        self.batch = Batch()
        self.last_flush = time.monotonic() if now is None else now

    def _take(self, messages: list, now: float) -> None:
        """What one consume call returned: the messages as chunks to parse (one per topic), the probe message
        checked, partition ends and errors noted; the batch handed over once full."""
        consumed = 0
        # topic -> ((partition, offset, value, landed) items to parse, their messages)
        chunk: dict[str, tuple[list, list]] = {}
        states, batch, result = self.states, self.batch, self.result
        arrived = False
        key: tuple[str, int] | None = None
        state = _NO_PARTITION  # the state of `key`, replaced at the first message
        for message in messages:
            error = message.error()
            if error is not None:
                self._on_error_event(error, message, now)
                continue
            arrived = True
            topic, partition, offset = message.topic(), message.partition(), message.offset()
            if key != (topic, partition):  # a consume call returns each partition's messages in runs
                key = (topic, partition)
                state = states[key]
            if not state.verified and state.stored and self._probed(state, message, offset):
                continue  # the probe message: loaded in an earlier run
            state.verified = True
            state.next_offset = offset + 1
            consumed += 1
            landed = bool(state.skip) and offset in state.skip
            if landed:
                result.skipped_already_loaded += 1
            pair = chunk.get(topic)
            if pair is None:
                pair = chunk[topic] = ([], [])
            pair[0].append((partition, offset, message.value(), landed))
            pair[1].append(message)
        if arrived:
            self.last_message = now
            self.broker_error = None
        self.pending = _undrained(self.consumer, states, self.pending)
        parsing = self.parsing
        for topic, (items, kept) in chunk.items():
            parsing.enqueue(topic, items, kept)
        parsing.collect(batch, keep=MAX_PENDING_CHUNKS)
        if consumed:
            self.progress(consumed)
        config = self.config
        if batch.size >= config.batch_size or (batch.size and now - self.last_flush >= config.flush_interval_s):
            self._flush()
        if consumed:
            # the idle timeout measures waiting for messages: decoding and writing this batch (seconds for
            # a large insert on a busy machine) is work, and once counted it ended runs half-drained
            self.last_message = max(self.last_message, time.monotonic())

    def _on_error_event(self, error, message, now: float) -> None:
        """An event in place of a message: a partition's end, an offset the broker no longer has (lost
        data), a fatal error or an unknown topic (the broker gone), or a transient error (the client retries)."""
        code = error.code()
        topic, partition = message.topic(), message.partition()
        if code == KafkaError._PARTITION_EOF:
            self.last_message = now
            self.broker_error = None
            state = self.states.get((topic, partition))
            if state is not None:
                state.at_end = True
                self.pending.discard((topic, partition))
            return
        if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            state = self.states[(topic, partition)]
            raise BrokerDataLost(
                f"{state.key}: the broker reports offset {state.start} out of range, but the "
                f"warehouse has loaded it up to {state.stored}; " + lost_hint(self.settings)
            )
        if error.fatal() or code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
            raise BrokerUnavailable(f"Kafka error while loading: {error.str()}")

    def _probed(self, state: PartitionState, message, offset: int) -> bool:
        """The first message of a partition with a stored position: is it the probe message (the one
        before that position, loaded in an earlier run)? Raises BrokerDataLost if it is not the one loaded."""
        state.verified = True
        if state.stored is None or offset != state.stored - 1:
            return False
        if state.fingerprint and fingerprint(message.key(), message.value()) != state.fingerprint:
            raise BrokerDataLost(
                f"{state.key}: the message at offset {offset} is not the one loaded from there "
                "(its key and value differ): the broker lost the loaded messages and received "
                "others since; " + lost_hint(self.settings)
            )
        return True

    def _idle(self, now: float) -> bool:
        """Nothing arrived: let go of the warehouse, note the partitions' ends, judge the idle time, let
        parsed chunks through and hand over a batch held past the flush interval. True: the drain is over."""
        if self.writer.held is not None:  # nothing arrived: let go of the warehouse before waiting longer
            self.writer.release()
            self.last_message = max(self.last_message, time.monotonic())  # idle counts waiting, not work
            return False
        self.pending = _undrained(self.consumer, self.states, self.pending)  # those with nothing left end here
        if not self.pending:
            return True
        now_fetched = sum(st.high is not None for st in self.states.values())
        if now_fetched != self.fetched:
            self.fetched, self.last_fetched = now_fetched, now
        if now - self.last_message >= self.config.idle_timeout_s and self._ended_by_idle(now):
            return True
        self.parsing.collect(self.batch, keep=0)  # nothing arrives: let parsed chunks through
        if self.batch.size and now - self.last_flush >= self.config.flush_interval_s:
            self._flush(now)
            self.last_message = max(self.last_message, time.monotonic())
        return False

    def _ended_by_idle(self, now: float) -> bool:
        """Nothing arrived for the idle timeout: drained, unless the broker went away (it does not answer
        a metadata request now): then store what arrived and stop. Asked every time, not only after
        librdkafka reported an error: its error callback can come later than the idle timeout. Never while
        a partition is known to hold more (its fetched end is past its position: with thousands of
        partitions deliveries come in bursts further apart than the idle timeout), nor before every
        partition was fetched once, unless nothing came for the broker timeout."""
        idle = now - self.last_message
        broker_s = self.timeouts.broker_s
        known_left = any(self.states[key].end is not None for key in self.pending)
        unfetched = any(self.states[key].high is None for key in self.pending)
        if (known_left and idle < broker_s) or (unfetched and now - self.last_fetched < broker_s):
            return False  # messages known to be there, or fetch responses still coming: wait
        if _answers(self.consumer, self.config.topics[0], self.timeouts.probe_s if idle < broker_s else broker_s):
            return True  # (a broker is declared gone only after a probe as long as the broker timeout)
        if idle >= broker_s:
            self._broker_gone()
        return False

    def _broker_gone(self) -> None:
        """Store what arrived, then stop: the broker stopped answering."""
        self.parsing.collect(self.batch, keep=0)
        self.writer.flush(self.batch, self.consumer, self.tally)
        self.writer.settle()
        raise BrokerUnavailable(
            f"the broker at {self.bootstrap} stopped answering during the load "
            f"({self.broker_error or 'no answer to a metadata request'}); "
            "what arrived before was loaded and its position stored, "
            "so the next `routerscope load` resumes there"
        )

    def _finish(self) -> None:
        """The last batch written and settled; then the lost-data check over the partitions fetched."""
        self.parsing.collect(self.batch, keep=0)
        if self.batch.ranges:
            self.writer.flush(self.batch, self.consumer, self.tally)
        self.writer.settle()
        self._check_not_restarted()
        lost = [st for st in self.states.values() if st.lost]  # never a partition not fetched yet
        if lost:
            where = ", ".join(f"{st.key} (loaded up to offset {st.stored})" for st in lost)
            raise BrokerDataLost(
                f"the broker no longer holds messages the warehouse has loaded: {where}; " + lost_hint(self.settings)
            )

    def _check_not_restarted(self) -> None:
        """A partition's end only moves forward on a broker that keeps its data: one that went back during
        the run (the latest fetch response's end below an end or a position this run saw: an in-memory broker
        restarted, the topic recreated) lost messages. Said once what arrived is stored; the next load's
        lost-data check (its stored position past the broker's end) says the same."""
        back = []
        for key, state in self.states.items():
            seen = max(state.next_offset or 0, state.end or 0)
            now = fetched_end(self.consumer, *key) if seen else None
            if now is not None and now < seen:
                back.append(f"{state.key} from offset {seen} to {now}")
        if back:
            loaded = sum(self.result.loaded.values()) + sum(self.result.quarantined.values())
            raise BrokerDataLost(
                f"the broker lost its data during the load ({', '.join(back[:3])}{' …' if len(back) > 3 else ''}): "
                f"the {loaded:,} messages read before were loaded and their positions stored, the rest are gone "
                "with it; " + lost_hint(self.settings)
            )

    def close(self) -> None:
        """Close the consumer, waiting at most the close timeout."""
        _close_within(self.consumer, self.timeouts.close_s)


def _undrained(consumer, states: dict[tuple[str, int], PartitionState], pending: set) -> set:
    """The `pending` partitions not yet read to their end. A partition's end is noted once a fetch
    response for it has arrived (routerscope.core.kafka.fetched_end) and kept: a producer writing during
    the run cannot keep it going. A value below the stored position is not an end (a broker that
    lost the messages: the check after draining says so); a partition whose fetch responses carry
    none ends by partition-EOF or the idle timeout."""
    for key in pending:
        state = states[key]
        if state.end is None:
            high = fetched_end(consumer, *key)
            if high is not None:
                state.high = high
            if high is not None and high >= (state.stored or 0):
                state.end = high
    return {key for key in pending if not states[key].drained}


def _answers(consumer, topic: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Does the broker answer a metadata request (for one topic: thousands of partitions make the
    whole cluster's answer slow) within `timeout_s`? (A loaded machine can take seconds to answer for
    thousands of partitions: a short probe that fails is not yet an outage.)"""
    try:
        consumer.list_topics(topic=topic, timeout=timeout_s)
        return True
    except Exception:
        return False


def _close_within(consumer, timeout_s: float) -> None:
    """Close the consumer, waiting at most `timeout_s`: with the broker gone librdkafka can block for
    minutes; the process exits anyway (a daemon thread does not keep it alive)."""
    closer = threading.Thread(target=_close_quietly, args=(consumer,), name="routerscope-consumer-close", daemon=True)
    closer.start()
    closer.join(timeout_s)


def _close_quietly(consumer) -> None:
    try:
        consumer.close()
    except Exception:
        pass


def lost_hint(settings: Settings) -> str:
    if settings.kafka_bootstrap_env:
        return (
            "the topic was recreated or its data deleted. Nothing more was loaded. Check the cluster; to "
            "start over, load into a fresh warehouse"
        )
    return (
        "the local broker keeps its data in memory and was probably restarted. Nothing more was loaded. "
        f"To start over, remove the warehouse ({settings.warehouse.redacted()}) and load again"
    )
