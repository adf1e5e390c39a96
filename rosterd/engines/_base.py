"""What every engine takes and gives: a request built from compiled parts.

The request is the frozen system part plus the append-only transcript, whose
last message is the new user turn; an engine never rebuilds or reorders it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import msgspec

from ..compiler import SystemPrompt, ToolCall
from ..protocol import CacheDiagnosis, CacheLifetime, ChatMessage, Usage, WaitReason

# Cache breakpoints a request may carry: Anthropic's cache_control marks and
# OpenAI's explicit prompt_cache_breakpoint marks alike.
MAX_BREAKPOINTS = 4


class EngineRequest(msgspec.Struct, frozen=True):
    """``messages`` is the run's live transcript list, passed without a copy
    so a turn costs the same at any transcript length; engines only read it."""

    system: SystemPrompt
    messages: Sequence[ChatMessage]
    # What the provider should keep of this request's prefix (see
    # ``plan_cache``); an engine ignores a choice that is not its provider's,
    # and None leaves the provider's default.
    cache_ttl: CacheLifetime | None = None
    # The id of the run's previous reply, for a provider that explains a
    # miss against it (Anthropic's diagnostics, where diagnose_cache is on).
    previous_message: str | None = None
    # Whether a provider that asks for time (a retry-after) is waited out:
    # not when another engine comes after this one, since it answers sooner.
    patient: bool = True


class EngineReply(msgspec.Struct, frozen=True):
    """``usage`` is ``None`` when the provider did not report it: unknown, not zero.
    ``calls`` are the tool calls the model made, unvalidated. ``message_id``
    is the provider's id of the reply, where it gives one; ``diagnosis`` its
    account of the cache, where one was asked for."""

    text: str
    usage: Usage | None
    calls: tuple[ToolCall, ...] = ()
    message_id: str | None = None
    diagnosis: CacheDiagnosis | None = None


def system_segments(system: SystemPrompt, breakpoints: int) -> list[tuple[str, bool]]:
    """The system text cut at its cache boundaries, each piece with whether
    a breakpoint ends it: the last *breakpoints* cuts are marked.

    Empty pieces are skipped and coinciding boundaries merge, so a worker
    without connections or a channel without purpose costs no breakpoint.
    When there are more boundaries than breakpoints the earliest go
    unmarked: a later breakpoint covers everything an earlier one does for
    this session, the earlier ones only let other sessions share a shorter
    prefix.
    """
    text = system.text
    cuts = sorted({b.offset for b in system.boundaries if 0 < b.offset <= len(text)})
    if not cuts or cuts[-1] != len(text):
        cuts.append(len(text))
    marked = set(cuts[-breakpoints:]) if breakpoints > 0 else set()
    segments: list[tuple[str, bool]] = []
    start = 0
    for cut in cuts:
        if cut > start:
            segments.append((text[start:cut], cut in marked))
            start = cut
    return segments


def sent_arguments(arguments: str) -> str:
    """A call's *arguments* as a request sends them back: as the model
    streamed them when they are a JSON object, else ``{}`` (the call got an
    error result). Anthropic takes only an object; llama.cpp and vLLM parse
    every call of the history to render the prompt and fail the whole
    request on one that is not JSON, so it would fail every later turn.
    Arguments nested deeper than the decoder goes are sent as ``{}`` too."""
    try:
        value = msgspec.json.decode(arguments)
    except (msgspec.DecodeError, RecursionError):
        return "{}"
    return arguments if isinstance(value, dict) else "{}"


DeltaSink = Callable[[str], Awaitable[None]]
# Hears why a call waits (a retry's backoff, a queue) and for how long, if known.
WaitSink = Callable[[WaitReason, float | None], Awaitable[None]]


class Engine(Protocol):
    """A model provider. ``complete`` streams text pieces to *on_delta* and
    returns the whole reply; failures raise ``EngineError``."""

    kind: str
    # Whether its usage reports cached input: a cache check can measure it.
    measures_cache: bool

    async def complete(
        self, request: EngineRequest, on_delta: DeltaSink, on_wait: WaitSink | None = None
    ) -> EngineReply:
        """The reply to *request*; *on_wait* hears of each wait before a retry."""
        ...

    async def aclose(self) -> None: ...
