"""Settings from keyword arguments and environment variables, validated in one place.

An argument wins over its environment variable, which wins over the default. Anything malformed
raises :class:`ConfigError` naming the setting, the value and what is accepted; ``instrument()``
turns that into one warning and leaves the app uninstrumented rather than crash it.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

ENV_DISABLED = "FIRSTTOKEN_DISABLED"
ENV_CHUNK_METRICS = "FIRSTTOKEN_CHUNK_METRICS"
ENV_PHASE_SPANS = "FIRSTTOKEN_PHASE_SPANS"
ENV_WIRE_PHASES = "FIRSTTOKEN_WIRE_PHASES"
ENV_PROVIDER_HOSTS = "FIRSTTOKEN_PROVIDER_HOSTS"
ENV_CONTENT_MAX_LENGTH = "FIRSTTOKEN_CONTENT_MAX_LENGTH"
ENV_METRIC_VALUE_LIMIT = "FIRSTTOKEN_METRIC_VALUE_LIMIT"
ENV_TAIL_SHARE = "FIRSTTOKEN_TAIL_SHARE"
ENV_CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
ENV_OTEL_SDK_DISABLED = "OTEL_SDK_DISABLED"

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})
# OpenTelemetry Python's content-capture modes; any mode that puts content on spans turns it on.
_CAPTURE_ON = frozenset({"span_only", "span_and_event", "event_only"})
_CAPTURE_OFF = frozenset({"no_content"})

PHASE_SPANS_ALWAYS = "always"
PHASE_SPANS_TAIL = "tail"
PHASE_SPANS_NEVER = "never"
PHASE_SPANS_MODES = (PHASE_SPANS_ALWAYS, PHASE_SPANS_TAIL, PHASE_SPANS_NEVER)
"""When a call gets child spans for its phases: every call, the calls someone will drill into
(slow, failed, retried, paying a slow connection set-up), or none. Booleans mean always / never."""

Redactor = Callable[[str, str], "str | None"]
"""``redact(attribute_name, json_text) -> text to record, or None to drop it``."""


class ConfigError(ValueError):
    """A setting firsttoken cannot use. The message names the setting and what it accepts."""


@dataclass(frozen=True)
class Settings:
    """Validated settings for one ``instrument()``."""

    capture_content: bool = False
    chunk_metrics: bool = False
    phase_spans: str = PHASE_SPANS_TAIL
    wire_phases: bool = True
    provider_hosts: Mapping[str, str] = field(default_factory=dict)
    content_max_length: int = 8192
    redact: Redactor | None = None
    metric_value_limit: int = 100
    """Distinct values each unbounded metric attribute (model names, server address, upstream
    provider, traffic class, action and phase names) may take; later ones are recorded as ``_OTHER``."""
    tail_share: float = 0.25
    """With ``phase_spans="tail"``, the largest share of calls, over time, that get phase spans
    (1 = every call in the tail); the rest of the tail keeps its phase durations as attributes."""


_OPTIONS = {
    "chunk_metrics",
    "phase_spans",
    "wire_phases",
    "provider_hosts",
    "content_max_length",
    "redact",
    "metric_value_limit",
    "tail_share",
}


def _env(name: str, environ: Mapping[str, str]) -> str | None:
    value = environ.get(name)
    return None if value is None else value.strip()


def parse_bool(name: str, raw: str) -> bool:
    low = raw.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ConfigError(f"{name}={raw!r} is not a boolean: use one of true/false, 1/0, yes/no, on/off")


def _bool_option(name: str, env_name: str, value: Any, environ: Mapping[str, str], default: bool) -> bool:
    if value is not None:
        if not isinstance(value, bool):
            raise ConfigError(f"{name}={value!r} must be True or False")
        return value
    raw = _env(env_name, environ)
    return default if raw is None else parse_bool(env_name, raw)


def _number(
    name: str, env_name: str, value: Any, environ: Mapping[str, str], kinds: tuple[type, ...],
    not_env: str, not_value: str,
) -> tuple[Any, str] | None:  # fmt: skip
    """The keyword option, else the variable read with ``kinds[0]``, and where it came from (for
    messages); None when neither is set. ``not_env`` / ``not_value`` end the message for a variable
    that does not parse / a keyword value of another type."""
    if value is None:
        raw = _env(env_name, environ)
        if raw is None:
            return None
        try:
            return kinds[0](raw), f"{env_name}={raw!r}"
        except ValueError:
            raise ConfigError(f"{env_name}={raw!r} {not_env}") from None
    if isinstance(value, kinds) and not isinstance(value, bool):
        return kinds[0](value), f"{name}={value!r}"
    raise ConfigError(f"{name}={value!r} {not_value}")


def _int_option(
    name: str, env_name: str, value: Any, environ: Mapping[str, str], default: int, minimum: int, below: str
) -> int:
    """The keyword option, else the variable, else ``default``; at least ``minimum`` (else ``below`` says why)."""
    found = _number(name, env_name, value, environ, (int,), "is not an integer", "must be an integer")
    if found is None:
        return default
    number, where = found
    if number < minimum:
        raise ConfigError(f"{where} {below}")
    return int(number)


def _share_option(name: str, env_name: str, value: Any, environ: Mapping[str, str], default: float) -> float:
    """The keyword option, else the variable, else ``default``: a number above 0 and at most 1."""
    found = _number(
        name, env_name, value, environ, (float, int),
        "is not a number: use a share above 0 and at most 1", "must be a number above 0 and at most 1",
    )  # fmt: skip
    if found is None:
        return default
    number, where = found
    if not 0.0 < number <= 1.0:
        raise ConfigError(f"{where} is out of range: use a share above 0 and at most 1 (0.25 is a quarter)")
    return float(number)


def _phase_spans(value: Any, environ: Mapping[str, str]) -> str:
    if value is None:
        raw = _env(ENV_PHASE_SPANS, environ)
        if raw is None:
            return PHASE_SPANS_TAIL
        low = raw.lower()
        if low in PHASE_SPANS_MODES:
            return low
        if low in _TRUE or low in _FALSE:
            return PHASE_SPANS_ALWAYS if low in _TRUE else PHASE_SPANS_NEVER
        raise ConfigError(
            f"{ENV_PHASE_SPANS}={raw!r} is not understood: use always, tail or never (true/false mean always/never)"
        )
    if isinstance(value, bool):
        return PHASE_SPANS_ALWAYS if value else PHASE_SPANS_NEVER
    if isinstance(value, str) and value in PHASE_SPANS_MODES:
        return value
    raise ConfigError(f"phase_spans={value!r} must be 'always', 'tail' or 'never' (or True / False)")


def parse_capture_content(raw: str) -> bool:
    low = raw.strip().lower()
    if low in _TRUE or low in _CAPTURE_ON:
        return True
    if low in _FALSE or low in _CAPTURE_OFF:
        return False
    raise ConfigError(
        f"{ENV_CAPTURE_CONTENT}={raw!r} is not understood: use true/false or one of "
        "NO_CONTENT, SPAN_ONLY, EVENT_ONLY, SPAN_AND_EVENT"
    )


def parse_provider_hosts(raw: str) -> dict[str, str]:
    hosts: dict[str, str] = {}
    for item in raw.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, provider = item.partition("=")
        if not sep or not host.strip() or not provider.strip():
            raise ConfigError(
                f"{ENV_PROVIDER_HOSTS} entry {item!r} is not host=provider "
                "(example: llm.internal=vllm,api.example.com=example)"
            )
        hosts[host.strip().lower()] = provider.strip()
    return hosts


def is_disabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment switches firsttoken (or the whole OpenTelemetry SDK) off."""
    env = os.environ if environ is None else environ
    for name in (ENV_DISABLED, ENV_OTEL_SDK_DISABLED):
        raw = _env(name, env)
        if raw is not None and parse_bool(name, raw):
            return True
    return False


def load(
    *,
    capture_content: bool | None = None,
    options: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Build :class:`Settings` from ``instrument()`` arguments and the environment."""
    env = os.environ if environ is None else environ
    opts = dict(options or {})
    unknown = sorted(set(opts) - _OPTIONS)
    if unknown:
        raise ConfigError(
            f"unknown option(s) {', '.join(unknown)}; firsttoken.instrument() accepts "
            f"capture_content, {', '.join(sorted(_OPTIONS))}"
        )

    if capture_content is not None:
        if not isinstance(capture_content, bool):
            raise ConfigError(f"capture_content={capture_content!r} must be True or False")
        capture = capture_content
    else:
        raw = _env(ENV_CAPTURE_CONTENT, env)
        capture = False if raw is None else parse_capture_content(raw)

    hosts_opt = opts.get("provider_hosts")
    if hosts_opt is None:
        raw = _env(ENV_PROVIDER_HOSTS, env)
        hosts = {} if raw is None else parse_provider_hosts(raw)
    elif isinstance(hosts_opt, Mapping) and all(
        isinstance(k, str) and isinstance(v, str) and k and v for k, v in hosts_opt.items()
    ):
        hosts = {k.lower(): v for k, v in hosts_opt.items()}
    else:
        raise ConfigError(f"provider_hosts={hosts_opt!r} must map host names to provider names")

    max_len = _int_option(
        "content_max_length", ENV_CONTENT_MAX_LENGTH, opts.get("content_max_length"), env,
        Settings.content_max_length, 16, "is too small: use at least 16 characters",
    )  # fmt: skip
    value_limit = _int_option(
        "metric_value_limit", ENV_METRIC_VALUE_LIMIT, opts.get("metric_value_limit"), env,
        Settings.metric_value_limit, 1, "must be an integer of at least 1",
    )  # fmt: skip

    redact = opts.get("redact")
    if redact is not None and not callable(redact):
        raise ConfigError(f"redact={redact!r} must be a callable (attribute_name, text) -> text | None")

    return Settings(
        capture_content=capture,
        chunk_metrics=_bool_option("chunk_metrics", ENV_CHUNK_METRICS, opts.get("chunk_metrics"), env, False),
        phase_spans=_phase_spans(opts.get("phase_spans"), env),
        wire_phases=_bool_option("wire_phases", ENV_WIRE_PHASES, opts.get("wire_phases"), env, True),
        provider_hosts=hosts,
        content_max_length=max_len,
        redact=redact,
        metric_value_limit=value_limit,
        tail_share=_share_option("tail_share", ENV_TAIL_SHARE, opts.get("tail_share"), env, Settings.tail_share),
    )


class FirstTokenWarning(UserWarning):
    """firsttoken could not do something it was asked to; the app runs on, unmeasured there."""


# Frames of these packages are between the app and a warning; it is reported at the app's line.
_NOT_THE_APP = ("firsttoken", "openai", "anthropic", "httpx", "httpx2", "httpcore", "wrapt", "opentelemetry", "logfire")


def _app_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside firsttoken, the SDKs and OpenTelemetry (whose
    instrumentor calls ``_instrument``), counted from the caller of :func:`warn`."""
    frame: FrameType | None = sys._getframe(2)
    level = 2
    while frame is not None:
        module = str(frame.f_globals.get("__name__", ""))
        if module.partition(".")[0] not in _NOT_THE_APP:
            return level
        frame = frame.f_back
        level += 1
    return 2


def warn(message: str) -> None:
    """One clear warning, reported at the app's line that led to it (``logging.captureWarnings(True)``
    routes it to the app's logs)."""
    warnings.warn(f"firsttoken: {message}", FirstTokenWarning, stacklevel=_app_stacklevel())
