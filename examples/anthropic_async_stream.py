"""An async Anthropic app: a streamed answer read as it arrives, then the final message.

    ANTHROPIC_BASE_URL=http://127.0.0.1:8000 ANTHROPIC_API_KEY=sk-ant-local \
    OTEL_TRACES_EXPORTER=console OTEL_METRICS_EXPORTER=none python examples/anthropic_async_stream.py
"""

import asyncio
import os

import anthropic
from anthropic.types import MessageParam

import firsttoken

MODEL = os.environ.get("ANTHROPIC_MODEL", "claude-haiku-4-5")
QUESTION: list[MessageParam] = [{"role": "user", "content": "Why is the sky blue?"}]


async def main() -> None:
    client = anthropic.AsyncAnthropic()  # one client for the whole app
    async with client.messages.stream(model=MODEL, max_tokens=64, messages=QUESTION) as stream:
        async for text in stream.text_stream:
            print(text, end="", flush=True)
        final = await stream.get_final_message()
    await client.close()
    print(f"\n({final.usage.output_tokens} output tokens, stopped by {final.stop_reason})")


if __name__ == "__main__":
    firsttoken.instrument()
    asyncio.run(main())
