#!/usr/bin/env bash
# The SDK-facing tests against the OLDEST SDKs firsttoken declares it supports: openai and anthropic
# (patched), and google-genai, cohere, mistralai and groq (measured on the wire, not patched);
# aiobotocore (its botocore pin is older than the dev extra's boto3 bound); and
# tests/test_coexist.py's openai-v2 case, which needs the util-genai 0.x the main venv cannot hold.
#
# Usage: scripts/compat.sh [pytest args...]
#
#   FIRSTTOKEN_COMPAT_VENV       the venv to create or reuse (default .venv-compat, git-ignored)
#   FIRSTTOKEN_COMPAT_OPENAI     the openai version to pin (default: pyproject.toml's lower bound, 3.0)
#   FIRSTTOKEN_COMPAT_ANTHROPIC  the anthropic version to pin (default: pyproject.toml's lower bound, 2.0)
#   FIRSTTOKEN_COMPAT_GENAI, _COHERE, _MISTRALAI, _GROQ
#                                the google-genai, cohere, mistralai and groq versions to pin (default:
#                                their lower bounds in pyproject.toml: the gemini extra, the dev extra)
#   FIRSTTOKEN_COMPAT_AIOBOTOCORE
#                                the aiobotocore version to install, with the boto3 it allows (default
#                                3.10.0): it pins botocore older than the dev extra's boto3 bound, so
#                                its tests run here, not in the main venv
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

# An SDK's ">=" bound, the first in pyproject.toml's extras: openai = ["openai>=3.0,<4"] -> 3.0, and
# "cohere>=5.9" in the dev extra -> 5.9. The second argument names its FIRSTTOKEN_COMPAT_ variable.
lower_bound() {
    local found
    found=$(sed -n "s/.*\"$1>=\([^\",]*\)[\",].*/\1/p" pyproject.toml | head -n 1)
    if [ -z "$found" ]; then
        echo "compat: no '\"$1>=...\"' in pyproject.toml's extras; set FIRSTTOKEN_COMPAT_$2" >&2
        return 1
    fi
    echo "$found"
}
OPENAI_VERSION=${FIRSTTOKEN_COMPAT_OPENAI:-$(lower_bound openai OPENAI)}
ANTHROPIC_VERSION=${FIRSTTOKEN_COMPAT_ANTHROPIC:-$(lower_bound anthropic ANTHROPIC)}
# The SDKs measured on the wire, not patched: their bounds in the gemini and dev extras.
GENAI_VERSION=${FIRSTTOKEN_COMPAT_GENAI:-$(lower_bound google-genai GENAI)}
COHERE_VERSION=${FIRSTTOKEN_COMPAT_COHERE:-$(lower_bound cohere COHERE)}
MISTRALAI_VERSION=${FIRSTTOKEN_COMPAT_MISTRALAI:-$(lower_bound mistralai MISTRALAI)}
GROQ_VERSION=${FIRSTTOKEN_COMPAT_GROQ:-$(lower_bound groq GROQ)}
AIOBOTOCORE_VERSION=${FIRSTTOKEN_COMPAT_AIOBOTOCORE:-3.10.0}
PINS=(
    "openai==$OPENAI_VERSION"
    "anthropic==$ANTHROPIC_VERSION"
    "google-genai==$GENAI_VERSION"
    "cohere==$COHERE_VERSION"
    "mistralai==$MISTRALAI_VERSION"
    "groq==$GROQ_VERSION"
    # openai-v2, the official openai instrumentation before opentelemetry-instrumentation-genai-openai,
    # still noticed by firsttoken: it needs util-genai 0.x, the dev extra's official ones 1.x, so it is
    # tested here, with them taken out (tests/test_coexist.py).
    "opentelemetry-instrumentation-openai-v2==2.4b0"
    "opentelemetry-util-genai==0.4b0"
    # aiobotocore (async boto): installed below with its boto3 extra, which takes boto3 and botocore
    # down to the releases it allows.
    "aiobotocore==$AIOBOTOCORE_VERSION"
)
# The dev extra's packages that need what PINS replaces.
UNPINNED=(opentelemetry-instrumentation-genai-openai opentelemetry-instrumentation-genai-anthropic opentelemetry-instrumentation-genai-bedrock)
TESTS=(
    tests/test_openai_apis.py
    tests/test_stream_endings.py
    tests/test_anthropic.py
    tests/test_openai_fidelity.py
    tests/test_wire.py
    tests/test_anthropic_tracing.py
    tests/test_anthropic_own_tracing.py
    tests/test_terminal_event.py
    tests/test_gemini.py
    tests/test_more_sdks.py
    tests/test_sdk_recordings.py
    tests/test_realtime.py
    tests/test_gemini_live.py
    tests/test_aiobotocore_bedrock.py
    tests/test_coexist.py::test_openai_v2_is_noticed_once_whether_active_before_or_after
)

export PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1 DEBIAN_FRONTEND=noninteractive

# shellcheck source=scripts/venv_lib.sh
. scripts/venv_lib.sh
make_venv
PY="$VENV/bin/python"

stamp=.firsttoken-compat
if [ "${FIRSTTOKEN_COMPAT_REINSTALL:-0}" = 1 ] || ! venv_is_set_up "$stamp"; then
    rm -f "$VENV/$stamp"
    echo "==> installing firsttoken[dev] into $VENV"
    "$PY" -m pip install --quiet --upgrade pip
    "$PY" -m pip install --quiet -e '.[dev]'
    echo "==> pinning ${PINS[*]}"
    "$PY" -m pip uninstall --quiet --yes "${UNPINNED[@]}"
    "$PY" -m pip install --quiet "${PINS[@]}" "aiobotocore[boto3]==$AIOBOTOCORE_VERSION"
    "$PY" -m pip check
    venv_set_up "$stamp"
fi

# Fail loudly if anything (a stale venv, a resolver surprise) left other versions in place.
"$PY" - "${PINS[@]}" <<'EOF'
import sys
from importlib import metadata

from packaging.version import Version

want = dict(pin.split("==") for pin in sys.argv[1:])
for dist in (*want, "httpx", "httpx2", "pydantic", "pytest"):
    print(f"    {dist:12} {metadata.version(dist)}")
bad = {d: metadata.version(d) for d, v in want.items() if Version(metadata.version(d)) != Version(v)}
if bad:
    sys.exit(f"compat: expected {want}, venv has {bad}; rerun with FIRSTTOKEN_COMPAT_REINSTALL=1")
EOF

echo "==> pytest (oldest SDKs)"
exec "$PY" -m pytest -q "${TESTS[@]}" "$@"
