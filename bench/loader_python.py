"""Where the Python parser's time goes, per event: prints JSON figures measured in one run.

    .venv/bin/python bench/loader_python.py [--events 200000] [--batch-size 20000]

No broker (consuming is bench/loader.py's raw consumer): the bench's decision events (bench/loader.py's
`payloads`) are validated as the loader validates them, in parts, then their JSON lines inserted
batch by batch into a fresh embedded warehouse, the loader's `python` insert
(routerscope/warehouse/queries/json_rows.py),
and once more into a Null table of the same shape (the warehouse's JSON parse alone, no views, no parts).
The alternative to that second parse, measured beside it: the decoded events handed over in a binary
columnar form instead (`arrow_build_us_per_event`: the cheapest build found, msgspec's `to_builtins` and
one pyarrow struct conversion per batch, written as an Arrow stream; `arrow_read_only_us_per_event`: the
warehouse reading those streams into the same Null table). Each figure is microseconds per event of
process CPU (the embedded warehouse's threads included); the collector is tuned as the loader's drain
tunes it.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import msgspec  # noqa: E402
import msgspec.inspect as mi  # noqa: E402
from loader import payloads  # noqa: E402

from routerscope.contract.validation import CONTRACTS, _encode  # noqa: E402
from routerscope.core import names  # noqa: E402
from routerscope.core.settings import Settings  # noqa: E402
from routerscope.warehouse.client import open_warehouse  # noqa: E402
from routerscope.warehouse.ingest.parsing import parse_chunk  # noqa: E402
from routerscope.warehouse.ingest.writer import INSERT_SETTINGS  # noqa: E402
from routerscope.warehouse.migrate import migrate  # noqa: E402
from routerscope.warehouse.queries import json_rows  # noqa: E402

TOPIC = names.TOPIC_DECISIONS


def arrow_type(t, nullable: bool = False):
    """The Arrow type of a field of msgspec type `t`, as the JSON input table types it (json_rows._type)."""
    import pyarrow as pa  # deferred: pyarrow takes a while to import; only the Arrow comparison needs it

    if isinstance(t, mi.UnionType):
        return arrow_type(next(m for m in t.types if not isinstance(m, mi.NoneType)), True)
    if isinstance(t, mi.StructType):
        return pa.struct([(f.name, arrow_type(f.type, True)) for f in t.fields])
    if isinstance(t, mi.ListType):
        return pa.list_(arrow_type(t.item_type))
    if isinstance(t, mi.LiteralType):
        return pa.string() if all(isinstance(v, str) for v in t.values) else pa.int64()
    return {
        mi.StrType: pa.string(),
        mi.IntType: pa.int64(),
        mi.FloatType: pa.float64(),
        mi.BoolType: pa.bool_(),
        mi.DateTimeType: pa.timestamp("us", "UTC"),
    }[type(t)]


def event_struct():
    """The decision event as an Arrow struct type (built once, outside the timed part)."""
    import pyarrow as pa  # deferred: pyarrow takes a while to import; only the Arrow comparison needs it

    info = mi.type_info(CONTRACTS[TOPIC].event_type)
    return pa.struct([(f.name, arrow_type(f.type, not f.required)) for f in info.fields])


def arrow_stream(events: list, struct) -> bytes:
    """Decoded decision events (with a zero partition and their index as offset) as one Arrow stream of the
    JSON input table's columns: msgspec's `to_builtins` (absent fields left out, times kept) and one pyarrow
    conversion of the whole batch as a struct array."""
    import pyarrow as pa  # deferred: pyarrow takes a while to import; only the Arrow comparison needs it

    values = pa.array(msgspec.to_builtins(events, builtin_types=(datetime,)), type=struct)
    batch = pa.RecordBatch.from_arrays(
        [pa.array([0] * len(events), pa.uint32()), pa.array(range(len(events)), pa.uint64()), *values.flatten()],
        names=["kafka_partition", "kafka_offset", *struct.names],
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--batch-size", type=int, default=20_000)
    args = parser.parse_args()

    raws = [value for _, value in payloads(args.events)]
    n = len(raws)
    contract = CONTRACTS[TOPIC]
    gc.freeze()
    gc.set_threshold(100_000, 50, 1_000)

    def per_event(step) -> float:
        started = time.process_time()
        step()
        return round((time.process_time() - started) / n * 1e6, 2)

    decoded: list = []

    def decode() -> None:
        for raw in raws:
            try:
                decoded.append(contract._decoder.decode(raw))
            except Exception:  # the bench's few malformed events
                pass

    figures = {"events": n, "batch_size": args.batch_size}
    figures["decode_us_per_event"] = per_event(decode)
    check = contract.holds or (lambda event: not contract.invariant_rules(event))
    figures["invariants_and_ranges_us_per_event"] = per_event(
        lambda: [check(e) and contract.in_range(e) for e in decoded]
    )
    figures["canonical_encode_us_per_event"] = per_event(lambda: [_encode(e) for e in decoded])
    items = [(0, offset, raw, False) for offset, raw in enumerate(raws)]
    parsed: list = []
    figures["parse_chunk_us_per_event"] = per_event(
        lambda: [
            parsed.extend(parse_chunk(TOPIC, items[i : i + args.batch_size])) for i in range(0, n, args.batch_size)
        ]
    )
    lines = [p[0] for p in parsed if p[0] is not None]
    figures["valid_events"] = len(lines)
    valid = [e for e in decoded if check(e) and contract.in_range(e)]
    struct = event_struct()
    arrow_stream(valid[:10], struct)  # imports and first calls outside the timed part
    streams: list[bytes] = []
    figures["arrow_build_us_per_event"] = per_event(
        lambda: streams.extend(
            arrow_stream(valid[i : i + args.batch_size], struct) for i in range(0, n, args.batch_size)
        )
    )

    with tempfile.TemporaryDirectory(prefix="routerscope-bench-") as tmp:
        settings = Settings.from_env({"ROUTERSCOPE_HOME": tmp, "ROUTERSCOPE_CLICKHOUSE_DSN": f"chdb://{tmp}/wh"})
        with open_warehouse(settings, purpose="bench") as client:
            migrate(client)
            for statements in json_rows.CREATE.values():
                for sql in statements:
                    client.command(sql)
            table = json_rows.INPUT_TABLE[TOPIC]
            client.command(f"CREATE TABLE {names.DATABASE}.bench_json_null AS {table} ENGINE = Null")

            def insert(into: str, tag: str) -> None:
                for i in range(0, len(lines), args.batch_size):
                    client.raw_insert(
                        into,
                        None,
                        b"\n".join(lines[i : i + args.batch_size]),
                        settings={
                            "insert_deduplication_token": f"{tag}-{i}",
                            **INSERT_SETTINGS,
                            **json_rows.INSERT_SETTINGS,
                            **json_rows.EMBEDDED_INSERT_SETTINGS,
                        },
                        fmt="JSONEachRow",
                    )

            figures["insert_us_per_event"] = per_event(lambda: insert(table, "facts"))
            figures["json_parse_only_us_per_event"] = per_event(
                lambda: insert(f"{names.DATABASE}.bench_json_null", "null")
            )
            figures["arrow_read_only_us_per_event"] = per_event(
                lambda: [
                    client.raw_insert(f"{names.DATABASE}.bench_json_null", None, stream, fmt="ArrowStream")
                    for stream in streams
                ]
            )
            figures["rows_loaded"] = client.query(f"SELECT count() FROM {names.DATABASE}.decisions").result_rows[0][0]
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
