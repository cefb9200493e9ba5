"""Where a transition's `policy_event` goes (docs/loop.md#events): the Kafka topic router.policy.v1, keyed by
policy id, each event validated against its contract first and acknowledged by the broker before the
transition counts as published."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from routerscope.contract.validation import CONTRACTS
from routerscope.core import names
from routerscope.core.errors import BrokerUnavailable
from routerscope.core.kafka import producer_config
from routerscope.core.settings import Settings

if TYPE_CHECKING:
    from kafka import KafkaProducer

if TYPE_CHECKING:
    from kafka import KafkaProducer


class InvalidPolicyEvent(ValueError):
    pass


def encode(event: dict) -> bytes:
    """The event as its message, refused when it breaks the contract (the rules named)."""
    raw = json.dumps(event, sort_keys=True).encode()
    _parsed, rules = CONTRACTS[names.TOPIC_POLICY].parse(raw)
    if rules:
        raise InvalidPolicyEvent(f"policy event {event.get('event_id')} breaks {', '.join(rules)}")
    return raw


class KafkaPublisher:
    """`publish(event)` sends one event and waits for the broker's acknowledgement (else BrokerUnavailable:
    the transition stays unsent and the next start publishes it)."""

    def __init__(self, settings: Settings, timeout_s: float = 10.0):
        self.settings, self.timeout_s = settings, timeout_s
        self._producer: KafkaProducer | None = None  # made on the first event

    def __call__(self, event: dict) -> None:
        from kafka import KafkaProducer  # deferred: kafka-python, ~100 ms; only a step that transitions needs it

        raw = encode(event)
        try:
            if self._producer is None:
                self._producer = KafkaProducer(**producer_config(self.settings))
            future = self._producer.send(names.TOPIC_POLICY, key=event["policy_id"].encode(), value=raw)
            future.get(timeout=self.timeout_s)
        except Exception as exc:  # kafka-python's errors: the broker did not take it
            raise BrokerUnavailable(
                f"publishing policy event {event['event_id']} to {names.TOPIC_POLICY} failed: {exc!r}; "
                "the transition is kept on disk and published by the next `routerscope loop` command"
            ) from None

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close(timeout=5)
            self._producer = None
