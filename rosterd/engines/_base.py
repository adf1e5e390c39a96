"""What every engine takes and gives: a request built from compiled parts.

The request is the frozen system part plus the append-only transcript, whose
last message is the new user turn; an engine never rebuilds or reorders it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Literal, Protocol

import msgspec

from ..compiler import SystemPrompt, ToolCall

__all__ = ("ChatMessage", "DeltaSink", "Engine", "EngineReply", "EngineRequest", "Usage")


class ChatMessage(msgspec.Struct, frozen=True, omit_defaults=True):
    """A message of the transcript. An assistant message may carry the tool
    calls it made; a ``tool`` message is the result of the call ``call``."""

    role: Literal["user", "assistant", "tool"]
    content: str
    calls: tuple[ToolCall, ...] = ()
    call: str | None = None


class EngineRequest(msgspec.Struct, frozen=True):
    """``messages`` is the run's live transcript list, passed without a copy
    so a turn costs the same at any transcript length; engines only read it."""

    system: SystemPrompt
    messages: Sequence[ChatMessage]


class Usage(msgspec.Struct, frozen=True):
    """Token counts as the provider reports them; ``input_tokens`` includes
    the cached ones, so ``input_tokens - cached_input_tokens`` were fresh."""

    input_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0


class EngineReply(msgspec.Struct, frozen=True):
    """``usage`` is ``None`` when the provider did not report it: unknown, not zero.
    ``calls`` are the tool calls the model made, unvalidated."""

    text: str
    usage: Usage | None
    calls: tuple[ToolCall, ...] = ()


DeltaSink = Callable[[str], Awaitable[None]]


class Engine(Protocol):
    """A model provider. ``complete`` streams text pieces to *on_delta* and
    returns the whole reply; failures raise ``EngineError``."""

    kind: str

    async def complete(self, request: EngineRequest, on_delta: DeltaSink) -> EngineReply: ...

    async def aclose(self) -> None: ...
