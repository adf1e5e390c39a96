"""The naive prompt strategies, replayed on a conversation the daemon had.

Each replay sends, turn by turn in the daemon's order, what a hand-rolled
client would have sent for the same conversation (the same user texts, the
daemon's replies as the assistant turns) through a real engine:

- naive (a): the system prompt rebuilt every turn with the worker's memory
  and the current time in it; the messages are the daemon's without their
  memory and briefing (the same channel traffic, no gate news);
- naive (b): rosterd's exact requests, but with the run id at the top of the
  system prompt.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
from _workload import Recording, Turn

from rosterd import RosterError
from rosterd.compiler import (
    Boundary,
    BoundaryName,
    ContextRecord,
    RunMeta,
    SystemPrompt,
    compile_system,
    iso_time,
)
from rosterd.engines import Engine, EngineRequest
from rosterd.org import Surface, load_org
from rosterd.protocol import ChatMessage, Usage

__all__ = ("NAIVE", "Replayed", "replay")

NAIVE = ("naive_a", "naive_b")
START = 1_700_000_000.0
# What naive (a) carries in its system prompt, or not at all, instead of the turn.
CARRIED = frozenset({"memory", "briefing"})


@dataclass
class Replayed:
    """Per turn of the recording (in its order), the usage the replay got;
    ``None`` for a turn the replay did not send or whose usage is unknown."""

    usages: list[Usage | None] = field(default_factory=list)
    failed: int = 0


def system_of(org: Path, record: ContextRecord, text: str) -> SystemPrompt:
    """The daemon's frozen system part of a run, as an engine takes it."""
    loaded = load_org(org)
    scope = loaded.scope(Surface.SESSION, record.worker, record.channel)
    skeleton = compile_system(loaded, scope, RunMeta(run=record.run, turn=0, now=START))
    return msgspec.structs.replace(
        skeleton,
        text=text,
        blocks=record.blocks,
        boundaries=record.boundaries,
        route_key=record.route_key or skeleton.route_key,
    )


def _with_boundaries(system: SystemPrompt, text: str, offsets: list[int]) -> SystemPrompt:
    names: tuple[BoundaryName, ...] = ("connections", "purpose", "system")
    marks = tuple(
        Boundary(
            name=name, offset=offset, sha256=hashlib.sha256(text[:offset].encode()).hexdigest()
        )
        for name, offset in zip(names, offsets, strict=True)
    )
    return msgspec.structs.replace(system, text=text, boundaries=marks)


def prefixed(system: SystemPrompt, prefix: str) -> SystemPrompt:
    offsets = [b.offset + len(prefix) for b in system.boundaries]
    return _with_boundaries(system, prefix + system.text, offsets)


def rebuilt(system: SystemPrompt, memory: tuple[str, ...], now: float) -> SystemPrompt:
    # A typical hand-rolled prompt: who you are, then "now" and what you remember.
    identity = system.blocks[0].content
    notes = "".join(f"- {text}\n" for text in memory)
    volatile = f"Current time: {iso_time(now)}\nMemory:\n{notes}"
    text = identity + volatile + system.text[len(identity) :]
    return _with_boundaries(system, text, [len(text)] * 3)


def _without_carried(text: str) -> str:
    """A compiled input without its memory and briefing envelopes (one a line)."""
    kept = []
    for line in text.splitlines(keepends=True):
        try:
            block = msgspec.json.decode(line, type=_Envelope).block
        except msgspec.DecodeError:
            block = None
        if block not in CARRIED:
            kept.append(line)
    return "".join(kept)


class _Envelope(msgspec.Struct):
    block: str | None = None


async def _ignore(piece: str) -> None:
    pass


async def replay(strategy: str, recording: Recording, org: Path, engine: Engine) -> Replayed:
    systems: dict[str, SystemPrompt] = {}
    plain: dict[str, list[ChatMessage]] = {}
    replayed = Replayed()
    for turn in recording.turns:
        if turn.failed:
            replayed.usages.append(None)
            continue
        if turn.run not in systems:
            record = recording.systems[turn.run]
            systems[turn.run] = system_of(org, record, recording.request(turn).system)
        request = _request(strategy, turn, recording, systems[turn.run], plain)
        try:
            reply = await engine.complete(request, _ignore)
        except RosterError:
            replayed.failed += 1
            replayed.usages.append(None)
            continue
        replayed.usages.append(reply.usage)
    return replayed


def _request(
    strategy: str,
    turn: Turn,
    recording: Recording,
    system: SystemPrompt,
    plain: dict[str, list[ChatMessage]],
) -> EngineRequest:
    sent = recording.request(turn).messages
    if strategy == "naive_b":
        tagged = prefixed(system, f"Run id: {turn.run}\n")
        return EngineRequest(system=tagged, messages=tuple(sent))
    messages = plain.setdefault(turn.run, [])
    messages.append(ChatMessage(role="user", content=_without_carried(sent[-1].content)))
    request = EngineRequest(
        system=rebuilt(system, turn.memory, START + 60 * turn.number), messages=tuple(messages)
    )
    # The daemon's reply is the assistant turn, as the same conversation would have it.
    messages.append(ChatMessage(role="assistant", content=turn.reply))
    return request
