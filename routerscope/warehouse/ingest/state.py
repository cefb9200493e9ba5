"""A load's running state, shared by its parts: each partition's position as the drain reads it
(`PartitionState`), and what the run loaded (`LoadResult`). Its own module so the loader, the drain and the
writer all import it from below, not from each other."""

from __future__ import annotations

from dataclasses import dataclass, field

from routerscope.core import names


@dataclass
class LoadResult:
    loaded: dict[str, int] = field(default_factory=lambda: {s: 0 for s in names.TOPICS})
    quarantined: dict[str, int] = field(default_factory=lambda: {s: 0 for s in names.TOPICS})
    skipped_already_loaded: int = 0
    refetched: dict[str, int] = field(default_factory=dict)  # topic[partition] -> messages loaded again
    batches: int = 0
    seconds: float = 0.0
    otlp: dict | None = None  # the OTLP topic's step, when it had messages (routerscope/warehouse/ingest/otlp.py)

    def as_dict(self) -> dict:
        out = {"loaded": dict(self.loaded), "quarantined": dict(self.quarantined)}
        if self.otlp:
            out["otlp"] = self.otlp
        return out


@dataclass
class PartitionState:
    topic: str
    partition: int
    stored: int | None  # next offset recorded in the warehouse; None if never loaded
    fingerprint: str = ""  # of the message at `stored - 1` when it was loaded ("" if not recorded)
    skip: set[int] = field(default_factory=set)  # offsets past `stored` that already landed
    next_offset: int | None = None  # after the last message consumed in this run
    verified: bool = False  # the message before `stored` was seen (the broker kept our history)
    at_end: bool = False
    end: int | None = None  # the high watermark in the first fetch response seen for it; None: none yet
    high: int | None = None  # the latest high watermark fetched for it, even one below `stored`; None: never fetched

    @property
    def lost(self) -> bool:
        """Known to have lost loaded messages: fetched, and its end is below the stored position (or it
        reached its end without the message before that position)."""
        if not self.stored or self.verified:
            return False
        return (self.high is not None and self.high < self.stored) or self.at_end

    @property
    def drained(self) -> bool:
        """Read up to its end as of an early fetch from it (the probe message included)."""
        if self.at_end:
            return True
        if self.end is None or (self.stored and not self.verified):
            return False
        position = self.next_offset if self.next_offset is not None else (self.stored or 0)
        return position >= self.end

    @property
    def start(self) -> int:
        """Where to read from: one before the stored position, to check the broker still has it."""
        return 0 if not self.stored else self.stored - 1

    @property
    def key(self) -> str:
        return f"{self.topic}[{self.partition}]"
