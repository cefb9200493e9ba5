"""`routerscope collect`: the OTLP/HTTP receiver, GenAI spans in from any instrumented app, one Kafka message per
trace out (docs/otlp.md). The receiver is `routerscope/instrumentation/otlp/receiver.py`, imported when the
command runs."""

from __future__ import annotations

import sys

from routerscope.cli.common import float_at_least, port
from routerscope.cli.interrupt import stop_on_term
from routerscope.core.errors import BrokerUnavailable, ConfigError
from routerscope.core.kafka import ensure_topics, librdkafka_config
from routerscope.core.settings import Settings
from routerscope.instrumentation import pii


def cmd_collect(args, settings: Settings) -> int:
    """The OTLP/HTTP receiver: GenAI spans in, one Kafka message per trace out (docs/otlp.md)."""
    from routerscope.instrumentation.otlp.mapping import Mapping, MappingError  # deferred: as the receiver
    from routerscope.instrumentation.otlp.receiver import Receiver  # deferred: start-up: protobuf, ~25 ms

    try:
        ensure_topics(settings)  # the OTLP topic among them
    except BrokerUnavailable as exc:  # spans are taken all the same: they wait on disk for the broker
        print(
            f"routerscope collect: warning: {str(exc).splitlines()[0]}; spans are taken and wait on disk until a "
            "broker answers there (with its topics: `routerscope broker start` creates them)",
            file=sys.stderr,
            flush=True,
        )
    pii.configure(settings.home)  # values that look personal are hashed on the way in, as the loader would
    try:  # span names a task rule of the mapping file reads are kept (docs/otlp.md)
        mapping = Mapping.load(settings.otlp_mapping)
    except MappingError as exc:
        raise ConfigError(f"{exc}; fix the file named by ROUTERSCOPE_OTLP_MAPPING") from None
    globs = tuple(r.span_name for r in mapping.task_rules if r.span_name)
    directory = settings.home / "collect"
    try:
        receiver = Receiver.open(
            librdkafka_config(settings),
            settings.otlp_topic,
            directory,
            host=args.host,
            port=args.port,
            trace_wait_s=args.trace_wait,
            span_name_globs=globs,
            max_backlog=int(args.max_backlog_mb * 1024 * 1024),
            fsync_interval_s=args.fsync_interval,
        )
    except OSError as exc:
        if exc.filename:
            raise ConfigError(f"cannot use {exc.filename}: {exc.strerror or exc}") from None
        raise ConfigError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    stop_on_term()
    print(
        f"routerscope collect: OTLP/HTTP on http://{args.host}:{receiver.port}/v1/traces "
        f"-> Kafka topic {settings.otlp_topic} at {settings.kafka_bootstrap()}"
        + (f" ({receiver.recovered} traces still waiting from the last run)" if receiver.recovered else ""),
        flush=True,
    )
    try:
        receiver.serve_forever()
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (Terminated)
        pass
    finally:
        stats = receiver.close()
        left = stats.get("undelivered_at_exit", 0)
        print(
            f"routerscope collect: stopped; {stats['spans_in']} spans in, {stats['spans_out']} written in "
            f"{stats['traces_out']} traces, {stats['spans_rejected']} refused, {left} messages undelivered"
            + (f" (kept in {directory / 'outbox'}, sent at the next start)" if left else "")
            + (
                f", {stats['held_at_exit']} spans still waiting (kept for the next start)"
                if stats["held_at_exit"]
                else ""
            )
            + f"; not on the allow-list: {stats['dropped_attributes']} attributes, {stats['dropped_values']} values, "
            f"{stats['dropped_names']} span names, {stats['dropped_events']} span events",
            file=sys.stderr,
        )
    return 0


def add_commands(sub) -> None:
    """The commands of this module, on the `routerscope` parser's subparsers."""
    p = sub.add_parser("collect", help="receive OTLP/HTTP traces from any GenAI-instrumented app (docs/otlp.md)")
    p.add_argument("--port", type=port, default=4318, help="listen port (default 4318, OTLP/HTTP's)")
    p.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    p.add_argument(
        "--trace-wait",
        type=float_at_least(0, strictly=True),
        default=10.0,
        help="write a trace whose root span has not arrived this many seconds after its first span (default 10)",
    )
    p.add_argument(
        "--max-backlog-mb",
        type=float_at_least(1),
        default=1024,
        help="answer 503 while this much waits on disk for Kafka (default 1024 MB)",
    )
    p.add_argument(
        "--fsync-interval",
        type=float_at_least(0),
        default=1.0,
        help="seconds between fsyncs of what was taken, for power loss (0: before every answer; default 1)",
    )
    p.set_defaults(func=cmd_collect)
