#!/usr/bin/env bash
# Debian's chromium, for the test that opens firsttoken bench's HTML report in a headless browser
# (tests/test_bench_html.py). Does nothing when a chromium is already on the PATH.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
    exit 0
fi
echo "==> installing Debian's chromium (the HTML report test opens the report in it)"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
for attempt in 1 2 3 4 5; do
    # Another apt may hold the dpkg lock for a while: wait and retry.
    if $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
        --no-install-recommends chromium >/dev/null; then
        exit 0
    fi
    echo "    apt-get failed (attempt $attempt); retrying in 20 s"
    sleep 20
done
echo "could not install chromium" >&2
exit 1
