"""Real OpenAI traffic, replayed by the simulator through the real SDK, yields what a live server would.

The expected values are read straight from each recording's response body, independently of
firsttoken's own parsing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml
from opentelemetry.trace import StatusCode

import firsttoken
from firsttoken import semconv as sc
from firsttoken.sim import LatencyModel, Simulator

from .conftest import Telemetry, recorded_cassettes

CASSETTES = recorded_cassettes("openai")

_ERRORS = {400: openai.BadRequestError, 401: openai.AuthenticationError, 404: openai.NotFoundError,
           429: openai.RateLimitError}  # fmt: skip


def _expected(status: int, text: str, stream: bool) -> dict[str, Any]:
    """The attributes a live server's answer implies, from the recorded body alone."""
    if status >= 400:
        return {sc.ERROR_TYPE: _ERRORS[status].__name__, sc.HTTP_RESPONSE_STATUS_CODE: status}
    if stream:
        chunks = [
            json.loads(line[len("data: ") :])
            for line in text.splitlines()
            if line.startswith("data: ") and line != "data: [DONE]"
        ]
        head = chunks[0]
        reasons = {c["index"]: c["finish_reason"] for ch in chunks for c in ch["choices"] if c.get("finish_reason")}
        usage = next((ch["usage"] for ch in chunks if ch.get("usage")), None)
    else:
        head = json.loads(text)
        reasons = {c["index"]: c["finish_reason"] for c in head.get("choices", []) if c.get("finish_reason")}
        usage = head.get("usage")
    out: dict[str, Any] = {sc.GEN_AI_RESPONSE_MODEL: head["model"], sc.HTTP_RESPONSE_STATUS_CODE: status}
    if "id" in head:
        out[sc.GEN_AI_RESPONSE_ID] = head["id"]
    if reasons:
        out[sc.GEN_AI_RESPONSE_FINISH_REASONS] = tuple(reasons[i] for i in sorted(reasons))
    if usage:
        out[sc.GEN_AI_USAGE_INPUT_TOKENS] = usage["prompt_tokens"]
        if "completion_tokens" in usage:
            out[sc.GEN_AI_USAGE_OUTPUT_TOKENS] = usage["completion_tokens"]
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        if cached is not None:
            out[sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] = cached
        reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens")
        if reasoning:  # none reported: absent (docs/semantics.md, "Absent means")
            out[sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] = reasoning
    return out


def _interactions(path: Path) -> list[tuple[str, dict[str, Any], int, str]]:
    data = yaml.safe_load(path.read_text())
    out = []
    for it in data["interactions"]:
        body = it["request"]["body"]
        out.append(
            (
                it["request"]["uri"].split("/v1", 1)[1],
                json.loads(body if isinstance(body, str) else body["string"]),
                it["response"]["status"]["code"],
                it["response"]["body"]["string"],
            )
        )
    return out


@pytest.mark.parametrize("cassette", CASSETTES, ids=[c.stem for c in CASSETTES])
def test_recording_replays_with_live_attributes(cassette: Path) -> None:
    t = Telemetry()
    assert firsttoken.instrument(tracer_provider=t.tracer_provider, meter_provider=t.meter_provider)
    try:
        with Simulator(replay=[cassette], latency=LatencyModel(queue_ms=1, decode_tokens_per_s=2000, jitter=0)) as sim:
            c = openai.OpenAI(base_url=sim.openai_base_url, api_key="sk-test", max_retries=0)
            for path, body, status, text in _interactions(cassette):
                t.exporter.clear()
                stream = bool(body.get("stream"))
                call = c.chat.completions.create if path == "/chat/completions" else c.embeddings.create
                if status >= 400:
                    with pytest.raises(_ERRORS[status]):
                        call(**body)
                else:
                    result = call(**body)
                    if stream:
                        list(result)
                span = t.call()
                attrs = dict(span.attributes or {})
                for key, value in _expected(status, text, stream).items():
                    assert attrs.get(key) == value, (cassette.name, key)
                assert attrs[sc.GEN_AI_REQUEST_MODEL] == body["model"]
                assert span.status.status_code is (StatusCode.ERROR if status >= 400 else StatusCode.UNSET)
                if stream and status < 400:
                    assert attrs[sc.FT_TIME_TO_FIRST_TOKEN] > 0
    finally:
        firsttoken.uninstrument()
