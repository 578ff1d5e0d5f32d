"""Replaying recorded real traffic (VCR.py cassettes) through the simulator's wire and clock."""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import threading
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ._reply import Call

__all__ = ["Cassettes", "Interaction"]

# Hop-by-hop and framing headers describe the recorded connection, not the response: ours differ.
_DROP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "content-length",
        "content-encoding",
    }
)


@dataclass
class Interaction:
    method: str
    path: str
    request: Any
    status: int
    headers: list[tuple[str, str]]
    body: bytes
    source: str
    used: bool = False

    @property
    def is_sse(self) -> bool:
        return any(k.lower() == "content-type" and "text/event-stream" in v for k, v in self.headers)

    def events(self) -> list[bytes]:
        """The recorded SSE body split into events, each with its blank-line terminator."""
        text = self.body.replace(b"\r\n", b"\n")
        parts = [p for p in text.split(b"\n\n") if p.strip()]
        return [p + b"\n\n" for p in parts]


def _text(value: Any) -> bytes:
    if isinstance(value, dict):
        value = value.get("string", "")
    if value is None:
        return b""
    return value if isinstance(value, bytes) else str(value).encode()


def _decode_body(raw: bytes, encoding: str) -> bytes:
    """Undo gzip/deflate (VCR stores the bytes as sent); tolerate base64-wrapped bodies too."""
    if encoding and not raw.startswith(b"\x1f\x8b"):
        try:
            decoded = base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            decoded = raw
        raw = decoded
    if raw.startswith(b"\x1f\x8b"):
        return gzip.decompress(raw)
    if "deflate" in encoding:
        try:
            return zlib.decompress(raw)
        except zlib.error:
            return zlib.decompress(raw, -zlib.MAX_WBITS)
    return raw


def _parse_json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _load_file(path: Path) -> list[Interaction]:
    try:
        import yaml
    except ImportError as exc:  # pragma: no cover - PyYAML is a dev dependency
        raise RuntimeError("Simulator(replay=...) needs PyYAML: pip install pyyaml") from exc
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("interactions"), list):
        raise ValueError(f"{path} is not a VCR cassette (no 'interactions' list)")
    out = []
    for number, item in enumerate(data["interactions"]):
        request, response = item["request"], item["response"]
        headers: list[tuple[str, str]] = []
        encoding = ""
        for name, values in (response.get("headers") or {}).items():
            for value in values if isinstance(values, list) else [values]:
                if name.lower() == "content-encoding":
                    encoding = str(value).lower()
                if name.lower() not in _DROP:
                    headers.append((str(name).lower(), str(value)))
        status = response.get("status", {})
        out.append(
            Interaction(
                method=str(request.get("method", "POST")).upper(),
                path=urlsplit(str(request["uri"])).path.rstrip("/") or "/",
                request=_parse_json(_text(request.get("body"))),
                status=int(status.get("code", 200) if isinstance(status, dict) else status),
                headers=headers,
                body=_decode_body(_text(response.get("body")), encoding),
                source=f"{path.name}#{number}",
            )
        )
    return out


class Cassettes:
    """All loaded interactions; hands out the best match for each request."""

    def __init__(self, paths: Iterable[str | PathLike[str]]) -> None:
        self._items: list[Interaction] = []
        self._lock = threading.Lock()
        for entry in paths:
            path = Path(entry)
            if path.is_dir():
                files = sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml"))
            elif path.is_file():
                files = [path]
            else:
                raise FileNotFoundError(f"replay cassette not found: {path}")
            for file in files:
                self._items.extend(_load_file(file))

    def __len__(self) -> int:
        return len(self._items)

    def match(self, method: str, path: str, body: Any) -> Interaction | None:
        """Same method and path; then the same JSON body, unused first; else the first unused one.

        Once every interaction on a path has been used, they are served again in order, so a
        cassette can back a test that runs its calls more than once.
        """
        with self._lock:
            same = [i for i in self._items if i.method == method and i.path == path]
            if not same:
                return None
            exact = [i for i in same if i.request == body]
            found = next((i for i in exact if not i.used), None) or next((i for i in same if not i.used), None)
            if found is None:
                found = exact[0] if exact else same[0]
                for i in same:
                    i.used = False
            found.used = True
            return found


def usage_of(interaction: Interaction) -> dict[str, int]:
    """Best-effort token counts from a recorded body, for ``Simulator.requests``."""
    found: dict[str, int] = {}
    chunks = [interaction.body]
    if interaction.is_sse:
        chunks = [line[5:] for line in interaction.body.splitlines() if line.startswith(b"data:")]

    def visit(value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if isinstance(item, int) and not isinstance(item, bool) and key.endswith(("tokens", "TokenCount")):
                    found[key] = max(found.get(key, 0), item)
                else:
                    visit(item)
        elif isinstance(value, list):
            for item in value:
                visit(item)

    for raw in chunks:
        visit(_parse_json(raw.strip()))
    return found


async def replay(call: Call, interaction: Interaction) -> None:
    """Answer with the recording: queue delay before the headers, then one event per decode step."""
    call.replayed = True
    counts = usage_of(interaction)
    u = call.usage
    u.input_tokens = counts.get("prompt_tokens", 0) or counts.get("input_tokens", 0)
    u.cached_tokens = counts.get("cached_tokens", 0) or counts.get("cache_read_input_tokens", 0)
    u.cache_creation_tokens = counts.get("cache_creation_input_tokens", 0)
    u.output_tokens = counts.get("completion_tokens", 0) or counts.get("output_tokens", 0)
    u.reasoning_tokens = counts.get("reasoning_tokens", 0)
    if "promptTokenCount" in counts:  # Gemini's usageMetadata; its thoughts are output too
        u.input_tokens = counts["promptTokenCount"]
        u.cached_tokens = counts.get("cachedContentTokenCount", 0)
        u.reasoning_tokens = counts.get("thoughtsTokenCount", 0)
        u.output_tokens = counts.get("candidatesTokenCount", 0) + u.reasoning_tokens
    if interaction.path.startswith("/v1/messages"):
        u.input_tokens += u.cached_tokens + u.cache_creation_tokens  # Anthropic's input excludes cache
    sched = call.schedule(0)
    if not (interaction.is_sse and interaction.status < 400):
        await call.respond(interaction.status, interaction.headers, interaction.body, at=sched.headers_at)
        return
    call.stream = True
    await call.start_stream(interaction.headers, at=sched.headers_at)
    for event in interaction.events():
        await call.event(event, at=sched.next_token())
    await call.end_stream()
