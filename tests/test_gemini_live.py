"""Gemini Live sessions: the real google-genai SDK over a real TLS websocket against firsttoken.sim's Live server.

Timing bounds: the simulator sends a turn's first ``modelTurn`` ``FIRST`` after it reads the hand-off
(and one every ``STEP`` after); the client's clock starts earlier (the hand-off is stamped before the
message is written), so a measured time is at least the configured one and, on a busy 2-core machine,
within a second of it (loopback, no other work in the way).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from google import genai
from google.genai import errors, types
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
from websockets.exceptions import ConnectionClosed

import firsttoken
from firsttoken import semconv as sc
from firsttoken.sim import GeminiLiveSimulator, GeminiLiveTiming
from firsttoken.sim.tls import Certificates, ca_pem, test_certificates

from .conftest import Telemetry

FIRST = 0.15
STEP = 0.03
DELTAS = 4
SLACK = 1.0
"""Seconds a busy machine may add to a measured time (see the module's docstring)."""
MODEL = "gemini-live-2.5-flash"
API_KEY = "k-secret-4242"

AUDIO_IN = types.Blob(data=bytes(3200), mime_type="audio/pcm;rate=16000")
"""100 ms of 16 kHz PCM16 the app "speaks"."""
USER = types.Content(role="user", parts=[types.Part(text="Hi")])


@pytest.fixture
def certs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Certificates:
    """The simulator's certificates, its authority trusted by file: google-genai 3.x reads
    ``SSL_CERT_FILE`` for its websocket context, 1.20 connects with the default one, which reads it too."""
    pem = tmp_path / "ca.pem"
    pem.write_bytes(ca_pem())
    monkeypatch.setenv("SSL_CERT_FILE", str(pem))
    return test_certificates()


def _sim(certs: Certificates, **timing: Any) -> GeminiLiveSimulator:
    values: dict[str, Any] = {"first_delta_s": FIRST, "delta_interval_s": STEP, "deltas": DELTAS, **timing}
    return GeminiLiveSimulator(GeminiLiveTiming(**values), ssl_context=certs.server)


@pytest.fixture
def live(certs: Certificates) -> Iterator[GeminiLiveSimulator]:
    with _sim(certs) as s:
        yield s


def _client(sim: GeminiLiveSimulator, certs: Certificates) -> genai.Client:
    return genai.Client(api_key=API_KEY, http_options=types.HttpOptions(base_url=sim.base_url))


def _sessions(t: Telemetry) -> list[ReadableSpan]:
    return [s for s in t.spans() if s.name.startswith(sc.SPAN_REALTIME_SESSION)]


def _turns(t: Telemetry) -> list[ReadableSpan]:
    turns = [s for s in t.calls() if (s.attributes or {})[sc.GEN_AI_OPERATION_NAME] == sc.OP_REALTIME]
    return sorted(turns, key=lambda s: s.start_time or 0)


def _check_messages(sim: GeminiLiveSimulator, *, vertex: bool = False) -> list[types.LiveServerMessage]:
    """Every message the simulator sent is one the SDK knows, field for field (its models forbid extras):
    as the SDK reads them."""
    import inspect

    from google.genai import _live_converters as converters

    convert = converters._LiveServerMessage_from_vertex if vertex else converters._LiveServerMessage_from_mldev
    old = "api_client" in inspect.signature(convert).parameters  # google-genai 1.x
    parsed = []
    for message in sim.sent:
        converted = convert(None, message) if old else convert(message)
        assert len(converted) == len(message), message  # no top-level field the SDK drops
        parsed.append(types.LiveServerMessage.model_validate(converted))
    return parsed


def _close_code(exc: BaseException) -> int:
    """The close code the app was told: google-genai 3.x raises its APIError with it, 1.x lets
    websockets' ConnectionClosed through."""
    if isinstance(exc, ConnectionClosed):
        return exc.rcvd.code if exc.rcvd is not None else 1006
    assert isinstance(exc, errors.APIError)
    return exc.code


def _within(value: Any, low: float) -> None:
    assert isinstance(value, float)
    assert low <= value <= low + SLACK, (value, low)


async def _one_turn(session: Any) -> list[types.LiveServerMessage]:
    return [message async for message in session.receive()]


async def _messages(session: Any) -> AsyncIterator[types.LiveServerMessage]:
    """The session's messages, turn after turn (``receive()`` ends with each turn)."""
    while True:
        async for message in session.receive():
            yield message


async def test_audio_turn(telemetry: Telemetry, live: GeminiLiveSimulator, certs: Certificates) -> None:
    client = _client(live, certs)
    config = types.LiveConnectConfig(response_modalities=[types.Modality.AUDIO], output_audio_transcription={})
    async with client.aio.live.connect(model=MODEL, config=config) as session:
        await session.send_client_content(turns=USER)
        seen = await _one_turn(session)
    sent = _check_messages(live)
    # Every message but setupComplete reached the app, unchanged.
    assert [m.model_dump() for m in seen] == [m.model_dump() for m in sent[1:]]
    assert seen[-1].server_content is not None and seen[-1].server_content.turn_complete

    (span,) = _sessions(telemetry)
    (turn,) = _turns(telemetry)
    assert turn.parent is not None and turn.parent.span_id == span.context.span_id
    assert turn.name == f"realtime {MODEL}"
    a = turn.attributes or {}
    assert a[sc.GEN_AI_PROVIDER_NAME] == "gcp.gemini"
    assert a[sc.FT_REALTIME_HANDOFF] == "client_content"
    _within(a[sc.FT_TIME_TO_FIRST_TOKEN], FIRST)
    _within(a[sc.FT_REALTIME_TIME_TO_FIRST_AUDIO], FIRST)
    _within(a[sc.FT_REALTIME_TIME_TO_FIRST_TEXT], FIRST)
    _within(a[sc.FT_REALTIME_TIME_TO_LAST_DELTA], FIRST + (DELTAS - 1) * STEP)
    _within(a[sc.FT_REALTIME_TIME_TO_GENERATION_COMPLETE], FIRST + (DELTAS - 1) * STEP)
    assert a[sc.FT_REALTIME_AUDIO_DURATION] == pytest.approx(DELTAS * 0.1)
    assert a[sc.GEN_AI_USAGE_INPUT_TOKENS] == 40
    assert a[sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 16
    assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == DELTAS * 5
    assert a[sc.GEN_AI_USAGE_AUDIO_OUTPUT_TOKENS] == DELTAS * 5
    assert a[sc.FT_END_REASON] == sc.END_COMPLETED
    assert a[sc.FT_REALTIME_STATUS] == "completed"
    assert a[sc.FT_CHUNK_COUNT] == 2 * DELTAS + 2  # audio and transcript, generationComplete, turnComplete
    assert sc.GEN_AI_OUTPUT_MESSAGES not in a  # capture is off by default
    s = span.attributes or {}
    assert s[sc.FT_END_REASON] == sc.END_CLOSED
    assert s[sc.FT_REALTIME_RESPONSES] == 1
    assert s[sc.SERVER_ADDRESS] == "127.0.0.1"
    assert 0 < s[sc.FT_REALTIME_CONNECT_TIME] < 10 * SLACK  # a loopback TLS connect and setup, on a busy machine
    ops = {dict(p.attributes)[sc.GEN_AI_OPERATION_NAME] for p in telemetry.metrics()[sc.M_OPERATION_DURATION]}
    assert ops == {sc.OP_REALTIME}
    # google-genai 3.x sends the key in a header, 1.x in the URL's query: firsttoken reads neither (only
    # the base URL's host and port), so no attribute carries it.
    for recorded in telemetry.spans():
        assert API_KEY not in str(dict(recorded.attributes or {})) + str([e.attributes for e in recorded.events])
    for points in telemetry.metrics().values():
        assert API_KEY not in str([dict(p.attributes) for p in points])


async def test_vertex_ai_client(telemetry: Telemetry, live: GeminiLiveSimulator, certs: Certificates) -> None:
    """A vertexai=True client (express mode: an API key) speaks Vertex AI's LlmBidiService: gcp.vertex_ai."""
    client = genai.Client(vertexai=True, api_key=API_KEY, http_options=types.HttpOptions(base_url=live.base_url))
    config = types.LiveConnectConfig(response_modalities=[types.Modality.TEXT])
    async with client.aio.live.connect(model=MODEL, config=config) as session:
        await session.send_client_content(turns=USER)
        await _one_turn(session)
    assert "aiplatform" in live.paths[0]
    _check_messages(live, vertex=True)
    (span,) = _sessions(telemetry)
    (turn,) = _turns(telemetry)
    for recorded in (span, turn):
        assert (recorded.attributes or {})[sc.GEN_AI_PROVIDER_NAME] == "gcp.vertex_ai"
    a = turn.attributes or {}
    assert a[sc.GEN_AI_REQUEST_MODEL] == MODEL
    assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == DELTAS
    _within(a[sc.FT_REALTIME_TIME_TO_FIRST_TEXT], FIRST)


async def test_text_turn_ended_by_activity_end(
    telemetry: Telemetry, live: GeminiLiveSimulator, certs: Certificates
) -> None:
    """Manual activity detection: the app's activity_end hands the turn over."""
    client = _client(live, certs)
    config = types.LiveConnectConfig(
        response_modalities=[types.Modality.TEXT],
        realtime_input_config=types.RealtimeInputConfig(
            automatic_activity_detection=types.AutomaticActivityDetection(disabled=True)
        ),
    )
    async with client.aio.live.connect(model=MODEL, config=config) as session:
        await session.send_realtime_input(activity_start=types.ActivityStart())
        await session.send_realtime_input(audio=AUDIO_IN)
        await session.send_realtime_input(activity_end=types.ActivityEnd())
        seen = await _one_turn(session)
    _check_messages(live)
    assert "".join(m.text or "" for m in seen) == "Hello" * DELTAS
    (turn,) = _turns(telemetry)
    a = turn.attributes or {}
    assert a[sc.FT_REALTIME_HANDOFF] == "activity_end"
    _within(a[sc.FT_REALTIME_TIME_TO_FIRST_TEXT], FIRST)
    assert sc.FT_REALTIME_TIME_TO_FIRST_AUDIO not in a
    assert a[sc.GEN_AI_USAGE_TEXT_OUTPUT_TOKENS] == DELTAS


async def test_barge_in_under_server_vad(telemetry: Telemetry, certs: Certificates) -> None:
    """The server's VAD hands each turn over (voiceActivity end); speech over an answer interrupts it.

    40 deltas: the barge-in, sent when the app reads the first, has 1.17 s to reach the server before
    the answer would be complete; the app leaves at the second answer's first audio, so neither
    answer costs that time.
    """
    vad = "voice_activity" in types.LiveServerMessage.model_fields  # not in google-genai 1.20: no hand-off seen
    with _sim(certs, deltas=40, vad_signals=vad) as sim:
        client = _client(sim, certs)
        async with client.aio.live.connect(model=MODEL) as session, contextlib.aclosing(_messages(session)) as messages:
            await session.send_realtime_input(audio=AUDIO_IN)
            barged = interrupted = False
            async for message in messages:
                content = message.server_content
                if message.data is not None and not barged:
                    await session.send_realtime_input(audio=AUDIO_IN)  # the user talks over the answer
                    barged = True
                interrupted = interrupted or bool(content and content.interrupted)
                if interrupted and message.data is not None:
                    break  # the second answer is playing: the app leaves
    _check_messages(sim)
    cut, answered = _turns(telemetry)
    for span in (cut, answered):
        assert (span.attributes or {})[sc.FT_REALTIME_HANDOFF] == ("voice_activity_end" if vad else "server_content")
    c = cut.attributes or {}
    assert c[sc.FT_END_REASON] == sc.END_CANCELLED
    assert c[sc.FT_REALTIME_STATUS] == "interrupted"
    assert cut.status.status_code != StatusCode.ERROR
    a = answered.attributes or {}
    assert a[sc.FT_END_REASON] == sc.END_CLOSED  # open when the app left
    # The clock starts when voiceActivity's end arrives, which the server sent FIRST before the first
    # audio: its delivery delay (a few ms, more if the app was slow to read it) comes off FIRST.
    # Without the signal the clock starts at the turn's first message, the audio itself.
    for turn in (c, a):
        measured = turn[sc.FT_REALTIME_TIME_TO_FIRST_AUDIO]
        assert 0 < measured <= FIRST + SLACK if vad else measured == 0.0


async def test_tool_call_and_its_wait(telemetry: Telemetry, certs: Certificates) -> None:
    """A turn that calls a tool; the app runs it (tool_s) and answers: the wait is the app's."""
    tool_s = 0.1
    with _sim(certs, tool="lookup") as sim:
        client = _client(sim, certs)
        async with client.aio.live.connect(model=MODEL) as session:
            await session.send_client_content(turns=USER)
            async for message in session.receive():
                if message.tool_call is not None:
                    await asyncio.sleep(tool_s)  # the tool runs
                    calls = message.tool_call.function_calls or []
                    response = types.FunctionResponse(id=calls[0].id, name=calls[0].name, response={"ok": True})
                    await session.send_tool_response(function_responses=response)
                    break
            await _one_turn(session)
        _check_messages(sim)
    called, answered = _turns(telemetry)
    c, a = called.attributes or {}, answered.attributes or {}
    assert c[sc.FT_REALTIME_TOOL_CALLS] == 1
    assert c[sc.FT_REALTIME_STATUS] == "tool_call"
    _within(c[sc.FT_REALTIME_TIME_TO_FIRST_TOOL_CALL], FIRST)
    assert sc.FT_REALTIME_TIME_TO_FIRST_AUDIO not in c
    assert a[sc.FT_REALTIME_HANDOFF] == "tool_response"
    _within(a[sc.FT_REALTIME_TOOL_WAIT], tool_s)
    _within(a[sc.FT_REALTIME_TIME_TO_FIRST_AUDIO], FIRST)


@pytest.mark.parametrize(
    ("close_code", "end_reason"), [(None, sc.END_DROPPED), (1011, sc.END_ERROR)], ids=["dropped", "server-error"]
)
async def test_socket_ends_mid_turn(
    telemetry: Telemetry, certs: Certificates, close_code: int | None, end_reason: str
) -> None:
    """No close frame (the SDK says 1006), or the server's error close (1011): the turn failed."""
    with _sim(certs, close_after_deltas=2, close_code=close_code, close_reason="Internal error") as sim:
        client = _client(sim, certs)
        audio = 0
        with pytest.raises((errors.APIError, ConnectionClosed)) as raised:
            async with client.aio.live.connect(model=MODEL) as session:
                await session.send_client_content(turns=USER)
                async for message in session.receive():
                    audio += message.data is not None
    code = close_code or 1006
    assert _close_code(raised.value) == code
    assert audio == 2
    (span,) = _sessions(telemetry)
    (turn,) = _turns(telemetry)
    s = span.attributes or {}
    assert s[sc.FT_END_REASON] == end_reason
    assert s[sc.FT_REALTIME_CLOSE_CODE] == code
    assert span.status.status_code == StatusCode.ERROR
    a = turn.attributes or {}
    assert a[sc.FT_END_REASON] == sc.END_ERROR
    assert a[sc.ERROR_TYPE] == str(code)
    assert turn.status.status_code == StatusCode.ERROR
    assert turn.status.description == ("Internal error" if close_code else str(code))  # the close's reason


async def test_go_away(telemetry: Telemetry, certs: Certificates) -> None:
    """goAway, then the server closes (1000): an event and a clean end, not an error."""
    with _sim(certs, go_away_after_turns=1) as sim:
        client = _client(sim, certs)
        async with client.aio.live.connect(model=MODEL) as session:
            await session.send_client_content(turns=USER)
            await _one_turn(session)
            with pytest.raises((errors.APIError, ConnectionClosed)) as raised:
                await _one_turn(session)  # the goAway, then the close
        _check_messages(sim)
    assert _close_code(raised.value) == 1000
    (span,) = _sessions(telemetry)
    s = span.attributes or {}
    assert s[sc.FT_END_REASON] == sc.END_CLOSED
    assert s[sc.FT_REALTIME_CLOSE_CODE] == 1000
    assert span.status.status_code != StatusCode.ERROR
    (event,) = span.events
    assert event.name == sc.EVENT_REALTIME_GO_AWAY
    assert (event.attributes or {})[sc.FT_REALTIME_GO_AWAY_TIME_LEFT] == pytest.approx(0.05)
    (turn,) = _turns(telemetry)
    assert (turn.attributes or {})[sc.FT_END_REASON] == sc.END_COMPLETED


async def test_parallel_sessions(telemetry: Telemetry, live: GeminiLiveSimulator, certs: Certificates) -> None:
    client = _client(live, certs)

    async def one(n: int) -> None:
        config = types.LiveConnectConfig(response_modalities=[types.Modality.TEXT])
        async with client.aio.live.connect(model=f"{MODEL}-{n}", config=config) as session:
            await session.send_client_content(turns=USER)
            await _one_turn(session)

    async with firsttoken.action("voice", traffic_class="interactive"):
        await asyncio.gather(*(one(n) for n in range(4)))
    sessions = {s.context.span_id: s for s in _sessions(telemetry)}
    turns = _turns(telemetry)
    assert len(sessions) == len(turns) == 4
    for turn in turns:
        assert turn.parent is not None
        a = turn.attributes or {}
        assert (sessions[turn.parent.span_id].attributes or {})[sc.GEN_AI_REQUEST_MODEL] == a[sc.GEN_AI_REQUEST_MODEL]
        _within(a[sc.FT_REALTIME_TIME_TO_FIRST_TEXT], FIRST)
        assert a[sc.FT_TRAFFIC_CLASS] == "interactive"


async def test_capture_on(live: GeminiLiveSimulator, certs: Certificates) -> None:
    t = Telemetry()
    assert firsttoken.instrument(
        tracer_provider=t.tracer_provider, meter_provider=t.meter_provider, capture_content=True
    )
    try:
        client = _client(live, certs)
        config = types.LiveConnectConfig(response_modalities=[types.Modality.TEXT])
        async with client.aio.live.connect(model=MODEL, config=config) as session:
            await session.send_client_content(turns=USER)
            await _one_turn(session)
    finally:
        firsttoken.uninstrument()
    from google.genai import live as sdk_live

    for name in ("_receive", "send_client_content", "close"):  # undone
        assert not getattr(vars(sdk_live.AsyncSession)[name], "_self_firsttoken", False)
    (turn,) = _turns(t)
    assert "Hello" * DELTAS in str((turn.attributes or {})[sc.GEN_AI_OUTPUT_MESSAGES])


async def test_connect_refused(telemetry: Telemetry, certs: Certificates) -> None:
    with _sim(certs) as sim:
        client = _client(sim, certs)  # a port nobody listens on once the simulator is closed
    with pytest.raises(OSError):
        async with client.aio.live.connect(model=MODEL):
            pass
    (span,) = _sessions(telemetry)
    assert span.status.status_code == StatusCode.ERROR
    assert (span.attributes or {})[sc.FT_END_REASON] == sc.END_ERROR
    assert sc.FT_REALTIME_CONNECT_TIME not in (span.attributes or {})


async def test_a_failing_reader_never_reaches_the_app(
    telemetry: Telemetry, live: GeminiLiveSimulator, certs: Certificates, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In production (internal errors logged, not raised) a reader that fails leaves the app's messages alone."""
    from firsttoken._internal import ENV_VAR
    from firsttoken.providers import gemini_live

    def broken(*_: Any) -> None:
        raise RuntimeError("a bug in firsttoken")

    monkeypatch.delenv(ENV_VAR)
    monkeypatch.setattr(gemini_live._Session, "received", broken)
    monkeypatch.setattr(gemini_live._Session, "hand_off", broken)
    client = _client(live, certs)
    async with client.aio.live.connect(model=MODEL) as session:
        await session.send_client_content(turns=USER)
        seen = await _one_turn(session)
    assert len(seen) == len(live.sent) - 1
    assert base64.b64decode(live.sent[1]["serverContent"]["modelTurn"]["parts"][0]["inlineData"]["data"]) == (
        seen[0].data
    )
    (span,) = _sessions(telemetry)
    assert (span.attributes or {})[sc.FT_END_REASON] == sc.END_CLOSED
