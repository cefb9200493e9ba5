"""docs/metrics.md §5's baseline, the degrade-level counts of the days before a window, added up from hours counted
once and kept in `decision_level_hours` (migration 0021) instead of read FINAL again by every window.

The baseline counts the decisions FINAL folds (no look-back: decisions.LEVELS_SQL), live events only. FINAL folds
only copies with the same sorting key (task type, event_time, event_id), so copies of one event fold within one
hour, and the counts of the hours add up to the count of the span: the numbers are those of
`decisions.level_counts`, which reads the span at once (tests/integration/test_level_hours.py compares the two).

An hour is counted when a window first needs it, and kept with `counted_through`, the loader's derived_through
read before counting (decision_copies.derive: every decision stored at or before it is committed). A kept hour
is used only while no decision of it has a later ingested_at; a decision stored since (a late event, a row not
yet derived) makes it counted again; an hour holding such rows when counted is not kept at all. The check
reads only the granules that hold such rows (migration 0020's minmax index on ingested_at). The parts of the
span that are not whole hours (a 5-minute window's baseline starts and ends mid-hour) are read directly.

Measured on 10M decisions (docs/benchmarks.md, Metrics): a week's baseline from kept hours in 12-13 ms against
0.19-1.04 s for the FINAL read of the week in the same runs; counting the hours the first time costs about 1.7
times that read (grouped by hour as well as task type)."""

from __future__ import annotations

import logging
from collections.abc import Container
from datetime import datetime, timedelta

from routerscope.core import names
from routerscope.core.timeutil import UTC, utc
from routerscope.warehouse.queries.decisions import LevelCounts, level_counts
from routerscope.warehouse.sql import QueryWindow, named, utc_or_none, utc_text

log = logging.getLogger(__name__)

HOUR = timedelta(hours=1)
TABLE = f"{names.DATABASE}.decision_level_hours"
COUNTED_MARK = ""  # the task_type of the row that marks an hour counted (its totals)
COLUMNS = ("hour", "task_type", "requests", "l0", "l1", "l2", "l3", "l4", "counted_through", "counted_at")

THROUGH_SQL = named("degrade_level_hours_through", "SELECT max(derived_through) FROM $decision_copies_derived")

# Live events per hour and task type, and per degrade level, of the decisions FINAL folds.
COUNT_SQL = named(
    "degrade_level_hours_count",
    """
SELECT toStartOfHour(event_time) AS hour, task_type, countIf(mode = 'live') AS requests,
       countIf(mode = 'live' AND degrade_level = 0) AS l0, countIf(mode = 'live' AND degrade_level = 1) AS l1,
       countIf(mode = 'live' AND degrade_level = 2) AS l2, countIf(mode = 'live' AND degrade_level = 3) AS l3,
       countIf(mode = 'live' AND degrade_level = 4) AS l4
FROM $decisions FINAL
WHERE event_time >= {start:DateTime64(3, 'UTC')} AND event_time < {end:DateTime64(3, 'UTC')}
GROUP BY hour, task_type
""",
)

# The newest counting of each kept hour in [start, end).
KEPT_SQL = named(
    "degrade_level_hours_kept",
    """
SELECT hour, task_type, requests, l0, l1, l2, l3, l4, counted_through
FROM $level_hours
WHERE hour >= {start:DateTime('UTC')} AND hour < {end:DateTime('UTC')}
  AND (hour, counted_at) IN (
      SELECT hour, max(counted_at) FROM $level_hours
      WHERE hour >= {start:DateTime('UTC')} AND hour < {end:DateTime('UTC')}
      GROUP BY hour)
""",
    level_hours=TABLE,
)

# The newest ingested_at per hour of the decisions stored after {through} (the oldest counted_through of the
# kept hours): the hours whose kept counts are out of date.
LATE_SQL = named(
    "degrade_level_hours_late",
    """
SELECT toStartOfHour(event_time) AS hour, max(ingested_at) AS newest
FROM $decisions
WHERE event_time >= {start:DateTime64(3, 'UTC')} AND event_time < {end:DateTime64(3, 'UTC')}
  AND ingested_at > {through:DateTime64(3, 'UTC')}
GROUP BY hour
""",
)


def _hour(t: datetime) -> datetime:
    return t.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def _kept(client, start: datetime, end: datetime) -> dict[datetime, list[tuple]]:
    """hour → its rows (task type, requests, l0..l4) of the kept hours in [start, end) still up to date."""
    rows = client.query(KEPT_SQL, parameters={"start": utc_text(start)[:19], "end": utc_text(end)[:19]}).result_rows
    by_hour: dict[datetime, list[tuple]] = {}
    through: dict[datetime, datetime] = {}
    for row in rows:
        hour = utc(row[0])
        by_hour.setdefault(hour, []).append(row[1:8])
        through[hour] = row[8]
    if not by_hour:
        return {}
    oldest = min(utc_or_none(t) or datetime(1970, 1, 1, tzinfo=UTC) for t in through.values())
    for hour, newest in _late(client, start, end, oldest).items():
        if hour in by_hour and newest > through[hour]:
            del by_hour[hour]
    return by_hour


def _late(client, start: datetime, end: datetime, through: datetime) -> dict[datetime, datetime]:
    """hour → the newest ingested_at of its decisions stored after `through`, for the hours of [start, end) that
    have such decisions."""
    parameters = {"start": utc_text(start), "end": utc_text(end), "through": utc_text(through)}
    return {utc(hour): newest for hour, newest in client.query(LATE_SQL, parameters=parameters).result_rows}


def _count(client, start: datetime, end: datetime) -> dict[datetime, list[tuple]]:
    """Count the hours of [start, end) and keep them; hour → its rows (task type, requests, l0..l4), every
    hour of the span present (an empty one with its mark only)."""
    through = utc_or_none(client.query(THROUGH_SQL).result_rows[0][0])
    rows = client.query(COUNT_SQL, parameters={"start": utc_text(start), "end": utc_text(end)}).result_rows
    by_hour: dict[datetime, list[tuple]] = {}
    hour = start
    while hour < end:
        by_hour[hour] = []
        hour += HOUR
    for row in rows:
        by_hour[utc(row[0])].append(tuple(row[1:]))
    for per in by_hour.values():
        per.append((COUNTED_MARK, *(sum(r[i] for r in per) for i in range(1, 7))))
    if through is not None:  # nothing derived yet: nothing to keep (every row would make it out of date)
        counted_at = datetime.now(UTC)
        late = _late(client, start, end, through)  # hours holding rows not derived yet: out of date already
        keep = [[h, *r, through, counted_at] for h, per in by_hour.items() if h not in late for r in per]
        try:
            if keep:
                client.insert(TABLE, keep, column_names=list(COLUMNS))
        except Exception as exc:  # a read-only user: the counts are right, only not kept for the next window
            log.info("baseline hours not kept: %s", str(exc).splitlines()[0] if str(exc) else repr(exc))
    return by_hour


def _missing_runs(kept: Container[datetime], first: datetime, last: datetime) -> list[list[datetime]]:
    """The hours in [first, last) not `kept`, in runs of consecutive hours: each run is counted by one read."""
    runs: list[list[datetime]] = []
    hour = first
    while hour < last:
        if hour not in kept:
            if runs and runs[-1][-1] + HOUR == hour:
                runs[-1].append(hour)
            else:
                runs.append([hour])
        hour += HOUR
    return runs


def baseline_level_counts(client, window: QueryWindow) -> dict[str | None, LevelCounts]:
    """decisions.level_counts(client, window), the whole hours of `window` from kept counts (counted and kept
    here when missing or out of date), the rest read directly: task_type (None: overall) → LevelCounts."""
    first, last = _hour(window.start), _hour(window.end)
    if first < window.start:
        first += HOUR
    if first >= last:  # no whole hour in it
        return level_counts(client, window)
    totals: dict[str | None, list[int]] = {}

    def add(task_type: str | None, requests: int, levels) -> None:
        t = totals.setdefault(task_type, [0] * 6)
        for i, value in enumerate((requests, *levels)):
            t[i] += int(value)

    hours = _kept(client, first, last)
    for run in _missing_runs(hours, first, last):
        hours.update(_count(client, run[0], run[-1] + HOUR))
    for per in hours.values():
        for row in per:
            if row[0] != COUNTED_MARK:
                add(row[0], row[1], row[2:7])
    for edge in (
        QueryWindow(window.start, first) if window.start < first else None,
        QueryWindow(last, window.end) if last < window.end else None,
    ):
        if edge is not None:
            for task_type, counts in level_counts(client, edge).items():
                if task_type is not None:
                    add(task_type, counts.requests, counts.levels)
    found: dict[str | None, LevelCounts] = {
        t: LevelCounts(v[0], (v[1], v[2], v[3], v[4], v[5])) for t, v in totals.items() if v[0]
    }
    if found:
        overall = [sum(v[i] for t, v in totals.items() if t in found) for i in range(6)]
        found[None] = LevelCounts(overall[0], (overall[1], overall[2], overall[3], overall[4], overall[5]))
    return found
