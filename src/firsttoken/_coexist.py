"""Other GenAI instrumentations of the same SDK calls: said once each, in one line (docs/coexistence.md).

openai-v2 and OpenLLMetry record ``gen_ai.client.*`` metrics under the same names as firsttoken and a
span of their own for each call; logfire's ``instrument_openai()``/``instrument_anthropic()``
suppress every other instrumentation during the call by default, firsttoken's spans included where
they go to logfire's tracer provider. Each
is noticed when its instrumentor has already run when firsttoken installs, or when it runs later
(its ``_instrument``, or logfire's method, is wrapped), and said once per process. Nothing is
changed in what either records: the app decides (docs/coexistence.md says how).
"""

from __future__ import annotations

import contextlib
import threading
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._patch import Patches

DOC = "docs/coexistence.md"

_COUNTED_TWICE = (
    "{name} also instruments these calls: each is counted twice in the gen_ai.client.* metrics"
    ' (select otel_scope_name="firsttoken") and gets a span from each; see ' + DOC
)
_SUPPRESSED = (
    "logfire.{method}() suppresses other instrumentation during each call: firsttoken's spans are not"
    " recorded where it records into logfire's tracer provider; pass suppress_other_instrumentation=False"
    " to keep them; see " + DOC
)

INSTRUMENTORS: dict[str, tuple[str, str]] = {
    "opentelemetry.instrumentation.openai_v2": ("OpenAIInstrumentor", "opentelemetry-instrumentation-openai-v2"),
    "opentelemetry.instrumentation.openai": ("OpenAIInstrumentor", "OpenLLMetry's openai instrumentation"),
    "opentelemetry.instrumentation.anthropic": ("AnthropicInstrumentor", "OpenLLMetry's anthropic instrumentation"),
}
"""Module -> (its instrumentor class, the name the note gives it)."""

LOGFIRE_METHODS = ("instrument_openai", "instrument_anthropic")

_said: set[str] = set()
_lock = threading.Lock()


def say_once(key: str, message: str) -> None:
    """One FirstTokenWarning per ``key`` and process; never raises."""
    from .config import warn

    with _lock:
        if key in _said:
            return
        _said.add(key)
    with contextlib.suppress(Exception):  # a warnings filter set to "error" must not fail the app's call
        warn(message)


def watch_instrumentor(patches: Patches, module: ModuleType) -> None:
    """Say it now when the module's instrumentor is already active, else when it is activated."""
    cls_name, name = INSTRUMENTORS[module.__name__]
    cls = getattr(module, cls_name, None)
    if cls is None:
        return
    message = _COUNTED_TWICE.format(name=name)
    # BaseInstrumentor is a singleton per class: the instance exists once the app made one.
    instance = cls.__dict__.get("_instance")
    if instance is not None and getattr(instance, "is_instrumented_by_opentelemetry", False):
        say_once(module.__name__, message)
        return

    def instrument(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        result = wrapped(*args, **kwargs)
        say_once(module.__name__, message)
        return result

    patches.wrap(module.__name__, f"{cls_name}._instrument", instrument)


def watch_logfire(patches: Patches, module: ModuleType) -> None:
    """Say it when ``logfire.instrument_openai()`` or ``instrument_anthropic()`` suppresses the others.

    Watched on ``logfire._internal.main`` (the ``Logfire`` class, before ``logfire`` binds its default
    instance's methods) and on ``logfire`` (those bound methods, when it was imported first).
    """
    owner = "Logfire." if module.__name__ != "logfire" else ""
    for method in LOGFIRE_METHODS:

        def instrument(
            wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any], method: str = method
        ) -> Any:
            result = wrapped(*args, **kwargs)
            if kwargs.get("suppress_other_instrumentation", True):
                say_once(f"logfire.{method}", _SUPPRESSED.format(method=method))
            return result

        patches.wrap(module.__name__, owner + method, instrument)
