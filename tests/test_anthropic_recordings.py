"""Real Anthropic traffic, replayed through the real SDK, yields the usage and cache attributes a live server would.

Expected values come straight from each recording's response body.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import anthropic
import pytest
import yaml

import firsttoken
from firsttoken import semconv as sc
from firsttoken.sim import LatencyModel, Simulator

from .conftest import Telemetry, recorded_cassettes

# The recordings name models the SDK now calls deprecated; that warning is about the data, not us.
pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")

CASSETTES = recorded_cassettes("anthropic")


def _text(body: Any) -> str:
    raw = body["string"] if isinstance(body, dict) else body
    if isinstance(raw, bytes):
        return (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode()
    return str(raw)


def _expected(text: str, stream: bool) -> dict[str, Any]:
    usage: dict[str, Any] = {}
    if stream:
        events = [json.loads(line[len("data: ") :]) for line in text.splitlines() if line.startswith("data: ")]
        start = next(e["message"] for e in events if e["type"] == "message_start")
        delta = next(e for e in events if e["type"] == "message_delta")
        usage.update(start["usage"])
        usage.update({k: v for k, v in delta["usage"].items() if v is not None})
        message = {"id": start["id"], "model": start["model"], "stop_reason": delta["delta"]["stop_reason"]}
    else:
        message = json.loads(text)
        usage = message["usage"]
    read = usage.get("cache_read_input_tokens") or 0
    created = usage.get("cache_creation_input_tokens") or 0
    out = {
        sc.GEN_AI_RESPONSE_ID: message["id"],
        sc.GEN_AI_RESPONSE_MODEL: message["model"],
        sc.GEN_AI_RESPONSE_FINISH_REASONS: (message["stop_reason"],),
        sc.GEN_AI_USAGE_INPUT_TOKENS: usage["input_tokens"] + read + created,
        sc.GEN_AI_USAGE_OUTPUT_TOKENS: usage["output_tokens"],
    }
    if "cache_read_input_tokens" in usage:
        out[sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] = read
    if "cache_creation_input_tokens" in usage:
        out[sc.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS] = created
    return out


@pytest.mark.parametrize("cassette", CASSETTES, ids=[c.stem for c in CASSETTES])
def test_recording_replays_with_live_usage_and_cache(cassette: Path) -> None:
    t = Telemetry()
    assert firsttoken.instrument(tracer_provider=t.tracer_provider, meter_provider=t.meter_provider)
    try:
        with Simulator(replay=[cassette], latency=LatencyModel(queue_ms=1, decode_tokens_per_s=2000, jitter=0)) as sim:
            c = anthropic.Anthropic(base_url=sim.anthropic_base_url, api_key="sk-ant-test", max_retries=0)
            for it in yaml.safe_load(cassette.read_text())["interactions"]:
                t.exporter.clear()
                raw_body = it["request"]["body"]
                body = json.loads(raw_body if isinstance(raw_body, str) else raw_body["string"])
                stream = bool(body.pop("stream", False))
                if stream:
                    for _ in c.messages.create(**body, stream=True):
                        pass
                else:
                    c.messages.create(**body)
                attrs = dict(t.call().attributes or {})
                for key, value in _expected(_text(it["response"]["body"]), stream).items():
                    assert attrs.get(key) == value, (cassette.name, key)
                if stream:
                    assert attrs[sc.FT_TIME_TO_FIRST_TOKEN] > attrs[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK]
    finally:
        firsttoken.uninstrument()
