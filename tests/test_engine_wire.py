"""Streams as real servers send them: any character, any chunking, missing parts."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import httpx
import pytest
from engines_org import engine_for, hello, hello_refused
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from orgs import write_org
from simulator import (
    Conversation,
    Framing,
    Omit,
    Reply,
    Server,
    Simulator,
    Status,
    prompt_bytes,
)

from rosterd import EngineError
from rosterd.engines import OpenAIEngine
from rosterd.org import EngineConfig, EngineKind, Org, load_org

pytestmark = pytest.mark.anyio

# Every character str.splitlines() ends a line at, and the SSE line ends.
LINE_BREAKERS = "\u2028\u2029\u0085\x0b\x0c\x1c\x1d\x1e\r\n"
FRAMINGS = st.builds(
    Framing,
    newline=st.sampled_from(["\n", "\r", "\r\n"]),
    raw=st.booleans(),
    chunk_bytes=st.one_of(st.none(), st.integers(1, 7)),
)
# Short pieces: a reply sent a byte per chunk costs one write per byte, and
# every kind of character still turns up within the examples.
_PIECES = st.one_of(
    st.text(LINE_BREAKERS, min_size=1, max_size=12),
    st.text(st.characters(codec="utf-8"), max_size=24),
)
# At least one line breaker in every reply, anywhere among any other text.
TEXTS = st.tuples(_PIECES, st.sampled_from(LINE_BREAKERS), _PIECES).map("".join)


@pytest.fixture
def org(tmp_path: Path) -> Org:
    return load_org(write_org(tmp_path, identity_chars=800, purpose_chars=200))


async def test_deltas_stream_in_order_and_join_to_the_reply(org: Org, kind: EngineKind) -> None:
    text = "Caching is a promise about prefixes, kept byte for byte."
    async with Simulator(delta_chars=5) as sim:
        sim.script(Reply(text))
        engine = engine_for(kind, sim)
        conversation = Conversation(org, "w0", "c0")
        reply = await conversation.say(engine, "hello")
        await engine.aclose()
    assert reply.text == text
    assert conversation.deltas[0] == [text[i : i + 5] for i in range(0, len(text), 5)]


@pytest.mark.long
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(text=TEXTS, framing=FRAMINGS, delta_chars=st.integers(1, 5))
async def test_every_character_arrives_byte_exact(
    org: Org, kind: EngineKind, text: str, framing: Framing, delta_chars: int
) -> None:
    async with Simulator(framing=framing, delta_chars=delta_chars) as sim:
        sim.script(Reply(text))
        engine = engine_for(kind, sim, max_retries=2)
        conversation = Conversation(org, "w0", "c0")
        try:
            reply = await conversation.say(engine, "hello")
            # The reply goes back verbatim as the next turn's assistant message.
            await conversation.say(engine, "and again")
        finally:
            await engine.aclose()
    assert reply.text == text
    pieces = [text[i : i + delta_chars] for i in range(0, len(text), delta_chars)]
    assert conversation.deltas[0] == pieces
    assert text.encode() in prompt_bytes(sim.requests[1])


async def test_line_separators_split_one_byte_at_a_time(org: Org, kind: EngineKind) -> None:
    text = "a\u2028b\u2029c\u0085d\x0be\x0cf\x1cg\x1dh\x1ei\rj\r\nk\nl é 😀"
    framing = Framing(newline="\r\n", raw=True, chunk_bytes=1)
    async with Simulator(framing=framing, delta_chars=3) as sim:
        sim.script(Reply(text))
        engine = engine_for(kind, sim, max_retries=2)
        conversation = Conversation(org, "w0", "c0")
        try:
            reply = await conversation.say(engine, "hello")
        finally:
            await engine.aclose()
    assert reply.text == text
    assert conversation.deltas[0] == [text[i : i + 3] for i in range(0, len(text), 3)]


async def test_a_messages_stream_without_message_start_is_answered_with_unknown_usage(
    org: Org, caplog: pytest.LogCaptureFixture
) -> None:
    async with Simulator() as sim:
        sim.script(Omit("message_start", text="no start"), Omit("message_start"))
        engine = engine_for("anthropic", sim, max_retries=2)
        conversation = Conversation(org, "w0", "c0")
        with caplog.at_level(logging.WARNING, logger="rosterd.engines"):
            try:
                first = await conversation.say(engine, "hello")
                second = await conversation.say(engine, "again")
                third = await conversation.say(engine, "and a normal one")
            finally:
                await engine.aclose()
    assert first.text == "no start"
    assert first.usage is None
    assert second.usage is None
    assert third.usage is not None
    assert third.usage.input_tokens > 0
    deviations = [r for r in caplog.records if "message_start" in r.getMessage()]
    assert len(deviations) == 1, "a deviation is logged once per engine"


async def test_a_messages_stream_without_message_stop_still_fails(org: Org) -> None:
    async with Simulator() as sim:
        sim.script(Omit("message_stop"))
        engine = engine_for("anthropic", sim, max_retries=2)
        error = await hello_refused(engine, org, "ended before message_stop")
    assert error.retryable


async def test_an_openai_stream_without_usage_is_answered_with_unknown_usage(org: Org) -> None:
    async with Simulator() as sim:
        sim.script(Omit("usage", text="like ollama"))
        reply = await hello(engine_for("openai", sim, max_retries=2), org)
    assert reply.text == "like ollama"
    assert reply.usage is None


async def test_usage_in_only_the_last_chunk_is_measured(org: Org) -> None:
    # The simulator sends "usage": null in every chunk but the last, as
    # OpenAI does with include_usage.
    async with Simulator(openai_min_tokens=128) as sim:
        engine = engine_for("openai", sim, max_retries=2)
        conversation = Conversation(org, "w0", "c0")
        try:
            first = await conversation.say(engine, "hello")
            second = await conversation.say(engine, "again")
        finally:
            await engine.aclose()
    prompts = [prompt_bytes(r) for r in sim.requests]
    assert first.usage is not None
    assert second.usage is not None
    assert first.usage.input_tokens == len(prompts[0]) // 4
    assert second.usage.input_tokens == len(prompts[1]) // 4
    assert first.usage.cached_input_tokens == 0
    assert second.usage.cached_input_tokens >= 128
    assert first.usage.output_tokens == len(first.text) // 4 + 1


@pytest.mark.parametrize("server", ["provider", "llama.cpp"])
async def test_a_prompt_over_the_context_window_is_flagged(
    org: Org, kind: EngineKind, server: Server
) -> None:
    async with Simulator(context_tokens=50, server=server) as sim:
        error = await hello_refused(engine_for(kind, sim, max_retries=2), org)
    assert error.context_exceeded
    assert error.status == 400
    assert not error.retryable
    assert len(sim.requests) == 1, "a request that is too long is never retried"
    assert "too long" in str(error) or "context" in str(error)


async def test_other_client_errors_are_not_context_exceeded(org: Org, kind: EngineKind) -> None:
    async with Simulator() as sim:
        sim.script(Status(400, "messages: roles must alternate"))
        error = await hello_refused(engine_for(kind, sim, max_retries=2), org)
    assert error.status == 400
    assert not error.context_exceeded


async def test_a_prompt_within_the_context_window_is_answered(org: Org, kind: EngineKind) -> None:
    async with Simulator(context_tokens=1_000_000) as sim:
        reply = await hello(engine_for(kind, sim, max_retries=2), org)
    assert reply.text


@pytest.mark.parametrize(
    "error",
    [
        # OpenAI's, vLLM's and llama.cpp's shape.
        {"error": {"message": "Input validation error: too long", "type": "server_error"}},
        # text-generation-inference's, as its HTTP errors also come.
        {"error": "Input validation error: too long", "error_type": "validation"},
    ],
)
async def test_an_error_chunk_mid_stream_names_the_provider_s_message(
    org: Org, error: dict[str, object]
) -> None:
    chunk = {"choices": [{"index": 0, "delta": {"content": "Hel"}, "finish_reason": None}]}
    body = f"data: {json.dumps(chunk)}\n\ndata: {json.dumps(error)}\n\n".encode()

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    config = EngineConfig(kind="openai", model="m", base_url="http://127.0.0.1:9/v1")
    engine = OpenAIEngine(config, api_key=None, transport=httpx.MockTransport(answer))
    with pytest.raises(EngineError) as caught:
        await hello(engine, org)
    assert "error mid-stream: Input validation error: too long" in str(caught.value)
    assert caught.value.retryable
