"""anthropic's own OpenTelemetry tests, plain and with firsttoken on: no pass->fail outside ALLOWED.

Usage: python scripts/anthropic_own_tests/run.py [--whole]

The tests come from the sdist of the anthropic release installed beside firsttoken (the newest the
dev extra allows; FIRSTTOKEN_OWN_TESTS_ANTHROPIC picks another), fetched once from PyPI with pip and
kept under ~/.cache/firsttoken/, and run in a venv of their own there (anthropic's test dependencies
and this checkout of firsttoken), made once and reused while the version and checkout are the same.

Default: ``tests/test_open_telemetry.py`` and ``tests/lib/tools/test_open_telemetry.py``, with
``ANTHROPIC_OPEN_TELEMETRY=true`` set for every test (the app asked for the SDK's spans): a test that
passes plain and fails instrumented fails this step unless ALLOWED names it. ``--whole``: anthropic's
whole suite with firsttoken's defaults (no opt-in), against ALLOWED and ALLOWED_WHOLE, with
firsttoken's simulator standing in for the API mock anthropic's CI serves (see ``stand_in``); the
tests that fail plain are left out of the comparison and counted. Each reason is explained in
docs/coexistence.md ("anthropic's own tests").
"""

from __future__ import annotations

import fnmatch
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_DIR = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "firsttoken"
FILES = ["tests/test_open_telemetry.py", "tests/lib/tools/test_open_telemetry.py"]
EXTRAS_WHOLE = "aiohttp,bedrock,vertex,mcp,webhooks"
"""anthropic's extras for ``--whole``: its test modules import them (botocore, standardwebhooks, ...)."""
TEST_DEPS = [
    "respx",
    "pytest",
    "pytest-asyncio",
    "pytest-xdist",
    "time-machine",
    "dirty-equals>=0.6.0",
    "inline-snapshot>=0.28.0",
    "http-snapshot[httpx]==0.1.9",
    "hypothesis",
    "rich",
    "griffe",
    "packaging",
    "importlib-metadata",
    "opentelemetry-sdk",
]

NESTING = "nesting: the SDK's span is a child of firsttoken's call span"

_TOOLS = "tests/lib/tools/test_open_telemetry.py::TestToolRunnerSpans::"
_CALLS = "tests/test_open_telemetry.py::"
ALLOWED: dict[str, str] = {
    # The test finds the SDK's span's parent, or the span current during the request, to be the
    # app's or the tool runner's span; with firsttoken it is firsttoken's call span, a child of that.
    _TOOLS + "test_a_compaction_request_is_a_child_of_the_tool_runner_span": NESTING,
    _TOOLS + "test_all_of_the_async_runners_code_runs_in_the_tool_runner_span[[]*]": NESTING,
    _TOOLS + "test_all_of_the_runners_code_runs_in_the_tool_runner_span[[]*]": NESTING,
    _TOOLS + "test_closing_the_async_streaming_runner_during_a_compaction_closes_its_stream": NESTING,
    _TOOLS + "test_output_type_is_json_when_the_runner_sets_a_json_output_format": NESTING,
    _TOOLS + "test_streaming_runner": NESTING,
    _TOOLS + "test_tool_runner_and_tool_spans": NESTING,
    _CALLS + "TestCallSpans::test_unary_attributes": NESTING,
    _CALLS
    + "TestPropagationOption::test_false_keeps_a_span_that_the_sampler_dropped_current_for_the_requests[[]*]": NESTING,
}
"""Test id pattern (fnmatch) -> reason: a pass->fail that is firsttoken's documented behaviour."""
REPLACEMENT = "replacement: no option and no variable, so firsttoken's call span takes the SDK's place"
GLOBAL_PROVIDERS = "global providers: firsttoken sets up its own when the app has none, so spans are valid"
CALLS_OTEL = "calls OpenTelemetry: with the SDK's spans off, firsttoken's own span and metrics still do"
_RUNNERS = "tests/lib/tools/test_runners.py::"
_TRACING = "tests/test_tracing.py::"
ALLOWED_WHOLE: dict[str, str] = {
    # A client given no option while the variable is unset, empty ("" is no setting, as for the SDK)
    # or only the SDK's former name for the content mode: the test counts the SDK's own spans.
    _CALLS + "TestContent::test_the_former_name_of_the_content_mode_variable_is_not_read": REPLACEMENT,
    _CALLS + "TestPropagationOption::test_the_variable_sets_propagation_for_a_client_that_is_given_no_option"
    "[[]-None-True-*]": REPLACEMENT,
    # The test runs with no tracer provider registered: firsttoken's defaults register one, so the
    # tool runner's span is valid and its traceparent (a new trace id each run) goes on the requests
    # the test compares; a span current during the request is valid; a provider named by
    # OTEL_PYTHON_TRACER_PROVIDER is never loaded (the fixture fails).
    _RUNNERS + "test_a_runner_made_from_params_sends_the_requests_of_tool_runner[[]*]": GLOBAL_PROVIDERS,
    _TRACING + "test_propagation_off_drops_a_span_without_a_valid_context[[]*]": GLOBAL_PROVIDERS,
    _TRACING + "test_given_tracer_provider_is_asked_at_the_first_call[[]*]": GLOBAL_PROVIDERS,
    _TRACING + "test_tracer_provider_that_is_not_installed_leaves_a_client_without_spans[[]*]": GLOBAL_PROVIDERS,
    # The test counts every call into OpenTelemetry's API while the SDK's spans are off.
    _CALLS + "TestTracingFailures::test_disabled_spans_call_nothing_of_opentelemetry[[]*]": CALLS_OTEL,
}
"""The same for ``--whole`` (firsttoken's defaults, no opt-in), beside ALLOWED."""


def sh(*cmd: str | Path, **kw: object) -> None:
    subprocess.run([str(c) for c in cmd], check=True, **kw)  # type: ignore[call-overload]


def sources(version: str) -> Path:
    """The unpacked sdist of anthropic ``version``, fetched once."""
    where = CACHE / f"anthropic-{version}"
    tree = where / f"anthropic-{version}"
    if (tree / "tests").is_dir():
        return tree
    where.mkdir(parents=True, exist_ok=True)
    sh(
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "--no-deps",
        "--no-binary",
        ":all:",
        f"anthropic=={version}",
        "-d",
        where,
    )
    with tarfile.open(where / f"anthropic-{version}.tar.gz") as tar:
        tar.extractall(where, filter="data")
    return tree


def venv(version: str, *, whole: bool) -> Path:
    """A venv with anthropic ``version``, its test dependencies and this checkout of firsttoken."""
    where = CACHE / f"anthropic-{version}" / ("venv-whole" if whole else "venv")
    python = where / "bin" / "python"
    stamp = where / "firsttoken-setup.json"
    extras = EXTRAS_WHOLE if whole else "aiohttp"
    # The default venv's stamp is as it was before --whole had a venv of its own: no rebuild for it.
    spec = f"{version}[{extras}]" if whole else version
    setup = json.dumps({"anthropic": spec, "firsttoken": str(ROOT), "deps": TEST_DEPS})
    if stamp.exists() and stamp.read_text() == setup:
        return python
    sh(sys.executable, "-m", "venv", "--clear", where)
    sh(python, "-m", "pip", "install", "-q", f"anthropic[{extras}]=={version}", *TEST_DEPS, "-e", ROOT)
    stamp.write_text(setup)
    return python


@contextmanager
def stand_in(python: Path) -> Iterator[str]:
    """firsttoken's simulator with no latency, in place of the API mock anthropic's CI serves on :4010.

    That mock (the OpenAPI spec of the whole API, served by Stainless's mock server) is neither in
    the sdist nor in any registry package. The simulator answers ``POST /v1/messages`` (streams too)
    and ``/v1/messages/count_tokens`` as the API does, and any other path with a 404 at once, which
    the SDK does not retry: those tests fail quickly, plain and instrumented alike, instead of
    retrying a closed port with backoff (1.3 s each).
    """
    cmd = [python, "-m", "firsttoken", "sim", "--port", "0", "--queue-ms", "0", "--prefill-ms-per-1k", "0"]
    cmd += ["--decode-tps", "1000000", "--jitter", "0", "--seed", "0"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FIRSTTOKEN_"))}
    with subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE, text=True, env=env) as sim:
        try:
            assert sim.stdout is not None
            first = sim.stdout.readline()  # "firsttoken sim listening on http://127.0.0.1:PORT"
            if "listening on " not in first:
                raise RuntimeError(f"firsttoken sim did not start: {first!r}")
            yield first.split("listening on ", 1)[1].strip()
        finally:
            sim.terminate()


def outcomes(
    python: Path, tree: Path, files: list[str], *, instrumented: bool, opt_in: bool, api: str | None
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FIRSTTOKEN_", "ANTHROPIC_"))}
    if api is not None:
        env["TEST_API_BASE_URL"] = api
    env.update(
        PYTHONPATH=str(PLUGIN_DIR),
        OTEL_TRACES_EXPORTER="none",  # firsttoken's defaults, but nothing sent anywhere
        OTEL_METRICS_EXPORTER="none",
        FT_OWN_TESTS_MODE="instrumented" if instrumented else "plain",
        FT_OWN_TESTS_OPT_IN="1" if opt_in else "0",
    )
    with tempfile.TemporaryDirectory() as tmp:
        env["FT_OWN_TESTS_OUT"] = out = os.path.join(tmp, "outcomes.json")
        workers = os.environ.get("FIRSTTOKEN_OWN_TESTS_WORKERS", "2")
        # --tb=no: only the outcomes are read, and formatting the tracebacks of the thousands of tests
        # that fail plain (the stand-in's 404s) was three quarters of their time.
        args = ["-q", "-p", "ft_plugin", "-n", workers, "-p", "no:cacheprovider", "--tb=no", *files]
        subprocess.run(
            [str(python), "-m", "pytest", *args],
            cwd=tree,
            env=env,
            stdout=subprocess.DEVNULL,
            check=False,
        )
        result: dict[str, str] = json.loads(Path(out).read_text())
    return result


def main() -> int:
    whole = "--whole" in sys.argv[1:]
    version = os.environ.get("FIRSTTOKEN_OWN_TESTS_ANTHROPIC") or metadata.version("anthropic")
    tree = sources(version)
    python = venv(version, whole=whole)
    files = ["tests"] if whole else FILES
    runs: dict[bool, dict[str, str]] = {}
    took: dict[bool, float] = {}
    with stand_in(python) if whole else nullcontext(None) as api:
        for instrumented in (False, True):
            started = time.monotonic()
            runs[instrumented] = outcomes(python, tree, files, instrumented=instrumented, opt_in=not whole, api=api)
            took[instrumented] = time.monotonic() - started
    plain, with_ft = runs[False], runs[True]
    allowed = {**ALLOWED, **ALLOWED_WHOLE} if whole else ALLOWED
    broken = sorted(t for t, o in plain.items() if o == "passed" and with_ft.get(t) != "passed")
    unexplained = [t for t in broken if not any(fnmatch.fnmatchcase(t, p) for p in allowed)]
    passed = sum(1 for o in plain.values() if o == "passed")
    failed = sum(1 for o in plain.values() if o == "failed")
    print(
        f"anthropic {version} {'whole suite, defaults' if whole else 'OpenTelemetry tests, opted in'}: "
        f"{len(plain)} tests; plain {passed} pass, {failed} fail (not compared), "
        f"{len(plain) - passed - failed} skipped or xfail, {took[False]:.0f} s; "
        f"with firsttoken {sum(1 for o in with_ft.values() if o == 'passed')} pass, {took[True]:.0f} s; "
        f"{len(broken)} pass->fail ({len(broken) - len(unexplained)} allowed)"
    )
    for test in unexplained:
        print(f"  not allowed: {test}")
    if not plain or passed == 0:
        print("  the plain run passed nothing: the suite did not run")
        return 1
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
