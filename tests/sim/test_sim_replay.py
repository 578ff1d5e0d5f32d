"""Replaying every recorded cassette through the real SDKs, as a live server would have answered."""

from __future__ import annotations

import builtins
import json
import sys
import time
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
import yaml

from firsttoken.sim import LatencyModel, Simulator

from ..conftest import RECORDED, recorded_cassettes

OPENAI = recorded_cassettes("openai")
ANTHROPIC = recorded_cassettes("anthropic")
QUICK = LatencyModel.fixed(queue_ms=1, decode_tokens_per_s=2000)
OPENAI_ERRORS: dict[int, type[Exception]] = {404: openai.NotFoundError}


def _requests(path: Path) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    out = []
    for it in yaml.safe_load(path.read_text())["interactions"]:
        body = it["request"]["body"]
        body = json.loads(body if isinstance(body, str) else body["string"])
        headers = {k.lower(): v for k, v in it["response"]["headers"].items()}
        out.append((it["request"]["uri"].split("/v1", 1)[1], body, {**it["response"], "headers": headers}))
    return out


@pytest.mark.parametrize("cassette", OPENAI, ids=[c.stem for c in OPENAI])
def test_openai_cassette(cassette: Path) -> None:
    with Simulator(replay=[cassette], latency=QUICK) as sim:
        c = openai.OpenAI(base_url=sim.openai_base_url, api_key="sk-test", max_retries=0)
        for path, body, response in _requests(cassette):
            call = c.chat.completions.with_raw_response.create if path == "/chat/completions" else None
            status = response["status"]["code"]
            if status >= 400:
                create = c.chat.completions.create if path == "/chat/completions" else c.embeddings.create
                with pytest.raises(OPENAI_ERRORS[status]) as caught:
                    create(**body)
                assert caught.value.request_id == response["headers"]["x-request-id"][0]
                continue
            if call is None:
                result = c.embeddings.create(**body)
                assert result.data and result.usage.prompt_tokens > 0
                continue
            raw = call(**body)
            assert raw.headers["x-request-id"] == response["headers"]["x-request-id"][0]
            assert "content-encoding" not in raw.headers
            parsed = raw.parse()
            if body.get("stream"):
                chunks = list(parsed)
                assert chunks and all(ch.object == "chat.completion.chunk" for ch in chunks)
            else:
                assert parsed.choices and parsed.usage is not None
        assert all(r.replayed for r in sim.requests)
        c.close()


@pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")
@pytest.mark.parametrize("cassette", ANTHROPIC, ids=[c.stem for c in ANTHROPIC])
def test_anthropic_cassette(cassette: Path) -> None:
    with Simulator(replay=[cassette], latency=QUICK) as sim:
        c = anthropic.Anthropic(base_url=sim.anthropic_base_url, api_key="sk-ant-test", max_retries=0)
        for _, body, response in _requests(cassette):
            stream = bool(body.pop("stream", False))
            if stream:
                with c.messages.stream(**body) as s:
                    message = s.get_final_message()
                assert s.request_id == response["headers"]["request-id"][0]
            else:
                message = c.messages.create(**body)  # gzip bodies are decoded before replay
            assert message.id.startswith("msg_") and message.usage.output_tokens > 0
        served = sim.requests
        assert all(r.replayed and r.status == 200 for r in served)
        if "caching" in cassette.stem:
            created, read = served
            assert created.cache_creation_tokens > 0 and read.cached_tokens > 0
        c.close()


@pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")
async def test_async_replay_of_a_directory() -> None:
    with Simulator(replay=[RECORDED / "anthropic"], latency=QUICK) as sim:
        c = anthropic.AsyncAnthropic(base_url=sim.anthropic_base_url, api_key="k", max_retries=0)
        ((_, body, _),) = _requests(RECORDED / "anthropic" / "test_async_anthropic_message_stream_manager_legacy.yaml")
        body.pop("stream", None)
        async with c.messages.stream(**body) as stream:
            message = await stream.get_final_message()
        assert message.content
        await c.close()


def test_matching_ignores_formatting_then_falls_back_in_order() -> None:
    cassette = RECORDED / "openai" / "test_chat_completion_tool_calls_with_content.yaml"
    (_, _first, rec1), (_, second, rec2) = _requests(cassette)
    with Simulator(replay=[cassette], latency=QUICK) as sim:
        c = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0)
        # The second recorded body, with keys in another order: matched by content, not bytes.
        reordered = dict(reversed(list(second.items())))
        got = c.chat.completions.with_raw_response.create(**reordered)
        assert got.headers["x-request-id"] == rec2["headers"]["x-request-id"][0]
        # An unknown body gets the first unused interaction on the path.
        other = c.chat.completions.with_raw_response.create(model="x", messages=[{"role": "user", "content": "?"}])
        assert other.headers["x-request-id"] == rec1["headers"]["x-request-id"][0]
        # Paths without recordings are simulated.
        assert c.embeddings.create(model="e", input="x").data
        c.close()


def test_replayed_sse_is_paced_by_the_latency_model() -> None:
    cassette = RECORDED / "openai" / "test_chat_completion_streaming.yaml"
    ((_, body, _),) = _requests(cassette)
    model = LatencyModel.fixed(queue_ms=50, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=50)
    with Simulator(replay=[cassette], latency=model) as sim:
        c = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0)
        start = time.perf_counter()
        arrivals = [time.perf_counter() - start for _ in c.chat.completions.create(**body)]
        c.close()
    # queue 50 ms, then one event per 20 ms: the first chunk at 70 ms, chunk k at 50 + 20k ms.
    assert 0.070 <= arrivals[0] < 0.070 + 0.1
    assert 0.050 + 0.020 * len(arrivals) <= arrivals[-1] < 0.050 + 0.020 * (len(arrivals) + 1) + 0.1


def test_missing_cassette_and_missing_pyyaml(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        Simulator(replay=[tmp_path / "nope.yaml"])
    (tmp_path / "bad.yaml").write_text("just: text\n")
    with pytest.raises(ValueError, match="not a VCR cassette"):
        Simulator(replay=[tmp_path / "bad.yaml"])
    monkeypatch.delitem(sys.modules, "yaml")
    real_import = builtins.__import__

    def no_yaml(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "yaml":
            raise ImportError("No module named 'yaml'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_yaml)
    with pytest.raises(RuntimeError, match="PyYAML"):
        Simulator(replay=[OPENAI[0]])
