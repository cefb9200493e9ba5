"""The `routerscope` command's entry point (`python -m routerscope`, and the console script of pyproject.toml).

The command line (`routerscope.cli`) stands on the [pipeline] extra. Without it, any `routerscope ...` is one
line naming the command and the extra to install, not a traceback from deep inside an import."""

from __future__ import annotations

import sys

from routerscope.core.extras import MissingExtra, missing_extra, require


def run(argv: list[str] | None = None) -> int:
    try:
        # what the command line imports first (the warehouse client, the policy file's YAML): checked before
        # anything is imported, so a bare install never gets as far as a module that needs more
        require("the `routerscope` command", "pipeline", "clickhouse_connect", "chdb", "yaml")
        from routerscope.cli import main  # deferred: needs the [pipeline] extra; without it, the line below
    except ImportError as exc:
        args = sys.argv[1:] if argv is None else argv
        words = [a for a in args[:2] if not a.startswith("-")]
        part = exc.part if isinstance(exc, MissingExtra) else "`" + " ".join(["routerscope", *words]) + "`"
        missing = missing_extra(part, exc)
        if missing is None:
            raise
        print(f"routerscope: error: {missing}", file=sys.stderr)
        return missing.exit_code
    return main(argv)


if __name__ == "__main__":
    sys.exit(run())
