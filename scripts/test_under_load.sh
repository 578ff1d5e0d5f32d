#!/usr/bin/env bash
# The test command on a busy machine: scripts/test.sh run RUNS times in a row (default 5) while one
# busy-loop process per core keeps every core at 100 %. Stops at the first failing run.
# Usage: scripts/test_under_load.sh [RUNS] [pytest args for test.sh...]
# Each run's output goes to $FIRSTTOKEN_LOAD_LOGS (default .load-logs/) as run-N.log.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${1:-5}
shift || true
case "$RUNS" in
    '' | *[!0-9]*) echo "test_under_load.sh: RUNS must be a whole number, got '$RUNS'" >&2; exit 2 ;;
esac
LOGS=${FIRSTTOKEN_LOAD_LOGS:-.load-logs}
mkdir -p "$LOGS"

CORES=$(nproc)
BURNERS=()
stop_burners() {
    if [ ${#BURNERS[@]} -gt 0 ]; then kill "${BURNERS[@]}" 2>/dev/null || true; fi
}
trap stop_burners EXIT
for _ in $(seq "$CORES"); do
    # A process of its own per core, at the tests' priority: nothing yields to the test run.
    sh -c 'while :; do :; done' &
    BURNERS+=($!)
done
echo "==> under load: ${CORES} busy-loop processes (pids ${BURNERS[*]}), ${RUNS} runs of scripts/test.sh"

for run in $(seq "$RUNS"); do
    log="$LOGS/run-$run.log"
    started=$(date +%s)
    echo "==> run $run/$RUNS (load average $(cut -d' ' -f1-3 /proc/loadavg)), log: $log"
    if scripts/test.sh "$@" >"$log" 2>&1; then
        echo "    passed in $(($(date +%s) - started)) s: $(tail -n 1 "$log")"
    else
        echo "    FAILED after $(($(date +%s) - started)) s: $(tail -n 1 "$log")"
        grep -E "^(FAILED|ERROR) |==> .* FAILED" "$log" | sed 's/^/    /' || true
        echo "==> under load: run $run of $RUNS failed"
        exit 1
    fi
done
echo "==> under load: all $RUNS runs of scripts/test.sh passed"
