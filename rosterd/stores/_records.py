"""Records the stores keep that no client sees."""

from __future__ import annotations

import msgspec

from ..compiler import SystemPrompt
from ..org import EngineConfig
from ..protocol import RunInfo

__all__ = ("SessionState", "cut_off")


class SessionState(msgspec.Struct, frozen=True):
    """What a session froze when it started: resumed byte-exactly from it."""

    system: SystemPrompt
    engine: EngineConfig


def cut_off(info: RunInfo, now: float) -> RunInfo:
    """*info* of a run its daemon's stop cut off: ``interrupted`` as of *now*."""
    return msgspec.structs.replace(
        info,
        status="interrupted",
        ended_at=now,
        error="the daemon stopped before this run finished",
    )
