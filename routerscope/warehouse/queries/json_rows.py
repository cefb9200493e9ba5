"""Validated events as JSON lines: how the loader's rows reach the facts tables and the ledger.

The loader validates each message in Python (routerscope/contract/validation.py) and hands the warehouse
the event's canonical JSON (msgspec's encoding of the decoded event; byte for byte the message
itself for the router's own), its Kafka partition and offset written in front, one line per event,
in one JSONEachRow insert per batch and topic into an input table of the event's shape (Null
engine: it keeps nothing). Two materialized views turn each inserted block into the facts rows
(`$decisions`, `$labels`, `$breaker_events`) and the ledger rows (`$loaded_messages`). The
warehouse parses the lines in C++; Python builds no column lists and serialises no values, which
was most of the loader's time.

The lines carry what the Python validator accepted, so the warehouse re-reads values it cannot
misread: numbers as msgspec wrote them, parsed exactly (`precise_float_parsing`), event times as
RFC 3339 text (`best_effort`: any offset), floored to the millisecond as clickhouse-connect does for
a Python datetime (`tests/integration/test_loader_json_rows.py` compares both ways row for row).

The input table and its views are named after a hash of their SQL: a contract change creates new ones on
the loader's first batch, no migration follows the generated SQL, and a loader never drops a view another
loader may be inserting through.
"""

from __future__ import annotations

import msgspec.inspect as mi

from routerscope.contract.validation import CONTRACTS
from routerscope.core import names
from routerscope.warehouse.schema import LEDGER_COLUMNS, RECORD_ID, TOPIC_TABLES
from routerscope.warehouse.sql import STORED_AT, hashed_chain

# Facts columns filled from a nested member of the event (the rest carry a field's own name).
NESTED = {
    "attempt_levels": "attempts.level",
    "attempt_outcomes": "attempts.outcome",
    "attempt_latency_ms": "attempts.latency_ms",
    "breaker_device": "breaker.device",
    "breaker_cloud": "breaker.cloud",
    **{
        f"device_{name}": f"device_stats.{name}"
        for name in (
            "peak_mem_mb",
            "thermal_state",
            "decode_tps",
            "prefill_tps",
            "cold_start",
            "load_ms",
            "resident_mem_mb",
        )
    },
}
LINEAGE = ("kafka_partition", "kafka_offset")
# The timestamp as microseconds floored to milliseconds: toDateTime64(t, 3) would round toward zero,
# which differs from a floor before 1970.
_MICROS = "toUnixTimestamp64Micro(event_time)"
EVENT_TIME = f"fromUnixTimestamp64Milli(intDiv({_MICROS}, 1000) - ({_MICROS} % 1000 < 0), 'UTC')"
INSERT_SETTINGS = {
    "precise_float_parsing": 1,
    "date_time_input_format": "best_effort",
    "input_format_skip_unknown_fields": 0,
    "input_format_null_as_default": 1,
    # the run-scoped token reaches the views' inserts (see routerscope/warehouse/ingest/loader.py on tokens)
    "deduplicate_blocks_in_dependent_materialized_views": 1,
}
# Embedded, the warehouse parses in the loader's process: its parallel parsing threads only take the
# cores the loader and its parse worker need (measured: slower, and ~20 MB more per insert).
EMBEDDED_INSERT_SETTINGS = {"input_format_parallel_parsing": 0}


_BASES: dict[type[mi.Type], str] = {
    mi.StrType: "String",
    mi.IntType: "Int64",
    mi.FloatType: "Float64",
    mi.BoolType: "Bool",
    mi.DateTimeType: "DateTime64(6, 'UTC')",
}


def _type(t, nullable: bool = False) -> str:
    """The warehouse type that reads a field of msgspec type `t` from its canonical JSON."""
    if isinstance(t, mi.UnionType):
        members = [m for m in t.types if not isinstance(m, mi.NoneType)]
        if len(members) != 1:
            raise TypeError(f"no warehouse type for the union {t}")
        return _type(members[0], nullable=True)
    if isinstance(t, mi.StructType):  # a missing or null object reads as a tuple of NULLs
        return "Tuple(" + ", ".join(f"{f.name} {_type(f.type, nullable=True)}" for f in t.fields) + ")"
    if isinstance(t, mi.ListType):
        return f"Array({_type(t.item_type)})"
    if isinstance(t, mi.LiteralType):
        base: str | None = "String" if all(isinstance(v, str) for v in t.values) else "Int64"
    else:
        base = _BASES.get(type(t))
    if base is None:
        raise TypeError(f"no warehouse type for {t}")
    return f"Nullable({base})" if nullable else base


def structure(topic: str) -> str:
    """The input table's columns: the lineage, then every field of the topic's event."""
    info = mi.type_info(CONTRACTS[topic].event_type)
    if not isinstance(info, mi.StructType):  # every topic's event is a msgspec Struct (routerscope.contract)
        raise TypeError(f"{topic}: its event is no Struct")
    columns = ["kafka_partition UInt32", "kafka_offset UInt64"]
    columns += [f"{f.name} {_type(f.type, nullable=not f.required)}" for f in info.fields]
    return ",\n    ".join(columns)


def _expression(topic: str, column: str) -> str:
    if column == "kafka_topic":
        return "'" + topic + "'"  # a topic name is an identifier-like constant (names.TOPICS)
    if column == "event_time":
        return EVENT_TIME
    return NESTED.get(column, column)


def _select(topic: str, columns, renames: dict[str, str] | None = None) -> str:
    renames = renames or {}
    return ", ".join(f"{_expression(topic, renames.get(c, c))} AS {c}" for c in columns)


def _ddl(topic: str) -> tuple[str, str, str]:
    table, columns = TOPIC_TABLES[topic]
    create = "CREATE TABLE IF NOT EXISTS $input (\n    " + structure(topic) + "\n) ENGINE = Null"
    facts = (
        "CREATE MATERIALIZED VIEW IF NOT EXISTS $facts_view TO $facts AS SELECT "
        + _select(topic, columns)
        + (f", {STORED_AT} AS ingested_at" if table == names.TABLE_DECISIONS else "")
        + " FROM $input"
    )
    ledger = (
        "CREATE MATERIALIZED VIEW IF NOT EXISTS $ledger_view TO $loaded_messages AS SELECT "
        + _select(topic, LEDGER_COLUMNS, {"record_id": RECORD_ID[topic]})
        + " FROM $input"
    )
    return create, facts, ledger


def _chain(topic: str) -> tuple[str, list[str]]:
    table = TOPIC_TABLES[topic][0]
    ddl = list(zip(("input", "facts_view", "ledger_view"), _ddl(topic)))
    return hashed_chain(f"json_rows_{table}", f"{table}_json", ddl, facts=names.TABLES[table])


_CHAINS = {topic: _chain(topic) for topic in CONTRACTS}
INPUT_TABLE = {topic: chain[0] for topic, chain in _CHAINS.items()}
CREATE = {topic: chain[1] for topic, chain in _CHAINS.items()}
