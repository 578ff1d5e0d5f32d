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

# The bench HTML report is opened in headless Chromium (Debian's package).
scripts/install_chromium.sh

echo "==> ruff"
"$VENV/bin/ruff" check src tests benchmarks scripts
"$VENV/bin/ruff" format --check src tests benchmarks scripts
echo "==> mypy"
"$VENV/bin/mypy"
echo "==> pytest"
"$VENV/bin/python" -m pytest -q "$@"
echo "==> the SDK-facing tests again, on the oldest openai and anthropic SDKs firsttoken supports"
scripts/compat.sh
echo "==> the release: wheel and sdist built and checked; the installed wheel tested on every Python 3.10-3.13 found"
scripts/test_release.sh
