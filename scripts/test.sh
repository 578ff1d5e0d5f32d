#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what it needs, then lint, types and tests.
# Usage: scripts/test.sh [pytest args for the main run...]
set -euo pipefail
cd "$(dirname "$0")/.."
TEST_STARTED=$(date +%s)

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

# The builds the real-server and real-stack tests need (llama.cpp's llama-server; the Collector,
# Prometheus, Alertmanager and Jaeger from Go modules) take ~20-30 minutes cold on 2 cores, and most
# of the suite does not need them: they run in the background, under `nice`, while lint, types, the
# main pytest run and the other venvs' tests go on, and the tests that need them run after. Cached in
# ~/.cache/firsttoken/, so a warm run starts them and finds everything built.
BUILD_LOG=$(mktemp "${TMPDIR:-/tmp}/firsttoken-builds.XXXXXX")
(
    scripts/stack/build.sh --for-tests
    scripts/llama_server.sh --for-tests
) >"$BUILD_LOG" 2>&1 &
BUILD_PID=$!
BUILD_STARTED=$(date +%s)
echo "==> building the stack and llama-server in the background (pid $BUILD_PID, log $BUILD_LOG)"

# Every step below runs even when an earlier one failed; the script ends with one summary line and
# exits non-zero when any step failed. Add a step with: run_step NAME COMMAND [ARGS...]
PASSED=()
FAILED=()
run_step() {
    local name=$1 started rc=0
    shift
    echo "==> $name"
    started=$(date +%s)
    "$@" || rc=$?
    if [ "$rc" -eq 0 ]; then
        PASSED+=("$name")
        echo "==> $name passed in $(($(date +%s) - started)) s"
    else
        echo "==> $name FAILED (exit $rc) after $(($(date +%s) - started)) s"
        FAILED+=("$name")
    fi
}
# Waits for the background builds, once, and says what they gave.
wait_for_builds() {
    if [ -n "${BUILD_PID:-}" ]; then
        local waited
        waited=$(date +%s)
        wait "$BUILD_PID" || true
        BUILD_PID=""
        cat "$BUILD_LOG"
        echo "==> builds done $(($(date +%s) - BUILD_STARTED)) s after they started (waited $(($(date +%s) - waited)) s for them)"
    fi
    # tests/real_server run against llama.cpp's llama-server, built once into a cache outside the repo.
    if scripts/llama_server.sh --check; then export FIRSTTOKEN_REAL_SERVER=required; fi
    # tests/stack run the Collector, Prometheus, Alertmanager and Jaeger that docker-compose.yml pins,
    # built once from Go modules into a cache outside the repo. Required when built, and always in CI
    # (a failed build then fails those tests with one line saying which build and why).
    if [ "${CI:-}" = "true" ] || scripts/stack/build.sh --check; then export FIRSTTOKEN_STACK=required; fi
}

run_step ruff "$VENV/bin/ruff" check src tests benchmarks scripts examples
run_step ruff-format "$VENV/bin/ruff" format --check src tests benchmarks scripts examples
run_step mypy "$VENV/bin/mypy"
if [ $# -gt 0 ]; then
    # Pytest arguments given: one run of what they select, once the builds are there.
    wait_for_builds
    run_step pytest "$VENV/bin/python" -m pytest -q "$@"
else
    # Everything but the tests that need the builds, while they build.
    run_step pytest "$VENV/bin/python" -m pytest -q --ignore=tests/stack --ignore=tests/real_server
fi
# The SDK-facing tests again, on the oldest openai and anthropic SDKs firsttoken supports.
run_step pytest-oldest-sdks scripts/compat.sh
# LangChain, LiteLLM, pydantic-ai and LlamaIndex over the SDKs, in their own venv.
run_step pytest-frameworks scripts/frameworks.sh
# anthropic's own OpenTelemetry tests (from its sdist), plain and with firsttoken, the SDK's tracing
# asked for in each: a test that passes plain and fails with firsttoken fails the step unless listed.
run_step anthropic-own-tests "$VENV/bin/python" scripts/anthropic_own_tests/run.py
if [ $# -eq 0 ]; then
    wait_for_builds
    # The real stack (tests/stack) and the real inference server (tests/real_server).
    run_step pytest-stack "$VENV/bin/python" -m pytest -q tests/stack tests/real_server
fi
wait_for_builds
# firsttoken's own instructions per call under callgrind, against benchmarks/instruction_budget.json
# (after the builds: on a quiet machine).
run_step instruction-budget scripts/check_instructions.sh "$VENV"
# The release: wheel and sdist built and checked; the installed wheel tested on every Python 3.10-3.13 found.
run_step release scripts/test_release.sh

if [ ${#FAILED[@]} -eq 0 ]; then
    echo "==> test.sh: all ${#PASSED[@]} steps passed (${PASSED[*]}) in $(($(date +%s) - TEST_STARTED)) s"
else
    echo "==> test.sh: FAILED ${FAILED[*]}; passed ${PASSED[*]:-nothing}; in $(($(date +%s) - TEST_STARTED)) s"
    exit 1
fi
