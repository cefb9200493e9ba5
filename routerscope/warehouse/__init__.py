"""Warehouse: ClickHouse through clickhouse-connect (embedded chDB or a server), migrations, queries."""
