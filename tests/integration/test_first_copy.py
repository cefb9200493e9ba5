"""Which copy of an event_id a metric window counts, decided once for the stored rows (migration 0020's
`decision_later_copies`, derived at the end of each load) instead of by reading the 7 days before each
window: the windows must count exactly what docs/metrics.md's rule counts ("a window counts an event only if
no copy of its event_id has an earlier event_time in the window or in the 7 days before the window's
start"), whatever order the copies arrive in, however they are split across inserts, and whether or not the
rows stored last are derived yet. The rule is written out in Python below and compared with the warehouse's
answer over random copies and windows of every length the metrics use, and longer."""

from __future__ import annotations

import logging
import random
from datetime import UTC, datetime, timedelta

import pytest

from routerscope.core import names
from routerscope.warehouse.client import open_warehouse
from routerscope.warehouse.ingest.loader import load
from routerscope.warehouse.migrate import discover
from routerscope.warehouse.queries import decision_copies
from routerscope.warehouse.queries import decisions as decision_queries
from routerscope.warehouse.sql import FIRST_COPY, FOLD_CHECK, QueryWindow, named
from tests.support.events import decision, dumps, iso
from tests.support.golden_day import insert
from tests.support.ingest import FAST, produce, query, scalar

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 1, tzinfo=UTC)
HORIZON = timedelta(days=7)
COUNTED_SQL = named(
    "test_first_copy_counted",
    """
SELECT toString(event_id), event_time FROM $decisions FINAL
WHERE event_time >= {start:DateTime64(3, 'UTC')} AND event_time < {end:DateTime64(3, 'UTC')} AND $first_copy
""",
    {"first_copy": FIRST_COPY},
)


FOLD_CHECK_SQL = named("test_fold_check", FOLD_CHECK)


def eid(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012d}"


def copies_of(rng: random.Random, n: int) -> list[datetime]:
    """1-4 copies of one event: re-sent within minutes, days, or beyond the horizon; some re-delivered as
    they were (the same event_time)."""
    first = T0 + timedelta(minutes=rng.randrange(20 * 24 * 60))
    times = [first]
    for _ in range(rng.choice((0, 0, 1, 1, 2, 3))):
        gap = rng.choice(
            (
                timedelta(0),  # a re-delivery: FINAL folds it
                timedelta(minutes=rng.randrange(1, 30)),
                timedelta(hours=rng.randrange(1, 48)),
                timedelta(days=7) - timedelta(minutes=rng.randrange(0, 3)),  # at the horizon's edge
                timedelta(days=7) + timedelta(minutes=rng.randrange(0, 3)),
                timedelta(days=rng.randrange(8, 15)),
            )
        )
        times.append(rng.choice(times) + rng.choice((1, -1)) * gap)  # before or after a copy already made
    return times


def expected(rows: list[tuple[str, datetime]], window: QueryWindow) -> set[tuple[str, datetime]]:
    """docs/metrics.md's rule, applied to the stored copies."""
    by_id: dict[str, set[datetime]] = {}
    for event_id, t in rows:
        by_id.setdefault(event_id, set()).add(t)
    return {
        (event_id, t)
        for event_id, times in by_id.items()
        for t in times
        if window.start <= t < window.end and not any(window.start - HORIZON <= u < t for u in times)
    }


def windows_around(rng: random.Random, rows: list[tuple[str, datetime]]) -> list[QueryWindow]:
    """Windows of 5 minutes, an hour, a day, a week and 10 days starting at or just before copies, and one of
    50 days over them all."""
    out = []
    for _ in range(40):
        _, t = rng.choice(rows)
        length = rng.choice(
            (timedelta(minutes=5), timedelta(hours=1), timedelta(days=1), timedelta(days=7), timedelta(days=10))
        )
        start = t - rng.choice((timedelta(0), timedelta(minutes=1), length / 2, length - timedelta(milliseconds=1)))
        out.append(QueryWindow(start, start + length))
    out.append(QueryWindow(T0 - timedelta(days=10), T0 + timedelta(days=40)))
    return out


@pytest.mark.parametrize("derived", ["all", "some", "none"])
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.slow
def test_windows_count_the_first_copy_as_the_rule_says_whatever_order_copies_arrive_in(warehouse, seed, derived):
    """`derived`: the pairs derived after every insert, after some (the later inserts pending, as after a
    killed run), or never (rows inserted by other means than a load)."""
    rng = random.Random(seed)
    rows = [(eid(n), t) for n in range(60) for t in copies_of(rng, n)]
    events = [
        decision(event_id=event_id, request_id=f"r{i}", session_id=f"s{i}", event_time=iso(t))
        for i, (event_id, t) in enumerate(rows)
    ]
    rng.shuffle(events)  # later copies often stored before earlier ones, some in the same insert
    cut = sorted(rng.sample(range(1, len(events)), 5))
    for i, (a, b) in enumerate(zip([0, *cut], [*cut, len(events)])):
        insert(warehouse, events[a:b], [])
        if derived == "all" or (derived == "some" and i < 3):
            decision_copies.derive(warehouse)
    stored = [(event_id, datetime.fromisoformat(iso(t).replace("Z", "+00:00"))) for event_id, t in rows]
    for window in windows_around(rng, stored):
        got = {
            (event_id, t.replace(tzinfo=UTC))
            for event_id, t in warehouse.query(COUNTED_SQL, parameters=window.parameters()).result_rows
        }
        assert got == expected(stored, window), window
        # the metric set's own read: FINAL or not as its check decides, the same events either way
        decision_queries.materialize_window(warehouse, window)
        try:
            read = sorted(
                t.replace(tzinfo=UTC)
                for (t,) in warehouse.query(f"SELECT event_time FROM {decision_queries.WINDOW_TABLE}").result_rows
            )
        finally:
            decision_queries.drop_window(warehouse)
        assert read == sorted(t for _, t in expected(stored, window)), window


def folds(client, window: QueryWindow) -> bool:
    return bool(client.query(FOLD_CHECK_SQL, parameters=window.parameters()).result_rows[0][1])


def window_times(client, window: QueryWindow) -> list[datetime]:
    decision_queries.materialize_window(client, window)
    try:
        rows = client.query(f"SELECT event_time FROM {decision_queries.WINDOW_TABLE}").result_rows
    finally:
        decision_queries.drop_window(client)
    return sorted(t.replace(tzinfo=UTC) for (t,) in rows)


def test_an_exact_re_delivery_is_marked_and_only_its_window_reads_final(warehouse):
    """Two rows under one sorting key (the same event stored twice, one insert apart) fold into one under FINAL.
    The derivation marks that key (earlier_time = event_time); the window holding it reads FINAL and counts the
    event once; a window with no marker and nothing pending reads without FINAL; a marker is never taken for a
    pair (FIRST_COPY leaves the event counted)."""
    t1, t2 = T0 + timedelta(hours=1), T0 + timedelta(days=2, hours=1)
    twice = decision(event_id=eid(1), request_id="a", session_id="sa", event_time=iso(t1))
    once = decision(event_id=eid(2), request_id="b", session_id="sb", event_time=iso(t2))
    day1, day3 = QueryWindow(T0, T0 + timedelta(days=1)), QueryWindow(T0 + timedelta(days=2), T0 + timedelta(days=3))
    warehouse.command("SYSTEM STOP MERGES routerscope.decisions")  # the copies stay two rows until read
    insert(warehouse, [twice, once], [])
    insert(warehouse, [twice], [])
    assert warehouse.query("SELECT count() FROM routerscope.decisions").result_rows[0][0] == 3
    assert folds(warehouse, day1) and folds(warehouse, day3)  # pending: FINAL everywhere
    assert window_times(warehouse, day1) == [t1]
    assert decision_copies.derive(warehouse) == 3
    markers = warehouse.query(
        "SELECT toString(event_id), event_time, earlier_time FROM routerscope.decision_later_copies"
    ).result_rows
    assert [(m[0], m[1].replace(tzinfo=UTC), m[2].replace(tzinfo=UTC)) for m in markers] == [(eid(1), t1, t1)]
    assert folds(warehouse, day1) and not folds(warehouse, day3)
    assert window_times(warehouse, day1) == [t1]  # FINAL: once
    assert window_times(warehouse, day3) == [t2]
    assert len(warehouse.query(COUNTED_SQL, parameters=day1.parameters()).result_rows) == 1
    # without the marker the unfolded read would count the stored copies: what the marker is for
    warehouse.command("TRUNCATE TABLE routerscope.decision_later_copies")
    assert not folds(warehouse, day1)
    assert window_times(warehouse, day1) == [t1, t1]


def test_two_events_sharing_an_id_and_time_under_two_task_types_are_marked_and_read_as_before(warehouse):
    """A contract breach the loader cannot see (each event is valid alone): two different events with one event_id
    and one event_time, under two task types, so two sorting keys FINAL never folds. The derivation marks the
    id and time (copies > 1), so the window keeps reading FINAL, and it reads what it read before the
    derivation: both rows, neither the earlier copy of the other."""
    t1 = T0 + timedelta(hours=3)
    first = decision(event_id=eid(7), request_id="a", session_id="sa", event_time=iso(t1), task_type="intent_classify")
    other = decision(event_id=eid(7), request_id="b", session_id="sb", event_time=iso(t1), task_type="short_reply")
    day1 = QueryWindow(T0, T0 + timedelta(days=1))
    warehouse.command("SYSTEM STOP MERGES routerscope.decisions")
    insert(warehouse, [first, other], [])
    before = window_times(warehouse, day1)
    assert before == [t1, t1]  # pending: FINAL and the look-back over the window's own rows
    assert decision_copies.derive(warehouse) == 2
    markers = warehouse.query(
        "SELECT toString(event_id), event_time, earlier_time FROM routerscope.decision_later_copies"
    ).result_rows
    assert [(m[0], m[1].replace(tzinfo=UTC), m[2].replace(tzinfo=UTC)) for m in markers] == [(eid(7), t1, t1)]
    assert folds(warehouse, day1)  # marked: FINAL, as before the markers existed
    assert window_times(warehouse, day1) == before
    counted = warehouse.query(COUNTED_SQL, parameters=day1.parameters()).result_rows
    assert sorted(r[0] for r in counted) == [eid(7), eid(7)]  # a marker is never taken for a pair


def test_a_row_stored_after_the_derivation_is_pending_and_folds_its_window(warehouse):
    """A copy stored after the last derivation makes every window read FINAL until the next one (its marker is
    not written yet), and the unfolded read takes only rows stored up to the derivation it checked."""
    t1 = T0 + timedelta(hours=1)
    event = decision(event_id=eid(1), request_id="a", session_id="sa", event_time=iso(t1))
    day1 = QueryWindow(T0, T0 + timedelta(days=1))
    warehouse.command("SYSTEM STOP MERGES routerscope.decisions")
    insert(warehouse, [event], [])
    decision_copies.derive(warehouse)
    assert not folds(warehouse, day1)
    elsewhere = decision(event_id=eid(2), request_id="b", session_id="sb", event_time=iso(t1 + timedelta(days=5)))
    insert(warehouse, [event, elsewhere], [])  # another block: an identical one would be deduplicated
    assert folds(warehouse, day1)
    assert window_times(warehouse, day1) == [t1]
    through = warehouse.query(FOLD_CHECK_SQL, parameters=day1.parameters()).result_rows[0][0]
    unfolded = decision_queries.MATERIALIZE_EVENTS_SQL[False, False, True]
    parameters = {**day1.parameters(), "through": through.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]}
    decision_queries.drop_window(warehouse)
    warehouse.command(unfolded, parameters=parameters)
    try:
        n = warehouse.query("SELECT count() FROM metric_window_events").result_rows[0][0]
    finally:
        decision_queries.drop_window(warehouse)
    assert n == 1  # the copy stored after `through` is not read
    decision_copies.derive(warehouse)
    assert folds(warehouse, day1)  # marked now
    assert window_times(warehouse, day1) == [t1]


def test_migration_0022_marks_the_repeated_keys_derived_before_it(warehouse):
    """A warehouse whose re-deliveries were derived before markers existed gets them from the migration."""
    t1 = T0 + timedelta(hours=1)
    event = decision(event_id=eid(1), request_id="a", session_id="sa", event_time=iso(t1))
    other = decision(event_id=eid(2), request_id="b", session_id="sb", event_time=iso(t1))
    warehouse.command("SYSTEM STOP MERGES routerscope.decisions")
    insert(warehouse, [event, other], [])
    insert(warehouse, [event], [])
    decision_copies.derive(warehouse)
    warehouse.command("TRUNCATE TABLE routerscope.decision_later_copies")  # as derived before 0022
    (migration,) = [m for m in discover() if m.name.startswith("0022")]
    for statement in migration.statements():
        warehouse.command(statement)
    rows = warehouse.query(
        "SELECT toString(event_id), earlier_time = event_time FROM routerscope.decision_later_copies"
    )
    assert rows.result_rows == [(eid(1), True)]
    assert window_times(warehouse, QueryWindow(T0, T0 + timedelta(days=1))) == [t1, t1]  # two events, each once


def test_an_earlier_copy_stored_after_the_later_one_takes_the_count_from_it(warehouse):
    """The later copy (D2) is stored and counted first; when the earlier copy (D1) arrives, D2's window
    leaves it out and D1's counts it, before the derivation (the look-back) and after it (the pair written
    for the copy already stored)."""
    d1 = T0 + timedelta(hours=10)
    d2 = d1 + timedelta(days=1)
    later = decision(event_id=eid(1), request_id="x", session_id="sx", event_time=iso(d2))
    earlier = {**later, "event_time": iso(d1)}
    day2 = QueryWindow(T0 + timedelta(days=1), T0 + timedelta(days=2))
    day1 = QueryWindow(T0, T0 + timedelta(days=1))

    def counted(window):
        return len(warehouse.query(COUNTED_SQL, parameters=window.parameters()).result_rows)

    insert(warehouse, [later], [])
    assert decision_copies.derive(warehouse) == 1
    assert (counted(day1), counted(day2)) == (0, 1)
    insert(warehouse, [earlier], [])
    assert (counted(day1), counted(day2)) == (1, 0)  # pending: the look-back
    assert decision_copies.derive(warehouse) == 1
    assert (counted(day1), counted(day2)) == (1, 0)  # derived: the pair
    assert warehouse.query("SELECT count() FROM routerscope.decision_later_copies").result_rows[0][0] == 1
    insert(warehouse, [later, earlier], [])  # both delivered again: nothing moves
    assert decision_copies.derive(warehouse) == 2
    assert (counted(day1), counted(day2)) == (1, 0)
    assert decision_copies.derive(warehouse) == 0  # nothing pending


def test_a_load_derives_the_pairs_and_a_run_killed_before_deriving_leaves_the_counts_right(stack):
    """A load ends by deriving the pairs of what it stored. A run killed before that leaves its rows pending:
    the windows read the look-back for them, and the next run derives them at its start. Simulated: the
    pairs and the record of the derivation emptied after a load."""
    d1 = T0 + timedelta(hours=10)
    x = decision(event_id=eid(1), request_id="x", session_id="sx", event_time=iso(d1))
    x_resent = {**x, "event_time": iso(d1 + timedelta(days=1))}
    others = [
        decision(event_id=eid(10 + i), request_id=f"r{i}", session_id=f"s{i}", event_time=iso(d1 + timedelta(hours=i)))
        for i in range(1, 30)
    ]
    produce(stack, names.TOPIC_DECISIONS, [dumps(e) for e in [x, *others, x_resent]], keys=[b"k"] * 31)
    day2 = QueryWindow(T0 + timedelta(days=1), T0 + timedelta(days=2))

    def counted_on_day2() -> set[str]:
        return {r[0] for r in query(stack, COUNTED_SQL, **day2.parameters())}

    def pairs() -> int:
        return scalar(stack, "SELECT count() FROM routerscope.decision_later_copies")

    assert load(stack, batch_size=400, **FAST).loaded["decisions"] == 31
    assert pairs() == 1
    assert eid(1) not in counted_on_day2()
    with open_warehouse(stack) as client:
        for table in (names.TABLE_DECISION_LATER_COPIES, names.TABLE_DECISION_COPIES_DERIVED):
            client.command(f"TRUNCATE TABLE {names.TABLES[table]}")
    assert eid(1) not in counted_on_day2()  # pending: the look-back
    assert load(stack, batch_size=400, **FAST).loaded["decisions"] == 0
    assert pairs() == 1
    assert eid(1) not in counted_on_day2()


def test_rows_stored_while_the_clock_is_behind_the_last_derivation_stay_pending_and_count_once(stack, caplog):
    """A clock stepped back (a resumed VM, an NTP step) must not make the stored rows look derived: the loader's
    views stamp a decision's ingested_at past the last derivation's mark (sql.STORED_AT), so the rows stay
    pending, and every window applies the look-back and FINAL for them. Simulated: the last derivation recorded
    with the clock an hour ahead of the one the next load runs on. Stamped by the clock instead, the re-delivery
    would be read twice and the re-sent copy counted on its own day."""
    d1 = T0 + timedelta(hours=10)
    x = decision(event_id=eid(1), request_id="x", session_id="sx", event_time=iso(d1))
    x_resent = {**x, "event_time": iso(d1 + timedelta(days=1))}
    y = decision(event_id=eid(2), request_id="y", session_id="sy", event_time=iso(d1 + timedelta(days=1, hours=1)))
    day1, day2 = QueryWindow(T0, T0 + timedelta(days=1)), QueryWindow(T0 + timedelta(days=1), T0 + timedelta(days=2))
    produce(stack, names.TOPIC_DECISIONS, [dumps(x)], keys=[b"k"])
    assert load(stack, **FAST).loaded["decisions"] == 1
    with open_warehouse(stack) as client:
        client.command(
            f"INSERT INTO {names.TABLES[names.TABLE_DECISION_COPIES_DERIVED]} (derived_through) "
            "VALUES (now64(3) + INTERVAL 1 HOUR)"
        )
        mark = client.query(f"SELECT max(derived_through) FROM {names.TABLES[names.TABLE_DECISION_COPIES_DERIVED]}")
        mark = mark.result_rows[0][0]
    produce(stack, names.TOPIC_DECISIONS, [dumps(e) for e in (x, x_resent, y)], keys=[b"k"] * 3)
    caplog.set_level(logging.WARNING, logger="routerscope.ingest")
    assert load(stack, **FAST).loaded["decisions"] == 3
    said = [r.getMessage() for r in caplog.records if "behind the last derivation" in r.getMessage()]
    assert said and " s behind " in said[0]  # the run says why its rows stay pending, and by how much
    with open_warehouse(stack) as client:
        client.command("SYSTEM STOP MERGES routerscope.decisions")  # the re-delivery stays two rows until read
        stamped = client.query(
            "SELECT min(ingested_at), count() FROM routerscope.decisions WHERE ingested_at > {m:DateTime64(3, 'UTC')}",
            parameters={"m": mark.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]},
        ).result_rows[0]
        assert stamped[1] == 3  # every row stored since is past the mark, the clock an hour behind it
        assert decision_copies.derive(client) == 0  # stamped after now: left pending, not taken as derived
        assert folds(client, day1) and folds(client, day2)
        assert window_times(client, day1) == [d1]  # once, though stored twice
        assert window_times(client, day2) == [d1 + timedelta(days=1, hours=1)]  # the re-sent copy is not counted
