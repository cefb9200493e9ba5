"""The code judge: run the device's snippet and the cloud's reference snippet on the same generated inputs, in a
sandboxed subprocess, and compare what each computes (docs/judge.md#code).

Parsing proves nothing about meaning: `sum(range(1, 10))` parses and sums 1 to 9; `pass` parses; so does
`os.system('rm -rf ~')`. The judge therefore

1. refuses before running anything (`static_problem`): a snippet that does not parse, is a bare name or
   constant, imports or names anything that reaches the process, the file system or the network (`os`,
   `subprocess`, `socket`, `open`, `eval`, `__import__`, dunder attributes, …) is **not acceptable**
   (`dangerous:os`); one that imports a module outside `SAFE_MODULES` cannot be checked here: **no verdict**;
2. finds the snippet's *inputs*: the names it reads but never binds (the request's `xs`), or, when it defines
   functions, its last one (the *entry point*), called with generated arguments;
3. runs the reference on inputs of each kind in `INPUT_KINDS` and keeps the first kind the reference handles on
   every sample (a list for `xs`), then runs the device's snippet on exactly those inputs;
4. compares, input by input, what each *computed*: the value of its last expression, else what it printed, else
   the value it last assigned, else its (possibly mutated) first input — so `xs[::-1]`, `xs.reverse()` and
   `xs = xs[::-1]` all compute the reversed list. Any difference (another value, an error the reference did not
   raise, a time-out, memory or output past its limit) is **not acceptable**; equal observable results on every
   sample are **acceptable**. No reference, a reference that does not run, no entry point on either side, or
   nothing observable: **no verdict**.

The sandbox (`run_sandboxed`): a fresh `python -I -S -B` child in a temporary directory that is removed
afterwards, its own session (killed as a group at the wall-clock limit), `resource` limits on CPU seconds,
address space, file size, open files and core dumps (set by the child before it reads the snippet), an
environment of its own (no proxies, `HOME` = the directory), and an audit hook (PEP 578) installed before the
snippet runs that refuses process creation
(`os.system`, `os.fork`, `subprocess.Popen`, `os.exec*`, `os.posix_spawn`), sockets, `ctypes`, any fresh
import, and any write, rename, removal or mode change outside the temporary directory. Printing is capped
(`LIMITS.output_chars`); the result travels back as JSON in a file the file-size limit bounds."""

from __future__ import annotations

import ast
import builtins
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass

# Modules a snippet may import: pure computation, already imported by the runner before the hook is set.
SAFE_MODULES = frozenset(
    {
        "math",
        "cmath",
        "itertools",
        "functools",
        "collections",
        "re",
        "string",
        "statistics",
        "heapq",
        "bisect",
        "operator",
        "fractions",
        "decimal",
        "datetime",
        "json",
        "random",
        "copy",
        "textwrap",
        "unicodedata",
        "typing",
        "dataclasses",
        "enum",
    }
)
# What reaches beyond the process's own computation: naming one refuses the snippet (not acceptable).
DANGEROUS_MODULES = frozenset(
    {
        "os",
        "sys",
        "subprocess",
        "shutil",
        "socket",
        "ctypes",
        "multiprocessing",
        "threading",
        "signal",
        "pathlib",
        "io",
        "builtins",
        "importlib",
        "pty",
        "resource",
        "urllib",
        "http",
        "requests",
        "asyncio",
        "tempfile",
        "glob",
        "pickle",
        "marshal",
        "gc",
        "inspect",
        "ftplib",
        "smtplib",
        "telnetlib",
        "webbrowser",
        "sqlite3",
        "posix",
        "_posixsubprocess",
        "fcntl",
        "mmap",
        "select",
        "selectors",
        "ssl",
        "code",
        "codeop",
        "runpy",
        "zipimport",
        "atexit",
    }
)
DANGEROUS_NAMES = frozenset(
    {
        "open",
        "exec",
        "eval",
        "compile",
        "__import__",
        "globals",
        "locals",
        "vars",
        "getattr",
        "setattr",
        "delattr",
        "input",
        "breakpoint",
        "help",
        "exit",
        "quit",
        "memoryview",
        "__builtins__",
        "__loader__",
        "__spec__",
    }
)
SAMPLES = 5
# Input kinds, in the order tried: the first the reference handles on every sample is the one compared.
INPUT_KINDS = ("list_int", "int", "str", "list_str", "float")


@dataclass(frozen=True)
class Limits:
    cpu_s: int = 2  # CPU seconds (RLIMIT_CPU: SIGXCPU, then SIGKILL)
    wall_s: float = 6.0  # wall clock for the whole child, its process group killed past it
    memory_bytes: int = 512 * 1024 * 1024  # address space (RLIMIT_AS)
    file_bytes: int = 1024 * 1024  # any file it writes, its result included (RLIMIT_FSIZE)
    output_chars: int = 20_000  # what one run may print
    open_files: int = 32  # RLIMIT_NOFILE


LIMITS = Limits()


@dataclass(frozen=True)
class Outcome:
    """One sandboxed run: `results` per input sample (None when the child produced no result), or why not."""

    status: str  # ok | refused | timeout | killed | crashed
    results: list | None = None
    detail: str = ""


# The child's program. Reads {"code", "inputs": [[{name: value}, ...]], "entry", "tmp", "output_chars"} on stdin;
# writes {"kinds": [[result, ...], ...]} to stdout, a result being {"ok": text} or {"error": name}.
_RUNNER = r"""
import ast, json, sys, os
import math, cmath, itertools, functools, collections, re, string, statistics, heapq, bisect, operator
import fractions, decimal, datetime, random, copy, textwrap, unicodedata, typing, dataclasses, enum
import resource
payload = json.loads(sys.stdin.read())
_L = payload["limits"]  # set here, before the snippet, not in a preexec_fn (unsafe in a threaded parent)
resource.setrlimit(resource.RLIMIT_CPU, (_L["cpu_s"], _L["cpu_s"] + 1))
resource.setrlimit(resource.RLIMIT_AS, (_L["memory_bytes"], _L["memory_bytes"]))
resource.setrlimit(resource.RLIMIT_FSIZE, (_L["file_bytes"], _L["file_bytes"]))
resource.setrlimit(resource.RLIMIT_NOFILE, (_L["open_files"], _L["open_files"]))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
if os.geteuid() != 0:  # root ignores it; the audit hook refuses fork either way
    resource.setrlimit(resource.RLIMIT_NPROC, (1, 1))
# What no audit event covers (PEP 578 has none for these): removed from the modules a snippet can still reach
# through another module's attributes (`random._os`, `typing.sys.modules`), before it runs. Killing the parent
# through a pidfd, making a FIFO or device node outside the directory, re-creating a fresh `posix` module.
import posix, _signal, _imp
for _mod, _names in (
    (os, ("kill", "killpg", "pidfd_open", "mkfifo", "mknod", "setsid", "setpgid", "setpgrp", "chroot", "setuid",
          "setgid", "seteuid", "setegid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups",
          "register_at_fork", "sched_setaffinity", "setpriority", "nice")),
    (posix, ("kill", "killpg", "pidfd_open", "mkfifo", "mknod", "setsid", "setpgid", "setpgrp", "chroot",
             "setuid", "setgid", "seteuid", "setegid", "setreuid", "setregid", "setresuid", "setresgid",
             "setgroups", "register_at_fork", "sched_setaffinity", "setpriority", "nice")),
    (_signal, ("pidfd_send_signal", "pthread_kill", "signal", "setitimer", "alarm", "siginterrupt",
               "pthread_sigmask", "set_wakeup_fd")),
    (_imp, ("create_builtin", "exec_builtin", "create_dynamic", "exec_dynamic", "init_frozen")),
    (resource, ("setrlimit", "prlimit")),
):
    for _n in _names:
        if hasattr(_mod, _n):
            delattr(_mod, _n)
TMP = os.path.realpath(payload["tmp"])
OUT_LIMIT = payload["output_chars"]
_real_stdout = sys.stdout
BLOCKED = ("os.system", "os.exec", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.kill", "os.killpg",
           "subprocess.", "socket.", "ctypes.", "os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.unlink",
           "os.chmod", "os.chown", "os.truncate", "shutil.", "os.putenv", "os.unsetenv", "os.chdir", "os.link",
           "os.symlink", "os.utime", "os.setxattr", "os.removexattr", "sys._getframe", "object.__getattr__",
           "sys.settrace", "sys.setprofile", "pty.", "webbrowser.", "urllib.", "http.", "sqlite3.", "os.add_dll",
           "resource.", "code.__new__")

def _inside(path):
    try:
        real = os.path.realpath(os.fsdecode(path))
    except Exception:
        return False
    return real == TMP or real.startswith(TMP + os.sep)

def _hook(event, args):
    if event.startswith(BLOCKED):
        raise PermissionError("sandbox: " + event)
    if event == "import":
        raise PermissionError("sandbox: import " + str(args[0]))
    if event == "open":
        path, mode, flags = args[0], args[1], args[2]
        writes = (mode is not None and any(c in str(mode) for c in "wax+")) or (
            mode is None and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND))
        if writes and not (isinstance(path, (str, bytes)) and _inside(path)):
            raise PermissionError("sandbox: write outside the sandbox")

class _Capped:
    def __init__(self):
        self.parts, self.size = [], 0
    def write(self, s):
        self.size += len(s)
        if self.size > OUT_LIMIT:
            raise OverflowError("output past its limit")
        self.parts.append(s)
        return len(s)
    def flush(self):
        pass
    def text(self):
        return "".join(self.parts)

def _norm(v):
    if isinstance(v, str):
        return v.strip()
    if isinstance(v, (set, frozenset)):
        return repr(sorted(v, key=repr))
    if isinstance(v, float) and v == v and abs(v) != float("inf"):
        if v == int(v) and abs(v) < 1e15:
            return repr(int(v))
        return repr(round(v, 9))  # 0.1 + 0.2 and 0.3 compute the same number
    return repr(v)

def _run(tree, names, sample, entry):
    ns = {"__name__": "__snippet__"}
    ns.update(copy.deepcopy(sample))
    buf = _Capped()
    sys.stdout = buf
    try:
        body = list(tree.body)
        value = None
        if entry:
            exec(compile(ast.Module(body, []), "<snippet>", "exec"), ns)
            value = ns[entry](*[copy.deepcopy(sample[k]) for k in sorted(sample)])
        else:
            last = body[-1] if body and isinstance(body[-1], ast.Expr) else None
            head = body[:-1] if last is not None else body
            exec(compile(ast.Module(head, []), "<snippet>", "exec"), ns)
            if last is not None:
                value = eval(compile(ast.Expression(last.value), "<snippet>", "eval"), ns)
        printed = buf.text()
    finally:
        sys.stdout = _real_stdout
    if value is not None:
        return _norm(value)
    if printed.strip():
        return printed.strip()
    if not entry and body:
        last = body[-1]
        targets = []
        if isinstance(last, ast.Assign):
            targets = [t.id for t in last.targets if isinstance(t, ast.Name)]
        elif isinstance(last, (ast.AugAssign, ast.AnnAssign)) and isinstance(last.target, ast.Name):
            targets = [last.target.id]
        if not targets:  # the name bound last in the source (a loop's running total), loop variables aside
            loops = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.For, ast.comprehension))
                     for n in ast.walk(f.target)}
            stores = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
                      and id(n) not in loops and n.id not in names]
            stores.sort(key=lambda n: (n.lineno, n.col_offset))
            targets = [stores[-1].id] if stores else []
        if targets and targets[-1] in ns:
            return _norm(ns[targets[-1]])
        if names:
            return _norm(ns.get(sorted(names)[0]))
    return None

tree = ast.parse(payload["code"])
entry = payload["entry"]
names = payload["names"]
sys.addaudithook(_hook)
def _once(sample):
    random.seed(0)  # per sample: the same code sees the same draws whichever kinds ran before
    try:
        return {"ok": _run(tree, names, sample, entry)}
    except MemoryError:
        sys.stdout = _real_stdout
        return {"error": "MemoryError"}
    except BaseException as e:
        sys.stdout = _real_stdout
        return {"error": type(e).__name__}

kinds = []
for samples in payload["inputs"]:
    results = []
    for sample in samples:
        first = _once(sample)
        # run twice: a result that changes between two runs of the same input (the clock, `id`) is no result
        results.append(first if _once(sample) == first else {"nondeterministic": True})
    kinds.append(results)
_real_stdout.write(json.dumps({"kinds": kinds}))
_real_stdout.flush()
"""


def run_sandboxed(
    code: str, inputs: list[list[dict]], names: list[str], entry: str | None, limits: Limits = LIMITS
) -> Outcome:
    """Run `code` once per sample of each input kind (`inputs[kind][sample]` = {name: value}) in a sandboxed child
    (the module's docstring); `entry`: the function to call with the sample's values (sorted by name), or None
    to run the snippet with the values bound as names. Never raises for what the snippet does."""
    tmp = tempfile.mkdtemp(prefix="routerscope-judge-")
    payload = json.dumps(
        {
            "code": code,
            "inputs": inputs,
            "names": names,
            "entry": entry,
            "tmp": tmp,
            "output_chars": limits.output_chars,
            "limits": dataclasses.asdict(limits),
        }
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": tmp, "TMPDIR": tmp, "PYTHONHASHSEED": "0", "LC_ALL": "C.UTF-8"}
    out_path = os.path.join(tmp, "result.json")
    try:
        with open(out_path, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-B", "-c", _RUNNER],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.DEVNULL,
                cwd=tmp,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
            try:
                proc.communicate(payload.encode(), timeout=limits.wall_s)
            except subprocess.TimeoutExpired:
                _kill(proc)
                return Outcome("timeout", detail=f"wall>{limits.wall_s}s")
            finally:
                _kill(proc)
        code_ = proc.returncode
        if code_ != 0:
            sig = -code_ if code_ < 0 else 0
            name = signal.Signals(sig).name if sig else f"exit {code_}"
            status = "timeout" if sig in (signal.SIGXCPU, signal.SIGKILL) else "killed"
            return Outcome(status, detail=name)
        try:
            with open(out_path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return Outcome("crashed", detail="no_result")
        kinds = _valid_kinds(data, [len(k) for k in inputs])
        if kinds is None:  # the snippet wrote over the result (`os.write(1, …)` then `os._exit(0)`)
            return Outcome("crashed", detail="malformed_result")
        return Outcome("ok", kinds)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _valid_kinds(data: object, sizes: list[int]) -> list | None:
    """The child's result when it has the protocol's shape (a result per sample of every kind, each `{"ok": text
    or null}`, `{"error": name}` or `{"nondeterministic": true}`), else None: what the snippet may have forged."""
    if not isinstance(data, dict) or set(data) != {"kinds"} or not isinstance(data["kinds"], list):
        return None
    kinds = data["kinds"]
    if [len(k) if isinstance(k, list) else -1 for k in kinds] != sizes:
        return None
    for results in kinds:
        for r in results:
            if not isinstance(r, dict) or len(r) != 1:
                return None
            ((key, value),) = r.items()
            if not (
                (key == "ok" and (value is None or isinstance(value, str)))
                or (key == "error" and isinstance(value, str))
                or (key == "nondeterministic" and value is True)
            ):
                return None
    return kinds


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _module_names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name.split(".")[0] for a in node.names]
    if isinstance(node, ast.ImportFrom):
        return [(node.module or "").split(".")[0]]
    return []


def static_problem(code: str) -> tuple[bool | None, str]:
    """Before anything runs: (False, reason) for a snippet that is no code or reaches past its own computation,
    (None, reason) for one this judge cannot run (an import outside `SAFE_MODULES`), (True, '') otherwise."""
    try:
        tree = ast.parse(code)
        compile(tree, "<snippet>", "exec")  # `return s` parses, and compiles to nothing a snippet can be
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False, "does_not_parse"
    body = tree.body
    if not body or (
        len(body) == 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Name | ast.Constant)
    ):
        return False, "not_code"
    unknown = ""
    for node in ast.walk(tree):
        for module in _module_names(node):
            if module in DANGEROUS_MODULES:
                return False, f"dangerous:{module}"
            if module not in SAFE_MODULES:
                unknown = unknown or module
        if isinstance(node, ast.Name) and node.id in DANGEROUS_NAMES:
            return False, f"dangerous:{node.id}"
        if isinstance(node, ast.Name) and node.id in DANGEROUS_MODULES:
            return False, f"dangerous:{node.id}"
        if isinstance(node, ast.Attribute) and node.attr.startswith("__"):
            return False, f"dangerous:{node.attr}"
        if isinstance(node, ast.Attribute) and node.attr in ("system", "popen", "fork", "remove", "rmtree", "unlink"):
            return False, f"dangerous:{node.attr}"
        # a module reached through another's attributes (`random._os`, `typing.sys`, `dataclasses.builtins`) or an
        # attribute named by a string (`operator.attrgetter('_os')`) is the same reach as importing it
        if isinstance(node, ast.Attribute) and (
            node.attr.lstrip("_") in DANGEROUS_MODULES or node.attr in ("attrgetter", "methodcaller")
        ):
            return False, f"dangerous:{node.attr}"
    if unknown:
        return None, f"unchecked_import:{unknown[:30]}"
    if hardcoded(tree):
        return None, "hardcoded"  # `print(55)` computes nothing a run could check
    return True, ""


def hardcoded(tree: ast.Module) -> bool:
    """A snippet that only prints or states constants: running it cannot tell a computed answer from a typed one."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id == "print"):
            return False
        if not isinstance(
            node,
            ast.Module
            | ast.Expr
            | ast.Call
            | ast.Name
            | ast.Constant
            | ast.Load
            | ast.UnaryOp
            | ast.USub
            | ast.List
            | ast.Tuple,
        ):
            return False
    return True


def free_names(tree: ast.Module) -> list[str]:
    """The names a snippet reads and never binds (its inputs), builtins and imports aside, sorted."""
    bound: set[str] = set()
    read: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return sorted(n for n in read - bound if not hasattr(builtins, n))


def entry_point(tree: ast.Module) -> tuple[str, int] | None:
    """The last top-level function a snippet defines, with its count of required positional parameters."""
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    if not functions:
        return None
    f = functions[-1]
    return f.name, len(f.args.posonlyargs) + len(f.args.args) - len(f.args.defaults)


def _values(kind: str) -> list:
    table: dict[str, list] = {
        "list_int": [[3, 1, 2], [], [5], [0, -4, 7, 7, 2], [10, 9, 8, 1, 12, 6]],
        "int": [0, 1, 5, 10, -3],
        "str": ["abc", "", "hello world", "a", "level"],
        "list_str": [["b", "a"], [], ["x"], ["c", "a", "b"], ["hello", "world"]],
        "float": [0.5, 2.0, -1.25, 0.0, 3.5],
    }
    return table[kind]


def generated_inputs(names: list[str]) -> list[list[dict]]:
    """Per kind of `INPUT_KINDS`, `SAMPLES` samples binding every name (the i-th name shifted by i, so two inputs
    differ); one empty sample when there is nothing to bind."""
    if not names:
        return [[{}]]
    kinds = []
    for kind in INPUT_KINDS:
        values = _values(kind)
        kinds.append([{n: values[(s + i) % len(values)] for i, n in enumerate(names)} for s in range(SAMPLES)])
    return kinds


@dataclass(frozen=True)
class CodeVerdict:
    acceptable: bool | None
    reason: str = ""


def compare_code(answer: str, reference: str | None, limits: Limits = LIMITS) -> CodeVerdict:
    """The device's Python `answer` against the cloud's `reference` (both without their Markdown fences), by
    running both on the same generated inputs (the module's docstring)."""
    ok, why = static_problem(answer)
    if ok is not True:
        return CodeVerdict(ok, why)
    if not reference or not reference.strip():
        return CodeVerdict(None, "no_reference")
    ref_ok, ref_why = static_problem(reference)
    if ref_ok is not True:
        return CodeVerdict(None, f"reference_{ref_why}")
    tree, ref_tree = ast.parse(answer), ast.parse(reference)
    entry, ref_entry = entry_point(tree), entry_point(ref_tree)
    if (entry is None) != (ref_entry is None):
        return CodeVerdict(None, "no_common_entry_point")
    if entry is not None and ref_entry is not None:
        if entry[1] != ref_entry[1]:
            return CodeVerdict(False, f"arity:{entry[1]}!={ref_entry[1]}")
        names = [f"a{i}" for i in range(ref_entry[1])]
    else:
        names = sorted(set(free_names(tree)) | set(free_names(ref_tree)))
    inputs = generated_inputs(names)
    ref_run = run_sandboxed(reference, inputs, names, ref_entry[0] if ref_entry else None, limits)
    if ref_run.status != "ok" or not ref_run.results:
        return CodeVerdict(None, f"reference_{ref_run.status}")
    # the first kind the reference handles on most samples; compared on the samples it handles (a mean of `[]`
    # raises, whichever way it is written: the device may do anything the reference does not define)
    chosen = next(
        (i for i, rs in enumerate(ref_run.results) if sum("ok" in r for r in rs) * 2 > len(rs)),
        None,
    )
    if chosen is None:
        if any("nondeterministic" in r for rs in ref_run.results for r in rs):
            return CodeVerdict(None, "reference_nondeterministic")
        return CodeVerdict(None, "reference_fails_on_most_inputs")
    expected = ref_run.results[chosen]
    if all(r.get("ok") is None for r in expected):
        return CodeVerdict(None, "nothing_observable")
    run = run_sandboxed(answer, [inputs[chosen]], names, entry[0] if entry else None, limits)
    if run.status != "ok" or not run.results:
        return CodeVerdict(False, f"{run.status}:{run.detail}"[:60])
    for sample, got, want in zip(inputs[chosen], run.results[0], expected, strict=True):
        if "ok" in want and got != want:
            shown = "error:" + got["error"] if "error" in got else "differs"
            return CodeVerdict(False, f"{shown}:on:{json.dumps(sample)[:40]}")
    return CodeVerdict(True, "")
