#!/usr/bin/env bash
# Creates .venv (if missing) and installs the project with the exact versions of constraints.txt.
# Re-runs the install only when pyproject.toml, constraints.txt or the model build flags changed.
#
# llama-cpp-python compiles from source (~5 min on 2 cores). It is built for a *portable* x86-64
# target: GGML_NATIVE=OFF with AVX2/FMA/F16C, no AVX-512, no AMX. A native build (the package's
# default) compiles for the build CPU; on a CPU with AMX every generation then segfaults inside
# ggml_backend_amx_mul_mat where the tiles are not usable, and such a wheel copied to an older CPU
# dies of SIGILL. pip caches wheels by version, not by build flags, so pip's cache never sees this
# package: the wheel is built with --no-cache-dir into a directory named after its flags
# (ROUTERSCOPE_WHEEL_CACHE, default ~/.cache/routerscope/wheels) and installed from there.
#
# ROUTERSCOPE_LLAMA_NATIVE=1 builds for this machine's CPU instead (faster on CPUs with AVX-512;
# never copy that venv or wheel to another machine). ROUTERSCOPE_LLAMA_CMAKE_ARGS overrides the flags.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    echo "bootstrap: creating .venv with $($PYTHON --version)" >&2
    "$PYTHON" -m venv .venv
fi

PORTABLE_FLAGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
if [ "${ROUTERSCOPE_LLAMA_NATIVE:-0}" = 1 ]; then
    llama_flags="-DGGML_NATIVE=ON"
    # a native wheel belongs to this CPU only: its cache key names the CPU model
    flavour="native-$(grep -m1 'model name' /proc/cpuinfo | sha256sum | cut -c1-12)"
else
    llama_flags="${ROUTERSCOPE_LLAMA_CMAKE_ARGS:-$PORTABLE_FLAGS}"
    flavour="portable"
fi
llama_pin=$(grep -iE '^llama[-_]cpp[-_]python==' constraints.txt)
llama_version=${llama_pin#*==}
flags_key=$(printf '%s' "$llama_version $llama_flags" | sha256sum | cut -c1-16)

stamp=.venv/.routerscope-installed
want=$(cat pyproject.toml constraints.txt <(printf '%s' "$llama_flags") | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "bootstrap: installing pinned dependencies into .venv (first time: several minutes)" >&2
    .venv/bin/python -m pip install --quiet --disable-pip-version-check "$(grep -E '^pip==' constraints.txt)"

    wheels="${ROUTERSCOPE_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/routerscope/wheels}/llama-cpp-python-$llama_version-$flavour-$flags_key"
    if ! ls "$wheels"/llama_cpp_python-*.whl >/dev/null 2>&1; then
        echo "bootstrap: compiling llama-cpp-python $llama_version ($flavour build, ~5 min on 2 cores)" >&2
        mkdir -p "$wheels.tmp"
        CMAKE_ARGS="$llama_flags" FORCE_CMAKE=1 \
        CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
            .venv/bin/python -m pip wheel --quiet --disable-pip-version-check --no-cache-dir --no-deps \
                --no-binary llama-cpp-python -c constraints.txt -w "$wheels.tmp" "$llama_pin"
        rm -rf "$wheels" && mv "$wheels.tmp" "$wheels"
    fi
    # --force-reinstall: a venv that holds a wheel built with other flags gets this one
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall \
        --no-index --find-links "$wheels" "$llama_pin"
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[all,dev]"
    echo "$want" > "$stamp"
fi

# The dashboard's browser test drives Debian's chromium (never `playwright install`, which downloads
# a browser). Installed once, when running as root on a Debian-like machine.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "bootstrap: installing chromium for the dashboard's browser test" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi

# The Prometheus rule tests run Debian's promtool, and the Alertmanager test its alertmanager (packages
# `prometheus` and `prometheus-alertmanager`; their services are not started here). Installed once, the way
# chromium is; a test that needs them and does not find them fails saying so.
if { ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus-alertmanager >/dev/null 2>&1; } \
    && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "bootstrap: installing prometheus and prometheus-alertmanager for the rule and alert delivery tests" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        prometheus prometheus-alertmanager >/dev/null
fi
