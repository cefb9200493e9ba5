"""`routerscope doctor` on a warehouse a crash or a bad disk damaged, then `routerscope load`: nothing lost.

The engine moves a part it cannot load aside as the warehouse opens, and a part with flipped bytes only
fails when a query reads it. Either way its rows leave the facts table while the stored positions still
say they were loaded. `doctor` opens the warehouse first, finds the damage, reconciles the positions with
the facts stored, and the next load fetches exactly the missing rows again from the broker (issue 40:
20,000 of 300,000 rows lost for good after a truncated part, `doctor` exit 0 "healthy")."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from routerscope.core import names
from tests.support.home import clean_env, run_cli
from tests.support.ingest import produce, query, scalar, valid_decisions

pytestmark = pytest.mark.integration

DECISIONS = names.TOPIC_DECISIONS


def _loaded(stack, home, n: int) -> None:
    produce(stack, DECISIONS, valid_decisions(n))
    done = run_cli("load", "--json", "--idle-timeout", "0.5", env=clean_env(home))
    assert done.returncode == 0 and json.loads(done.stdout)["loaded"]["decisions"] == n, done.stderr


def _largest_part(stack, home) -> tuple[Path, int]:
    """The largest part no merge made (a merged part's sources may still be on disk, and the engine takes
    them back when it sets the merged one aside: nothing would be lost)."""
    ((name, rows),) = query(
        stack,
        "SELECT name, rows FROM system.parts WHERE database = 'routerscope' AND table = 'decisions' AND active "
        "AND level = 0 ORDER BY rows DESC LIMIT 1",
    )
    return (home / "warehouse" / "data" / "routerscope" / "decisions").resolve() / name, int(rows)


def _column_file(part: Path) -> Path:
    """The file holding `event_time` (every query reads it): its own in a wide part, `data.bin` in a compact one."""
    wide = part / "event_time.bin"
    return wide if wide.exists() else part / "data.bin"


def _held(stack) -> tuple[int, int, int]:
    return (
        scalar(stack, "SELECT count() FROM routerscope.decisions FINAL"),
        scalar(stack, "SELECT uniqExact(event_id) FROM routerscope.decisions"),
        scalar(stack, "SELECT count() FROM routerscope.quarantine"),
    )


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_truncated_part_and_a_torn_mutation_lose_nothing_through_doctor_and_load(stack, home):
    """300,000 decisions; the largest part's `data.bin` cut short and a mutation file torn after its
    header. `doctor` names the torn file; `doctor --repair` moves it aside, opens the warehouse (which
    sets the part aside), finds the part and the rows it took, and the next load loads exactly those."""
    n = 300_000
    _loaded(stack, home, n)
    part, rows = _largest_part(stack, home)
    column = _column_file(part)
    os.truncate(column, column.stat().st_size // 3)
    ledger = (home / "warehouse" / "data" / "routerscope" / "loaded_messages").resolve()
    (ledger / "mutation_9.txt").write_bytes(b"format version: 1\ncreate ti")
    env = clean_env(home)

    found = run_cli("doctor", env=env)
    assert found.returncode == 1
    assert "loaded_messages: torn mutation mutation_9.txt (27 bytes, cut short after its header)" in found.stdout
    assert "the warehouse does not open" in found.stdout and "doctor --repair" in found.stdout

    repaired = run_cli("doctor", "--repair", "--json", env=env)
    report = json.loads(repaired.stdout)
    assert repaired.returncode == 0 and report["opened"] and report["healthy"], repaired.stdout
    kinds = [(f["table"], f["kind"]) for f in report["findings"]]
    assert ("loaded_messages", "torn mutation") in kinds and ("decisions", "detached part") in kinds
    missing = [f for f in report["findings"] if f["kind"] == "missing rows"]
    assert sum(f["rows"] for f in missing) == rows, (report["rows"], report["findings"])  # the part's rows
    assert all("the broker still holds them" in f["note"] for f in missing)
    assert report["rows"]["decisions"] == n - rows

    reloaded = run_cli("load", "--json", "--idle-timeout", "0.5", env=env)
    assert reloaded.returncode == 0, reloaded.stderr
    assert json.loads(reloaded.stdout)["loaded"]["decisions"] == rows
    assert "loading them again from the broker" in reloaded.stderr
    assert _held(stack) == (n, n, 0)  # 0 of 300,000 lost, none doubled, nothing quarantined
    again = run_cli("doctor", env=env)
    assert again.returncode == 0 and "nothing detached, no torn mutation file" in again.stdout
    assert json.loads(run_cli("load", "--json", "--idle-timeout", "0.5", env=env).stdout)["loaded"]["decisions"] == 0


@pytest.mark.parametrize("damage", ["flipped_bytes", "deleted_file"])
@pytest.mark.slow
def test_a_damaged_part_is_one_line_at_query_time_and_doctor_and_load_lose_nothing(stack, home, damage):
    """64 flipped bytes pass the opening and fail the first query that reads them (`metrics` printed a
    traceback, `doctor` said healthy); a deleted file of a part is set aside as the warehouse opens."""
    n = 30_000
    _loaded(stack, home, n)
    part, rows = _largest_part(stack, home)
    env = clean_env(home)
    if damage == "flipped_bytes":
        with open(_column_file(part), "r+b") as f:  # 64 bytes, 8 at each of 8 places across the file
            size = f.seek(0, os.SEEK_END)
            for i in range(1, 9):
                f.seek(size * i // 9)
                flipped = bytes(b ^ 0xFF for b in f.read(8))
                f.seek(size * i // 9)
                f.write(flipped)
        metrics = run_cli("metrics", "--start", "2026-01-01", "--end", "2027-01-01", env=env)
        assert metrics.returncode == 1 and "Traceback" not in metrics.stderr
        (line,) = metrics.stderr.strip().splitlines()
        assert line.startswith("routerscope: error: the warehouse holds a damaged part") and "doctor --repair" in line
    else:
        _column_file(part).unlink()

    found = run_cli("doctor", env=env)
    shown = "damaged part" if damage == "flipped_bytes" else "missing rows"
    assert found.returncode == 1 and shown in found.stdout and "the warehouse opens" in found.stdout, found.stdout
    repaired = run_cli("doctor", "--repair", "--json", env=env)
    report = json.loads(repaired.stdout)
    assert repaired.returncode == 0 and report["healthy"], repaired.stdout
    assert sum(f["rows"] for f in report["findings"] if f["kind"] == "missing rows") == rows
    reloaded = run_cli("load", "--json", "--idle-timeout", "0.5", env=env)
    assert json.loads(reloaded.stdout)["loaded"]["decisions"] == rows, reloaded.stderr
    assert _held(stack) == (n, n, 0)
    assert run_cli("metrics", "--start", "2026-01-01", "--end", "2027-01-01", env=env).returncode == 0


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_detached_copy_of_blocks_the_table_holds_is_never_attached_so_nothing_counts_twice(stack, home):
    """100,000 decisions; copies of active parts left in `detached/` the way a crash leaves them
    (`ignored_`, `broken-on-start_`, `unexpected_`). `doctor --repair` attached them before and 100,000
    decisions became 120,000 rows, said healthy, and `metrics` counted 120,000 requests. Now each copy is
    named with the active part that holds its blocks, set aside, and the table keeps 100,000 rows."""
    import shutil

    n = 100_000
    _loaded(stack, home, n)
    parts = query(
        stack,
        "SELECT name FROM system.parts WHERE database = 'routerscope' AND table = 'decisions' AND active "
        "ORDER BY rows DESC LIMIT 3",
    )
    table = (home / "warehouse" / "data" / "routerscope" / "decisions").resolve()
    copies = []
    for (name,), prefix in zip(parts, ("ignored_", "broken-on-start_", "unexpected_"), strict=False):
        shutil.copytree(table / name, table / "detached" / f"{prefix}{name}")
        copies.append((f"{prefix}{name}", name))
    env = clean_env(home)

    found = json.loads(run_cli("doctor", "--json", env=env).stdout)
    named_copies = {f["name"]: f for f in found["findings"] if f["kind"] == "detached part"}
    assert set(named_copies) == {c for c, _ in copies}
    for copy, original in copies:
        assert original in named_copies[copy]["covered_by"] and "never attaches it" in named_copies[copy]["note"]

    repaired = run_cli("doctor", "--repair", "--json", env=env)
    report = json.loads(repaired.stdout)
    assert repaired.returncode == 0 and report["healthy"], repaired.stdout
    for finding in (f for f in report["findings"] if f["kind"] == "detached part"):
        assert finding["repaired"] and "not attached (its rows would count twice)" in finding["note"]
        assert finding["covered_by"] and "moved to" in finding["note"]
    assert report["rows"]["decisions"] == n
    assert scalar(stack, "SELECT count() FROM routerscope.decisions") == n  # not FINAL: no copy in the table
    assert _held(stack) == (n, n, 0)
    assert not list((table / "detached").iterdir())  # set aside under the doctor's folder, named
    assert len(list((home / "doctor").rglob("*_*_*_*"))) >= len(copies)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_torn_mutation_file_sends_load_to_doctor_and_no_raw_engine_error_reaches_the_output(stack, home):
    """With a torn mutation file, `load` said to check ROUTERSCOPE_CLICKHOUSE_DSN after 17 lines of the
    engine's own errors, and `doctor` printed those lines before its JSON. Now `load` is one line naming
    the file and `doctor --repair`, and `doctor` prints its report alone."""
    _loaded(stack, home, 100)
    ledger = (home / "warehouse" / "data" / "routerscope" / "loaded_messages").resolve()
    (ledger / "mutation_9.txt").write_bytes(b"format version: 1\ncreate ti")
    env = clean_env(home)

    loading = run_cli("load", "--idle-timeout", "0.5", env=env)
    assert loading.returncode == 1
    (line,) = loading.stderr.strip().splitlines()
    assert line.startswith("routerscope: error: the warehouse") and "mutation_9.txt" in line
    assert "routerscope doctor --repair" in line and "ROUTERSCOPE_CLICKHOUSE_DSN" not in line

    doctor = run_cli("doctor", "--json", env=env)
    assert doctor.returncode == 1 and "DB::Exception" not in doctor.stderr and doctor.stderr.strip() == ""
    report = json.loads(doctor.stdout)
    assert [f["name"] for f in report["findings"]] == ["mutation_9.txt"] and not report["opened"]
    assert run_cli("doctor", "--repair", env=env).returncode == 0
    assert json.loads(run_cli("load", "--json", "--idle-timeout", "0.5", env=env).stdout)["loaded"]["decisions"] == 0
