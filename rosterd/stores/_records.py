"""Records the stores keep that no client sees."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

import msgspec

from ..compiler import SystemPrompt
from ..org import DEFAULT_ENGINE, EngineConfig, NamedEngine
from ..protocol import RunInfo, RunStatus


class SessionState(msgspec.Struct, frozen=True):
    """What a session froze when it started: resumed byte-exactly from it.

    ``engine`` answers its turns, under the name ``engine_name``; each of
    ``fallbacks`` in order when it cannot.
    """

    system: SystemPrompt
    engine: EngineConfig
    engine_name: str = DEFAULT_ENGINE
    fallbacks: tuple[NamedEngine, ...] = ()

    def engines(self) -> tuple[NamedEngine, ...]:
        """The engines to try for a turn, the session's own first."""
        return (NamedEngine(self.engine_name, self.engine), *self.fallbacks)


class Posts(msgspec.Struct, frozen=True):
    """Messages a turn posts in *channel*, each (sender, text, at), in order;
    *run* is the session whose turn they are."""

    channel: str
    messages: tuple[tuple[str, str, float], ...]
    run: str | None = None


def new_run_id(prefix: str, now: float) -> str:
    """``<prefix>-<UTC stamp>-<6 hex>``: sortable by creation, unguessable."""
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y%m%d-%H%M%S")
    return f"{prefix}-{stamp}-{secrets.token_hex(3)}"


def ended(info: RunInfo, status: RunStatus, at: float, error: str | None = None) -> RunInfo:
    """*info* of a run that ended with *status* at *at*."""
    return msgspec.structs.replace(info, status=status, ended_at=at, error=error)


def cut_off(info: RunInfo, now: float) -> RunInfo:
    """*info* of a run its daemon's stop cut off: ``interrupted`` as of *now*."""
    return ended(info, "interrupted", now, "the daemon stopped before this run finished")


def unreached(info: RunInfo, now: float) -> RunInfo:
    """*info* of a session its host's stop cut off while it started, or
    while its rollover ended the session it continues: ``failed`` as of
    *now*, since nothing leads to it."""
    return ended(
        info, "failed", now, "the daemon stopped while this session started: no pair leads to it"
    )
