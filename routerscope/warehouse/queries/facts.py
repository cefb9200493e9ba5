"""Queries across the three facts tables (`decisions`, `labels`, `breaker_events`) together."""

from __future__ import annotations

from routerscope.warehouse.sql import named

# Rows per schema version of each facts table: a producer on a new version shows up here.
SCHEMA_VERSIONS_SQL = named(
    "facts_schema_versions",
    """
SELECT * FROM (
    SELECT 'decisions' AS events_table, schema_version, count() AS events FROM $decisions GROUP BY schema_version
    UNION ALL SELECT 'labels', schema_version, count() FROM $labels GROUP BY schema_version
    UNION ALL SELECT 'breaker_events', schema_version, count() FROM $breaker_events GROUP BY schema_version
)
ORDER BY events_table, schema_version
""",
)
SCHEMA_VERSION_COLUMNS = ("events_table", "schema_version", "events")


def schema_versions(client) -> list[tuple[str, int, int]]:
    """(table, schema version, rows), by table then version."""
    return [(t, int(v), int(n)) for t, v, n in client.query(SCHEMA_VERSIONS_SQL).result_rows]
