"""The code judge runs the device's and the cloud's snippets on the same generated inputs in a sandbox: hostile
snippets are refused before they run, or stopped by the sandbox within its limits, and nothing is written outside
the sandbox's own temporary directory (docs/judge.md#code)."""

from __future__ import annotations

import time

import pytest

from routerscope.router.judge_code import LIMITS, compare_code, run_sandboxed, static_problem


@pytest.mark.parametrize(
    "answer, reference, verdict",
    [
        ("xs.reverse()", "xs[::-1]", True),  # mutates rather than returns: the same list either way
        ("xs = xs[::-1]", "xs[::-1]", True),
        ("print(sum(range(1, 11)))", "sum(range(1, 11))", True),  # printed 55 is the computed 55
        ("sum(range(1, 10))", "sum(range(1, 11))", False),  # off by one
        ("sorted(xs, reverse=True)", "xs[::-1]", False),  # equal on [3, 2, 1], not on [3, 1, 2]
        ("def f(s):\n    return s", "def rev(s):\n    return s[::-1]", False),
        ("def f(s):\n    pass", "def rev(s):\n    return s[::-1]", False),
        ("xs[::-1]", None, None),  # no reference: no verdict
        ("print(55)", "sum(range(1, 11))", None),  # typed, not computed
        ("import numpy\nnumpy.flip(xs)", "xs[::-1]", None),  # cannot be run here
        ("def f(a, b):\n    return a", "def rev(s):\n    return s[::-1]", False),  # another arity
        # compared where the reference is defined (the mean of [] raises either way, with another error)
        (
            "def avg(xs):\n    return sum(xs) / len(xs)",
            "import statistics\ndef m(xs):\n    return statistics.mean(xs)",
            True,
        ),
        (
            "def avg(xs):\n    return sum(xs) / (len(xs) + 1)",
            "import statistics\ndef m(xs):\n    return statistics.mean(xs)",
            False,
        ),
        ("total = 0.1 + 0.2\ntotal", "print(0.3 + 0.0 * sum([]))", True),  # floats equal to 9 places
    ],
)
def test_snippets_are_judged_by_what_they_compute(answer, reference, verdict):
    assert compare_code(answer, reference).acceptable is verdict


@pytest.mark.parametrize(
    "snippet, reason",
    [
        ("import os\nos.system('rm -rf ~')", "dangerous:os"),
        ("import subprocess\nsubprocess.run(['ls'])", "dangerous:subprocess"),
        ("open('/etc/passwd').read()", "dangerous:open"),
        ("__import__('os')", "dangerous:__import__"),
        ("().__class__.__bases__[0].__subclasses__()", "dangerous:__subclasses__"),
        ("import socket\nsocket.create_connection(('1.1.1.1', 80))", "dangerous:socket"),
        ("return s", "does_not_parse"),
        ("xs", "not_code"),
    ],
)
def test_dangerous_or_broken_snippets_are_refused_before_running(snippet, reason):
    assert static_problem(snippet) == (False, reason)
    assert compare_code(snippet, "xs[::-1]").acceptable is False


HOSTILE = [
    ("fork bomb", "import os\nwhile True:\n    os.fork()"),
    ("shell", "import os\nos.system('touch {target}')"),
    ("file write", "open('{target}', 'w').write('x')"),
    ("file removal", "import os\nos.remove('{keep}')"),
    ("tree removal", "import shutil\nshutil.rmtree('{dir}')"),
    ("process", "import subprocess\nsubprocess.run(['touch', '{target}'])"),
    ("network", "import socket\nsocket.create_connection(('127.0.0.1', 9))"),
    ("fresh import", "import ctypes\nctypes.CDLL(None)"),
]


@pytest.mark.parametrize("name, code", HOSTILE, ids=[n for n, _ in HOSTILE])
def test_hostile_snippets_that_get_past_the_static_check_are_stopped_by_the_sandbox(name, code, tmp_path):
    """The static refusal bypassed on purpose (`run_sandboxed` directly): the audit hook refuses the call, the
    snippet ends in an error, and the files outside the sandbox are as they were."""
    keep = tmp_path / "keep.txt"
    keep.write_text("kept")
    target = tmp_path / "written.txt"
    out = run_sandboxed(code.format(target=target, keep=keep, dir=tmp_path), [[{}]], [], None)
    assert out.status == "ok" and out.results == [[{"error": "PermissionError"}]], (name, out)
    assert not target.exists() and keep.read_text() == "kept"


@pytest.mark.parametrize(
    "name, code, status",
    [
        ("endless loop", "while True:\n    pass", "timeout"),
        ("growing number", "x = 1\nwhile True:\n    x *= 3", "timeout"),
        ("huge output through the fd", "import os\nos.write(1, b'x' * 10**8)", "killed"),
    ],
)
def test_runaway_snippets_are_killed_within_their_limits(name, code, status):
    start = time.monotonic()
    out = run_sandboxed(code, [[{}]], [], None)
    assert out.status == status, (name, out)
    assert time.monotonic() - start < LIMITS.wall_s + 2


def test_memory_and_printing_past_their_limits_end_the_run_as_errors():
    out = run_sandboxed("x = [0] * 10**10", [[{}]], [], None)
    assert out.results == [[{"error": "MemoryError"}]]
    out = run_sandboxed("print('x' * 10**7)", [[{}]], [], None)
    assert out.results == [[{"error": "OverflowError"}]]


def test_a_snippet_may_write_inside_its_own_sandbox_and_nothing_of_it_is_left():
    import glob
    import tempfile

    before = set(glob.glob(f"{tempfile.gettempdir()}/routerscope-judge-*"))
    out = run_sandboxed("open('inside.txt', 'w').write('ok')\n1", [[{}]], [], None)
    assert out.results == [[{"ok": "1"}]]
    assert set(glob.glob(f"{tempfile.gettempdir()}/routerscope-judge-*")) == before


# Reaches no audit event covers, tried with the static refusal bypassed (`run_sandboxed` directly): the parent
# must survive, nothing may appear outside the sandbox.
def test_a_snippet_cannot_kill_the_replay_through_a_pidfd():
    code = (
        "import random, typing\no = random._os\nfd = o.pidfd_open(o.getppid())\n"
        "typing.sys.modules['_signal'].pidfd_send_signal(fd, 15)\nx = 1\n"
    )
    out = run_sandboxed(code, [[{}]], [], None)  # before the fix this test process died of SIGTERM here
    assert out.results == [[{"error": "AttributeError"}]]


@pytest.mark.parametrize("call", ["mkfifo", "mknod"])
def test_a_snippet_cannot_create_a_node_outside_its_sandbox(call, tmp_path):
    target = tmp_path / f"evil-{call}"
    out = run_sandboxed(f"import random\nrandom._os.{call}({str(target)!r})\nx = 1\n", [[{}]], [], None)
    assert not target.exists()
    assert out.results == [[{"error": "AttributeError"}]]


def test_a_snippet_cannot_raise_its_own_limits():
    out = run_sandboxed(
        "import typing\nr = typing.sys.modules['resource']\nr.setrlimit(r.RLIMIT_AS, (-1, -1))\nx = 1\n",
        [[{}]],
        [],
        None,
    )
    assert out.results == [[{"error": "AttributeError"}]]


@pytest.mark.parametrize(
    "forged",
    ["[1]", '{"kinds": [[]]}', '{"kinds": [[1, 2]]}', '{"kinds": [[{"ok": 5}]]}', '{"kinds": [[{"ok": "1"}]], "x": 1}'],
)
def test_output_forged_in_the_result_protocol_is_no_result(forged):
    """The snippet writes its own 'result' to the harness's stdout and exits before the runner does: the judge
    neither crashes nor reads a verdict from it."""
    code = f"import random\ndef f(xs):\n    random._os.write(1, {forged.encode()!r})\n    random._os._exit(0)\n"
    out = run_sandboxed(code, [[{"a0": [1, 2]}] * 5], ["a0"], "f")
    assert out.status == "crashed" and out.detail == "malformed_result"


@pytest.mark.parametrize(
    "snippet",
    [
        "import random\ndef f(xs):\n    o = random._os\n    o.write(1, b'[1]')\n    o._exit(0)\n",
        "import typing\ndef f(xs):\n    return typing.sys.setrecursionlimit(10**6)\n",
        "import operator, random\ndef f(xs):\n    return operator.attrgetter('_os')(random).getpid()\n",
        "import dataclasses\ndef f(xs):\n    return dataclasses.builtins.open('/etc/passwd').read()\n",
    ],
)
def test_modules_reached_through_other_modules_are_refused(snippet):
    verdict = compare_code(snippet, "def f(xs):\n    return sorted(xs)\n")
    assert verdict.acceptable is False and verdict.reason.startswith("dangerous:")


def test_identical_code_drawing_random_numbers_does_not_differ():
    """The reference runs every input kind, the device only the chosen one: each sample starts from the same seed."""
    code = "import random\ndef f(n):\n    return n + random.randint(0, 1000)\n"
    assert compare_code(code, code).acceptable is True


def test_a_reference_reading_the_clock_gets_no_verdict():
    code = "import datetime\ndef f(xs):\n    return str(datetime.datetime.now())\n"
    assert compare_code(code, code) == compare_code("def f(xs):\n    return 1\n", code)
    assert compare_code(code, code).acceptable is None
    assert compare_code(code, code).reason == "reference_nondeterministic"


def test_a_snippet_cannot_build_its_own_code_object():
    """Bytecode made by hand would name what the static check reads in the source (`__import__`): refused."""
    code = (
        "import typing\nk = typing.types.CodeType(0, 0, 0, 0, 2, 3, b'', (), (), (), 'x', 'x', 'x', 1, b'', b'', (), "
        "())\nx = 1\n"
    )
    assert run_sandboxed(code, [[{}]], [], None).results == [[{"error": "PermissionError"}]]
