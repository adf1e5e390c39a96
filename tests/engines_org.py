"""Engines, orgs and sessions the engine tests and benchmarks share: an
engine of each provider kind on the simulator, a worker on a named engine
with a fallback, and a session paced on a shared clock."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from harness import ManualClock, daemon_in_process, in_process_client
from orgs import write_org
from simulator import Conversation, Recorded, Simulator

from rosterd import EngineError
from rosterd.client import RosterClient
from rosterd.compiler import TurnInput
from rosterd.engines import AnthropicEngine, Backoff, Engine, EngineReply, OpenAIEngine
from rosterd.org import EngineConfig, EngineKind, Org
from rosterd.protocol import TranscriptEntry, TurnResult, Wait

__all__ = (
    "FAST",
    "PRICES",
    "PROVIDERS",
    "anthropic_engine",
    "engine_for",
    "fallback_org",
    "hello",
    "hello_refused",
    "one_turn",
    "openai_engine",
    "paced_session",
    "second_turn",
    "w0_session",
)

# The engine kinds the simulator speaks: tests that hold for every provider
# run once per kind (the ``kind`` fixture).
PROVIDERS: tuple[EngineKind, ...] = ("openai", "anthropic")
FAST = Backoff(base_s=0.001, cap_s=0.01)
_HTTP_ENGINES: dict[str, type[OpenAIEngine] | type[AnthropicEngine]] = {
    "openai": OpenAIEngine,
    "anthropic": AnthropicEngine,
}


def engine_for(
    kind: EngineKind,
    sim: Simulator,
    *,
    api_key: str | None = None,
    backoff: Backoff = FAST,
    model: str = "sim",
    **config: Any,
) -> Engine:
    """An engine of *kind* on *sim*'s API of that kind, backing off by
    *backoff* between retries, *config* the rest of its ``EngineConfig``;
    the caller closes it."""
    base = sim.anthropic_url if kind == "anthropic" else sim.openai_url
    settings = EngineConfig(kind=kind, model=model, base_url=base, **config)
    return _HTTP_ENGINES[kind](settings, api_key=api_key, backoff=backoff)


async def hello(engine: Engine, org: Org) -> EngineReply:
    """*engine*'s reply to "hello" from w0 in c0 of *org*; the engine is
    closed after, whatever happened."""
    try:
        return await Conversation(org, "w0", "c0").say(engine, "hello")
    finally:
        await engine.aclose()


async def hello_refused(
    engine: Engine, conversation: Conversation | Org, match: str | None = None
) -> EngineError:
    """The ``EngineError`` (matching *match*) *engine* raises for "hello"
    in *conversation* (given an org: a new one of w0 in c0); the engine is
    closed after, whatever happened."""
    if isinstance(conversation, Org):
        conversation = Conversation(conversation, "w0", "c0")
    try:
        with pytest.raises(EngineError, match=match) as caught:
            await conversation.say(engine, "hello")
    finally:
        await engine.aclose()
    return caught.value


async def second_turn(
    engine: OpenAIEngine | AnthropicEngine, conversation: Conversation, sim: Simulator
) -> tuple[Recorded, dict[str, Any]]:
    """What *sim* got of *conversation*'s second turn through *engine* (its
    reply not appended), after a first: the request, which must be the
    engine's own body for it, and that body decoded; the engine is closed
    after, whatever happened."""
    try:
        await conversation.say(engine, "first")
        request = conversation.request(TurnInput(text="second"))
        await engine.complete(request, _ignore)
    finally:
        await engine.aclose()
    recorded = sim.requests[-1]
    assert recorded.body == engine.body(request)
    body: dict[str, Any] = json.loads(recorded.body)
    return recorded, body


async def _ignore(piece: str) -> None:
    pass


def fallback_org(
    root: Path,
    primary_url: str,
    fallback_url: str | None,
    *,
    settings: str = "max_retries = 0\n",
    channels: int = 2,
    extra: str = "",
) -> Path:
    """Worker w0 on engine ``claude`` (the Anthropic API at *primary_url*, with
    *settings*), falling back to ``local`` (the OpenAI API at *fallback_url*)
    when there is one; channels c0, c1, …"""
    claude = f'kind = "anthropic"\nmodel = "sim-claude"\nbase_url = "{primary_url}"\n{settings}'
    tables = ['[workers.w0.engine]\nuse = "claude"\n', f"[engines.claude]\n{claude}"]
    if fallback_url is not None:
        tables[1] += 'fallback = ["local"]\n'
        local = f'kind = "openai"\nmodel = "sim-local"\nbase_url = "{fallback_url}"\n'
        tables.append(f"[engines.local]\n{local}max_retries = 0\n")
    return write_org(
        root,
        channels=channels,
        identity_chars=300,
        purpose_chars=100,
        sections="\n".join(tables) + extra,
    )


@asynccontextmanager
async def w0_session(org: Path, state: Path) -> AsyncIterator[tuple[RosterClient, str]]:
    """A daemon of *org* in process, a client of it, and a session of w0 in c0."""
    async with in_process_client(org, state) as (_, client):
        yield client, (await client.session_open("w0", "c0")).session


async def one_turn(org: Path, state: Path, text: str = "hello") -> tuple[TurnResult, list[Wait]]:
    """One session turn of w0 in c0 on a daemon of *org*: its result, and
    every ``turn.wait`` its client heard."""
    waits: list[Wait] = []

    async def heard(wait: Wait) -> None:
        waits.append(wait)

    async with w0_session(org, state) as (client, session):
        result = await client.session_send(session, text, on_wait=heard)
    return result, waits


# USD per million tokens for the simulator's models: claude-sonnet-4-5's
# rates for sim-1; gpt-5's for the two OpenAI models, the one on the
# explicit caching contract writing at 1.25x input.
PRICES = """
[prices."sim-1"]
input = 3
cached_input = 0.3
cache_write_5m = 3.75
cache_write_1h = 6
output = 15

[prices."gpt-5.6-sim"]
input = 1.25
cached_input = 0.125
cache_write = 1.5625
output = 10

[prices."gpt-5.1-sim"]
input = 1.25
cached_input = 0.125
cache_write = 0
output = 10
"""


async def paced_session(
    root: Path, engine: str, gaps: Sequence[float], posts: Sequence[float] = ()
) -> tuple[list[TranscriptEntry], list[Recorded]]:
    """One session of w0 in c0 on *engine* (the ``[engine]`` table's keys but
    ``base_url``), on a provider simulator that keeps a prefix for the
    lifetime each request asks for (in memory: five minutes), its turns
    *gaps* apart on a clock the daemon shares, after posts in the channel
    *posts* apart: its assistant entries, and the requests the provider
    got. The session stays open across long gaps."""
    clock = ManualClock()
    async with Simulator(ttl_s=300, clock=clock) as sim:
        url = sim.anthropic_url if 'kind = "anthropic"' in engine else sim.openai_url
        write_org(
            root / "org",
            engine=f'{engine}\nbase_url = "{url}"',
            sections=f"[daemon]\nsession_idle_s = 86400\n{PRICES}",
        )
        async with (
            daemon_in_process(root / "org", root / "state", clock=clock) as daemon,
            await daemon.client() as client,
        ):
            # The channel's own pace is what a fresh session goes by.
            for post, gap in enumerate(posts):
                await client.channel_post("c0", "alice", f"post {post}")
                clock.advance(gap)
            opened = await client.session_open("w0", "c0")
            for turn, gap in enumerate(gaps):
                await client.session_send(opened.session, f"turn {turn}: what changed since?")
                clock.advance(gap)
            shown = await client.runs_show(opened.session)
    return [e for e in shown.transcript if e.role == "assistant"], sim.requests


def anthropic_engine(cache_ttl: str) -> str:
    return f'kind = "anthropic"\nmodel = "sim-1"\ncache_ttl = "{cache_ttl}"'


def openai_engine(prompt_cache: str, model: str = "gpt-5.6-sim") -> str:
    return f'kind = "openai"\nmodel = "{model}"\nprompt_cache = "{prompt_cache}"'
