"""The one way firsttoken handles an error of its own: visible in tests, quiet in production.

Every ``except`` of the instrumentation that catches what could be a bug of firsttoken (a reader
meeting a shape it did not expect, a hook that forgot a method) calls :func:`internal_error`. In
production it logs the traceback at debug level and returns: the app never sees firsttoken's
errors. While the test suite runs (``FIRSTTOKEN_INTERNAL_ERRORS=raise``, set by ``tests/conftest.py``)
it re-raises, so a bug fails the test that met it instead of showing only as a missing attribute.

Errors that are expected (a body that is not JSON, a request body that is streamed) are caught by
their own exception types where they happen, and never come here.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger("firsttoken")

ENV_VAR = "FIRSTTOKEN_INTERNAL_ERRORS"
"""``raise``: :func:`internal_error` re-raises (the test suite). Read on each error, so a test can
set or clear it; nothing is read on the path of a call without an error."""


def internal_error(what: str, *args: object) -> None:
    """Handle the exception being handled (call only inside an ``except`` block).

    ``what`` (with ``args``, %-style) says what firsttoken was doing. Re-raises the exception when
    :data:`ENV_VAR` is ``raise``, else logs it at debug level with its traceback.
    """
    if os.environ.get(ENV_VAR) == "raise":
        raise  # re-raises the exception the caller is handling
    log.debug("firsttoken: " + what, *args, exc_info=True)
