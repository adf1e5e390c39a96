"""What every engine takes and gives: a request built from compiled parts.

The request is the frozen system part plus the append-only transcript, whose
last message is the new user turn; an engine never rebuilds or reorders it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import msgspec

from ..compiler import SystemPrompt, ToolCall
from ..protocol import CacheTtl, ChatMessage, Usage, WaitReason

__all__ = ("ChatMessage", "DeltaSink", "Engine", "EngineReply", "EngineRequest", "Usage")


class EngineRequest(msgspec.Struct, frozen=True):
    """``messages`` is the run's live transcript list, passed without a copy
    so a turn costs the same at any transcript length; engines only read it."""

    system: SystemPrompt
    messages: Sequence[ChatMessage]
    # How long the provider should keep this request's prefix cached, where
    # it takes a lifetime (Anthropic's cache_control ttl).
    cache_ttl: CacheTtl = "5m"


class EngineReply(msgspec.Struct, frozen=True):
    """``usage`` is ``None`` when the provider did not report it: unknown, not zero.
    ``calls`` are the tool calls the model made, unvalidated."""

    text: str
    usage: Usage | None
    calls: tuple[ToolCall, ...] = ()


DeltaSink = Callable[[str], Awaitable[None]]
# Hears why a call waits (a retry's backoff, a queue) and for how long, if known.
WaitSink = Callable[[WaitReason, float | None], Awaitable[None]]


class Engine(Protocol):
    """A model provider. ``complete`` streams text pieces to *on_delta* and
    returns the whole reply; failures raise ``EngineError``."""

    kind: str

    async def complete(
        self, request: EngineRequest, on_delta: DeltaSink, on_wait: WaitSink | None = None
    ) -> EngineReply:
        """The reply to *request*; *on_wait* hears of each wait before a retry."""
        ...

    async def aclose(self) -> None: ...
