"""Publishing to Kafka with kafka-python: the producer factory and `routerscope produce FILE`.

`produce` sends each line of a JSON-lines file as one message, exactly as it is — malformed lines
included, for the loader to quarantine — keyed per DESIGN §2 when the line is a JSON object that
carries the key field.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import msgspec

from routerscope import kafka, names
from routerscope.errors import BrokerUnavailable
from routerscope.settings import Settings

_decode = msgspec.json.Decoder().decode


def make_producer(settings: Settings, bootstrap: str | None = None, **overrides):
    """An idempotent kafka-python producer (`acks=all`).

    `enable_idempotence=True` is explicit: kafka-python 3 silently turns idempotence off under
    `acks=1`, `retries=0` or more than 5 requests in flight, and an explicit request makes such a
    conflict fail loudly instead."""
    from kafka import KafkaProducer

    options = dict(
        bootstrap_servers=(bootstrap or settings.kafka_bootstrap()).split(","),
        acks="all",
        enable_idempotence=True,
        linger_ms=20,
        batch_size=512 * 1024,
        max_block_ms=10_000,
        request_timeout_ms=15_000,
        **settings.kafka_security.kafka_python(),
    )
    options.update(overrides)
    return KafkaProducer(**options)


def message_key(topic: str, line: bytes) -> bytes | None:
    """The DESIGN §2 key of a message, or None when the line is not an object carrying it."""
    key_field = names.TOPIC_KEY_FIELD[topic]
    try:
        obj = _decode(line)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return None
    if isinstance(obj, dict) and isinstance(obj.get(key_field), str):
        return obj[key_field].encode()
    return None


def iter_lines(path: Path) -> Iterable[bytes]:
    """Each line without its line ending; blank lines are not messages and are skipped."""
    with open(path, "rb") as fh:
        for line in fh:
            line = line.rstrip(b"\r\n")
            if line.strip():
                yield line


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
    lines: Iterable[bytes],
    progress: Callable[[int], None] | None = None,
) -> ProduceResult:
    """Publish each line as one message; returns what was acknowledged by the broker."""
    result = ProduceResult(topic=topic)
    producer = make_producer(settings)

    def on_error(exc):
        result.failed += 1
        if len(result.errors) < 5:
            result.errors.append(repr(exc))

    try:
        pending = attempted = 0
        for line in lines:
            key = message_key(topic, line)
            result.unkeyed += key is None
            producer.send(topic, key=key, value=line).add_errback(on_error)
            pending += 1
            attempted += 1
            if progress and pending >= 1000:
                progress(pending)
                pending = 0
        producer.flush(timeout=60)
        if progress and pending:
            progress(pending)
    except Exception as exc:  # kafka-python raises KafkaTimeoutError and friends
        raise BrokerUnavailable(f"publishing to {topic} failed: {exc}; is the broker still up?") from None
    finally:
        producer.close(timeout=10)
    result.sent = attempted - result.failed
    return result


def produce_file(settings: Settings, path: Path, topic_short: str, show_progress: bool = True) -> ProduceResult:
    topic = names.TOPICS[topic_short]
    kafka.check_reachable(settings)  # before the progress bar, so an outage is one clear line
    from tqdm import tqdm

    with tqdm(desc=f"produce {topic}", unit=" msg", disable=not show_progress, file=sys.stderr) as bar:
        return produce_lines(settings, topic, iter_lines(path), progress=bar.update)
