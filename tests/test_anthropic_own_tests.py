"""The stand-in that ``scripts/anthropic_own_tests/run.py --whole`` serves in place of anthropic's API mock."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import anthropic
import pytest


def _run_script() -> ModuleType:
    path = Path(__file__).parents[1] / "scripts" / "anthropic_own_tests" / "run.py"
    spec = importlib.util.spec_from_file_location("firsttoken_anthropic_own_tests", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_stand_in_answers_messages_and_refuses_other_paths_without_a_retry() -> None:
    """anthropic's suite sends every API call to it with the SDK's default retries: a path it does not
    serve must fail at the first answer (a 404), not after retries with backoff as a closed port did."""
    sent: list[str] = []
    http = anthropic.DefaultHttpxClient(event_hooks={"request": [lambda request: sent.append(request.url.path)]})
    with (
        _run_script().stand_in(Path(sys.executable)) as url,
        anthropic.Anthropic(base_url=url, api_key="k", http_client=http) as client,
    ):
        message = client.messages.create(
            model="claude-test-model", max_tokens=8, messages=[{"role": "user", "content": "Hi"}]
        )
        assert message.content and message.usage.output_tokens > 0
        with client.messages.stream(
            model="claude-test-model", max_tokens=8, messages=[{"role": "user", "content": "Hi"}]
        ) as stream:
            assert stream.get_final_message().content
        with pytest.raises(anthropic.NotFoundError):
            client.models.retrieve("claude-test-model")
    assert sent == ["/v1/messages", "/v1/messages", "/v1/models/claude-test-model"]
