"""Where the SQL parser's time goes, per event: prints JSON figures measured in one run.

    .venv/bin/python bench/loader_sql.py [--events 60000] [--batch-size 20000]

Into a fresh embedded warehouse, no broker: the bench's decision events (bench/loader.py's
`payloads`) inserted batch by batch into the decisions' input table, whose views parse, validate
and load them (routerscope/warehouse/queries/landing.py), exactly the loader's `sql` statement per batch. Then
the parts of that insert alone: planning the parse (`EXPLAIN PLAN` of the view's query, which every
insert pays once), the typed extraction by itself, and the whole parse without writing anything.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
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
    parser.add_argument("--events", type=int, default=60_000)
    parser.add_argument("--batch-size", type=int, default=20_000)
    args = parser.parse_args()

    from routerscope.warehouse.client import open_warehouse
    from routerscope.warehouse.migrate import migrate
    from routerscope.warehouse.queries import landing

    values = [value for _, value in payloads(args.events)]
    gen = landing._GEN[TOPIC]
    settings_sql = " SETTINGS " + ", ".join(f"{k} = {v!r}" for k, v in landing.PARSE_SETTINGS.items())
    with tempfile.TemporaryDirectory(prefix="routerscope-bench-sql-") as tmp:
        settings = Settings.from_env({"ROUTERSCOPE_HOME": tmp, "ROUTERSCOPE_CLICKHOUSE_DSN": f"chdb://{tmp}/wh"})
        with open_warehouse(settings, purpose="bench") as client:
            migrate(client)
            for statements in landing.CREATE.values():
                for sql in statements:
                    client.command(sql)
            inserts = []
            for start in range(0, args.events, args.batch_size):
                part = values[start : start + args.batch_size]
                batch = uuid.uuid4().hex
                columns = [[batch] * len(part), [0] * len(part), list(range(start, start + len(part))), part]
                columns.append([False] * len(part))
                began = time.perf_counter()
                client.insert(
                    landing.INPUT_TABLE[TOPIC],
                    columns,
                    column_names=list(landing.INPUT_COLUMNS),
                    column_oriented=True,
                    settings=landing.INSERT_SETTINGS,
                )
                inserts.append(time.perf_counter() - began)
            loaded = client.query(f"SELECT count() FROM {names.DATABASE}.{names.TABLE_DECISIONS}").result_rows[0][0]
            # the parts, over the same messages kept in a table of their own
            client.command(
                f"CREATE TABLE {names.DATABASE}.bench_raw (batch String, kafka_partition UInt32, "
                "kafka_offset UInt64, value String, landed Bool) ENGINE = Memory"
            )
            n = min(args.events, args.batch_size)
            client.insert(
                f"{names.DATABASE}.bench_raw",
                [["b"] * n, [0] * n, list(range(n)), values[:n], [False] * n],
                column_names=list(landing.INPUT_COLUMNS),
                column_oriented=True,
            )
            select = gen.parsed_select(f"{names.DATABASE}.bench_raw")

            def timed(sql: str, repeat: int = 3) -> float:
                best = float("inf")
                for _ in range(repeat):
                    began = time.perf_counter()
                    client.command(sql + settings_sql)
                    best = min(best, time.perf_counter() - began)
                return best

            plan = timed("EXPLAIN PLAN " + select)
            parse = timed(f"SELECT count() FROM ({select}) WHERE NOT ignore(*)")
            extract = timed(
                f"SELECT count() FROM {names.DATABASE}.bench_raw WHERE NOT ignore("
                f"JSONExtract(value, '{gen.extract_type()}'), JSONExtractKeys(value))"
            )
    us = lambda seconds, count: round(1e6 * seconds / count, 1)  # noqa: E731
    print(
        json.dumps(
            {
                "events": args.events,
                "batch_size": args.batch_size,
                "loaded": loaded,
                "insert_us_per_event": us(sum(inserts), args.events),
                "inserts_seconds": [round(s, 3) for s in inserts],
                "plan_seconds_per_insert": round(plan, 3),
                "parse_us_per_event_with_plan": us(parse, n),
                "parse_us_per_event_past_plan": us(parse - plan, n),
                "typed_extraction_us_per_event": us(extract, n),
                "events_per_s_insert": round(args.events / sum(inserts)),
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
