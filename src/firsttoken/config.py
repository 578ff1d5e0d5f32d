"""Settings from keyword arguments and environment variables, validated in one place.

An argument wins over its environment variable, which wins over the default. Anything malformed
is a :class:`ConfigError` naming the setting, the value and what is accepted. Given a list of
``problems`` (as ``instrument()`` gives), a malformed setting instead falls back to its default and
its message goes on the list, so that one typo costs that setting, not all telemetry (as the
OpenTelemetry SDK treats a bad ``OTEL_*`` value); ``instrument()`` warns once per problem.
"""

from __future__ import annotations

import difflib
import os
import sys
import urllib.parse
import warnings
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from functools import partial
from types import FrameType
from typing import Any, TypeVar

from . import targets as tg

T = TypeVar("T")

ENV_DISABLED = "FIRSTTOKEN_DISABLED"
ENV_CHUNK_METRICS = "FIRSTTOKEN_CHUNK_METRICS"
ENV_PHASE_SPANS = "FIRSTTOKEN_PHASE_SPANS"
ENV_WIRE_PHASES = "FIRSTTOKEN_WIRE_PHASES"
ENV_PROVIDER_HOSTS = "FIRSTTOKEN_PROVIDER_HOSTS"
ENV_CONTENT_MAX_LENGTH = "FIRSTTOKEN_CONTENT_MAX_LENGTH"
ENV_METRIC_VALUE_LIMIT = "FIRSTTOKEN_METRIC_VALUE_LIMIT"
ENV_TAIL_SHARE = "FIRSTTOKEN_TAIL_SHARE"
ENV_SHUTDOWN_TIMEOUT = "FIRSTTOKEN_SHUTDOWN_TIMEOUT"
ENV_TARGETS = "FIRSTTOKEN_TARGETS"
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
    targets: tg.Targets = tg.SHIPPED
    """The latency targets a call is slow over, by traffic class: those of the ``targets`` file
    (a checkout's prometheus/slos.yml, the Collector's too) or, by default, the package's."""


ENV_SETTINGS = (
    ENV_DISABLED,
    ENV_CHUNK_METRICS,
    ENV_PHASE_SPANS,
    ENV_WIRE_PHASES,
    ENV_PROVIDER_HOSTS,
    ENV_CONTENT_MAX_LENGTH,
    ENV_METRIC_VALUE_LIMIT,
    ENV_TAIL_SHARE,
    ENV_SHUTDOWN_TIMEOUT,
    ENV_TARGETS,
)
"""Every ``FIRSTTOKEN_*`` variable ``instrument()`` reads."""

_OPTIONS = {
    "chunk_metrics",
    "phase_spans",
    "wire_phases",
    "provider_hosts",
    "content_max_length",
    "redact",
    "metric_value_limit",
    "tail_share",
    "targets",
}


def or_default(problems: list[str] | None, read: Callable[[], T], default: T, said: str | None = None) -> T:
    """``read()``. When it finds its setting malformed: raise, or, given a list of ``problems``, add
    the message to it (ending with the default used, ``said`` or the default's repr) and use ``default``."""
    try:
        return read()
    except ConfigError as exc:
        if problems is None:
            raise
        problems.append(f"{exc}; using the default, {default!r}" if said is None else f"{exc}; using {said}")
        return default


def _closest(name: str, names: Collection[str]) -> str:
    """`` (did you mean X?)`` naming the real name closest to a misspelt ``name``, or nothing."""
    found = difflib.get_close_matches(name, sorted(names), n=1, cutoff=0.6)
    return f" (did you mean {found[0]}?)" if found else ""


_PREFIX = "FIRSTTOKEN_"


def _under_a_misspelt_prefix(upper: str) -> str | None:
    """The setting an upper-cased variable name is, under a near miss of the ``FIRSTTOKEN_`` prefix
    (``FIRSTOKEN_``, ``FIRST_TOKEN_``, ``FIRSTTOKEN``), or ``None``."""
    for setting in ENV_SETTINGS:
        rest = setting[len(_PREFIX) :]
        if upper.endswith(rest):
            head = upper[: -len(rest)]
            if head and difflib.SequenceMatcher(None, head, _PREFIX).ratio() >= 0.8:
                return setting
    return None


def misspelt_variables(environ: Mapping[str, str]) -> list[str]:
    """One message per variable that is close to a real setting's name but is not one: a near miss of
    a setting after the prefix (``FIRSTTOKEN_PHASESPANS``), or a setting after a near miss of the prefix
    (``FIRST_TOKEN_PHASE_SPANS``): it would be silently ignored. Names far from every setting (the
    project's own test and build variables, an app's) are left alone. A few string comparisons per
    variable, once per ``instrument()``."""
    messages = []
    for name in sorted(environ):
        if name in ENV_SETTINGS:
            continue
        upper = name.upper()
        if upper.startswith(_PREFIX):
            found = difflib.get_close_matches(upper, ENV_SETTINGS, n=1, cutoff=0.8)
            meant = found[0] if found else None
        else:
            meant = _under_a_misspelt_prefix(upper)
        if meant is not None:
            messages.append(f"{name} is not a firsttoken setting and is ignored: did you mean {meant}?")
    return messages


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


def is_disabled(environ: Mapping[str, str] | None = None, problems: list[str] | None = None) -> bool:
    """Whether the environment switches firsttoken (or the whole OpenTelemetry SDK) off. A value that
    is not a boolean does not (the default), said in ``problems`` when given, else raised."""
    env = os.environ if environ is None else environ
    for name in (ENV_DISABLED, ENV_OTEL_SDK_DISABLED):
        raw = _env(name, env)
        if raw is not None and or_default(problems, partial(parse_bool, name, raw), False, "false"):
            return True
    return False


def load(
    *,
    capture_content: bool | None = None,
    options: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    problems: list[str] | None = None,
) -> Settings:
    """Build :class:`Settings` from ``instrument()`` arguments and the environment. With a list of
    ``problems``, a malformed setting falls back to its default and says so there (see the module);
    without, it raises :class:`ConfigError`."""
    env = os.environ if environ is None else environ
    opts = dict(options or {})
    unknown = sorted(set(opts) - _OPTIONS)
    if unknown:
        said = "; ".join(f"{name}{_closest(name, _OPTIONS | {'capture_content'})}" for name in unknown)
        message = (
            f"unknown option(s) {said}; firsttoken.instrument() accepts capture_content, {', '.join(sorted(_OPTIONS))}"
        )
        if problems is None:
            raise ConfigError(message)
        problems.append(f"{message}; ignored")
        for name in unknown:
            del opts[name]
    if problems is not None:
        problems.extend(misspelt_variables(env))

    def capture() -> bool:
        if capture_content is not None:
            if not isinstance(capture_content, bool):
                raise ConfigError(f"capture_content={capture_content!r} must be True or False")
            return capture_content
        raw = _env(ENV_CAPTURE_CONTENT, env)
        return False if raw is None else parse_capture_content(raw)

    def hosts() -> dict[str, str]:
        hosts_opt = opts.get("provider_hosts")
        if hosts_opt is None:
            raw = _env(ENV_PROVIDER_HOSTS, env)
            return {} if raw is None else parse_provider_hosts(raw)
        if isinstance(hosts_opt, Mapping) and all(
            isinstance(k, str) and isinstance(v, str) and k and v for k, v in hosts_opt.items()
        ):
            return {k.lower(): v for k, v in hosts_opt.items()}
        raise ConfigError(f"provider_hosts={hosts_opt!r} must map host names to provider names")

    def redact() -> Redactor | None:
        value = opts.get("redact")
        if value is not None and not callable(value):
            raise ConfigError(f"redact={value!r} must be a callable (attribute_name, text) -> text | None")
        return value

    def max_length() -> int:
        return _int_option(
            "content_max_length", ENV_CONTENT_MAX_LENGTH, opts.get("content_max_length"), env,
            Settings.content_max_length, 16, "is too small: use at least 16 characters",
        )  # fmt: skip

    def value_limit() -> int:
        return _int_option(
            "metric_value_limit", ENV_METRIC_VALUE_LIMIT, opts.get("metric_value_limit"), env,
            Settings.metric_value_limit, 1, "must be an integer of at least 1",
        )  # fmt: skip

    def targets() -> tg.Targets:
        value = opts.get("targets")
        name, raw = ("targets", value) if value is not None else (ENV_TARGETS, _env(ENV_TARGETS, env))
        if raw is None or raw == "":
            return tg.SHIPPED
        if not isinstance(raw, (str, os.PathLike)):
            raise ConfigError(f"{name}={raw!r} must be the path of a targets file (a checkout's prometheus/slos.yml)")
        try:
            return tg.load(os.fspath(raw))
        except tg.TargetsError as exc:
            raise ConfigError(f"{name}: {'; '.join(exc.lines)}") from None

    d = Settings()
    p = problems
    capturing = or_default(p, capture, d.capture_content, "no content capture")
    # A redactor that cannot be used must not mean content recorded unredacted: none is recorded.
    redactor = or_default(p, redact, None, "no content capture (a redactor was meant to run)")
    if opts.get("redact") is not None and redactor is None:
        capturing = False
    chunks = partial(_bool_option, "chunk_metrics", ENV_CHUNK_METRICS, opts.get("chunk_metrics"), env, False)
    wire = partial(_bool_option, "wire_phases", ENV_WIRE_PHASES, opts.get("wire_phases"), env, True)
    share = partial(_share_option, "tail_share", ENV_TAIL_SHARE, opts.get("tail_share"), env, d.tail_share)
    return Settings(
        capture_content=capturing,
        chunk_metrics=or_default(p, chunks, d.chunk_metrics),
        phase_spans=or_default(p, partial(_phase_spans, opts.get("phase_spans"), env), d.phase_spans),
        wire_phases=or_default(p, wire, d.wire_phases),
        provider_hosts=or_default(p, hosts, {}, "no host mapping beyond the built-in one"),
        content_max_length=or_default(p, max_length, d.content_max_length),
        redact=redactor,
        metric_value_limit=or_default(p, value_limit, d.metric_value_limit),
        tail_share=or_default(p, share, d.tail_share),
        targets=or_default(p, targets, d.targets, "the package's default targets"),
    )


class FirstTokenWarning(UserWarning):
    """firsttoken could not do something it was asked to; the app runs on, unmeasured there."""


# Frames of these packages are between the app and a warning; it is reported at the app's line.
_NOT_THE_APP = (
    *("firsttoken", "wrapt", "opentelemetry", "logfire"),
    *("openai", "anthropic", "groq", "mistralai", "mistralai_azure", "mistralai_gcp", "cohere", "google"),
    *("httpx", "httpx2", "httpcore", "httpcore2", "aiohttp", "requests", "urllib3", "tenacity"),
)


def _app_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside firsttoken, the SDKs, their HTTP clients and
    OpenTelemetry (whose instrumentor calls ``_instrument``), counted from the caller of :func:`warn`."""
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


_SECRET_PARTS = ("key", "token", "secret", "password", "passwd", "pwd", "auth", "credential", "signature", "session")
_SECRET_NAMES = frozenset({"sig", "pass", "code", "jwt"})
REDACTED = "REDACTED"


def _secret_name(name: str) -> bool:
    normal = urllib.parse.unquote_plus(name).lower().replace("-", "").replace("_", "")
    return normal in _SECRET_NAMES or any(part in normal for part in _SECRET_PARTS)


def redact(url: str) -> str:
    """``url`` as a message may name it: the user and password before ``@`` and the values of
    credential-like query parameters (names containing key, token, secret, password, passwd, pwd,
    auth, credential, signature or session, or named sig, pass, code or jwt, in any case, ignoring
    ``-`` and ``_``) replaced by ``REDACTED`` (docs/configuration.md). With or without a scheme."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    rest, hash_, fragment = rest.partition("#")
    rest, question, query = rest.partition("?")
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        authority = f"{REDACTED}@{authority.rpartition('@')[2]}"
    if query:
        params = []
        for param in query.split("&"):
            name, eq, _value = param.partition("=")
            params.append(f"{name}={REDACTED}" if eq and _secret_name(name) else param)
        query = "&".join(params)
    return f"{scheme}{sep}{authority}{slash}{path}{question}{query}{hash_}{fragment}"
