"""Approximate tokens in, made-up tokens out.

The tokenizer is deliberately simple and deterministic: runs of up to four letters (with one
leading space), up to three digits, single punctuation marks and other whitespace runs. On English
text that lands near the ~4 characters per token of real BPE vocabularies, which is all the latency
model needs; it is not any provider's tokenizer.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["Prompt", "Segment", "chunk", "generate_text", "instance_of_schema", "tokenize"]

_TOKEN = re.compile(r" ?[^\W\d_]{1,4}| ?\d{1,3}| ?[^\w\s]|\s+|_")

#: What an image, audio clip or document counts as, whatever its size (roughly a low-detail image).
MEDIA_TOKENS = 85
_MEDIA_TYPES = frozenset(
    {"image", "image_url", "input_image", "input_audio", "input_file", "document", "file", "audio"}
)
# Keys that are structure, not prompt text.
_SKIP_KEYS = frozenset({"type", "cache_control", "id", "tool_call_id", "tool_use_id", "call_id", "signature"})

_VOCABULARY = (
    "the of and to in is that for it as was with be by on not he this are or his from at which but "
    "have an they you were her she there been one all we their has would when if so no what up out "
    "latency token model stream first time server cache prompt answer simple quick light signal "
    "measure wire queue river stone cloud forest paper window garden music story morning number "
    "system value result market world question people moment thought water bridge engine"
)
_WORDS = _VOCABULARY.split()


def tokenize(text: str) -> list[str]:
    return _TOKEN.findall(text)


@dataclass
class Segment:
    """A run of prompt tokens; ``breakpoint`` marks an Anthropic ``cache_control`` at its end."""

    tokens: list[str]
    breakpoint: bool = False


class Prompt:
    """The prompt as the server sees it: ordered token segments (tools, system, messages)."""

    def __init__(self) -> None:
        self.segments: list[Segment] = []

    def add_text(self, text: str) -> None:
        self.segments.append(Segment(tokenize(text)))

    def add_marker(self, marker: str) -> None:
        """A token that is not text (a role header). NUL keeps it apart from any real text."""
        self.segments.append(Segment([f"\x00{marker}"]))

    def add_value(self, value: Any) -> None:
        """Every string in a JSON value, in order, with media counted at a flat rate.

        A block carrying Anthropic's ``cache_control`` ends a cacheable prefix.
        """
        tokens: list[str] = []
        _walk(value, tokens)
        self.segments.append(Segment(tokens, _has_cache_control(value)))

    def add_json(self, value: Any) -> None:
        """A definition (a tool, a schema) as its canonical JSON text."""
        if isinstance(value, dict):
            value = {k: v for k, v in value.items() if k != "cache_control"}
        self.add_text(json.dumps(value, sort_keys=True, separators=(",", ":")))

    @property
    def tokens(self) -> list[str]:
        return [t for s in self.segments for t in s.tokens]

    def __len__(self) -> int:
        return sum(len(s.tokens) for s in self.segments)

    def breakpoints(self) -> list[int]:
        """Token offsets just after each ``cache_control`` breakpoint."""
        out, total = [], 0
        for s in self.segments:
            total += len(s.tokens)
            if s.breakpoint:
                out.append(total)
        return out


def _has_cache_control(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("cache_control"), dict)


def _walk(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        if not value.startswith("data:"):  # inline base64 media is not text
            out.extend(tokenize(value))
    elif isinstance(value, dict):
        if value.get("type") in _MEDIA_TYPES:
            out.extend(["\x00media"] * MEDIA_TOKENS)
            return
        for key, item in value.items():
            if key not in _SKIP_KEYS:
                _walk(item, out)
    elif isinstance(value, list):
        for item in value:
            _walk(item, out)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        out.extend(tokenize(str(value)))


def generate_text(rng: random.Random, tokens: int) -> list[str]:
    """``tokens`` made-up tokens (words with their leading space), ending a sentence."""
    out = []
    for i in range(tokens):
        word = rng.choice(_WORDS)
        if i == 0:
            out.append(word.capitalize())
        elif i == tokens - 1:
            out.append(".")
        else:
            out.append(" " + word)
    return out


def json_tokens(value: Any) -> list[str]:
    """A JSON value's compact text, split into tokens whose concatenation is the text exactly."""
    return tokenize(json.dumps(value, separators=(",", ":"), ensure_ascii=False)) or ["{}"]


def chunk(tokens: list[str], size: int) -> Iterator[list[str]]:
    for i in range(0, len(tokens), size):
        yield tokens[i : i + size]


def instance_of_schema(schema: Any, *, root: Any = None, depth: int = 0) -> Any:
    """A small value that validates against a JSON schema, so ``.parse()`` helpers succeed.

    Covers what pydantic and the SDKs emit: objects, arrays, scalars, enums, consts, ``$ref`` into
    ``$defs``/``definitions``, and ``anyOf``/``oneOf``/``allOf`` (first branch).
    """
    root = schema if root is None else root
    if not isinstance(schema, dict) or depth > 12:
        return None
    if "$ref" in schema:
        target: Any = root
        for part in str(schema["$ref"]).lstrip("#/").split("/"):
            target = target.get(part, {}) if isinstance(target, dict) else {}
        return instance_of_schema(target, root=root, depth=depth + 1)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            branches = [b for b in schema[key] if not (isinstance(b, dict) and b.get("type") == "null")]
            return instance_of_schema((branches or schema[key])[0], root=root, depth=depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        props = schema.get("properties") or {}
        return {name: instance_of_schema(sub, root=root, depth=depth + 1) for name, sub in props.items()}
    if kind == "array":
        count = max(1, int(schema.get("minItems", 1)))
        return [instance_of_schema(schema.get("items", {}), root=root, depth=depth + 1) for _ in range(count)]
    if kind == "string":
        return {"date-time": "2025-01-01T00:00:00Z", "date": "2025-01-01"}.get(schema.get("format", ""), "example")
    if kind == "integer":
        return int(schema.get("minimum", 1))
    if kind == "number":
        return float(schema.get("minimum", 1.0))
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return {}
