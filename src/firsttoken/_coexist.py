"""Other GenAI instrumentations of the same SDK calls: said once each, in one line (docs/coexistence.md).

The official OpenTelemetry instrumentations (genai-openai, genai-anthropic and genai-bedrock, and openai-v2 before
them) and OpenLLMetry record ``gen_ai.client.*`` metrics under the same names as firsttoken and a
span of their own for each call. Each is noticed when its instrumentor has already run when
firsttoken installs, or when it runs later (its ``_instrument`` is wrapped), and said once per
process, naming the others of the same SDK noticed before it (three or more sources are no rarer
than two). Nothing is changed in what either records: the app decides (docs/coexistence.md says how).
logfire's ``instrument_openai()``/``instrument_anthropic()`` need no note: the suppression they set
inside each call is set aside for firsttoken's own spans (:meth:`firsttoken.recorder.Recorder.start`).
"""

from __future__ import annotations

import contextlib
import threading
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._patch import Patches

DOC = "docs/coexistence.md"

_ALSO_INSTRUMENTED = (
    "{names} also {verb} the {sdk} SDK's calls: the standard gen_ai.client.* metrics get one point per"
    ' call from each instrumentation, firsttoken included (select otel_scope_name="firsttoken" for'
    " firsttoken's alone), and each makes its own span; see " + DOC
)

INSTRUMENTORS: dict[str, tuple[str, str, str]] = {
    "opentelemetry.instrumentation.genai.openai": (
        "OpenAIInstrumentor",
        "opentelemetry-instrumentation-genai-openai",
        "openai",
    ),
    "opentelemetry.instrumentation.genai.anthropic": (
        "AnthropicInstrumentor",
        "opentelemetry-instrumentation-genai-anthropic",
        "anthropic",
    ),
    "opentelemetry.instrumentation.genai.bedrock": (
        "BedrockInstrumentor",
        "opentelemetry-instrumentation-genai-bedrock",
        "boto3 bedrock-runtime",
    ),
    "opentelemetry.instrumentation.openai_v2": (
        "OpenAIInstrumentor",
        "opentelemetry-instrumentation-openai-v2",
        "openai",
    ),
    "opentelemetry.instrumentation.openai": ("OpenAIInstrumentor", "OpenLLMetry's openai instrumentation", "openai"),
    "opentelemetry.instrumentation.anthropic": (
        "AnthropicInstrumentor",
        "OpenLLMetry's anthropic instrumentation",
        "anthropic",
    ),
}
"""Module -> (its instrumentor class, the name the note gives it, the SDK it instruments)."""

_said: set[str] = set()
_lock = threading.Lock()
_active: dict[str, list[str]] = {}
"""SDK -> the names of the other instrumentations of its calls noticed so far, in the order noticed."""


def also_instrumented(module_name: str) -> str:
    """The note for one more instrumentation of an SDK's calls, naming every one noticed so far: true
    however many instrument the same calls (each adds one point per call to the standard metrics)."""
    _, name, sdk = INSTRUMENTORS[module_name]
    with _lock:
        names = _active.setdefault(sdk, [])
        if name not in names:
            names.append(name)
        names = list(names)
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    verb = "instruments" if len(names) == 1 else "instrument"
    return _ALSO_INSTRUMENTED.format(names=listed, verb=verb, sdk=sdk)


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
    cls_name = INSTRUMENTORS[module.__name__][0]
    cls = getattr(module, cls_name, None)
    if cls is None:
        return
    # BaseInstrumentor is a singleton per class: the instance exists once the app made one.
    instance = cls.__dict__.get("_instance")
    if instance is not None and getattr(instance, "is_instrumented_by_opentelemetry", False):
        say_once(module.__name__, also_instrumented(module.__name__))
        return

    def instrument(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        result = wrapped(*args, **kwargs)
        if module.__name__ not in _said:
            say_once(module.__name__, also_instrumented(module.__name__))
        return result

    patches.wrap(module.__name__, f"{cls_name}._instrument", instrument)
