#!/usr/bin/env bash
# The frameworks production apps call the SDKs through, in their own venv, against the simulator
# (tests/frameworks/): LangChain (langchain-openai, langchain-anthropic), LiteLLM, pydantic-ai and
# LlamaIndex. Kept out of the dev extra: together they pull ~700 MB and pin each other's
# dependencies (llama-index-llms-openai, for one, resolves to 0.1.x beside openai 3).
#
# Usage: scripts/frameworks.sh [pytest args...]
#
#   FIRSTTOKEN_FRAMEWORKS_VENV       the venv to create or reuse (default .venv-frameworks, git-ignored)
#   FIRSTTOKEN_FRAMEWORKS_REINSTALL  1 to reinstall even when the venv already has exactly this setup
#   PYTHON                           the interpreter that makes the venv (default python3)
#
# A cold install takes about 80 s here (pip, no cache); a venv already set up for the same
# pyproject.toml and pins is reused without calling pip, so a warm run is just the tests (~30 s).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${FIRSTTOKEN_FRAMEWORKS_VENV:-.venv-frameworks}
# The versions the tests were written against; raise them together and rerun.
PINS=(
    "langchain-openai==1.7.4"
    "langchain-anthropic==1.7.10"
    "litellm==1.110.2"
    "pydantic-ai-slim[openai,anthropic]==2.68.0"
    "llama-index-llms-openai==0.1.27"
    "pytest>=8"
    "pytest-asyncio>=0.24"
)

export PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1

# shellcheck source=scripts/venv_lib.sh
. scripts/venv_lib.sh
make_venv
PY="$VENV/bin/python"

stamp=.firsttoken-frameworks
if [ "${FIRSTTOKEN_FRAMEWORKS_REINSTALL:-0}" = 1 ] || ! venv_is_set_up "$stamp"; then
    rm -f "$VENV/$stamp"
    echo "==> installing firsttoken[openai,anthropic] and ${PINS[*]} into $VENV"
    started=$(date +%s)
    "$PY" -m pip install --quiet -e '.[openai,anthropic]' "${PINS[@]}"
    "$PY" -m pip check
    echo "==> installed in $(($(date +%s) - started)) s"
    venv_set_up "$stamp"
fi

echo "==> pytest (frameworks)"
FIRSTTOKEN_FRAMEWORKS=required exec "$PY" -m pytest -q -p no:cacheprovider tests/frameworks "$@"
