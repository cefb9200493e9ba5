"""One batch of the loader (routerscope/warehouse/ingest/loader.py): the messages consumed since the last flush,
parsed and validated by the contract (routerscope/contract/validation.py), the invalid ones quarantined with
every rule they break, and the insert token naming the offset ranges it covers. Also the queue
of chunks waiting to be parsed (here or by the parse worker, routerscope/warehouse/ingest/parsing.py) and added
to a batch in the order they were consumed."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import Future
from typing import Any

from routerscope.warehouse.ingest.parsing import MIN_WORKER_CHUNK, WORKER_TIMEOUT_S, ParseWorker, parse_chunk
from routerscope.warehouse.ingest.rows import FACTS, kafka_time
from routerscope.warehouse.schema import LEDGER_COLUMNS, QUARANTINE_COLUMNS

INSERT_REJECTED = "insert.rejected"
# The quarantine keeps this much of a message's bytes (an oversized one: its head, size and sha256).
QUARANTINE_RAW_MAX = 64 * 1024


def fingerprint(key: bytes | None, value: bytes | None) -> str:
    """What a position remembers of the last message it covers (hash of key and value)."""
    h = hashlib.blake2b(digest_size=16)
    for part in (key, value):
        h.update(b"\xff" if part is None else len(part).to_bytes(8, "big") + part)
    return h.hexdigest()


class Batch:
    """Messages consumed since the last flush, parsed and validated, ready to insert."""

    def __init__(self) -> None:
        # per topic the valid events' months, partitions, offsets, messages and JSON lines
        self.events: dict[str, tuple[list, list, list, list, list]] = {t: ([], [], [], [], []) for t in FACTS}
        self.quarantine: list[list] = [[] for _ in QUARANTINE_COLUMNS]
        self.ledger: list[list] = [[] for _ in LEDGER_COLUMNS]
        self.ranges: dict[tuple[str, int], list[int]] = {}  # (topic, partition) -> [first, last]
        self.counts: dict[tuple[str, int], list[int]] = {}  # -> [loaded, quarantined]
        self.last: dict[tuple[str, int], Any] = {}  # -> the last message (for its fingerprint)
        self.size = 0

    def add(self, topic: str, partition: int, offset: int, message, landed: bool = False) -> None:
        """Parse one message into the batch. `landed`: its row is already in the warehouse (an earlier run
        died before recording its position): only its ledger row is written again."""
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
        self._add_unloaded(topic, (partition, offset, None, landed), message, parsed)

    def add_chunk(self, topic: str, items: list[tuple], messages: list, parsed: list[tuple]) -> None:
        """`add_parsed` for a whole chunk of one topic: (partition, offset, value, landed) items in consumed
        order, their messages and their `parse_chunk` results. The same lists, in the same order, as adding
        them one by one; the ranges, counts and last messages are taken per partition, and the valid events
        (nearly all of them) appended list by list instead of one message at a time."""
        n = len(items)
        if not n:
            return
        parts = [item[0] for item in items]
        offsets = [item[1] for item in items]
        last_index = dict(zip(parts, range(n)))  # each partition's last item (a later key wins)
        first_index = dict(zip(reversed(parts), range(n - 1, -1, -1)))  # ... and its first
        ranges, counts, last = self.ranges, self.counts, self.last
        for partition, i in last_index.items():
            key = (topic, partition)
            last[key] = messages[i]
            rng = ranges.get(key)
            if rng is None:
                ranges[key] = [offsets[first_index[partition]], offsets[i]]
                counts[key] = [0, 0]
            else:
                rng[1] = offsets[i]
        self.size += n
        months, partitions, kept_offsets, kept, lines = self.events[topic]
        valid = [i for i, one in enumerate(parsed) if one[0] is not None]
        if len(valid) == n:
            lines += [one[0] for one in parsed]
            months += [one[1] for one in parsed]
            partitions += parts
            kept_offsets += offsets
            kept += messages
            valid_parts = parts
        else:
            lines += [parsed[i][0] for i in valid]
            months += [parsed[i][1] for i in valid]
            valid_parts = [parts[i] for i in valid]
            partitions += valid_parts
            kept_offsets += [offsets[i] for i in valid]
            kept += [messages[i] for i in valid]
            for i, one in enumerate(parsed):
                if one[0] is None:
                    self._add_unloaded(topic, items[i], messages[i], one)
        for partition, loaded in Counter(valid_parts).items():
            counts[(topic, partition)][0] += loaded

    def _add_unloaded(self, topic: str, item: tuple, message, parsed: tuple) -> None:
        """An item of a chunk that is not loaded now: valid and landed before (its ledger row again), or invalid
        (quarantined, unless it landed before)."""
        partition, offset, _, landed = item
        if len(parsed) == 4:
            for column, value in zip(self.ledger, (topic, partition, offset, parsed[2], parsed[3])):
                column.append(value)
            return
        if landed:
            return
        self.counts[(topic, partition)][1] += 1
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

    def token(self, topics: Iterable[str] | None = None) -> str:
        """The insert deduplication token: the offset ranges this batch covers."""
        return ",".join(
            f"{t}:{p}:{first}-{last}"
            for (t, p), (first, last) in sorted(self.ranges.items())
            if topics is None or t in topics
        )


def _describe(rules: list[str]) -> str:
    return "broke " + ", ".join(rules)


class ParseQueue:
    """Chunks of consumed messages waiting to join a batch, in consumed order: a large
    chunk parsed by the worker process meanwhile (`use_worker`), the rest here when collected."""

    def __init__(self, use_worker: bool):
        self.use_worker = use_worker
        self.worker: ParseWorker | None = None
        self.pending: list[
            tuple[str, list, list, Future | None]
        ] = []  # (topic, items, messages, future or None), in order

    def enqueue(self, topic: str, items: list, messages: list) -> None:
        """Queue a chunk of one topic's messages for parsing: (partition, offset, value, landed) items as
        `parse_chunk` takes them and their messages. By the worker when it is large (the result is collected
        later, in order), else here when it is collected."""
        future = None
        if self.use_worker and len(items) >= MIN_WORKER_CHUNK:
            if self.worker is None:
                self.worker = ParseWorker()
            future = self.worker.submit(topic, items)
        self.pending.append((topic, items, messages, future))

    def collect(self, batch: Batch, keep: int) -> None:
        """Add parsed chunks to `batch` in the order they were consumed: every chunk at the front
        that is ready, then, waiting for the worker, the oldest ones until at most `keep` are left."""
        while self.pending:
            topic, items, messages, future = self.pending[0]
            if future is not None and not future.done() and len(self.pending) <= keep:
                return
            self.pending.pop(0)
            parsed = None
            if future is not None:
                try:
                    parsed = future.result(timeout=WORKER_TIMEOUT_S)
                except Exception as exc:  # the worker died or hangs: this chunk and the rest are parsed here
                    if self.worker is not None:
                        self.worker.give_up(exc)
            if parsed is None:
                parsed = parse_chunk(topic, items)
            batch.add_chunk(topic, items, messages, parsed)

    def close(self) -> None:
        """Stop the worker, if one started, and drop what was not collected (a run's end)."""
        if self.worker is not None:
            self.worker.close()
        self.pending = []
