"""The records the daemon keeps and serves as they are: runs, transcripts,
tasks, gates, usage and the exact requests an engine received.

The daemon writes them to the state directory and sends them in replies,
so the files and the wire share one shape.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from ..compiler import Continuation, Gate, ToolCall


class ChatMessage(msgspec.Struct, frozen=True, omit_defaults=True):
    """A message of the transcript. An assistant message may carry the tool
    calls it made; a ``tool`` message is the result of the call ``call``."""

    role: Literal["user", "assistant", "tool"]
    content: str
    calls: tuple[ToolCall, ...] = ()
    call: str | None = None


class Usage(msgspec.Struct, frozen=True):
    """Token counts as the provider reports them; ``input_tokens`` includes
    the cached ones, so ``input_tokens - cached_input_tokens`` were fresh.
    ``cache_write_1h_tokens`` are the part of ``cache_write_tokens`` written
    for an hour (Anthropic); the rest were written for five minutes."""

    input_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    cache_write_1h_tokens: int = 0


# What a request asks the provider to keep of its prefix: Anthropic's two
# lifetimes; OpenAI's implicit cache (at the default retention) or kept up to 24 hours,
# its explicit 30-minute breakpoints, or (explicit, with none) no cache.
CacheLifetime = Literal["5m", "1h", "implicit", "24h", "30m", "uncached"]
# Anthropic's own account of a miss (the cache-diagnosis beta).
CacheMissReason = Literal[
    "model_changed",
    "system_changed",
    "tools_changed",
    "messages_changed",
    "previous_message_not_found",
    "unavailable",
]


class CacheDiagnosis(msgspec.Struct, frozen=True):
    """What the provider said about a call's cache: ``reason`` is ``None``
    when it gave none (the diagnosis was pending, or nothing was missed);
    ``missed_tokens`` is its estimate of what a match would have read."""

    reason: CacheMissReason | None = None
    missed_tokens: int | None = None


Verdict = Literal[
    "hit", "cold", "prefix-changed", "provider-miss", "below-minimum", "unmeasured", "fallback"
]


class CacheCheck(msgspec.Struct, frozen=True):
    """Per turn: expected and reported reuse, and why they differ; and the
    cache lifetime the request asked for, and why (Anthropic)."""

    expected_tokens: int
    reported_tokens: int
    verdict: Verdict
    cause: str | None = None
    ttl: CacheLifetime | None = None
    ttl_reason: str | None = None
    # Asked for (diagnose_cache): the provider's reason, and whether it
    # contradicts the verdict above.
    diagnosis: CacheDiagnosis | None = None
    disagrees: bool = False


class Price(msgspec.Struct, frozen=True):
    """The price row a call was billed at: USD per million tokens.

    ``source`` is ``config`` (``[prices]``), ``genai-prices`` (the price
    library's data, with ``[prices]`` over it) or ``echo`` (free);
    ``rules`` names each rate that came from a provider's published rule
    because the row had none. ``tier_above`` is set where the library's
    rates are tiered and the call passed a tier: its rates are that tier's,
    for calls of more input tokens (cached and written included) than this.
    """

    model: str
    source: str
    input: float
    cached_input: float
    cache_write_5m: float
    cache_write_1h: float
    cache_write: float
    output: float
    rules: tuple[str, ...] = ()
    tier_above: int | None = None


class CallCost(msgspec.Struct, frozen=True):
    """What one engine call cost, and the price row it was billed at."""

    usd: float
    price: Price


RunStatus = Literal["open", "closed", "expired", "rolled-over", "done", "failed", "interrupted"]


class RunInfo(msgspec.Struct, frozen=True):
    id: str
    surface: str
    worker: str
    channel: str | None
    created_at: float
    status: RunStatus = "open"
    task: str | None = None
    ended_at: float | None = None
    error: str | None = None
    # A session that reached its bound continues in a new one: both name the other.
    rolled_from: str | None = None
    rolled_to: str | None = None
    rollover: str | None = None
    # The daemon that started the run (``<hostname>:<pid>:<nonce>``): with
    # several hosts on one database, which one ran a task.
    host: str | None = None


class TranscriptEntry(msgspec.Struct, frozen=True):
    """``user`` entries hold the compiled input text exactly as sent.

    A turn's engine calls are its steps: the user entry is sent at step 1;
    an assistant entry of step *s* may hold tool ``calls``, whose ``tool``
    entries (``call`` names the one each answers) are sent at step *s* + 1.
    A call whose stream broke keeps what it showed as an ``incomplete``
    assistant entry, before its ``error`` entry. The first turn of a session
    that took over a turn at a later step starts with that turn's tool steps
    ``carried`` over: their engine calls were the session's it continues.
    """

    turn: int
    role: Literal["user", "assistant", "error", "tool"]
    content: str
    at: float
    usage: Usage | None = None
    cache: CacheCheck | None = None
    # A session's user turns: the channel seq its input has seen up to.
    seen: int | None = None
    step: int = 1
    calls: tuple[ToolCall, ...] = ()
    call: str | None = None
    # An assistant entry whose stream broke: the reply as far as the client
    # was shown it, sent as it is with the next request.
    incomplete: bool = False
    # An assistant entry's billed cost; None where the model has no price.
    cost: CallCost | None = None
    # An assistant entry: the provider's id of the reply, where it gives one.
    provider_id: str | None = None
    # An assistant or tool entry of a tool step the session it continues
    # made before it rolled over: sent again with the rest, never called again.
    # Left out of an entry that is not (unset), as nearly every entry is.
    carried: bool | msgspec.UnsetType = msgspec.UNSET


class TurnRequest(msgspec.Struct, frozen=True):
    """The exact request of one turn's step: tool definitions (one canonical
    JSON line each), system text and messages, as sent."""

    turn: int
    system: str
    messages: list[ChatMessage]
    step: int = 1
    tools: str = ""


class ContextPage(msgspec.Struct, frozen=True):
    """Requests of consecutive turns, each step of a turn its own request;
    ``next`` is the ``after`` of the next page."""

    turns: list[TurnRequest]
    next: int | None = None


TaskStatus = Literal["queued", "running", "paused", "done", "failed"]


class TaskState(msgspec.Struct, frozen=True):
    """A task; ``runs`` lists its run ids, a continuation run after each gate."""

    id: str
    worker: str
    channel: str
    text: str
    submitted_at: float
    status: TaskStatus = "queued"
    runs: tuple[str, ...] = ()
    reply: str | None = None
    error: str | None = None
    continuation: Continuation | None = None
    updated_at: float = 0.0


class GateState(Gate, frozen=True):
    """A gate as ``gate.*`` send it and the stores keep it: the compiler's
    ``Gate``, whose field order is the gates file's."""
