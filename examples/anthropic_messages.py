"""A sync Anthropic app: `messages.create`, then `messages.stream()` and its text stream.

The SDK reads ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL as usual; ANTHROPIC_MODEL picks the model.

    ANTHROPIC_BASE_URL=http://127.0.0.1:8000 ANTHROPIC_API_KEY=sk-ant-local \
    OTEL_TRACES_EXPORTER=console OTEL_METRICS_EXPORTER=none python examples/anthropic_messages.py
"""

import os

import anthropic
from anthropic.types import MessageParam

import firsttoken

MODEL = os.environ.get("ANTHROPIC_MODEL", "claude-haiku-4-5")
QUESTION: list[MessageParam] = [{"role": "user", "content": "Name three kinds of cloud."}]


def main() -> None:
    client = anthropic.Anthropic()

    message = client.messages.create(model=MODEL, max_tokens=64, messages=QUESTION)
    print("whole:   ", "".join(block.text for block in message.content if block.type == "text"))

    print("streamed:", end=" ")
    with client.messages.stream(model=MODEL, max_tokens=64, messages=QUESTION) as stream:
        for text in stream.text_stream:
            print(text, end="", flush=True)
    print()


if __name__ == "__main__":
    firsttoken.instrument()
    main()
