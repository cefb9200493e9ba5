"""The migration ledger (`schema_migrations`): which frozen migration files were applied, with their checksums.
Its own table is created here, before any migration can run."""

from __future__ import annotations

from datetime import datetime

from routerscope.core import names
from routerscope.warehouse.sql import named, utc_or_none

BOOTSTRAP = (
    named("create_database", "CREATE DATABASE IF NOT EXISTS " + names.DATABASE),
    named(
        "create_schema_migrations",
        """
CREATE TABLE IF NOT EXISTS $schema_migrations
(
    version UInt32,
    name String,
    checksum String,
    applied_at DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = MergeTree
ORDER BY version
""",
    ),
)

CREATED_SQL = named("warehouse_created_at", "SELECT min(applied_at) FROM $schema_migrations")
APPLIED_SQL = named("applied_migrations", "SELECT version, name, checksum FROM $schema_migrations ORDER BY version")


def bootstrap(client) -> None:
    """The database and the ledger table (idempotent)."""
    for statement in BOOTSTRAP:
        client.command(statement)


def applied(client) -> dict[int, tuple[str, str]]:
    """version → (name, checksum) of every applied migration."""
    return {version: (name, checksum) for version, name, checksum in client.query(APPLIED_SQL).result_rows}


def record(client, version: int, name: str, checksum: str) -> None:
    client.insert(
        names.TABLES[names.TABLE_MIGRATIONS],
        [[version], [name], [checksum]],
        column_names=["version", "name", "checksum"],
        column_oriented=True,
    )


def created_at(client) -> datetime | None:
    """When the warehouse was created (its first migration was applied); None before any was."""
    return utc_or_none(client.query(CREATED_SQL).result_rows[0][0])
