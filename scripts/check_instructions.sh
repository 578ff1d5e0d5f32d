#!/usr/bin/env bash
# firsttoken's own instructions per call, counted under valgrind's callgrind (deterministic), against
# the number committed in benchmarks/instruction_budget.json: fails when they grew by more than 5 %.
# Usage: scripts/check_instructions.sh [venv]      (installs Debian's valgrind when it is missing)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-${FIRSTTOKEN_VENV:-.venv}}

if ! command -v valgrind >/dev/null 2>&1; then
    echo "==> installing Debian's valgrind (instruction counts)"
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends valgrind >/dev/null
fi
"$VENV/bin/python" benchmarks/instruction_budget.py
