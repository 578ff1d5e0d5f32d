"""An async OpenAI app: three streamed answers at once, each its own measured call.

    OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_API_KEY=sk-local \
    OTEL_TRACES_EXPORTER=console OTEL_METRICS_EXPORTER=none python examples/openai_async_stream.py
"""

import asyncio
import os

import openai

import firsttoken

MODEL = os.environ.get("OPENAI_MODEL", "gpt-4o-mini")


async def ask(client: openai.AsyncOpenAI, question: str) -> str:
    stream = await client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": question}],
        max_tokens=64,
        stream=True,
        stream_options={"include_usage": True},
    )
    parts = []
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
    return "".join(parts)


async def main() -> None:
    async with openai.AsyncOpenAI() as client:
        questions = ["What is a tide?", "What is a reef?", "What is a current?"]
        answers = await asyncio.gather(*(ask(client, q) for q in questions))
    for question, answer in zip(questions, answers, strict=True):
        print(f"{question} {answer}")


if __name__ == "__main__":
    firsttoken.instrument()
    asyncio.run(main())
