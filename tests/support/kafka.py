"""Kafka as the tests read it: every message of a topic from the start, a broker brought up where the
`down_broker` fixture's settings point, and the Kafka admin clients the project makes, counted."""

from __future__ import annotations

import time

from routerscope.core import broker, kafka


def consume_all(bootstrap: str, topic: str, expect: int, timeout_s: float = 30) -> list:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "test-read", "enable.auto.commit": False, "log_level": 0}
    )
    # every partition the topic has (a producer's metadata request may have auto-created it first)
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    got, deadline, idle = [], time.monotonic() + timeout_s, 0
    while time.monotonic() < deadline and (len(got) < expect or idle < 3):
        batch = [m for m in consumer.consume(1000, timeout=0.5) if m.error() is None]
        idle = 0 if batch else idle + 1
        got += batch
    consumer.close()
    return got


def start(state):
    broker.start(state["settings"], port=state["port"])


def count_admin_clients(monkeypatch) -> list[str]:
    """The admin clients `routerscope.core.kafka` makes from now on, one entry each: its constructor is watched, not
    replaced (every call goes through to the real one)."""
    made: list[str] = []
    real_admin = kafka.admin

    def watched(*args, **kwargs):
        made.append("admin")
        return real_admin(*args, **kwargs)

    monkeypatch.setattr(kafka, "admin", watched)
    return made
