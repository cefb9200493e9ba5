"""One rollback truth: whether the rollback rules recommended rolling a task type back to the cloud within a
time range, and the words every reader says it in (docs/metrics.md §3b, "One rollback truth").

On-call, Weekly tuning, Offload review and `routerscope report rollout` each used to read it their own way: the
incident list showed one row per rule episode, the tuning row looked at the range's alerts while its stage
column looked at what was firing at that moment, and the rollout tracker read only the alerts still firing —
after the demo's push, `short_reply` was "rollback recommended" and "hold" on one row. Every reader now calls
`rollback_states` (or `states` over episodes it already read) and prints `RollbackState.words`.

The state of a task type over [start, end) is the union of the episodes of its rules with `action: rollback`
that breached within the range (first seen before its end; last seen, or resolved, at or after its start) or are
firing now: recommended or not, the breached signals (each rule's metric), from the first window's start to the
last window's end, and whether one still fires."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from routerscope.core.timeutil import utc_iso
from routerscope.warehouse.analytics.alerting.evaluate import signal
from routerscope.warehouse.queries import alerts as alert_queries

NONE_WORDS = "no rollback recommended"


@dataclass(frozen=True)
class RollbackState:
    task_type: str
    recommended: bool = False
    signals: tuple[str, ...] = ()  # the breached signals (docs/metrics.md §3b keys), sorted
    first_seen: datetime | None = None  # start of the earliest breaching window of the range's episodes
    last_seen: datetime | None = None  # end of the latest one
    firing: bool = False  # an episode still fires
    resolved_at: datetime | None = None  # when the last one resolved (None while one fires)

    @property
    def words(self) -> str:
        """What every page and report says: `rollback recommended for short_reply (degrade_trigger_rate)
        2026-12-04 04:40 – 05:00 UTC, resolved 05:06`, `… since 2026-12-04 04:40 UTC, still firing`, or
        `no rollback recommended`."""
        if not self.recommended or self.first_seen is None or self.last_seen is None:
            return NONE_WORDS  # a recommendation always carries its episodes' span (`states`)
        head = f"rollback recommended for {self.task_type} ({', '.join(self.signals)})"
        if self.firing:
            return f"{head} since {self.first_seen:%Y-%m-%d %H:%M} UTC, still firing"
        end = (
            f"{self.last_seen:%H:%M}"
            if self.last_seen.date() == self.first_seen.date()
            else f"{self.last_seen:%Y-%m-%d %H:%M}"
        )
        resolved = "" if self.resolved_at is None else f", resolved {self.resolved_at:%H:%M}"
        return f"{head} {self.first_seen:%Y-%m-%d %H:%M} – {end} UTC{resolved}"

    def public(self) -> dict[str, Any]:
        """JSON: `{recommended, signals, first_seen, last_seen, firing, resolved_at, words}`."""

        def iso(t):
            return None if t is None else utc_iso(t, "auto")

        return {
            "recommended": self.recommended,
            "signals": list(self.signals),
            "first_seen": iso(self.first_seen),
            "last_seen": iso(self.last_seen),
            "firing": self.firing,
            "resolved_at": iso(self.resolved_at),
            "words": self.words,
        }


def _in_range(episode: Mapping[str, Any], start: datetime, end: datetime) -> bool:
    if episode["status"] == "firing":
        return episode["first_seen"] < end
    until = episode.get("resolved_at") or episode["last_seen"]
    return episode["first_seen"] < end and until >= start


def _signal(episode: Mapping[str, Any]) -> str:
    """The signal an episode breached: its rule's metric (`route_accuracy_est`), as `routerscope alerts` names it,
    or the estimate its windows read instead (`route_accuracy_ppi`, docs/metrics.md §3d: the judge's verdicts
    corrected by people's, where the windows had one)."""
    trip = episode.get("trip_values") or {}
    read = next((w["read"] for w in trip.get("windows") or [] if isinstance(w, dict) and w.get("read")), None)
    return signal(read or trip.get("metric") or episode["rule"])


def states(episodes: Iterable[Mapping[str, Any]], start: datetime, end: datetime) -> dict[str, RollbackState]:
    """Task type → its rollback state over [start, end), from alert episodes (`alerts.incidents` rows: `task_type`,
    `action`, `status`, `first_seen`, `last_seen`, `resolved_at`, `trip_values` decoded). Only task types with a
    recommendation are keys: `state_of` gives the others."""
    grouped: dict[str, list[Mapping[str, Any]]] = {}
    for e in episodes:
        if e["action"] == "rollback" and e["task_type"] and _in_range(e, start, end):
            grouped.setdefault(e["task_type"], []).append(e)
    out = {}
    for task_type, found in sorted(grouped.items()):
        firing = any(e["status"] == "firing" for e in found)
        resolved = [e["resolved_at"] for e in found if e.get("resolved_at") is not None]
        out[task_type] = RollbackState(
            task_type,
            True,
            tuple(sorted({_signal(e) for e in found})),
            min(e["first_seen"] for e in found),
            max(e["last_seen"] for e in found),
            firing,
            None if firing or not resolved else max(resolved),
        )
    return out


def state_of(found: Mapping[str, RollbackState], task_type: str) -> RollbackState:
    """`task_type`'s state in `found` (`states`' result), no recommendation when it is not there."""
    return found.get(task_type) or RollbackState(task_type)


def rollback_states(client, start: datetime, end: datetime) -> dict[str, RollbackState]:
    """The rollback state of every task type with a recommendation over [start, end), from the stored alert
    episodes: the one reading of it that On-call, Weekly tuning, Offload review and `report rollout` share."""
    return states(alert_queries.incidents(client, start, end, limit=10_000), start, end)
