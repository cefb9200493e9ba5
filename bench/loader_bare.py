"""The floor under the loader: the warehouse's own insert of the same message bodies, nothing else.

    ROUTERSCOPE_HOME=… ROUTERSCOPE_CLICKHOUSE_DSN=chdb:///path \
        .venv/bin/python bench/loader_bare.py --bootstrap HOST:PORT --events N --partitions P [--batch-size 20000]

Run by bench/loader.py as a child process (so its peak RSS is its own, sampled the same way as the
`routerscope load` command's), against the same broker and topic the loader reads. It opens a fresh
warehouse (migrated, so `decisions` is the loader's table), makes the loader's JSON input table and its facts view
into `decisions` (routerscope/warehouse/queries/json_rows.py) without the ledger's view, then reads the topic
with a bare confluent-kafka consumer and inserts each batch of message bodies as they came off the wire,
`INSERT … FORMAT JSONEachRow`, with the loader's insert settings: no validation, no canonical encoding,
no lineage, no ledger (the dedup marks), no positions, no quarantine (a body the warehouse cannot parse is
skipped by `input_format_allow_errors_ratio`). Reading the topic is part of the floor: a loader cannot
skip it. Prints one JSON object: the CPU seconds (every thread) and wall seconds of the read-and-insert
loop alone (not the imports, opening or migrating), the same per thread name (bench/loader.py's
`cpu_by_thread`: `main` reads and hands the bodies over), the events read and the rows `decisions` holds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from routerscope.core import names  # noqa: E402
from routerscope.core.settings import Settings  # noqa: E402

TOPIC = names.TOPIC_DECISIONS


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--events", type=int, required=True)
    parser.add_argument("--batch-size", type=int, default=20_000)
    parser.add_argument("--partitions", type=int, required=True)
    args = parser.parse_args()

    from confluent_kafka import Consumer, TopicPartition
    from loader import cpu_by_thread, thread_cpu_seconds

    from routerscope.warehouse.client import open_warehouse
    from routerscope.warehouse.ingest.writer import INSERT_SETTINGS
    from routerscope.warehouse.migrate import migrate
    from routerscope.warehouse.queries import json_rows

    settings = Settings.from_env()  # the home and the fresh warehouse's DSN, from the environment
    insert_settings = {
        **INSERT_SETTINGS,
        **json_rows.INSERT_SETTINGS,
        **json_rows.EMBEDDED_INSERT_SETTINGS,
        "input_format_allow_errors_ratio": 0.01,  # the bench's torn bodies: skipped, not judged
        "input_format_allow_errors_num": 1_000_000,
    }
    with open_warehouse(settings, purpose="bench") as client:
        migrate(client)
        input_table = json_rows.INPUT_TABLE[TOPIC]
        for sql in json_rows.CREATE[TOPIC]:
            if "_ledger" not in sql.split("AS SELECT")[0]:  # the input table and the facts view only
                client.command(sql)
        consumer = Consumer(
            {
                "bootstrap.servers": args.bootstrap,
                "group.id": "bench-bare",
                "enable.auto.commit": False,
                "fetch.max.bytes": 64 * 1024 * 1024,
                "max.partition.fetch.bytes": 16 * 1024 * 1024,
                "log_level": 0,
            }
        )
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(args.partitions)])
        got, bodies = 0, []
        started, cpu_started, threads_before = time.perf_counter(), time.process_time(), thread_cpu_seconds()
        while got < args.events:
            for message in consumer.consume(min(50_000, args.batch_size), timeout=1.0):
                if message.error() is None:
                    got += 1
                    bodies.append(message.value())
                    if len(bodies) >= args.batch_size:
                        client.raw_insert(
                            input_table, None, b"\n".join(bodies), settings=insert_settings, fmt="JSONEachRow"
                        )
                        bodies = []
        if bodies:
            client.raw_insert(input_table, None, b"\n".join(bodies), settings=insert_settings, fmt="JSONEachRow")
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        by_thread = cpu_by_thread(threads_before, cpu)
        consumer.close()
        rows = client.query(f"SELECT count() FROM {names.DATABASE}.{names.TABLE_DECISIONS}").result_rows[0][0]
    print(json.dumps({"cpu_seconds": cpu, "wall_seconds": wall, "events": got, "rows": rows, "by_thread": by_thread}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
