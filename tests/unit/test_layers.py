"""The layers of `routerscope`, an ordered contract (`make lint` runs this file; docs/architecture.md#layers).

Read top to bottom as the data flows, each layer imports only the layers below it:

    core < contract < instrumentation < router
         < warehouse (schema < queries < ingest | analytics | doctor)
         < pipelines | dashboards < cli

`a | b` are peers: neither imports the other. A module belongs to the layer of its package; the warehouse's
schema layer is its client, the table columns, the SQL helpers and the migrations (`routerscope.warehouse`,
`.client`, `.schema`, `.sql`, `.migrate`, `.schema_migrations`). `routerscope.sdk` is the instrumentation's
public face. Every import counts, also one deferred into a function (it hides a dependency, it does not remove
it), and one for type checkers only (under `if TYPE_CHECKING:`): no module imports itself back through others,
not even for its types (a type both sides need belongs a layer down).

Imports stand at the top of their module, where they say what it depends on. One inside a function is for a
heavy optional dependency (Dagster, Streamlit, Great Expectations, chDB, pandas, ...), a project module that
pulls one, or a command's start-up, and its line says so: `# deferred: <why>` (docs/architecture.md#imports)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGE = REPO / "routerscope"

# (rank, group): a module may import a lower rank, or its own group; a peer (same rank, other group) never.
LAYERS = {
    "core": (0, "core"),
    "contract": (1, "contract"),
    "instrumentation": (2, "instrumentation"),
    "sdk": (2, "instrumentation"),
    "router": (3, "router"),
    "warehouse": (4, "warehouse.schema"),
    "warehouse.queries": (5, "warehouse.queries"),
    "warehouse.ingest": (6, "warehouse.ingest"),
    "warehouse.analytics": (6, "warehouse.analytics"),
    "warehouse.doctor": (6, "warehouse.doctor"),
    "pipelines": (7, "pipelines"),
    "dashboards": (7, "dashboards"),
    "cli": (8, "cli"),
    "__main__": (8, "cli"),
}


def layer(module: str) -> tuple[int, str] | None:
    """The layer of a `routerscope...` module (the longest prefix in LAYERS); None outside the project."""
    parts = module.split(".")
    if parts[0] != "routerscope":
        return None
    if len(parts) == 1:
        return (0, "core")  # the package itself: its version only
    for n in range(len(parts) - 1, 0, -1):
        found = LAYERS.get(".".join(parts[1 : n + 1]))
        if found:
            return found
    raise AssertionError(f"{module}: in no layer; add its package to LAYERS (and to docs/architecture.md)")


def module_name(path: Path, root: Path = REPO) -> str:
    """The dotted name of the module at `path` (`root`: the folder holding the package)."""
    name = ".".join(path.relative_to(root).with_suffix("").parts)
    return name.removesuffix(".__init__")


def _nodes(tree: ast.AST, typing_only: bool):
    """Every node, or (typing_only=False) every node outside `if TYPE_CHECKING:` blocks (never executed)."""
    for node in ast.iter_child_nodes(tree):
        if not typing_only and isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            continue
        yield node
        yield from _nodes(node, typing_only)


def absolute(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute name a relative `from <dots><target> import …` in `module` stands for."""
    base = module.split(".") if is_package else module.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, *([target] if target else [])])


def imports_of(
    source: str, module: str, is_package: bool = False, typing_only: bool = True, modules: set[str] | None = None
) -> set[str]:
    """Every project module a module's source imports, wherever the import stands, relative imports resolved;
    `from a import b` counts `a.b` when `b` is a module (of `modules`, default the project's), else `a`.
    `typing_only=False`: the imports that run (not those for type checkers)."""
    modules = MODULES if modules is None else modules
    found = set()
    for node in _nodes(ast.parse(source), typing_only):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("routerscope")}
        elif isinstance(node, ast.ImportFrom):
            target = node.module if node.level == 0 else absolute(module, is_package, node.level, node.module)
            if not (target or "").startswith("routerscope"):
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in modules else target)
    return found


def sources(package: Path) -> list[Path]:
    return sorted(p for p in package.rglob("*.py") if "migrations" not in p.parts)


def tree_graph(package: Path, typing_only: bool = True) -> dict[str, set[str]]:
    """The import graph of the package at `package`, read from its files: module -> the project modules it
    imports (`imports_of`). The project's own graph and the checker's self-tests on planted trees both come from
    here."""
    paths = sources(package)
    names = {module_name(p, package.parent) for p in paths}
    return {
        module_name(p, package.parent): imports_of(
            p.read_text(), module_name(p, package.parent), p.name == "__init__.py", typing_only, names
        )
        for p in paths
    }


def offences(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """Each module that imports a layer above its own, or a peer's: module -> the offending imports."""
    found = {}
    for module, imported in graph.items():
        rank, group = layer(module)
        bad = sorted(m for m in imported if (lo := layer(m)) and (lo[0] > rank or (lo[0] == rank and lo[1] != group)))
        if bad:
            found[module] = bad
    return found


SOURCES = sources(PACKAGE)
MODULES = {module_name(p) for p in SOURCES}
GRAPH = tree_graph(PACKAGE)  # every import, those for type checkers too
RUNS = tree_graph(PACKAGE, typing_only=False)  # the imports that run


def test_every_module_has_a_layer():
    assert all(layer(m) for m in MODULES)
    assert layer("routerscope.warehouse.queries.metrics") == (5, "warehouse.queries")
    assert layer("routerscope.warehouse.schema") == (4, "warehouse.schema")


def test_each_layer_imports_only_the_layers_below_it():
    assert offences(GRAPH) == {}


def test_every_ordered_pair_of_layers_is_checked():
    """For every two layers, an import from one into a higher one (or into a peer) is an offence and one into
    a lower one or its own is not: the checker applies the whole order, not a sample of it."""
    for low_name, low in LAYERS.items():
        for high_name, high in LAYERS.items():
            importer, imported = f"routerscope.{low_name}.m", f"routerscope.{high_name}.m"
            offending = high[0] > low[0] or (high[0] == low[0] and high[1] != low[1])
            assert bool(offences({importer: {imported}})) == offending, (low_name, high_name)


PLANTED = [
    ("routerscope.router.engine", False, "from routerscope.warehouse import client", "routerscope.warehouse.client"),
    ("routerscope.core.names", False, "from ..warehouse import schema", "routerscope.warehouse.schema"),
    (
        "routerscope.router.sim.fleet",
        False,
        "from ...warehouse.analytics import stats",
        "routerscope.warehouse.analytics.stats",
    ),
    ("routerscope.pipelines.ingest", False, "from routerscope.dashboards import data", "routerscope.dashboards.data"),
    ("routerscope.dashboards.data", False, "from ..pipelines import resources", "routerscope.pipelines.resources"),
    (
        "routerscope.warehouse.ingest.loader",
        False,
        "def f():\n    from ..analytics import stats  # deferred: planted",
        "routerscope.warehouse.analytics.stats",
    ),
    ("routerscope.instrumentation", True, "from .. import cli", "routerscope.cli"),
    ("routerscope.contract.events", False, "import routerscope.router.engine", "routerscope.router.engine"),
]


@pytest.mark.parametrize(("module", "is_package", "source", "offending"), PLANTED)
def test_the_checker_catches_a_planted_violation(module, is_package, source, offending):
    """The checker itself, run on planted sources: an upward import, absolute or relative (one dot or several, from
    a module or a package's `__init__`), a deferred one, and one between the peers pipelines and dashboards are
    each an offence."""
    imported = imports_of(source, module, is_package)
    assert offending in imported
    assert offences({module: imported}) == {module: [offending]}


def plant(root: Path, files: dict[str, str]) -> Path:
    """A package `routerscope` under `root` holding `files` (path -> source), each folder with an `__init__.py`."""
    package = root / "routerscope"
    for name, source in files.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        for folder in [path.parent, *path.parent.parents]:
            if folder == root:
                break
            (folder / "__init__.py").touch()
        path.write_text(source)
    return package


def test_the_checker_flags_planted_imports_in_a_tree(tmp_path):
    """The checker on a planted tree, read from its files as the project's is: a relative upward import
    (`from ..warehouse import schema` in core), pipelines importing dashboards (absolute, and relative through a
    package), each flagged; a relative import within a layer and a downward one are not."""
    package = plant(
        tmp_path,
        {
            "core/names.py": "from ..warehouse import schema\n",
            "warehouse/schema.py": "from ..core import text\n",
            "core/text.py": "",
            "pipelines/ingest.py": "from routerscope.dashboards import data\n",
            "pipelines/quality.py": "from . import ingest\nfrom ..dashboards.words import WORDS\n",
            "dashboards/data.py": "from . import words\nfrom ..warehouse import schema\n",
            "dashboards/words.py": "WORDS = {}\n",
        },
    )
    graph = tree_graph(package)
    assert graph["routerscope.pipelines.quality"] == {"routerscope.pipelines.ingest", "routerscope.dashboards.words"}
    assert offences(graph) == {
        "routerscope.core.names": ["routerscope.warehouse.schema"],
        "routerscope.pipelines.ingest": ["routerscope.dashboards.data"],
        "routerscope.pipelines.quality": ["routerscope.dashboards.words"],
    }


def test_a_relative_import_within_a_layer_is_no_offence():
    imported = imports_of("from .breaker import Breaker\nfrom ..core import names", "routerscope.router.engine")
    assert imported == {"routerscope.router.breaker", "routerscope.core.names"}
    assert offences({"routerscope.router.engine": imported}) == {}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    # deep enough for the import graph, and put back after: a raised limit left in the test process let other
    # tests' deliberately deep inputs recurse past what the C stack holds
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return out


def cycles_of(graph: dict[str, set[str]]) -> list[list[str]]:
    # a module importing its own package (its __init__) is not a cycle of the code
    return _cycles({m: {i for i in imported if not m.startswith(i + ".")} for m, imported in graph.items()})


def test_no_import_cycle():
    assert cycles_of(RUNS) == []


def test_no_import_cycle_even_for_types():
    # an import for type checkers only closes a cycle too: the type both modules need belongs a module lower
    assert cycles_of(GRAPH) == []


def test_the_cycle_finder_finds_one():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_a_cycle_through_an_import_for_type_checkers_is_found(tmp_path):
    """A planted tree whose two modules import each other, one of them only under `if TYPE_CHECKING:`: no cycle
    at run time, one for the types."""
    package = plant(
        tmp_path,
        {
            "router/engine.py": "from .breaker import Breaker\n",
            "router/breaker.py": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n"
            "    from routerscope.router.engine import Router\n",
        },
    )
    assert cycles_of(tree_graph(package, typing_only=False)) == []
    assert cycles_of(tree_graph(package)) == [["routerscope.router.breaker", "routerscope.router.engine"]]


def test_the_alert_engine_and_the_cli_unit_of_work_import_without_dagster():
    """`routerscope alerts` runs the alerts job's unit of work (`routerscope.pipelines.core`) without Dagster's
    seconds of import: the engine and its delivery must not pull it in."""
    code = (
        "import sys, routerscope.pipelines.core, routerscope.warehouse.analytics.alerting;"
        " print(sorted(m for m in sys.modules if m == 'dagster'))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_the_command_line_starts_without_the_heavy_dependencies():
    """`routerscope --help` builds every command's parser, and every command module imports, without Dagster,
    Streamlit, Great Expectations, chDB, clickhouse-connect or pandas: a command that needs one imports it
    when it runs (`# deferred:`), so `--help`, `--version` and `broker status` start in a blink."""
    code = (
        "import contextlib, io, runpy, sys; sys.argv = ['routerscope', '--help']\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    runpy.run_module('routerscope', run_name='__main__')\n"
        "import routerscope.cli.demo, routerscope.cli.produce, routerscope.cli.render\n"
        "heavy = ('dagster', 'streamlit', 'great_expectations', 'chdb', 'clickhouse_connect', 'pandas')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


# -- imports at the top -----------------------------------------------------------------------------
DEFERRED = re.compile(r"#\s*deferred:\s*\S")  # `# deferred: <why>`: a deferral without a reason is none
# One check per package, so each passes on its own: the top-level modules (`routerscope`, `__main__`, `sdk`),
# then the packages, the warehouse's ingest apart from the rest of the warehouse.
IMPORT_GROUPS = (
    "routerscope",
    "core",
    "contract",
    "instrumentation",
    "router",
    "warehouse",
    "warehouse.ingest",
    "pipelines",
    "dashboards",
    "cli",
)


def import_group(path: Path) -> str:
    parts = path.relative_to(PACKAGE).parts
    if len(parts) == 1:
        return "routerscope"
    return "warehouse.ingest" if parts[:2] == ("warehouse", "ingest") else parts[0]


def inner_imports(source: str, filename: str = "<string>") -> list[tuple[int, str]]:
    """(line, text) of each `import` / `from ... import` inside a function or method body whose lines carry no
    `# deferred: <why>`. One at module level, in a class body or under a module's `if TYPE_CHECKING:` is top-level."""
    lines = source.splitlines()
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                said = any(DEFERRED.search(line) for line in lines[child.lineno - 1 : child.end_lineno])
                if in_function and not said:
                    found.append((child.lineno, lines[child.lineno - 1].strip()))
            else:
                visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(ast.parse(source, filename=filename), False)
    return found


def test_every_module_is_in_an_import_group():
    assert {import_group(p) for p in SOURCES} <= set(IMPORT_GROUPS)


@pytest.mark.parametrize("group", IMPORT_GROUPS)
def test_imports_stand_at_the_top_of_their_module(group):
    offenders = {}
    for path in SOURCES:
        if import_group(path) == group and (found := inner_imports(path.read_text(), str(path))):
            offenders[str(path.relative_to(REPO))] = [f"{line}: {text}" for line, text in found]
    report = "\n".join(f"{name}\n" + "\n".join(f"    {o}" for o in found) for name, found in offenders.items())
    assert not offenders, (
        f"{sum(map(len, offenders.values()))} import(s) inside a function without `# deferred: <why>`; "
        f"move them to the top of the module (docs/architecture.md#imports):\n{report}"
    )


def test_the_import_check_catches_an_import_inside_a_function():
    """The check itself: imports in a function or a method, in a nested block or spread over lines, are found
    unless their line says `# deferred: <why>`; the module's own, its class bodies' and its typing-only are not."""
    source = textwrap.dedent(
        """\
        import os
        from typing import TYPE_CHECKING

        if TYPE_CHECKING:
            from pathlib import Path

        def f():
            import json
            import dagster  # deferred: seconds to import
            import chdb  # deferred:
            if os.environ:
                from routerscope.core import names
            return json

        class C:
            import re

            async def m(self):
                from routerscope.core import (  # deferred: a reason on the first line counts
                    names,
                )
                from routerscope.core import (
                    errors,
                )
                return lambda: names
        """
    )
    assert inner_imports(source) == [
        (8, "import json"),
        (10, "import chdb  # deferred:"),
        (12, "from routerscope.core import names"),
        (22, "from routerscope.core import ("),
    ]
