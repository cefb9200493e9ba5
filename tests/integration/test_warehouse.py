"""The embedded warehouse: migrations, the schema snapshot, and processes taking turns."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from routerscope.core import names
from routerscope.core.errors import WarehouseError
from routerscope.warehouse.client import open_warehouse
from routerscope.warehouse.migrate import MIGRATIONS_DIR, discover, migrate
from tests.support.home import REPO, clean_env, run_cli, settings_for

pytestmark = pytest.mark.integration

SNAPSHOT = Path(__file__).parent / "snapshots" / "schema.sql"


def schema_ddl(client) -> str:
    rows = client.query(
        "SELECT name, create_table_query FROM system.tables WHERE database = {db:String} ORDER BY name",
        parameters={"db": names.DATABASE},
    ).result_rows
    return "\n\n".join(f"-- {name}\n{ddl};" for name, ddl in rows) + "\n"


def test_migrations_apply_once_and_a_second_run_changes_nothing(warehouse_settings):
    with open_warehouse(warehouse_settings) as client:
        first = migrate(client)
        before = schema_ddl(client)
        second = migrate(client)
        after = schema_ddl(client)
        recorded = client.query(f"SELECT count() FROM {names.DATABASE}.{names.TABLE_MIGRATIONS}").result_rows[0][0]
    assert first == [m.name for m in discover()]
    assert second == []
    assert before == after
    assert recorded == len(first)


def test_schema_matches_the_snapshot(warehouse_settings):
    """A change to the tables shows up here; regenerate with ROUTERSCOPE_UPDATE_SNAPSHOTS=1 and review."""
    with open_warehouse(warehouse_settings) as client:
        migrate(client)
        ddl = schema_ddl(client)
    if os.environ.get("ROUTERSCOPE_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOT.write_text(ddl)
    assert ddl == SNAPSHOT.read_text()
    for table in (
        names.TABLE_DECISIONS,
        names.TABLE_LABELS,
        names.TABLE_BREAKER_EVENTS,
        names.TABLE_QUARANTINE,
        names.TABLE_INGEST_OFFSETS,
    ):
        assert f"-- {table}\n" in ddl


def test_every_topic_maps_to_a_created_table(warehouse_settings):
    with open_warehouse(warehouse_settings) as client:
        migrate(client)
        tables = {
            r[0]
            for r in client.query(
                "SELECT name FROM system.tables WHERE database = {db:String}", parameters={"db": names.DATABASE}
            ).result_rows
        }
    assert set(names.TOPIC_TABLE.values()) <= tables


def test_an_edited_migration_is_refused(warehouse_settings, tmp_path):
    migrations = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS_DIR, migrations)
    with open_warehouse(warehouse_settings) as client:
        migrate(client, migrations)
        first = sorted(migrations.glob("*.sql"))[0]
        first.write_text(first.read_text() + "\n-- an edit after the fact\n")
        with pytest.raises(WarehouseError, match="frozen"):
            migrate(client, migrations)


def test_a_new_migration_file_is_applied_on_the_next_run(warehouse_settings, tmp_path):
    migrations = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS_DIR, migrations)
    with open_warehouse(warehouse_settings) as client:
        migrate(client, migrations)
        (migrations / "9999_create_probe.sql").write_text(
            "-- probe\nCREATE TABLE IF NOT EXISTS routerscope.probe (x UInt8) ENGINE = MergeTree ORDER BY x;\n"
        )
        assert migrate(client, migrations) == ["9999_create_probe"]
        assert client.query("EXISTS TABLE routerscope.probe").result_rows[0][0] == 1


def test_replacing_tables_fold_a_reloaded_event(warehouse_settings):
    row = dict(
        label_id="00000000-0000-0000-0000-000000000001",
        event_time="2026-11-29 12:00:00.000",
        schema_version=1,
        request_id="r1",
        source="human_review",
        device_acceptable=True,
        route_correct=None,
        labeler=None,
        kafka_topic=names.TOPIC_LABELS,
        kafka_partition=0,
        kafka_offset=7,
    )
    with open_warehouse(warehouse_settings) as client:
        migrate(client)
        for _ in range(3):  # different tokens: only the table engine can fold these
            client.command(
                "INSERT INTO routerscope.labels (label_id, event_time, schema_version, request_id, source, "
                "device_acceptable, kafka_topic, kafka_partition, kafka_offset) VALUES "
                "({label_id:UUID}, {event_time:DateTime64(3)}, 1, {request_id:String}, {source:String}, "
                "true, {kafka_topic:String}, 0, 7)",
                parameters=row,
            )
        final = client.query("SELECT count() FROM routerscope.labels FINAL").result_rows[0][0]
    assert final == 1


HOLDER = textwrap.dedent(
    """
    import sys, time
    from routerscope.core.settings import Settings
    from routerscope.warehouse.client import open_warehouse
    from routerscope.warehouse.migrate import migrate
    with open_warehouse(Settings.from_env(), purpose=sys.argv[1]) as client:
        migrate(client)
        print("holding", flush=True)
        client.command("CREATE TABLE IF NOT EXISTS routerscope.turns (who String) ENGINE = MergeTree ORDER BY who")
        client.command("INSERT INTO routerscope.turns VALUES ({who:String})", parameters={"who": sys.argv[1]})
        time.sleep(float(sys.argv[2]))
    print("done", flush=True)
    """
)


def _holder(home: Path, name: str, hold_s: float) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", HOLDER, name, str(hold_s)],
        env=clean_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )


def test_two_processes_one_after_the_other(home):
    for name in ("first", "second"):
        proc = _holder(home, name, 0)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert "Cannot lock file" not in err
    with open_warehouse(settings_for(home)) as client:
        who = sorted(r[0] for r in client.query("SELECT who FROM routerscope.turns").result_rows)
    assert who == ["first", "second"]


@pytest.mark.slow
def test_two_processes_at_once_the_second_waits_then_succeeds(home):
    first = _holder(home, "first", 3.0)
    assert first.stdout.readline().strip() == "holding"  # the first has the warehouse open now
    started = time.monotonic()
    second = _holder(home, "second", 0)
    out2, err2 = second.communicate(timeout=60)
    waited = time.monotonic() - started
    out1, err1 = first.communicate(timeout=60)
    assert first.returncode == 0 and second.returncode == 0, (err1, err2)
    assert "waiting for the warehouse" in err2 and "pid" in err2 and "first" in err2
    assert "Cannot lock file" not in err1 + err2
    assert waited > 1.0  # it really waited for the first to finish
    with open_warehouse(settings_for(home)) as client:
        assert client.query("SELECT count() FROM routerscope.turns").result_rows[0][0] == 2


def test_nested_units_of_work_in_one_process_share_the_client(warehouse_settings):
    with open_warehouse(warehouse_settings) as outer:
        with open_warehouse(warehouse_settings) as inner:
            assert inner is outer
            assert inner.query("SELECT 1").result_rows == [(1,)]
        assert outer.query("SELECT 2").result_rows == [(2,)]


def test_migrate_command_and_unknown_dsn_scheme(home):
    ok = run_cli("migrate", env=clean_env(home))
    assert ok.returncode == 0, ok.stderr
    from routerscope.warehouse.migrate import discover

    assert f"applied {len(discover())} migration(s)" in ok.stdout
    again = run_cli("migrate", env=clean_env(home))
    assert "up to date" in again.stdout
    bad = run_cli("migrate", env=clean_env(home, ROUTERSCOPE_CLICKHOUSE_DSN="mysql://db:3306/x"))
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "unknown scheme 'mysql'" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_unreachable_clickhouse_server_is_one_clear_line(home):
    from routerscope.core.procs import free_port

    env = clean_env(home, ROUTERSCOPE_CLICKHOUSE_DSN=f"http://default:pw@127.0.0.1:{free_port()}")
    result = run_cli("migrate", env=env)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("routerscope: error: cannot open the warehouse http://default:***@")
