"""The embedded echo engine: offline, deterministic, streams its account."""

from __future__ import annotations

from pathlib import Path

import pytest
from simulator import Conversation, reported

from rosterd.engines import EchoEngine, open_engine
from rosterd.org import EngineConfig, load_org

pytestmark = pytest.mark.anyio


async def test_echo_streams_a_deterministic_account(example_org: Path) -> None:
    org = load_org(example_org)
    replies = []
    for _ in range(2):
        conversation = Conversation(org, "ada", "general")
        engine = open_engine(EngineConfig(), {})
        assert isinstance(engine, EchoEngine)
        reply = await conversation.say(engine, "ship the release notes")
        await engine.aclose()
        assert "".join(conversation.deltas[0]) == reply.text
        assert len(conversation.deltas[0]) > 1
        replies.append(reply)
    assert replies[0] == replies[1]
    text = replies[0].text
    assert "You said: ship the release notes" in text
    assert "message x1" in text
    assert f"system {len(conversation.system.text)} chars" in text
    assert reported(replies[0]).input_tokens > 0
    assert reported(replies[0]).output_tokens > 0
    assert reported(replies[0]).cached_input_tokens == 0


async def test_echo_counts_turns_of_the_transcript(example_org: Path) -> None:
    conversation = Conversation(load_org(example_org), "grace", "general")
    engine = EchoEngine()
    await conversation.say(engine, "one")
    second = await conversation.say(engine, "two")
    assert second.text.startswith("[echo] turn 2:")
    assert "transcript 3 messages" in second.text
