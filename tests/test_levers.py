"""The signals behind the latency levers, over real calls: prompt prefix and cache, context growth,
client reuse, output discipline."""

from __future__ import annotations

import gc
import warnings
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

import firsttoken
from firsttoken import semconv as sc
from firsttoken.providers import _levers
from firsttoken.sim import CacheConfig, LatencyModel, Simulator

from .conftest import FAST, Telemetry

ANTHROPIC_MODEL = "claude-test-model"
USER: Any = {"role": "user", "content": "Where is my parcel?"}
SYSTEM_A = "You are a meticulous assistant for a shipping company; answer in one sentence. " * 8
SYSTEM_B = "You are a cheerful assistant for a shipping company; answer in one sentence. " * 8
CACHE = CacheConfig(min_tokens=64, block_tokens=16)
"""Small enough that the system prompts above (~150 tokens each) are cached."""


@pytest.fixture(autouse=True)
def fresh_levers() -> Iterator[None]:
    """Other tests create many clients and prefixes; each test here starts from nothing."""
    _levers.reset()
    yield
    _levers.reset()


@pytest.fixture
def cache_sim() -> Iterator[Simulator]:
    with Simulator(latency=FAST, cache=CACHE, seed=2) as s:
        yield s


def oclient(sim: Simulator) -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.openai_base_url, api_key="sk-test", max_retries=0)


def aclient(sim: Simulator) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=sim.anthropic_base_url, api_key="sk-ant-test", max_retries=0)


def hashes(t: Telemetry) -> list[Any]:
    return [(c.attributes or {}).get(sc.FT_PREFIX_HASH) for c in t.calls()]


def by_prefix(t: Telemetry, name: str) -> dict[str, int]:
    return {p.attributes[sc.FT_PREFIX_HASH]: p.value for p in t.metrics().get(name, [])}


# -- prompt prefix and the cache --------------------------------------------------------------------


def test_openai_prefix_change_shows_as_new_hash_and_cache_miss(telemetry: Telemetry, cache_sim: Simulator) -> None:
    client = oclient(cache_sim)
    results = [
        client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "system", "content": system}, {**USER, "content": f"Question {i}"}],
        )
        for i, system in enumerate((SYSTEM_A, SYSTEM_A, SYSTEM_B))
    ]
    cached = [r.usage.prompt_tokens_details.cached_tokens for r in results]
    assert cached[0] == 0 and cached[1] > 0 and cached[2] == 0, "the simulator cached A, then B missed"

    a1, a2, b = hashes(telemetry)
    assert a1 == a2, "same instructions, different question: same prefix"
    assert b != a1, "a changed system prompt changes the hash"
    assert isinstance(a1, str) and len(a1) == 12 and int(a1, 16) >= 0

    inputs = by_prefix(telemetry, sc.M_PREFIX_INPUT_TOKENS)
    reads = by_prefix(telemetry, sc.M_PREFIX_CACHE_READ_INPUT_TOKENS)
    assert inputs == {
        a1: results[0].usage.prompt_tokens + results[1].usage.prompt_tokens,
        b: results[2].usage.prompt_tokens,
    }
    assert reads == {a1: cached[1], b: 0}
    assert 0 < reads[a1] / inputs[a1] < 1, "the stable prefix has a hit ratio"
    assert reads[b] / inputs[b] == 0, "the new prefix has none: a dashboard sees the drop"
    # The per-model counters see the same totals.
    total_reads = sum(p.value for p in telemetry.metrics()[sc.M_CACHE_READ_INPUT_TOKENS])
    assert total_reads == cached[1]


def test_tools_are_part_of_the_prefix_and_the_question_is_not(telemetry: Telemetry, sim: Simulator) -> None:
    client = oclient(sim)
    tool = {"type": "function", "function": {"name": "track", "parameters": {"type": "object", "properties": {}}}}
    other = {"type": "function", "function": {"name": "refund", "parameters": {"type": "object", "properties": {}}}}
    system = {"role": "system", "content": "Be brief."}
    for tools, question in (([tool], "a"), ([tool], "b"), ([other], "a"), (None, "a")):
        kwargs: dict[str, Any] = {"tools": tools} if tools else {}
        client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[system, {"role": "user", "content": question}],
            **kwargs,
        )
    client.chat.completions.create(model="gpt-4o-mini", messages=[USER])
    client.responses.create(model="gpt-4o-mini", instructions="Be brief.", input="a")
    client.responses.create(model="gpt-4o-mini", instructions="Be brief.", input="b")
    same_q, other_q, other_tool, no_tools, no_prefix, resp_a, resp_b = hashes(telemetry)
    assert same_q == other_q
    assert len({same_q, other_tool, no_tools}) == 3
    assert no_prefix is None, "no instructions, no tools: nothing to hash"
    assert resp_a == resp_b is not None


def test_anthropic_cache_control_prefix_and_hit_ratio(telemetry: Telemetry, cache_sim: Simulator) -> None:
    client = aclient(cache_sim)
    usages = []
    for i, system in enumerate((SYSTEM_A, SYSTEM_A, SYSTEM_B)):
        blocks = [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]
        message = client.messages.create(
            model=ANTHROPIC_MODEL,
            max_tokens=32,
            system=blocks,
            messages=[{"role": "user", "content": f"Question {i}"}],
        )
        usages.append(message.usage)
    assert usages[0].cache_creation_input_tokens and not usages[0].cache_read_input_tokens
    assert usages[1].cache_read_input_tokens
    assert usages[2].cache_creation_input_tokens and not usages[2].cache_read_input_tokens

    a1, a2, b = hashes(telemetry)
    assert a1 == a2 != b
    inputs = by_prefix(telemetry, sc.M_PREFIX_INPUT_TOKENS)
    reads = by_prefix(telemetry, sc.M_PREFIX_CACHE_READ_INPUT_TOKENS)
    full = [u.input_tokens + (u.cache_read_input_tokens or 0) + (u.cache_creation_input_tokens or 0) for u in usages]
    assert inputs == {a1: full[0] + full[1], b: full[2]}, "input counts cached and written tokens, like OpenAI's"
    assert reads == {a1: usages[1].cache_read_input_tokens, b: 0}


def test_prefix_hash_is_stable_and_not_the_text() -> None:
    parts = (["You are helpful."], [{"type": "function", "function": {"name": "f"}}])
    first = _levers.prefix_hash(parts)
    again = _levers.prefix_hash((["You are helpful."], [{"function": {"name": "f"}, "type": "function"}]))
    assert first == again, "key order in tool definitions does not matter"
    assert _levers.prefix_hash((["You are helpful!"], parts[1])) != first
    assert "helpful" not in first and len(first) == 12


def test_prefix_seen_again_is_recognised_without_hashing(monkeypatch: pytest.MonkeyPatch) -> None:
    _levers.reset()
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    parts = (["You are helpful."], tools)
    first = _levers.prefix_hash(parts)
    assert _levers._recent == [], "a prefix seen once is not copied"
    assert _levers.prefix_hash((["You are helpful."], [dict(tools[0])])) == first  # equal, not identical
    assert [label for _, label in _levers._recent] == [first]
    hashed: list[str] = []
    real = _levers.hashlib.blake2b
    monkeypatch.setattr(_levers.hashlib, "blake2b", lambda data, **kw: hashed.append("x") or real(data, **kw))
    assert _levers.prefix_hash((["You are helpful."], tools)) == first
    assert hashed == [], "a remembered prefix is matched by comparison"
    tools[0]["function"]["name"] = "search"  # changed in place: the copy no longer matches
    changed = _levers.prefix_hash(parts)
    assert changed != first and hashed == ["x"]
    for n in range(3 * _levers.RECENT_PREFIXES):  # a prefix new on every call is never kept
        _levers.prefix_hash(([f"user {n}"], None))
    assert [label for _, label in _levers._recent] == [first]
    _levers.reset()


def test_prefix_cap(telemetry: Telemetry, sim: Simulator) -> None:
    client = oclient(sim)

    def call(n: int) -> None:
        client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "system", "content": f"Prompt version {n}."}, USER],
            max_tokens=1,
        )

    for n in range(_levers.MAX_PREFIXES + 2):
        call(n)
    call(0)  # a prefix seen before the cap was reached keeps its hash
    seen = hashes(telemetry)
    assert len(set(seen[: _levers.MAX_PREFIXES])) == _levers.MAX_PREFIXES
    assert seen[_levers.MAX_PREFIXES] == seen[_levers.MAX_PREFIXES + 1] == sc.PREFIX_OTHER
    assert seen[-1] == seen[0] != sc.PREFIX_OTHER
    labels = set(by_prefix(telemetry, sc.M_PREFIX_INPUT_TOKENS))
    assert len(labels) == _levers.MAX_PREFIXES + 1 and sc.PREFIX_OTHER in labels


# -- context growth -----------------------------------------------------------------------------------


def test_conversation_turns_and_context_growth(telemetry: Telemetry, sim: Simulator) -> None:
    client = oclient(sim)
    history: list[dict[str, str]] = []

    def turn(question: str) -> None:
        history.append({"role": "user", "content": question})
        stream = client.chat.completions.create(
            model="gpt-4o-mini",
            messages=history,
            stream=True,
            stream_options={"include_usage": True},
        )
        answer = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        history.append({"role": "assistant", "content": answer})

    with firsttoken.conversation("conv-1"):
        for i in range(4):
            turn(f"Question number {i} about my parcel?")
    history.clear()
    with firsttoken.conversation("conv-2"):
        turn("A new conversation.")
    with firsttoken.action("follow up", conversation_id="conv-1"):
        client.chat.completions.create(model="gpt-4o-mini", messages=[USER])
    client.chat.completions.create(model="gpt-4o-mini", messages=[USER])

    calls = [dict(c.attributes or {}) for c in telemetry.calls()]
    assert [c.get(sc.GEN_AI_CONVERSATION_ID) for c in calls] == ["conv-1"] * 4 + ["conv-2", "conv-1", None]
    assert [c.get(sc.FT_CONVERSATION_TURN) for c in calls] == [1, 2, 3, 4, 1, 5, None]
    inputs = [c[sc.GEN_AI_USAGE_INPUT_TOKENS] for c in calls[:4]]
    assert inputs == sorted(inputs) and inputs[0] < inputs[-1], "the context grows"

    metrics = telemetry.metrics()
    tokens = {p.attributes[sc.FT_CONVERSATION_TURNS]: p for p in metrics[sc.M_CONVERSATION_INPUT_TOKENS]}
    assert {k: p.count for k, p in tokens.items()} == {"1": 2, "2-3": 2, "4-7": 2}
    assert tokens["2-3"].sum == inputs[1] + inputs[2]
    assert tokens["1"].sum / tokens["1"].count < tokens["2-3"].sum / tokens["2-3"].count
    ttft = {p.attributes[sc.FT_CONVERSATION_TURNS]: p.count for p in metrics[sc.M_CONVERSATION_TTFT]}
    assert ttft == {"1": 2, "2-3": 2, "4-7": 1}, "TTFT exists for the streamed turns only"
    assert all(sc.GEN_AI_CONVERSATION_ID not in p.attributes for p in metrics[sc.M_CONVERSATION_INPUT_TOKENS]), (
        "the conversation id is a span attribute, never a metric dimension"
    )


def test_conversation_memory_is_bounded() -> None:
    for n in range(_levers.MAX_CONVERSATIONS + 10):
        _levers.conversation_turn(f"c{n}")
    assert len(_levers._conversations) == _levers.MAX_CONVERSATIONS
    assert _levers.conversation_turn("c0") == 1, "the oldest were forgotten"
    assert _levers.conversation_turn(f"c{_levers.MAX_CONVERSATIONS + 9}") == 2


# -- client reuse -----------------------------------------------------------------------------------------


def client_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [
        str(w.message)
        for w in caught
        if issubclass(w.category, firsttoken.FirstTokenWarning) and "SDK clients" in str(w.message)
    ]


def test_per_call_clients_warn_once(telemetry: Telemetry, sim: Simulator) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(_levers.PER_CALL_CLIENT_WARNING_AFTER + 3):
            if i % 2:
                aclient(sim).messages.create(model=ANTHROPIC_MODEL, max_tokens=4, messages=[USER])
            else:
                oclient(sim).chat.completions.create(model="gpt-4o-mini", messages=[USER])
            gc.collect()  # the client is dropped; a long-running app's collector gets to it eventually
            if i < _levers.PER_CALL_CLIENT_WARNING_AFTER:
                assert not client_warnings(caught), f"no warning before {i + 1} clients were dropped"
    messages = client_warnings(caught)
    assert len(messages) == 1, messages
    assert "reuse" in messages[0]
    calls = telemetry.calls()
    assert all((c.attributes or {}).get(sc.FT_SDK_CLIENT_NEW) is True for c in calls)
    (sdk_clients,) = (sum(p.value for p in telemetry.metrics()[sc.M_SDK_CLIENTS]),)
    assert sdk_clients == len(calls)


def test_a_reused_client_does_not_warn(telemetry: Telemetry, sim: Simulator) -> None:
    client = oclient(sim)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(_levers.PER_CALL_CLIENT_WARNING_AFTER + 1):
            client.chat.completions.create(model="gpt-4o-mini", messages=[USER])
            # Copies share the pool: a per-request timeout is no new client.
            client.with_options(timeout=30).chat.completions.create(model="gpt-4o-mini", messages=[USER])
        gc.collect()  # the copies are gone
        client.chat.completions.create(model="gpt-4o-mini", messages=[USER])
    assert not client_warnings(caught)
    new = [(c.attributes or {}).get(sc.FT_SDK_CLIENT_NEW, False) for c in telemetry.calls()]
    assert new[0] is True and not any(new[1:])
    assert [p.value for p in telemetry.metrics()[sc.M_SDK_CLIENTS]] == [1]


def test_clients_kept_alive_do_not_warn(telemetry: Telemetry, sim: Simulator) -> None:
    """Many clients used once each but kept (one per tenant, say) cost no reconnects later."""
    kept = [oclient(sim) for _ in range(_levers.PER_CALL_CLIENT_WARNING_AFTER + 2)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for client in kept:
            client.chat.completions.create(model="gpt-4o-mini", messages=[USER])
        gc.collect()
        kept[0].chat.completions.create(model="gpt-4o-mini", messages=[USER])
    assert not client_warnings(caught)


# -- output discipline -------------------------------------------------------------------------------------


def test_max_tokens_stops_are_counted(telemetry: Telemetry) -> None:
    latency = LatencyModel(queue_ms=1, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=5000, jitter=0, output_tokens=20)
    with Simulator(latency=latency, seed=5) as sim:
        oc, ac = oclient(sim), aclient(sim)
        for limit in (5, 5, 50):
            oc.chat.completions.create(model="gpt-4o-mini", messages=[USER], max_tokens=limit)
            ac.messages.create(model=ANTHROPIC_MODEL, max_tokens=limit, messages=[USER])
        for _ in oc.chat.completions.create(model="gpt-4o-mini", messages=[USER], max_tokens=5, stream=True):
            pass
    metrics = telemetry.metrics()
    counts = {
        (p.attributes[sc.GEN_AI_PROVIDER_NAME], p.attributes[sc.FT_FINISH_REASON]): p.value
        for p in metrics[sc.M_FINISH_REASONS]
    }
    assert counts == {
        ("openai", "length"): 3,
        ("openai", "stop"): 1,
        ("anthropic", "max_tokens"): 2,
        ("anthropic", "end_turn"): 1,
    }
    output = {
        p.attributes[sc.GEN_AI_REQUEST_MODEL]: p
        for p in metrics[sc.M_TOKEN_USAGE]
        if p.attributes[sc.GEN_AI_TOKEN_TYPE] == sc.TOKEN_TYPE_OUTPUT and not p.attributes.get(sc.GEN_AI_REQUEST_STREAM)
    }
    assert output["gpt-4o-mini"].count == 3 and output["gpt-4o-mini"].sum == 5 + 5 + 20
    assert output[ANTHROPIC_MODEL].count == 3 and output[ANTHROPIC_MODEL].sum == 5 + 5 + 20
