"""Helpers of the loader's tests against a real broker and a real embedded warehouse: produce raw payloads,
query the warehouse, and valid decision events in bulk."""

from __future__ import annotations

import uuid
from datetime import timedelta

from routerscope.warehouse.client import open_warehouse
from routerscope.warehouse.migrate import migrate
from tests.support.events import BASE_TIME, capability_miss, decision, dumps, iso, quality_fallback

FAST = dict(idle_timeout_s=0.5)


def produce(settings, topic: str, payloads: list[bytes | None], keys: list[bytes | None] | None = None) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": settings.kafka_bootstrap(), "linger.ms": 5, "queue.buffering.max.messages": 1_000_000}
    )
    for i, payload in enumerate(payloads):
        key = keys[i] if keys else str(i % 101).encode()
        producer.produce(topic, value=payload, key=key)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0


def query(settings, sql: str, **parameters):
    with open_warehouse(settings, purpose="test") as client:
        migrate(client)
        return client.query(sql, parameters=parameters).result_rows


def scalar(settings, sql: str, **parameters):
    return query(settings, sql, **parameters)[0][0]


def decision_id(i: int) -> str:
    return str(uuid.UUID(int=i + 1))


def valid_decisions(n: int, start: int = 0) -> list[bytes]:
    makers = (decision, quality_fallback, capability_miss)
    return [
        dumps(
            makers[i % 3](
                event_id=decision_id(i),
                request_id=f"req-{i}",
                session_id=f"sess-{i % 97}",
                event_time=iso(BASE_TIME + timedelta(milliseconds=i)),
            )
        )
        for i in range(start, start + n)
    ]
