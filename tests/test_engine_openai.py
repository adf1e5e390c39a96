"""The OpenAI-compatible engine against the simulator: bytes, stream, usage, cache."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from engines_org import second_turn
from orgs import write_org
from simulator import Conversation, Simulator, reported

from rosterd.compiler import TurnInput
from rosterd.engines import OpenAIEngine
from rosterd.org import EngineConfig, Org, load_org

pytestmark = pytest.mark.anyio

KEY = "sk-test-openai-0123456789"


@pytest.fixture
def org(tmp_path: Path) -> Org:
    return load_org(write_org(tmp_path, workers=2, channels=2))


def engine_for(simulator: Simulator) -> OpenAIEngine:
    config = EngineConfig(
        kind="openai", model="gpt-sim", base_url=simulator.openai_url, max_tokens=321
    )
    return OpenAIEngine(config, api_key=KEY)


async def test_request_body_carries_system_verbatim_and_the_route_key(
    simulator: Simulator, org: Org
) -> None:
    conversation = Conversation(org, "w1", "c1")
    recorded, body = await second_turn(engine_for(simulator), conversation, simulator)
    assert recorded.path == "/v1/chat/completions"
    assert recorded.headers["authorization"] == f"Bearer {KEY}"
    assert body["model"] == "gpt-sim"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 321
    assert "max_completion_tokens" not in body
    assert body["prompt_cache_key"] == conversation.system.route_key
    assert len(body["prompt_cache_key"]) <= 64
    assert body["messages"][0] == {"role": "system", "content": conversation.system.text}
    assert body["messages"][1:] == [
        {"role": m.role, "content": m.content} for m in conversation.messages
    ]


async def test_each_turn_extends_the_previous_request(simulator: Simulator, org: Org) -> None:
    engine = engine_for(simulator)
    conversation = Conversation(org, "w0", "c1")
    for text in ["one", "two", "three"]:
        await conversation.say(engine, text)
    await engine.aclose()
    prompts = [json.loads(r.body)["messages"] for r in simulator.requests]
    for earlier, later in itertools.pairwise(prompts):
        assert later[: len(earlier)] == earlier
        assert len(later) == len(earlier) + 2


async def test_usage_maps_prompt_and_cached_tokens(simulator: Simulator, org: Org) -> None:
    engine = engine_for(simulator)
    conversation = Conversation(org, "w0", "c0")
    usages = [reported(await conversation.say(engine, f"turn {i} " * 40)) for i in range(8)]
    await engine.aclose()
    first = usages[0]
    assert first.input_tokens > 1024
    assert first.cached_input_tokens == 0
    assert first.cache_write_tokens == 0
    assert first.output_tokens > 0
    cached = [u.cached_input_tokens for u in usages]
    assert cached == sorted(cached)
    assert cached[-1] > cached[1] > 0
    for usage in usages:
        assert usage.cached_input_tokens <= usage.input_tokens
        assert (usage.cached_input_tokens - 1024) % 128 == 0 or usage.cached_input_tokens == 0


async def test_another_channel_of_the_worker_reuses_the_shared_prefix(
    simulator: Simulator, org: Org
) -> None:
    engine = engine_for(simulator)
    await Conversation(org, "w0", "c0").say(engine, "hello")
    other = Conversation(org, "w0", "c1")
    reply = await other.say(engine, "hello")
    await engine.aclose()
    # Same route key, same identity/policy/connections prefix.
    assert reported(reply).cached_input_tokens >= 1024


async def test_no_authorization_header_without_a_key(org: Org) -> None:
    async with Simulator() as simulator:
        config = EngineConfig(kind="openai", model="llama", base_url=simulator.openai_url)
        engine = OpenAIEngine(config, api_key=None)
        await Conversation(org, "w1", "c0").say(engine, "hello")
        await engine.aclose()
    assert "authorization" not in simulator.requests[0].headers


async def test_openai_itself_gets_max_completion_tokens(org: Org) -> None:
    config = EngineConfig(kind="openai", model="o4", max_tokens=77)
    engine = OpenAIEngine(config, api_key=KEY)
    conversation = Conversation(org, "w0", "c0")
    body = json.loads(engine.body(conversation.request(TurnInput(text="hi"))))
    await engine.aclose()
    assert body["max_completion_tokens"] == 77
    assert "max_tokens" not in body
