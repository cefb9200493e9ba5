"""What every query module shares: the window of docs/metrics.md and the de-duplicated events in it."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import datetime
from string import Template
from typing import Any

from routerscope.core import names
from routerscope.core.timeutil import UTC, utc

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?")
_PLACEHOLDER = re.compile(r"\$[A-Za-z_][A-Za-z0-9_]*")


def identifier(value: str, what: str = "table", placeholder: bool = False) -> str:
    """`value` when it is a plain (optionally database-qualified) identifier, or with `placeholder` a
    `$name` that `named` spells later; otherwise ValueError. The one check before a name goes into SQL."""
    if not (_IDENTIFIER.fullmatch(value) or (placeholder and _PLACEHOLDER.fullmatch(value))):
        raise ValueError(f"{what}={value!r} is not an identifier")
    return value


def named(name: str, sql: str, fragments: dict[str, str] | None = None, **identifiers: str) -> str:
    """Prefix a query with its name, so it can be found in ClickHouse's query log, and spell its tables:
    `$decisions` becomes `routerscope.decisions` (names.TABLES), so table names live in `names` only.
    `identifiers` name further tables the same way (`$staging=...`); each must be a plain (optionally
    database-qualified) identifier, never a value: values are bound as `{name:Type}` parameters.
    `fragments` are constant SQL pieces of the query modules (a CTE, a condition), spelled `$name` in
    `sql` and put in first, so the tables they name are spelled too; never data."""
    for key, value in identifiers.items():
        identifier(value, key)
    text = Template(sql.strip()).safe_substitute(fragments or {})
    return f"/* routerscope:{name} */\n{Template(text).safe_substitute(names.TABLES, **identifiers)}\n"


def hashed_chain(label: str, table: str, ddl: list[tuple[str, str]], **identifiers: str) -> tuple[str, list[str]]:
    """A Null input table and the views an insert into it runs through, named after a hash of their
    SQL (`ddl`: (kind, statement) pairs spelling each other as `$<kind>`): a contract change makes a
    new chain, created on first use, so no migration follows generated SQL, and a loader never drops
    a view another loader may be inserting through. The kind `input` is `<table>_<hash>`, every other
    `<table>_<hash>_<kind without _view>`. Returns the input table and the statements, in order."""
    digest = hashlib.sha256("\n".join(sql for _, sql in ddl).encode()).hexdigest()[:12]
    base = f"{names.DATABASE}.{table}_{digest}"
    spelled = {kind: base if kind == "input" else f"{base}_{kind.removesuffix('_view')}" for kind, _ in ddl}
    return base, [named(f"{label}_create_{kind}", sql, None, **spelled, **identifiers) for kind, sql in ddl]


def utc_text(t: datetime) -> str:
    if t.tzinfo is None:
        raise ValueError(f"{t!r} has no timezone; windows are in UTC")
    return t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


@dataclass(frozen=True)
class QueryWindow:
    """A half-open interval [start, end) over event_time (docs/metrics.md notation)."""

    start: datetime
    end: datetime

    def __post_init__(self):
        if self.end <= self.start:
            raise ValueError(f"the window must end after it starts: [{self.start}, {self.end})")

    def parameters(self) -> dict[str, str]:
        return {"start": utc_text(self.start), "end": utc_text(self.end)}


# The look-back of docs/metrics.md ("each event_id counts once"): of the copies of one event_id, only the
# first (the earliest event_time) is counted, and only in the window that holds it, so long as the copies
# lie within DEDUP_HORIZON_DAYS of each other. A row of the window is left out when a copy of its event_id
# has an earlier event_time in the window or in the DEDUP_HORIZON_DAYS before its start; the data-quality
# suite flags such an id over the same horizon.
#
# Which copies have an earlier one is decided once for the stored rows, not by every window:
# `decision_later_copies` (migration 0020, written by decision_copies.derive, which the loader runs at the
# start and end of each run) holds one row per later copy and earlier time, sorted by the later copy's
# event_time, so a window reads only the pairs of its own time range (copies under other times are rare)
# instead of the event_id and event_time of the 7 days before it. While decisions stored since the last
# derivation exist (PENDING: a run killed before its end, rows inserted by other means), the window also
# applies the look-back itself, as it did before the pairs existed; otherwise that subquery's WHERE is
# constant false and reads nothing. Same rule, same numbers either way (tests/integration/test_first_copy.py).
DEDUP_HORIZON_DAYS = 7
DERIVED_THROUGH = "(SELECT max(derived_through) FROM $decision_copies_derived)"
PENDING = f"(SELECT count() > 0 FROM $decisions WHERE ingested_at > {DERIVED_THROUGH})"
# A decision's ingested_at as the loader's views store it: the warehouse's clock, but never at or before the last
# derivation's mark. Pending rows, the derivation and the kept baseline hours all tell "stored since" by
# `ingested_at > derived_through`; a clock stepped back (a resumed VM, an NTP step) would otherwise stamp new rows
# at or before the mark: never pending, never derived, their windows read without FINAL and their copies counted
# again. Stamped past the mark instead, they stay pending (the derivation takes only rows stamped up to now) and
# every window applies the look-back for them, until the clock passes the mark again. A column's DEFAULT cannot
# read a table, so the views set it (json_rows.py); rows inserted by other means get the DEFAULT,
# now64(3).
STORED_AT = f"greatest(now64(3), {DERIVED_THROUGH} + toIntervalMillisecond(1))"
FIRST_COPY = f"""(event_id, event_time) NOT IN (
        SELECT event_id, event_time FROM $decision_later_copies
        WHERE event_time >= {{start:DateTime64(3, 'UTC')}} AND event_time < {{end:DateTime64(3, 'UTC')}}
          AND earlier_time >= {{start:DateTime64(3, 'UTC')}} - INTERVAL {DEDUP_HORIZON_DAYS} DAY
          AND earlier_time < event_time)
      AND (NOT {PENDING} OR (event_id, event_time) IN (
        SELECT event_id, min(event_time) FROM $decisions
        WHERE {PENDING}
          AND event_time >= {{start:DateTime64(3, 'UTC')}} - INTERVAL {DEDUP_HORIZON_DAYS} DAY
          AND event_time < {{end:DateTime64(3, 'UTC')}}
          AND event_id IN (
              SELECT event_id FROM $decisions
              WHERE {PENDING}
                AND event_time >= {{start:DateTime64(3, 'UTC')}} AND event_time < {{end:DateTime64(3, 'UTC')}})
        GROUP BY event_id))"""

# Whether a window's rows need FINAL at all (migration 0022). FINAL folds rows stored more than once under
# one sorting key (an exact re-delivery); the derivation marks each such key in `decision_later_copies` with
# earlier_time = event_time (decision_copies.DERIVE_SQL; FIRST_COPY reads only earlier_time < event_time). A
# window with no marker in it and nothing pending holds no row FINAL would fold, so its rows stored up to the
# derivation (ingested_at <= `through`: a row stored after this check is left for the next window, never read
# twice) are read as they are, about a quarter less CPU than FINAL on the bench's day (docs/benchmarks.md).
# `paired`: some row of the window has an earlier copy within the horizon (FIRST_COPY would leave one out).
FOLD_CHECK = f"""SELECT {DERIVED_THROUGH} AS through,
       {PENDING} OR countIf(earlier_time = event_time) > 0 AS fold,
       countIf(earlier_time < event_time
               AND earlier_time >= {{start:DateTime64(3, 'UTC')}} - INTERVAL {DEDUP_HORIZON_DAYS} DAY) > 0 AS paired
FROM $decision_later_copies
WHERE event_time >= {{start:DateTime64(3, 'UTC')}} AND event_time < {{end:DateTime64(3, 'UTC')}}"""

# Decision events in the window, every mode, each event once. FINAL folds rows with the same
# sorting key, which ends in event_id: a re-delivered event is an exact copy (same task_type and
# event_time), so its copies fold into one. Measured on 10M rows, FINAL is ~10x faster than
# `LIMIT 1 BY event_id`; the one case it would not fold, two *different* events sharing an
# event_id, is a contract breach the data-quality suite reports. Copies under different event_times
# (a re-send dated another day) do not fold: FIRST_COPY keeps the first. Only the columns the metrics read.
_WINDOW_EVENTS = """
    SELECT event_id, event_time, task_type, mode, session_id, request_id, entered_device,
           fallback_type, reason, degrade_level, cloud_calls, confidence, threshold, shadow_agree,
           input_tokens, latency_ms, network, cost_usd, attempt_levels, attempt_outcomes, policy_version
    FROM $decisions FINAL
    WHERE event_time >= {start:DateTime64(3, 'UTC')} AND event_time < {end:DateTime64(3, 'UTC')}"""
WINDOW_CTE = "\nw AS (" + _WINDOW_EVENTS + "\n      AND " + FIRST_COPY + "\n)"
# The same without the look-back, for the 7-day baseline of the L2/L3 drift (docs/metrics.md §5) only: a
# share over a week, which a re-sent copy moves by one in its count, and the look-back over a week of ids
# costs several times the read itself (docs/benchmarks.md).
BASELINE_CTE = "\nw AS (" + _WINDOW_EVENTS + "\n)"


def dict_rows(client, sql: str, parameters: dict | None = None) -> list[dict[str, Any]]:
    """The rows of a query as dicts keyed by column name."""
    result = client.query(sql, parameters=parameters or {})
    return [dict(zip(result.column_names, row)) for row in result.result_rows]


def utc_or_none(value) -> datetime | None:
    """A timestamp read back as an aware UTC datetime; None for NULL and for the epoch (what `max()` of
    an empty table returns)."""
    return None if value is None or value.year <= 1970 else utc(value)
