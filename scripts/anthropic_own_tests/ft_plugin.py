"""pytest plugin for anthropic's own test suite, loaded by scripts/anthropic_own_tests/run.py.

``FT_OWN_TESTS_MODE=instrumented``: firsttoken is on (``instrument()`` with its defaults) before any
test runs. ``FT_OWN_TESTS_OPT_IN=1``: ``ANTHROPIC_OPEN_TELEMETRY=true`` for every test (the suite's
conftest clears ``ANTHROPIC_*`` once per session, so it is set per test). ``FT_OWN_TESTS_OUT``: where
each test's outcome is written, as JSON, once the session ends.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

_outcomes: dict[str, str] = {}


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("FT_OWN_TESTS_MODE") == "instrumented":
        import firsttoken

        assert firsttoken.instrument()


@pytest.fixture(autouse=True)
def _opt_in(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if os.environ.get("FT_OWN_TESTS_OPT_IN") == "1":
        monkeypatch.setenv("ANTHROPIC_OPEN_TELEMETRY", "true")
    yield


def pytest_runtest_logreport(report: Any) -> None:
    if report.failed:
        _outcomes[report.nodeid] = "failed"
    elif report.when == "call" or (report.skipped and report.nodeid not in _outcomes):
        _outcomes.setdefault(report.nodeid, "passed" if report.passed and not hasattr(report, "wasxfail") else "other")


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = os.environ.get("FT_OWN_TESTS_OUT")
    if out and not hasattr(session.config, "workerinput"):  # the controller sees every worker's reports
        with open(out, "w") as f:
            json.dump(_outcomes, f)
