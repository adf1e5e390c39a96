"""Records the stores keep that no client sees."""

from __future__ import annotations

import msgspec

from ..compiler import SystemPrompt
from ..org import EngineConfig

__all__ = ("SessionState",)


class SessionState(msgspec.Struct, frozen=True):
    """What a session froze when it started: resumed byte-exactly from it."""

    system: SystemPrompt
    engine: EngineConfig
