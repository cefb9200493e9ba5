"""Applies the frozen, numbered migrations in `routerscope/warehouse/migrations/` once each.

Each file `NNNN_verb_object.sql` is applied in order and recorded (version, name, checksum) in
`routerscope.schema_migrations`. A file that changed after it was applied is an error: migrations
are frozen; a change is a new file. Statements use IF NOT EXISTS, so a crash between a statement
and its record is repaired by the next run.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from routerscope.core.errors import WarehouseError
from routerscope.warehouse import schema_migrations as ledger

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
_FILE_RE = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()

    def statements(self) -> list[str]:
        """The file's statements: split at a `;` that ends a line; comment-only chunks dropped."""
        out = []
        for chunk in re.split(r";\s*(?:\n|$)", self.sql):
            code = "\n".join(line for line in chunk.splitlines() if not line.strip().startswith("--"))
            if code.strip():
                out.append(chunk.strip())
        return out


def discover(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    found = []
    for path in sorted(directory.glob("*.sql")):
        match = _FILE_RE.match(path.name)
        if not match:
            raise WarehouseError(f"migration file {path.name!r} is not named NNNN_verb_object.sql")
        found.append(Migration(int(match.group(1)), path.stem, path.read_text()))
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise WarehouseError(f"two migration files share a number in {directory}")
    return found


def migrate(client, directory: Path = MIGRATIONS_DIR) -> list[str]:
    """Apply every pending migration; returns the names applied (empty when up to date)."""
    ledger.bootstrap(client)
    done = ledger.applied(client)
    newly = []
    for migration in discover(directory):
        if migration.version in done:
            name, checksum = done[migration.version]
            if checksum != migration.checksum:
                raise WarehouseError(
                    f"migration {migration.name} changed after it was applied (as {name}); "
                    "migrations are frozen: restore it and put the change in a new numbered file"
                )
            continue
        for statement in migration.statements():
            client.command(statement)
        ledger.record(client, migration.version, migration.name, migration.checksum)
        newly.append(migration.name)
    return newly
