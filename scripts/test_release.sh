#!/usr/bin/env bash
# What a release publishes, tested as users get it:
#   1. build the wheel and sdist with the standard frontend (`python -m build`);
#   2. check their metadata (`twine check --strict`, then scripts/check_dist.py: PEP 639 license
#      fields, LICENSE inside both, version, Python requirement, what the wheel holds);
#   3. install the wheel (not editable) into a fresh venv and run the SDK-facing tests and
#      `firsttoken demo` from it -- the tests must import the installed package, never src/;
#   4. the SDK-facing tests on every supported Python found on the machine (3.10-3.13), the
#      wheel installed in one venv per Python, two at a time; says which Pythons were found.
#
# Usage: scripts/test_release.sh
#   PYTHON                      the interpreter that builds and runs step 3 (default python3)
#   FIRSTTOKEN_RELEASE_DIR      scratch directory (default .release, git-ignored)
#   FIRSTTOKEN_RELEASE_PYTHONS  the versions step 4 looks for (default "3.10 3.11 3.12 3.13")
#   FIRSTTOKEN_RELEASE_JOBS     Pythons tested at once in step 4 (default 2)
# Exits non-zero when anything fails, or when a supported Python is missing and
# FIRSTTOKEN_RELEASE_REQUIRE_ALL=1. pip's cache is reused; the venvs are made fresh each run.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
WORK=${FIRSTTOKEN_RELEASE_DIR:-.release}
VERSIONS=${FIRSTTOKEN_RELEASE_PYTHONS:-3.10 3.11 3.12 3.13}
JOBS=${FIRSTTOKEN_RELEASE_JOBS:-2}
export PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1

# The tests that drive the real SDKs through firsttoken (all of them in step 3).
SDK_TESTS=(
    tests/test_openai_apis.py
    tests/test_openai_fidelity.py
    tests/test_anthropic.py
    tests/test_stream_endings.py
    tests/test_wire.py
    tests/test_app.py
    tests/test_privacy.py
    tests/test_import_hooks.py
)
# Timing fidelity (firsttoken's TTFT against the app's own clock, to 2 ms) is held by the main
# pytest run; here, with several venvs busy at once, it would measure the machine's load, and it
# does not depend on how firsttoken was installed or on the interpreter.
DESELECT=(
    --deselect tests/test_anthropic.py::test_ttft_matches_app_loop_for_create_and_text_stream
    --deselect tests/test_openai_fidelity.py::test_ttft_matches_the_apps_own_loop_within_2ms
    --deselect tests/test_openai_fidelity.py::test_async_ttft_matches_the_apps_own_loop_within_2ms
)
# Per Python (step 4): the SDKs' sync and async APIs, every way a stream ends, the wire phases
# (TLS, HTTP/2), patching on import, and the exit paths (signals, multiprocessing's worker
# finalizers) -- what depends on the interpreter (asyncio, ssl, the import system, generators'
# finalisation, multiprocessing's internals). The rest is plain Python run in step 3 already.
PER_PYTHON_TESTS=(
    tests/test_openai_apis.py
    tests/test_anthropic.py
    tests/test_stream_endings.py
    tests/test_wire.py
    tests/test_import_hooks.py
    tests/test_exit.py
    tests/test_deploy.py::test_worker_pools
)

rm -rf "$WORK"
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)

echo "==> release: building the wheel and sdist (python -m build)"
"$PYTHON" -m venv "$WORK/tools"
"$WORK/tools/bin/python" -m pip install -qq --upgrade pip
"$WORK/tools/bin/python" -m pip install -qq build twine
"$WORK/tools/bin/python" -m build --outdir "$WORK/dist" . >"$WORK/build.log" 2>&1 || {
    tail -40 "$WORK/build.log"
    exit 1
}
wheel=$(ls "$WORK"/dist/firsttoken-*.whl)
sdist=$(ls "$WORK"/dist/firsttoken-*.tar.gz)
echo "    $(basename "$wheel"), $(basename "$sdist")"

echo "==> release: checking their metadata"
"$WORK/tools/bin/twine" check --strict "$wheel" "$sdist"
"$WORK/tools/bin/python" scripts/check_dist.py "$wheel" "$sdist"

# A venv with the wheel and the test dependencies (the wheel's own `dev` extra).
install_wheel() { # python venv
    "$1" -m venv "$2"
    "$2/bin/python" -m pip install -qq --upgrade pip
    "$2/bin/python" -m pip install -qq "${wheel}[dev]"
}

# Run pytest from the checkout with an installed firsttoken; refuse to run against src/.
run_installed_tests() { # venv tests...
    local venv=$1
    shift
    local where
    where=$(cd "$WORK" && "$venv/bin/python" -c 'import firsttoken; print(firsttoken.__file__)')
    case "$where" in
        "$venv"/*) ;;
        *)
            echo "release: $venv imports firsttoken from $where, not from the installed wheel" >&2
            return 1
            ;;
    esac
    FIRSTTOKEN_TEST_INSTALLED="$venv" "$venv/bin/python" -m pytest -q -p no:cacheprovider "${DESELECT[@]}" "$@"
}

echo "==> release: the wheel in a fresh venv ($("$PYTHON" --version)): SDK-facing tests and the demo"
install_wheel "$PYTHON" "$WORK/venv-wheel"
run_installed_tests "$WORK/venv-wheel" "${SDK_TESTS[@]}"
(cd "$WORK" && "$WORK/venv-wheel/bin/firsttoken" --version)
(cd "$WORK" && "$WORK/venv-wheel/bin/firsttoken" demo --actions 6 --no-levers >"$WORK/demo.log" 2>&1) || {
    cat "$WORK/demo.log"
    exit 1
}
grep -q "TTFT" "$WORK/demo.log" || {
    echo "release: the demo's report is missing" >&2
    cat "$WORK/demo.log"
    exit 1
}
echo "    firsttoken demo: ok"

# -- step 4: every supported Python on the machine --------------------------------------------

find_python() { # version -> an interpreter of that version, or nothing
    local v=$1 candidate
    for candidate in "python$v" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/python"$v"; do
        if command -v "$candidate" >/dev/null 2>&1 \
            && [ "$("$candidate" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = "$v" ]; then
            command -v "$candidate"
            return 0
        fi
    done
    return 0
}

main_version=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
found=()
missing=()
for v in $VERSIONS; do
    py=$(find_python "$v")
    if [ -n "$py" ]; then found+=("$v=$py"); else missing+=("$v"); fi
done
echo "==> release: supported Pythons found: ${found[*]:-none}; not found: ${missing[*]:-none}"
echo "    Python $main_version: the wheel run above (every SDK-facing test)"

test_on_python() { # version interpreter
    local v=$1 py=$2 venv="$WORK/venv-py$1" log="$WORK/py$1.log"
    {
        echo "== Python $v ($py)"
        install_wheel "$py" "$venv" && run_installed_tests "$venv" "${PER_PYTHON_TESTS[@]}"
    } >"$log" 2>&1
}

pids=()
names=()
failed=()
for entry in "${found[@]}"; do
    v=${entry%%=*}
    [ "$v" = "$main_version" ] && continue
    test_on_python "$v" "${entry#*=}" &
    pids+=($!)
    names+=("$v")
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 1; done
done
for i in "${!pids[@]}"; do
    v=${names[$i]}
    if wait "${pids[$i]}"; then
        echo "    Python $v: $(grep -E '^[0-9]+ passed' "$WORK/py$v.log" | tail -1)"
    else
        failed+=("$v")
        echo "    Python $v: FAILED"
        tail -40 "$WORK/py$v.log"
    fi
done

if [ "${#failed[@]}" -gt 0 ]; then
    echo "release: the SDK-facing tests failed on Python ${failed[*]}" >&2
    exit 1
fi
if [ "${#missing[@]}" -gt 0 ] && [ "${FIRSTTOKEN_RELEASE_REQUIRE_ALL:-0}" = 1 ]; then
    echo "release: Python ${missing[*]} not found and FIRSTTOKEN_RELEASE_REQUIRE_ALL=1" >&2
    exit 1
fi
echo "==> release: ok -- wheel and sdist built and checked; the wheel tested on Python $main_version ${names[*]:-}${missing[*]:+ (not found: ${missing[*]})}"
