"""The Anthropic engine against the simulator: breakpoints, stream, usage, cache."""

from __future__ import annotations

import functools
import itertools
import json
from pathlib import Path

import msgspec
import pytest
from engines_org import second_turn
from hypothesis import given, settings
from hypothesis import strategies as st
from orgs import write_org
from simulator import Conversation, Simulator, prompt_bytes, reported

from rosterd.compiler import Boundary, SystemPrompt
from rosterd.engines import ANTHROPIC_VERSION, MAX_BREAKPOINTS, AnthropicEngine, EngineRequest
from rosterd.org import EngineConfig, Org, load_org
from rosterd.protocol import ChatMessage

pytestmark = pytest.mark.anyio

KEY = "sk-ant-test-0123456789"
EPHEMERAL = {"type": "ephemeral"}
EXAMPLE_ORG = Path(__file__).resolve().parent.parent / "examples" / "org"


@pytest.fixture
def org(tmp_path: Path) -> Org:
    return load_org(write_org(tmp_path, workers=2, channels=2))


def engine_for(simulator: Simulator) -> AnthropicEngine:
    config = EngineConfig(kind="anthropic", model="claude-sim", base_url=simulator.anthropic_url)
    return AnthropicEngine(config, api_key=KEY)


def marked(blocks: list[dict[str, object]]) -> list[bool]:
    return ["cache_control" in block for block in blocks]


async def test_system_is_cut_at_each_boundary_and_marked(simulator: Simulator, org: Org) -> None:
    conversation = Conversation(org, "w0", "c0")
    recorded, body = await second_turn(engine_for(simulator), conversation, simulator)
    assert recorded.path == "/v1/messages"
    assert recorded.headers["x-api-key"] == KEY
    assert recorded.headers["anthropic-version"] == ANTHROPIC_VERSION
    assert body["model"] == "claude-sim"
    assert body["stream"] is True
    system = body["system"]
    assert "".join(block["text"] for block in system) == conversation.system.text
    ends = [len("".join(block["text"] for block in system[: i + 1])) for i in range(len(system))]
    assert ends == [b.offset for b in conversation.system.boundaries]
    assert all(block["cache_control"] == EPHEMERAL for block in system)
    messages = body["messages"]
    assert [m["content"][0]["text"] for m in messages] == [m.content for m in conversation.messages]
    assert [marked(m["content"]) for m in messages] == [[False], [False], [True]]
    total = sum(marked(system)) + sum(sum(marked(m["content"])) for m in messages)
    assert total == MAX_BREAKPOINTS


async def test_coinciding_boundaries_merge_into_one_breakpoint(
    simulator: Simulator, tmp_path: Path
) -> None:
    # w1 has no connections and a direct run has no purpose: all three
    # boundaries but the end of system coincide.
    org = load_org(write_org(tmp_path, workers=2, channels=1))
    engine = engine_for(simulator)
    conversation = Conversation(org, "w1", None)
    await conversation.say(engine, "hello")
    await engine.aclose()
    offsets = {b.offset for b in conversation.system.boundaries}
    assert len(offsets) == 2
    body = json.loads(simulator.requests[0].body)
    assert "".join(b["text"] for b in body["system"]) == conversation.system.text
    assert all(b["text"] for b in body["system"])
    assert marked(body["system"]) == [True, True]
    assert marked(body["messages"][-1]["content"]) == [True]


async def test_usage_counts_cached_tokens_inside_input(simulator: Simulator, org: Org) -> None:
    engine = engine_for(simulator)
    conversation = Conversation(org, "w1", "c1")
    first = reported(await conversation.say(engine, "hello"))
    second = reported(await conversation.say(engine, "and again"))
    await engine.aclose()
    # A fresh prompt is written whole; the next turn reads all of it back.
    assert first.cached_input_tokens == 0
    assert 1024 <= first.cache_write_tokens <= first.input_tokens
    assert second.cached_input_tokens == first.cache_write_tokens
    assert second.input_tokens > first.input_tokens
    assert 0 < second.cache_write_tokens <= second.input_tokens - second.cached_input_tokens
    assert first.output_tokens > 0


async def test_cached_tokens_grow_across_an_append_only_conversation(
    simulator: Simulator, org: Org
) -> None:
    engine = engine_for(simulator)
    conversation = Conversation(org, "w0", "c1")
    usages = [reported(await conversation.say(engine, f"step {i}")) for i in range(6)]
    await engine.aclose()
    cached = [u.cached_input_tokens for u in usages]
    assert cached[0] == 0
    assert all(b > a for a, b in itertools.pairwise(cached))
    # Only the previous reply and the new turn are fresh.
    for before, after in itertools.pairwise(usages):
        assert after.cached_input_tokens == before.input_tokens


async def test_another_channel_reads_the_worker_prefix(simulator: Simulator, org: Org) -> None:
    engine = engine_for(simulator)
    first = Conversation(org, "w0", "c0")
    await first.say(engine, "hello")
    other = Conversation(org, "w0", "c1")
    usage = reported(await other.say(engine, "hello"))
    await engine.aclose()
    shared = other.system.boundaries[0].offset
    assert shared == first.system.boundaries[0].offset
    # Tool definitions come first in cache order: the shared prefix holds them.
    prefix = other.system.text[:shared].encode()
    prompt = prompt_bytes(simulator.requests[-1])
    assert prompt.index(prefix) > 0
    assert usage.cached_input_tokens == (prompt.index(prefix) + len(prefix)) // 4


async def test_nothing_is_read_after_the_cache_is_cleared(simulator: Simulator, org: Org) -> None:
    engine = engine_for(simulator)
    conversation = Conversation(org, "w1", "c0")
    await conversation.say(engine, "hello")
    simulator.clear_cache()
    usage = reported(await conversation.say(engine, "again"))
    await engine.aclose()
    assert usage.cached_input_tokens == 0
    assert usage.cache_write_tokens == usage.input_tokens


async def test_entries_expire_after_the_ttl(org: Org) -> None:
    now = [0.0]
    async with Simulator(ttl_s=300, clock=lambda: now[0]) as simulator:
        engine = engine_for(simulator)
        conversation = Conversation(org, "w1", "c0")
        await conversation.say(engine, "hello")
        now[0] = 200.0
        kept = reported(await conversation.say(engine, "within the ttl"))
        now[0] = 600.0
        expired = reported(await conversation.say(engine, "after the ttl"))
        await engine.aclose()
    assert kept.cached_input_tokens > 0
    assert expired.cached_input_tokens == 0


async def test_prompts_under_the_minimum_are_not_cached(org: Org) -> None:
    async with Simulator(min_cacheable_tokens=100_000) as simulator:
        engine = engine_for(simulator)
        conversation = Conversation(org, "w1", "c0")
        usages = [reported(await conversation.say(engine, t)) for t in ["a", "b"]]
        await engine.aclose()
    assert [(u.cached_input_tokens, u.cache_write_tokens) for u in usages] == [(0, 0), (0, 0)]


@functools.cache
def example_system() -> SystemPrompt:
    return Conversation(load_org(EXAMPLE_ORG), "ada", "general").system


@st.composite
def system_shapes(draw: st.DrawFn) -> tuple[str, list[int], int]:
    text = draw(st.text(min_size=1, max_size=60))
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), min_size=2, max_size=2)))
    return text, [*cuts, len(text)], draw(st.integers(0, 5))


@pytest.mark.long
@settings(max_examples=100, deadline=None)
@given(shape=system_shapes())
async def test_breakpoints_follow_the_boundaries_whatever_they_are(
    shape: tuple[str, list[int], int],
) -> None:
    text, offsets, turns = shape
    base = example_system()
    marks = tuple(
        Boundary(name=b.name, offset=o, sha256=b.sha256)
        for b, o in zip(base.boundaries, offsets, strict=True)
    )
    system = msgspec.structs.replace(base, text=text, boundaries=marks)
    messages = tuple(
        ChatMessage(role="user" if i % 2 == 0 else "assistant", content=f"m{i}")
        for i in range(turns)
    )
    engine = AnthropicEngine(EngineConfig(kind="anthropic", model="m"), api_key=None)
    body = json.loads(engine.body(EngineRequest(system=system, messages=messages)))
    await engine.aclose()

    blocks = body["system"]
    assert "".join(b["text"] for b in blocks) == text
    assert all(b["text"] for b in blocks)
    ends = [len("".join(b["text"] for b in blocks[: i + 1])) for i in range(len(blocks))]
    assert ends == sorted({o for o in offsets if o > 0})
    assert marked(blocks) == [True] * len(blocks)
    message_marks = [marked(m["content"]) for m in body["messages"]]
    assert message_marks == [[False]] * (turns - 1) + [[True]] * (turns > 0)
    assert sum(marked(blocks)) + sum(sum(m) for m in message_marks) <= MAX_BREAKPOINTS
