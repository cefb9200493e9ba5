"""Kafka plumbing shared by every command: reachability, topic creation, client options.

The loader and the admin use confluent-kafka (librdkafka); the router's emitter and `produce`
use kafka-python (pure Python, next to the model). Both read their security options from
`Settings.kafka_security`.
"""

from __future__ import annotations

import logging
import socket
import time

from routerscope.core import names
from routerscope.core.errors import BrokerUnavailable, ConfigError
from routerscope.core.settings import Settings

# kafka-python logs every failed connection attempt; the command line reports one clear line instead.
logging.getLogger("kafka").setLevel(logging.CRITICAL)

Option = str | int | float | bool  # a librdkafka option's value


def librdkafka_config(settings: Settings, bootstrap: str | None = None, /, **extra: Option) -> dict[str, Option]:
    """confluent-kafka (librdkafka) options, the one configuration of the loader and the admin client.

    `settings` and `bootstrap` are positional-only, so every librdkafka option (dotted names, passed as
    `**{"group.id": ...}`) is an `extra` and none can be taken for `bootstrap`."""
    config: dict[str, Option] = {
        "bootstrap.servers": bootstrap or settings.kafka_bootstrap(),
        "log_level": 0,  # errors surface as exceptions with a message we write ourselves
        **settings.kafka_security.librdkafka(),
    }
    config.update(extra)
    return config


def producer_config(settings: Settings, **overrides) -> dict:
    """kafka-python producer options, the one configuration of every producer (the emitter, `routerscope
    produce`): idempotent, acks=all, batched, compressed; `overrides` replace single options.

    `enable_idempotence=True` is explicit: kafka-python 3 silently turns idempotence off under `acks=1`,
    `retries=0` or more than 5 requests in flight, and an explicit request makes such a conflict fail
    loudly instead."""
    return {
        "bootstrap_servers": settings.kafka_bootstrap(),
        "acks": "all",
        "enable_idempotence": True,
        "linger_ms": 20,
        "batch_size": 512 * 1024,  # per partition, before gzip: 1.7x the throughput of the 16 KB default here
        "compression_type": "gzip",
        "max_block_ms": 2000,
        "bootstrap_timeout_ms": 2000,  # an unreachable broker fails the sender fast (then: spool)
        "request_timeout_ms": 5000,
        **settings.kafka_security.kafka_python(),
        **overrides,
    }


def admin(settings: Settings, bootstrap: str | None = None):
    from confluent_kafka.admin import AdminClient  # deferred: librdkafka, ~35 ms; the SDK never needs it

    return AdminClient(librdkafka_config(settings, bootstrap))


def check_reachable(settings: Settings, bootstrap: str | None = None, timeout_s: float = 5.0):
    """Return the cluster metadata, or raise BrokerUnavailable with what to do next."""
    from confluent_kafka import KafkaException  # deferred: as in admin()

    bootstrap = bootstrap or settings.kafka_bootstrap()
    try:
        client = admin(settings, bootstrap)
        return client.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        hint = (
            "check ROUTERSCOPE_KAFKA_BOOTSTRAP and the security settings"
            if settings.kafka_bootstrap_env
            else "start one with `routerscope broker start`"
        )
        raise BrokerUnavailable(
            f"no Kafka broker answers at {bootstrap} within {timeout_s:.0f} s ({exc.args[0].str()}); {hint}"
        ) from None


def ensure_topics(settings: Settings, bootstrap: str | None = None, replication_factor: int = -1) -> list[str]:
    """Create the project's topics if missing (docs/contract.md: topics are created explicitly at start-up).

    Returns the topics created. `replication_factor=-1` takes the cluster's default."""
    from confluent_kafka import KafkaError  # deferred: as in admin()
    from confluent_kafka.admin import NewTopic  # deferred: as in admin()

    metadata = check_reachable(settings, bootstrap)
    # the OTLP topic too: `routerscope collect` writes it, and the loader reads it (docs/otlp.md)
    missing = [t for t in (*names.TOPICS.values(), settings.otlp_topic) if t not in metadata.topics]
    if not missing:
        return []
    client = admin(settings, bootstrap)  # keep a reference: the futures die with the handle
    futures = client.create_topics(
        [NewTopic(t, num_partitions=settings.topic_partitions, replication_factor=replication_factor) for t in missing],
        operation_timeout=10,
    )
    created = []
    for topic, future in futures.items():
        try:
            future.result(timeout=20)  # bounded: a broker that stops answering must not hang start-up
            created.append(topic)
        except TimeoutError:
            raise BrokerUnavailable(
                f"creating topic {topic} at {bootstrap or settings.kafka_bootstrap()} got no answer within 20 s"
            ) from None
        except Exception as exc:  # KafkaException wrapping a KafkaError
            error = exc.args[0] if exc.args else None
            if getattr(error, "code", lambda: None)() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            raise BrokerUnavailable(
                f"cannot create topic {topic} at {bootstrap or settings.kafka_bootstrap()}: {exc}"
            ) from exc
    return created


def partitions_of(settings: Settings, topic: str, bootstrap: str | None = None) -> list[int]:
    metadata = check_reachable(settings, bootstrap)
    if topic not in metadata.topics:
        return []
    return sorted(metadata.topics[topic].partitions)


def _servers(bootstrap: str) -> list[tuple[str, int]] | None:
    """The (host, port) pairs of a bootstrap list (`host:port`, `[v6]:port`, `SASL_SSL://host:port`, comma
    separated); None when one cannot be read as such (librdkafka is then left to judge it)."""
    servers = []
    for item in bootstrap.split(","):
        item = item.strip().rsplit("://", 1)[-1]
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit():
            return None
        servers.append((host.strip("[]"), int(port)))
    return servers or None


def listening(bootstrap: str, timeout_s: float = 0.3) -> bool:
    """Whether any server of `bootstrap` accepts a TCP connection within `timeout_s`: a stopped local broker
    refuses at once, so a caller that must not wait (a dashboard page) need not wait out a Kafka client's
    timeout to learn it. True when the list cannot be read (the Kafka client then decides)."""
    servers = _servers(bootstrap)
    if servers is None:
        return True
    for host, port in servers:
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                return True
        except OSError:
            continue
    return False


def fetched_end(consumer, topic: str, partition: int) -> int | None:
    """The partition's end (high watermark) in the latest fetch response `consumer` received for it;
    None before the first one. A local read, no request. Unlike a ListOffsets answer it counts every
    message: the embedded broker answers ListOffsets with the base offset of the partition's last
    record batch plus one, short of the rest of that batch."""
    from confluent_kafka import TopicPartition  # deferred: as in admin()

    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
    except Exception:
        return None
    return int(high) if high >= 0 else None


def end_offsets(settings: Settings, timeout_s: float = 2.0) -> dict[tuple[str, int], int] | None:
    """(topic, partition) → the broker's end offset (high watermark) for the project's topics, or
    None when the broker does not answer within `timeout_s` (read-only: joins no group, commits nothing).

    The end is read from a fetch response, not only from a ListOffsets request: the embedded broker
    answers that request with the base offset of the partition's last record batch plus one, short
    of the rest of that batch. So each partition is fetched from there (one record batch at most)
    and the larger of the two ends is kept; a partition whose fetch does not answer in time
    keeps the ListOffsets end."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition  # deferred: as in admin()

    probe: dict[str, Option] = {
        "group.id": f"{names.CONSUMER_GROUP_LOADER}-lag-probe",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "fetch.wait.max.ms": 10,  # a fetch at the end answers at once, with its watermark
        "max.partition.fetch.bytes": 64 * 1024,
    }
    try:
        # a stopped broker refuses the connection at once: no Kafka client's 2 s wait for it (the On-call page
        # asks every 30 s)
        if not listening(settings.kafka_bootstrap(), min(timeout_s, 0.3)):
            return None
        metadata = admin(settings).list_topics(timeout=timeout_s)
        consumer = Consumer(librdkafka_config(settings, **probe))
    except (KafkaException, ConfigError):
        return None
    try:
        ends: dict[tuple[str, int], int] = {}
        for topic in names.TOPICS.values():
            for partition in sorted(metadata.topics[topic].partitions) if topic in metadata.topics else []:
                _, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=timeout_s, cached=False
                )
                ends[(topic, partition)] = int(high)
        if ends:
            consumer.assign([TopicPartition(t, p, end) for (t, p), end in ends.items()])
            deadline = time.monotonic() + timeout_s
            unknown = set(ends)
            while unknown and time.monotonic() < deadline:
                consumer.consume(num_messages=1000, timeout=0.05)
                for key in list(unknown):
                    fetched = fetched_end(consumer, *key)
                    if fetched is not None:
                        ends[key] = max(ends[key], fetched)
                        unknown.discard(key)
        return ends
    except KafkaException:
        return None
    finally:
        consumer.close()
