#!/usr/bin/env bash
# Creates .venv (if missing) and installs the project with the exact versions of constraints.txt.
# Re-runs the install only when pyproject.toml or constraints.txt changed since the last one.
# llama-cpp-python builds from source the first time (~5 min on 2 cores); pip caches the wheel.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    echo "bootstrap: creating .venv with $($PYTHON --version)" >&2
    "$PYTHON" -m venv .venv
fi

stamp=.venv/.routerscope-installed
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "bootstrap: installing pinned dependencies into .venv (first time: several minutes)" >&2
    .venv/bin/python -m pip install --quiet --disable-pip-version-check "$(grep -E '^pip==' constraints.txt)"
    CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
        .venv/bin/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[dev]"
    echo "$want" > "$stamp"
fi
