"""`routerscope doctor`: find and repair what a crash, a full disk or a bad disk can leave in an embedded
warehouse, in the order that lets the engine help (`run`; docs/operations.md):

* **mutation files that cannot be read**, from the data directory itself (the warehouse does not open
  while one is there): a `mutation_N.txt` that is empty, does not start with `format version: 1`, or
  is cut short after it. Repair: the file is moved aside (under `<home>/doctor/`); the mutation it held
  never ran, and the loader no longer issues any.
* then it **opens the warehouse**: opening is when the engine moves a part it cannot load to `detached/`.
* **detached parts** (`broken-on-start_…`, `broken_…`, `unexpected_…`, `ignored_…`, …) with their row
  count, and **damaged parts** whose checksums fail (`CHECK TABLE`). Repair: a detached part is attached
  again when its table folds duplicates (a ReplacingMergeTree) and it passes its checksums; one the engine
  refuses, and a damaged part, is moved aside under `<home>/doctor/` when its rows are loaded again.
* **rows gone behind the stored positions** (`reconcile`): offsets below a partition's stored position
  that are neither in its facts table, the quarantine, nor the ledger with their record stored. The next
  load fetches them again from the broker (the loader checks the same at its start); the doctor says
  whether the broker still holds them.

It ends with every table's rows. Against a ClickHouse server it reports `system.detached_parts` only.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from routerscope.core import names
from routerscope.core.errors import RouterscopeError
from routerscope.core.kafka import Option, librdkafka_config
from routerscope.core.settings import Settings
from routerscope.warehouse.client import data_dir, open_warehouse, table_dirs, torn_mutation
from routerscope.warehouse.queries import ingest_offsets
from routerscope.warehouse.schema import TOPIC_TABLES
from routerscope.warehouse.sql import named


@dataclass
class Finding:
    table: str
    kind: str  # "torn mutation" | "detached part" | "damaged part" | "missing rows"
    path: Path | None
    rows: int | None = None
    repaired: bool = False
    note: str = ""
    covered_by: list[str] = field(default_factory=list)  # active parts holding a detached part's blocks

    def line(self) -> str:
        rows = "" if self.rows is None else f", {self.rows} row(s)"
        state = " → repaired" if self.repaired else ""
        note = f" ({self.note})" if self.note else ""
        where = f" {self.path.name}" if self.path is not None else ""
        return f"{self.table}: {self.kind}{where}{rows}{state}{note}"

    @property
    def part(self) -> Path:
        """The file or part directory the finding is about: every kind has one but "missing rows"."""
        if self.path is None:
            raise ValueError(f"{self.table}: a {self.kind} finding names no file")
        return self.path


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)
    opened: bool = False
    open_error: str = ""
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def healthy(self) -> bool:
        return self.opened and all(f.repaired for f in self.findings)

    def as_dict(self) -> dict:
        return {
            "healthy": self.healthy,
            "opened": self.opened,
            "open_error": self.open_error or None,
            "findings": [
                {
                    "table": f.table,
                    "kind": f.kind,
                    "name": f.path.name if f.path else None,
                    "rows": f.rows,
                    "repaired": f.repaired,
                    "note": f.note or None,
                    "covered_by": f.covered_by or None,
                }
                for f in self.findings
            ],
            "rows": self.counts,
        }


def _part_rows(part: Path) -> int | None:
    try:
        return int((part / "count.txt").read_text().strip())
    except (OSError, ValueError):
        return None


def scan_mutations(warehouse: Path) -> list[Finding]:
    """Mutation files the engine cannot read, from the data directory alone (the warehouse does not
    open while one is there)."""
    found: list[Finding] = []
    for table, directory in table_dirs(warehouse).items():
        for mutation in sorted(directory.glob("mutation_*.txt")):
            why = torn_mutation(mutation)
            if why is not None:
                found.append(Finding(table, "torn mutation", mutation, note=why))
    return found


def scan_detached(warehouse: Path) -> list[Finding]:
    """Detached parts: what the engine set aside (read after it opened, which is when it sets them aside)."""
    found: list[Finding] = []
    for table, directory in table_dirs(warehouse).items():
        detached = directory / "detached"
        if detached.is_dir():
            for part in sorted(p for p in detached.iterdir() if p.is_dir()):
                found.append(Finding(table, "detached part", part, rows=_part_rows(part)))
    return found


def scan(warehouse: Path) -> list[Finding]:
    """Torn mutation files and detached parts, read from the data directory alone."""
    return scan_mutations(warehouse) + scan_detached(warehouse)


def _aside(settings: Settings, path: Path, table: str) -> Path:
    target = settings.doctor_path / time.strftime("%Y%m%dT%H%M%S") / table
    target.mkdir(parents=True, exist_ok=True)
    moved = target / path.name
    shutil.move(str(path), moved)
    return moved


def _plain_name(name: str) -> str:
    """`broken-on-start_all_1_5_1` → `all_1_5_1` (the part's own name after the engine's prefix)."""
    for prefix in ("broken-on-start_", "broken_", "unexpected_", "ignored_", "covered-by-broken_", "noquorum_"):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


_PART_NAME = re.compile(r"[A-Za-z0-9_]+")  # a part's name (all_1_1_0): the only text in ATTACH PART


def _blocks(name: str) -> tuple[str, int, int] | None:
    """A part's partition and block range from its name (`<partition>_<min block>_<max block>_<level>[_<mutation>]`)."""
    fields = name.split("_")
    if len(fields) < 4 or not (fields[1].isdigit() and fields[2].isdigit()):
        return None
    return fields[0], int(fields[1]), int(fields[2])


def _covering(client, table: str, name: str) -> list[str]:
    """The active parts of `table` whose block ranges meet the range of the part `name` (a part with the
    same blocks, or the merge that took it in): its rows are in the table already."""
    blocks = _blocks(name)
    if blocks is None:
        return []
    partition, low, high = blocks
    rows = client.query(
        "SELECT name FROM system.parts WHERE database = {db:String} AND table = {t:String} AND active "
        "AND partition_id = {p:String} AND min_block_number <= {high:Int64} AND max_block_number >= {low:Int64} "
        "ORDER BY name",
        parameters={"db": names.DATABASE, "t": table, "p": partition, "low": low, "high": high},
    ).result_rows
    return [str(r[0]) for r in rows]


def _attach(client, finding: Finding, engines: dict[str, str]) -> None:
    if not engines.get(finding.table, "").startswith("Replacing"):
        finding.note = "its table does not fold duplicates: left detached, attach it by hand if you want it"
        return
    part = finding.part
    plain = _plain_name(part.name)
    covered = _covering(client, finding.table, plain)
    if covered:  # a copy a crash left (`broken-on-start_`, `ignored_`, `unexpected_`): attaching counts twice
        finding.covered_by = covered
        finding.note = (
            f"its blocks are in the active part(s) {', '.join(covered[:3])}{' …' if len(covered) > 3 else ''}: "
            "not attached (its rows would count twice)"
        )
        return
    target = part.with_name(plain)
    if target != part:
        if target.exists():
            finding.note = f"{plain} exists in detached/ too: left as it is"
            return
        part.rename(target)
    try:
        if not _PART_NAME.fullmatch(plain):
            raise ValueError(f"{plain!r} is not a part name")
        qualified = f"{names.DATABASE}.{finding.table}"  # an identifier: named() checks it
        # the part's name is checked against _PART_NAME above (digits first, so not an identifier)
        attach = named("doctor_attach_part", "ALTER TABLE $table ATTACH PART '$part'", {"part": plain}, table=qualified)
        client.command(attach)
    except Exception as exc:  # the engine still refuses it: put its name back and say why
        if target != part and target.exists():
            target.rename(part)
        finding.note = "still refused: " + (str(exc).splitlines() or [repr(exc)])[0][:200]
        return
    finding.repaired = True


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [repr(exc)])[0][:200]


def _check(client, table: str, part: str | None = None) -> list[tuple[str, str]]:
    """`CHECK TABLE` (every part's checksums, or one part's): the parts that fail, with the engine's reason."""
    qualified = f"{names.DATABASE}.{table}"
    if part is None:
        sql = named(
            "doctor_check_table", "CHECK TABLE $table SETTINGS check_query_single_value_result = 0", table=qualified
        )
    else:
        if not _PART_NAME.fullmatch(part):
            return [(part, "not a part name")]
        sql = named(
            "doctor_check_part",
            "CHECK TABLE $table PART '$part' SETTINGS check_query_single_value_result = 0",
            {"part": part},
            table=qualified,
        )
    rows = client.query(sql).result_rows
    # the embedded client may hand the tab-separated answer back as one row: read it as text either way
    text = "\n".join("\t".join(str(v) for v in row) for row in rows)
    failed = []
    for line in text.split("\n"):
        fields = line.split("\t")
        if len(fields) >= 2 and fields[0] and fields[1].strip() in ("0", "False"):
            failed.append((fields[0].strip(), fields[2].strip() if len(fields) > 2 else ""))
    return failed


# The tables whose lost rows the next load fetches again from the broker (the reconciliation below).
RELOADED = {
    names.TABLE_DECISIONS,
    names.TABLE_LABELS,
    names.TABLE_BREAKER_EVENTS,
    names.TABLE_POLICY_EVENTS,
    names.TABLE_QUARANTINE,
    names.TABLE_LOADED_MESSAGES,
}


def _detach_damaged(settings: Settings, client, finding: Finding) -> None:
    """A part whose checksums fail: detach it (its rows cannot be read) and keep it under the doctor's folder."""
    qualified = f"{names.DATABASE}.{finding.table}"
    client.command(
        named(
            "doctor_detach_part", "ALTER TABLE $table DETACH PART '$part'", {"part": finding.part.name}, table=qualified
        )
    )
    directory = table_dirs(data_dir(settings.warehouse)).get(finding.table)
    if directory is not None and (directory / "detached" / finding.part.name).is_dir():
        moved = _aside(settings, directory / "detached" / finding.part.name, finding.table)
        finding.note += f"; detached and moved to {moved}"
    finding.repaired = True


def _settle_detached(settings: Settings, client, finding: Finding, engines: dict[str, str]) -> None:
    """Attach a detached part again; one the engine refuses, or that fails its checksums once attached,
    is moved aside when the next load fetches its rows again (its table is reconciled), else left."""
    _attach(client, finding, engines)
    plain = _plain_name(finding.part.name)
    if finding.covered_by:  # its rows are in the table: set aside, named, never attached
        moved = _aside(settings, finding.part, finding.table)
        finding.note += f"; moved to {moved}"
        finding.repaired = True
        return
    if finding.repaired:
        damaged = _check(client, finding.table, plain)
        if not damaged:
            return
        finding.repaired = False
        finding.note = "attached but damaged: " + damaged[0][1][:160]
        client.command(
            named(
                "doctor_detach_part",
                "ALTER TABLE $table DETACH PART '$part'",
                {"part": plain},
                table=f"{names.DATABASE}.{finding.table}",
            )
        )
        finding.path = finding.part.with_name(plain)
    if finding.table in RELOADED and finding.part.is_dir():
        moved = _aside(settings, finding.part, finding.table)
        finding.note += f"; moved to {moved}; its rows are loaded again from the broker (below)"
        finding.repaired = True


def _low_watermarks(settings: Settings, keys: list[tuple[str, int]]) -> dict[tuple[str, int], int] | None:
    """The first offset the broker still holds per (topic, partition); None when it does not answer."""
    own: dict[str, Option] = {"group.id": f"{names.CONSUMER_GROUP_LOADER}-doctor", "enable.auto.commit": False}
    try:
        consumer = Consumer(librdkafka_config(settings, **own))
    except Exception:  # noqa: BLE001 - no broker configured: say so in the finding
        return None
    try:
        return {
            key: int(consumer.get_watermark_offsets(TopicPartition(*key), timeout=3.0, cached=False)[0]) for key in keys
        }
    except Exception:  # noqa: BLE001 - the broker does not answer
        return None
    finally:
        consumer.close()


def reconcile(settings: Settings, client, repair: bool, skip: Collection[str] = frozenset()) -> list[Finding]:
    """Compare the ledger of loaded messages below each stored position with the facts actually stored:
    a record that is gone was loaded and then lost (a damaged part set aside). The next load reads them
    again from the broker, which this checks still holds them."""
    stored = ingest_offsets.stored_positions(client, names.CONSUMER_GROUP_LOADER)
    gaps: list[tuple[str, str, int, list[tuple[int, int]]]] = []
    for topic, (table, _columns) in TOPIC_TABLES.items():
        if table in skip or names.TABLE_LOADED_MESSAGES in skip:  # a damaged part fails the read: repair first
            continue
        nexts = {p: o for (t, p), (o, _) in stored.items() if t == topic}
        for partition, ranges in sorted(ingest_offsets.missing(client, topic, table, nexts).items()):
            gaps.append((table, topic, partition, ranges))
    if not gaps:
        return []
    lows = _low_watermarks(settings, [(topic, partition) for _, topic, partition, _ in gaps])
    found = []
    for table, topic, partition, ranges in gaps:
        count = sum(last - first + 1 for first, last in ranges)
        spans = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in ranges[:5]) + (" …" if len(ranges) > 5 else "")
        finding = Finding(table, "missing rows", None, rows=count)
        where = f"{topic}[{partition}] offsets {spans}"
        low = None if lows is None else lows.get((topic, partition))
        if low is None:
            finding.note = f"{where}: the broker did not answer; `routerscope load` loads them again once it does"
        elif low > ranges[0][0]:
            gone = sum(min(last, low - 1) - first + 1 for first, last in ranges if first < low)
            finding.note = (
                f"{where}: the broker no longer holds {gone} of them (it starts at offset {low}): those are lost "
                f"for good; the next `routerscope load` loads the rest again"
            )
        else:
            finding.note = f"{where}: the broker still holds them; the next `routerscope load` loads them again"
            finding.repaired = repair
        found.append(finding)
    return found


def run(settings: Settings, repair: bool = False) -> Report:
    """Find and (with `repair`) mend damage, in the order that lets the engine help:

    1. torn mutation files, from the data directory (the warehouse does not open while one is there);
       `repair` moves them aside;
    2. open the warehouse (the engine moves parts it cannot load to `detached/` as it opens);
    3. detached parts, and parts whose checksums fail (`CHECK TABLE`); `repair` attaches the parts of
       tables that fold duplicates again, and moves aside what the engine refuses or fails its checksums;
    4. the stored positions against the facts stored (`reconcile`): ranges whose rows are gone are
       loaded again by the next `routerscope load`, while the broker still holds them;
    5. every table's rows."""
    report = Report()
    dsn = settings.warehouse
    if dsn.embedded:
        report.findings = _mutations(settings, repair)
    try:
        with open_warehouse(settings, purpose="doctor") as client:
            report.opened = True
            engines = {
                t: e
                for t, e in client.query(
                    "SELECT name, engine FROM system.tables WHERE database = {db:String}",
                    parameters={"db": names.DATABASE},
                ).result_rows
            }
            if dsn.embedded:
                detached, damaged = _parts(client, data_dir(dsn), engines, repair)
                report.findings += detached + damaged  # listed before they are settled: each keeps its finding
                if repair:
                    _settle(settings, client, engines, detached, damaged)
            else:
                report.findings += _server_detached(client)
            unread = set() if repair else {f.table for f in report.findings if f.kind == "damaged part"}
            try:
                report.findings += reconcile(settings, client, repair, skip=unread)
            except Exception as exc:  # noqa: BLE001 - a part no check caught: report it, count the rest
                report.findings.append(Finding("(positions)", "reconciliation failed", None, note=_first_line(exc)))
            _count(client, engines, report.counts)
    except Exception as exc:
        report.opened = False
        report.open_error = _first_line(exc).split(" does not open: ", 1)[-1]  # (the report says it does not open)
        if dsn.embedded and not any(f.kind == "detached part" for f in report.findings):
            report.findings += scan_detached(data_dir(dsn))  # what the engine set aside on an earlier opening
    return report


def _mutations(settings: Settings, repair: bool) -> list[Finding]:
    """Step 1 of `run`: the torn mutation files of the embedded warehouse, moved aside with `repair`."""
    path = data_dir(settings.warehouse)
    if not path.exists():
        raise RouterscopeError(f"there is no warehouse at {path} (nothing has been loaded into this home)")
    found = scan_mutations(path)
    if repair:
        for finding in found:
            moved = _aside(settings, finding.part, finding.table)
            finding.repaired, finding.note = True, f"{finding.note}; moved to {moved}"
    return found


def _server_detached(client) -> list[Finding]:
    """Step 3 against a server: what `system.detached_parts` lists (its files are the server's own)."""
    return [
        Finding(table, "detached part", Path(name), note=reason or "")
        for table, name, reason in client.query(
            "SELECT table, name, ifNull(reason, '') FROM system.detached_parts WHERE database = {db:String}",
            parameters={"db": names.DATABASE},
        ).result_rows
    ]


def _parts(client, path: Path, engines: dict[str, str], repair: bool) -> tuple[list[Finding], list[Finding]]:
    """Step 3 of `run` on the embedded warehouse at `path`: its detached parts, and its damaged ones."""
    detached = scan_detached(path)
    damaged = [
        Finding(table, "damaged part", Path(part), note=f"checksums fail: {why.split(' (')[0][:160]}")
        for table in sorted(t for t in engines if engines[t].endswith("MergeTree"))
        for part, why in _check(client, table)
    ]
    for finding in detached:  # named whether or not it is repaired: a copy must never be attached
        if engines.get(finding.table, "").startswith("Replacing"):
            finding.covered_by = _covering(client, finding.table, _plain_name(finding.part.name))
            if finding.covered_by and not repair:
                finding.note = (
                    f"its blocks are in the active part(s) {', '.join(finding.covered_by[:3])}: "
                    "`doctor --repair` sets it aside, never attaches it (its rows would count twice)"
                )
    return detached, damaged


def _settle(
    settings: Settings, client, engines: dict[str, str], detached: list[Finding], damaged: list[Finding]
) -> None:
    """Step 3's repair: attach or set aside each detached part, detach and set aside each damaged one."""
    for finding in detached:
        _settle_detached(settings, client, finding, engines)
    for finding in damaged:
        _detach_damaged(settings, client, finding)


def _count(client, engines: dict[str, str], counts: dict[str, int]) -> None:
    """Step 5 of `run`: the rows of every project table, into `counts` as they are read."""
    for table in sorted(engines):
        if table in names.TABLES or table in {t.split(".")[-1] for t in names.TABLES.values()}:
            count = named("doctor_count", "SELECT count() FROM $table", table=f"{names.DATABASE}.{table}")
            counts[table] = int(client.query(count).result_rows[0][0])
