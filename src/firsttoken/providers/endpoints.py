"""Who served a call: ``gen_ai.provider.name`` from the endpoint, refined by what the response says.

Most traffic through the ``openai`` SDK does not go to OpenAI. The provider is worked out in this
order, and recorded with where it came from (``firsttoken.provider.source``):

1. ``config``: the user's ``provider_hosts`` (``FIRSTTOKEN_PROVIDER_HOSTS``), by ``host:port`` or host;
2. ``host``: the host names of known providers and gateways (:data:`KNOWN_HOSTS`,
   :data:`KNOWN_SUFFIXES`), with the GenAI conventions' well-known values where they have one;
3. ``response``: for any other host (loopback, private, a self-hosted server behind a public
   name), evidence in the response that names the server software: llama.cpp's ``Server:
   llama.cpp`` header and ``timings`` field, TGI's ``x-compute-type`` header, LiteLLM's and
   Portkey's gateway headers, Ollama's ``system_fingerprint: fp_ollama``, vLLM's
   ``kv_transfer_params``/``prompt_logprobs`` fields, SGLang's ``matched_stop`` (see
   docs/providers.md for where each was verified);
4. ``sdk``: the SDK's own name (``openai`` or ``anthropic``) when nothing above says otherwise.

An endpoint is resolved once per SDK client (its base URL); what a response teaches is kept on the
:class:`Endpoint`, so later calls to it start with the right name. Behind a gateway the provider is
the gateway, and the upstream provider (``firsttoken.upstream.provider``) is read from each
response where the gateway says which one answered.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from .. import semconv as sc
from ..timeline import Timeline


def get(obj: Any, name: str) -> Any:
    """A field of an SDK model or a plain dict."""
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


# Hosts of well-known providers (values from the GenAI conventions' list where it has them).
KNOWN_HOSTS: Mapping[str, str] = {
    "api.openai.com": "openai",
    "api.anthropic.com": "anthropic",
    "api.groq.com": "groq",
    "api.deepseek.com": "deepseek",
    "api.mistral.ai": "mistral_ai",
    "api.x.ai": "x_ai",
    "api.perplexity.ai": "perplexity",
    "api.cohere.ai": "cohere",
    "api.cohere.com": "cohere",
    "api.moonshot.ai": "moonshot_ai",
    "generativelanguage.googleapis.com": "gcp.gemini",
    "api.cerebras.ai": "cerebras",
    "api.fireworks.ai": "fireworks",
    "api.together.xyz": "together",
    "api.together.ai": "together",
    "openrouter.ai": "openrouter",
    "api.portkey.ai": "portkey",
    "gateway.ai.cloudflare.com": "cloudflare.ai_gateway",
}
KNOWN_SUFFIXES: tuple[tuple[str, str], ...] = (
    (".openai.azure.com", "azure.ai.openai"),
    (".cognitiveservices.azure.com", "azure.ai.openai"),
    (".services.ai.azure.com", "azure.ai.inference"),
    (".models.ai.azure.com", "azure.ai.inference"),
    ("aiplatform.googleapis.com", "gcp.vertex_ai"),
    (".amazonaws.com", "aws.bedrock"),
    (".api.aws", "aws.bedrock"),  # bedrock-mantle.{region}.api.aws: Bedrock's OpenAI-compatible endpoint
)

GATEWAYS = frozenset({"openrouter", "litellm", "portkey", "cloudflare.ai_gateway"})
"""Providers that forward calls to others: the upstream provider is recorded when they say it."""

SOURCE_CONFIG = "config"
SOURCE_HOST = "host"
SOURCE_RESPONSE = "response"
SOURCE_SDK = "sdk"

# Self-hosted server software, named as firsttoken records it.
LLAMA_CPP = "llama.cpp"
VLLM = "vllm"
SGLANG = "sglang"
OLLAMA = "ollama"
TGI = "tgi"
LITELLM = "litellm"
PORTKEY = "portkey"


def is_private(host: str) -> bool:
    """Loopback, private, link-local addresses, ``localhost``, ``*.local``/``*.internal``, single labels."""
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith((".localhost", ".local", ".internal", ".lan")):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return "." not in host  # a container or cluster service name (vllm, llm-server)
    return address.is_private or address.is_loopback or address.is_link_local


def provider_of_host(host: str) -> str | None:
    """The provider a host name belongs to, from the known hosts and suffixes."""
    host = host.lower()
    found = KNOWN_HOSTS.get(host)
    if found:
        return found
    for suffix, name in KNOWN_SUFFIXES:
        if host.endswith(suffix):
            return name
    return None


class Endpoint:
    """One server an SDK client talks to, and what is known about who runs it."""

    __slots__ = ("gateway", "host", "port", "private", "provider", "settled", "source", "upstream")

    def __init__(self, host: str | None, port: int | None, provider: str, source: str) -> None:
        self.host = host
        self.port = port
        self.provider = provider
        self.source = source
        self.private = bool(host) and is_private(host or "")
        self.settled = source in (SOURCE_CONFIG, SOURCE_HOST)
        """Whether responses can still change the provider (not when configured or a known host)."""
        self.gateway = provider in GATEWAYS
        self.upstream: str | None = None
        """The upstream provider a gateway's base URL names (Cloudflare AI Gateway's path)."""

    def learn(self, provider: str) -> None:
        self.provider = provider
        self.source = SOURCE_RESPONSE
        self.settled = True

    def __repr__(self) -> str:
        return f"<Endpoint {self.host}:{self.port} {self.provider} ({self.source})>"


class Resolver:
    """``provider_of(host, default)`` and, per client, the :class:`Endpoint` behind a base URL."""

    def __init__(self, overrides: Mapping[str, str] | None = None) -> None:
        self.overrides = {k.lower(): v for k, v in (overrides or {}).items()}
        self._endpoints: dict[tuple[str | None, int | None, str], Endpoint] = {}

    def __call__(self, host: str | None, default: str) -> str:
        return self.endpoint(host, None, default).provider

    def endpoint(self, host: str | None, port: int | None, default: str, path: str = "") -> Endpoint:
        """The endpoint at ``host:port`` for an SDK whose own provider name is ``default``."""
        key = (host, port, default)
        found = self._endpoints.get(key)
        if found is not None:
            return found
        endpoint = self._resolve(host, port, default)
        if endpoint.provider == "cloudflare.ai_gateway":
            endpoint.upstream = _cloudflare_upstream(path)
        if len(self._endpoints) >= 1024:  # hosts made up per call: start over rather than grow
            self._endpoints = {}
        self._endpoints[key] = endpoint
        return endpoint

    def _resolve(self, host: str | None, port: int | None, default: str) -> Endpoint:
        if not host:
            return Endpoint(host, port, default, SOURCE_SDK)
        low = host.lower()
        configured = (self.overrides.get(f"{low}:{port}") if port is not None else None) or self.overrides.get(low)
        if configured:
            return Endpoint(host, port, configured, SOURCE_CONFIG)
        known = provider_of_host(low)
        if known:
            return Endpoint(host, port, known, SOURCE_HOST)
        return Endpoint(host, port, default, SOURCE_SDK)


def _cloudflare_upstream(path: str) -> str | None:
    """``/v1/{account}/{gateway}/{provider}/...``: the provider segment (``compat`` names none)."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 4 and parts[0] == "v1" and parts[3] != "compat":
        return _CLOUDFLARE_PROVIDERS.get(parts[3], parts[3])
    return None


# Cloudflare AI Gateway's provider path segments whose GenAI name differs.
_CLOUDFLARE_PROVIDERS = {
    "azure-openai": "azure.ai.openai",
    "aws-bedrock": "aws.bedrock",
    "google-ai-studio": "gcp.gemini",
    "google-vertex-ai": "gcp.vertex_ai",
    "mistral": "mistral_ai",
    "grok": "x_ai",
    "perplexity-ai": "perplexity",
}


# -- evidence in responses ---------------------------------------------------------------------


def _software_in_headers(hints: Mapping[str, str]) -> str | None:
    server = hints.get("server", "").lower()
    if server.startswith("llama.cpp"):
        return LLAMA_CPP
    if "x-compute-type" in hints:
        return TGI
    if "x-litellm-model-id" in hints or "x-litellm-model-api-base" in hints:
        return LITELLM
    if "x-portkey-provider" in hints:  # Portkey's gateway, self-hosted (its hosted one is a known host)
        return PORTKEY
    return None


def _extra(obj: Any) -> Mapping[str, Any]:
    """Fields a response has beyond the SDK's model (all of a plain dict)."""
    if isinstance(obj, Mapping):
        return obj
    extra = getattr(obj, "model_extra", None)
    return extra if isinstance(extra, Mapping) else {}


def _software_in_body(obj: Any) -> str | None:
    if obj is None:
        return None
    extra = _extra(obj)
    if "timings" in extra:
        return LLAMA_CPP
    if "kv_transfer_params" in extra or "prompt_logprobs" in extra:
        return VLLM
    if get(obj, "system_fingerprint") == "fp_ollama":
        return OLLAMA
    choices = get(obj, "choices")
    if choices:
        choice_extra = _extra(choices[0])
        if "matched_stop" in choice_extra:
            return SGLANG
        if "stop_reason" in choice_extra:
            return VLLM
    return None


def refine(tl: Timeline, obj: Any = None) -> None:
    """Apply what a response (its headers, and ``obj``: a whole result or final chunk) says.

    Called once per call, when the result or the stream's final item is read; cheap when the
    endpoint is settled.
    """
    endpoint = tl.endpoint
    if endpoint is None:
        return
    hints = tl.hints
    if endpoint.gateway:
        _upstream(tl, endpoint, obj, hints)
        return
    if endpoint.settled:
        return
    found = (_software_in_headers(hints) if hints else None) or _software_in_body(obj)
    if found is None:
        return
    if found in (LITELLM, PORTKEY):
        endpoint.gateway = True
        _upstream(tl, endpoint, obj, hints)
    endpoint.learn(found)
    tl.provider = found
    tl.extra[sc.GEN_AI_PROVIDER_NAME] = found
    tl.extra[sc.FT_PROVIDER_SOURCE] = SOURCE_RESPONSE


def _upstream(tl: Timeline, endpoint: Endpoint, obj: Any, hints: Mapping[str, str] | None) -> None:
    upstream: str | None = endpoint.upstream
    if upstream is None and obj is not None:
        named = _extra(obj).get("provider")  # OpenRouter: the provider that served the request
        if isinstance(named, str) and named:
            upstream = named
    if upstream is None and hints:
        api_base = hints.get("x-litellm-model-api-base")
        if api_base:
            host = api_base.split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0]
            upstream = provider_of_host(host) or (SELF_HOSTED if is_private(host) else host)
    if upstream is None and hints:
        named = hints.get("x-portkey-provider")  # Portkey: the provider of the target that served
        if named:
            upstream = _PORTKEY_PROVIDERS.get(named, named)
    if upstream:
        tl.extra[sc.FT_UPSTREAM_PROVIDER] = upstream


# Portkey's provider names (its gateway's src/globals.ts) whose GenAI name differs.
_PORTKEY_PROVIDERS = {
    "azure-openai": "azure.ai.openai",
    "azure-ai": "azure.ai.inference",
    "bedrock": "aws.bedrock",
    "google": "gcp.gemini",
    "vertex-ai": "gcp.vertex_ai",
    "mistral-ai": "mistral_ai",
    "perplexity-ai": "perplexity",
    "together-ai": "together",
    "fireworks-ai": "fireworks",
    "x-ai": "x_ai",
    "moonshot": "moonshot_ai",
}

SELF_HOSTED = "self_hosted"
"""The upstream of a gateway when its api base is a private host: some self-hosted server."""
