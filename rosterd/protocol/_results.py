"""Result and notification shapes of the methods that have their own.

The other methods reply with a record (``_records``) or a compiler input
(a memory item, a channel message) as it is. Clients decode with these
too; msgspec ignores fields it does not know, so an older client keeps
working with a daemon that adds fields.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from ..compiler import ContextRecord, MemoryItem, OverBudget, Retirement
from ._records import RunInfo, TranscriptEntry, Usage


class BlockSummary(msgspec.Struct, frozen=True):
    """One block of a turn's compilation, from its trace: ``chars`` as
    rendered, ``items`` included and ``omitted`` under budget pressure."""

    block: str
    status: str
    chars: int
    items: int
    omitted: int


class TurnResult(msgspec.Struct, frozen=True):
    """``session.send`` and ``run.direct``: the run and turn that answered,
    the reply, and the compilation's blocks and size (``used`` of ``total``)."""

    run: str
    turn: int
    text: str
    usage: Usage | None
    blocks: list[BlockSummary]
    used: int
    total: int
    # Set when the session rolled over to answer this turn: ``run`` is the
    # new session, this the one it continues.
    rolled_from: str | None = None
    # Engine calls of the turn; ``text`` and ``usage`` are the last one's.
    steps: int = 1


class SessionOpened(msgspec.Struct, frozen=True):
    """``session.open``: the pair's session (its id is its run's), its turns
    so far, the size of its frozen system part and its route key."""

    session: str
    worker: str
    channel: str
    turns: int
    system_chars: int
    route_key: str


class StatusResult(msgspec.Struct, frozen=True):
    """``daemon.status``: this daemon, its warm sessions and running tasks,
    and the org in force (``config_error``: why the latest edit was refused)."""

    version: str
    pid: int
    sessions: int
    tasks_running: int
    config_error: str | None
    config_loaded_at: float
    config_generation: int
    # Scopes whose compilations fail (1001) until their files are fixed.
    over_budget: tuple[OverBudget, ...] = ()
    # The org's engines: breaker, calls in flight and waiting.
    engines: tuple[EngineStatus, ...] = ()
    # Workers whose notes the start's warm-up has yet to index.
    warming: tuple[str, ...] = ()


def describe_over_budget(problem: OverBudget) -> str:
    """One ``over_budget`` entry as the daemon logs it and ``roster status`` prints it."""
    where = f"{problem.worker} {problem.surface}"
    where += f" #{problem.channel}" if problem.channel is not None else ""
    return (
        f"{where}: block {problem.block!r} is {problem.size} characters, "
        f"over its limit of {problem.limit}"
    )


class RunShown(msgspec.Struct, frozen=True):
    """``runs.show``: a run's info, every trace record and every transcript entry."""

    info: RunInfo
    records: list[ContextRecord]
    transcript: list[TranscriptEntry]


class Delta(msgspec.Struct, frozen=True):
    """``turn.delta``: the next piece of *run*'s reply; in order, the pieces
    are the result's ``text``."""

    run: str
    text: str


class Closed(msgspec.Struct, frozen=True):
    """``session.close``: the id of the session it closed."""

    closed: str


class MemoryNote(MemoryItem, frozen=True):
    """A note as ``memory.list`` and ``memory.forget`` show it: with how it
    was retired, if it was."""

    retired: Retirement | None = None


BreakerState = Literal["closed", "open", "half-open"]
WaitReason = Literal["queued", "rate_limited", "overloaded", "fallback"]


class EngineStatus(msgspec.Struct, frozen=True):
    """An engine of the org as ``daemon.status`` shows it: its breaker, the
    calls it has in flight and waiting, and its failures in a row."""

    name: str
    kind: str
    breaker: BreakerState
    inflight: int
    queued: int
    failures: int
    retry_in_s: float | None = None


class Wait(msgspec.Struct, frozen=True):
    """``turn.wait``: a turn of *run* waits, and why; seconds until it may go, if known."""

    run: str
    reason: WaitReason
    retry_in_s: float | None = None
