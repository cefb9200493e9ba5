"""A load's settings (`LoadConfig`): what the CLI's `load`, the Dagster `ingest` job, the benches and the tests
choose for one run of the loader (routerscope/warehouse/ingest/loader.py). One frozen value handed to the parts
that need it (the drain in consumer.py reads the batch size, the waits, the topics and partitions), so that no
part reaches into the `Loader` for its settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from routerscope.core import names

DEFAULT_BATCH_SIZE = 20_000
DEFAULT_IDLE_TIMEOUT_S = 1.0
DEFAULT_FLUSH_INTERVAL_S = 5.0


@dataclass(frozen=True)
class LoadConfig:
    """One run's choices. `topics` and `partitions` given as lists are kept as a tuple and a frozenset."""

    batch_size: int = DEFAULT_BATCH_SIZE
    # Seconds without a message that count as drained (while no partition is known to hold more).
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S
    # A batch not yet full is handed over after this long.
    flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S
    # The consumer group (only for lag tools) and the name the positions are stored under.
    consumer_name: str = names.CONSUMER_GROUP_LOADER
    topics: tuple[str, ...] = field(default=tuple(names.TOPICS.values()))
    # The Kafka partitions this loader owns (None: all). Loaders owning disjoint sets can run side by side
    # against a ClickHouse server: positions are kept per (topic, partition).
    partitions: frozenset[int] | None = None
    # None: DEFAULT_BROKER_TIMEOUT_S grown with the partition count once it is known (consumer.partition_timeout);
    # a value given is used as it is.
    broker_timeout_s: float | None = None
    # Large chunks parsed by a worker process (routerscope/warehouse/ingest/parsing.py). None: only beside a
    # warehouse server; embedded, the warehouse's insert thread already takes the second core, and the worker
    # made the load slower and ~150 MB larger (docs/loader.md).
    parse_worker: bool | None = None
    # Another load holds the warehouse: wait for it (else LoadInProgress).
    wait: bool = True
    # A whole load first maps the OTLP topic into decision events (routerscope/warehouse/ingest/otlp.py) so that
    # the run loads them; a loader owning a partition set leaves that to the whole one (`maps_otlp`).
    otlp: bool = True

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        object.__setattr__(self, "topics", tuple(self.topics))
        if self.partitions is not None:
            object.__setattr__(self, "partitions", frozenset(self.partitions))

    @property
    def maps_otlp(self) -> bool:
        """This run maps the OTLP topic first: a whole load (every partition) that reads decisions."""
        return self.otlp and self.partitions is None and names.TOPIC_DECISIONS in self.topics

    def owns(self, partition: int) -> bool:
        """Is `partition` (of any topic) one this loader reads?"""
        return self.partitions is None or partition in self.partitions
