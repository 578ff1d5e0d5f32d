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

# The builds the real-stack and real-server tests need (the Collector, Prometheus, Alertmanager,
# Jaeger, then Thanos, from Go modules; llama.cpp's llama-server) take ~30-40 minutes cold on 2 cores,
# and most of the suite does not need them: they run in the background, under `nice`, one after the
# other, while lint, types, the main pytest run and the other venvs' tests go on. The stack tests start
# as soon as the four compose components are built (Thanos still building), the Thanos tests once it
# is, the real-server tests once llama-server is. Cached in ~/.cache/firsttoken/, so a warm run starts
# them and finds everything built.
STACK_LOG=$(mktemp "${TMPDIR:-/tmp}/firsttoken-stack-build.XXXXXX")
LLAMA_LOG=$(mktemp "${TMPDIR:-/tmp}/firsttoken-llama-build.XXXXXX")
BUILD_STARTED=$(date +%s)
scripts/stack/build.sh --for-tests >"$STACK_LOG" 2>&1 &
STACK_PID=$!
(
    # One build at a time: both use every core. The stack's is a sibling, so poll it.
    while kill -0 "$STACK_PID" 2>/dev/null; do sleep 1; done
    scripts/llama_server.sh --for-tests
) >"$LLAMA_LOG" 2>&1 &
LLAMA_PID=$!
echo "==> building the stack (pid $STACK_PID, log $STACK_LOG), then llama-server (pid $LLAMA_PID, log $LLAMA_LOG), in the background"

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
# Waits for one background build, once, and says what it gave: wait_for_build stack|thanos|llama
# (stack: the four compose components, while the same background job goes on with Thanos).
STACK_WAITED=""
wait_for_build() {
    local pid log waited
    waited=$(date +%s)
    if [ "$1" = stack ]; then
        pid="" log=$STACK_LOG
        if [ -z "$STACK_WAITED" ] && [ -n "${STACK_PID:-}" ]; then
            while kill -0 "$STACK_PID" 2>/dev/null && ! scripts/stack/build.sh --check; do sleep 2; done
            grep -v '^==> stack: thanos ' "$log" || true
            echo "==> stack build (without Thanos) done $(($(date +%s) - BUILD_STARTED)) s after the builds started (waited $(($(date +%s) - waited)) s for it)"
        fi
        STACK_WAITED=1
    elif [ "$1" = thanos ]; then
        pid=${STACK_PID:-} log=$STACK_LOG
        STACK_PID=""
    else
        pid=${LLAMA_PID:-} log=$LLAMA_LOG
        LLAMA_PID=""
    fi
    if [ -n "$pid" ]; then
        wait "$pid" || true
        if [ "$1" = thanos ]; then grep '^==> stack: thanos ' "$log" || true; else cat "$log"; fi
        echo "==> $1 build done $(($(date +%s) - BUILD_STARTED)) s after the builds started (waited $(($(date +%s) - waited)) s for it)"
    fi
    if [ "$1" = thanos ]; then
        # tests/stack/test_stack_thanos*.py: required when Thanos is built too, and always in CI.
        THANOS_STACK=""
        if [ "${CI:-}" = "true" ] || { scripts/stack/build.sh --check && scripts/stack/build.sh thanos --check; }; then
            THANOS_STACK=required
        fi
    elif [ "$1" = stack ]; then
        # tests/stack run the Collector, Prometheus, Alertmanager and Jaeger that docker-compose.yml
        # pins, built once from Go modules into a cache outside the repo. Required when built, and
        # always in CI (a failed build then fails those tests with one line saying which and why).
        if [ "${CI:-}" = "true" ] || scripts/stack/build.sh --check; then export FIRSTTOKEN_STACK=required; fi
    else
        # tests/real_server run against llama.cpp's llama-server, built once into a cache outside the repo.
        if scripts/llama_server.sh --check; then export FIRSTTOKEN_REAL_SERVER=required; fi
    fi
}

run_step ruff "$VENV/bin/ruff" check src tests benchmarks scripts examples
run_step ruff-format "$VENV/bin/ruff" format --check src tests benchmarks scripts examples
run_step mypy "$VENV/bin/mypy"
if [ $# -gt 0 ]; then
    # Pytest arguments given: one run of what they select, once the builds are there.
    wait_for_build stack
    wait_for_build thanos
    wait_for_build llama
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
    # The real stack (Collector, Prometheus, Alertmanager, Jaeger), while Thanos, then llama-server, build.
    wait_for_build stack
    run_step pytest-stack "$VENV/bin/python" -m pytest -q tests/stack --ignore-glob='tests/stack/test_stack_thanos*'
    # Past one Prometheus: the stack with Thanos (docs/stack-tests.md), once Thanos is built.
    wait_for_build thanos
    run_step pytest-stack-thanos env FIRSTTOKEN_STACK="$THANOS_STACK" "$VENV/bin/python" -m pytest -q tests/stack/test_stack_thanos*.py
    # The real inference server.
    wait_for_build llama
    run_step pytest-real-server "$VENV/bin/python" -m pytest -q tests/real_server
fi
wait_for_build stack
wait_for_build thanos
wait_for_build llama
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
