"""The embedded echo engine: offline, deterministic, streams its account."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import SupportsIndex, overload

import pytest
from simulator import Conversation, reported

from rosterd.engines import EchoEngine, EngineRequest, open_engine
from rosterd.org import EngineConfig, load_org
from rosterd.protocol import ChatMessage

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


async def test_echo_counts_the_whole_prompt_of_a_live_transcript(example_org: Path) -> None:
    """Its usage is the whole prompt's, as a provider's is, though it reads
    only what was appended since the transcript's previous request."""
    system = Conversation(load_org(example_org), "ada", "general").system
    engine = EchoEngine()

    async def billed(messages: Sequence[ChatMessage]) -> int:
        reply = await engine.complete(EngineRequest(system, messages), _ignore)
        return reported(reply).input_tokens

    def whole(messages: Sequence[ChatMessage]) -> int:
        chars = len(system.text) + sum(len(m.content) for m in messages)
        return (chars + 3) // 4

    live: list[ChatMessage] = []
    others = [[ChatMessage(role="user", content=f"other {n}")] for n in range(100)]
    for n in range(1, 6):
        live += [ChatMessage(role="user", content="u" * 40 * n)]
        assert await billed(live) == whole(live)
        live += [ChatMessage(role="assistant", content="a" * 8 * n)]
        # Other transcripts between two requests of this one, more than it keeps.
        for other in others[: 30 * n]:
            assert await billed(other) == whole(other)
    # Cut back, as a resumed session cuts what its progress did not reach,
    # and grown again with other messages.
    del live[4:]
    live += [ChatMessage(role="user", content="x" * 500)]
    assert await billed(live) == whole(live)
    # A copy, and a list of the same length holding other messages.
    assert await billed(list(live)) == whole(live)
    changed = [ChatMessage(role=m.role, content=m.content * 2) for m in live]
    assert await billed(changed) == whole(changed)
    assert await billed(live) == whole(live)


async def test_echo_reads_only_what_a_transcript_gained(example_org: Path) -> None:
    """A turn costs the echo engine what it added, whatever the length."""
    system = Conversation(load_org(example_org), "ada", "general").system
    engine = EchoEngine()
    live = _Counting(ChatMessage(role="user", content=f"turn {n}") for n in range(1000))
    await engine.complete(EngineRequest(system, live), _ignore)
    live.read = 0
    live += [ChatMessage(role="assistant", content="ok"), ChatMessage(role="user", content="more")]
    await engine.complete(EngineRequest(system, live), _ignore)
    assert live.read <= 8


class _Counting(list[ChatMessage]):
    """A transcript that counts the messages read out of it."""

    read = 0

    def __iter__(self) -> Iterator[ChatMessage]:
        for message in super().__iter__():
            self.read += 1
            yield message

    @overload
    def __getitem__(self, at: SupportsIndex) -> ChatMessage: ...
    @overload
    def __getitem__(self, at: slice) -> list[ChatMessage]: ...
    def __getitem__(self, at: SupportsIndex | slice) -> ChatMessage | list[ChatMessage]:
        got = super().__getitem__(at)
        self.read += len(got) if isinstance(got, list) else 1
        return got


async def _ignore(text: str) -> None:
    return None
