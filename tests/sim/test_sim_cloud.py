"""The clouds' paths of the simulator: Bedrock's event-stream framing, read by botocore's own parser
(the one anthropic's ``AnthropicBedrock`` uses), the paths of Vertex AI and Azure OpenAI, and
Bedrock's Converse API through boto3's ``bedrock-runtime`` client."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest

from firsttoken.sim import Fault, Simulator

botocore_eventstream = pytest.importorskip("botocore.eventstream", reason="anthropic[bedrock] is in the dev extra")

BODY = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64, "messages": [{"role": "user", "content": "Hi."}]}


def _frames(raw: bytes) -> list[object]:
    buffer = botocore_eventstream.EventStreamBuffer()
    buffer.add_data(raw)
    return list(buffer)


def test_bedrock_stream_frames_parse_with_botocore(sim: Simulator) -> None:
    response = httpx.post(f"{sim.url}/model/anthropic.claude-x-v1:0/invoke-with-response-stream", json=BODY)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/vnd.amazon.eventstream"
    frames = _frames(response.content)  # checks each prelude's and message's CRC32
    events = []
    for frame in frames:
        assert frame.headers == {
            ":event-type": "chunk",
            ":content-type": "application/json",
            ":message-type": "event",
        }
        events.append(json.loads(base64.b64decode(json.loads(frame.payload)["bytes"])))
    kinds = [e["type"] for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert events[0]["message"]["model"] == "anthropic.claude-x-v1:0", "the model of the path"
    assert events[-2]["usage"]["output_tokens"] == 12
    served = sim.wait_for_requests(1)[0]
    assert served.stream and served.model == "anthropic.claude-x-v1:0" and served.output_tokens == 12


def test_bedrock_frame_crcs_are_checked(sim: Simulator) -> None:
    raw = bytearray(httpx.post(f"{sim.url}/model/m/invoke-with-response-stream", json=BODY).content)
    raw[20] ^= 0xFF  # inside the first message's headers: its message CRC no longer matches
    with pytest.raises(botocore_eventstream.ChecksumMismatch):
        _frames(bytes(raw))
    raw[20] ^= 0xFF
    raw[2] ^= 0x01  # the prelude's length: its prelude CRC no longer matches
    with pytest.raises(botocore_eventstream.ChecksumMismatch):
        _frames(bytes(raw))


def test_bedrock_error_event_is_an_exception_frame(sim: Simulator) -> None:
    sim.inject(Fault.error_event(after_chunks=2))
    frames = _frames(httpx.post(f"{sim.url}/model/m/invoke-with-response-stream", json=BODY).content)
    assert len(frames) == 3
    last = frames[-1]
    assert last.headers[":message-type"] == "exception"
    assert last.headers[":exception-type"] == "modelStreamErrorException"


def test_bedrock_and_vertex_whole(sim: Simulator) -> None:
    bedrock = httpx.post(f"{sim.url}/model/claude-b/invoke", json=BODY).json()
    vertex_path = "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-v@2025:rawPredict"
    vertex = httpx.post(sim.url + vertex_path, json={**BODY, "anthropic_version": "vertex-2023-10-16"}).json()
    assert bedrock["type"] == vertex["type"] == "message"
    assert (bedrock["model"], vertex["model"]) == ("claude-b", "claude-v@2025")


def test_vertex_stream_is_sse(sim: Simulator) -> None:
    path = "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-v:streamRawPredict"
    response = httpx.post(sim.url + path, json={**BODY, "stream": True})
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.text.startswith("event: message_start\n")


def test_azure_deployment_paths_are_openai_paths(sim: Simulator) -> None:
    url = f"{sim.url}/openai/deployments/dep/chat/completions?api-version=2024-10-21"
    body = {"model": "gpt-x", "messages": [{"role": "user", "content": "Hi."}]}
    response = httpx.post(url, json=body)
    assert response.status_code == 200 and response.json()["object"] == "chat.completion"
    assert "usage" in response.json() and "x_groq" not in response.json(), "Azure's /openai is not Groq's"


# -- Bedrock's Converse API, through boto3's bedrock-runtime client (botocore's parsers) -------------------


@pytest.fixture
def runtime(sim: Simulator) -> Any:
    boto3 = pytest.importorskip("boto3", reason="anthropic[bedrock], in the dev extra, brings boto3")
    from botocore.config import Config

    return boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=sim.url,
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="fake",
        config=Config(retries={"max_attempts": 1}),
    )


SYSTEM = [{"text": "You are a careful assistant for a shipping company. " * 40}, {"cachePoint": {"type": "default"}}]
CONVERSE = {
    "modelId": "anthropic.claude-x-v1:0",
    "system": SYSTEM,
    "messages": [{"role": "user", "content": [{"text": "Hi."}]}],
}


def test_converse_whole_and_cache(runtime: Any, sim: Simulator) -> None:
    first = runtime.converse(**CONVERSE, inferenceConfig={"maxTokens": 64})
    second = runtime.converse(**CONVERSE)
    assert first["stopReason"] == "end_turn" and first["output"]["message"]["content"][0]["text"]
    served = sim.wait_for_requests(2)
    assert served[0].model == "anthropic.claude-x-v1:0", "the model of the (quoted) path"
    assert first["usage"]["cacheWriteInputTokens"] == served[0].cache_creation_tokens > 0
    assert second["usage"]["cacheReadInputTokens"] == served[1].cached_tokens > 0
    for result, s in ((first, served[0]), (second, served[1])):
        u = result["usage"]
        assert u["inputTokens"] + u["cacheReadInputTokens"] + u["cacheWriteInputTokens"] == s.input_tokens
        assert u["outputTokens"] == s.output_tokens == 12


def test_converse_stream_events(runtime: Any, sim: Simulator) -> None:
    events = list(runtime.converse_stream(**CONVERSE)["stream"])
    kinds = [next(iter(e)) for e in events]
    assert kinds[0] == "messageStart" and kinds[-3:] == ["contentBlockStop", "messageStop", "metadata"]
    assert set(kinds[1:-3]) == {"contentBlockDelta"}
    assert events[-2]["messageStop"]["stopReason"] == "end_turn"
    assert events[-1]["metadata"]["usage"]["outputTokens"] == sim.wait_for_requests(1)[0].output_tokens == 12


def test_converse_stream_error_event(runtime: Any, sim: Simulator) -> None:
    from botocore.exceptions import EventStreamError

    sim.inject(Fault.error_event(after_chunks=3))
    with pytest.raises(EventStreamError, match="modelStreamErrorException"):
        for _ in runtime.converse_stream(**CONVERSE)["stream"]:
            pass


def test_invoke_model_with_response_stream(runtime: Any) -> None:
    response = runtime.invoke_model_with_response_stream(modelId="m", body=json.dumps(BODY))
    events = [json.loads(e["chunk"]["bytes"]) for e in response["body"]]
    assert events[0]["type"] == "message_start" and events[-1]["type"] == "message_stop"


def test_bedrock_errors_are_bedrocks(sim: Simulator) -> None:
    """Bedrock's own error shape on its paths, and no rate-limit headers; an overloaded model is a 503."""
    answered = httpx.post(
        f"{sim.url}/model/m/converse", json={"messages": [{"role": "user", "content": [{"text": "Hi"}]}]}
    )
    assert not [h for h in answered.headers if "ratelimit" in h]
    for fault, status, kind in (
        (Fault.rate_limit(retry_after=0), 429, "ThrottlingException"),
        (Fault.overloaded(), 503, "ServiceUnavailableException"),
    ):
        sim.inject(fault)
        response = httpx.post(f"{sim.url}/model/m/invoke", json=BODY)
        assert response.status_code == status
        assert response.headers["x-amzn-errortype"].partition(":")[0] == kind
        assert set(response.json()) == {"message"}
