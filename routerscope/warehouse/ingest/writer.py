"""Writing one batch of the loader (routerscope/warehouse/ingest/loader.py) into the warehouse: the facts and the
ledger (the validated events' JSON lines, routerscope/warehouse/queries/json_rows.py), the quarantine, and the
positions last; an insert the warehouse refuses split in halves until the refused rows are found, a fault of the
warehouse (its disk, its memory, the server gone) never taken as a verdict on the rows. `BesideWriter` writes
each batch in a thread beside the drain and keeps the warehouse open while batches keep coming."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import TopicPartition

from routerscope.core import names
from routerscope.core.errors import RouterscopeError, WarehouseError
from routerscope.core.settings import Settings
from routerscope.warehouse.client import check_free_space, open_warehouse, outage, outage_error
from routerscope.warehouse.ingest.batch import Batch, fingerprint
from routerscope.warehouse.ingest.rows import FACTS
from routerscope.warehouse.ingest.state import LoadResult, PartitionState
from routerscope.warehouse.queries import json_rows, loaded_messages
from routerscope.warehouse.schema import LEDGER_COLUMNS, OFFSET_COLUMNS, QUARANTINE_COLUMNS

# ClickHouse refuses an insert touching more than `max_partitions_per_insert_block` (100) partitions;
# `decisions` is partitioned by month, so a batch is inserted in groups of at most this many months.
MAX_MONTHS_PER_INSERT = 50
QUARANTINE_RAW_REFUSED = "quarantine.raw_refused"
# Replacing on insert would sort-merge duplicates inside each block: ~30 % of the insert time, and
# duplicates are rare and folded by background merges and FINAL anyway.
INSERT_SETTINGS = {"optimize_on_insert": 0}
SHORT_NAME = {topic: short for short, topic in names.TOPICS.items()}


@dataclass
class Written:
    """What writing a batch stored: its counts per (topic, partition) ([loaded, quarantined]) and its
    position rows (ingest_offsets)."""

    counts: dict
    rows: list[tuple]


@dataclass
class Tally:
    """Where written batches go in the run: its partition states (their positions) and its result (counts)."""

    states: dict[tuple[str, int], PartitionState]
    result: LoadResult

    def apply(self, batch: Batch, written: Written) -> None:
        """A written batch's positions and counts, into the run's states and result."""
        result, states = self.result, self.states
        for (t, _p), (loaded, quarantined) in written.counts.items():
            result.loaded[SHORT_NAME[t]] += loaded
            result.quarantined[SHORT_NAME[t]] += quarantined
        for (t, p), (_first, last) in batch.ranges.items():
            states[(t, p)].stored = last + 1
        for row in written.rows:
            states[(row[1], row[2])].fingerprint = row[-1]
        result.batches += 1


class Writer:
    """The inserts of one run: each batch's facts and ledger, its quarantine, then its positions (in that
    order: a crash leaves rows without a position, never a position without its rows). Every insert carries
    a token naming the run and the offsets it covers (loader.py's docstring says why)."""

    def __init__(self, settings: Settings, consumer_name: str, run_id: str):
        self.settings = settings
        self.consumer_name = consumer_name
        self.run_id = run_id
        self._json_rows_ready = False  # the facts' input tables and views exist (created on the first batch)

    def _insert(self, client, table: str, columns, data: list, token: str) -> None:
        """One column-oriented insert, deduplicated by this run and `token` if it arrives twice."""
        client.insert(
            f"{names.DATABASE}.{table}",
            data,
            column_names=list(columns),
            column_oriented=True,
            settings={"insert_deduplication_token": f"{self.run_id};{token}", **INSERT_SETTINGS},
        )

    def write(self, client, batch: Batch) -> Written:
        """The batch's inserts, the positions last. Touches nothing but the warehouse and `batch`: it runs
        beside the drain (`BesideWriter`); `Tally.apply` takes the outcome into the run."""
        for topic, (*_, lines) in batch.events.items():
            if lines:
                self._insert_facts(client, batch, topic)
        if batch.ledger[0]:
            self._insert(client, names.TABLE_LOADED_MESSAGES, LEDGER_COLUMNS, batch.ledger, "ledger;" + batch.token())
        if batch.quarantine[0]:
            self._insert_quarantine(client, batch)
        return Written(batch.counts, self._insert_positions(client, batch, batch.counts))

    def _insert_positions(self, client, batch: Batch, counts) -> list[tuple]:
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

    def _insert_facts(self, client, batch: Batch, topic: str) -> None:
        """The facts and ledger rows of one topic: the events' JSON lines in one insert through the
        topic's input table (routerscope/warehouse/queries/json_rows.py), in groups of at most
        MAX_MONTHS_PER_INSERT months; rows the warehouse refuses are moved to the quarantine
        (`insert.rejected`)."""
        months, partitions, offsets, messages, lines = batch.events[topic]
        table = FACTS[topic][0]
        self._ensure_json_rows(client)
        token = "facts;" + batch.token([topic])
        groups = _month_groups(months)
        rejected: list[tuple] = []
        errors: list[str] = []
        insert = self._json_lines_insert(client, topic)
        for g, indexes in enumerate(groups):
            group_token = token if len(groups) == 1 else f"{token};months-{g}"
            pick = (lambda xs: xs) if indexes is None else (lambda xs, ix=indexes: [xs[i] for i in ix])
            rows = list(zip(pick(partitions), pick(offsets), pick(messages), pick(lines)))
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

    def _json_lines_insert(self, client, topic: str) -> Callable[[list, str], None]:
        """The insert of (partition, offset, message, line) rows of one topic: their lines, JSONEachRow."""

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

        return insert

    def _ensure_json_rows(self, client) -> None:
        """The input tables and views the facts' JSON lines go through, once per run."""
        if self._json_rows_ready:
            return
        for statements in json_rows.CREATE.values():
            for sql in statements:
                client.command(sql)
        self._json_rows_ready = True

    def _insert_quarantine(self, client, batch: Batch) -> None:
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
        deduplicated by its own token) until the refused rows are single and known, into `rejected` with
        the server's message in `errors`. A fault of the warehouse (routerscope.warehouse.client.outage) is
        raised at once, as is a refusal met while its disk is below the floor: neither says anything about
        the rows."""
        try:
            insert(rows, token)
            return
        except Exception as exc:
            if outage(exc):
                raise
            check_free_space(self.settings)
            message = first_line(exc)
        if len(rows) == 1:
            rejected.append(rows[0])
            errors.append(message)
            return
        middle = len(rows) // 2
        self._insert_or_split(insert, rows[:middle], f"{token};a", rejected, errors)
        self._insert_or_split(insert, rows[middle:], f"{token};b", rejected, errors)


def _month_groups(months: list[int]) -> Sequence[list[int] | None]:
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


def first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [repr(exc)])[0][:300]


@dataclass
class _Writing:
    """A batch being written beside the drain (BesideWriter.flush), and where its outcome goes."""

    batch: Batch
    consumer: Any
    tally: Tally
    thread: threading.Thread = field(init=False)  # set before it starts (its target takes this record)
    written: Written | None = None  # the outcome, once the thread ended without an error
    error: BaseException | None = None


class BesideWriter:
    """Writes each batch in a thread beside the drain, one at a time and in order, with the warehouse kept
    open while batches keep coming: the embedded warehouse runs an insert without holding the GIL, so
    consuming and parsing the next batch go on meanwhile. `client`: the caller's, used throughout;
    else the warehouse is opened for each unit of work (`unit`) or held for the flushes (`acquire`)."""

    def __init__(self, settings: Settings, writer: Writer, client=None):
        self.settings = settings
        self.writer = writer
        self.client = client  # the caller's client, used for every unit of work (None: opened here)
        # (context manager, client): the warehouse kept open while messages flow
        self.held: tuple[Any, Any] | None = None
        self._writing: _Writing | None = None  # the batch being written beside the drain (`flush`)

    @contextmanager
    def unit(self) -> Iterator:
        """One unit of warehouse work: the caller's client, or the warehouse opened (and, embedded,
        locked) for just this unit and closed straight after."""
        if self.client is not None:
            yield self.client
            return
        with open_warehouse(self.settings, purpose="load") as client:
            yield client

    def acquire(self):
        """The warehouse for a flush, kept open while messages keep arriving (opening it costs about
        0.1 s); `release` closes it before any wait on the broker."""
        if self.client is not None:
            return self.client
        if self.held is None:
            manager = open_warehouse(self.settings, purpose="load")
            self.held = (manager, manager.__enter__())
        return self.held[1]

    def release(self, settle: bool = True) -> None:
        """Close the warehouse held for flushes, once the batch being written is settled (`settle`
        False: only waited for, its outcome dropped, on the way out of a failed run)."""
        if settle:
            self.settle()
        elif self._writing is not None:
            self._writing.thread.join()
            self._writing = None
        held, self.held = self.held, None
        if held is not None:
            held[0].__exit__(None, None, None)

    def flush(self, batch: Batch, consumer, tally: Tally) -> None:
        """Hand `batch` to the warehouse, written in a thread beside the drain. One batch is written at a
        time, in order: the previous one's write is settled first (its positions applied, or its error
        raised here)."""
        if not batch.ranges:
            return
        self.settle()
        try:
            check_free_space(self.settings)  # stop cleanly before a write can fail half way
            client = self.acquire()
        except BaseException as exc:
            raise self.failed(exc) from exc
        writing = _Writing(batch, consumer, tally)
        writing.thread = threading.Thread(
            target=self._write_beside, args=(client, writing), name="routerscope-load-write", daemon=True
        )
        self._writing = writing
        writing.thread.start()

    def _write_beside(self, client, writing: _Writing) -> None:
        try:
            writing.written = self.writer.write(client, writing.batch)
        except BaseException as exc:  # raised in the drain's thread when it settles this write
            writing.error = exc

    def settle(self) -> None:
        """Wait for the batch being written: apply its positions and counts, or raise its error."""
        writing = self._writing
        if writing is None:
            return
        writing.thread.join()
        self._writing = None  # only now: a Ctrl-C during the wait leaves it for the run's end to wait for
        error, written = writing.error, writing.written
        if error is not None or written is None:
            error = error or RuntimeError("the write ended without an outcome")
            raise self.failed(error) from error
        writing.tally.apply(writing.batch, written)
        # Best effort: the group's committed offsets are for lag tools, never read back here.
        try:
            writing.consumer.commit(
                offsets=[TopicPartition(t, p, last + 1) for (t, p), (first, last) in writing.batch.ranges.items()],
                asynchronous=True,
            )
        except Exception:
            pass

    def failed(self, exc: BaseException) -> BaseException:
        """What a failed write raises, the warehouse released first: the project's own errors and an
        interrupt as they are, a warehouse outage as one line naming it, anything else as a
        WarehouseError (clickhouse-connect and chDB raise several unrelated types)."""
        self.release(settle=False)
        if isinstance(exc, RouterscopeError) or not isinstance(exc, Exception):
            return exc
        if outage(exc):
            return outage_error(self.settings, exc, "writing a batch to the warehouse")
        return WarehouseError(
            f"writing a batch to the warehouse failed ({first_line(exc)}); nothing past the last stored "
            "position was recorded as loaded, so the next `routerscope load` resumes there"
        )
