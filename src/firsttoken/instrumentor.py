"""``FirstTokenInstrumentor``: the OpenTelemetry ``BaseInstrumentor`` behind ``instrument()``.

Registered under the ``opentelemetry_instrumentor`` entry point, so ``opentelemetry-instrument
python app.py`` measures an app with no code change.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from . import _otlp, config, semconv, streams, transport
from ._patch import Patches
from ._version import __version__
from .config import ConfigError, warn
from .providers import _common, direct
from .recorder import Recorder

log = logging.getLogger("firsttoken")


class FirstTokenInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Patches the openai and anthropic SDKs and httpx; undoes it all on ``uninstrument()``."""

    _patches: Patches | None = None
    recorder: Recorder | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        # Each SDK is optional and checked on its own (a clear warning names an unsupported
        # version), so the base class has nothing to refuse.
        return ()

    def _instrument(self, **kwargs: Any) -> bool:
        try:
            return self._install(**kwargs)
        except ConfigError as exc:
            warn(f"{exc}; the app runs uninstrumented")
        except Exception as exc:  # never break the app for its telemetry
            log.debug("firsttoken: instrumentation failed", exc_info=True)
            warn(f"instrumentation failed ({exc!r}); the app runs uninstrumented")
        self._undo()
        return False

    def _install(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        capture_content: bool | None = None,
        **options: Any,
    ) -> bool:
        if config.is_disabled():
            log.info("firsttoken: disabled by the environment")
            return False
        settings = config.load(capture_content=capture_content, options=options)
        if tracer_provider is None and meter_provider is None and _otlp.globals_unset():
            tracer_provider, meter_provider = _otlp.setup()
        tracer = trace.get_tracer(
            semconv.SCOPE_NAME, __version__, tracer_provider=tracer_provider, schema_url=semconv.SCHEMA_URL
        )
        meter = metrics.get_meter(
            semconv.SCOPE_NAME, __version__, meter_provider=meter_provider, schema_url=semconv.SCHEMA_URL
        )
        recorder = Recorder(tracer, meter, settings)
        provider_of = _common.provider_resolver(settings.provider_hosts)
        patches = Patches()
        self._patches, self.recorder = patches, recorder
        from .providers import anthropic as anthropic_hooks
        from .providers import openai as openai_hooks

        sdks = [
            name
            for name, patch in (("openai", openai_hooks.patch), ("anthropic", anthropic_hooks.patch))
            if patch(patches, recorder, provider_of)
        ]
        # Plain httpx calls to LLM APIs are measured whether or not an SDK is installed.
        flavours = transport.patch(patches, recorder, direct.DirectCalls(recorder, provider_of))
        streams.start_worker()
        log.debug("firsttoken: instrumented %s", ", ".join(sdks + flavours) or "nothing")
        return bool(sdks or flavours)

    def _undo(self) -> None:
        if self._patches is not None:
            self._patches.unwrap_all()
        self._patches = None
        self.recorder = None

    def _uninstrument(self, **kwargs: Any) -> None:
        self._undo()
