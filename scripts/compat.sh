#!/usr/bin/env bash
# The SDK-facing tests against the OLDEST openai and anthropic SDKs firsttoken declares it supports.
#
# Usage: scripts/compat.sh [pytest args...]
#
#   FIRSTTOKEN_COMPAT_VENV       the venv to create or reuse (default .venv-compat, git-ignored)
#   FIRSTTOKEN_COMPAT_OPENAI     the openai version to pin (default: pyproject.toml's lower bound, 3.0)
#   FIRSTTOKEN_COMPAT_ANTHROPIC  the anthropic version to pin (default: pyproject.toml's lower bound, 2.0)
#   FIRSTTOKEN_COMPAT_REINSTALL  1 to reinstall even when the venv already has exactly this setup
#   PYTHON                       the interpreter that makes the venv (default python3)
#
# The default pins are read from pyproject.toml's extras (`openai = ["openai>=X,<Y"]`), so raising
# a floor there is what this script tests; SUPPORTED in providers/*.py must say the same.
# Unattended (no prompts), exits non-zero when anything fails. A venv already set up for the same
# pyproject.toml and versions is reused without calling pip, so a warm run is just the tests.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${FIRSTTOKEN_COMPAT_VENV:-.venv-compat}

# The ">=" bound of an extra that names one SDK, e.g. openai = ["openai>=3.0,<4"] -> 3.0.
lower_bound() {
    local found
    found=$(sed -n "s/^$1 = \[\"$1>=\([^,\"]*\).*/\1/p" pyproject.toml)
    if [ -z "$found" ]; then
        echo "compat: no '$1 = [\"$1>=...\"]' extra in pyproject.toml; set FIRSTTOKEN_COMPAT_${1^^}" >&2
        return 1
    fi
    echo "$found"
}
OPENAI_VERSION=${FIRSTTOKEN_COMPAT_OPENAI:-$(lower_bound openai)}
ANTHROPIC_VERSION=${FIRSTTOKEN_COMPAT_ANTHROPIC:-$(lower_bound anthropic)}
# google-genai is in the dev extra only (measured on the wire, not patched): its lower bound there.
GENAI_VERSION=${FIRSTTOKEN_COMPAT_GENAI:-$(sed -n 's/.*"google-genai>=\([^",]*\)".*/\1/p' pyproject.toml)}
TESTS=(
    tests/test_openai_apis.py
    tests/test_stream_endings.py
    tests/test_anthropic.py
    tests/test_openai_fidelity.py
    tests/test_wire.py
    tests/test_anthropic_tracing.py
    tests/test_gemini.py
)

export PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1 DEBIAN_FRONTEND=noninteractive

make_venv() {
    "$PYTHON" -m venv "$VENV" && return 0
    # Debian's python3 has no ensurepip until python3-venv (python3.X-venv) is installed.
    rm -rf "$VENV"
    command -v apt-get >/dev/null 2>&1 || return 1
    local sudo="" pyver
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    pyver=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    echo "==> installing Debian's python${pyver}-venv"
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends "python${pyver}-venv" >/dev/null \
        || $sudo apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
    "$PYTHON" -m venv "$VENV"
}

if [ ! -x "$VENV/bin/python" ]; then
    echo "==> creating $VENV"
    make_venv
fi
PY="$VENV/bin/python"

# What the venv was set up for: this checkout, its declared dependencies, the pins, the interpreter.
want=$(
    {
        pwd
        sha256sum pyproject.toml
        echo "openai==$OPENAI_VERSION anthropic==$ANTHROPIC_VERSION google-genai==$GENAI_VERSION"
        "$PY" -c 'import sys; print(sys.version)'
    } | sha256sum | cut -d' ' -f1
)
stamp="$VENV/.firsttoken-compat"
if [ "${FIRSTTOKEN_COMPAT_REINSTALL:-0}" = 1 ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    rm -f "$stamp"
    echo "==> installing firsttoken[dev] into $VENV"
    "$PY" -m pip install --quiet --upgrade pip
    "$PY" -m pip install --quiet -e '.[dev]'
    echo "==> pinning openai==$OPENAI_VERSION anthropic==$ANTHROPIC_VERSION google-genai==$GENAI_VERSION"
    "$PY" -m pip install --quiet "openai==$OPENAI_VERSION" "anthropic==$ANTHROPIC_VERSION" \
        "google-genai==$GENAI_VERSION"
    "$PY" -m pip check
    echo "$want" >"$stamp"
fi

# Fail loudly if anything (a stale venv, a resolver surprise) left other versions in place.
"$PY" - "$OPENAI_VERSION" "$ANTHROPIC_VERSION" "$GENAI_VERSION" <<'EOF'
import sys
from importlib import metadata

from packaging.version import Version

want = {"openai": sys.argv[1], "anthropic": sys.argv[2], "google-genai": sys.argv[3]}
for dist in ("openai", "anthropic", "google-genai", "httpx", "httpx2", "pydantic", "pytest"):
    print(f"    {dist:10} {metadata.version(dist)}")
bad = {d: metadata.version(d) for d, v in want.items() if Version(metadata.version(d)) != Version(v)}
if bad:
    sys.exit(f"compat: expected {want}, venv has {bad}; rerun with FIRSTTOKEN_COMPAT_REINSTALL=1")
EOF

echo "==> pytest (oldest SDKs)"
exec "$PY" -m pytest -q "${TESTS[@]}" "$@"
