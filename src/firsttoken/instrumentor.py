"""``FirstTokenInstrumentor``: the OpenTelemetry ``BaseInstrumentor`` face of ``instrument()``.

Registered under the ``opentelemetry_instrumentor`` entry point, so ``opentelemetry-instrument
python app.py`` measures an app with no code change. ``firsttoken.instrument()`` does not import
this module (``opentelemetry-instrumentation`` is slow to import); both share one installation.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from . import _install
from .recorder import Recorder


class FirstTokenInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Patches the openai and anthropic SDKs and httpx as they are imported; undoes it all on ``uninstrument()``."""

    def instrumentation_dependencies(self) -> Collection[str]:
        # Each SDK is optional and checked on its own when imported (a clear warning names an
        # unsupported version), so the base class has nothing to refuse.
        return ()

    def instrument(self, **kwargs: Any) -> Any:
        result = super().instrument(**kwargs)
        if result is False:  # the base class marks itself instrumented whatever _instrument returned
            self._is_instrumented_by_opentelemetry = False
        return result

    def _instrument(self, **kwargs: Any) -> bool:
        return _install.install(**kwargs)

    def _uninstrument(self, **kwargs: Any) -> None:
        _install.uninstall()

    @property
    def recorder(self) -> Recorder | None:
        return _install.active_recorder()
