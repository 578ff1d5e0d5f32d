"""No prompt, key or auth header leaves the app through firsttoken unless content capture is on, and
keys never do.

Secrets are planted everywhere an app puts them (system prompt, user prompt, tool definitions, API
keys, ``Authorization`` / ``x-api-key`` headers); then every API of both SDKs runs (streams, helpers,
raw responses, retries, errors) and everything exported is scanned: spans with their events,
links, status and resource; metrics with their points, exemplars and resource; every log record
firsttoken or OpenTelemetry wrote at any level; every warning.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pydantic
import pytest

import firsttoken
from firsttoken import semconv as sc
from firsttoken.providers import _levers
from firsttoken.sim import Fault, Simulator

from .conftest import Telemetry

SYSTEM_SECRET = "SYSPROMPT-Q7X2"
USER_SECRET = "USERPROMPT-K9P4"
TOOL_SECRET = "TOOLDEF-M3V8"
OPENAI_KEY = "sk-proj-OPENAIKEY-R5T1"
ANTHROPIC_KEY = "sk-ant-ANTHROPICKEY-W2N6"
X_API_KEY_HEADER = "XAPIKEYHEADER-H4J7"
AUTHORIZATION_HEADER = "AUTHHEADER-B8C3"
PROMPTS = (SYSTEM_SECRET, USER_SECRET, TOOL_SECRET)
KEYS = (OPENAI_KEY, ANTHROPIC_KEY, X_API_KEY_HEADER, AUTHORIZATION_HEADER)

SYSTEM = f"You are a support agent. Internal note: {SYSTEM_SECRET}."
USER = f"My order number is {USER_SECRET}; where is it?"
OPENAI_MESSAGES: Any = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]
ANTHROPIC_MESSAGES: Any = [{"role": "user", "content": USER}]
OPENAI_TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "description": f"Looks an order up ({TOOL_SECRET}).",
            "parameters": {"type": "object", "properties": {"order": {"type": "string"}}},
        },
    }
]
ANTHROPIC_TOOLS: Any = [
    {
        "name": "lookup_order",
        "description": f"Looks an order up ({TOOL_SECRET}).",
        "input_schema": {"type": "object", "properties": {"order": {"type": "string"}}},
    }
]
MODEL = "gpt-4o-mini"
CLAUDE = "claude-test-model"


class Answer(pydantic.BaseModel):
    text: str


# -- what firsttoken exported, and what it logged -----------------------------------------------------


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Every log record of every logger at DEBUG, including loggers that do not propagate."""
    caplog.set_level(logging.DEBUG)
    loggers = [logging.getLogger(name) for name in list(logging.root.manager.loggerDict)]
    lonely = [lg for lg in loggers if isinstance(lg, logging.Logger) and not lg.propagate]
    for lg in loggers:
        if isinstance(lg, logging.Logger):
            caplog.set_level(logging.DEBUG, logger=lg.name)
    for lg in lonely:
        lg.addHandler(caplog.handler)
    try:
        yield caplog
    finally:
        for lg in lonely:
            lg.removeHandler(caplog.handler)


@contextlib.contextmanager
def instrumented(**options: Any) -> Iterator[Telemetry]:
    t = Telemetry()
    assert firsttoken.instrument(tracer_provider=t.tracer_provider, meter_provider=t.meter_provider, **options)
    try:
        yield t
    finally:
        firsttoken.uninstrument()


def exported_text(t: Telemetry) -> str:
    """Everything exported, as text: spans (attributes, events, links, status, resource) and metrics
    (points with attributes and exemplars with their filtered attributes, resource, scope)."""
    parts = [span.to_json(indent=None) for span in t.spans()]
    data = t.reader.get_metrics_data()
    assert data is not None
    parts.append(data.to_json(indent=None))
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                parts.append(f"{metric.name} {metric.description} {metric.unit}")
                for point in metric.data.data_points:
                    parts.append(repr(point.attributes))
                    parts.extend(repr(e.filtered_attributes) for e in point.exemplars)
    return "\n".join(parts)


def firsttoken_logs(caplog: pytest.LogCaptureFixture) -> str:
    """What firsttoken (and the OpenTelemetry SDK it feeds) logged. The simulator is the server: it
    may see prompts, as any LLM server does, so its own records are not the instrumentation's."""
    out = []
    for record in caplog.records:
        if is_firsttokens(record.name, record.pathname):
            text = record.getMessage()
            if record.exc_info:
                text += logging.Formatter().formatException(record.exc_info)
            out.append(text)
    return "\n".join(out)


PACKAGE_DIR = Path(firsttoken.__file__).resolve().parent
SIM_DIR = PACKAGE_DIR / "sim"


def is_firsttokens(logger: str, pathname: str) -> bool:
    """A record is the instrumentation's when its logger is firsttoken's or OpenTelemetry's, or when the code that
    logged it lives in firsttoken's own package directory (not the simulator's). A path merely containing
    `/firsttoken/` is not enough: in a clone named `firsttoken`, every package of its `.venv` has one."""
    path = Path(pathname).resolve()
    if path.is_relative_to(SIM_DIR) or logger.startswith("firsttoken.sim"):
        return False
    return logger.startswith(("firsttoken", "opentelemetry")) or path.is_relative_to(PACKAGE_DIR)


def test_records_are_ours_by_logger_and_package_not_by_path_substring(tmp_path: Path) -> None:
    """The SDKs' own DEBUG records (anthropic's "Request options" holds the prompt) are not firsttoken's, even
    from a `.venv` inside a folder named `firsttoken`, as `git clone` of this repository makes."""
    venv = tmp_path / "firsttoken" / ".venv" / "lib" / "python3.11" / "site-packages"
    assert not is_firsttokens("anthropic._base_client", str(venv / "anthropic" / "_base_client.py"))
    assert not is_firsttokens("httpx", str(venv / "httpx" / "_client.py"))
    assert is_firsttokens("firsttoken.recorder", str(venv / "anything.py"))
    assert is_firsttokens("opentelemetry.sdk.trace", str(venv / "opentelemetry" / "sdk" / "trace" / "__init__.py"))
    assert is_firsttokens("some.logger", str(PACKAGE_DIR / "recorder.py"))
    assert not is_firsttokens("firsttoken.sim", str(SIM_DIR / "_server.py"))


def found(text: str, secrets: tuple[str, ...]) -> list[str]:
    return [s for s in secrets if s in text]


# -- the workload: every API of both SDKs ---------------------------------------------------------------


def run_openai(sim: Simulator) -> None:
    c = openai.OpenAI(
        base_url=sim.openai_base_url,
        api_key=OPENAI_KEY,
        max_retries=1,
        default_headers={"x-api-key": X_API_KEY_HEADER},
    )
    chat: dict[str, Any] = {"model": MODEL, "messages": OPENAI_MESSAGES, "tools": OPENAI_TOOLS}
    c.chat.completions.create(**chat)
    for _ in c.chat.completions.create(**chat, stream=True, stream_options={"include_usage": True}):
        pass
    list(c.chat.completions.create(**chat, tool_choice="required", stream=True))
    with c.chat.completions.stream(**chat) as stream:
        stream.get_final_completion()
    c.chat.completions.parse(model=MODEL, messages=OPENAI_MESSAGES, response_format=Answer)
    responses: dict[str, Any] = {"model": MODEL, "instructions": SYSTEM, "input": USER, "tools": [_responses_tool()]}
    c.responses.create(**responses)
    list(c.responses.create(**responses, stream=True))
    with c.responses.stream(**responses) as rstream:
        rstream.get_final_response()
    c.responses.parse(model=MODEL, instructions=SYSTEM, input=USER, text_format=Answer)
    c.completions.create(model="gpt-3.5-turbo-instruct", prompt=USER)
    list(c.completions.create(model="gpt-3.5-turbo-instruct", prompt=USER, stream=True))
    c.embeddings.create(model="text-embedding-3-small", input=USER)
    c.chat.completions.with_raw_response.create(**chat).parse()
    with c.chat.completions.with_streaming_response.create(**chat, stream=True) as response:
        for _ in response.parse():
            pass
    # Retries, errors, streams that break, streams the app leaves early.
    sim.inject(Fault.rate_limit(retry_after=0.01))
    c.chat.completions.create(**chat)
    sim.inject(Fault.server_error(status=500))
    with pytest.raises(openai.InternalServerError):
        c.with_options(max_retries=0).chat.completions.create(**chat)
    sim.inject(Fault.drop_after(chunks=2))
    with pytest.raises(openai.APIError):
        list(c.chat.completions.create(**chat, stream=True))
    sim.inject(Fault.error_event(after_chunks=2))
    with pytest.raises(openai.APIError):
        list(c.chat.completions.create(**chat, stream=True))
    sim.inject(Fault.error_event(after_chunks=2))
    events = list(c.responses.create(**responses, stream=True))
    assert events[-1].type == "error"
    stream_left = c.chat.completions.create(**chat, stream=True)
    next(iter(stream_left))
    stream_left.close()
    # An app that talks to the API with plain httpx.
    httpx.post(
        f"{sim.openai_base_url}/chat/completions",
        json={"model": MODEL, "messages": OPENAI_MESSAGES},
        headers={"Authorization": f"Bearer {OPENAI_KEY}", "x-api-key": X_API_KEY_HEADER},
    ).raise_for_status()


def _responses_tool() -> dict[str, Any]:
    function = OPENAI_TOOLS[0]["function"]
    return {"type": "function", **function}


def run_anthropic(sim: Simulator) -> None:
    c = anthropic.Anthropic(
        base_url=sim.anthropic_base_url,
        api_key=ANTHROPIC_KEY,
        max_retries=1,
        default_headers={"Authorization": f"Bearer {AUTHORIZATION_HEADER}"},
    )
    msg: dict[str, Any] = {
        "model": CLAUDE,
        "max_tokens": 64,
        "system": SYSTEM,
        "messages": ANTHROPIC_MESSAGES,
        "tools": ANTHROPIC_TOOLS,
    }
    c.messages.create(**msg)
    list(c.messages.create(**msg, stream=True))
    list(c.messages.create(**msg, tool_choice={"type": "any"}, stream=True))
    with c.messages.stream(**msg) as stream:
        "".join(stream.text_stream)
    with c.messages.stream(**msg) as stream:
        stream.get_final_message()
    c.messages.count_tokens(model=CLAUDE, system=SYSTEM, messages=ANTHROPIC_MESSAGES, tools=ANTHROPIC_TOOLS)
    c.beta.messages.create(**msg)
    with c.beta.messages.stream(**msg) as beta_stream:
        beta_stream.get_final_message()
    c.messages.with_raw_response.create(**msg).parse()
    with c.messages.with_streaming_response.create(**msg, stream=True) as response:
        for _ in response.parse():
            pass
    sim.inject(Fault.rate_limit(retry_after=0.01))
    c.messages.create(**msg)  # retried
    sim.inject(Fault.overloaded())
    with pytest.raises(anthropic.APIStatusError):
        c.with_options(max_retries=0).messages.create(**msg)
    sim.inject(Fault.error_event(after_chunks=2))
    with pytest.raises(anthropic.APIStatusError):
        list(c.messages.create(**msg, stream=True))
    with c.messages.stream(**msg) as stream:
        for _ in stream.text_stream:
            break


async def run_async(sim: Simulator) -> None:
    oc = openai.AsyncOpenAI(
        base_url=sim.openai_base_url, api_key=OPENAI_KEY, default_headers={"x-api-key": X_API_KEY_HEADER}
    )
    ac = anthropic.AsyncAnthropic(
        base_url=sim.anthropic_base_url,
        api_key=ANTHROPIC_KEY,
        default_headers={"Authorization": f"Bearer {AUTHORIZATION_HEADER}"},
    )
    await oc.chat.completions.create(model=MODEL, messages=OPENAI_MESSAGES, tools=OPENAI_TOOLS)
    async for _ in await oc.chat.completions.create(model=MODEL, messages=OPENAI_MESSAGES, stream=True):
        pass
    async with oc.responses.stream(model=MODEL, instructions=SYSTEM, input=USER) as rstream:
        await rstream.get_final_response()
    await ac.messages.create(model=CLAUDE, max_tokens=64, system=SYSTEM, messages=ANTHROPIC_MESSAGES)
    async with ac.messages.stream(
        model=CLAUDE, max_tokens=64, system=SYSTEM, messages=ANTHROPIC_MESSAGES, tools=ANTHROPIC_TOOLS
    ) as astream:
        await astream.get_final_message()
    await oc.close()
    await ac.close()


def run_all(sim: Simulator) -> None:
    with firsttoken.action("support reply", traffic_class="interactive", conversation_id="conv-1"):
        run_openai(sim)
        run_anthropic(sim)


def check_capture_worked(t: Telemetry, caplog: pytest.LogCaptureFixture) -> None:
    """The net catches things: the calls were recorded and DEBUG records of other loggers were seen."""
    assert len(t.calls()) >= 30
    assert any(r.name.startswith("openai") and r.levelno == logging.DEBUG for r in caplog.records)
    assert any(r.name.startswith("anthropic") and r.levelno == logging.DEBUG for r in caplog.records)


# -- content capture off ---------------------------------------------------------------------------------


def test_nothing_secret_is_exported_with_capture_off(
    sim: Simulator, logs: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with instrumented() as t:
            run_all(sim)
    check_capture_worked(t, logs)
    exported = exported_text(t)
    assert sc.GEN_AI_INPUT_MESSAGES not in exported and sc.GEN_AI_OUTPUT_MESSAGES not in exported
    assert found(exported, PROMPTS + KEYS) == []
    assert found(firsttoken_logs(logs), PROMPTS + KEYS) == []
    assert found("\n".join(str(w.message) for w in caught), PROMPTS + KEYS) == []


async def test_nothing_secret_is_exported_by_async_calls(
    sim: Simulator, logs: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "NO_CONTENT")
    with instrumented() as t:
        async with firsttoken.action("async reply"):
            await run_async(sim)
    assert len(t.calls()) == 5
    assert found(exported_text(t), PROMPTS + KEYS) == []
    assert found(firsttoken_logs(logs), PROMPTS + KEYS) == []


# -- content capture on -------------------------------------------------------------------------------------


def content_attributes(t: Telemetry) -> list[tuple[str, str]]:
    keys = (sc.GEN_AI_INPUT_MESSAGES, sc.GEN_AI_SYSTEM_INSTRUCTIONS, sc.GEN_AI_OUTPUT_MESSAGES)
    return [(k, str(v)) for span in t.calls() for k, v in (span.attributes or {}).items() if k in keys]


@pytest.mark.parametrize("how", ["option", "environment"])
def test_capture_on_records_prompts_but_never_keys(
    sim: Simulator, logs: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    if how == "environment":
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
        options: dict[str, Any] = {}
    else:
        monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
        options = {"capture_content": True}
    with instrumented(**options) as t:
        run_all(sim)
    check_capture_worked(t, logs)
    exported = exported_text(t)
    assert found(exported, (SYSTEM_SECRET, USER_SECRET)) == [SYSTEM_SECRET, USER_SECRET]
    assert found(exported, KEYS) == []
    assert found(firsttoken_logs(logs), PROMPTS + KEYS) == [], "content goes on spans, never in logs"
    # Each SDK's calls carry their prompts and the output they got.
    by_provider: dict[str, set[str]] = {}
    for span in t.calls():
        attrs = span.attributes or {}
        by_provider.setdefault(str(attrs[sc.GEN_AI_PROVIDER_NAME]), set()).update(
            k
            for k in attrs
            if k in (sc.GEN_AI_INPUT_MESSAGES, sc.GEN_AI_SYSTEM_INSTRUCTIONS, sc.GEN_AI_OUTPUT_MESSAGES)
        )
    assert by_provider["openai"] >= {sc.GEN_AI_INPUT_MESSAGES, sc.GEN_AI_SYSTEM_INSTRUCTIONS, sc.GEN_AI_OUTPUT_MESSAGES}
    assert by_provider["anthropic"] >= {
        sc.GEN_AI_INPUT_MESSAGES,
        sc.GEN_AI_SYSTEM_INSTRUCTIONS,
        sc.GEN_AI_OUTPUT_MESSAGES,
    }


def test_redact_hook(sim: Simulator, logs: pytest.LogCaptureFixture) -> None:
    seen: list[str] = []

    def redact(key: str, text: str) -> str | None:
        seen.append(key)
        if key == sc.GEN_AI_SYSTEM_INSTRUCTIONS:
            return None  # drop it
        # OpenAI chat carries the system prompt among the input messages.
        return text.replace(USER_SECRET, "[order]").replace(SYSTEM_SECRET, "[note]")

    with instrumented(capture_content=True, redact=redact) as t:
        run_all(sim)
    assert {sc.GEN_AI_INPUT_MESSAGES, sc.GEN_AI_SYSTEM_INSTRUCTIONS, sc.GEN_AI_OUTPUT_MESSAGES} <= set(seen)
    exported = exported_text(t)
    assert found(exported, PROMPTS + KEYS) == []
    attrs = content_attributes(t)
    assert all(k != sc.GEN_AI_SYSTEM_INSTRUCTIONS for k, _ in attrs)
    assert any(k == sc.GEN_AI_INPUT_MESSAGES and "[order]" in v for k, v in attrs)


def test_raising_redact_hook_never_breaks_the_call(sim: Simulator, logs: pytest.LogCaptureFixture) -> None:
    def redact(key: str, text: str) -> str | None:
        raise RuntimeError("the hook is broken")

    client = openai.OpenAI(base_url=sim.openai_base_url, api_key=OPENAI_KEY, max_retries=0)
    with instrumented(capture_content=True, redact=redact) as t:
        result = client.chat.completions.create(model=MODEL, messages=OPENAI_MESSAGES)
        with anthropic.Anthropic(base_url=sim.anthropic_base_url, api_key=ANTHROPIC_KEY).messages.stream(
            model=CLAUDE, max_tokens=64, system=SYSTEM, messages=ANTHROPIC_MESSAGES
        ) as stream:
            text = "".join(stream.text_stream)
    assert result.choices[0].message.content and text
    assert len(t.calls()) == 2
    assert content_attributes(t) == [], "content a hook could not vet is dropped, not recorded raw"
    assert found(exported_text(t), PROMPTS + KEYS) == []
    assert all(span.attributes and span.attributes[sc.FT_END_REASON] == sc.END_COMPLETED for span in t.calls())


@pytest.mark.parametrize("limit", [16, 64])
def test_content_max_length(sim: Simulator, limit: int) -> None:
    with instrumented(capture_content=True, content_max_length=limit) as t:
        run_openai(sim)
    attrs = content_attributes(t)
    assert attrs
    assert all(len(v) <= limit for _, v in attrs), [(k, len(v)) for k, v in attrs if len(v) > limit]
    assert any(v.endswith("...[truncated]") for _, v in attrs)
    exported = exported_text(t)
    assert found(exported, KEYS) == []
    if limit == 16:  # two characters of content are left: no prompt survives
        assert found(exported, PROMPTS) == []


def test_content_capture_is_off_unless_asked(monkeypatch: pytest.MonkeyPatch, sim: Simulator) -> None:
    call: Callable[[], Any] = lambda: openai.OpenAI(  # noqa: E731
        base_url=sim.openai_base_url, api_key=OPENAI_KEY
    ).chat.completions.create(model=MODEL, messages=OPENAI_MESSAGES)
    for value in (None, "false", "no_content"):
        if value is None:
            monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
        else:
            monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", value)
        with instrumented() as t:
            call()
        assert content_attributes(t) == [], value
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    with instrumented(capture_content=False) as t:
        call()
    assert content_attributes(t) == [], "the argument wins over the environment"


def test_capturing_parsed_results_does_not_warn_the_app(sim: Simulator) -> None:
    client = openai.OpenAI(base_url=sim.openai_base_url, api_key=OPENAI_KEY, max_retries=0)
    # Earlier tests' clients are collected and forgotten first: this file's tests each make a client
    # for a call or two, so the "SDK clients created per call" lever warning (or a ResourceWarning for
    # one of them) could otherwise fire in the middle of these calls; neither is these calls' warning.
    gc.collect()
    _levers.reset()
    with instrumented(capture_content=True) as t, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        client.chat.completions.parse(model=MODEL, messages=OPENAI_MESSAGES, response_format=Answer)
        client.responses.parse(model=MODEL, input=USER, text_format=Answer)
    client.close()
    assert len(content_attributes(t)) >= 3
    assert [f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})" for w in caught] == []


MASKED_KEY = "sk-proj-********************************************Zx9Q"
REQUEST_ID = "req_0123456789abcdef0123"


@pytest.fixture
def refusing_server() -> Iterator[str]:
    """A real HTTP server answering every request as the OpenAI API answers a wrong key: 401, with the
    refused key quoted (masked but for its last characters) in the error's message."""
    import http.server
    import json
    import threading

    body = json.dumps(
        {
            "error": {
                "message": f"Incorrect API key provided: {MASKED_KEY}. You can find your API key at "
                f"https://platform.openai.com/account/api-keys. (request id {REQUEST_ID})",
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_api_key",
            }
        }
    ).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_a_refused_key_quoted_by_the_api_is_not_in_the_span(refusing_server: str) -> None:
    """The span's status says the API's own words, but not the key the API quotes back."""
    t = Telemetry()
    assert firsttoken.instrument(tracer_provider=t.tracer_provider, meter_provider=t.meter_provider)
    try:
        client = openai.OpenAI(base_url=refusing_server, api_key="sk-proj-wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError) as raised:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
        assert MASKED_KEY in str(raised.value)  # the app still gets the SDK's exception as it was
    finally:
        firsttoken.uninstrument()
    (call,) = t.calls()
    status = call.status.description or ""
    assert status.startswith("Incorrect API key provided: [redacted]. You can find your API key at"), status
    assert "Zx9Q" not in status and "****" not in status and REQUEST_ID not in status, status
    assert "https://platform.openai.com/account/api-keys" in status  # ordinary words are kept
