"""The copies of a decision's event_id under different event_times, as migration 0020 keeps them in
`decision_later_copies` (each copy with an earlier one, read by every metric window: common.FIRST_COPY).

`derive` writes the pairs of the decisions stored since the last derivation: those rows joined with every
stored copy of their ids, both ways (a copy stored before an existing later one writes the pair for that
later one). One join reads the event_id and event_time of every stored decision, so it runs once per load
run (routerscope/warehouse/ingest/loader.py, at its start and its end), not once per insert: found per 20k-event insert
it cost 32-49 us an event of CPU with 10M decisions stored, against 5-11 us for the insert alone
(docs/loader.md). Until it has run, the rows
stored since are *pending*, and a window that any of them could touch reads the 7-day look-back instead
(common.FIRST_COPY), so a run killed before its end, or rows inserted by other means, never move a count.

Writing a pair again is harmless (the table folds, and the read asks only whether a pair exists): a
derivation killed before it records how far it went is simply done again."""

from __future__ import annotations

from routerscope.warehouse.sql import DERIVED_THROUGH, named

# The newest stored row to derive now, and how many rows that covers: on a server, only rows stored
# `settle_ms` ago or more (see `derive`); never a row stamped after now (sql.STORED_AT: stored while the clock ran
# behind the last mark), which stays pending until the clock passes it.
NEWEST_SQL = named(
    "decision_copies_newest",
    f"""
SELECT max(ingested_at), count() FROM $decisions
WHERE ingested_at > {DERIVED_THROUGH} AND ingested_at <= now64(3) - toIntervalMillisecond({{settle_ms:UInt64}})
""",
)
# A server may have loaders side by side (docs/ingest.md): a row's ingested_at is taken when its insert
# starts, so a slow insert can commit after a quicker, later one. Rows younger than this are left pending
# (their windows read the look-back) until a later derivation.
SERVER_SETTLE_MS = 120_000

# The rows stored in (derived_through, through], and every stored copy of their ids: each pair of
# different times, the later one first; and a marker (earlier_time = event_time, migration 0022) for each
# time of an id stored more than once, the row itself among its copies (an exact re-delivery, which FINAL
# folds: a window with no marker reads without FINAL, sql.FOLD_CHECK). The pair of two different
# events sharing an event_id and time under two task types (a contract breach) is marked too: such a window
# then reads FINAL as before. Copies already folded by a merge count once, as FINAL reads them. Grouping
# the join costs ~0.1 s of CPU per 500k rows derived with 10M stored (docs/benchmarks.md).
_NEW = f"""
    SELECT event_id, event_time FROM $decisions
    WHERE ingested_at > {DERIVED_THROUGH} AND ingested_at <= {{through:DateTime64(3, 'UTC')}}"""
DERIVE_SQL = named(
    "decision_copies_derive",
    """
INSERT INTO $decision_later_copies
SELECT greatest(t, other) AS event_time, id AS event_id, least(t, other) AS earlier_time
FROM (
    SELECT n.event_id AS id, n.event_time AS t, c.event_time AS other, count() AS copies
    FROM ($new) AS n
    INNER JOIN (SELECT event_id, event_time FROM $decisions WHERE event_id IN (SELECT event_id FROM ($new))) AS c
        ON n.event_id = c.event_id
    GROUP BY id, t, other
)
WHERE other != t OR copies > 1
""",
    {"new": _NEW},
)

# How far the warehouse's clock is behind the last derivation's mark, in ms (0 or less: not behind).
CLOCK_BEHIND_SQL = named(
    "decision_copies_clock_behind", "SELECT dateDiff('millisecond', now64(3), " + DERIVED_THROUGH + ")"
)

RECORD_SQL = named(
    "decision_copies_record",
    "INSERT INTO $decision_copies_derived (derived_through) VALUES ({through:DateTime64(3, 'UTC')})",
)


def clock_behind_ms(client) -> int:
    """How many ms the warehouse's clock is behind the last derivation's mark (0 when it is not): while it is, the
    decisions stored are stamped past the mark (sql.STORED_AT) and stay pending, read with the look-back."""
    return max(0, int(client.query(CLOCK_BEHIND_SQL).result_rows[0][0]))


def derive(client, settle_ms: int = 0) -> int:
    """Write the pairs of the decisions stored since the last derivation (and at least `settle_ms` ago)
    and record how far that goes; returns how many decisions that covered (0: nothing to derive). A row
    committed with an ingested_at before the newest one read here would be taken as derived without its
    pairs: with one writer at a time (the embedded warehouse, the loader's lock) `settle_ms` 0 is exact; a
    server with loaders side by side passes SERVER_SETTLE_MS."""
    through, count = client.query(NEWEST_SQL, parameters={"settle_ms": settle_ms}).result_rows[0]
    if not count:
        return 0
    parameters = {"through": through.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]}  # ingested_at: milliseconds
    client.command(DERIVE_SQL, parameters=parameters)
    client.command(RECORD_SQL, parameters=parameters)
    return int(count)
