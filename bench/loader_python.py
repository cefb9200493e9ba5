"""Where the Python parser's time goes, per event: prints JSON figures measured in one run.

    .venv/bin/python bench/loader_python.py [--events 200000] [--batch-size 20000]

No broker (consuming is bench/loader.py's raw consumer): the bench's decision events (bench/loader.py's
`payloads`) are validated as the loader validates them, in parts, then their JSON lines inserted
batch by batch into a fresh embedded warehouse, the loader's `python` insert (warehouse/queries/json_rows.py),
and once more into a Null table of the same shape (the warehouse's JSON parse alone, no views, no parts).
Each figure is microseconds per event; the collector is tuned as the loader's drain tunes it.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from loader import payloads  # noqa: E402

from routerscope.core import names  # noqa: E402
from routerscope.core.settings import Settings  # noqa: E402

TOPIC = names.TOPIC_DECISIONS


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--batch-size", type=int, default=20_000)
    args = parser.parse_args()

    from instrumentation.contract import CONTRACTS, _encode
    from warehouse.client import open_warehouse
    from warehouse.ingest.loader import INSERT_SETTINGS
    from warehouse.ingest.parsing import parse_chunk
    from warehouse.migrate import migrate
    from warehouse.queries import json_rows

    raws = [value for _, value in payloads(args.events)]
    n = len(raws)
    contract = CONTRACTS[TOPIC]
    gc.freeze()
    gc.set_threshold(100_000, 50, 1_000)

    def per_event(step) -> float:
        started = time.perf_counter()
        step()
        return round((time.perf_counter() - started) / n * 1e6, 2)

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
            figures["rows_loaded"] = client.query(f"SELECT count() FROM {names.DATABASE}.decisions").result_rows[0][0]
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
