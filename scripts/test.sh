#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what it needs, then lint, types and tests.
# Usage: scripts/test.sh [pytest args for the main run...]
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${FIRSTTOKEN_VENV:-.venv}

if [ ! -x "$VENV/bin/python" ]; then
    echo "==> creating $VENV"
    "$PYTHON" -m venv "$VENV"
fi
echo "==> installing firsttoken[dev] into $VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e '.[dev]'

# Dashboards and alert rules are tested against a real Prometheus and promtool (Debian's package).
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1 \
    || ! command -v amtool >/dev/null 2>&1 || ! command -v docker-compose >/dev/null 2>&1; then
    echo "==> installing Debian's prometheus, alertmanager and docker-compose (promtool, amtool, a real Prometheus, the Compose schema)"
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
        prometheus prometheus-alertmanager docker-compose >/dev/null
    # The packages may start their own services; the tests run their own instances on free ports.
    for service in prometheus prometheus-alertmanager; do
        ($SUDO service "$service" stop || true) >/dev/null 2>&1
    done
fi

# A Celery worker's exit is tested with a real broker (Debian's redis-server, run by the test on a free port).
if ! command -v redis-server >/dev/null 2>&1; then
    echo "==> installing Debian's redis-server (the broker for the Celery exit test)"
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends redis-server >/dev/null
    ($SUDO service redis-server stop || true) >/dev/null 2>&1
fi

# The bench HTML report is opened in headless Chromium (Debian's package).
scripts/install_chromium.sh

# Every step below runs even when an earlier one failed; the script ends with one summary line and
# exits non-zero when any step failed. Add a step with: run_step NAME COMMAND [ARGS...]
PASSED=()
FAILED=()
run_step() {
    local name=$1
    shift
    echo "==> $name"
    if "$@"; then
        PASSED+=("$name")
    else
        echo "==> $name FAILED (exit $?)"
        FAILED+=("$name")
    fi
}

run_step ruff "$VENV/bin/ruff" check src tests benchmarks scripts examples
run_step ruff-format "$VENV/bin/ruff" format --check src tests benchmarks scripts examples
run_step mypy "$VENV/bin/mypy"
# tests/real_server run against llama.cpp's llama-server, built once into a cache outside the repo.
scripts/llama_server.sh --for-tests
if scripts/llama_server.sh --check; then export FIRSTTOKEN_REAL_SERVER=required; fi
# tests/stack/test_stack_real.py run the Collector, Prometheus and Alertmanager that docker-compose.yml
# pins, built once from Go modules into a cache outside the repo. Required when built, and always in
# CI (a failed build then fails those tests with one line saying which build and why).
scripts/stack/build.sh --for-tests
if [ "${CI:-}" = "true" ] || scripts/stack/build.sh --check; then export FIRSTTOKEN_STACK=required; fi
run_step pytest "$VENV/bin/python" -m pytest -q "$@"
# The SDK-facing tests again, on the oldest openai and anthropic SDKs firsttoken supports.
run_step pytest-oldest-sdks scripts/compat.sh
# LangChain, LiteLLM, pydantic-ai and LlamaIndex over the SDKs, in their own venv.
run_step pytest-frameworks scripts/frameworks.sh
# firsttoken's own instructions per call under callgrind, against benchmarks/instruction_budget.json.
run_step instruction-budget scripts/check_instructions.sh "$VENV"
# The release: wheel and sdist built and checked; the installed wheel tested on every Python 3.10-3.13 found.
run_step release scripts/test_release.sh

if [ ${#FAILED[@]} -eq 0 ]; then
    echo "==> test.sh: all ${#PASSED[@]} steps passed (${PASSED[*]})"
else
    echo "==> test.sh: FAILED ${FAILED[*]}; passed ${PASSED[*]:-nothing}"
    exit 1
fi
