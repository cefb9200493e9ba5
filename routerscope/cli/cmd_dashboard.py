"""`routerscope dashboard`: the Streamlit dashboard on 127.0.0.1, in a child process that dies with this one
(`serve_dashboard`, which `routerscope demo` ends with too)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import webbrowser
from pathlib import Path

from routerscope.cli.common import port
from routerscope.cli.interrupt import stop_on_term
from routerscope.core import procs
from routerscope.core.errors import RouterscopeError
from routerscope.core.settings import Settings


def dashboard_command(port: int) -> list[str]:
    # the installed package (editable or not), not a path relative to this file
    from routerscope import dashboards  # deferred: the [dashboard] extra; every other command runs without it

    app = Path(dashboards.__file__).with_name("streamlit_app.py")
    return [
        sys.executable,
        "-m",
        "routerscope.dashboards.serve",  # Streamlit's command line, after what the first page would import
        "run",
        str(app),
        "--server.headless",
        "true",
        "--server.address",
        "127.0.0.1",
        "--server.port",
        str(port),
        "--browser.gatherUsageStats",
        "false",
        "--client.toolbarMode",
        "viewer",  # no "Deploy" button nor developer options: the people reading these pages do not deploy them
        # No "magic" (a bare expression drawn as if written with st.write): the pages call Streamlit themselves, and
        # magic rewrites each page through `ast.parse`, which CPython before 3.11.8 and 3.12.2 can fail with a
        # spurious SystemError when another thread builds a syntax tree at the same moment (python/cpython
        # gh-106905): the page would show "Script compilation error" until reloaded. The tests run pages alike.
        "--runner.magicEnabled",
        "false",
    ]


def serve_dashboard(port: int, log_path: Path, open_browser: bool = False, alert_rules: Path | None = None) -> int:
    """Run Streamlit on 127.0.0.1:`port` until Ctrl-C (or until it exits); prints the URL once it answers.
    `alert_rules`: the rules file the dashboard reads (as ROUTERSCOPE_ALERT_RULES; None: the environment's)."""
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", port)) == 0:
            raise RouterscopeError(f"port {port} is already in use; choose another with --dashboard-port / --port")

    stop_on_term()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "ab")

    env = {**os.environ, **({"ROUTERSCOPE_ALERT_RULES": str(alert_rules)} if alert_rules else {})}
    process = procs.spawn(dashboard_command(port), stdout=log, stderr=subprocess.STDOUT, env=env)  # dies with us
    url = f"http://127.0.0.1:{port}"
    try:
        procs.wait_ready(
            process,
            lambda: procs.http_ok(f"{url}/_stcore/health"),
            what="the dashboard",
            log_path=log_path,
            timeout_s=120,
        )
        from routerscope.dashboards.timerange import PAGES  # deferred: the [dashboard] extra, as above

        print(f"Dashboard: {url}  ({', '.join(title for _, title in PAGES)}; Ctrl-C stops it)", flush=True)
        if open_browser:
            try:
                webbrowser.open(url)
            except Exception:  # no browser on this machine: the URL above is enough
                pass
        return process.wait()
    except KeyboardInterrupt:
        print("\nrouterscope: dashboard stopped.", file=sys.stderr)
        return 0
    finally:
        procs.stop(process)
        log.close()


def cmd_dashboard(args, settings: Settings) -> int:
    return serve_dashboard(args.port, settings.dashboard_log_path)


def add_commands(sub) -> None:
    """The commands of this module, on the `routerscope` parser's subparsers."""
    p = sub.add_parser("dashboard", help="start the Streamlit dashboard on localhost")
    p.add_argument("--port", type=port, default=8501)
    p.set_defaults(func=cmd_dashboard)
