"""Who served a call, and what the server says about its own time: one test per row of docs/providers.md.

Host rows are checked on the resolver; server and gateway rows replay a response recorded against
the real service (here, or by others in public repositories: each cassette's ``note`` names the
repository, path and commit) through the real openai SDK, over a real socket, and read the call
span. One cassette is shaped, and says so: vLLM's ``metrics``, which no public recording carries.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anthropic
import openai
import pytest
import yaml

import firsttoken
from firsttoken import semconv as sc
from firsttoken.config import ConfigError, load
from firsttoken.providers.endpoints import Resolver, is_private
from firsttoken.sim import LatencyModel, Simulator

from .conftest import Telemetry

RECORDINGS = Path(__file__).parent / "recordings" / "endpoints"
FAST = LatencyModel(queue_ms=1, decode_tokens_per_s=2000, jitter=0)

HOSTS = [
    ("api.openai.com", "openai"),
    ("api.anthropic.com", "anthropic"),
    ("my-resource.openai.azure.com", "azure.ai.openai"),
    ("my-resource.cognitiveservices.azure.com", "azure.ai.openai"),
    ("my-project.services.ai.azure.com", "azure.ai.inference"),
    ("my-endpoint.eastus2.models.ai.azure.com", "azure.ai.inference"),
    ("api.groq.com", "groq"),
    ("api.cerebras.ai", "cerebras"),
    ("api.together.xyz", "together"),
    ("api.together.ai", "together"),
    ("api.fireworks.ai", "fireworks"),
    ("api.deepseek.com", "deepseek"),
    ("api.mistral.ai", "mistral_ai"),
    ("api.x.ai", "x_ai"),
    ("api.perplexity.ai", "perplexity"),
    ("api.cohere.ai", "cohere"),
    ("api.cohere.com", "cohere"),
    ("api.moonshot.ai", "moonshot_ai"),
    ("generativelanguage.googleapis.com", "gcp.gemini"),
    ("us-central1-aiplatform.googleapis.com", "gcp.vertex_ai"),
    ("bedrock-runtime.us-east-1.amazonaws.com", "aws.bedrock"),
    ("bedrock-mantle.us-east-1.api.aws", "aws.bedrock"),
    ("openrouter.ai", "openrouter"),
    ("api.portkey.ai", "portkey"),
    ("gateway.ai.cloudflare.com", "cloudflare.ai_gateway"),
]


@pytest.mark.parametrize(("host", "provider"), HOSTS)
def test_known_hosts(host: str, provider: str) -> None:
    endpoint = Resolver().endpoint(host, 443, "openai")
    assert (endpoint.provider, endpoint.source, endpoint.settled) == (provider, "host", True)
    assert Resolver().endpoint(host.upper(), 443, "openai").provider == provider


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "10.1.2.3", "192.168.0.7", "::1", "vllm", "llm.internal"])
def test_private_hosts_keep_the_sdk_name_until_a_response_says_otherwise(host: str) -> None:
    assert is_private(host)
    endpoint = Resolver().endpoint(host, 8080, "anthropic")
    assert (endpoint.provider, endpoint.source, endpoint.settled) == ("anthropic", "sdk", False)


def test_public_unknown_host_is_not_private() -> None:
    assert not is_private("llm.example.com")
    assert not is_private("8.8.8.8")
    assert Resolver().endpoint("llm.example.com", 443, "openai").source == "sdk"


def test_config_by_host_and_port_wins_over_host_and_default() -> None:
    resolver = Resolver({"127.0.0.1:8080": "llama.cpp", "127.0.0.1": "vllm", "api.groq.com": "my-groq"})
    assert resolver.endpoint("127.0.0.1", 8080, "openai").provider == "llama.cpp"
    assert resolver.endpoint("127.0.0.1", 8000, "openai").provider == "vllm"
    assert resolver.endpoint("api.groq.com", 443, "openai").provider == "my-groq"
    assert resolver.endpoint("127.0.0.1", 8000, "openai").source == "config"
    assert resolver("127.0.0.1", "openai") == "vllm"


def test_env_override_is_parsed_and_bad_entries_get_one_error() -> None:
    settings = load(environ={"FIRSTTOKEN_PROVIDER_HOSTS": "127.0.0.1:8080=llama.cpp, llm.internal=vllm"})
    assert settings.provider_hosts == {"127.0.0.1:8080": "llama.cpp", "llm.internal": "vllm"}
    with pytest.raises(ConfigError, match="FIRSTTOKEN_PROVIDER_HOSTS"):
        load(environ={"FIRSTTOKEN_PROVIDER_HOSTS": "llm.internal"})


@pytest.mark.parametrize(
    ("path", "upstream"),
    [
        ("/v1/acct/gw/openai", "openai"),
        ("/v1/acct/gw/workers-ai", "workers-ai"),
        ("/v1/acct/gw/google-ai-studio/v1beta", "gcp.gemini"),
        ("/v1/acct/gw/compat", None),
    ],
)
def test_cloudflare_gateway_upstream_comes_from_the_base_url(path: str, upstream: str | None) -> None:
    endpoint = Resolver().endpoint("gateway.ai.cloudflare.com", 443, "openai", path)
    assert endpoint.gateway and endpoint.upstream == upstream


# -- responses ----------------------------------------------------------------------------------


def _to_simulator(sdk: ModuleType, url: str) -> Any:
    """An HTTP client for ``sdk`` that sends every request to the simulator at ``url``, whatever host the
    SDK's base URL names. It is of the httpx flavour the SDK's own client is (httpx or httpx2)."""
    http = importlib.import_module(sdk.DefaultHttpxClient.__mro__[1].__module__.split(".")[0])
    target = http.URL(url)

    class ToSimulator(http.BaseTransport):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            self._inner = http.HTTPTransport()

        def handle_request(self, request: Any) -> Any:
            request.url = request.url.copy_with(scheme=target.scheme, host=target.host, port=target.port)
            return self._inner.handle_request(request)

        def close(self) -> None:
            self._inner.close()

    return http.Client(transport=ToSimulator())


def _replay(cassette: Path, calls: int = 1, t: Telemetry | None = None) -> list[dict[str, Any]]:
    """Replay a cassette's request ``calls`` times through the real SDK (anthropic for ``/v1/messages``, openai's
    ``AzureOpenAI`` for an Azure OpenAI deployment URL, else ``OpenAI``); the call spans' attributes.

    The client's base URL is the recorded one (``https://api.groq.com/openai/v1``, ``http://localhost:11434/v1``),
    so firsttoken sees the host the recording was made against; its transport carries the bytes to the simulator.
    """
    data = yaml.safe_load(cassette.read_text())
    request = data["interactions"][0]["request"]
    body = json.loads(request["body"])
    uri = urlsplit(request["uri"])
    messages_api = uri.path.endswith("/v1/messages")  # Anthropic's; the rest are chat completions
    base_url = request["uri"].split("?", 1)[0].rsplit("/v1/messages" if messages_api else "/chat/completions", 1)[0]
    # Azure OpenAI's deployment URLs (``/openai/deployments/{name}/chat/completions?api-version=...``) go through
    # the SDK's own AzureOpenAI client, which builds that path from the model and sends the api-version; other
    # URLs with a query (Azure AI's ``/chat/completions?api-version=...``) through OpenAI with that query.
    query = {name: values[0] for name, values in parse_qs(uri.query).items()}
    deployments = "/openai/deployments/" in uri.path
    t = t or Telemetry()
    assert firsttoken.instrument(tracer_provider=t.tracer_provider, meter_provider=t.meter_provider)
    try:
        with Simulator(replay=[cassette], latency=FAST) as sim:
            http_client = _to_simulator(anthropic if messages_api else openai, sim.url)
            for _ in range(calls):
                if messages_api:
                    anthropic.Anthropic(
                        base_url=base_url, api_key="sk-test", max_retries=0, http_client=http_client
                    ).messages.create(**body)
                    continue
                client: openai.OpenAI
                if deployments:
                    client = openai.AzureOpenAI(
                        azure_endpoint=f"{uri.scheme}://{uri.netloc}",
                        api_version=query["api-version"],
                        api_key="sk-test",
                        max_retries=0,
                        http_client=http_client,
                    )
                else:
                    client = openai.OpenAI(
                        base_url=base_url,
                        api_key="sk-test",
                        max_retries=0,
                        http_client=http_client,
                        default_query=query or None,
                    )
                result = client.chat.completions.create(**body)
                if body.get("stream"):
                    list(result)
            http_client.close()
    finally:
        firsttoken.uninstrument()
    spans = t.calls()
    assert len(spans) == calls
    assert {span.attributes[sc.SERVER_ADDRESS] for span in spans if span.attributes} == {urlsplit(base_url).hostname}
    return [dict(span.attributes or {}) for span in spans]


def _last_sse_chunk(cassette: Path) -> dict[str, Any]:
    """The last data chunk of a cassette's streamed response, parsed independently of firsttoken."""
    body = yaml.safe_load(cassette.read_text())["interactions"][0]["response"]["body"]["string"]
    chunks = [line[len("data: ") :] for line in body.splitlines() if line.startswith("data: {")]
    return dict(json.loads(chunks[-1]))


def test_llama_cpp_timings_are_server_timing_and_the_gguf_path_is_the_model() -> None:
    cassette = RECORDINGS / "llama_cpp_chat_stream.yaml"
    last = _last_sse_chunk(cassette)
    timings, usage = last["timings"], last["usage"]
    first, second = _replay(cassette, calls=2)
    for attrs in (first, second):
        assert attrs[sc.GEN_AI_PROVIDER_NAME] == "llama.cpp"
        assert attrs[sc.FT_PROVIDER_SOURCE] == "response"
        assert attrs[sc.GEN_AI_RESPONSE_MODEL] == last["model"]
        assert attrs[sc.GEN_AI_RESPONSE_MODEL].endswith(".gguf")
        assert attrs[sc.GEN_AI_REQUEST_MODEL] == "smollm2"
        assert attrs[sc.FT_SERVER_TIMING_SOURCE] == "llama.cpp"
        assert attrs[sc.FT_SERVER_PROMPT_TIME] == pytest.approx(timings["prompt_ms"] / 1000)
        assert attrs[sc.FT_SERVER_COMPLETION_TIME] == pytest.approx(timings["predicted_ms"] / 1000)
        assert attrs[sc.FT_SERVER_TIME_PER_OUTPUT_TOKEN] == pytest.approx(timings["predicted_per_token_ms"] / 1000)
        assert attrs[sc.FT_SERVER_PROMPT_TOKENS] == timings["prompt_n"]
        assert attrs[sc.FT_SERVER_CACHED_TOKENS] == timings["cache_n"]
        assert attrs[sc.FT_SERVER_COMPLETION_TOKENS] == timings["predicted_n"]
        assert attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] == usage["prompt_tokens"]
        assert attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == usage["completion_tokens"]
        assert attrs[sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == usage["prompt_tokens_details"]["cached_tokens"]
        # Replayed at the simulator's pace: the client's TTFT is its own measurement, not the server's.
        assert attrs[sc.FT_TIME_TO_FIRST_TOKEN] != attrs[sc.FT_SERVER_PROMPT_TIME]


def test_llama_cpp_messages_api_is_named_by_the_server_header() -> None:
    """llama.cpp's Anthropic Messages endpoint returns no timings: the Server header names it."""
    cassette = RECORDINGS / "llama_cpp_messages.yaml"
    data = yaml.safe_load(cassette.read_text())
    body = json.loads(data["interactions"][0]["request"]["body"])
    recorded = json.loads(data["interactions"][0]["response"]["body"]["string"])
    t = Telemetry()
    assert firsttoken.instrument(tracer_provider=t.tracer_provider, meter_provider=t.meter_provider)
    try:
        with Simulator(replay=[cassette], latency=FAST) as sim:
            client = anthropic.Anthropic(base_url=sim.anthropic_base_url, api_key="sk-test", max_retries=0)
            # This SDK has no temperature argument: the recorded request sent it in the body.
            sent = {k: v for k, v in body.items() if k != "temperature"}
            client.messages.create(**sent, extra_body={"temperature": body["temperature"]})
    finally:
        firsttoken.uninstrument()
    attrs = dict(t.call().attributes or {})
    usage = recorded["usage"]
    assert (attrs[sc.GEN_AI_PROVIDER_NAME], attrs[sc.FT_PROVIDER_SOURCE]) == ("llama.cpp", "response")
    assert attrs[sc.GEN_AI_RESPONSE_MODEL] == recorded["model"]
    assert attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] == usage["input_tokens"] + usage["cache_read_input_tokens"]
    assert attrs[sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == usage["cache_read_input_tokens"]
    assert sc.FT_SERVER_TIMING_SOURCE not in attrs


def test_server_timing_metric_gets_llama_cpp_phases() -> None:
    data = yaml.safe_load((RECORDINGS / "llama_cpp_chat_stream.yaml").read_text())
    body = json.loads(data["interactions"][0]["request"]["body"])
    t = Telemetry()
    assert firsttoken.instrument(tracer_provider=t.tracer_provider, meter_provider=t.meter_provider)
    try:
        with Simulator(replay=[RECORDINGS / "llama_cpp_chat_stream.yaml"], latency=FAST) as sim:
            client = openai.OpenAI(base_url=sim.openai_base_url, api_key="sk-test", max_retries=0)
            list(client.chat.completions.create(**body))
    finally:
        firsttoken.uninstrument()
    points = {
        p.attributes[sc.FT_SERVER_TIMING_PHASE]: (p.value, p.attributes[sc.GEN_AI_PROVIDER_NAME])
        for p in t.metrics()[sc.M_SERVER_TIMING_TIME]
    }
    timings = _last_sse_chunk(RECORDINGS / "llama_cpp_chat_stream.yaml")["timings"]
    assert points == {
        "prompt": (pytest.approx(timings["prompt_ms"] / 1000), "llama.cpp"),
        "completion": (pytest.approx(timings["predicted_ms"] / 1000), "llama.cpp"),
    }


def _recorded(cassette: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """A cassette's whole response body (empty for a stream) and its headers (first value each), parsed
    independently of firsttoken."""
    response = yaml.safe_load(cassette.read_text())["interactions"][0]["response"]
    headers = {name.lower(): values[0] for name, values in response["headers"].items()}
    if headers["content-type"].startswith("text/event-stream"):
        return {}, headers
    return dict(json.loads(response["body"]["string"])), headers


def test_vllm_fields_name_the_server_behind_a_public_provider() -> None:
    """Recorded from Crusoe's API (vLLM's response model): named by its fields; ``metrics: null`` is no timing."""
    cassette = RECORDINGS / "vllm_chat.yaml"
    body, _ = _recorded(cassette)
    assert body["metrics"] is None  # the recording's server ran without --enable-per-request-metrics
    first, second = _replay(cassette, calls=2)
    for attrs in (first, second):  # the second call starts with what the first one taught
        assert (attrs[sc.GEN_AI_PROVIDER_NAME], attrs[sc.FT_PROVIDER_SOURCE]) == ("vllm", "response")
        assert attrs[sc.GEN_AI_RESPONSE_MODEL] == body["model"]
        assert attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] == body["usage"]["prompt_tokens"]
        assert sc.FT_SERVER_TIMING_SOURCE not in attrs


def test_vllm_stream_is_named_by_its_last_choice() -> None:
    """Recorded from Hyperbolic through Hugging Face's router: only the last chunk's choice has ``stop_reason``."""
    cassette = RECORDINGS / "vllm_chat_stream.yaml"
    last = _last_sse_chunk(cassette)
    assert "stop_reason" in last["choices"][0]
    (attrs,) = _replay(cassette)
    assert (attrs[sc.GEN_AI_PROVIDER_NAME], attrs[sc.FT_PROVIDER_SOURCE]) == ("vllm", "response")
    assert attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] == last["usage"]["prompt_tokens"]
    assert sc.FT_SERVER_TIMING_SOURCE not in attrs


def test_vllm_metrics_are_server_timing() -> None:
    """Shaped from vLLM's docs (no public recording with ``metrics`` found): read when the server sends them."""
    cassette = RECORDINGS / "vllm_metrics_shaped.yaml"
    metrics = _recorded(cassette)[0]["metrics"]
    (attrs,) = _replay(cassette)
    assert attrs[sc.GEN_AI_PROVIDER_NAME] == "vllm"
    assert attrs[sc.FT_SERVER_TIMING_SOURCE] == "vllm"
    assert attrs[sc.FT_SERVER_QUEUE_TIME] == pytest.approx(metrics["queue_time_ms"] / 1000)
    assert attrs[sc.FT_SERVER_FIRST_TOKEN_TIME] == pytest.approx(metrics["time_to_first_token_ms"] / 1000)
    assert attrs[sc.FT_SERVER_COMPLETION_TIME] == pytest.approx(metrics["generation_time_ms"] / 1000)
    assert attrs[sc.FT_SERVER_TIME_PER_OUTPUT_TOKEN] == pytest.approx(metrics["mean_itl_ms"] / 1000)


def test_sglang_choice_field_names_the_server() -> None:
    """The body a real SGLang server returned in its docs build: the choice's ``matched_stop`` names it."""
    cassette = RECORDINGS / "sglang_chat.yaml"
    body, _ = _recorded(cassette)
    assert "matched_stop" in body["choices"][0]
    (attrs,) = _replay(cassette)
    assert (attrs[sc.GEN_AI_PROVIDER_NAME], attrs[sc.FT_PROVIDER_SOURCE]) == ("sglang", "response")
    assert attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] == body["usage"]["prompt_tokens"]
    assert sc.FT_SERVER_TIMING_SOURCE not in attrs  # SGLang's OpenAI responses carry no timing


def test_ollama_fingerprint_names_the_server() -> None:
    """Recorded from a local Ollama: ``system_fingerprint: fp_ollama``; its model tag is the response model."""
    cassette = RECORDINGS / "ollama_chat.yaml"
    body, _ = _recorded(cassette)
    (attrs,) = _replay(cassette)
    assert (attrs[sc.GEN_AI_PROVIDER_NAME], attrs[sc.FT_PROVIDER_SOURCE]) == ("ollama", "response")
    assert attrs[sc.GEN_AI_RESPONSE_MODEL] == body["model"] == "qwen3:0.6b"
    assert sc.FT_SERVER_TIMING_SOURCE not in attrs


def test_tgi_headers_name_the_server_and_give_its_timing() -> None:
    """Recorded from TGI behind Hugging Face's serverless API: its millisecond headers are server timing."""
    cassette = RECORDINGS / "tgi_chat.yaml"
    body, headers = _recorded(cassette)
    (attrs,) = _replay(cassette)
    assert (attrs[sc.GEN_AI_PROVIDER_NAME], attrs[sc.FT_PROVIDER_SOURCE]) == ("tgi", "response")
    assert attrs[sc.GEN_AI_RESPONSE_MODEL] == body["model"]
    assert attrs[sc.FT_SERVER_TIMING_SOURCE] == "tgi"
    assert attrs[sc.FT_SERVER_QUEUE_TIME] == pytest.approx(float(headers["x-queue-time"]) / 1000)
    assert attrs[sc.FT_SERVER_INFERENCE_TIME] == pytest.approx(float(headers["x-inference-time"]) / 1000)
    assert attrs[sc.FT_SERVER_TIME_PER_OUTPUT_TOKEN] == pytest.approx(float(headers["x-time-per-token"]) / 1000)
    assert attrs[sc.FT_SERVER_TOTAL_TIME] == pytest.approx(float(headers["x-total-time"]) / 1000)
    # x-compute-time is in seconds, not milliseconds, and agrees with x-total-time: it is not read.
    assert float(headers["x-compute-time"]) == pytest.approx(attrs[sc.FT_SERVER_TOTAL_TIME], abs=0.001)


def test_tgi_stream_is_named_by_its_header_and_has_no_timing() -> None:
    """Recorded from TGI through Hugging Face's router: a stream's headers have ``x-compute-type`` and no timing."""
    cassette = RECORDINGS / "tgi_chat_stream.yaml"
    _, headers = _recorded(cassette)
    assert "x-compute-type" in headers and "x-queue-time" not in headers
    (attrs,) = _replay(cassette)
    assert (attrs[sc.GEN_AI_PROVIDER_NAME], attrs[sc.FT_PROVIDER_SOURCE]) == ("tgi", "response")
    assert sc.FT_SERVER_TIMING_SOURCE not in attrs


def test_openrouter_names_the_upstream_provider() -> None:
    """Recorded from openrouter.ai: the body's ``provider`` is the upstream, as given."""
    cassette = RECORDINGS / "openrouter_chat.yaml"
    body, _ = _recorded(cassette)
    (attrs,) = _replay(cassette)
    assert (attrs[sc.GEN_AI_PROVIDER_NAME], attrs[sc.FT_PROVIDER_SOURCE]) == ("openrouter", "host")
    assert attrs[sc.FT_UPSTREAM_PROVIDER] == body["provider"] == "Google"
    assert attrs[sc.GEN_AI_RESPONSE_MODEL] == body["model"]


def test_upstream_provider_is_a_metric_label_behind_a_gateway() -> None:
    """Routing shows on dashboards: the call metrics carry the upstream provider, where a gateway names one."""
    t = Telemetry()
    (attrs,) = _replay(RECORDINGS / "openrouter_chat.yaml", t=t)
    points = t.metrics()[sc.M_OPERATION_DURATION]
    assert [p.attributes[sc.FT_UPSTREAM_PROVIDER] for p in points] == [attrs[sc.FT_UPSTREAM_PROVIDER]] == ["Google"]
    assert points[0].attributes[sc.GEN_AI_PROVIDER_NAME] == "openrouter"
    t = Telemetry()
    _replay(RECORDINGS / "groq_chat.yaml", t=t)  # no gateway: no such label
    assert all(sc.FT_UPSTREAM_PROVIDER not in p.attributes for p in t.metrics()[sc.M_OPERATION_DURATION])


def test_litellm_headers_name_the_gateway_and_its_upstream() -> None:
    """LiteLLM's documented headers (its body not recorded): the api base's host is the upstream, through the table."""
    cassette = RECORDINGS / "litellm_chat.yaml"
    _, headers = _recorded(cassette)
    assert headers["x-litellm-model-api-base"].endswith(".openai.azure.com")
    (attrs,) = _replay(cassette)
    assert (attrs[sc.GEN_AI_PROVIDER_NAME], attrs[sc.FT_PROVIDER_SOURCE]) == ("litellm", "response")
    assert attrs[sc.FT_UPSTREAM_PROVIDER] == "azure.ai.openai"


@pytest.mark.parametrize(
    ("cassette", "source"),
    [("portkey_chat_shaped.yaml", "host"), ("portkey_self_hosted_chat_shaped.yaml", "response")],
)
def test_portkey_names_the_upstream_in_a_header(cassette: str, source: str) -> None:
    """Shaped from Portkey's gateway source (no public recording found): ``x-portkey-provider`` is the upstream,
    through Portkey's provider names; the header also names a self-hosted Portkey gateway."""
    _, headers = _recorded(RECORDINGS / cassette)
    assert headers["x-portkey-provider"] == "azure-openai"
    for attrs in _replay(RECORDINGS / cassette, calls=2):
        assert (attrs[sc.GEN_AI_PROVIDER_NAME], attrs[sc.FT_PROVIDER_SOURCE]) == ("portkey", source)
        assert attrs[sc.FT_UPSTREAM_PROVIDER] == "azure.ai.openai"


@pytest.mark.parametrize(
    ("cassette", "provider", "timing", "source"),
    [
        ("groq_chat.yaml", "groq", ("usage",), "groq"),
        ("groq_chat_stream.yaml", "groq", ("x_groq", "usage"), "groq"),
        ("cerebras_chat.yaml", "cerebras", ("time_info",), "cerebras"),
    ],
)
def test_provider_timing_in_recorded_bodies(cassette: str, provider: str, timing: tuple[str, ...], source: str) -> None:
    """Recorded from Groq and Cerebras: their seconds (whole body, or a stream's last chunk) are server timing."""
    stream = "stream" in cassette
    reported = _last_sse_chunk(RECORDINGS / cassette) if stream else _recorded(RECORDINGS / cassette)[0]
    for key in timing:
        reported = reported[key]
    (attrs,) = _replay(RECORDINGS / cassette)
    assert (attrs[sc.GEN_AI_PROVIDER_NAME], attrs[sc.FT_PROVIDER_SOURCE]) == (provider, "host")
    assert attrs[sc.FT_SERVER_TIMING_SOURCE] == source
    assert attrs[sc.FT_SERVER_QUEUE_TIME] == pytest.approx(reported["queue_time"])
    assert attrs[sc.FT_SERVER_PROMPT_TIME] == pytest.approx(reported["prompt_time"])
    assert attrs[sc.FT_SERVER_COMPLETION_TIME] == pytest.approx(reported["completion_time"])
    assert attrs[sc.FT_SERVER_TOTAL_TIME] == pytest.approx(reported["total_time"])


@pytest.mark.parametrize(
    ("cassette", "provider"),
    [
        ("openai_chat.yaml", "openai"),
        ("groq_chat.yaml", "groq"),
        ("cerebras_chat.yaml", "cerebras"),
        ("deepseek_chat.yaml", "deepseek"),
        ("mistral_chat.yaml", "mistral_ai"),
        ("gemini_chat.yaml", "gcp.gemini"),
        ("openrouter_chat.yaml", "openrouter"),
        ("anthropic_messages.yaml", "anthropic"),
        ("anthropic_openai_chat.yaml", "anthropic"),
        ("azure_openai_chat.yaml", "azure.ai.openai"),
        ("azure_openai_v1_chat.yaml", "azure.ai.openai"),
        ("azure_ai_inference_chat.yaml", "azure.ai.inference"),
        ("bedrock_chat.yaml", "aws.bedrock"),
        ("together_chat.yaml", "together"),
        ("together_chat_stream.yaml", "together"),
        ("fireworks_chat.yaml", "fireworks"),
        ("fireworks_chat_stream.yaml", "fireworks"),
        ("xai_chat.yaml", "x_ai"),
        ("xai_chat_stream.yaml", "x_ai"),
        ("perplexity_chat.yaml", "perplexity"),
        ("perplexity_chat_stream.yaml", "perplexity"),
        ("cohere_chat.yaml", "cohere"),
        ("cohere_chat_stream.yaml", "cohere"),
    ],
)
def test_recorded_responses_from_known_hosts_keep_the_host_name(cassette: str, provider: str) -> None:
    """A host row decides, and the recorded response, replayed twice, changes nothing (or nothing but timing).

    Streams are checked against their last chunk, which carries the model and the usage.
    """
    stream = "stream" in cassette
    body = _last_sse_chunk(RECORDINGS / cassette) if stream else _recorded(RECORDINGS / cassette)[0]
    for attrs in _replay(RECORDINGS / cassette, calls=2):
        assert (attrs[sc.GEN_AI_PROVIDER_NAME], attrs[sc.FT_PROVIDER_SOURCE]) == (provider, "host")
        assert attrs[sc.GEN_AI_RESPONSE_MODEL] == body["model"]
        usage = body["usage"]
        assert attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] == usage.get("prompt_tokens", usage.get("input_tokens"))
        assert attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == usage.get("completion_tokens", usage.get("output_tokens"))


def test_azure_stream_opens_with_a_filter_chunk_that_is_not_the_first_token() -> None:
    """Recorded from Azure OpenAI: a stream opens with ``prompt_filter_results``, no choices and ``model: ""``.

    That chunk is neither the first token nor the response model; the usage chunk's counts are the call's.
    """
    cassette = RECORDINGS / "azure_openai_chat_stream.yaml"
    body = yaml.safe_load(cassette.read_text())["interactions"][0]["response"]["body"]["string"]
    first = json.loads(body.split("\n", 1)[0][len("data: ") :])
    assert (first["choices"], first["model"]) == ([], "") and "prompt_filter_results" in first
    last = _last_sse_chunk(cassette)
    for attrs in _replay(cassette, calls=2):
        assert (attrs[sc.GEN_AI_PROVIDER_NAME], attrs[sc.FT_PROVIDER_SOURCE]) == ("azure.ai.openai", "host")
        assert attrs[sc.GEN_AI_RESPONSE_MODEL] == last["model"] == "gpt-4o-mini-2024-07-18"
        assert attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] == last["usage"]["prompt_tokens"]
        assert attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == last["usage"]["completion_tokens"]
        assert attrs[sc.FT_TIME_TO_FIRST_TOKEN] > attrs[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK]


def test_openai_processing_header_is_server_timing() -> None:
    """Recorded from api.openai.com: ``openai-processing-ms`` is server timing."""
    cassette = RECORDINGS / "openai_chat.yaml"
    _, headers = _recorded(cassette)
    (attrs,) = _replay(cassette)
    assert (attrs[sc.GEN_AI_PROVIDER_NAME], attrs[sc.FT_PROVIDER_SOURCE]) == ("openai", "host")
    assert attrs[sc.FT_SERVER_PROCESSING_TIME] == pytest.approx(float(headers["openai-processing-ms"]) / 1000)


def test_simulator_stays_the_sdk_provider() -> None:
    """No evidence, no change: the simulator on loopback is what the SDK says it talks to."""
    t = Telemetry()
    assert firsttoken.instrument(tracer_provider=t.tracer_provider, meter_provider=t.meter_provider)
    try:
        with Simulator(latency=FAST) as sim:
            client = openai.OpenAI(base_url=sim.openai_base_url, api_key="sk-test", max_retries=0)
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    finally:
        firsttoken.uninstrument()
    attrs = t.call().attributes or {}
    assert (attrs[sc.GEN_AI_PROVIDER_NAME], attrs.get(sc.FT_PROVIDER_SOURCE)) == ("openai", None)  # absent: sdk


def test_demo_runs_its_workload_against_a_server_given_by_url() -> None:
    """``firsttoken demo --server URL``: the workload goes to that server (here a simulator standing in)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FIRSTTOKEN_"))}
    with Simulator(latency=FAST) as server:
        args = ["--server", server.url, "--server-anthropic", "--model", "my-model", "--actions", "4", "--html", ""]
        done = subprocess.run(
            [sys.executable, "-m", "firsttoken.cli", "demo", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        served, url = server.requests, server.url
    assert done.returncode == 0, done.stderr
    assert len(served) >= 4
    assert {s.model for s in served} == {"my-model"}
    assert any(s.path.endswith("/chat/completions") for s in served)
    out = " ".join(done.stdout.split())  # the report wraps its lines at the width
    assert "Where the time went" in out
    assert f"LLM calls through the openai SDK {openai.__version__} and the anthropic SDK " in out
    assert f", against {url}, in " in out and "built-in simulator" not in out
    assert "the levers are measured against the simulator" in out
