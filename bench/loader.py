"""Loader benchmark: prints JSON figures, all measured in the same run against the same broker.

    .venv/bin/python bench/loader.py [--events 500000] [--batch-size 20000] [--kafka-python-sample 100000]
                                     [--no-worker]

(a) raw consumption of the decisions topic, no parsing: confluent-kafka (all events) and kafka-python
    (a sample: it is ~30x slower);
(b) the loader's core in this process (parse, validate, quarantine, insert, offsets) into a fresh
    embedded warehouse, and once more with its parse worker (`_python_worker`, which by default runs only
    beside a warehouse server);
(c) the whole `routerscope load` command as a user runs it (process start, migrations, drain) into
    another fresh warehouse, with the peak RSS of its process tree (sampled every 20 ms); then the same
    command with nothing new to load (`load_command_fixed_seconds`: what every run costs before its first
    event), and the ratio of the events/s past that fixed cost.
(d) the floor: the warehouse's own `INSERT … FORMAT JSONEachRow` of the same message bodies, read off the same
    topic by a bare confluent-kafka consumer, into the same `decisions` table of a fresh warehouse, in batches of the
    same size, with no validation, no ledger and no positions (bench/loader_bare.py, a child process):
    `warehouse_bare_insert_cpu_us_per_event` (reading included; `warehouse_bare_insert_only_cpu_us_per_event` is
    that less (a)'s raw consumer) and `warehouse_bare_insert_peak_rss_mb`, and the loader against it in the same
    run: `ratio_loader_core_cpu_to_bare_insert` ((b)'s CPU per event over the floor's) and
    `ratio_loader_peak_rss_to_bare_insert` ((c)'s peak over the floor's).
(a) and (b) also report CPU time per event: the process's (every thread, and a parse worker once closed)
and the broker's (from /proc), (b) also per thread name (`loader_core_cpu_us_per_event_by_thread_python`),
the kernel's share of it (`loader_core_system_cpu_us_per_event_python`; `warehouse_filesystem` names the file
system the warehouses are written to, whose cost for creating files differs by an order of magnitude between
machines), and `ratio_loader_core_ceiling_all_cores`: the ratio (b) could reach if every core ran nothing but the load
and its broker, which says whether a ratio target is within the work's reach.
Rates are events/s; ratios are to (a) confluent-kafka, so a noisy shared machine cancels out. Keys ending in
`_python` are the core and command as a load runs them (also unsuffixed), `_python_worker` the core with its parse
worker; `same_counts` says whether every run loaded and quarantined the same counts. (Before 2026-12-07 the loader
also had an `sql` parser, measured here as `_sql`; it was removed, docs/loader.md.)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from routerscope.core import broker, names  # noqa: E402
from routerscope.core.procs import free_port  # noqa: E402
from routerscope.core.settings import Settings  # noqa: E402
from routerscope.core.timeutil import utc_iso  # noqa: E402

TOPIC = names.TOPIC_DECISIONS
BASE = datetime(2026, 11, 1, tzinfo=UTC)


def log(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def payloads(n: int, malformed_share: float = 0.001, foreign_share: float = 0.05):
    """Realistic decision events: device-served, quality fallbacks and capability misses, a few broken.
    Most are encoded as the router encodes them (its event record, msgspec: the canonical bytes); a
    `foreign_share` as another producer might (the same content, keys in another order)."""
    import msgspec

    from routerscope.contract.events import DecisionEvent

    rng = random.Random(42)
    encode = msgspec.json.encode
    for i in range(n):
        kind = i % 10
        t = utc_iso(BASE + timedelta(milliseconds=37 * i))
        event = {
            "schema_version": 2,
            "event_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            "event_time": t,
            "request_id": f"req-{i}",
            "session_id": f"sess-{i % 5000}",
            "task_type": ("intent_classify", "short_reply", "extract_fields")[i % 3],
            "mode": "live",
            "entered_device": True,
            "fallback_type": "none",
            "reason": "default",
            "degrade_level": 0,
            "attempts": [{"level": 0, "outcome": "ok", "latency_ms": 120.0 + i % 50}],
            "cloud_calls": 0,
            "confidence": 0.9,
            "threshold": 0.7,
            "deadline_ms": 2000,
            "elapsed_ms": 100,
            "latency_ms": 130.5,
            "input_tokens": 40 + i % 100,
            "output_tokens": 8,
            "policy_version": "2026-11-01.1",
            "network": "wifi",
            "device_tier": "mid",
            "has_pii": False,
            "device_model": "gemma3-270m-q4_k_m",
        }
        if kind == 7:
            event.update(
                fallback_type="quality",
                reason="low_confidence",
                degrade_level=2,
                cloud_calls=1,
                confidence=0.4,
                attempts=[
                    {"level": 0, "outcome": "low_confidence", "latency_ms": 150.0},
                    {"level": 2, "outcome": "ok", "latency_ms": 640.0},
                ],
                cloud_model="cloud-small",
                cost_usd=0.0004,
            )
        elif kind == 9:
            event.update(
                task_type="long_summary",
                entered_device=False,
                fallback_type="capability",
                reason="capability_miss",
                degrade_level=2,
                cloud_calls=1,
                confidence=None,
                attempts=[{"level": 2, "outcome": "ok", "latency_ms": 900.0}],
                cloud_model="cloud-small",
            )
        raw = encode(event) if rng.random() < foreign_share else encode(msgspec.convert(event, DecisionEvent))
        if rng.random() < malformed_share:
            raw = raw[: len(raw) // 2]
        yield event["session_id"].encode(), raw


def produce(bootstrap: str, n: int) -> float:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
            "enable.idempotence": True,
        }
    )
    started = time.perf_counter()
    for i, (key, value) in enumerate(payloads(n)):
        producer.produce(TOPIC, value=value, key=key)
        if i % 20_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise SystemExit("bench: the broker did not acknowledge every message")
    return time.perf_counter() - started


def raw_confluent(bootstrap: str, partitions: list[int], n: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-raw",
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 * 1024 * 1024,
            "max.partition.fetch.bytes": 16 * 1024 * 1024,
            "log_level": 0,
        }
    )
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in partitions])
    got = 0
    started = time.perf_counter()
    while got < n:
        for message in consumer.consume(50_000, timeout=1.0):
            if message.error() is None:
                got += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def raw_kafka_python(bootstrap: str, partitions: list[int], n: int) -> float:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        group_id=None,
        max_partition_fetch_bytes=16 * 1024 * 1024,
        fetch_max_bytes=64 * 1024 * 1024,
    )
    tps = [TopicPartition(TOPIC, p) for p in partitions]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    got = 0
    started = time.perf_counter()
    while got < n:
        for records in consumer.poll(timeout_ms=1000, max_records=50_000).values():
            got += len(records)
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def _tree_rss_kb(pid: int) -> int:
    """Resident memory of `pid` and every process below it (the parse worker), in KiB."""
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            total += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
            for task in Path(f"/proc/{current}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return total


def cpu_seconds() -> float:
    """CPU time of this process, every thread of it (librdkafka's, the warehouse's, the write thread), read at the
    kernel's nanosecond resolution (`os.times` counts 10 ms ticks: a small run's raw consumer read 0), and of its
    children waited for (a parse worker, once closed)."""
    t = os.times()
    return time.process_time() + t.children_user + t.children_system


def pid_cpu_seconds(pid: int | None) -> float:
    """CPU time of another process (the broker), from /proc; 0 where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, TypeError):
        return 0.0


def thread_cpu_seconds() -> dict[int, tuple[str, float]]:
    """CPU time of each live thread of this process, by thread id: (its name, seconds), from /proc. The loader's
    drain runs in the main thread ("main"); the embedded warehouse names its threads ("ThreadPool" for its
    pool, "MergeMutate" for background merges), librdkafka's are "rdk:…"."""
    out = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            name = "main" if int(task.name) == os.getpid() else (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            out[int(task.name)] = (name, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))
        except (OSError, ValueError, IndexError):
            continue
    return out


def cpu_by_thread(before: dict[int, tuple[str, float]], total_s: float) -> dict[str, float]:
    """CPU seconds per thread name since `before` (`thread_cpu_seconds`); the threads that ended meanwhile (the
    loader's write threads, one a batch, with the warehouse's query threads that ran its inserts) and a closed
    parse worker as "(ended)": what `total_s` holds beyond the live threads'."""
    spent: dict[str, float] = {}
    for tid, (name, seconds) in thread_cpu_seconds().items():
        spent[name] = spent.get(name, 0.0) + seconds - before.get(tid, (name, 0.0))[1]
    spent["(ended)"] = max(0.0, total_s - sum(spent.values()))
    return spent


def cpu_now(broker_pid: int | None) -> tuple[float, float]:
    """(this process's CPU seconds, the broker's): take one before a step, give it to `cpu_spent` after."""
    return cpu_seconds(), pid_cpu_seconds(broker_pid)


def system_cpu_seconds() -> float:
    """The kernel's share of this process's CPU time (10 ms ticks): system calls, page faults, and the file
    system's work for every file a part of the warehouse writes."""
    t = os.times()
    return t.system + t.children_system


def filesystem_of(path: Path) -> str:
    """The file system `path` is on, as /proc/mounts names it; an ext4 without a journal says so (there,
    creating a file scans the inodes freed recently, and every warehouse part is a dozen files:
    docs/loader.md)."""
    try:
        mounts = [line.split() for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return "unknown"
    resolved = str(path.resolve())
    best = max(
        (m for m in mounts if len(m) > 2 and (resolved == m[1] or resolved.startswith(m[1].rstrip("/") + "/"))),
        key=lambda m: len(m[1]),
        default=None,
    )
    if best is None:
        return "unknown"
    device, fstype = best[0], best[2]
    if fstype == "ext4" and device.startswith("/dev/"):
        # jbd2 names a journal after the block device itself (`dm-0-8` for /dev/mapper/…, a link to /dev/dm-0)
        journaled = any(Path("/proc/fs/jbd2").glob(Path(device).resolve().name + "-*"))
        return fstype if journaled else "ext4 (no journal)"
    return fstype


def cpu_spent(before: tuple[float, float], broker_pid: int | None) -> tuple[float, float]:
    """The CPU seconds this process and the broker spent since `before` (`cpu_now`)."""
    now = cpu_now(broker_pid)
    return now[0] - before[0], now[1] - before[1]


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, which a container narrows), else all."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def wait_with_peak_rss(process) -> tuple[int, float]:
    """(wait status, peak MB of the command's process tree), sampled every 20 ms. Not `wait4`'s
    ru_maxrss: a child forked from this process starts with this process's peak (the in-process runs
    hold a warehouse of their own), which it keeps across exec, so that figure read the bench's own."""
    peak = 0
    while True:
        pid, status = os.waitpid(process.pid, os.WNOHANG)
        if pid:
            return status, peak / 1024
        peak = max(peak, _tree_rss_kb(process.pid))
        time.sleep(0.02)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=500_000)
    parser.add_argument("--batch-size", type=int, default=20_000)
    parser.add_argument("--kafka-python-sample", type=int, default=100_000)
    parser.add_argument("--no-worker", action="store_true", help="skip the core's run with its parse worker")
    args = parser.parse_args()

    from routerscope.warehouse.client import open_warehouse
    from routerscope.warehouse.ingest.loader import LoadConfig, Loader
    from routerscope.warehouse.migrate import migrate

    parsers = ["python"]  # the keys' suffix: the loader's one parser (an `sql` one was measured here until 2026-12-07)

    with tempfile.TemporaryDirectory(prefix="routerscope-bench-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ROUTERSCOPE_")}
        env["ROUTERSCOPE_HOME"] = str(Path(tmp) / "home")
        settings = Settings.from_env(env)
        warehouse_fs = filesystem_of(Path(tmp))
        st = broker.start(settings, port=free_port())
        try:
            bootstrap = st.bootstrap
            log(f"producing {args.events} decision events to {bootstrap} ...")
            produce_s = produce(bootstrap, args.events)
            partitions = list(range(settings.topic_partitions))

            log("(a) raw consumption ...")
            before = cpu_now(st.pid)
            confluent_s = raw_confluent(bootstrap, partitions, args.events)
            confluent_cpu = cpu_spent(before, st.pid)
            sample = min(args.kafka_python_sample, args.events)
            kafka_python_s = raw_kafka_python(bootstrap, partitions, sample)

            log("(d) the floor: the warehouse's own insert of the same bodies, in a child ...")
            bare_env = {**env, "ROUTERSCOPE_CLICKHOUSE_DSN": f"chdb://{Path(tmp) / 'bare-warehouse'}"}
            process = subprocess.Popen(
                [
                    sys.executable,
                    str(REPO / "bench" / "loader_bare.py"),
                    "--bootstrap",
                    bootstrap,
                    "--events",
                    str(args.events),
                    "--batch-size",
                    str(args.batch_size),
                    "--partitions",
                    str(len(partitions)),
                ],
                env=bare_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=REPO,
            )
            status, bare_peak_mb = wait_with_peak_rss(process)
            if os.waitstatus_to_exitcode(status) != 0:
                raise SystemExit(f"bench: the bare insert failed: {process.stderr.read().decode()}")
            bare = json.loads(process.stdout.read())

            core: dict[str, tuple] = {}
            core_cpu: dict[str, tuple[float, float]] = {}  # (the loader's CPU seconds, the broker's)
            core_threads: dict[str, dict[str, float]] = {}  # the loader's CPU seconds per thread name
            core_system: dict[str, float] = {}  # the kernel's share of the loader's CPU seconds
            command: dict[str, tuple] = {}
            fixed: dict[str, float] = {}
            variants = [(name, None) for name in parsers]
            if not args.no_worker:
                variants.append(("python", True))  # with its parse worker (off by default here)
            for name, worker in variants:
                key = name if worker is None else f"{name}_worker"
                log(f"(b) loader core in process, parser {key} ...")
                core_settings = Settings.from_env(
                    {**env, "ROUTERSCOPE_CLICKHOUSE_DSN": f"chdb://{Path(tmp) / f'core-warehouse-{key}'}"}
                )
                with open_warehouse(core_settings, purpose="bench") as client:
                    migrate(client)
                    started = time.perf_counter()
                    before, threads_before = cpu_now(st.pid), thread_cpu_seconds()
                    system_before = system_cpu_seconds()
                    config = LoadConfig(batch_size=args.batch_size, idle_timeout_s=1.0, parse_worker=worker)
                    result = Loader(core_settings, config).run(client)
                    core_s = time.perf_counter() - started
                    core_cpu[key] = cpu_spent(before, st.pid)
                    core_threads[key] = cpu_by_thread(threads_before, core_cpu[key][0])
                    core_system[key] = system_cpu_seconds() - system_before
                    core_rows = client.query("SELECT count() FROM routerscope.decisions").result_rows[0][0]
                core[key] = (core_s, result.as_dict(), core_rows)

            for name in parsers:
                log(f"(c) the whole `routerscope load` command, parser {name} ...")
                command_env = {**env, "ROUTERSCOPE_CLICKHOUSE_DSN": f"chdb://{Path(tmp) / f'command-warehouse-{name}'}"}
                exe = str(Path(sys.executable).parent / "routerscope")
                started = time.perf_counter()
                process = subprocess.Popen(
                    [exe, "load", "--json", "--batch-size", str(args.batch_size)],
                    env=command_env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    cwd=REPO,
                )
                status, peak_mb = wait_with_peak_rss(process)
                command_s = time.perf_counter() - started
                out = json.loads(process.stdout.read())
                if os.waitstatus_to_exitcode(status) != 0:
                    raise SystemExit(f"bench: routerscope load failed: {process.stderr.read().decode()}")
                command[name] = (command_s, out, peak_mb)
                # the same command again, with nothing new to load: what any run costs before its first event
                started = time.perf_counter()
                subprocess.run([exe, "load", "--json"], env=command_env, cwd=REPO, check=True, capture_output=True)
                fixed[name] = time.perf_counter() - started
        finally:
            broker.stop(settings)

    n = args.events
    rate = lambda count, seconds: round(count / seconds)  # noqa: E731
    confluent_rate = n / confluent_s
    us = lambda seconds: round(seconds / n * 1e6, 2)  # noqa: E731  (CPU seconds as µs an event)
    cores = usable_cores()
    figures = {
        "events": n,
        "batch_size": args.batch_size,
        "produce_events_per_s": rate(n, produce_s),
        "raw_confluent_kafka_events_per_s": rate(n, confluent_s),
        "raw_kafka_python_events_per_s": rate(sample, kafka_python_s),
        "ratio_kafka_python_to_confluent": round(sample / kafka_python_s / confluent_rate, 3),
        "cores": cores,
        "warehouse_filesystem": warehouse_fs,
        "raw_confluent_kafka_cpu_us_per_event": us(confluent_cpu[0]),
        "broker_cpu_us_per_event_raw": us(confluent_cpu[1]),
    }
    for key, (loader_cpu, broker_cpu) in core_cpu.items():
        # What the work allows: every core busy with nothing but this load and its broker, the ratio
        # to the raw consumer could not pass this (the loader's own CPU per event sets the wall).
        # None when a run too short for the CPU clock's ticks measured no CPU at all.
        spent = loader_cpu + broker_cpu
        ceiling = round(cores * n / spent / confluent_rate, 3) if spent > 0 else None
        figures.update(
            {
                f"loader_core_cpu_us_per_event_{key}": us(loader_cpu),
                f"loader_core_system_cpu_us_per_event_{key}": us(core_system[key]),
                f"broker_cpu_us_per_event_{key}": us(broker_cpu),
                f"ratio_loader_core_ceiling_all_cores_{key}": ceiling,
                f"loader_core_cpu_us_per_event_by_thread_{key}": {
                    name: us(seconds)
                    for name, seconds in sorted(core_threads[key].items(), key=lambda kv: -kv[1])
                    if us(seconds) >= 0.05
                },
            }
        )
    for name in parsers:
        core_s, _, _ = core[name]
        command_s, _, rss = command[name]
        figures.update(
            {
                f"load_command_fixed_seconds_{name}": round(fixed[name], 2),
                f"ratio_load_command_past_fixed_cost_to_confluent_{name}": round(
                    n / max(command_s - fixed[name], 1e-3) / confluent_rate, 3
                ),
                f"loader_core_events_per_s_{name}": rate(n, core_s),
                f"load_command_events_per_s_{name}": rate(n, command_s),
                f"load_command_seconds_{name}": round(command_s, 2),
                f"ratio_loader_core_to_confluent_{name}": round(n / core_s / confluent_rate, 3),
                f"ratio_load_command_to_confluent_{name}": round(n / command_s / confluent_rate, 3),
                f"load_command_peak_rss_mb_{name}": round(rss, 1),
            }
        )
    if "python_worker" in core:
        core_s, _, _ = core["python_worker"]
        figures["loader_core_events_per_s_python_worker"] = rate(n, core_s)
        figures["ratio_loader_core_to_confluent_python_worker"] = round(n / core_s / confluent_rate, 3)
    main_parser = parsers[0]
    for key in (
        "loader_core_events_per_s",
        "load_command_events_per_s",
        "load_command_seconds",
        "ratio_loader_core_to_confluent",
        "ratio_load_command_to_confluent",
        "load_command_peak_rss_mb",
        "load_command_fixed_seconds",
        "ratio_load_command_past_fixed_cost_to_confluent",
        "loader_core_cpu_us_per_event",
        "loader_core_system_cpu_us_per_event",
        "broker_cpu_us_per_event",
        "ratio_loader_core_ceiling_all_cores",
    ):
        figures[key] = figures[f"{key}_{main_parser}"]
    # The floor (d), and the loader against it in the same run: CPU of the core (its process, every thread) over
    # the bare read-and-insert's, peak RSS of the command's process tree over the bare child's.
    figures["warehouse_bare_insert_cpu_us_per_event"] = us(bare["cpu_seconds"])
    figures["warehouse_bare_insert_only_cpu_us_per_event"] = round(us(bare["cpu_seconds"]) - us(confluent_cpu[0]), 2)
    figures["warehouse_bare_insert_peak_rss_mb"] = round(bare_peak_mb, 1)
    figures["warehouse_bare_insert_rows"] = bare["rows"]
    figures["warehouse_bare_insert_cpu_us_per_event_by_thread"] = {
        name: us(seconds)
        for name, seconds in sorted(bare["by_thread"].items(), key=lambda kv: -kv[1])
        if us(seconds) >= 0.05
    }
    for name in parsers:
        figures[f"ratio_loader_core_cpu_to_bare_insert_{name}"] = round(
            figures[f"loader_core_cpu_us_per_event_{name}"] / figures["warehouse_bare_insert_cpu_us_per_event"], 3
        )
        figures[f"ratio_loader_peak_rss_to_bare_insert_{name}"] = round(
            figures[f"load_command_peak_rss_mb_{name}"] / figures["warehouse_bare_insert_peak_rss_mb"], 3
        )
    figures["ratio_loader_core_cpu_to_bare_insert"] = figures[f"ratio_loader_core_cpu_to_bare_insert_{main_parser}"]
    figures["ratio_loader_peak_rss_to_bare_insert"] = figures[f"ratio_loader_peak_rss_to_bare_insert_{main_parser}"]
    counts = {name: (core[name][1], command[name][1], core[name][2]) for name in parsers}
    if "python_worker" in core:
        counts["python_worker"] = (core["python_worker"][1], command["python"][1], core["python_worker"][2])
    figures["same_counts"] = len({json.dumps(c, sort_keys=True) for c in counts.values()}) == 1
    figures["loaded"] = {
        name: {"core": core_counts, "command": command_counts, "core_rows": rows}
        for name, (core_counts, command_counts, rows) in counts.items()
    }
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
