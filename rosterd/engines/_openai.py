"""The OpenAI-compatible Chat Completions engine (OpenAI, vLLM, llama.cpp, Ollama).

The request is the frozen system text as the system message followed by the
append-only transcript, so every turn's prompt extends the previous one and
the provider's automatic prefix cache can reuse it. ``prompt_cache_key`` is
the route key: requests that share a cached prefix are routed together.

What the provider keeps is the session's choice (``EngineRequest.cache_ttl``):
``24h`` asks an implicit cache to retain the prefix up to a day
(``prompt_cache_retention``); ``30m`` is the explicit contract of gpt-5.6 and
later, ``prompt_cache_options`` in explicit mode with ``prompt_cache_breakpoint``
marks on content parts where the Anthropic engine puts ``cache_control``: at
the compiler's system boundaries and at the end of the conversation so far,
four at most; ``uncached`` is explicit mode with no mark, which caches
nothing (and so bills no write).
Tool definitions, frozen with the system part, go in ``tools``; a streamed
call arrives as ``tool_calls`` deltas whose arguments may be split anywhere.
"""

from __future__ import annotations

from functools import cached_property
from typing import Literal
from urllib.parse import urlsplit

import msgspec
from httpx_sse import ServerSentEvent

from ..compiler import ToolCall, ToolSpec
from ..protocol import ChatMessage, Usage
from ._base import (
    MAX_BREAKPOINTS,
    DeltaSink,
    EngineReply,
    EngineRequest,
    sent_arguments,
    system_segments,
)
from ._http import Count, HttpEngine, ProviderHttp

DEFAULT_OPENAI_URL = "https://api.openai.com/v1"


class _CallFunction(msgspec.Struct, frozen=True):
    """A call's tool, and its arguments as JSON text (``sent_arguments``)."""

    name: str
    arguments: str


class _OutCall(msgspec.Struct, frozen=True):
    """A call an earlier reply made, sent back in its assistant message's
    ``tool_calls`` so that the tool messages after it answer it."""

    id: str
    function: _CallFunction
    type: Literal["function"] = "function"


class _Breakpoint(msgspec.Struct, frozen=True):
    mode: Literal["explicit"]


_BREAKPOINT = _Breakpoint(mode="explicit")


class _TextPart(msgspec.Struct, frozen=True, omit_defaults=True):
    type: Literal["text"]
    text: str
    prompt_cache_breakpoint: _Breakpoint | None = None


class _Message(msgspec.Struct, frozen=True, omit_defaults=True):
    role: Literal["system", "user", "assistant", "tool"]
    # None only for an assistant message that made calls and said nothing;
    # parts where a cache breakpoint is marked.
    content: str | list[_TextPart] | None
    tool_calls: list[_OutCall] | None = None
    tool_call_id: str | None = None


class _Function(msgspec.Struct, frozen=True):
    name: str
    description: str
    parameters: msgspec.Raw


class _Tool(msgspec.Struct, frozen=True):
    function: _Function
    type: Literal["function"] = "function"


class _StreamOptions(msgspec.Struct, frozen=True):
    include_usage: bool = True


class _CacheOptions(msgspec.Struct, frozen=True, omit_defaults=True):
    mode: Literal["explicit"]
    ttl: Literal["30m"] | None = None


class _ChatRequest(msgspec.Struct, frozen=True, omit_defaults=True):
    model: str
    messages: list[_Message]
    stream: bool
    stream_options: _StreamOptions
    prompt_cache_key: str
    prompt_cache_options: _CacheOptions | None = None
    prompt_cache_retention: Literal["24h"] | None = None
    tools: list[_Tool] | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None


class _FunctionDelta(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class _CallDelta(msgspec.Struct):
    index: int = 0
    id: str | None = None
    function: _FunctionDelta | None = None


class _Delta(msgspec.Struct):
    content: str | None = None
    tool_calls: list[_CallDelta] | None = None


class _Choice(msgspec.Struct):
    delta: _Delta = msgspec.field(default_factory=_Delta)
    finish_reason: str | None = None


class _PromptDetails(msgspec.Struct):
    cached_tokens: Count | None = None
    # Explicit prompt caching (gpt-5.6 and later): tokens written to the cache.
    cache_write_tokens: Count | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: Count = 0
    completion_tokens: Count = 0
    prompt_tokens_details: _PromptDetails | None = None


class _ChunkError(msgspec.Struct):
    message: str = ""
    type: str | None = None


class _Chunk(msgspec.Struct):
    choices: list[_Choice] = []
    usage: _Usage | None = None
    # A string where text-generation-inference sends its error (beside an
    # "error_type"), as its HTTP error bodies also have it.
    error: _ChunkError | str | None = None


_encode = msgspec.json.Encoder().encode
_decode_chunk = msgspec.json.Decoder(_Chunk).decode


class OpenAIEngine(HttpEngine):
    """Streams Chat Completions from ``{base_url}/chat/completions``."""

    kind = "openai"
    path = "/chat/completions"
    default_url = DEFAULT_OPENAI_URL

    def request_headers(self, api_key: str | None) -> dict[str, str]:
        headers = {"accept": "text/event-stream", "content-type": "application/json"}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        return headers

    @cached_property
    def _completion_field(self) -> bool:
        # OpenAI's own API rejects max_tokens for its reasoning models; the
        # compatible servers (vLLM, llama.cpp, Ollama) all understand max_tokens.
        return urlsplit(self.base_url).hostname == "api.openai.com"

    def body(self, request: EngineRequest) -> bytes:
        limit = self._config.max_tokens
        messages = [*map(_message, request.messages)]
        system = _Message(role="system", content=request.system.text)
        options = None
        if request.cache_ttl == "30m":
            options = _CacheOptions(mode="explicit", ttl="30m")
            system, messages = _marked(request, messages)
        elif request.cache_ttl == "uncached":
            options = _CacheOptions(mode="explicit")
        chat = _ChatRequest(
            model=self._config.model,
            messages=[system, *messages],
            stream=True,
            stream_options=_StreamOptions(),
            prompt_cache_key=request.system.route_key,
            prompt_cache_options=options,
            prompt_cache_retention="24h" if request.cache_ttl == "24h" else None,
            tools=_tools(request.system.tools),
            max_tokens=None if self._completion_field else limit,
            max_completion_tokens=limit if self._completion_field else None,
        )
        return _encode(chat)

    def parser(self, on_delta: DeltaSink) -> _Stream:
        return _Stream(self._http, on_delta)


def _marked(request: EngineRequest, messages: list[_Message]) -> tuple[_Message, list[_Message]]:
    """The system message cut at its boundaries and the last message as one
    part, with explicit breakpoints where the prefix a later request reuses
    ends: one at the end of the conversation, the rest in the system part."""
    budget = MAX_BREAKPOINTS
    last = messages[-1] if messages else None
    if last is not None and isinstance(last.content, str):
        part = _TextPart(type="text", text=last.content, prompt_cache_breakpoint=_BREAKPOINT)
        messages = [*messages[:-1], msgspec.structs.replace(last, content=[part])]
        budget -= 1
    parts = [
        _TextPart(type="text", text=text, prompt_cache_breakpoint=_BREAKPOINT if marked else None)
        for text, marked in system_segments(request.system, budget)
    ]
    return _Message(role="system", content=parts), messages


def _message(message: ChatMessage) -> _Message:
    if message.role == "tool":
        return _Message(role="tool", content=message.content, tool_call_id=message.call)
    if not message.calls:
        return _Message(role=message.role, content=message.content)
    return _Message(
        role=message.role,
        content=message.content or None,
        tool_calls=[
            _OutCall(
                id=c.id, function=_CallFunction(name=c.name, arguments=sent_arguments(c.arguments))
            )
            for c in message.calls
        ],
    )


def _tools(tools: tuple[ToolSpec, ...]) -> list[_Tool] | None:
    if not tools:
        return None
    return [
        _Tool(function=_Function(t.name, t.description, msgspec.Raw(t.schema.encode())))
        for t in tools
    ]


class _StreamedCall:
    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.arguments: list[str] = []


class _Stream:
    """The state of one streamed completion, fed one event at a time."""

    def __init__(self, http: ProviderHttp, on_delta: DeltaSink) -> None:
        self._http = http
        self._on_delta = on_delta
        self._calls: dict[int, _StreamedCall] = {}
        self._parts: list[str] = []
        self._usage: Usage | None = None
        self._done = False

    async def feed(self, event: ServerSentEvent) -> None:
        if self._done:
            return
        if event.data.strip() == "[DONE]":
            self._done = True
            return
        try:
            chunk = _decode_chunk(event.data)
        except msgspec.DecodeError as exc:
            raise self._http.error(f"malformed stream chunk: {exc}") from None
        if chunk.error is not None:
            error = chunk.error
            if isinstance(error, str):
                error = _ChunkError(error)
            kind = f" ({error.type})" if error.type else ""
            raise self._http.error(
                f"error mid-stream: {error.message or 'no message'}{kind}", retryable=True
            )
        # Usage comes in the last chunk before [DONE] (OpenAI, llama.cpp), in
        # every chunk (vLLM's continuous stats, the latest wins) or not at
        # all (Ollama): then it stays unknown rather than zero.
        if chunk.usage is not None:
            self._usage = self._counted(chunk.usage)
        for choice in chunk.choices[:1]:
            # Only the first delta of a call names its id and function; later
            # ones carry pieces of the arguments under the same index.
            for delta in choice.delta.tool_calls or ():
                call = self._calls.setdefault(delta.index, _StreamedCall())
                call.id = delta.id or call.id
                if delta.function is not None:
                    call.name = delta.function.name or call.name
                    if delta.function.arguments:
                        call.arguments.append(delta.function.arguments)
            if choice.delta.content:
                self._parts.append(choice.delta.content)
                await self._on_delta(choice.delta.content)

    def _counted(self, usage: _Usage) -> Usage | None:
        details = usage.prompt_tokens_details or _PromptDetails()
        counts = self._http.token_counts(
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            cached_tokens=details.cached_tokens,
            cache_write_tokens=details.cache_write_tokens,
        )
        if counts is None:
            return None
        return Usage(
            input_tokens=counts["prompt_tokens"],
            cached_input_tokens=counts["cached_tokens"],
            cache_write_tokens=counts["cache_write_tokens"],
            output_tokens=counts["completion_tokens"],
        )

    def reply(self) -> EngineReply:
        if not self._done:
            raise self._http.error("the stream ended before [DONE]", retryable=True)
        if self._usage is None:
            self._http.deviation("streams report no usage; cache use is unmeasured")
        calls = tuple(
            ToolCall(id=c.id, name=c.name, arguments="".join(c.arguments))
            for _, c in sorted(self._calls.items())
        )
        if any(not c.id or not c.name for c in calls):
            raise self._http.error("a streamed tool call has no id or no name")
        return EngineReply(text="".join(self._parts), usage=self._usage, calls=calls)
