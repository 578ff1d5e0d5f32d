"""The process's one instrumentation: the SDKs and httpx are patched when the app imports them.

``instrument()`` imports nothing the app has not imported: each library gets a post-import hook
(:mod:`firsttoken._imports`), which patches it at once when the app already imported it, else right
after the app does. ``uninstall()`` undoes every patch made and removes the hooks that have not
fired yet.

Kept light at import (``firsttoken`` imports it): everything heavy is imported by :func:`install`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from . import _imports
from ._internal import internal_error

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

    from ._patch import Patches
    from .providers._common import ProviderResolver
    from .recorder import Recorder

log = logging.getLogger("firsttoken")

_lock = threading.RLock()
"""Held while installing, uninstalling and running a hook: a hook may fire in any thread."""


class Installation:
    """What one ``install()`` set up: its recorder, the hooks it registered and the patches they made."""

    def __init__(
        self,
        recorder: Recorder,
        provider_of: ProviderResolver,
        patches: Patches,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        self.recorder = recorder
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        """The providers passed to ``instrument()``, or firsttoken's own; None: the global one."""
        self.provider_of = provider_of
        self.patches = patches
        self.hooks: list[_Hook] = []
        self.patched: list[str] = []
        """The libraries patched so far, in the order the app imported them."""

    def when_imported(self, name: str, action: Callable[[Installation, ModuleType], bool]) -> None:
        hook = _Hook(self, name, action)
        self.hooks.append(hook)
        _imports.when_imported(name, hook)  # runs it now when ``name`` is already imported

    def undo(self) -> None:
        for hook in self.hooks:
            hook.armed = False  # in case it is firing in another thread right now
            _imports.discard(hook)
        self.patches.unwrap_all()
        self.patched.clear()


class _Hook:
    """Patches one library once it is imported, unless its installation was undone first."""

    __slots__ = ("action", "armed", "installation", "name")

    def __init__(
        self, installation: Installation, name: str, action: Callable[[Installation, ModuleType], bool]
    ) -> None:
        self.installation = installation
        self.name = name
        self.action = action
        self.armed = True

    def __call__(self, module: ModuleType) -> None:
        # Runs inside the app's ``import``: an exception here would fail that import.
        with _lock:
            if not self.armed:
                return
            self.armed = False
            try:
                if self.action(self.installation, module):
                    self.installation.patched.append(self.name)
                    log.debug("firsttoken: instrumented %s", self.name)
            except Exception:
                internal_error("instrumenting %s failed", self.name)


_current: Installation | None = None


def active_recorder() -> Recorder | None:
    """The recorder of the instrumentation in place, if any."""
    current = _current
    return None if current is None else current.recorder


def is_installed() -> bool:
    return _current is not None


def patched() -> list[str]:
    """The libraries patched so far (an SDK or httpx the app has not imported is not, yet)."""
    current = _current
    return [] if current is None else list(current.patched)


# -- what each hook does --------------------------------------------------------------------------


def _openai(installation: Installation, module: ModuleType) -> bool:
    from .providers import openai as openai_hooks
    from .providers import openai_realtime

    if not openai_hooks.patch(installation.patches, installation.recorder, installation.provider_of):
        return False
    openai_realtime.patch(installation.patches, installation.recorder, installation.provider_of)
    return True


def _anthropic(installation: Installation, module: ModuleType) -> bool:
    from .providers import anthropic as anthropic_hooks

    return anthropic_hooks.patch(
        installation.patches, installation.recorder, installation.provider_of, installation.tracer_provider
    )


def _gemini_live(installation: Installation, module: ModuleType) -> bool:
    from .providers import gemini_live

    return gemini_live.patch(installation.patches, installation.recorder, installation.provider_of)


def _groq(installation: Installation, module: ModuleType) -> bool:
    from .providers import openai as openai_hooks

    return openai_hooks.patch_groq(installation.patches, installation.recorder, installation.provider_of)


def _httpx(installation: Installation, module: ModuleType) -> bool:
    # Plain httpx calls to LLM APIs are measured whether or not an SDK is installed.
    from . import transport
    from .providers import direct

    transport.configure(installation.recorder, direct.DirectCalls(installation.recorder, installation.provider_of))
    return transport.patch_flavour(installation.patches, module)


def _aiohttp(installation: Installation, module: ModuleType) -> bool:
    # LLM calls sent with aiohttp (google-genai's async client when aiohttp is installed): the same
    # DirectCalls as plain httpx, through aiohttp's own adapter.
    from .providers import direct
    from .transport_aiohttp import AiohttpAdapter

    calls = direct.DirectCalls(installation.recorder, installation.provider_of)
    adapter = AiohttpAdapter(calls, installation.recorder.settings.wire_phases)
    return adapter.patch(installation.patches, module)


def _requests(installation: Installation, module: ModuleType) -> bool:
    # LLM calls sent with requests (apps calling the APIs directly, google-auth's AuthorizedSession).
    from .providers import direct
    from .transport_requests import RequestsAdapter

    calls = direct.DirectCalls(installation.recorder, installation.provider_of)
    adapter = RequestsAdapter(calls, installation.recorder.settings.wire_phases)
    return adapter.patch(installation.patches, module)


def _botocore(installation: Installation, module: ModuleType) -> bool:
    # boto3's bedrock-runtime calls (botocore sends through urllib3 and retries by itself), and
    # aiobotocore's (async, through aiohttp).
    from .providers import direct
    from .transport_aiobotocore import AiobotocoreHooks
    from .transport_botocore import BotocoreAdapter

    calls = direct.DirectCalls(installation.recorder, installation.provider_of)
    adapter = BotocoreAdapter(calls, installation.recorder.settings.wire_phases)
    if not adapter.patch(installation.patches, module):
        return False
    # aiobotocore's async overrides, with the same adapter, once the app imports aiobotocore.
    AiobotocoreHooks(adapter).patch(installation.patches)
    return True


def _retry_loop(installation: Installation, module: ModuleType) -> bool:
    # An SDK read on the wire that retries by itself: its attempts are one call (providers/retries.py).
    from .providers import retries

    return retries.patch(installation.patches, module.__name__)


def _anyio(installation: Installation, module: ModuleType) -> bool:
    from . import transport

    return transport.patch_async_dns(installation.patches)


def _another_instrumentor(installation: Installation, module: ModuleType) -> bool:
    from . import _coexist

    _coexist.watch_instrumentor(installation.patches, module)
    return False  # noticed, not instrumented: not in patched()


_HOOKS: tuple[tuple[str, Callable[[Installation, ModuleType], bool]], ...] = (
    ("openai", _openai),
    ("anthropic", _anthropic),
    ("groq", _groq),
    ("google.genai.live", _gemini_live),
    ("httpx2", _httpx),
    ("httpx", _httpx),
    ("anyio", _anyio),
    ("aiohttp", _aiohttp),
    ("requests", _requests),
    ("botocore", _botocore),
    # The retry loops of SDKs read on the wire (providers/retries.LOOPS).
    ("google.genai._api_client", _retry_loop),
    ("mistralai.client.basesdk", _retry_loop),
    ("mistralai.azure.client.basesdk", _retry_loop),
    ("mistralai.gcp.client.basesdk", _retry_loop),
    ("mistralai.basesdk", _retry_loop),
    ("mistralai_azure.basesdk", _retry_loop),
    ("mistralai_gcp.basesdk", _retry_loop),
    ("cohere.core.http_client", _retry_loop),
    # Other GenAI instrumentations of the same calls, said once each (_coexist, docs/coexistence.md).
    ("opentelemetry.instrumentation.genai.openai", _another_instrumentor),
    ("opentelemetry.instrumentation.genai.anthropic", _another_instrumentor),
    ("opentelemetry.instrumentation.genai.bedrock", _another_instrumentor),
    ("opentelemetry.instrumentation.openai_v2", _another_instrumentor),
    ("opentelemetry.instrumentation.openai", _another_instrumentor),
    ("opentelemetry.instrumentation.anthropic", _another_instrumentor),
)


# -- install / uninstall ----------------------------------------------------------------------


def install(
    *,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    capture_content: bool | None = None,
    **options: Any,
) -> bool:
    """Set up the recorder and the import hooks; False (with one warning) when it cannot. Idempotent."""
    from .config import ConfigError, warn

    global _current
    with _lock:
        if _current is not None:
            return True
        problems: list[str] = []
        try:
            installation = _setup(tracer_provider, meter_provider, capture_content, options, problems)
            for problem in dict.fromkeys(problems):  # a bad setting costs that setting, not the rest
                warn(problem)
            if installation is None:
                return False
            _current = installation
            for name, action in _HOOKS:
                installation.when_imported(name, action)
            _settle_gc()
            return True
        except ConfigError as exc:  # what cannot fall back to a default
            warn(f"{exc}; the app runs uninstrumented")
        except Exception as exc:  # never break the app for its telemetry
            log.debug("firsttoken: instrumentation failed", exc_info=True)
            warn(f"instrumentation failed ({exc!r}); the app runs uninstrumented")
        uninstall()
        return False


SETTLE_GC_MAX_BLOCKS = 500_000
"""Below this many allocated memory blocks (an app that has not imported a large package tree yet: firsttoken
and the OpenTelemetry SDK alone are about 75,000), a full collection takes a few milliseconds."""


def _settle_gc() -> None:
    """A full garbage collection right after installing, while it is cheap (docs/overhead.md, "Importing a
    large package tree"). firsttoken, the OpenTelemetry SDK and wrapt leave some 16,000 new long-lived
    objects; CPython runs a full collection once those pending since the last one exceed a quarter of the
    long-lived ones, so without this the app's next full collection came sooner, inside LiteLLM's first
    call in 7 of 7 runs (190-380 ms there). Collected now (about 3 ms when ``instrument()`` runs first),
    they count as long-lived instead, and the app's collections fall where they would without firsttoken.
    Skipped in a process that already holds a large heap, where the collection itself would be long."""
    import gc
    import sys

    try:
        if gc.isenabled() and sys.getallocatedblocks() < SETTLE_GC_MAX_BLOCKS:
            gc.collect()
    except Exception:
        internal_error("the collection after installing failed")


def _setup(
    tracer_provider: TracerProvider | None,
    meter_provider: MeterProvider | None,
    capture_content: bool | None,
    options: dict[str, Any],
    problems: list[str],
) -> Installation | None:
    from opentelemetry import metrics, trace

    from . import _exit, _otlp, config, semconv, streams
    from ._patch import Patches
    from ._version import __version__
    from .providers._common import provider_resolver
    from .recorder import Recorder

    if config.is_disabled(problems=problems):
        log.info("firsttoken: disabled by the environment")
        return None
    settings = config.load(capture_content=capture_content, options=options, problems=problems)
    if tracer_provider is None and meter_provider is None and _otlp.globals_unset():
        export = _otlp.setup(problems=problems)
        tracer_provider, meter_provider = export.tracer_provider, export.meter_provider
    _exit.arm(_otlp.own_export())  # every way the process ends saves what is in memory
    tracer = trace.get_tracer(
        semconv.SCOPE_NAME, __version__, tracer_provider=tracer_provider, schema_url=semconv.SCHEMA_URL
    )
    meter = metrics.get_meter(
        semconv.SCOPE_NAME, __version__, meter_provider=meter_provider, schema_url=semconv.SCHEMA_URL
    )
    recorder = Recorder(tracer, meter, settings)
    streams.start_worker()
    return Installation(
        recorder, provider_resolver(settings.provider_hosts), Patches(), tracer_provider, meter_provider
    )


def uninstall() -> None:
    """Undo every patch and disarm every hook not fired yet. Safe to call when not installed."""
    global _current
    with _lock:
        current, _current = _current, None
        if current is not None:
            current.undo()


# -- flush / shutdown -------------------------------------------------------------------------------


def shutdown_budget(timeout: float | None) -> float:
    """Seconds ``flush()`` and ``shutdown()`` may take: ``timeout``, else ``FIRSTTOKEN_SHUTDOWN_TIMEOUT``."""
    from . import _otlp

    if timeout is not None:
        return timeout
    own = _otlp.own_export()
    return own.shutdown_timeout_s if own is not None else _otlp.SHUTDOWN_TIMEOUT_MS / 1000


def flush(timeout: float | None = None) -> bool:
    """Hand over everything recorded so far: see ``firsttoken.flush``."""
    from opentelemetry import metrics, trace

    from . import _exit, _otlp

    try:
        current = _current
        own = _otlp.own_export()
        tracer_provider: Any = current.tracer_provider if current is not None else None
        meter_provider: Any = current.meter_provider if current is not None else None
        if current is None and own is not None:
            tracer_provider, meter_provider = own.tracer_provider, own.meter_provider
        elif current is not None:
            tracer_provider = tracer_provider or trace.get_tracer_provider()
            meter_provider = meter_provider or metrics.get_meter_provider()
        # The SDK says a flush succeeded once its exporters returned, delivered or not; firsttoken's own
        # exporters know whether the collector took it.
        ours = own is not None and tracer_provider is own.tracer_provider
        if own is not None and ours:
            own.make_exporters()  # on this thread, if anything recorded waits for them
        before = own.undelivered() if own is not None and ours else None
        done = _exit.flush(shutdown_budget(timeout), tracer_provider, meter_provider)
        if own is not None and before is not None:
            after = own.undelivered()
            done = done and after[:2] == before[:2] and after[2] == 0
        return done
    except Exception:
        internal_error("flush failed")
        return False


def close_own(timeout: float | None = None) -> bool:
    """Shut firsttoken's own providers down (after a flush), and give the app its signal handlers back."""
    from . import _exit, _otlp

    try:
        own = _otlp.own_export()
        done = own.close(shutdown_budget(timeout)) if own is not None else True
        _exit.disarm()
        return done
    except Exception:
        internal_error("shutdown failed")
        return False
