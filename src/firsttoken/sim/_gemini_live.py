"""A Gemini Live server on a websocket: the ``BidiGenerateContent`` JSON protocol, with set delays.

Point google-genai's ``client.aio.live.connect()`` at it (``http_options`` with
``base_url=sim.base_url`` and the client TLS context as ``async_client_args={"ssl": ...}``: the SDK
always connects with ``wss``) and each turn is answered as :class:`GeminiLiveTiming` says:

- ``setup`` gets ``setupComplete``. A turn is handed to the model by ``clientContent`` with
  ``turnComplete``, by ``realtimeInput``'s ``activityEnd`` (when the setup turned automatic activity
  detection off), by an audio ``realtimeInput`` under automatic detection (the server's VAD: each audio
  chunk is an utterance; ``voiceActivity`` start and end go out first when ``vad_signals``), or by a
  ``toolResponse``. The first ``serverContent`` with a ``modelTurn`` goes out ``first_delta_s`` after
  the hand-off, then one every ``delta_interval_s`` (``deltas`` of them: ``audio_ms_per_delta`` of
  24 kHz PCM16 silence each, with an ``outputTranscription`` when the setup asked for one; or text
  parts), then ``generationComplete``, then ``turnComplete`` with the turn's ``usageMetadata``
  (Vertex AI's ``LlmBidiService`` path names its output ``candidates``, the Gemini API ``response``).
- Audio while a turn plays (automatic detection) cuts it: ``serverContent`` with ``interrupted``.
- ``tool``: a turn not answering a tool response is a ``toolCall`` of that function instead.
- Faults: ``close_after_deltas`` ends the connection after that many deltas, with a close frame of
  ``close_code`` (and ``close_reason``), or none (the client sees 1006) when ``close_code`` is None;
  ``go_away_after_turns`` sends ``goAway`` after that many turns and closes (1000) ``go_away_s`` later.

Every message sent is kept in :attr:`GeminiLiveSimulator.sent` so tests can check each against the
SDK's own pydantic types (the server does not import google-genai). The websocket server is the
``websockets`` package's asyncio one, on its own event loop in a background thread, on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import ssl
from dataclasses import dataclass
from typing import Any

from ._websocket import WebsocketServer

SAMPLE_RATE = 24_000
"""PCM16 mono at 24 kHz: Gemini Live's output audio."""
AUDIO_MIME = f"audio/pcm;rate={SAMPLE_RATE}"


@dataclass(frozen=True)
class GeminiLiveTiming:
    """When a turn's messages go out, from its hand-off."""

    first_delta_s: float = 0.1
    delta_interval_s: float = 0.02
    deltas: int = 5
    audio_ms_per_delta: int = 100
    text: str = "Hello"
    """Each text part's (or output transcription's) text."""
    prompt_tokens: int = 40
    cached_tokens: int = 16
    vad_signals: bool = True
    """Under automatic activity detection, send ``voiceActivity`` start and end before answering."""
    tool: str | None = None
    close_after_deltas: int | None = None
    close_code: int | None = None
    close_reason: str = ""
    go_away_after_turns: int | None = None
    go_away_s: float = 0.05


def _field(message: dict[str, Any], camel: str) -> Any:
    """A field in either spelling: the protocol's JSON mapping takes both (the SDK sends some top-level
    and nested fields in snake_case)."""
    if camel in message:
        return message[camel]
    return message.get("".join(f"_{c.lower()}" if c.isupper() else c for c in camel))


class _Session:
    """One websocket connection's state."""

    def __init__(self, sim: GeminiLiveSimulator, ws: Any, setup: dict[str, Any]) -> None:
        self.sim = sim
        self.ws = ws
        self.vertex = "aiplatform" in ws.request.path
        """Vertex AI's ``LlmBidiService``: its usage names the response ``candidates``, as its REST API does."""
        config = setup.get("generationConfig") or {}
        self.audio = "AUDIO" in (config.get("responseModalities") or ["AUDIO"])
        self.transcribe = "outputAudioTranscription" in setup
        detection = _field(_field(setup, "realtimeInputConfig") or {}, "automaticActivityDetection") or {}
        self.auto_vad = not detection.get("disabled", False)
        self.task: asyncio.Task[None] | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        """Every answer still running (cancelled when the connection ends)."""
        self.tool_answered = False
        self.turns = 0
        self.calls = 0

    async def send(self, message: dict[str, Any]) -> None:
        with self.sim._lock:
            self.sim.sent.append(message)
        await self.ws.send(json.dumps(message))

    async def handle(self, message: dict[str, Any]) -> None:
        content = _field(message, "clientContent")
        realtime = _field(message, "realtimeInput")
        if content is not None:
            if _field(content, "turnComplete"):
                self._respond()
        elif realtime is not None:
            if _field(realtime, "activityEnd") is not None and not self.auto_vad:
                self._respond()
            elif "audio" in realtime and self.auto_vad:
                if self.task is not None and not self.task.done():  # barge-in: the new speech cuts the answer
                    self.task.cancel()
                    await self.send({"serverContent": {"interrupted": True}})
                if self.sim.timing.vad_signals:
                    await self.send({"voiceActivity": {"type": "ACTIVITY_START"}})
                    await self.send({"voiceActivity": {"type": "ACTIVITY_END"}})
                self._respond()
        elif _field(message, "toolResponse") is not None:
            self.tool_answered = True
            self._respond()

    def _respond(self) -> None:
        self.task = asyncio.ensure_future(self._answer())
        self.tasks.add(self.task)
        self.task.add_done_callback(self.tasks.discard)

    async def _answer(self) -> None:
        from websockets.exceptions import ConnectionClosed

        with contextlib.suppress(ConnectionClosed):  # the client went mid-answer
            await self._turn()

    async def _turn(self) -> None:
        timing = self.sim.timing
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        if timing.tool is not None and not self.tool_answered:
            await asyncio.sleep(timing.first_delta_s)
            self.calls += 1
            call = {"id": f"call_{self.calls}", "name": timing.tool, "args": {}}
            await self.send({"toolCall": {"functionCalls": [call]}})
            return
        self.tool_answered = False
        chunk = base64.b64encode(bytes(2 * SAMPLE_RATE * timing.audio_ms_per_delta // 1000)).decode()
        for k in range(timing.deltas):
            await asyncio.sleep(max(0.0, t0 + timing.first_delta_s + k * timing.delta_interval_s - loop.time()))
            if timing.close_after_deltas is not None and k >= timing.close_after_deltas:
                if timing.close_code is None:
                    # No close frame: the client sees the connection end (1006), after what was sent
                    # (closing the transport, unlike aborting it, writes out what it still holds).
                    self.ws.transport.close()
                else:
                    await self.ws.close(timing.close_code, timing.close_reason)
                return
            part: dict[str, Any] = (
                {"inlineData": {"mimeType": AUDIO_MIME, "data": chunk}} if self.audio else {"text": timing.text}
            )
            await self.send({"serverContent": {"modelTurn": {"role": "model", "parts": [part]}}})
            if self.audio and self.transcribe:
                await self.send({"serverContent": {"outputTranscription": {"text": timing.text}}})
        await self.send({"serverContent": {"generationComplete": True}})
        response_tokens = timing.deltas * (5 if self.audio else 1)
        modality = "AUDIO" if self.audio else "TEXT"
        response = "candidates" if self.vertex else "response"
        usage = {
            "promptTokenCount": timing.prompt_tokens,
            "cachedContentTokenCount": timing.cached_tokens,
            f"{response}TokenCount": response_tokens,
            "totalTokenCount": timing.prompt_tokens + response_tokens,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": timing.prompt_tokens}],
            f"{response}TokensDetails": [{"modality": modality, "tokenCount": response_tokens}],
        }
        await self.send({"serverContent": {"turnComplete": True}, "usageMetadata": usage})
        self.turns += 1
        if timing.go_away_after_turns is not None and self.turns >= timing.go_away_after_turns:
            await self.send({"goAway": {"timeLeft": f"{timing.go_away_s:.3f}s"}})
            await asyncio.sleep(timing.go_away_s)
            await self.ws.close(1000, "session over")


class GeminiLiveSimulator(WebsocketServer):
    """Gemini Live on ``wss://127.0.0.1:<port>/ws/...BidiGenerateContent``; a context manager.

    ``ssl_context``: the server's (``firsttoken.sim.tls.test_certificates().server``); the SDK only
    speaks ``wss``.
    """

    def __init__(self, timing: GeminiLiveTiming | None = None, *, ssl_context: ssl.SSLContext) -> None:
        super().__init__("firsttoken-gemini-live-sim", ssl_context)
        self.timing = timing or GeminiLiveTiming()
        self.sent: list[dict[str, Any]] = []
        """Every message sent, in order (across connections)."""
        self.received: list[dict[str, Any]] = []
        """Every client message, in order (across connections)."""
        self.paths: list[str] = []
        """Each connection's request path (with its query)."""

    @property
    def base_url(self) -> str:
        """The SDK's ``HttpOptions.base_url`` (it makes the websocket's ``wss`` URL of it)."""
        return f"https://127.0.0.1:{self._port}"

    async def _connection(self, ws: Any) -> None:
        from websockets.exceptions import ConnectionClosed

        with self._lock:
            self.paths.append(ws.request.path)
        session: _Session | None = None
        try:
            async for raw in ws:
                message = json.loads(raw)
                with self._lock:
                    self.received.append(message)
                if session is None:
                    session = _Session(self, ws, message.get("setup") or {})
                    await session.send({"setupComplete": {}})
                else:
                    await session.handle(message)
        except ConnectionClosed:  # the client went: its connection is over
            pass
        finally:
            for task in list(session.tasks if session is not None else ()):
                task.cancel()
