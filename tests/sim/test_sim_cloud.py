"""The clouds' paths of the simulator: Bedrock's event-stream framing, read by botocore's own parser
(the one anthropic's ``AnthropicBedrock`` uses), and the paths of Vertex AI and Azure OpenAI."""

from __future__ import annotations

import base64
import json

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
