"""The loader: Kafka topics → warehouse tables, effectively once, malformed messages quarantined.

This is the pure core of the Dagster `ingest` job (`routerscope/pipelines/ingest.py` is the glue).

How a crash at any moment neither loses nor doubles rows:

* **Positions live in the warehouse.** The next offset per (topic, partition) is written to
  `ingest_offsets` after the rows it covers; a run resumes from there. Partitions are assigned
  explicitly (no consumer-group rebalancing); offsets are also committed to the consumer group,
  best effort, only so that standard lag tools see the loader.
* **Rows that landed past the stored position are found, not re-inserted.** If a run dies after
  inserting rows but before writing their position, the next run looks up which offsets past the
  stored position are already in the facts table or the quarantine, and skips exactly those.
* **Retried inserts are deduplicated.** Each insert carries a token naming the run and the offset
  ranges it covers (`run;topic:partition:first-last`, …); the tables keep a non-replicated
  deduplication window, so the same insert arriving twice within a run adds nothing. The token names
  the run because the warehouse records a token before it moves the insert's part into place: a run
  killed in between leaves the token remembered and the rows gone, and the next run, starting from the
  same position with the same batch size, would build the same ranges and see its insert dropped as a
  duplicate. Across runs, the landed-offsets lookup above is what finds rows. ReplacingMergeTree keyed
  on the event id (the quarantine: on the offset) is the last line, and queries that need exact counts
  deduplicate by event id anyway.
* **Lost broker data is detected.** A partition with a stored position is read from one message
  *before* it: that message must still be there, and must be the message that was loaded (the
  position keeps a fingerprint of its key and value). If it is not (an in-memory broker restarted,
  perhaps already refilled with other messages; a topic recreated), or the broker reports the
  position out of range, the run stops with an error instead of silently skipping or re-reading
  someone else's offsets.

**Two parsers, the same guarantees** (`parser`, `routerscope load --parser`). `python` decodes and
validates each message in Python (routerscope/contract/validation.py; beside a warehouse server, large chunks
in a worker process, routerscope/warehouse/ingest/parsing.py, results taken back in consumed order) and inserts the
valid events'
canonical JSON lines through an input table whose views fill the facts table and the ledger in one
insert (routerscope/warehouse/queries/json_rows.py). `sql` inserts each topic's raw messages of the batch into
the warehouse in one insert whose views parse and validate them, once each, and fill the facts table
and the ledger (routerscope/warehouse/queries/landing.py); that insert carries the same run-scoped token, the
positions are still written last, the landed-offsets lookup and the fingerprint probe are unchanged,
and a message the SQL cannot judge exactly, or that it quarantines, goes through the Python writer
(its tokens tagged `py;` so they never collide with the SQL insert's over the same offsets).

**No message can stop ingest.** Malformed messages (not JSON, too large or too deep, wrong schema,
values past their column's range, broken invariants) go to `quarantine` with the raw bytes and
every broken rule; the rest of the batch loads. Inserts cannot fail on partition count (a batch
spread over many months is inserted in groups of months), and as the last line an insert the
warehouse rejects is split in halves until the rows it refuses are found: those are quarantined
with the rule `insert.rejected` and the server's message, and the rest loads (their ledger rows,
which the insert's ledger view may have written, are folded by a later `rejected` row: nothing on
the ingest path deletes or mutates).

**A fault of the warehouse is never a verdict on the rows.** An insert that fails because of the
warehouse (its disk full, out of memory, too many parts, the server gone: routerscope.warehouse.client.outage)
is never split and its rows never quarantined: the run stops with one line naming the disk and its
free space, positions stay where they were, and the next run after space is freed loads exactly the
rest. Before each batch the free space of an embedded warehouse's disk is checked against its floor
(ROUTERSCOPE_WAREHOUSE_MIN_FREE), so a load usually stops before a write fails at all.

**One load at a time per warehouse.** A run holds the warehouse's load lock (routerscope.warehouse.client.load_lock)
from before it reads its positions until it ends: a second load waits, or with `wait=False` stops
with LoadInProgress. Loaders owning disjoint partition sets lock only their partitions.

**Writes beside the drain.** A batch is written in a thread of its own while the run consumes and
parses the next one (the embedded warehouse runs an insert without holding the GIL; a server runs it
on its own cores). One batch is written at a time and in order: before the next is handed over, the
previous write is settled (its positions applied to the run, or its error raised in the run's thread),
so the order rows → position holds across batches as within one.

**Bounded waits.** The warehouse is opened for the positions, then held while batches keep coming and
let go once nothing has arrived for HELD_WAIT_S (after the write in flight is settled), so its lock is
never held for long while waiting on the broker; every blocking consumer call has a timeout (closing
the consumer included), and a broker that stops answering mid-load ends the run with an error once what
was fetched has been stored.

Draining: a run ends when every partition has been read up to its end as of an early fetch from it
(the high watermark in the first fetch response the run sees for it), or reached its end (librdkafka's partition-EOF
event), or when nothing arrived for `idle_timeout_s` (a broker that answers neither) and no partition
is known to hold more: with thousands of partitions the first fetch responses, and the deliveries
after them, come further apart than the idle timeout, so a run waits while a partition's fetched end
is past its position or a partition has had no fetch response yet, as long as something arrives
within `broker_timeout_s` (which, like every wait on answers about partitions, grows with the partition
count: `partition_timeout`). The lost-data check after draining judges only partitions the broker has answered for: one
never fetched is not drained, keeps its position, and is no alarm. The end is
taken from a fetch response, not asked with a ListOffsets request: the embedded broker answers that
request with the base offset of the partition's last record batch plus one, short of the messages
after it in that batch, and a run ending there would leave them behind run after run. Messages that
arrive during a run are loaded while it lasts, and the next run takes the rest.
"""

from __future__ import annotations

import ctypes
import gc
import hashlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, TopicPartition

from routerscope.core import names
from routerscope.core.errors import BrokerUnavailable, RouterscopeError, WarehouseError
from routerscope.core.kafka import check_reachable, fetched_end, librdkafka_config
from routerscope.core.settings import Settings
from routerscope.warehouse.client import check_free_space, load_lock, outage, outage_error
from routerscope.warehouse.ingest.parsing import MIN_WORKER_CHUNK, WORKER_TIMEOUT_S, ParseWorker, parse_chunk
from routerscope.warehouse.ingest.rows import FACTS, kafka_time
from routerscope.warehouse.queries import decision_copies, ingest_offsets, json_rows, loaded_messages
from routerscope.warehouse.schema import LEDGER_COLUMNS, OFFSET_COLUMNS, QUARANTINE_COLUMNS

log = logging.getLogger("routerscope.ingest")

# Who parses and validates the messages: `python` (msgspec, in this process) or `sql` (the warehouse,
# from raw bytes landed in one insert; routerscope/warehouse/queries/landing.py). Same rules, same tables.
PARSERS = ("python", "sql")
DEFAULT_PARSER = "python"
DEFAULT_BATCH_SIZE = 20_000
DEFAULT_IDLE_TIMEOUT_S = 1.0
DEFAULT_FLUSH_INTERVAL_S = 5.0
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
# ClickHouse refuses an insert touching more than `max_partitions_per_insert_block` (100) partitions;
# `decisions` is partitioned by month, so a batch is inserted in groups of at most this many months.
MAX_MONTHS_PER_INSERT = 50
INSERT_REJECTED = "insert.rejected"
# Chunks handed to the parse worker and not yet added to a batch (each at most one consume call).
MAX_PENDING_CHUNKS = 2
# The loader's consumer (with its group id and error callback).
CONSUMER_OPTIONS = {
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
QUARANTINE_RAW_REFUSED = "quarantine.raw_refused"
# The quarantine keeps this much of a message's bytes (an oversized one: its head, size and sha256).
QUARANTINE_RAW_MAX = 64 * 1024
# Replacing on insert would sort-merge duplicates inside each block: ~30 % of the insert time, and
# duplicates are rare and folded by background merges and FINAL anyway.
INSERT_SETTINGS = {"optimize_on_insert": 0}
SHORT_NAME = {topic: short for short, topic in names.TOPICS.items()}


class BrokerDataLost(RouterscopeError):
    """The broker no longer holds offsets the warehouse says were loaded."""


def fingerprint(key: bytes | None, value: bytes | None) -> str:
    """What a position remembers of the last message it covers (hash of key and value)."""
    h = hashlib.blake2b(digest_size=16)
    for part in (key, value):
        h.update(b"\xff" if part is None else len(part).to_bytes(8, "big") + part)
    return h.hexdigest()


@dataclass
class PartitionState:
    topic: str
    partition: int
    stored: int | None  # next offset recorded in the warehouse; None if never loaded
    fingerprint: str = ""  # of the message at `stored - 1` when it was loaded ("" if not recorded)
    skip: set[int] = field(default_factory=set)  # offsets past `stored` that already landed
    next_offset: int | None = None  # after the last message consumed in this run
    verified: bool = False  # the message before `stored` was seen (the broker kept our history)
    at_end: bool = False
    end: int | None = None  # the high watermark in the first fetch response seen for it; None: none yet
    high: int | None = None  # the latest high watermark fetched for it, even one below `stored`; None: never fetched

    @property
    def lost(self) -> bool:
        """Known to have lost loaded messages: fetched, and its end is below the stored position (or it
        reached its end without the message before that position)."""
        if not self.stored or self.verified:
            return False
        return (self.high is not None and self.high < self.stored) or self.at_end

    @property
    def drained(self) -> bool:
        """Read up to its end as of an early fetch from it (the probe message included)."""
        if self.at_end:
            return True
        if self.end is None or (self.stored and not self.verified):
            return False
        position = self.next_offset if self.next_offset is not None else (self.stored or 0)
        return position >= self.end

    @property
    def start(self) -> int:
        """Where to read from: one before the stored position, to check the broker still has it."""
        return 0 if not self.stored else self.stored - 1

    @property
    def key(self) -> str:
        return f"{self.topic}[{self.partition}]"


@dataclass
class LoadResult:
    loaded: dict[str, int] = field(default_factory=lambda: {s: 0 for s in names.TOPICS})
    quarantined: dict[str, int] = field(default_factory=lambda: {s: 0 for s in names.TOPICS})
    skipped_already_loaded: int = 0
    refetched: dict[str, int] = field(default_factory=dict)  # topic[partition] -> messages loaded again
    batches: int = 0
    seconds: float = 0.0
    otlp: dict | None = None  # the OTLP topic's step, when it had messages (routerscope/warehouse/ingest/otlp.py)

    def as_dict(self) -> dict:
        out = {"loaded": dict(self.loaded), "quarantined": dict(self.quarantined)}
        if self.otlp:
            out["otlp"] = self.otlp
        return out


class _Batch:
    """Messages consumed since the last flush, ready to insert: parsed here (parser `python`), or kept
    as raw bytes for the warehouse to parse (parser `sql`). `tag` sets its insert tokens apart from
    another batch's over the same offsets (the Python share of an `sql` batch)."""

    def __init__(self, parser: str | None = None, tag: str = ""):
        self.parser = parser or DEFAULT_PARSER
        self.tag = tag
        self.token_ranges: dict | None = None  # the ranges its tokens name, when not its own
        self.raw: dict[str, list[tuple[int, int, object, bool]]] = {t: [] for t in FACTS}  # sql: messages
        # python: per topic the valid events' months, partitions, offsets, messages and JSON lines
        self.events: dict[str, tuple[list, list, list, list, list]] = {t: ([], [], [], [], []) for t in FACTS}
        self.quarantine: list[list] = [[] for _ in QUARANTINE_COLUMNS]
        self.ledger: list[list] = [[] for _ in LEDGER_COLUMNS]
        self.ranges: dict[tuple[str, int], list[int]] = {}  # (topic, partition) -> [first, last]
        self.counts: dict[tuple[str, int], list[int]] = {}  # -> [loaded, quarantined]
        self.last: dict[tuple[str, int], object] = {}  # -> the last message (for its fingerprint)
        self.size = 0

    def add(self, topic: str, partition: int, offset: int, message, landed: bool = False) -> None:
        """Parse one message into the batch (here, or kept raw for the warehouse: parser `sql`).
        `landed`: its row is already in the warehouse (an earlier run died before recording its
        position): only its ledger row is written again."""
        if self.parser == "sql":
            self._note(topic, partition, offset, message)
            self.raw[topic].append((partition, offset, message, landed))
            return
        parsed = parse_chunk(topic, [(partition, offset, message.value(), landed)])[0]
        self.add_parsed(topic, partition, offset, message, parsed, landed)

    def _note(self, topic: str, partition: int, offset: int, message) -> list[int]:
        """Count one message into the batch's ranges; its partition's [loaded, quarantined] counts."""
        self.last[(topic, partition)] = message
        self.size += 1
        rng = self.ranges.get((topic, partition))
        if rng is None:
            self.ranges[(topic, partition)] = [offset, offset]
            counts = self.counts[(topic, partition)] = [0, 0]
            return counts
        rng[1] = offset
        return self.counts[(topic, partition)]

    def add_parsed(self, topic: str, partition: int, offset: int, message, parsed: tuple, landed: bool) -> None:
        """Add one message with its `parse_chunk` result (routerscope/warehouse/ingest/parsing.py)."""
        counts = self._note(topic, partition, offset, message)
        if parsed[0] is not None:  # valid: its JSON line (the insert writes its facts and ledger rows)
            months, partitions, offsets, messages, lines = self.events[topic]
            lines.append(parsed[0])
            months.append(parsed[1])
            partitions.append(partition)
            offsets.append(offset)
            messages.append(message)
            counts[0] += 1
            return
        if len(parsed) == 4:  # valid and landed before: its ledger row again
            for column, value in zip(self.ledger, (topic, partition, offset, parsed[2], parsed[3])):
                column.append(value)
            return
        if landed:
            return
        counts[1] += 1
        self.quarantine_message(topic, partition, offset, message, parsed[1], _describe(parsed[1]))

    def quarantine_message(self, topic: str, partition: int, offset: int, message, rules: list[str], error: str):
        raw = message.value() or b""
        if len(raw) > QUARANTINE_RAW_MAX:  # an oversized message: its head, its size and its hash
            digest = hashlib.sha256(raw).hexdigest()
            error = f"{error}; kept the first {QUARANTINE_RAW_MAX} of {len(raw)} bytes, sha256 {digest}"
            raw = raw[:QUARANTINE_RAW_MAX]
        key = message.key()
        for column, value in zip(
            self.quarantine,
            (
                topic,
                partition,
                offset,
                None if key is None else key.decode("utf-8", "replace"),
                kafka_time(message.timestamp()),
                raw,
                rules,
                error,
            ),
        ):
            column.append(value)

    def reject(self, topic: str, rejected: list[tuple[int, int, object, str]]) -> None:
        """Rows the warehouse refused (partition, offset, message, its message): quarantined (their
        ledger rows, which the insert's ledger view may have written, are folded by the caller)."""
        for partition, offset, message, error in rejected:
            counts = self.counts[(topic, partition)]
            counts[0] -= 1
            counts[1] += 1
            self.quarantine_message(topic, partition, offset, message, [INSERT_REJECTED], f"{INSERT_REJECTED}: {error}")

    def input_columns(self, batch_id: str, topic: str) -> list[list]:
        """The raw rows of one topic of an `sql` batch, column by column (landing.INPUT_COLUMNS)."""
        rows = self.raw[topic]
        return [
            [batch_id] * len(rows),
            [partition for partition, _, _, _ in rows],
            [offset for _, offset, _, _ in rows],
            [message.value() or b"" for _, _, message, _ in rows],
            [landed for _, _, _, landed in rows],
        ]

    def token(self, topics: Iterable[str] | None = None) -> str:
        """The insert deduplication token: the offset ranges this batch covers."""
        return self.tag + ",".join(
            f"{t}:{p}:{first}-{last}"
            for (t, p), (first, last) in sorted((self.token_ranges or self.ranges).items())
            if topics is None or t in topics
        )


def _describe(rules: list[str]) -> str:
    return "broke " + ", ".join(rules)


class Loader:
    """Drains the three topics into the warehouse. One instance per run."""

    def __init__(
        self,
        settings: Settings,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
        consumer_name: str = names.CONSUMER_GROUP_LOADER,
        topics: Iterable[str] = tuple(names.TOPICS.values()),
        partitions: Iterable[int] | None = None,
        progress: Callable[[int], None] | None = None,
        broker_timeout_s: float | None = None,
        parser: str | None = None,
        parse_worker: bool | None = None,
        wait: bool = True,
        otlp: bool = True,
    ):
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        parser = parser or DEFAULT_PARSER
        if parser not in PARSERS:
            raise ValueError(f"parser must be one of {', '.join(PARSERS)}, not {parser!r}")
        self.parser = parser
        # python parser: large chunks are parsed by a worker process while this one consumes and
        # inserts (routerscope/warehouse/ingest/parsing.py); False parses everything here. By default only for a
        # warehouse server: embedded, the warehouse's insert thread already takes the second core, and
        # the worker made the load slower and ~150 MB larger (docs/loader.md).
        self.parse_worker = (not settings.warehouse.embedded) if parse_worker is None else parse_worker
        self._worker: ParseWorker | None = None
        self._pending: list[tuple[str, list, object]] = []  # (topic, items, future or None), in order
        self._batches = 0  # sql parser: batches landed in this run (each its own landing partition)
        self._staging_ready = False  # sql parser: its input tables and views exist (created on the first batch)
        self._json_rows_ready = False  # the facts' input tables and views exist (created on the first batch)
        self.settings = settings
        self.batch_size = batch_size
        self.idle_timeout_s = idle_timeout_s
        self.flush_interval_s = flush_interval_s
        self.consumer_name = consumer_name
        self.topics = tuple(topics)
        # The Kafka partitions this loader owns (None: all). Loaders owning disjoint sets can run side
        # by side against a ClickHouse server: positions are kept per (topic, partition).
        self.partitions = None if partitions is None else frozenset(partitions)
        self.progress = progress or (lambda n: None)
        # None: DEFAULT_BROKER_TIMEOUT_S grown with the partition count once it is known (`partition_timeout`);
        # a value given is used as it is.
        self._broker_timeout_given = broker_timeout_s
        self.broker_timeout_s = DEFAULT_BROKER_TIMEOUT_S if broker_timeout_s is None else broker_timeout_s
        self._probe_timeout_s = PROBE_TIMEOUT_S
        self._close_timeout_s = CLOSE_TIMEOUT_S
        self._client = None  # a client to use throughout, when the caller gives one
        self._held = None  # (context manager, client): the warehouse kept open while messages flow
        self._writing: _Writing | None = None  # the batch being written beside the drain (`_flush`)
        self._broker_error: str | None = None  # the last broker-wide error since a message arrived
        self.run_id = uuid.uuid4().hex  # part of every insert token (see the module docstring)
        self.wait = wait  # another load holds the warehouse: wait for it (else LoadInProgress)
        # A whole load first maps the OTLP topic into decision events (routerscope/warehouse/ingest/otlp.py), so that
        # this run loads them; a loader owning a partition set leaves that to the whole one.
        self.otlp = otlp and partitions is None and names.TOPIC_DECISIONS in self.topics

    @contextmanager
    def _warehouse(self):
        """One unit of warehouse work: the caller's client, or the warehouse opened (and, embedded,
        locked) for just this unit and closed straight after."""
        if self._client is not None:
            yield self._client
            return
        from routerscope.warehouse.client import open_warehouse

        with open_warehouse(self.settings, purpose="load") as client:
            yield client

    def _acquire(self):
        """The warehouse for a flush, kept open while messages keep arriving (opening it costs about
        0.1 s); `_release` closes it before any wait on the broker."""
        if self._client is not None:
            return self._client
        if self._held is None:
            from routerscope.warehouse.client import open_warehouse

            manager = open_warehouse(self.settings, purpose="load")
            self._held = (manager, manager.__enter__())
        return self._held[1]

    def _release(self, settle: bool = True) -> None:
        """Close the warehouse held for flushes, once the batch being written is settled (`settle`
        False: only waited for, its outcome dropped, on the way out of a failed run)."""
        if settle:
            self._settle()
        elif self._writing is not None:
            self._writing.thread.join()
            self._writing = None
        held, self._held = self._held, None
        if held is not None:
            held[0].__exit__(None, None, None)

    # -- warehouse side --------------------------------------------------------------------------
    def stored_positions(self, client) -> dict[tuple[str, int], tuple[int, str]]:
        """(next offset, fingerprint of the message before it) per (topic, partition)."""
        return ingest_offsets.stored_positions(client, self.consumer_name)

    def _rewind_missing(self, client, stored: dict[tuple[str, int], tuple[int, str]], result: LoadResult) -> None:
        """Reconcile the stored positions with the facts actually stored: a partition whose rows below its
        position are gone (a damaged part the engine set aside) is read again from its first missing
        offset; what is still stored is skipped as landed, so only the missing rows are loaded again."""
        for topic in self.topics:
            nexts = {
                p: o
                for (t, p), (o, _) in stored.items()
                if t == topic and (self.partitions is None or p in self.partitions)
            }
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

    def landed_offsets(self, client, topic: str, starts: dict[int, int]) -> dict[int, set[int]]:
        """Offsets at or past each partition's stored position already present in the warehouse."""
        return ingest_offsets.landed_offsets(client, (FACTS[topic][0], names.TABLE_QUARANTINE), topic, starts)

    def _insert(self, client, table: str, columns, data: list, token: str) -> None:
        """One column-oriented insert, deduplicated by this run and `token` if it arrives twice."""
        client.insert(
            f"{names.DATABASE}.{table}",
            data,
            column_names=list(columns),
            column_oriented=True,
            settings={"insert_deduplication_token": f"{self.run_id};{token}", **INSERT_SETTINGS},
        )

    def write(self, client, batch: _Batch, states: dict[tuple[str, int], PartitionState], result: LoadResult) -> None:
        """Insert one batch: facts per topic, the ledger of loaded messages, the quarantine, then the
        positions that cover them (in that order: a crash leaves rows without a position, never a
        position without its rows)."""
        self._apply(batch, *self._write_rows(client, batch), states, result)

    def _write_rows(self, client, batch: _Batch) -> tuple[dict, list[tuple]]:
        """`write`'s inserts, the positions last; returns the counts per (topic, partition) and the
        position rows, for `_apply`. Touches nothing but the warehouse and `batch`: it runs beside the
        drain (`_flush`)."""
        counts = self._write_sql(client, batch) if batch.parser == "sql" else self._write_parsed(client, batch)
        return counts, self._insert_positions(client, batch, counts)

    def _write_parsed(self, client, batch: _Batch) -> dict:
        """The rows of a batch parsed in Python: facts, ledger, quarantine. Returns the batch's counts
        per (topic, partition): [loaded, quarantined]."""
        for topic, (months, partitions, offsets, messages, lines) in batch.events.items():
            if lines:
                self._insert_facts(client, batch, topic, months, partitions, offsets, messages, lines)
        if batch.ledger[0]:
            self._insert(client, names.TABLE_LOADED_MESSAGES, LEDGER_COLUMNS, batch.ledger, "ledger;" + batch.token())
        if batch.quarantine[0]:
            self._insert_quarantine(client, batch)
        return batch.counts

    def _insert_positions(self, client, batch: _Batch, counts) -> list[tuple]:
        """The positions covering a written batch; `counts`: (topic, partition) -> [loaded, quarantined]."""
        token = batch.token()
        rows = []
        for (t, p), (_first, last) in sorted(batch.ranges.items()):
            message = batch.last[(t, p)]
            rows.append(
                (
                    self.consumer_name,
                    t,
                    p,
                    last + 1,
                    token,
                    *counts.get((t, p), (0, 0)),
                    fingerprint(message.key(), message.value()),
                )
            )
        client.insert(f"{names.DATABASE}.{names.TABLE_INGEST_OFFSETS}", rows, column_names=list(OFFSET_COLUMNS))
        return rows

    @staticmethod
    def _apply(batch: _Batch, counts, rows: list[tuple], states, result: LoadResult) -> None:
        """A written batch's positions and counts, into the run's states and result."""
        for (t, _p), (loaded, quarantined) in counts.items():
            result.loaded[SHORT_NAME[t]] += loaded
            result.quarantined[SHORT_NAME[t]] += quarantined
        for (t, p), (_first, last) in batch.ranges.items():
            states[(t, p)].stored = last + 1
        for row in rows:
            states[(row[1], row[2])].fingerprint = row[-1]
        result.batches += 1

    def _write_sql(self, client, batch: _Batch) -> dict:
        """An `sql` batch: per topic, its raw messages in one insert into the topic's input table,
        whose views parse each message once and write the valid ones to the facts table and the
        ledger under the insert's token, and list the rest (routerscope/warehouse/queries/landing.py). Those go
        through the Python writer: the ones the SQL cannot judge exactly, and the invalid ones (the
        Python validator names their rules, the rules the SQL finds), as do all of a topic's rows when
        the insert is refused (the writer finds the refused rows by halves)."""
        batch_id = f"{self.run_id}-{self._batches}"
        self._batches += 1
        self._ensure_landing(client)
        py = _Batch("python", tag="py;")
        py.token_ranges = batch.ranges  # one Python share per batch: its tokens name the batch
        counts: dict[tuple[str, int], list[int]] = {}
        for topic, rows in batch.raw.items():
            if rows:
                self._write_sql_topic(client, batch, batch_id, topic, py, counts)
        if py.ledger[0] or py.quarantine[0] or any(e[0] for e in py.events.values()):
            self._write_parsed(client, py)
        for key, (loaded, quarantined) in py.counts.items():
            total = counts.setdefault(key, [0, 0])
            total[0] += loaded
            total[1] += quarantined
        return counts

    def _ensure_landing(self, client):
        """The sql parser's input tables and views, once per run (they persist: an insert is the
        whole cost of a batch); returns its statements' module (imported here: generating them takes
        a Python-parser run time for nothing)."""
        from routerscope.warehouse.queries import landing

        if not self._staging_ready:
            for statements in landing.CREATE.values():
                for sql in statements:
                    client.command(sql)
            self._staging_ready = True
        return landing

    def _write_sql_topic(self, client, batch: _Batch, batch_id: str, topic: str, py: _Batch, counts) -> None:
        landing = self._ensure_landing(client)
        rows = batch.raw[topic]
        token = "facts;" + batch.token([topic])
        try:
            client.insert(
                landing.INPUT_TABLE[topic],
                batch.input_columns(batch_id, topic),
                column_names=list(landing.INPUT_COLUMNS),
                column_oriented=True,
                settings={
                    "insert_deduplication_token": f"{self.run_id};{token}",
                    **INSERT_SETTINGS,
                    **landing.INSERT_SETTINGS,
                },
            )
        except Exception as exc:
            if outage(exc):
                raise
            check_free_space(self.settings)
            return self._to_python(batch, topic, py, counts, set())
        verdicts = client.query(landing.VERDICTS, parameters={"batch": batch_id, "topic": topic}).result_rows
        messages = {(p, o): (m, was_landed) for p, o, m, was_landed in rows}
        for partition, _offset, _message, was_landed in rows:
            if not was_landed:
                counts.setdefault((topic, partition), [0, 0])[0] += 1
        # Left to the Python writer: what the SQL cannot judge exactly, and what it found invalid (the
        # Python validator names its rules, the same as the SQL's: tests/integration/test_ingest_sql.py).
        for partition, offset, was_landed, _python in verdicts:
            partition, offset = int(partition), int(offset)
            message, _ = messages[(partition, offset)]
            if not was_landed:
                counts[(topic, partition)][0] -= 1  # not loaded by the views
            py.add(topic, partition, offset, message, landed=bool(was_landed))

    def _to_python(self, batch: _Batch, topic: str, py: _Batch, counts, routed: set) -> None:
        """Every message of `topic` in this batch through the Python writer instead."""
        for key in [k for k in counts if k[0] == topic]:
            del counts[key]
        for partition, offset, message, was_landed in batch.raw[topic]:
            if (partition, offset) not in routed:
                py.add(topic, partition, offset, message, landed=was_landed)

    def _insert_facts(self, client, batch: _Batch, topic: str, months, partitions, offsets, messages, lines) -> None:
        """The facts and ledger rows of one topic: the events' JSON lines in one insert through the
        topic's input table (routerscope/warehouse/queries/json_rows.py), in groups of at most
        MAX_MONTHS_PER_INSERT months; rows the warehouse refuses are moved to the quarantine
        (`insert.rejected`)."""
        table = FACTS[topic][0]
        self._ensure_json_rows(client)
        token = "facts;" + batch.token([topic])
        groups = _month_groups(months)
        rejected: list[tuple] = []
        errors: list[str] = []
        for g, indexes in enumerate(groups):
            group_token = token if len(groups) == 1 else f"{token};months-{g}"
            pick = (lambda xs: xs) if indexes is None else (lambda xs, ix=indexes: [xs[i] for i in ix])
            rows = list(zip(pick(partitions), pick(offsets), pick(messages), pick(lines)))

            def insert(part: list, part_token: str) -> None:
                client.raw_insert(
                    json_rows.INPUT_TABLE[topic],
                    None,
                    b"\n".join([line for *_, line in part]),
                    settings={
                        "insert_deduplication_token": f"{self.run_id};{part_token}",
                        **INSERT_SETTINGS,
                        **json_rows.INSERT_SETTINGS,
                        **(json_rows.EMBEDDED_INSERT_SETTINGS if self.settings.warehouse.embedded else {}),
                    },
                    fmt="JSONEachRow",
                )

            self._insert_or_split(insert, rows, group_token, rejected, errors)
        if rejected:
            total = len(lines)
            if len(rejected) == total and total > 1:
                raise WarehouseError(
                    f"the warehouse refused every row of a batch of {total} for {table} ({errors[0]}); nothing "
                    "past the last stored position was recorded as loaded, so the next `routerscope load` "
                    "resumes there"
                )
            self._insert(
                client,
                names.TABLE_LOADED_MESSAGES,
                (*LEDGER_COLUMNS, loaded_messages.REJECTED),
                loaded_messages.rejected_rows(topic, [(p, o, line) for p, o, _, line in rejected]),
                "ledger-rejected;" + token,
            )
            batch.reject(topic, [(p, o, m, error) for (p, o, m, _), error in zip(rejected, errors)])

    def _ensure_json_rows(self, client) -> None:
        """The input tables and views the facts' JSON lines go through, once per run."""
        if self._json_rows_ready:
            return
        for statements in json_rows.CREATE.values():
            for sql in statements:
                client.command(sql)
        self._json_rows_ready = True

    def _insert_quarantine(self, client, batch: _Batch) -> None:
        """The quarantine rows; one the warehouse refuses is kept without its raw bytes, under the
        added rule `quarantine.raw_refused` with the raw's length, hash and the server's message."""
        token = "quarantine;" + batch.token()
        rows = list(zip(*batch.quarantine))

        def insert(part: list, part_token: str) -> None:
            self._insert(client, names.TABLE_QUARANTINE, QUARANTINE_COLUMNS, [list(c) for c in zip(*part)], part_token)

        refused: list[tuple] = []
        errors: list[str] = []
        self._insert_or_split(insert, rows, token, refused, errors)
        if not refused:
            return
        if len(refused) == len(rows) and len(rows) > 1:
            raise WarehouseError(
                f"the warehouse refused every quarantine row of a batch ({errors[0]}); nothing past the last "
                "stored position was recorded as loaded, so the next `routerscope load` resumes there"
            )
        kept = []
        for (topic, partition, offset, key, timestamp, raw, rules, error), refusal in zip(refused, errors):
            digest = hashlib.sha256(raw if isinstance(raw, bytes) else str(raw).encode()).hexdigest()
            kept.append(
                (
                    topic,
                    partition,
                    offset,
                    key,
                    timestamp,
                    b"",
                    [*rules, QUARANTINE_RAW_REFUSED],
                    f"{error}; {QUARANTINE_RAW_REFUSED}: {len(raw)} bytes, sha256 {digest}: {refusal}",
                )
            )
        insert(kept, token + ";raw-refused")

    def _insert_or_split(self, insert, rows: list, token: str, rejected: list, errors: list) -> None:
        """Insert `rows`; if the warehouse refuses them for their content, split in halves (each half
        deduplicated by its own token) until the refused rows are single and known. A fault of the
        warehouse (routerscope.warehouse.client.outage) is raised at once, as is a refusal met while its disk is
        below the floor: neither says anything about the rows."""
        try:
            insert(rows, token)
            return
        except Exception as exc:
            if outage(exc):
                raise
            check_free_space(self.settings)
            message = _first_line(exc)
        if len(rows) == 1:
            rejected.append(rows[0])
            errors.append(message)
            return
        middle = len(rows) // 2
        self._insert_or_split(insert, rows[:middle], f"{token};a", rejected, errors)
        self._insert_or_split(insert, rows[middle:], f"{token};b", rejected, errors)

    # -- the run ---------------------------------------------------------------------------------
    def run(self, client=None) -> LoadResult:
        """Drain every topic into the warehouse. `client`: a clickhouse-connect client to use for
        every unit of work; by default the warehouse is opened for each one and closed after it."""
        with load_lock(self.settings, self.partitions, wait=self.wait):
            return self._run(client)

    def _run(self, client) -> LoadResult:
        _return_freed_memory()
        self._client = client
        self._bootstrap = self.settings.kafka_bootstrap()
        started = time.monotonic()
        result = LoadResult()
        # Before the metadata arrives the partition count is the configured one (ROUTERSCOPE_TOPIC_PARTITIONS).
        expected = self.settings.topic_partitions * len(self.topics)
        metadata = check_reachable(self.settings, timeout_s=partition_timeout(METADATA_TIMEOUT_S, expected))
        check_free_space(self.settings)
        if self.otlp and self.settings.otlp_topic in metadata.topics:  # its events are loaded by this run
            from routerscope.warehouse.ingest.otlp import bridge

            otlp = bridge(self.settings, client=client)
            if otlp.messages:
                result.otlp = otlp.as_dict()
        states: dict[tuple[str, int], PartitionState] = {}
        with self._warehouse() as wh:
            from routerscope.warehouse.migrate import migrate

            migrate(wh)  # pending migrations first, in the same unit of work as reading the positions
            stored = self.stored_positions(wh)
            self._rewind_missing(wh, stored, result)
            for topic in self.topics:
                if topic not in metadata.topics:
                    raise BrokerUnavailable(
                        f"topic {topic} does not exist at {self.settings.kafka_bootstrap()}; "
                        "create the topics with `routerscope broker start` (local) or your cluster's tooling"
                    )
                for partition in sorted(metadata.topics[topic].partitions):
                    if self.partitions is not None and partition not in self.partitions:
                        continue
                    offset, mark = stored.get((topic, partition), (None, ""))
                    states[(topic, partition)] = PartitionState(topic, partition, offset, mark)
                starts = {p: st.stored or 0 for (t, p), st in states.items() if t == topic}
                for partition, offsets in self.landed_offsets(wh, topic, starts).items():
                    if (topic, partition) in states:
                        states[(topic, partition)].skip = offsets
            self._derive_copies(wh)  # what a run killed before its end left pending
        self._scale_timeouts(states)
        for (topic, partition), (offset, _) in stored.items():
            owned = self.partitions is None or partition in self.partitions
            if (topic, partition) not in states and topic in self.topics and owned:
                raise BrokerDataLost(
                    f"{topic}[{partition}] was loaded up to offset {offset} but the broker has no such "
                    "partition any more; " + _lost_hint(self.settings)
                )

        consumer = Consumer(
            librdkafka_config(
                self.settings,
                **{"group.id": self.consumer_name, **CONSUMER_OPTIONS, "error_cb": self._on_error},
            )
        )
        # A batch holds tens of thousands of decoded events. With the default collector settings,
        # the allocations trigger full collections that walk every live object again and again
        # (measured: parsing ran 2.5x slower). Freeze what exists (imports, clients), then collect
        # the young generation rarely and the old one almost never while draining.
        thresholds = gc.get_threshold()
        gc.freeze()
        gc.set_threshold(100_000, 50, 1_000)
        try:
            consumer.assign([TopicPartition(t, p, st.start) for (t, p), st in states.items()])
            self._drain(consumer, states, result)
            if result.loaded[SHORT_NAME[names.TOPIC_DECISIONS]]:
                self._derive_copies(self._acquire())
        finally:
            if self._worker is not None:
                self._worker.close()
            self._pending = []
            self._release(settle=False)  # a write still running is waited for: the warehouse closes after it
            _close_within(consumer, self._close_timeout_s)
            gc.set_threshold(*thresholds)
            gc.unfreeze()
        result.seconds = time.monotonic() - started
        return result

    def _derive_copies(self, client) -> None:
        """Which stored decisions are later copies of an event_id (routerscope/warehouse/queries/decision_copies.py),
        once per run: one join over every stored id, which per insert cost more than the insert itself
        with millions stored. Never fatal: until it runs, metric windows over the rows it would cover
        read the 7-day look-back instead, with the same counts."""
        settle_ms = 0 if self.settings.warehouse.embedded else decision_copies.SERVER_SETTLE_MS
        try:
            decision_copies.derive(client, settle_ms)
        except Exception as exc:
            log.warning(
                "routerscope: warning: the later copies of decisions were not derived (%s); metric "
                "windows read the 7-day look-back until the next load derives them",
                _first_line(exc),
            )

    def _scale_timeouts(self, states: dict[tuple[str, int], PartitionState]) -> None:
        """The waits on partition answers, for the partitions this run reads (`partition_timeout`)."""
        total = len(states)
        largest = max((sum(1 for t, _ in states if t == topic) for topic in self.topics), default=0)
        if self._broker_timeout_given is None:
            self.broker_timeout_s = partition_timeout(DEFAULT_BROKER_TIMEOUT_S, total)
        self._probe_timeout_s = partition_timeout(PROBE_TIMEOUT_S, largest)  # the probe asks for one topic
        self._close_timeout_s = partition_timeout(CLOSE_TIMEOUT_S, total)

    def _on_error(self, error) -> None:
        """librdkafka's client-wide errors (all brokers down, transport): remembered until a message arrives."""
        if (
            error.code()
            in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT, KafkaError._RESOLVE, KafkaError._TIMED_OUT)
            or error.fatal()
        ):
            self._broker_error = error.str()

    def _drain(self, consumer, states, result) -> None:
        batch = _Batch(self.parser)
        last_message = last_flush = last_fetched = time.monotonic()
        pending = set(states)  # partitions not yet known to be at their end
        fetched = 0  # partitions with a fetch response so far
        while pending:
            # Holding the warehouse (a batch written or being written), wait briefly: the consumer's queue
            # runs dry between fetches, and letting go of the warehouse and opening it again costs more.
            messages = consumer.consume(
                num_messages=min(self.batch_size, 50_000), timeout=HELD_WAIT_S if self._held else 0.2
            )
            now = time.monotonic()
            if not messages:
                if self._held is not None:  # nothing arrived: let go of the warehouse before waiting longer
                    self._release()
                    last_message = max(last_message, time.monotonic())  # idle counts waiting, not work
                    continue
                pending = _undrained(consumer, states, pending)  # those with nothing left to read end here
                if not pending:
                    break
                now_fetched = sum(st.high is not None for st in states.values())
                if now_fetched != fetched:
                    fetched, last_fetched = now_fetched, now
                idle = now - last_message
                if idle >= self.idle_timeout_s:
                    # Drained, unless the broker went away (it does not answer a metadata request now):
                    # then store what arrived and stop. Asked every time, not only after librdkafka
                    # reported an error: its error callback can come later than the idle timeout.
                    # Never while a partition is known to hold more (its fetched end is past its
                    # position: with thousands of partitions deliveries come in bursts further apart
                    # than the idle timeout), nor before every partition was fetched once, unless
                    # nothing came for the broker timeout.
                    known_left = any(states[key].end is not None for key in pending)
                    unfetched = any(states[key].high is None for key in pending)
                    if (known_left and idle < self.broker_timeout_s) or (
                        unfetched and now - last_fetched < self.broker_timeout_s
                    ):
                        pass  # messages known to be there, or fetch responses still coming: wait
                    elif _answers(
                        consumer,
                        self.topics[0],
                        self._probe_timeout_s if idle < self.broker_timeout_s else self.broker_timeout_s,
                    ):
                        break  # (a broker is declared gone only after a probe as long as the broker timeout)
                    elif idle >= self.broker_timeout_s:
                        self._collect(batch, keep=0)
                        self._flush(consumer, batch, states, result)
                        self._settle()
                        raise BrokerUnavailable(
                            f"the broker at {self._bootstrap} stopped answering during the load "
                            f"({self._broker_error or 'no answer to a metadata request'}); "
                            "what arrived before was loaded and its position stored, "
                            "so the next `routerscope load` resumes there"
                        )
                self._collect(batch, keep=0)  # nothing arrives: let parsed chunks through
                if batch.size and now - last_flush >= self.flush_interval_s:
                    self._flush(consumer, batch, states, result)
                    batch, last_flush = _Batch(self.parser), now
                    last_message = max(last_message, time.monotonic())
                continue
            consumed = 0
            chunk: dict[str, list] = {}  # topic -> (partition, offset, message, landed) to parse
            for message in messages:
                error = message.error()
                topic, partition, offset = message.topic(), message.partition(), message.offset()
                if error is not None:
                    code = error.code()
                    if code == KafkaError._PARTITION_EOF:
                        last_message = now
                        self._broker_error = None
                        state = states.get((topic, partition))
                        if state is not None:
                            state.at_end = True
                            pending.discard((topic, partition))
                        continue
                    if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                        state = states[(topic, partition)]
                        raise BrokerDataLost(
                            f"{state.key}: the broker reports offset {state.start} out of range, but the "
                            f"warehouse has loaded it up to {state.stored}; " + _lost_hint(self.settings)
                        )
                    if error.fatal() or code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
                        raise BrokerUnavailable(f"Kafka error while loading: {error.str()}")
                    continue  # transient (the client retries on its own)
                last_message = now
                self._broker_error = None
                state = states[(topic, partition)]
                if not state.verified and state.stored:
                    state.verified = True
                    if offset == state.stored - 1:
                        if state.fingerprint and fingerprint(message.key(), message.value()) != state.fingerprint:
                            raise BrokerDataLost(
                                f"{state.key}: the message at offset {offset} is not the one loaded from there "
                                "(its key and value differ): the broker lost the loaded messages and received "
                                "others since; " + _lost_hint(self.settings)
                            )
                        continue  # the probe message: loaded in an earlier run
                state.verified = True
                state.next_offset = offset + 1
                consumed += 1
                landed = offset in state.skip
                if landed:
                    result.skipped_already_loaded += 1
                if self.parser == "sql":
                    batch.add(topic, partition, offset, message, landed=landed)
                else:
                    chunk.setdefault(topic, []).append((partition, offset, message, landed))
            pending = _undrained(consumer, states, pending)
            for topic, items in chunk.items():
                self._enqueue(topic, items)
            self._collect(batch, keep=MAX_PENDING_CHUNKS)
            if consumed:
                self.progress(consumed)
            if batch.size >= self.batch_size or (batch.size and now - last_flush >= self.flush_interval_s):
                self._flush(consumer, batch, states, result)
                batch, last_flush = _Batch(self.parser), time.monotonic()
            if consumed:
                # the idle timeout measures waiting for messages: decoding and writing this batch (seconds for
                # a large insert on a busy machine) is work, and once counted it ended runs half-drained
                last_message = max(last_message, time.monotonic())
        self._collect(batch, keep=0)
        if batch.ranges:
            self._flush(consumer, batch, states, result)
        self._settle()
        lost = [st for st in states.values() if st.lost]  # never a partition not fetched yet
        if lost:
            where = ", ".join(f"{st.key} (loaded up to offset {st.stored})" for st in lost)
            raise BrokerDataLost(
                f"the broker no longer holds messages the warehouse has loaded: {where}; " + _lost_hint(self.settings)
            )

    def _enqueue(self, topic: str, items: list) -> None:
        """Queue a chunk of one topic's messages for parsing: by the worker when it is large (the
        result is collected later, in order), else here when it is collected."""
        future = None
        if self.parse_worker and len(items) >= MIN_WORKER_CHUNK:
            if self._worker is None:
                self._worker = ParseWorker()
            future = self._worker.submit(topic, _values(items))
        self._pending.append((topic, items, future))

    def _collect(self, batch: _Batch, keep: int) -> None:
        """Add parsed chunks to `batch` in the order they were consumed: every chunk at the front
        that is ready, then, waiting for the worker, the oldest ones until at most `keep` are left."""
        while self._pending:
            topic, items, future = self._pending[0]
            if future is not None and not future.done() and len(self._pending) <= keep:
                return
            self._pending.pop(0)
            parsed = None
            if future is not None:
                try:
                    parsed = future.result(timeout=WORKER_TIMEOUT_S)
                except Exception as exc:  # the worker died or hangs: this chunk and the rest are parsed here
                    self._worker.give_up(exc)
            if parsed is None:
                parsed = parse_chunk(topic, _values(items))
            for (partition, offset, message, landed), one in zip(items, parsed):
                batch.add_parsed(topic, partition, offset, message, one, landed)

    # -- writing beside the drain ------------------------------------------------------------------
    def _flush(self, consumer, batch, states, result) -> None:
        """Hand `batch` to the warehouse. It is written in a thread beside the drain: the embedded
        warehouse runs its inserts without holding the GIL, so consuming and parsing the next batch go
        on meanwhile. One batch is written at a time, in order: the previous one's write is settled
        first (its positions applied, or its error raised here)."""
        if not batch.ranges:
            return
        self._settle()
        try:
            check_free_space(self.settings)  # stop cleanly before a write can fail half way
            client = self._acquire()
        except BaseException as exc:
            raise self._failed(exc) from exc
        writing = _Writing(batch, consumer, states, result)
        writing.thread = threading.Thread(
            target=self._write_beside, args=(client, writing), name="routerscope-load-write", daemon=True
        )
        self._writing = writing
        writing.thread.start()

    def _write_beside(self, client, writing: _Writing) -> None:
        try:
            writing.written = self._write_rows(client, writing.batch)
        except BaseException as exc:  # raised in the drain's thread when it settles this write
            writing.error = exc

    def _settle(self) -> None:
        """Wait for the batch being written: apply its positions and counts, or raise its error."""
        writing = self._writing
        if writing is None:
            return
        writing.thread.join()
        self._writing = None  # only now: a Ctrl-C during the wait leaves it for the run's end to wait for
        if writing.error is not None:
            raise self._failed(writing.error) from writing.error
        self._apply(writing.batch, *writing.written, writing.states, writing.result)
        # Best effort: the group's committed offsets are for lag tools, never read back here.
        try:
            writing.consumer.commit(
                offsets=[TopicPartition(t, p, last + 1) for (t, p), (first, last) in writing.batch.ranges.items()],
                asynchronous=True,
            )
        except Exception:
            pass

    def _failed(self, exc: BaseException) -> BaseException:
        """What a failed write raises, the warehouse released first: the project's own errors and an
        interrupt as they are, a warehouse outage as one line naming it, anything else as a
        WarehouseError (clickhouse-connect and chDB raise several unrelated types)."""
        self._release(settle=False)
        if isinstance(exc, RouterscopeError) or not isinstance(exc, Exception):
            return exc
        if outage(exc):
            return outage_error(self.settings, exc, "writing a batch to the warehouse")
        return WarehouseError(
            f"writing a batch to the warehouse failed ({_first_line(exc)}); nothing past the last stored "
            "position was recorded as loaded, so the next `routerscope load` resumes there"
        )


@dataclass
class _Writing:
    """A batch being written beside the drain (Loader._flush), and where its outcome goes."""

    batch: _Batch
    consumer: object
    states: dict
    result: LoadResult
    thread: threading.Thread | None = None
    written: tuple | None = None  # Loader._write_rows's (counts, position rows)
    error: BaseException | None = None


# glibc's malloc: memory above this at the top of a heap is given back to the system (its default adapts
# upwards to the largest block freed, 32 MB at most on 64-bit systems, and then keeps it).
MALLOC_TRIM_THRESHOLD = 4 * 1024 * 1024
_M_TRIM_THRESHOLD = -1  # mallopt's parameter number (malloc.h)


def _return_freed_memory() -> None:
    """Have glibc's allocator give freed memory back instead of keeping the largest amounts it once
    held: a batch's messages, lines and insert body are tens of MB, freed after each write, and with
    the write in its own thread they land in more than one of glibc's arenas. Measured on a 500k load:
    peak RSS 986-1011 MB, 739 MB with this threshold, no slower (docs/loader.md). Process-wide; other
    C libraries (librdkafka, chDB's own allocator) are unaffected; a no-op without glibc."""
    try:
        ctypes.CDLL(None).mallopt(_M_TRIM_THRESHOLD, MALLOC_TRIM_THRESHOLD)
    except (OSError, AttributeError):
        pass


def _values(items: list) -> list[tuple]:
    """(partition, offset, message, landed) items as `parse_chunk` takes them: the message's value."""
    return [(p, o, m.value(), landed) for p, o, m, landed in items]


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


def partition_timeout(base_s: float, partitions: int) -> float:
    """A wait on the broker's answers about `partitions` partitions: `base_s` up to SCALE_FROM_PARTITIONS
    of them, plus PER_PARTITION_S for each one past that (5,000 partitions in each of 3 topics: a 10 s wait
    becomes 66 s). Never less than `base_s`."""
    return base_s + max(0, int(partitions) - SCALE_FROM_PARTITIONS) * PER_PARTITION_S


def _answers(consumer, topic: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Does the broker answer a metadata request (for one topic: thousands of partitions make the
    whole cluster's answer slow) within `timeout_s`? (A loaded machine can take seconds to answer for
    thousands of partitions: a short probe that fails is not yet an outage.)"""
    try:
        consumer.list_topics(topic=topic, timeout=timeout_s)
        return True
    except Exception:
        return False


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [repr(exc)])[0][:300]


def _month_groups(months: list[int]) -> list[list[int] | None]:
    """[None] (everything in one insert) when the events' months (year * 12 + month) are at most
    MAX_MONTHS_PER_INSERT; else the indexes of the events per group of that many months, in order."""
    distinct = sorted(set(months))
    if len(distinct) <= MAX_MONTHS_PER_INSERT:
        return [None]
    group_of = {m: i // MAX_MONTHS_PER_INSERT for i, m in enumerate(distinct)}
    groups: list[list[int]] = [[] for _ in range(group_of[distinct[-1]] + 1)]
    for i, m in enumerate(months):
        groups[group_of[m]].append(i)
    return groups


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


def _lost_hint(settings: Settings) -> str:
    if settings.kafka_bootstrap_env:
        return (
            "the topic was recreated or its data deleted. Nothing more was loaded. Check the cluster; to "
            "start over, load into a fresh warehouse"
        )
    return (
        "the local broker keeps its data in memory and was probably restarted. Nothing more was loaded. "
        f"To start over, remove the warehouse ({settings.warehouse.redacted()}) and load again"
    )


def progress_bar() -> Callable[[int], None]:
    """Counts on stderr while a long drain runs (a progress bar on a terminal, nothing otherwise)."""
    from tqdm import tqdm

    bar = tqdm(desc="loading", unit=" events", disable=None, leave=False, mininterval=0.5)
    return bar.update


def load(settings: Settings, **options) -> LoadResult:
    """Apply pending migrations, then drain the topics into the warehouse (the warehouse opened for
    each unit of work, never held while waiting on the broker)."""
    return Loader(settings, **options).run()
