"""`routerscope broker start|stop|status` (the local development broker, `routerscope/core/broker.py`) and
`routerscope produce` (a JSON-lines file into a topic, `routerscope/cli/produce.py`)."""

from __future__ import annotations

import sys
from pathlib import Path

from routerscope.cli.common import port, print_json
from routerscope.core import broker, names
from routerscope.core.errors import RouterscopeError
from routerscope.core.settings import Settings


def cmd_broker(args, settings: Settings) -> int:
    if args.action == "start":
        if settings.kafka_bootstrap_env:
            print(
                f"ROUTERSCOPE_KAFKA_BOOTSTRAP={settings.kafka_bootstrap_env} is set: commands use that "
                "broker; starting a local one anyway for this home.",
                file=sys.stderr,
            )
        already = broker.status(settings).running
        st = broker.start(settings, port=args.port)
        print(st.bootstrap)
        print(
            f"broker {'already running' if already else 'started'} (pid {st.pid}, log {st.log}); "
            f"topics: {', '.join(names.TOPICS.values())}",
            file=sys.stderr,
        )
        return 0
    if args.action == "stop":
        stopped = broker.stop(settings)
        print("broker stopped" if stopped else "no broker was running for this home")
        return 0
    st = broker.status(settings)
    if args.json:
        print_json(st.as_dict())
    elif st.running:
        print(f"running at {st.bootstrap} (pid {st.pid}, log {st.log})")
    else:
        print(f"not running (home {settings.home})")
    return 0 if st.running else 3


def cmd_produce(args, settings: Settings) -> int:
    from routerscope.cli.produce import produce_file  # deferred: start-up: kafka-python, ~0.07 s to import

    path = Path(args.file)
    if not path.is_file():
        raise RouterscopeError(f"no such file: {path}")
    result = produce_file(settings, path, args.topic, show_progress=not args.quiet)
    print(
        f"produced {result.sent} message(s) to {result.topic}"
        + (f" ({result.unkeyed} without a key: not a JSON object with its key field)" if result.unkeyed else "")
    )
    if result.failed:
        print(
            f"routerscope: error: {result.failed} line(s) were not published: {'; '.join(result.errors)}",
            file=sys.stderr,
        )
        return 1
    return 0


def add_commands(sub) -> None:
    """The commands of this module, on the `routerscope` parser's subparsers."""
    p = sub.add_parser("broker", help="the local development broker (Tansu on 127.0.0.1)")
    bsub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    b = bsub.add_parser("start", help="start it (no-op if running); prints the bootstrap address")
    b.add_argument("--port", type=port, default=broker.DEFAULT_PORT)
    bsub.add_parser("stop", help="stop it")
    b = bsub.add_parser("status", help="is it running? exit 0 if so, 3 if not")
    b.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_broker)

    p = sub.add_parser("produce", help="publish a JSON-lines file, one message per line, bad lines included")
    p.add_argument("file")
    p.add_argument("--topic", required=True, choices=sorted(names.TOPICS))
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_produce)
