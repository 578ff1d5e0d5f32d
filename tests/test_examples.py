"""examples/ as a user runs them: each a subprocess, its SDK pointed at the simulator the way the
SDKs read it (OPENAI_BASE_URL / ANTHROPIC_BASE_URL), its spans printed by the console exporter
(OTEL_TRACES_EXPORTER=console, as the README's quickstart does) and read back here."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from firsttoken import semconv as sc
from firsttoken.sim import LatencyModel, Simulator

ROOT = Path(__file__).parents[1]
EXAMPLES = ROOT / "examples"
QUEUE_S = 0.03
"""The simulator's queue delay: no first token can be seen sooner (it sleeps until its deadlines)."""


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    model = LatencyModel.fixed(queue_ms=QUEUE_S * 1000, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=2000)
    with Simulator(latency=model, seed=5) as s:
        yield s


OTHER_GENAI_INSTRUMENTATIONS = "openai,anthropic,bedrock"
"""The entry-point names of the official instrumentors' and OpenLLMetry's (firsttoken's is ``firsttoken``)."""


def run_example(sim: Simulator, name: str, *, zero_code: bool = False) -> tuple[str, list[dict[str, Any]]]:
    """The example's own output (spans taken out) and the spans it printed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OPENAI_", "ANTHROPIC_", "FIRSTTOKEN_"))}
    env.update(
        OPENAI_BASE_URL=sim.openai_base_url,
        OPENAI_API_KEY="sk-local",
        ANTHROPIC_BASE_URL=sim.anthropic_base_url,
        ANTHROPIC_API_KEY="sk-ant-local",
        OTEL_TRACES_EXPORTER="console",
        OTEL_METRICS_EXPORTER="none",
        OTEL_SERVICE_NAME="example",
    )
    command = [sys.executable, str(EXAMPLES / name)]
    if zero_code:
        command = [str(Path(sys.executable).with_name("opentelemetry-instrument")), *command]
        # The dev venv also holds genai-openai, genai-anthropic and OpenLLMetry (tests/test_coexist.py); an app that
        # runs firsttoken alone has neither, so they stay off here.
        env["OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"] = OTHER_GENAI_INSTRUMENTATIONS
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "Warning" not in done.stderr, done.stderr
    spans, rest, at = [], [], 0
    decoder = json.JSONDecoder()
    text = done.stdout
    for match in re.finditer(r"^\{$", text, re.M):  # the console exporter's spans start so
        if match.start() < at:
            continue
        rest.append(text[at : match.start()])
        span, end = decoder.raw_decode(text, match.start())
        spans.append(span)
        at = end
    rest.append(text[at:])
    return "".join(rest).strip(), spans


def calls(spans: list[dict[str, Any]], model: str) -> list[dict[str, Any]]:
    return [s for s in spans if s["name"] == f"chat {model}"]


def ttft(span: dict[str, Any]) -> float:
    value = span["attributes"][sc.FT_TIME_TO_FIRST_TOKEN]
    assert isinstance(value, float)
    return value


def test_openai_chat(sim: Simulator) -> None:
    out, spans = run_example(sim, "openai_chat.py")
    whole, streamed = out.splitlines()
    assert whole.startswith("whole: ") and streamed.startswith("streamed: ") and len(streamed) > 20
    chat = calls(spans, "gpt-4o-mini")
    assert [s["attributes"].get(sc.GEN_AI_REQUEST_STREAM, False) for s in chat] == [False, True]
    assert sc.FT_TIME_TO_FIRST_TOKEN not in chat[0]["attributes"]
    assert ttft(chat[1]) >= QUEUE_S


def test_openai_async_stream(sim: Simulator) -> None:
    out, spans = run_example(sim, "openai_async_stream.py")
    assert len(out.splitlines()) == 3
    chat = calls(spans, "gpt-4o-mini")
    assert len(chat) == 3 and all(ttft(s) >= QUEUE_S for s in chat)
    assert len({s["context"]["trace_id"] for s in chat}) == 3, "three calls, three traces"


def test_anthropic_messages(sim: Simulator) -> None:
    out, spans = run_example(sim, "anthropic_messages.py")
    assert out.startswith("whole: ") and "\nstreamed: " in out
    chat = calls(spans, "claude-haiku-4-5")
    assert len(chat) == 2 and all(s["attributes"][sc.GEN_AI_PROVIDER_NAME] == "anthropic" for s in chat)
    assert ttft(chat[1]) >= QUEUE_S


def test_anthropic_async_stream(sim: Simulator) -> None:
    out, spans = run_example(sim, "anthropic_async_stream.py")
    assert out.endswith("output tokens, stopped by end_turn)")
    (chat,) = calls(spans, "claude-haiku-4-5")
    assert ttft(chat) >= QUEUE_S


def test_action_around_a_user_request(sim: Simulator) -> None:
    out, spans = run_example(sim, "action_request.py")
    assert out.startswith("<p>") and out.endswith("</p>")
    by_name = {s["name"]: s for s in spans}
    action = by_name["answer_question"]
    assert action["attributes"][sc.FT_TRAFFIC_CLASS] == "interactive"
    (chat,) = calls(spans, "gpt-4o-mini")
    for child in (chat, by_name["retrieve"], by_name["render"]):
        assert child["parent_id"] == action["context"]["span_id"], child["name"]
    assert chat["attributes"][sc.GEN_AI_CONVERSATION_ID] == "chat-42"
    assert ttft(chat) >= QUEUE_S


def test_zero_code_under_opentelemetry_instrument(sim: Simulator) -> None:
    source = (EXAMPLES / "zero_code.py").read_text()
    assert not re.search(r"^(import|from) firsttoken", source, re.M)
    out, spans = run_example(sim, "zero_code.py", zero_code=True)
    assert out
    (chat,) = calls(spans, "gpt-4o-mini")
    assert ttft(chat) >= QUEUE_S


def test_every_example_is_run_here_and_the_readmes_name_only_these() -> None:
    files = sorted(p.name for p in EXAMPLES.glob("*.py"))
    source = Path(__file__).read_text()
    assert len(files) == 6 and all(f'"{f}"' in source for f in files), files
    readmes = (ROOT / "README.md").read_text() + (EXAMPLES / "README.md").read_text()
    named = set(re.findall(r"examples/([a-z_]+\.py)", readmes))
    assert named and named <= set(files), named


def test_the_readme_quickstart_sets_what_these_tests_set() -> None:
    """The quickstart's commands, checked against the real defaults: the simulator's port and the
    variables run_example sets (its own URL differs: a free port)."""
    from firsttoken.sim.cli import build_parser

    readme = (ROOT / "README.md").read_text()
    quickstart = readme.split("## Seeing TTFT on your machine", 1)[1].split("\n## ", 1)[0]
    port = build_parser().parse_args([]).port
    assert f"OPENAI_BASE_URL=http://127.0.0.1:{port}/v1 " in quickstart
    command = "OTEL_TRACES_EXPORTER=console OTEL_METRICS_EXPORTER=none .venv/bin/python examples/openai_chat.py"
    assert command in quickstart
