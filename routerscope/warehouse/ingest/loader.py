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

**One parser.** Each message is decoded and validated in Python (routerscope/contract/validation.py, the one
implementation of the contract; beside a warehouse server, large chunks in a worker process,
routerscope/warehouse/ingest/parsing.py, results taken back in consumed order), and the valid events' canonical JSON
lines go through an input table whose views fill the facts table and the ledger in one insert
(routerscope/warehouse/queries/json_rows.py).

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

**Where each part lives.** This module ties the run together (`Loader`: the lock, migrations, the OTLP step,
the copies derived, the run's result); `config.py` holds a run's settings (`LoadConfig`, the one value every
part reads them from); `consumer.py` reads Kafka (partition states, stored positions, the lost-data probe, the
drain loop, the waits on the broker), handed the config, the writer and the parse queue, never the `Loader`;
`batch.py` is one batch (messages parsed and validated, quarantined with every rule, the insert token);
`writer.py` writes a batch (facts, quarantine, positions last, split on refusal, the outage rule, the thread
beside the drain).
"""

from __future__ import annotations

import ctypes
import gc
import logging
import time
import uuid
from collections.abc import Callable

from tqdm import tqdm

from routerscope.core import names
from routerscope.core.kafka import check_reachable
from routerscope.core.settings import Settings
from routerscope.warehouse.client import check_free_space, load_lock
from routerscope.warehouse.ingest.batch import Batch, ParseQueue, fingerprint
from routerscope.warehouse.ingest.config import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_FLUSH_INTERVAL_S,
    DEFAULT_IDLE_TIMEOUT_S,
    LoadConfig,
)
from routerscope.warehouse.ingest.consumer import (
    METADATA_TIMEOUT_S,
    BrokerDataLost,
    Drain,
    check_partitions_kept,
    partition_timeout,
    read_positions,
)
from routerscope.warehouse.ingest.otlp import bridge
from routerscope.warehouse.ingest.state import LoadResult, PartitionState
from routerscope.warehouse.ingest.writer import SHORT_NAME, BesideWriter, Tally, Writer, first_line
from routerscope.warehouse.migrate import migrate
from routerscope.warehouse.queries import decision_copies

log = logging.getLogger("routerscope.ingest")

# The public API: what the CLI, the Dagster job, the benches and the tests take from here.
__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_FLUSH_INTERVAL_S",
    "DEFAULT_IDLE_TIMEOUT_S",
    "BrokerDataLost",
    "LoadConfig",
    "LoadResult",
    "Loader",
    "fingerprint",
    "load",
    "partition_timeout",
    "progress_bar",
]


class Loader:
    """Drains the three topics into the warehouse. One instance per run."""

    def __init__(
        self,
        settings: Settings,
        config: LoadConfig | None = None,
        *,
        progress: Callable[[int], object] | None = None,
    ):
        self.settings = settings
        self.config = config or LoadConfig()
        # Large chunks parsed by a worker process; by default only beside a warehouse server (LoadConfig.parse_worker).
        worker = self.config.parse_worker
        self.parsing = ParseQueue((not settings.warehouse.embedded) if worker is None else worker)
        self.progress = progress or (lambda n: None)
        self.run_id = uuid.uuid4().hex  # part of every insert token (see the module docstring)
        self.writer = Writer(settings, self.config.consumer_name, self.run_id)
        self.beside = BesideWriter(settings, self.writer)  # the batch being written beside the drain

    def write(self, client, batch: Batch, states: dict[tuple[str, int], PartitionState], result: LoadResult) -> None:
        """Insert one batch: facts per topic, the ledger of loaded messages, the quarantine, then the
        positions that cover them (in that order: a crash leaves rows without a position, never a
        position without its rows)."""
        Tally(states, result).apply(batch, self.writer.write(client, batch))

    # -- the run ---------------------------------------------------------------------------------
    def run(self, client=None) -> LoadResult:
        """Drain every topic into the warehouse. `client`: a clickhouse-connect client to use for
        every unit of work; by default the warehouse is opened for each one and closed after it."""
        with load_lock(self.settings, self.config.partitions, wait=self.config.wait):
            return self._run(client)

    def _run(self, client) -> LoadResult:
        _return_freed_memory()
        self.beside.client = client
        settings, config = self.settings, self.config
        started = time.monotonic()
        result = LoadResult()
        # Before the metadata arrives the partition count is the configured one (ROUTERSCOPE_TOPIC_PARTITIONS).
        expected = settings.topic_partitions * len(config.topics)
        metadata = check_reachable(settings, timeout_s=partition_timeout(METADATA_TIMEOUT_S, expected))
        check_free_space(settings)
        if config.maps_otlp and settings.otlp_topic in metadata.topics:  # its events are loaded by this run
            otlp = bridge(settings, client=client)
            if otlp.messages:
                result.otlp = otlp.as_dict()
        with self.beside.unit() as wh:
            migrate(wh)  # pending migrations first, in the same unit of work as reading the positions
            stored, states = read_positions(wh, settings, config, metadata, result)
            self._derive_copies(wh)  # what a run killed before its end left pending
        check_partitions_kept(settings, config, stored, states)

        drain = Drain(
            settings, config, states, result, writer=self.beside, parsing=self.parsing, progress=self.progress
        )
        # A batch holds tens of thousands of decoded events. With the default collector settings,
        # the allocations trigger full collections that walk every live object again and again
        # (measured: parsing ran 2.5x slower). Freeze what exists (imports, clients), then collect
        # the young generation rarely and the old one almost never while draining.
        thresholds = gc.get_threshold()
        gc.freeze()
        gc.set_threshold(100_000, 50, 1_000)
        try:
            drain.drain()
            if result.loaded[SHORT_NAME[names.TOPIC_DECISIONS]]:
                self._derive_copies(self.beside.acquire())
        finally:
            self.parsing.close()
            self.beside.release(settle=False)  # a write still running is waited for: the warehouse closes after it
            drain.close()
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
            # read first: while the clock is behind the mark, the derivation takes nothing and leaves the mark
            behind_ms = decision_copies.clock_behind_ms(client)
            decision_copies.derive(client, settle_ms)
            if behind_ms:
                log.warning(
                    "routerscope: warning: the warehouse's clock is %.1f s behind the last derivation of decision "
                    "copies; decisions stored until it catches up stay pending (metric windows read the 7-day "
                    "look-back for them: the same counts, more slowly). Check the clock (NTP) of the warehouse's host",
                    behind_ms / 1000,
                )
        except Exception as exc:
            log.warning(
                "routerscope: warning: the later copies of decisions were not derived (%s); metric "
                "windows read the 7-day look-back until the next load derives them",
                first_line(exc),
            )


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


def progress_bar() -> Callable[[int], None]:
    """Counts on stderr while a long drain runs (a progress bar on a terminal, nothing otherwise)."""
    bar = tqdm(desc="loading", unit=" events", disable=None, leave=False, mininterval=0.5)
    return bar.update


def load(settings: Settings, progress: Callable[[int], object] | None = None, **options) -> LoadResult:
    """Apply pending migrations, then drain the topics into the warehouse (the warehouse opened for
    each unit of work, never held while waiting on the broker). `options`: LoadConfig's fields."""
    return Loader(settings, LoadConfig(**options), progress=progress).run()
