"""A Realtime API server on a websocket: the events of OpenAI's GA Realtime protocol, with set delays.

Point the openai SDK's ``client.realtime.connect()`` at it (``websocket_base_url=sim.websocket_base_url``)
and each turn is answered as configured by :class:`RealtimeTiming`:

- ``response.create`` (or, in server-VAD mode, an appended audio chunk: ``speech_started``,
  ``speech_stopped`` and ``committed`` at once, then a response of its own) gets ``response.created``
  at once, the first output delta ``first_delta_s`` later, then one delta every ``delta_interval_s``
  (``deltas`` of them; audio deltas carry ``audio_ms_per_delta`` of 24 kHz PCM16 silence, each with its
  transcript delta; text responses carry text deltas), then ``response.done`` with usage.
- ``response.cancel`` ends the response in progress: ``response.done`` with status ``cancelled``.
- Faults, per server: ``error_on_response`` answers every ``response.create`` with an ``error``
  event; ``drop_after_deltas`` ends the TCP connection (no close frame) after that many deltas.
- ``tool``: a response calls that function (``response.output_item.added``, its arguments as
  ``response.function_call_arguments.delta`` events) until the app sends a ``function_call_output``.

Every event sent is kept in :attr:`RealtimeSimulator.sent` so tests can check each against the SDK's
own pydantic types (the server does not import openai). The websocket server is the ``websockets``
package's asyncio one, on its own event loop in a background thread, bound to 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
from dataclasses import dataclass
from typing import Any

from ._websocket import WebsocketServer

SAMPLE_RATE = 24_000
"""PCM16 mono at 24 kHz: the Realtime API's ``audio/pcm`` output."""

_ids = itertools.count(1)


def _id(prefix: str) -> str:
    return f"{prefix}_{next(_ids):06d}"


@dataclass(frozen=True)
class RealtimeTiming:
    """When a response's events go out, from the turn's hand-off."""

    first_delta_s: float = 0.1
    delta_interval_s: float = 0.02
    deltas: int = 5
    audio_ms_per_delta: int = 100
    text: str = "Hello"
    """Each text or transcript delta's text."""
    input_tokens: int = 40
    cached_tokens: int = 16
    error_on_response: bool = False
    drop_after_deltas: int | None = None
    tool: str | None = None
    """A function the model calls: a response not answering that call's output calls it (its
    arguments streamed as the deltas), the next (after ``function_call_output``) answers as usual."""


def _answering(error: dict[str, Any], event: dict[str, Any]) -> dict[str, Any]:
    """An error object naming the client event it answers, when that event had an ``event_id``."""
    if isinstance(event.get("event_id"), str):
        error["event_id"] = event["event_id"]
    return error


class _Session:
    """One websocket connection's state."""

    def __init__(self, sim: RealtimeSimulator, ws: Any, model: str) -> None:
        self.sim = sim
        self.ws = ws
        self.model = model
        self.vad = False
        self.modalities = ["audio"]
        self.task: asyncio.Task[None] | None = None
        self.response_id: str | None = None
        self.audio_ms = 0
        self.tool_answered = False

    async def send(self, event: dict[str, Any]) -> None:
        event["event_id"] = _id("event")
        with self.sim._lock:
            self.sim.sent.append(event)
        await self.ws.send(json.dumps(event))

    def _session(self) -> dict[str, Any]:
        return {
            "type": "realtime",
            "object": "realtime.session",
            "id": "sess_sim",
            "model": self.model,
            "output_modalities": self.modalities,
            "audio": {
                "input": {"turn_detection": {"type": "server_vad"} if self.vad else None},
                "output": {"format": {"type": "audio/pcm", "rate": SAMPLE_RATE}},
            },
        }

    async def handle(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "session.update":
            session = event.get("session") or {}
            if "output_modalities" in session:
                self.modalities = list(session["output_modalities"])
            detection = ((session.get("audio") or {}).get("input") or {}).get("turn_detection", "unset")
            if detection != "unset":
                self.vad = isinstance(detection, dict) and detection.get("type") == "server_vad"
            await self.send({"type": "session.updated", "session": self._session()})
        elif kind == "conversation.item.create":
            item = dict(event.get("item") or {})
            if item.get("type") == "function_call_output":
                self.tool_answered = True
            item.setdefault("id", _id("item"))
            item.setdefault("object", "realtime.item")
            await self.send({"type": "conversation.item.added", "item": item, "previous_item_id": None})
        elif kind == "input_audio_buffer.append":
            audio = base64.b64decode(event.get("audio") or "")
            start_ms = self.audio_ms
            self.audio_ms += len(audio) * 1000 // (2 * SAMPLE_RATE)
            if self.vad:
                item_id = _id("item")
                await self.send(
                    {"type": "input_audio_buffer.speech_started", "audio_start_ms": start_ms, "item_id": item_id}
                )
                if self.task is not None and not self.task.done():  # barge-in: the new speech cuts the answer
                    self.task.cancel()
                    await self._done(self.response_id or "", "cancelled", 0, reason="turn_detected")
                await self.send(
                    {"type": "input_audio_buffer.speech_stopped", "audio_end_ms": self.audio_ms, "item_id": item_id}
                )
                await self.send({"type": "input_audio_buffer.committed", "item_id": item_id, "previous_item_id": None})
                self._respond()
        elif kind == "input_audio_buffer.commit":
            await self.send({"type": "input_audio_buffer.committed", "item_id": _id("item"), "previous_item_id": None})
        elif kind == "response.create":
            if self.sim.timing.error_on_response:
                error = {"type": "server_error", "code": "server_error", "message": "The server had an error"}
                await self.send({"type": "error", "error": _answering(error, event)})
                return
            self._respond()
        elif kind == "response.cancel":
            if self.task is not None and not self.task.done():
                self.task.cancel()
                await self._done(self.response_id or "", "cancelled", 0, reason="client_cancelled")
            else:
                error = {
                    "type": "invalid_request_error",
                    "code": "response_cancel_not_active",
                    "message": "Cancellation failed: no active response found",
                }
                await self.send({"type": "error", "error": _answering(error, event)})

    def _respond(self) -> None:
        self.response_id = _id("resp")
        self.task = asyncio.ensure_future(self._answer(self.response_id))

    async def _answer(self, response_id: str) -> None:
        from websockets.exceptions import ConnectionClosed

        with contextlib.suppress(ConnectionClosed):  # the client went mid-answer
            await self._response(response_id)

    async def _response(self, response_id: str) -> None:
        timing = self.sim.timing
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await self.send({"type": "response.created", "response": self._response_object(response_id, "in_progress")})
        audio = "audio" in self.modalities
        item_id = _id("item")
        chunk = base64.b64encode(bytes(2 * SAMPLE_RATE * timing.audio_ms_per_delta // 1000)).decode()
        common = {"response_id": response_id, "item_id": item_id, "output_index": 0, "content_index": 0}
        call = None
        if timing.tool is not None and not self.tool_answered:
            call = {"type": "function_call", "id": item_id, "call_id": _id("call"), "name": timing.tool}
            await self.send(
                {
                    "type": "response.output_item.added",
                    "response_id": response_id,
                    "output_index": 0,
                    "item": {**call, "arguments": "", "status": "in_progress", "object": "realtime.item"},
                }
            )
        self.tool_answered = False
        for k in range(timing.deltas):
            await asyncio.sleep(max(0.0, t0 + timing.first_delta_s + k * timing.delta_interval_s - loop.time()))
            if timing.drop_after_deltas is not None and k >= timing.drop_after_deltas:
                # No close frame: the client sees the connection end (1006), after the deltas already
                # sent (closing, unlike aborting, writes out what the transport still holds).
                self.ws.transport.close()
                return
            if call is not None:
                args = {"response_id": response_id, "item_id": item_id, "output_index": 0, "call_id": call["call_id"]}
                await self.send({"type": "response.function_call_arguments.delta", "delta": "{}"[k : k + 1], **args})
            elif audio:
                await self.send({"type": "response.output_audio.delta", "delta": chunk, **common})
                await self.send({"type": "response.output_audio_transcript.delta", "delta": timing.text, **common})
            else:
                await self.send({"type": "response.output_text.delta", "delta": timing.text, **common})
        output = [] if call is None else [{**call, "arguments": "{}", "status": "completed", "object": "realtime.item"}]
        await self._done(response_id, "completed", timing.deltas, output=output)

    async def _done(
        self, response_id: str, status: str, deltas: int, reason: str | None = None, output: list[Any] | None = None
    ) -> None:
        timing = self.sim.timing
        audio = "audio" in self.modalities and not output
        text_tokens = deltas
        audio_tokens = deltas * 5 if audio else 0
        response = self._response_object(response_id, status)
        response["output"] = output or []
        if reason is not None:
            response["status_details"] = {"type": status, "reason": reason}
        response["usage"] = {
            "total_tokens": timing.input_tokens + text_tokens + audio_tokens,
            "input_tokens": timing.input_tokens,
            "output_tokens": text_tokens + audio_tokens,
            "input_token_details": {
                "text_tokens": timing.input_tokens,
                "audio_tokens": 0,
                "cached_tokens": timing.cached_tokens,
            },
            "output_token_details": {"text_tokens": text_tokens, "audio_tokens": audio_tokens},
        }
        await self.send({"type": "response.done", "response": response})

    def _response_object(self, response_id: str, status: str) -> dict[str, Any]:
        return {
            "id": response_id,
            "object": "realtime.response",
            "status": status,
            "output_modalities": self.modalities,
            "conversation_id": "conv_sim",
            "output": [],
        }


class RealtimeSimulator(WebsocketServer):
    """The Realtime API on ``ws://127.0.0.1:<port>/v1/realtime``; a context manager."""

    def __init__(self, timing: RealtimeTiming | None = None) -> None:
        super().__init__("firsttoken-realtime-sim")
        self.timing = timing or RealtimeTiming()
        self.sent: list[dict[str, Any]] = []
        """Every event sent, in order (across connections)."""
        self.connections = 0

    @property
    def websocket_base_url(self) -> str:
        """The SDK's ``websocket_base_url``: it appends ``/realtime``."""
        return f"ws://127.0.0.1:{self._port}/v1"

    async def _connection(self, ws: Any) -> None:
        from urllib.parse import parse_qs, urlsplit

        from websockets.exceptions import ConnectionClosed

        with self._lock:
            self.connections += 1
        query = parse_qs(urlsplit(ws.request.path).query)
        session = _Session(self, ws, (query.get("model") or ["gpt-realtime"])[0])
        await session.send({"type": "session.created", "session": session._session()})
        try:
            async for message in ws:
                await session.handle(json.loads(message))
        except ConnectionClosed:  # the client went: its connection is over
            pass
        finally:
            if session.task is not None:
                session.task.cancel()
