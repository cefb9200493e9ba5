"""`routerscope doctor`: find and repair what a crash or a full disk can leave in an embedded warehouse.

What it looks for, reading the data directory itself (a warehouse that cannot attach a table cannot
be opened to ask it):

* **mutation files that cannot be read**: a `mutation_N.txt` that is empty or does not start with
  `format version: 1` (a mutation cut short by a full disk). The engine refuses to attach the
  table at all ("Cannot attach table … expected 'format version: 1'"), which closes the whole
  warehouse. Repair: the file is moved aside (under `<home>/doctor/`); the mutation it held never
  ran, and the loader no longer issues any.
* **detached parts**: directories in a table's `detached/` (`broken-on-start_…`, `broken_…`,
  `unexpected_…`, `ignored_…`, …), the rows the engine set aside, with their row count
  (`count.txt`). Repair: each is attached again (`ALTER TABLE … ATTACH PART`) when its table folds
  duplicate rows (a ReplacingMergeTree: a part holding rows that are also elsewhere adds nothing
  after `FINAL` and background merges); a part that still does not attach stays detached, and says
  why. Parts of other tables are reported, never touched.

Then it opens the warehouse and counts every table's rows, so the report ends with whether the
warehouse works again. Against a ClickHouse server it reports `system.detached_parts` only.
"""

from __future__ import annotations

import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from routerscope.core import names
from routerscope.core.errors import RouterscopeError
from routerscope.core.settings import Settings
from warehouse.queries.common import named

MUTATION_HEADER = b"format version: 1"


@dataclass
class Finding:
    table: str
    kind: str  # "torn mutation" | "detached part"
    path: Path | None
    rows: int | None = None
    repaired: bool = False
    note: str = ""

    def line(self) -> str:
        rows = "" if self.rows is None else f", {self.rows} row(s)"
        state = " → repaired" if self.repaired else ""
        note = f" ({self.note})" if self.note else ""
        where = self.path.name if self.path is not None else ""
        return f"{self.table}: {self.kind} {where}{rows}{state}{note}"


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
                }
                for f in self.findings
            ],
            "rows": self.counts,
        }


def table_dirs(warehouse: Path) -> dict[str, Path]:
    """Table name → its data directory (an Atomic database links `data/<db>/<table>` into `store/`)."""
    base = warehouse / "data" / names.DATABASE
    if not base.is_dir():
        return {}
    return {link.name: link.resolve() for link in sorted(base.iterdir()) if link.resolve().is_dir()}


def _part_rows(part: Path) -> int | None:
    try:
        return int((part / "count.txt").read_text().strip())
    except (OSError, ValueError):
        return None


def scan(warehouse: Path) -> list[Finding]:
    """Torn mutation files and detached parts, read from the data directory alone."""
    found: list[Finding] = []
    for table, directory in table_dirs(warehouse).items():
        for mutation in sorted(directory.glob("mutation_*.txt")):
            try:
                with open(mutation, "rb") as f:
                    head = f.read(len(MUTATION_HEADER))
            except OSError as exc:
                found.append(Finding(table, "torn mutation", mutation, note=f"unreadable: {exc.strerror}"))
                continue
            if head != MUTATION_HEADER:
                found.append(Finding(table, "torn mutation", mutation, note=f"{mutation.stat().st_size} bytes"))
        detached = directory / "detached"
        if detached.is_dir():
            for part in sorted(p for p in detached.iterdir() if p.is_dir()):
                found.append(Finding(table, "detached part", part, rows=_part_rows(part)))
    return found


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


def _attach(client, finding: Finding, engines: dict[str, str]) -> None:
    if not engines.get(finding.table, "").startswith("Replacing"):
        finding.note = "its table does not fold duplicates: left detached, attach it by hand if you want it"
        return
    part = finding.path
    plain = _plain_name(part.name)
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


def run(settings: Settings, repair: bool = False) -> Report:
    """Scan the embedded warehouse; with `repair`, move torn mutation files aside and attach detached
    parts of the tables that fold duplicates; then open it and count every table's rows."""
    from warehouse.client import open_warehouse

    report = Report()
    dsn = settings.warehouse
    if dsn.embedded:
        if not dsn.path.exists():
            raise RouterscopeError(f"there is no warehouse at {dsn.path} (nothing has been loaded into this home)")
        report.findings = scan(dsn.path)
        if repair:
            for finding in report.findings:
                if finding.kind == "torn mutation":
                    moved = _aside(settings, finding.path, finding.table)
                    finding.repaired, finding.note = True, f"moved to {moved}"
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
            if not dsn.embedded:
                for table, name, reason in client.query(
                    "SELECT table, name, ifNull(reason, '') FROM system.detached_parts WHERE database = {db:String}",
                    parameters={"db": names.DATABASE},
                ).result_rows:
                    report.findings.append(Finding(table, "detached part", Path(name), note=reason or ""))
            elif repair:
                for finding in report.findings:
                    if finding.kind == "detached part":
                        _attach(client, finding, engines)
            for table in sorted(engines):
                if table in names.TABLES or table in {t.split(".")[-1] for t in names.TABLES.values()}:
                    count = named("doctor_count", "SELECT count() FROM $table", table=f"{names.DATABASE}.{table}")
                    report.counts[table] = int(client.query(count).result_rows[0][0])
    except Exception as exc:
        report.opened = False
        report.open_error = (str(exc).splitlines() or [repr(exc)])[0][:300]
    return report
