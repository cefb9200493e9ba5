"""Why the demo's Ctrl-C tests failed in some full-suite runs: a runner that started the suite with
SIGINT ignored (a background job of a shell without job control) passed SIG_IGN down to every command
the tests start, so the SIGINT a test sends did nothing. `tests.support.signals.as_foreground_job`
starts a command as a terminal's foreground job instead (docs/demo.md, "Running it again")."""

from __future__ import annotations

import signal
import subprocess
import sys

from tests.support.signals import as_foreground_job

# What a command sees, and what a SIGINT then does to it: the disposition, then a wait for the signal.
PROBE = (
    "import signal, sys, time; print(signal.getsignal(signal.SIGINT), flush=True); "
    "[time.sleep(0.05) for _ in range(60)]; print('still running after 3 s', flush=True)"
)
# A runner that ignores SIGINT (as a background job does) and starts the probe, plain or wrapped.
RUNNER = (
    "import signal, subprocess, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, text=True); "
    "print(p.stdout.readline().strip(), flush=True); p.send_signal(signal.SIGINT); "
    "print(p.stdout.read().strip() or 'stopped', p.wait(), flush=True)"
)


def run_under_a_runner_that_ignores_sigint(cmd: list[str]) -> list[str]:
    done = subprocess.run([sys.executable, "-c", RUNNER, *cmd], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_a_command_started_under_an_ignored_sigint_inherits_it_and_a_ctrl_c_does_nothing():
    disposition, outcome = run_under_a_runner_that_ignores_sigint([sys.executable, "-c", PROBE])
    assert disposition == str(signal.SIG_IGN)
    assert outcome == "still running after 3 s 0"


def test_as_a_foreground_job_the_command_has_the_default_ctrl_c_and_stops_on_it():
    disposition, outcome = run_under_a_runner_that_ignores_sigint(as_foreground_job([sys.executable, "-c", PROBE]))
    assert disposition == str(signal.default_int_handler)
    # an uncaught KeyboardInterrupt ends Python the way the signal would have: killed by SIGINT
    assert outcome == f"stopped {-signal.SIGINT}"
