"""Application end-to-end: a user's request as one `action`, its steps as `phase`s, the LLM call inside.

The action span is what the user waited for (retrieval, the model, rendering); its LLM call spans
are children, and the action records their share of its critical path. See docs/app.md.

    OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_API_KEY=sk-local \
    OTEL_TRACES_EXPORTER=console OTEL_METRICS_EXPORTER=none python examples/action_request.py
"""

import asyncio
import os

import openai

import firsttoken

MODEL = os.environ.get("OPENAI_MODEL", "gpt-4o-mini")
DOCUMENTS = {"tides": "Tides are the rise and fall of the sea, caused by the moon and the sun."}


async def search(question: str) -> str:
    await asyncio.sleep(0.02)  # stands in for a vector search
    return DOCUMENTS["tides"]


async def answer_question(client: openai.AsyncOpenAI, question: str, chat_id: str) -> str:
    with firsttoken.action("answer_question", traffic_class="interactive", conversation_id=chat_id):
        with firsttoken.phase("retrieve"):
            context = await search(question)
        stream = await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "system", "content": context}, {"role": "user", "content": question}],
            max_tokens=64,
            stream=True,
            stream_options={"include_usage": True},
        )
        parts = [c.choices[0].delta.content or "" async for c in stream if c.choices]
        with firsttoken.phase("render"):
            return f"<p>{''.join(parts)}</p>"


async def main() -> None:
    async with openai.AsyncOpenAI() as client:
        print(await answer_question(client, "What causes tides?", chat_id="chat-42"))


if __name__ == "__main__":
    firsttoken.instrument()
    asyncio.run(main())
