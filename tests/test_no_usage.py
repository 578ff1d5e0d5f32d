"""Streams that ask for no usage: their tokens go uncounted, and firsttoken says so once per process."""

from __future__ import annotations

import warnings

import openai
import pytest

from firsttoken import semconv as sc
from firsttoken.config import FirstTokenWarning
from firsttoken.providers import openai as openai_hooks
from firsttoken.sim import Simulator

from .conftest import Telemetry

MESSAGES = [{"role": "user", "content": "hi"}]


def _said(record: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, FirstTokenWarning) and "usage" in str(w.message)]


def test_a_stream_without_usage_is_said_once(
    sim: Simulator, telemetry: Telemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(openai_hooks, "_warned_no_usage", False)
    client = openai.OpenAI(base_url=sim.openai_base_url, api_key="sk-test", max_retries=0)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in range(2):
            for _ in client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True):
                pass
        with client.chat.completions.stream(model="gpt-4o-mini", messages=MESSAGES) as stream:
            for _ in stream:
                pass
    said = _said(record)
    assert len(said) == 1, said
    assert 'stream_options={"include_usage": True}' in said[0] and "docs/semantics.md" in said[0]
    assert [w.filename for w in record if "usage" in str(w.message)] == [__file__]  # the app's line
    calls = telemetry.calls()
    assert len(calls) == 3
    assert all(sc.GEN_AI_USAGE_OUTPUT_TOKENS not in (c.attributes or {}) for c in calls)


def test_streams_that_ask_for_usage_and_responses_are_not_warned(
    sim: Simulator, telemetry: Telemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(openai_hooks, "_warned_no_usage", False)
    client = openai.OpenAI(base_url=sim.openai_base_url, api_key="sk-test", max_retries=0)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in client.chat.completions.create(
            model="gpt-4o-mini", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        ):
            pass
        for _ in client.responses.create(model="gpt-4o-mini", input="hi", stream=True):
            pass
        client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # not streamed: usage comes anyway
    assert _said(record) == []
    assert len(telemetry.calls()) == 3
    assert all(sc.GEN_AI_USAGE_OUTPUT_TOKENS in (c.attributes or {}) for c in telemetry.calls())
