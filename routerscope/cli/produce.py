"""`routerscope produce FILE`: a JSON-lines file to Kafka with kafka-python, through the router's own
producer configuration (`routerscope.core.kafka.producer_config`).

`produce` sends each line of a JSON-lines file as one message, exactly as it is — malformed lines
included, for the loader to quarantine — keyed per docs/contract.md when the line is a JSON object that
carries the key field. One exception: a valid event whose free-text fields hold an e-mail address, a
phone or a card number is sent with those fields scrubbed (routerscope.instrumentation.pii), as the router's own
events are (the rest of the object as written); its key is the scrubbed one.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
from kafka import KafkaProducer
from kafka.errors import KafkaError, KafkaTimeoutError
from tqdm import tqdm

from routerscope.contract.validation import CONTRACTS
from routerscope.core import kafka, names
from routerscope.core.errors import BrokerUnavailable
from routerscope.core.kafka import producer_config
from routerscope.core.settings import Settings
from routerscope.instrumentation.pii import scrub_event

_decode = msgspec.json.Decoder().decode


# A batch command may wait longer for the broker than the router's request path does.
PRODUCE_TIMEOUTS = {"max_block_ms": 10_000, "request_timeout_ms": 15_000}


def make_producer(settings: Settings):
    """The router's idempotent kafka-python producer (`acks=all`), with the command's longer timeouts."""
    return KafkaProducer(**producer_config(settings, **PRODUCE_TIMEOUTS))


def message_key(topic: str, line: bytes) -> bytes | None:
    """The docs/contract.md key of a message, or None when the line is not an object carrying it."""
    key_field = names.TOPIC_KEY_FIELD[topic]
    try:
        obj = _decode(line)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    if isinstance(obj, dict) and isinstance(obj.get(key_field), str):
        return obj[key_field].encode()
    return None


def scrubbed_line(topic: str, line: bytes) -> bytes:
    """The line as sent: a valid event with its free-text fields scrubbed (re-encoded only when one
    changed); anything else exactly as it is."""
    event, _rules = CONTRACTS[topic].parse(line)
    if event is None:
        return line
    scrubbed = scrub_event(event)
    if scrubbed is event:
        return line
    # only the scrubbed members change: the object as written (its schema version's shape) otherwise
    obj = _decode(line)
    for name, value in obj.items():
        if isinstance(value, str) and getattr(scrubbed, name, value) != value:
            obj[name] = getattr(scrubbed, name)
    return msgspec.json.encode(obj)


# kafka-python's default `max_request_size`: a longer line cannot be sent as one message.
MAX_LINE_BYTES = 1024 * 1024 - 512


def iter_lines(path: Path) -> Iterable[tuple[int, bytes]]:
    """(line number, line without its line ending); blank lines are not messages and are skipped."""
    with open(path, "rb") as fh:
        for number, line in enumerate(fh, 1):
            line = line.rstrip(b"\r\n")
            if line.strip():
                yield number, line


@dataclass
class ProduceResult:
    topic: str
    sent: int = 0
    failed: int = 0
    unkeyed: int = 0
    errors: list[str] = field(default_factory=list)


def produce_lines(
    settings: Settings,
    topic: str,
    lines: Iterable[tuple[int, bytes]],
    progress: Callable[[int], None] | None = None,
) -> ProduceResult:
    """Publish each (line number, line) as one message; returns what was acknowledged by the broker.

    A line that cannot be a message (longer than MAX_LINE_BYTES) or that the client refuses is
    counted as failed, with its line number, and the rest are still sent. Only a broker that stops
    answering ends the run early."""
    result = ProduceResult(topic=topic)
    producer = make_producer(settings)

    unacknowledged = [0]  # sent, then failed at the broker

    def fail(number: int, reason: str, sent: bool = False) -> None:
        result.failed += 1
        unacknowledged[0] += sent
        if len(result.errors) < 5:
            result.errors.append(f"line {number}: {reason}")

    attempted = 0
    try:
        pending = 0
        for number, line in lines:
            if len(line) > MAX_LINE_BYTES:
                fail(number, f"{len(line)} bytes, more than the largest message sent ({MAX_LINE_BYTES} bytes)")
                continue
            line = scrubbed_line(topic, line)
            key = message_key(topic, line)
            result.unkeyed += key is None
            try:
                future = producer.send(topic, key=key, value=line)
            except KafkaTimeoutError:
                raise
            except KafkaError as exc:  # refused by the client (e.g. too large once encoded)
                fail(number, repr(exc))
                continue
            future.add_errback(lambda exc, number=number: fail(number, repr(exc), sent=True))
            attempted += 1
            pending += 1
            if progress and pending >= 1000:
                progress(pending)
                pending = 0
        producer.flush(timeout=60)
        if progress and pending:
            progress(pending)
    except Exception as exc:  # kafka-python raises KafkaTimeoutError and friends
        where = f" after {attempted} message(s)" if attempted else ""
        raise BrokerUnavailable(f"publishing to {topic} failed{where}: {exc!r}; is the broker still up?") from None
    finally:
        producer.close(timeout=10)
    result.sent = attempted - unacknowledged[0]
    return result


def produce_file(settings: Settings, path: Path, topic_short: str, show_progress: bool = True) -> ProduceResult:
    topic = names.TOPICS[topic_short]
    kafka.check_reachable(settings)  # before the progress bar, so an outage is one clear line
    with tqdm(desc=f"produce {topic}", unit=" msg", disable=not show_progress, file=sys.stderr) as bar:
        return produce_lines(settings, topic, iter_lines(path), progress=bar.update)
