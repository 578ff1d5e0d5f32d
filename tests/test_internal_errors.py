"""Errors inside firsttoken: one helper handles them, visible in tests and quiet in production.

``firsttoken._internal.internal_error`` re-raises while the suite runs (``tests/conftest.py`` sets
``FIRSTTOKEN_INTERNAL_ERRORS=raise``) and logs at debug level otherwise; every ``except`` of the
instrumentation that may hide a bug of firsttoken goes through it.
"""

from __future__ import annotations

import ast
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from firsttoken import semconv as sc
from firsttoken._internal import ENV_VAR, internal_error
from firsttoken.streams import observe_sync
from firsttoken.timeline import Timeline

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "firsttoken"
# What is not the instrumentation: the simulator, the CLI, the viewer, and OTLP export set-up.
OUTSIDE = ("sim", "cli", "view", "_otlp.py", "_internal.py")


def _broken_reader(tl: Timeline, item: Any, now: int) -> None:
    raise KeyError("a shape the reader did not expect")


def _items() -> Iterator[int]:
    yield from (1, 2, 3)


def _timeline(ended: list[Timeline]) -> Timeline:
    return Timeline(
        provider="openai",
        operation=sc.OP_CHAT,
        request_model="m",
        server_address=None,
        server_port=None,
        stream=True,
        on_finish=ended.append,
    )


def test_the_suite_runs_with_internal_errors_raised() -> None:
    import os

    assert os.environ.get(ENV_VAR) == "raise"


def test_a_reader_bug_fails_the_test_that_meets_it() -> None:
    ended: list[Timeline] = []
    stream = observe_sync(_items(), _timeline(ended), _broken_reader)
    with pytest.raises(KeyError, match="did not expect"):
        list(stream)
    assert ended and ended[0].end_reason == sc.END_ERROR  # the call still ends, once


def test_in_production_a_reader_bug_is_logged_and_the_app_gets_every_item(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv(ENV_VAR)
    ended: list[Timeline] = []
    with caplog.at_level(logging.DEBUG, logger="firsttoken"):
        assert list(observe_sync(_items(), _timeline(ended), _broken_reader)) == [1, 2, 3]
    assert ended[0].end_reason == sc.END_COMPLETED
    failures = [r for r in caplog.records if r.exc_info and r.exc_info[0] is KeyError]
    assert len(failures) == 3 and failures[0].levelno == logging.DEBUG
    assert failures[0].getMessage() == "firsttoken: reading a streamed item failed"


def test_the_helper_reraises_the_exception_being_handled(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ZeroDivisionError):
        try:
            1 / 0  # noqa: B018
        except ZeroDivisionError:
            internal_error("dividing")
    monkeypatch.setenv(ENV_VAR, "log")
    try:
        1 / 0  # noqa: B018
    except ZeroDivisionError:
        internal_error("dividing %s", "again")  # returns


def _handlers() -> Iterator[tuple[str, int, ast.ExceptHandler, str]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] in OUTSIDE:
            continue
        source = path.read_text()
        lines = source.splitlines()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ExceptHandler):
                yield str(rel), node.lineno, node, lines[node.lineno - 1]


def _broad(handler: ast.ExceptHandler) -> bool:
    kind = handler.type
    names = kind.elts if isinstance(kind, ast.Tuple) else [kind]
    return any(isinstance(n, ast.Name) and n.id in ("Exception", "BaseException") for n in names) or kind is None


def _handled(handler: ast.ExceptHandler) -> bool:
    for node in ast.walk(handler):
        if isinstance(node, ast.Raise):
            return True  # passes the exception on (or ends a call with it and re-raises)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "internal_error":
            return True
    return False


def test_every_broad_except_of_the_instrumentation_goes_through_the_helper() -> None:
    """A broad ``except`` either re-raises, calls ``internal_error``, or says on its line (a comment)
    why what it catches is not firsttoken's error (another library's, the app's own hook's)."""
    silent = [
        f"{path}:{line}"
        for path, line, handler, text in _handlers()
        if _broad(handler) and not _handled(handler) and "#" not in text
    ]
    assert silent == []
    assert sum(1 for *_, h, _t in _handlers() if _broad(h) and _handled(h)) >= 20
