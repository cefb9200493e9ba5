"""The OTLP topic → decision events (docs/otlp.md): the first step of every whole load.

`routerscope collect` and an OpenTelemetry Collector's Kafka exporter (`encoding: otlp_proto`) write
OTLP trace messages to one topic (`ROUTERSCOPE_OTLP_TOPIC`, default `otlp_spans`). Before the loader
drains the three contract topics, this step reads that topic from its stored positions to its end,
merges the spans of each trace (a trace may come in several messages), maps each trace to a decision
event (`routerscope.instrumentation.otlp.mapping`) and produces the events to `router.decisions.v1`, keyed by
session like every decision: the same loader then validates them against the contract and quarantines
what breaks it, in the same run. A trace that maps to nothing, and a message that is not OTLP, go to
`quarantine` here, with the reason (`otlp.*`) and the coordinates of the trace's first message; the
quarantine keeps the spans' kept attributes as JSON, never the message as it came (which may hold
prompts).

Effectively once: the positions (`ingest_offsets`, consumer `routerscope-otlp`) are stored after the
events are delivered and the quarantine rows written. A step that dies in between maps the same
traces again on the next run into the same events: an event's id is derived from its trace id, so
the warehouse keeps one of each (and the quarantine is keyed on the message's offset). A trace whose
root span has not arrived, with its newest message younger than ROOT_WAIT_MS, is left for a later load:
the position of its partition stays at its first message, so what follows it is read (and mapped into
the same events) again.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from routerscope.contract.events import DecisionEvent
from routerscope.core import interrupts, names
from routerscope.core.errors import BrokerUnavailable
from routerscope.core.kafka import Option, librdkafka_config
from routerscope.core.settings import Settings
from routerscope.instrumentation import pii
from routerscope.instrumentation.otlp import proto
from routerscope.instrumentation.otlp.mapping import Mapping, map_trace
from routerscope.warehouse.client import open_warehouse
from routerscope.warehouse.ingest.rows import kafka_time
from routerscope.warehouse.migrate import migrate
from routerscope.warehouse.queries import decisions as decision_queries
from routerscope.warehouse.queries import ingest_offsets
from routerscope.warehouse.schema import OFFSET_COLUMNS, QUARANTINE_COLUMNS

NOT_OTLP = "otlp.invalid"
# spans of a trace whose decision an earlier load stored (late spans, or an export sent again): the stored decision
# stands, these are kept in the quarantine (a second event under the same id would differ, a blocking DQ failure)
ALREADY_MAPPED = "otlp.already_mapped"
# A trace whose local root span has not arrived is left for a later load while its newest message is
# younger than this (by Kafka timestamp): its root is probably still on its way (an exporter sends a
# trace's children first, in earlier batches when the trace is long). Older, it is mapped as it is.
ROOT_WAIT_MS = 30_000
IDLE_S = 1.0
# A load maps at most this many messages (each usually a whole trace); the next load takes the rest.
MAX_MESSAGES = 200_000
TIMEOUT_S = 10.0


@dataclass
class OtlpResult:
    messages: int = 0
    traces: int = 0
    mapped: int = 0  # events produced to the decisions topic (the loader validates them)
    deferred: int = 0  # traces waiting for their root span (mapped by a later load)
    quarantined: dict[str, int] = field(default_factory=dict)  # reason -> traces (or messages, for otlp.invalid)

    def as_dict(self) -> dict:
        return {
            "messages": self.messages,
            "traces": self.traces,
            "mapped": self.mapped,
            "quarantined": self.quarantined,
        } | ({"deferred": self.deferred} if self.deferred else {})


@dataclass
class _Trace:
    spans: list = field(default_factory=list)
    first: tuple = ()  # (partition, offset, key, timestamp) of its first message
    rooted: bool = False  # its local root span is in
    newest_ms: int = 0  # the Kafka timestamp of its newest message


def map_messages(
    messages,
    mapping,
    now_ms: int | None = None,
    root_wait_ms: int = ROOT_WAIT_MS,
    unread: frozenset = frozenset(),
    stored: Callable[[list[str]], set[str]] | None = None,
) -> tuple[list, list[list], OtlpResult, dict[int, int]]:
    """(partition, offset, key, timestamp, value) messages → (events, quarantine rows, counts, and per
    partition the first offset of a trace left for later: its root is missing and either its newest message
    is younger than `root_wait_ms` before `now_ms`, or its partition was not read to its end (`unread`:
    the rest of the trace may be in what is left). `stored(event_ids)` names the ids the warehouse already
    holds: those traces' spans are quarantined as `otlp.already_mapped`, never a second, different event.
    Pure but for `stored`."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms

    result = OtlpResult()
    traces: dict[str, _Trace] = {}
    rows: list[list] = []
    for partition, offset, key, timestamp, value in messages:
        result.messages += 1
        where = (partition, offset, key, timestamp)
        try:
            spans = proto.views(proto.decode(value or b""))
        except proto.BadRequest as exc:
            size = len(value or b"")
            digest = hashlib.sha256(value or b"").hexdigest()
            rows.append([*where, b"", [NOT_OTLP], f"{exc}; {size} bytes, sha256 {digest} (not kept: may hold content)"])
            result.quarantined[NOT_OTLP] = result.quarantined.get(NOT_OTLP, 0) + 1
            continue
        sent_ms = timestamp[1] if timestamp and timestamp[0] else now_ms
        for span in spans:
            trace = traces.setdefault(span.trace_id, _Trace())
            if not trace.first:
                trace.first = where
            trace.spans.append(span)
            trace.rooted = trace.rooted or not span.parent_id or span.remote_parent
            trace.newest_ms = max(trace.newest_ms, sent_ms)
    events = []
    deferred: dict[int, int] = {}
    unmapped: dict[tuple, tuple[list, set]] = {}  # first message -> (summaries, reasons)

    def quarantine(trace: _Trace, reason: str) -> None:
        result.quarantined[reason] = result.quarantined.get(reason, 0) + 1
        summaries, reasons = unmapped.setdefault(trace.first, ([], set()))
        summaries.append(proto.summary(trace.spans))
        reasons.add(reason)

    mapped: list[tuple[DecisionEvent, _Trace]] = []
    for trace in traces.values():
        if not trace.rooted and (now_ms - trace.newest_ms < root_wait_ms or trace.first[0] in unread):
            partition, offset = trace.first[0], trace.first[1]
            deferred[partition] = min(offset, deferred.get(partition, offset))
            result.deferred += 1
            continue
        result.traces += 1
        event, reason = map_trace(trace.spans, mapping)
        if event is None:
            quarantine(trace, str(reason))  # map_trace names a rule whenever it maps no event
        else:
            mapped.append((event, trace))
    known = stored([str(e.event_id) for e, _ in mapped]) if stored is not None and mapped else set()
    for event, trace in mapped:
        if str(event.event_id) in known:
            quarantine(trace, ALREADY_MAPPED)
            continue
        events.append(event)
        result.mapped += 1
    for where, (summaries, reasons) in unmapped.items():
        raw = b"[" + b",".join(summaries) + b"]"
        rules = sorted(reasons)
        detail = (
            f"spans of {len(summaries)} trace(s) whose decision an earlier load stored (late spans or an export "
            "sent again): the stored decision stands"
            if rules == [ALREADY_MAPPED]
            else f"{len(summaries)} trace(s) mapped to no decision: {', '.join(rules)}"
        )
        rows.append([*where, raw[:65536], rules, detail])
    return events, rows, result, deferred


def bridge(settings: Settings, *, client=None, mapping=None) -> OtlpResult:
    """Map what is new in the OTLP topic into decision events (produced to router.decisions.v1) and
    quarantine rows; store the positions. Called by the loader, under its load lock."""
    topic = settings.otlp_topic
    options: dict[str, Option] = {
        "group.id": names.CONSUMER_OTLP,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
    }
    consumer = Consumer(librdkafka_config(settings, **options))
    try:
        partitions = _partitions_with_messages(consumer, topic)
        if not partitions:
            return OtlpResult()  # no such topic (nobody sends OTLP here), or an empty one

        def unit(migrated: bool = False):
            return open_warehouse(settings, purpose="load", migrated=migrated) if client is None else _Given(client)

        with unit(migrated=True) as c:
            if client is not None:
                migrate(c)
            positions = ingest_offsets.stored_positions(c, names.CONSUMER_OTLP)
        starts = {p: positions.get((topic, p), (0, ""))[0] for p in partitions}
        messages, nexts, unread = _read_new(consumer, topic, starts)
        if not messages:
            return OtlpResult()
        if pii._key is None:
            pii.configure(settings.home)

        def stored(event_ids: list[str]) -> set[str]:
            with unit() as c:
                return decision_queries.stored_event_ids(c, event_ids)

        events, rows, result, deferred = map_messages(
            messages, mapping or Mapping.load(settings.otlp_mapping), unread=unread, stored=stored
        )
        nexts.update(deferred)  # read again from there by the next load
        if events:
            _produce(settings, events)
        with unit() as c:
            _store(c, topic, rows, starts, nexts)
        return result
    finally:
        consumer.close()


def _partitions_with_messages(consumer: Consumer, topic: str) -> list[int]:
    """The OTLP topic's partitions, or none when the topic does not exist or every partition is empty (exact:
    only a non-empty partition's end can be short)."""
    try:
        metadata = consumer.list_topics(topic, timeout=TIMEOUT_S)
    except KafkaException as exc:
        raise BrokerUnavailable(f"cannot read the OTLP topic {topic}: {exc}") from None
    info = metadata.topics.get(topic)
    if info is None or info.error is not None or not info.partitions:
        return []
    partitions = sorted(info.partitions)
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT_S)[1] for p in partitions}
    return partitions if any(ends.values()) else []


def _read_new(consumer: Consumer, topic: str, starts: dict[int, int]) -> tuple[list[tuple], dict[int, int], frozenset]:
    """What is new in the topic from `starts` (per partition), until every partition reached its end, nothing
    arrived for IDLE_S or MAX_MESSAGES were read: (partition, offset, key, timestamp, value) messages, the next
    offset per partition, and the partitions not read to their end."""
    consumer.assign([TopicPartition(topic, p, offset) for p, offset in starts.items()])
    messages: list[tuple] = []
    nexts, pending = dict(starts), set(starts)
    last = time.monotonic()
    while pending and time.monotonic() - last < IDLE_S and len(messages) < MAX_MESSAGES:
        interrupts.raise_pending()  # a Ctrl-C or SIGTERM Python swallowed (routerscope/core/interrupts.py)
        for m in consumer.consume(num_messages=10_000, timeout=0.2):
            error = m.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    pending.discard(m.partition())
                continue
            last = time.monotonic()
            partition, offset = m.partition(), m.offset()
            messages.append((partition, offset, m.key(), m.timestamp(), m.value()))
            if partition is not None and offset is not None:  # always, for a message (typed optional)
                nexts[partition] = offset + 1
    return messages, nexts, frozenset(pending)


def _produce(settings: Settings, events: list) -> None:
    """Deliver the mapped events to the decisions topic, keyed by session, or raise: positions are stored only
    after every event is delivered."""
    failures: list[str] = []
    options: dict[str, Option] = {"enable.idempotence": True, "linger.ms": 20, "compression.type": "gzip"}
    producer = Producer(librdkafka_config(settings, **options))
    for event in events:
        producer.produce(
            names.TOPIC_DECISIONS,
            value=event.to_json(),
            key=event.session_id.encode(),
            on_delivery=lambda err, _m: failures.append(err.str()) if err is not None else None,
        )
        producer.poll(0)
    left = producer.flush(30)
    if left or failures:
        raise BrokerUnavailable(
            f"{left + len(failures)} decision(s) mapped from OTLP were not delivered "
            f"({(failures or ['timed out'])[0]}); the next load maps them again"
        )


def _store(client, topic: str, rows: list[list], starts: dict[int, int], nexts: dict[int, int]) -> None:
    """The quarantine rows, then the positions that moved (in that order: a crash re-maps, never skips)."""
    if rows:
        columns = [list(col) for col in zip(*[_quarantine_row(topic, r) for r in rows])]
        client.insert(
            f"{names.DATABASE}.{names.TABLE_QUARANTINE}",
            columns,
            column_names=list(QUARANTINE_COLUMNS),
            column_oriented=True,
        )
    token = f"otlp;{uuid.uuid4().hex}"
    positions = [(names.CONSUMER_OTLP, topic, p, nexts[p], token, 0, 0, "") for p in starts if nexts[p] != starts[p]]
    if positions:
        client.insert(f"{names.DATABASE}.{names.TABLE_INGEST_OFFSETS}", positions, column_names=list(OFFSET_COLUMNS))


def _quarantine_row(topic: str, row: list) -> tuple:
    partition, offset, key, timestamp, raw, rules, error = row
    return (
        topic,
        partition,
        offset,
        None if key is None else key.decode("utf-8", "replace"),
        kafka_time(timestamp),
        raw,
        rules,
        error,
    )


class _Given:
    """A caller's client as a unit of work (not closed after it)."""

    def __init__(self, client):
        self.client = client

    def __enter__(self):
        return self.client

    def __exit__(self, *exc):
        return False
