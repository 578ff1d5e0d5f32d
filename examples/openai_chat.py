"""A sync OpenAI app: one whole answer, then one streamed. firsttoken measures both.

The SDK reads OPENAI_API_KEY and OPENAI_BASE_URL as usual; OPENAI_MODEL picks the model.
Against the local simulator (`firsttoken sim`), with spans printed to the terminal:

    OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_API_KEY=sk-local \
    OTEL_TRACES_EXPORTER=console OTEL_METRICS_EXPORTER=none python examples/openai_chat.py
"""

import os

import openai
from openai.types.chat import ChatCompletionMessageParam

import firsttoken

MODEL = os.environ.get("OPENAI_MODEL", "gpt-4o-mini")
QUESTION: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Name three colours of the sea."}]


def main() -> None:
    client = openai.OpenAI()  # one client for the whole app: it keeps its connections warm

    reply = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=64)
    print("whole:   ", reply.choices[0].message.content)

    stream = client.chat.completions.create(
        model=MODEL, messages=QUESTION, max_tokens=64, stream=True, stream_options={"include_usage": True}
    )
    print("streamed:", end=" ")
    for chunk in stream:  # TTFT is the time to the first chunk carrying text
        if chunk.choices and chunk.choices[0].delta.content:
            print(chunk.choices[0].delta.content, end="", flush=True)
    print()


if __name__ == "__main__":
    firsttoken.instrument()  # exports as the OTEL_* variables say (OTLP to localhost:4318 by default)
    main()
