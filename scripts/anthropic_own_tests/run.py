"""anthropic's own OpenTelemetry tests, plain and with firsttoken on: no pass->fail outside ALLOWED.

Usage: python scripts/anthropic_own_tests/run.py [--whole]

The tests come from the sdist of the anthropic release installed beside firsttoken (the newest the
dev extra allows; FIRSTTOKEN_OWN_TESTS_ANTHROPIC picks another), fetched once from PyPI with pip and
kept under ~/.cache/firsttoken/, and run in a venv of their own there (anthropic's test dependencies
and this checkout of firsttoken), made once and reused while the version and checkout are the same.

Default: ``tests/test_open_telemetry.py`` and ``tests/lib/tools/test_open_telemetry.py``, with
``ANTHROPIC_OPEN_TELEMETRY=true`` set for every test (the app asked for the SDK's spans): a test that
passes plain and fails instrumented fails this step unless ALLOWED names it. ``--whole``: anthropic's
whole suite with firsttoken's defaults (no opt-in), against ALLOWED and ALLOWED_WHOLE. Each reason is
explained in docs/coexistence.md ("anthropic's own tests").
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
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_DIR = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "firsttoken"
FILES = ["tests/test_open_telemetry.py", "tests/lib/tools/test_open_telemetry.py"]
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
ALLOWED_WHOLE: dict[str, str] = {}
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


def venv(version: str) -> Path:
    """A venv with anthropic ``version``, its test dependencies and this checkout of firsttoken."""
    where = CACHE / f"anthropic-{version}" / "venv"
    python = where / "bin" / "python"
    stamp = where / "firsttoken-setup.json"
    setup = json.dumps({"anthropic": version, "firsttoken": str(ROOT), "deps": TEST_DEPS})
    if stamp.exists() and stamp.read_text() == setup:
        return python
    sh(sys.executable, "-m", "venv", "--clear", where)
    sh(python, "-m", "pip", "install", "-q", f"anthropic[aiohttp]=={version}", *TEST_DEPS, "-e", ROOT)
    stamp.write_text(setup)
    return python


def outcomes(python: Path, tree: Path, files: list[str], *, instrumented: bool, opt_in: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FIRSTTOKEN_", "ANTHROPIC_"))}
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
        subprocess.run(
            [str(python), "-m", "pytest", "-q", "-p", "ft_plugin", "-n", workers, "-p", "no:cacheprovider", *files],
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
    started = time.monotonic()
    tree = sources(version)
    python = venv(version)
    files = ["tests"] if whole else FILES
    plain = outcomes(python, tree, files, instrumented=False, opt_in=not whole)
    with_ft = outcomes(python, tree, files, instrumented=True, opt_in=not whole)
    allowed = {**ALLOWED, **ALLOWED_WHOLE} if whole else ALLOWED
    broken = sorted(t for t, o in plain.items() if o == "passed" and with_ft.get(t) != "passed")
    unexplained = [t for t in broken if not any(fnmatch.fnmatchcase(t, p) for p in allowed)]
    passed = sum(1 for o in plain.values() if o == "passed")
    print(
        f"anthropic {version} {'whole suite, defaults' if whole else 'OpenTelemetry tests, opted in'}: "
        f"{len(plain)} tests, {passed} pass plain, {len(broken)} pass->fail with firsttoken "
        f"({len(broken) - len(unexplained)} allowed), {time.monotonic() - started:.0f} s"
    )
    for test in unexplained:
        print(f"  not allowed: {test}")
    if not plain or passed == 0:
        print("  the plain run passed nothing: the suite did not run")
        return 1
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
