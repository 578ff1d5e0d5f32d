"""An async app's loop is exactly as quiet with firsttoken as without it, however the app leaves a stream.

The app runs in a process of its own, under ``-W error`` and ``PYTHONASYNCIODEBUG=1``, with a loop
exception handler, an unraisable-exception hook and a handler on asyncio's logger that record everything
(what error monitoring such as Sentry hooks). Each client (openai, anthropic, plain httpx, aiohttp) streams
calls that the app leaves in each way: ``break`` and drop, close, drop into a reference cycle that only the
garbage collector frees, and cancellation of the task reading it. The same app runs without firsttoken.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from firsttoken.sim import LatencyModel, Simulator

pytest.importorskip("aiohttp", reason="aiohttp is in the dev extra")

CALLS_PER_CASE = 1
"""Enough: the error firsttoken caused came on nearly every call (19 of 20, issue #37)."""
CLIENTS = ("openai", "anthropic", "httpx", "aiohttp")
WAYS = ("break_drop", "close", "gc", "cancel")

APP = """
import asyncio, gc, json, logging, os, sys

import aiohttp, anthropic, httpx, openai

spans = None
if os.environ["WITH_FIRSTTOKEN"] == "1":
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    import firsttoken

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    firsttoken.instrument(tracer_provider=provider)

BASE = os.environ["SIM_URL"]
CALLS = int(os.environ["CALLS"])
MESSAGES = [{"role": "user", "content": "hi"}]
OPENAI_BODY = {"model": "gpt-4o-mini", "messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}}
ANTHROPIC_BODY = {"model": "claude-test-model", "max_tokens": 64, "messages": MESSAGES, "stream": True}

reports = []
case = "start"


def record(text):
    reports.append(f"{case}: {text}")


sys.unraisablehook = lambda u: record(f"unraisable {u.exc_type.__name__}: {u.exc_value} ({u.object!r})")


class Recorder(logging.Handler):
    def emit(self, r):
        record(f"asyncio log {r.levelname}: {r.getMessage()}")


logging.getLogger("asyncio").addHandler(Recorder(logging.ERROR))


async def open_stream(clients, client):
    # -> (what the app holds, what it iterates, how it closes it)
    if client == "openai":
        s = await clients["openai"].chat.completions.create(**OPENAI_BODY)
        return s, s, s.close
    if client == "anthropic":
        s = await clients["anthropic"].messages.create(**{k: v for k, v in ANTHROPIC_BODY.items()})
        return s, s, s.close
    if client == "httpx":
        request = clients["httpx"].build_request("POST", BASE + "/v1/chat/completions", json=OPENAI_BODY)
        r = await clients["httpx"].send(request, stream=True)
        return r, r.aiter_bytes(), r.aclose
    r = await clients["aiohttp"].post(BASE + "/v1/messages", json=ANTHROPIC_BODY)

    async def close():
        r.close()

    return r, r.content.iter_any(), close


async def one(clients, client, way):
    held, items, close = await open_stream(clients, client)
    if way == "cancel":
        first = asyncio.Event()

        async def read():
            async for _ in items:
                first.set()

        task = asyncio.create_task(read())
        await first.wait()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    else:
        async for _ in items:
            break
        if way == "close":
            await close()
        elif way == "gc":
            cycle = [held, items]
            cycle.append(cycle)
            del cycle
    del held, items, close
    if way == "gc":
        gc.collect()
    for _ in range(5):  # the finalizers' tasks run
        await asyncio.sleep(0.01)


async def main():
    global case
    asyncio.get_running_loop().set_exception_handler(lambda loop, context: record(f"loop: {context}"))
    clients = {
        "openai": openai.AsyncOpenAI(base_url=BASE + "/v1", api_key="sk-quiet", max_retries=0),
        "anthropic": anthropic.AsyncAnthropic(base_url=BASE, api_key="sk-ant-quiet", max_retries=0),
        "httpx": httpx.AsyncClient(),
        "aiohttp": aiohttp.ClientSession(),
    }
    for client in json.loads(os.environ["CLIENTS"]):
        for way in json.loads(os.environ["WAYS"]):
            case = f"{client}/{way}"
            for _ in range(CALLS):
                try:
                    await one(clients, client, way)
                except BaseException as exc:
                    record(f"raised {exc!r}")
    case = "closing"
    gc.collect()
    await asyncio.sleep(0.05)
    await clients["openai"].close()
    await clients["anthropic"].close()
    await clients["httpx"].aclose()
    await clients["aiohttp"].close()


asyncio.run(main())
case = "after the loop"
gc.collect()
calls = None
if spans is not None:
    firsttoken.uninstrument()
    calls = sorted(
        str(s.attributes.get("firsttoken.end_reason")) for s in spans.get_finished_spans()
        if "gen_ai.operation.name" in (s.attributes or {})
    )
print(json.dumps({"reports": reports, "calls": calls}))
"""


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    # Long enough a stream (about 0.1 s) that the cancelled reader is cancelled while it waits for more.
    latency = LatencyModel(queue_ms=1, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=400, jitter=0, output_tokens=40)
    with Simulator(latency=latency, seed=7) as simulator:
        yield simulator


def _start(sim: Simulator, tmp_path: Path, with_firsttoken: bool) -> subprocess.Popen[str]:
    script = tmp_path / f"app_{int(with_firsttoken)}.py"
    script.write_text(textwrap.dedent(APP))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FIRSTTOKEN_"))}
    env |= {
        "SIM_URL": sim.url,
        "CALLS": str(CALLS_PER_CASE),
        "CLIENTS": json.dumps(CLIENTS),
        "WAYS": json.dumps(WAYS),
        "WITH_FIRSTTOKEN": "1" if with_firsttoken else "0",
        "PYTHONASYNCIODEBUG": "1",
    }
    return subprocess.Popen(
        [sys.executable, "-W", "error", str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _result(process: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    result: dict[str, Any] = json.loads(out.splitlines()[-1])
    return result


def test_every_async_way_of_leaving_a_stream_is_as_quiet_as_without_firsttoken(sim: Simulator, tmp_path: Path) -> None:
    # The two apps run side by side (each mostly waits for its imports and the simulator).
    without = _start(sim, tmp_path, with_firsttoken=False)
    measured = _start(sim, tmp_path, with_firsttoken=True)
    assert _result(without)["reports"] == []  # the app itself is quiet: anything below is firsttoken's
    result = _result(measured)
    assert result["reports"] == []
    # And every call was recorded, once (how each ended is tested where each way of ending is).
    assert len(result["calls"]) == len(CLIENTS) * len(WAYS) * CALLS_PER_CASE, result["calls"]
