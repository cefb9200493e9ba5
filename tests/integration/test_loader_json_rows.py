"""How the Python parser's rows reach the warehouse: JSON lines through the input tables
(routerscope/warehouse/queries/json_rows.py), parsed in chunks by a worker process
(routerscope/warehouse/ingest/parsing.py).

The JSON lines must store exactly what the column-by-column Native insert of the same decoded events
stores (rows.py's builders through clickhouse-connect, the loader's previous way in), for values
chosen to be hard for a second parser: times before 1970 and near 2299 with microseconds, non-UTC
offsets, subnormal floats, negative zero and long fractions, strings with escapes, control characters and
non-ASCII text, optional members absent, null or partly set. And a load parsed by the worker must
be the same load as one parsed in-process, also when the worker dies in the middle."""

from __future__ import annotations

import math
import os
import signal
import time
from datetime import UTC, datetime, timedelta, timezone

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from routerscope.contract.validation import CONTRACTS
from routerscope.core import broker, names
from routerscope.core.procs import free_port
from routerscope.warehouse.client import open_warehouse
from routerscope.warehouse.ingest import batch as batch_module
from routerscope.warehouse.ingest.loader import LoadConfig, Loader
from routerscope.warehouse.ingest.parsing import ParseWorker, parse_chunk
from routerscope.warehouse.ingest.rows import FACTS
from routerscope.warehouse.migrate import migrate
from routerscope.warehouse.queries import json_rows
from tests.support.bad_messages import MALFORMED
from tests.support.events import breaker, decision, dumps, label
from tests.support.home import clean_env, run_cli, settings_for
from tests.support.ingest import produce, valid_decisions

pytestmark = pytest.mark.integration

DECISIONS, LABELS, BREAKERS = names.TOPIC_DECISIONS, names.TOPIC_LABELS, names.TOPIC_BREAKERS

# -- the JSON lines store what the Native columns store -------------------------------------------

_times = st.datetimes(
    min_value=datetime(1900, 1, 2), max_value=datetime(2299, 12, 30), timezones=st.just(UTC)
) | st.datetimes(min_value=datetime(1960, 1, 1), max_value=datetime(1980, 1, 1), timezones=st.just(UTC))
_offsets = st.sampled_from([0, 1, -1, 330, -570, 840]).map(lambda m: timezone(timedelta(minutes=m)))
_floats = st.floats(min_value=0, max_value=100_000) | st.sampled_from(
    [0.0, -0.0, 5e-324, 2.2250738585072014e-308, 0.1, 1 / 3, 1e-7, 99_999.999_999_999_99, 12_345.678_901_234_567]
)
_shares = st.floats(min_value=0, max_value=1)
_text = st.text(st.characters(codec="utf-8"), max_size=40)


def _iso(t: datetime, tz: timezone) -> str:
    return t.astimezone(tz).isoformat()


@st.composite
def _decisions(draw) -> dict:
    version = draw(st.sampled_from([1, 2]))
    overrides = {
        "schema_version": version,
        "event_id": str(draw(st.uuids())).upper() if draw(st.booleans()) else str(draw(st.uuids())),
        "event_time": _iso(draw(_times), draw(_offsets)),
        "request_id": draw(_text.filter(lambda s: 1 <= len(s) <= 128)),
        "session_id": draw(st.sampled_from(["s", 's\n\t"\\', "é漢\u2028\x7f", "\x00\x1f"])),
        "latency_ms": draw(_floats),
        "confidence": draw(st.none() | _shares),
        "threshold": draw(st.none() | _shares),
        "attempts": [{"level": 0, "outcome": "ok", "latency_ms": draw(_floats)}],
        "app_id": draw(st.none() | _text),
        "device_tier": draw(st.none() | _text.filter(lambda s: len(s) <= 32)),
    }
    if draw(st.booleans()):
        overrides["breaker"] = draw(
            st.fixed_dictionaries(
                {}, optional={"device": st.sampled_from(["open", "closed"]), "cloud": st.just("half_open")}
            )
        )
    if draw(st.booleans()):
        overrides["cost_usd"] = draw(_floats)
    if version == 2:
        stats = draw(
            st.none()
            | st.fixed_dictionaries(
                {},
                optional={
                    "peak_mem_mb": _floats,
                    "thermal_state": st.sampled_from(["nominal", "critical"]),
                    "decode_tps": st.none() | _floats,
                    "cold_start": st.booleans(),
                    "resident_mem_mb": st.none() | _floats,
                },
            )
        )
        if stats is not None or draw(st.booleans()):
            overrides["device_stats"] = stats
        if draw(st.booleans()):
            overrides["rollout_stage"] = "canary"
    return decision(**overrides)


def _rows(client, table: str, columns) -> list[tuple]:
    result = client.query(f"SELECT {', '.join(columns)} FROM {names.DATABASE}.{table} ORDER BY kafka_offset")
    return [tuple("nan" if isinstance(v, float) and math.isnan(v) else v for v in row) for row in result.result_rows]


@pytest.fixture
def twin_warehouse(home):
    """The input tables and views, and a twin of each facts table for the Native insert."""
    settings = settings_for(home)
    with open_warehouse(settings, purpose="test") as client:
        migrate(client)
        for statements in json_rows.CREATE.values():
            for sql in statements:
                client.command(sql)
        for table, _, _ in FACTS.values():
            client.command(f"CREATE TABLE {names.DATABASE}.native_{table} AS {names.DATABASE}.{table}")
        yield client


def _insert_both_ways(client, topic: str, raws: list[bytes], partition: int, first_offset: int = 0) -> None:
    """The JSON lines through the input table (facts and ledger), and the Native columns of the same
    decoded events into the twin facts table."""
    table, columns, build = FACTS[topic]
    offsets = list(range(first_offset, first_offset + len(raws)))
    parsed = parse_chunk(topic, [(partition, o, raw, False) for o, raw in zip(offsets, raws)])
    assert all(p[0] is not None for p in parsed), [p for p in parsed if p[0] is None]
    client.raw_insert(
        json_rows.INPUT_TABLE[topic],
        None,
        b"\n".join(p[0] for p in parsed),
        settings=json_rows.INSERT_SETTINGS,
        fmt="JSONEachRow",
    )
    decoded = [CONTRACTS[topic].parse(raw)[0] for raw in raws]
    client.insert(
        f"{names.DATABASE}.native_{table}",
        build(decoded, topic, [partition] * len(raws), offsets),
        column_names=list(columns),
        column_oriented=True,
    )


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_decisions(), min_size=1, max_size=12))
def test_json_lines_store_exactly_what_native_columns_store(twin_warehouse, events):
    client = twin_warehouse
    table, columns, _ = FACTS[DECISIONS]
    for t in (table, f"native_{table}"):
        client.command(f"TRUNCATE TABLE {names.DATABASE}.{t}")
    _insert_both_ways(client, DECISIONS, [dumps(e) for e in events], partition=3)
    assert _rows(client, table, columns) == _rows(client, f"native_{table}", columns)


def test_json_lines_of_labels_and_breakers_store_what_native_columns_store(twin_warehouse):
    client = twin_warehouse
    for topic, events in (
        (LABELS, [label(), label(labeler='a\\b "é"', route_correct=None, device_acceptable=None)]),
        (
            BREAKERS,
            [breaker(seq=4294967295), breaker(trigger=None, event_time="1969-12-31T23:59:59.9995-01:30")],
        ),
    ):
        table, columns, _ = FACTS[topic]
        _insert_both_ways(client, topic, [dumps(e) for e in events], partition=0)
        assert _rows(client, table, columns) == _rows(client, f"native_{table}", columns)
        assert len(_rows(client, table, columns)) == 2
    seqs = client.query("SELECT seq FROM routerscope.breaker_events ORDER BY seq").result_rows
    assert seqs == [(4294967295,), (None,)]  # the optional seq: the largest the column holds, and absent


def test_the_json_insert_writes_the_ledger_rows_of_its_events(twin_warehouse):
    client = twin_warehouse
    client.command(f"TRUNCATE TABLE {names.TABLES[names.TABLE_LOADED_MESSAGES]}")
    raws = [dumps(decision(event_id=f"00000000-0000-4000-8000-00000000000{i}")) for i in range(3)]
    _insert_both_ways(client, DECISIONS, raws, partition=1, first_offset=10)
    ledger = client.query(
        f"SELECT kafka_topic, kafka_partition, kafka_offset, toString(record_id) FROM "
        f"{names.TABLES[names.TABLE_LOADED_MESSAGES]} ORDER BY kafka_offset"
    ).result_rows
    assert ledger == [(DECISIONS, 1, 10 + i, f"00000000-0000-4000-8000-00000000000{i}") for i in range(3)]


# -- the parse worker -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mixed_topics(tmp_path_factory):
    """A broker holding a mixed load: valid decisions, every malformed kind, labels, breakers."""
    home = tmp_path_factory.mktemp("parse-worker")
    settings = settings_for(home)
    broker.start(settings, port=free_port())
    payloads = valid_decisions(600)
    for i, (_, raw, _) in enumerate(MALFORMED):
        payloads.insert(i * 37, raw)
    produce(settings, DECISIONS, payloads)
    produce(settings, LABELS, [dumps(label(request_id=f"req-{i}")) for i in range(50)])
    produce(settings, BREAKERS, [dumps(breaker()) for _ in range(5)])
    yield home, settings, len(payloads)
    broker.stop(settings)


def _load(home, bootstrap_settings, name: str, **options):
    settings = settings_for(
        home,
        ROUTERSCOPE_KAFKA_BOOTSTRAP=bootstrap_settings.kafka_bootstrap(),
        ROUTERSCOPE_CLICKHOUSE_DSN=f"chdb://{home / name}",
    )
    loader = Loader(settings, LoadConfig(idle_timeout_s=0.5, batch_size=250, **options))
    result = loader.run()
    with open_warehouse(settings, purpose="test") as client:
        tables = {
            table: client.query(f"SELECT * EXCEPT ({stamp}) FROM {names.DATABASE}.{table} ORDER BY ALL").result_rows
            for table, stamp in (
                *((t, "ingested_at") for t, _, _ in FACTS.values()),
                (names.TABLE_QUARANTINE, "quarantined_at"),
            )
        }
        tables["ledger"] = client.query(
            f"SELECT kafka_topic, kafka_partition, kafka_offset, record_id, event_time FROM "
            f"{names.TABLES[names.TABLE_LOADED_MESSAGES]} ORDER BY ALL"
        ).result_rows
    return loader, result, tables


def test_a_load_parsed_by_the_worker_is_the_load_parsed_in_process(mixed_topics, monkeypatch):
    home, settings, n = mixed_topics
    _, inline, inline_tables = _load(home, settings, "inline", parse_worker=False)
    monkeypatch.setattr(batch_module, "MIN_WORKER_CHUNK", 1)
    loader, worked, worked_tables = _load(home, settings, "worker", parse_worker=True)
    assert loader.parsing.worker.submitted > 0 and loader.parsing.worker.failed is None  # the worker did the parsing
    assert inline.as_dict() == worked.as_dict()
    assert inline.loaded["decisions"] + inline.quarantined["decisions"] == n
    assert inline.quarantined["decisions"] == len(MALFORMED)
    assert inline_tables == worked_tables
    assert len(worked_tables["ledger"]) == 600 + 50 + 5


def test_a_worker_killed_mid_load_loses_and_doubles_nothing(mixed_topics, monkeypatch):
    """The worker dies after its first chunk: the loader says so once, parses the rest itself, and
    the load is the same as an in-process one."""
    home, settings, _ = mixed_topics
    _, inline, inline_tables = _load(home, settings, "inline-2", parse_worker=False)
    monkeypatch.setattr(batch_module, "MIN_WORKER_CHUNK", 1)
    original = ParseWorker.submit
    calls = []

    def submit_then_kill(self, topic, items):
        future = original(self, topic, items)
        calls.append(topic)
        if len(calls) == 1:
            future.result(timeout=30)  # the first chunk is parsed by the worker ...
            os.kill(self._process.pid, signal.SIGKILL)  # ... which then dies
        return future

    monkeypatch.setattr(ParseWorker, "submit", submit_then_kill)
    loader, worked, worked_tables = _load(home, settings, "killed", parse_worker=True)
    assert loader.parsing.worker.failed is not None
    assert inline.as_dict() == worked.as_dict()
    assert inline_tables == worked_tables


def test_json_lines_carry_the_message_bytes_of_the_routers_own_events():
    """The router's messages are the canonical encoding of their event: the line is the message
    itself behind the lineage, not a re-encoding."""
    raw = msgspec.json.encode(CONTRACTS[DECISIONS].parse(dumps(decision(schema_version=2)))[0])
    (line, month), *_ = parse_chunk(DECISIONS, [(2, 41, raw, False)])
    assert line == b'{"kafka_partition":2,"kafka_offset":41,' + raw[1:]
    assert month == 2026 * 12 + 11


@pytest.mark.slow
def test_a_row_the_warehouse_refuses_leaves_no_ledger_row_behind(stack, home):
    """The facts insert's two views run one after the other in no promised order (in a warehouse
    opened again, the ledger's first): a block the facts table refuses may already have its ledger
    rows. An insert folds them to `rejected` beside the refused row's quarantine (nothing on the ingest
    path deletes: a DELETE cut short by a full disk broke the warehouse); the ledger's loaded rows
    name exactly the facts."""
    produce(stack, DECISIONS, valid_decisions(5))
    assert Loader(stack, LoadConfig(idle_timeout_s=0.5)).run().loaded["decisions"] == 5  # creates the views
    with open_warehouse(stack, purpose="test") as client:
        client.command(
            f"ALTER TABLE {names.TABLES[names.TABLE_DECISIONS]} "
            "ADD CONSTRAINT no_reject CHECK request_id != 'reject-me'"
        )
    produce(
        stack,
        DECISIONS,
        valid_decisions(3, start=10) + [dumps(decision(request_id="reject-me"))] + valid_decisions(2, start=20),
    )
    second = run_cli("load", "--json", "--idle-timeout", "0.5", env=clean_env(home))  # a new process opens it again
    assert second.returncode == 0, second.stderr
    with open_warehouse(stack, purpose="test") as client:
        facts = client.query(
            f"SELECT kafka_partition, kafka_offset FROM {names.TABLES[names.TABLE_DECISIONS]} FINAL ORDER BY ALL"
        ).result_rows
        ledger = client.query(
            f"SELECT kafka_partition, kafka_offset FROM {names.TABLES[names.TABLE_LOADED_MESSAGES]} FINAL "
            "WHERE NOT rejected ORDER BY ALL"
        ).result_rows
        # the refused message's ledger row is folded to `rejected` by an insert, never deleted
        rejected = client.query(
            f"SELECT count() FROM {names.TABLES[names.TABLE_LOADED_MESSAGES]} FINAL WHERE rejected"
        ).result_rows[0][0]
        refused = client.query(f"SELECT rules FROM {names.TABLES[names.TABLE_QUARANTINE]}").result_rows
    assert len(facts) == 10
    assert ledger == facts
    assert refused == [(["insert.rejected"],)]
    assert rejected == 1


def test_closing_a_stuck_worker_returns_at_once():
    """A worker that stopped answering while chunks wait in the pipe to it: giving up on it (the
    loader does after WORKER_TIMEOUT_S) kills it instead of waiting on the full pipe."""
    worker = ParseWorker()
    items = [(0, i, raw, False) for i, raw in enumerate(valid_decisions(20_000))]
    worker.submit(DECISIONS, items[:10]).result(timeout=30)
    os.kill(worker._process.pid, signal.SIGSTOP)
    waiting = [worker.submit(DECISIONS, items) for _ in range(3)]  # more than a pipe holds
    started = time.monotonic()
    worker.give_up(TimeoutError("stuck"))
    assert time.monotonic() - started < 10
    assert worker.submit(DECISIONS, items) is None  # the loader parses in-process from here on
    for future in waiting:
        with pytest.raises(RuntimeError, match="parse worker stopped"):
            future.result(timeout=10)


def test_a_worker_that_cannot_start_leaves_the_parsing_to_the_loader(monkeypatch, capsys):
    """No interpreter to start (a locked-down host): one line on stderr, and the loader parses itself."""
    monkeypatch.setattr("routerscope.warehouse.ingest.parsing.sys.executable", "/nonexistent/python")
    worker = ParseWorker()
    assert worker.submit(DECISIONS, [(0, 0, dumps(decision()), False)]) is None
    assert worker.failed is not None and "FileNotFoundError" in worker.failed
    assert "parsing in-process" in capsys.readouterr().err
