#!/usr/bin/env bash
# Builds (once) the stack that docker-compose.yml pins, from Go modules, for the real-stack tests
# (tests/stack/test_stack_real.py and the others): the OpenTelemetry Collector, Prometheus,
# Alertmanager and Jaeger; and Thanos for tests/stack/test_stack_thanos*.py.
#
#   scripts/stack/build.sh [otelcol|prometheus|alertmanager|jaeger|thanos|all]
#                                                   build what is missing, print the paths
#                                                   (all: the four compose runs, not Thanos)
#   scripts/stack/build.sh COMPONENT --path         print where its binary is (built or not)
#   scripts/stack/build.sh [COMPONENT] --check      exit 0 when built, 1 otherwise (builds nothing;
#                                                   without COMPONENT: the four of `all`)
#   scripts/stack/build.sh [COMPONENT] --for-tests  build within $FIRSTTOKEN_STACK_BUILD_TIMEOUT s in all
#                                                   (2400), never fail; one line per component.
#                                                   Without COMPONENT: the four of `all`, then Thanos
#                                                   last, so that scripts/test.sh starts the other
#                                                   stack tests as soon as `--check` passes
#   scripts/stack/build.sh tempo                    says why Tempo is not built (exit 1)
#
# Every build uses Go's default build and module caches (nothing here sets GOCACHE or GOMODCACHE),
# so the builds share the packages they have in common (Thanos most of Prometheus').
#
# Versions are read from docker-compose.yml and its override docker-compose.jaeger.yml, the only
# places that pin the images. Everything comes
# from the Go module proxy through the ordinary `go` command (Go >= 1.26); no binary is downloaded.
#   - otelcol: the OpenTelemetry Collector Builder at the image's version, with the committed
#     manifest collector-config/builder.yaml (exactly the components the shipped configs use).
#   - prometheus: upstream's cmd/prometheus built inside the wrapper module scripts/stack/gomod/
#     prometheus (Go module version v0.<major><minor>.<patch>: v3.14.0 is v0.314.0), which copies
#     upstream's replace/exclude lines. Without the web UI (its assets are a frontend build): the
#     API and the OTLP receiver are all the tests use.
#   - alertmanager: the same way (scripts/stack/gomod/alertmanager). Its UI is embedded from
#     ui/app/dist, a frontend build that the module does not ship: the module's source is copied
#     into the build directory with a one-page placeholder there (the API is unchanged).
#   - jaeger: upstream's cmd/jaeger (all-in-one: OTLP in, storage, query API) built inside the wrapper
#     module scripts/stack/gomod/jaeger. The image jaegertracing/jaeger:2.N.P is the Go module
#     version v1.(N+63).P (2.13.0 is v1.76.0, the same commit); the v2 tags themselves have no /v2
#     module path, so the proxy serves none of them and nothing newer than 2.13.0 can be built.
#     Without the web UI (a frontend build the module does not ship): the query API is all the
#     tests and Grafana use.
#   - thanos: upstream's cmd/thanos (one binary: sidecar, query, store, rule, receive) built inside the
#     wrapper module scripts/stack/gomod/thanos with the tags of Thanos' own release build (netgo,
#     slicelabels; without them Receive panics). No compose file runs Thanos, so its version is the
#     one that module requires. About 10 min cold on 2 busy cores; 16 s when Go's build cache holds its
#     packages (measured: 6 s of CPU, mostly the link).
#   - tempo: not built. The Go module github.com/grafana/tempo is AGPL-licensed and this project's
#     machines may not use it (and the proxy serves no version of its 3.x tags); see docs/stack.md.
# Binaries are cached in $FIRSTTOKEN_STACK_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/firsttoken/stack)
# as <component>-<version>/bin/<component> (otelcol: otelcol-<version>-<hash of builder.yaml's
# components>/bin/otelcol, so that a changed manifest builds anew). Builds run under `nice`; each
# prints its wall time.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=${FIRSTTOKEN_STACK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/firsttoken/stack}
COMPOSE_FILES=("$ROOT/docker-compose.yml" "$ROOT/docker-compose.jaeger.yml")
COMPONENTS=(otelcol prometheus alertmanager jaeger)
# --for-tests builds these in this order: Thanos last (only tests/stack/test_stack_thanos*.py need it).
FOR_TESTS=("${COMPONENTS[@]}" thanos)

what=all
mode=build
for arg in "$@"; do
    case "$arg" in
        --check) mode=check ;;
        --path) mode=path ;;
        --for-tests) mode=for-tests ;;
        otelcol | prometheus | alertmanager | jaeger | thanos | all) what=$arg ;;
        tempo)
            echo "build.sh: Tempo is not built: the Go module github.com/grafana/tempo is AGPL-licensed and may not be used on this project's machines; the tests stand in for it (docs/stack.md)" >&2
            exit 1
            ;;
        *)
            echo "build.sh: unknown argument '$arg' (otelcol|prometheus|alertmanager|jaeger|thanos|all, --check, --for-tests)" >&2
            exit 2
            ;;
    esac
done
if [ "$what" != all ]; then
    selected=("$what")
elif [ "$mode" = for-tests ]; then
    selected=("${FOR_TESTS[@]}")
else
    selected=("${COMPONENTS[@]}")
fi

# The image tag of a compose service, e.g. `image_version prometheus` -> v3.14.0.
image_version() {
    local tag
    tag=$(sed -n "s|^ *image: *$1:\\([^ ]*\\) *\$|\\1|p" "${COMPOSE_FILES[@]}" | head -n 1)
    if [ -z "$tag" ]; then
        echo "build.sh: no '$1:<tag>' image in docker-compose.yml or docker-compose.jaeger.yml" >&2
        return 1
    fi
    echo "$tag"
}

version_of() {
    case "$1" in
        otelcol) image_version otel/opentelemetry-collector-contrib ;;
        prometheus) image_version prom/prometheus ;;
        alertmanager) image_version prom/alertmanager ;;
        jaeger) image_version jaegertracing/jaeger ;;
        thanos) sed -n 's|^[[:space:]]*github.com/thanos-io/thanos \(v[^ ]*\).*|\1|p' "$ROOT/scripts/stack/gomod/thanos/go.mod" ;;
    esac
}

# The cache key: the version, and for otelcol also a hash of the manifest's components (comments
# left out), so that a component added to collector-config/builder.yaml builds a new Collector at a
# new path instead of reusing one that lacks it.
binary_of() {
    local key
    key=$(version_of "$1")
    if [ "$1" = otelcol ]; then
        key="$key-$(grep -v '^ *#' "$ROOT/collector-config/builder.yaml" | sha256sum | cut -c1-12)"
    fi
    echo "$CACHE/$1-$key/bin/$1"
}

if [ "$mode" = path ]; then
    # The binary's path (printed even when it is not built yet).
    binary_of "$what"
    exit 0
fi

if [ "$mode" = check ]; then
    for c in "${selected[@]}"; do
        [ -x "$(binary_of "$c")" ] || exit 1
    done
    exit 0
fi

if [ "$mode" = for-tests ]; then
    # For scripts/test.sh: build within a time limit and never fail the run; say what happened.
    # One limit for all the builds together.
    limit=${FIRSTTOKEN_STACK_BUILD_TIMEOUT:-2400}
    deadline=$(($(date +%s) + limit))
    for c in "${selected[@]}"; do
        log="$CACHE/$c-build.log"
        mkdir -p "$CACHE"
        left=$((deadline - $(date +%s)))
        if [ "$left" -lt 1 ]; then left=1; fi
        if timeout "$left" "$0" "$c" >"$log" 2>&1; then
            echo "==> stack: $c ready ($(binary_of "$c")); $(grep -m1 'built in' "$log" || echo 'cached')"
        else
            if [ "$c" = thanos ]; then tests="tests/stack/test_stack_thanos*.py"; else tests="tests/stack"; fi
            echo "==> stack: $c NOT built (failed, or not done within ${limit} s): $(tail -n 1 "$log")." \
                "$tests will fail with FIRSTTOKEN_STACK=required and skip otherwise." \
                "Full log: $log; build it with: scripts/stack/build.sh $c"
        fi
    done
    exit 0
fi

if ! command -v go >/dev/null 2>&1; then
    echo "build.sh: cannot build the stack: 'go' is not installed (Go >= 1.26 with the Go module proxy)" >&2
    exit 1
fi

build_otelcol() {
    local version=$1 out=$2 work=$3
    local want=${version#v}
    # The manifest's versions must be the image's: core v0.N / contrib v0.N / stable modules v1.(N-94).
    if ! grep -q "^  version: $want\$" "$ROOT/collector-config/builder.yaml"; then
        echo "build.sh: collector-config/builder.yaml is not at the compose image's version $want" >&2
        return 1
    fi
    if grep -E '^ *- gomod: .* v0\.' "$ROOT/collector-config/builder.yaml" | grep -vq " v$want\$"; then
        echo "build.sh: a v0 module in collector-config/builder.yaml is not at v$want" >&2
        return 1
    fi
    GOBIN="$work/tools" nice -n 10 go install "go.opentelemetry.io/collector/cmd/builder@v$want"
    sed "s|^  output_path: .*|  output_path: $work/otelcol|" "$ROOT/collector-config/builder.yaml" >"$work/builder.yaml"
    (cd "$work" && nice -n 10 "$work/tools/builder" --config="$work/builder.yaml")
    cp "$work/otelcol/otelcol-firsttoken" "$out"
}

# Builds upstream's command `pkg` inside the committed wrapper module scripts/stack/gomod/<name>,
# after checking that the module required there is the compose image's version.
build_wrapped() {
    local name=$1 module=$2 modversion=$3 pkg=$4 version=$5 out=$6 work=$7
    local gomod="$ROOT/scripts/stack/gomod/$name"
    if ! grep -qE "^\s*(require )?$module $modversion( |\$)" "$gomod/go.mod"; then
        echo "build.sh: scripts/stack/gomod/$name/go.mod does not require $module $modversion (the image is $version)" >&2
        return 1
    fi
    cp "$gomod/go.mod" "$gomod/go.sum" "$work/"
    if [ "$name" = alertmanager ]; then
        # The embedded UI (ui/app/dist) is a frontend build the module does not ship: build from a
        # copy of the module's source with a placeholder page there.
        (cd "$work" && go mod download "$module")
        local src
        src=$(cd "$work" && go list -m -f '{{.Dir}}' "$module")
        rm -rf "$work/upstream"
        cp -r "$src" "$work/upstream"
        chmod -R u+w "$work/upstream"
        mkdir -p "$work/upstream/ui/app/dist"
        printf '<!doctype html><title>Alertmanager</title><p>Built by firsttoken without its web UI; the API is at /api/v2/.</p>\n' \
            >"$work/upstream/ui/app/dist/index.html"
        (cd "$work" && go mod edit -replace "$module=./upstream")
    fi
    local ldflags="-X github.com/prometheus/common/version.Version=${version#v}"
    local tags=""
    if [ "$name" = jaeger ]; then
        ldflags="-X $module/internal/version.latestVersion=v${version#v}"
    fi
    if [ "$name" = thanos ]; then
        tags="netgo,slicelabels"
    fi
    (cd "$work" && nice -n 10 go build -trimpath -tags "$tags" -o "$out" -ldflags "$ldflags" "$pkg")
}

build_one() {
    local c=$1 version out work start
    version=$(version_of "$c")
    out=$(binary_of "$c")
    if [ -x "$out" ]; then
        echo "$out"
        return 0
    fi
    work="$(dirname "$(dirname "$out")")/build"
    rm -rf "$work"
    mkdir -p "$work" "$(dirname "$out")"
    start=$(date +%s)
    echo "==> stack: building $c $version from Go modules (under nice)" >&2
    case "$c" in
        otelcol) build_otelcol "$version" "$out.tmp" "$work" ;;
        prometheus)
            # Prometheus' Go module versions are v0.<major><minor 2 digits>.<patch>.
            local v=${version#v} major minor patch
            IFS=. read -r major minor patch <<<"$v"
            build_wrapped prometheus github.com/prometheus/prometheus "v0.$major$(printf %02d "$minor").$patch" \
                github.com/prometheus/prometheus/cmd/prometheus "$version" "$out.tmp" "$work"
            ;;
        alertmanager)
            build_wrapped alertmanager github.com/prometheus/alertmanager "$version" \
                github.com/prometheus/alertmanager/cmd/alertmanager "$version" "$out.tmp" "$work"
            ;;
        jaeger)
            # The one place that maps Jaeger's image tag to its Go module version: 2.N.P is v1.(N+63).P.
            local major minor patch
            IFS=. read -r major minor patch <<<"$version"
            if [ "$major" != 2 ]; then
                echo "build.sh: jaeger $version: only 2.x images map to a Go module version (v1.(N+63).P)" >&2
                return 1
            fi
            build_wrapped jaeger github.com/jaegertracing/jaeger "v1.$((minor + 63)).$patch" \
                github.com/jaegertracing/jaeger/cmd/jaeger "$version" "$out.tmp" "$work"
            ;;
        thanos)
            build_wrapped thanos github.com/thanos-io/thanos "$version" \
                github.com/thanos-io/thanos/cmd/thanos "$version" "$out.tmp" "$work"
            ;;
    esac
    mv "$out.tmp" "$out"
    rm -rf "$work"
    echo "==> stack: $c $version built in $(($(date +%s) - start)) s" >&2
    echo "$c $version built in $(($(date +%s) - start)) s"
    echo "$out"
}

mkdir -p "$CACHE"
# One build at a time, however many test runs start together.
exec 9>"$CACHE/.lock"
if command -v flock >/dev/null 2>&1; then
    flock 9
fi
for c in "${selected[@]}"; do
    build_one "$c"
done
