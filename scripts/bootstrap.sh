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

# The dashboard's browser test drives Debian's chromium (never `playwright install`, which downloads
# a browser). Installed once, when running as root on a Debian-like machine.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "bootstrap: installing chromium for the dashboard's browser test" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
