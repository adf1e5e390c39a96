"""The Anthropic Messages API engine, with explicit cache breakpoints.

The system text is sent as text blocks cut at the compiler's cache
boundaries (after connections, after purpose, end of system), each ending
block marked ``cache_control``, and the newest user turn is marked too, so
the whole conversation so far is cached for the next turn. The API allows at
most four breakpoints: one is kept for the newest turn and, should there be
more system boundaries than the rest, the earliest go first. A later
breakpoint covers everything an earlier one does for this session; the
earlier ones only let *other* sessions (other channels of the worker) share
a shorter prefix, so they are the cheapest to lose.

Tool definitions, frozen with the system part, go in ``tools``, which the
API caches before the system text: every system breakpoint covers them. A
call is a ``tool_use`` block whose input streams as ``input_json_delta``
pieces; results go back as ``tool_result`` blocks of a user message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, cast, get_args

import msgspec
from httpx_sse import ServerSentEvent

from .._errors import EngineError
from ..compiler import SystemPrompt, ToolCall, ToolSpec
from ..protocol import CacheDiagnosis, CacheMissReason, ChatMessage, Usage
from ._base import (
    MAX_BREAKPOINTS,
    DeltaSink,
    EngineReply,
    EngineRequest,
    WaitSink,
    sent_arguments,
    system_segments,
)
from ._http import Count, HttpEngine, ProviderHttp

DEFAULT_ANTHROPIC_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
# The beta under which a response explains a cache miss (diagnose_cache).
CACHE_DIAGNOSIS_BETA = "cache-diagnosis-2026-04-07"
_MISS_REASONS: frozenset[str] = frozenset(get_args(CacheMissReason))
# The error types whose statuses are retried (529, 500, 429, 504): as an
# event mid-stream, the same failure, and the turn may be retried.
_RETRYABLE_ERRORS = frozenset(
    {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}
)


class _CacheControl(msgspec.Struct, frozen=True, omit_defaults=True):
    type: Literal["ephemeral"]
    # None: the provider's default lifetime, five minutes.
    ttl: Literal["1h"] | None = None


_EPHEMERAL = _CacheControl(type="ephemeral")
_EPHEMERAL_1H = _CacheControl(type="ephemeral", ttl="1h")


class _TextBlock(msgspec.Struct, frozen=True, omit_defaults=True):
    type: Literal["text"]
    text: str
    cache_control: _CacheControl | None = None


class _ToolUseBlock(msgspec.Struct, frozen=True, omit_defaults=True):
    type: Literal["tool_use"]
    id: str
    name: str
    input: msgspec.Raw
    cache_control: _CacheControl | None = None


class _ToolResultBlock(msgspec.Struct, frozen=True, omit_defaults=True):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str
    cache_control: _CacheControl | None = None


_Block = _TextBlock | _ToolUseBlock | _ToolResultBlock


class _Message(msgspec.Struct, frozen=True):
    role: Literal["user", "assistant"]
    content: list[_Block]


class _Tool(msgspec.Struct, frozen=True):
    name: str
    description: str
    input_schema: msgspec.Raw


class _Diagnostics(msgspec.Struct, frozen=True):
    # Sent as null on a session's first call: that opts in with nothing to compare.
    previous_message_id: str | None


class _MessagesRequest(msgspec.Struct, frozen=True, omit_defaults=True):
    model: str
    max_tokens: int
    system: list[_TextBlock]
    messages: list[_Message]
    stream: bool
    tools: list[_Tool] | None = None
    diagnostics: _Diagnostics | None = None


class _CacheCreation(msgspec.Struct):
    ephemeral_5m_input_tokens: Count = 0
    ephemeral_1h_input_tokens: Count = 0


class _Usage(msgspec.Struct):
    input_tokens: Count | None = None
    cache_read_input_tokens: Count | None = None
    cache_creation_input_tokens: Count | None = None
    output_tokens: Count | None = None
    # The writes split by lifetime, where the API reports it.
    cache_creation: _CacheCreation | None = None


class _MissReason(msgspec.Struct):
    type: str = ""
    cache_missed_input_tokens: int | None = None


class _DiagnosticsReply(msgspec.Struct):
    cache_miss_reason: _MissReason | None = None


class _StartedMessage(msgspec.Struct):
    id: str | None = None
    usage: _Usage = msgspec.field(default_factory=_Usage)
    diagnostics: _DiagnosticsReply | None = None


class _Delta(msgspec.Struct):
    type: str = ""
    text: str = ""
    partial_json: str = ""


class _ContentBlock(msgspec.Struct):
    type: str = ""
    id: str = ""
    name: str = ""


class _ErrorDetail(msgspec.Struct):
    type: str = ""
    message: str = ""


class _Event(msgspec.Struct):
    # One shape for every event type: fields absent from a type stay None,
    # and event types added to the API later are ignored, as it asks.
    type: str
    message: _StartedMessage | None = None
    index: int = 0
    content_block: _ContentBlock | None = None
    delta: _Delta | None = None
    usage: _Usage | None = None
    error: _ErrorDetail | None = None


_encode = msgspec.json.Encoder().encode
_decode_event = msgspec.json.Decoder(_Event).decode


def system_blocks(
    system: SystemPrompt, breakpoints: int, control: _CacheControl = _EPHEMERAL
) -> list[_TextBlock]:
    """The system text as text blocks, the last *breakpoints* cuts marked."""
    return [
        _TextBlock(type="text", text=text, cache_control=control if marked else None)
        for text, marked in system_segments(system, breakpoints)
    ]


class AnthropicEngine(HttpEngine):
    """Streams from ``{base_url}/v1/messages``."""

    kind = "anthropic"
    path = "/v1/messages"
    default_url = DEFAULT_ANTHROPIC_URL
    # Set once a server refused a cache lifetime (an older API, a proxy):
    # its requests ask for none from then on.
    _lifetime_refused = False

    def request_headers(self, api_key: str | None) -> dict[str, str]:
        headers = {
            "accept": "text/event-stream",
            "content-type": "application/json",
            "anthropic-version": ANTHROPIC_VERSION,
        }
        if api_key:
            headers["x-api-key"] = api_key
        if self._config.diagnose_cache:
            headers["anthropic-beta"] = CACHE_DIAGNOSIS_BETA
        return headers

    async def complete(
        self, request: EngineRequest, on_delta: DeltaSink, on_wait: WaitSink | None = None
    ) -> EngineReply:
        """The reply; a request whose cache lifetime the server refuses is
        sent once more without it (and so are the engine's later ones)."""
        if request.cache_ttl == "1h" and self._lifetime_refused:
            request = msgspec.structs.replace(request, cache_ttl="5m")
        try:
            return await super().complete(request, on_delta, on_wait)
        except EngineError as exc:
            if request.cache_ttl != "1h" or exc.status != 400 or "ttl" not in str(exc):
                raise
            self._lifetime_refused = True
            self._http.deviation(f"the server refused a 1-hour cache lifetime ({exc})")
            return await super().complete(
                msgspec.structs.replace(request, cache_ttl="5m"), on_delta, on_wait
            )

    def body(self, request: EngineRequest) -> bytes:
        # Every message is a block list, marked or not, so a turn's bytes differ
        # from the previous request's only by where the last marker sits.
        messages = _messages(request.messages)
        system_budget = MAX_BREAKPOINTS
        # One lifetime for every breakpoint of a request, so the 1-hour ones
        # never come after 5-minute ones (the API's rule).
        control = _EPHEMERAL_1H if request.cache_ttl == "1h" else _EPHEMERAL
        if messages:
            last = messages[-1]
            block = msgspec.structs.replace(last.content[-1], cache_control=control)
            messages[-1] = _Message(role=last.role, content=[*last.content[:-1], block])
            system_budget -= 1
        chat = _MessagesRequest(
            model=self._config.model,
            max_tokens=self._config.max_tokens,
            system=system_blocks(request.system, system_budget, control),
            messages=messages,
            stream=True,
            tools=_tools(request.system.tools),
            diagnostics=(
                _Diagnostics(request.previous_message) if self._config.diagnose_cache else None
            ),
        )
        return _encode(chat)

    def parser(self, on_delta: DeltaSink) -> _Stream:
        return _Stream(self._http, on_delta, diagnosed=bool(self._config.diagnose_cache))


def _messages(transcript: Sequence[ChatMessage]) -> list[_Message]:
    """The transcript as API messages; consecutive tool results share one user message."""
    messages: list[_Message] = []
    for m in transcript:
        if m.role == "tool":
            result = _ToolResultBlock(
                type="tool_result", tool_use_id=m.call or "", content=m.content
            )
            if messages and messages[-1].role == "user" and _is_results(messages[-1]):
                messages[-1] = _Message(role="user", content=[*messages[-1].content, result])
            else:
                messages.append(_Message(role="user", content=[result]))
            continue
        blocks: list[_Block] = []
        if m.content or not m.calls:
            blocks.append(_TextBlock(type="text", text=m.content))
        blocks.extend(
            _ToolUseBlock(
                type="tool_use",
                id=c.id,
                name=c.name,
                input=msgspec.Raw(sent_arguments(c.arguments).encode()),
            )
            for c in m.calls
        )
        messages.append(_Message(role=m.role, content=blocks))
    return messages


def _is_results(message: _Message) -> bool:
    return all(isinstance(block, _ToolResultBlock) for block in message.content)


def _tools(tools: Sequence[ToolSpec]) -> list[_Tool] | None:
    if not tools:
        return None
    return [_Tool(t.name, t.description, msgspec.Raw(t.schema.encode())) for t in tools]


class _StreamedUse:
    def __init__(self, call_id: str, name: str) -> None:
        self.id = call_id
        self.name = name
        self.input: list[str] = []


class _Stream:
    """The state of one streamed message, fed one event at a time."""

    def __init__(self, http: ProviderHttp, on_delta: DeltaSink, *, diagnosed: bool) -> None:
        self._http = http
        self._on_delta = on_delta
        self._uses: dict[int, _StreamedUse] = {}
        self._parts: list[str] = []
        self._usage = _Usage()
        self._id: str | None = None
        # Asked for: no reason until the provider gives one (it may not).
        self._diagnosis = CacheDiagnosis() if diagnosed else None
        self._started = False
        self._stopped = False

    async def feed(self, event: ServerSentEvent) -> None:
        try:
            parsed = _decode_event(event.data)
        except msgspec.DecodeError as exc:
            raise self._http.error(f"malformed {event.event} event: {exc}") from None
        match parsed.type:
            case "error":
                detail = parsed.error or _ErrorDetail()
                kind = f" ({detail.type})" if detail.type else ""
                retryable = detail.type in _RETRYABLE_ERRORS
                raise self._http.error(
                    f"error mid-stream: {detail.message or 'no message'}{kind}",
                    retryable=retryable,
                )
            case "message_start":
                self._started = True
                if parsed.message is not None:
                    self._merge(parsed.message.usage)
                    self._id = parsed.message.id
                    self._diagnose(parsed.message.diagnostics)
            case "content_block_start":
                block = parsed.content_block
                if block is not None and block.type == "tool_use":
                    if not block.id or not block.name:
                        raise self._http.error("a tool_use block has no id or no name")
                    self._uses[parsed.index] = _StreamedUse(block.id, block.name)
            case "content_block_delta":
                delta = parsed.delta
                if delta is None:
                    return
                if delta.type == "text_delta" and delta.text:
                    self._parts.append(delta.text)
                    await self._on_delta(delta.text)
                elif delta.type == "input_json_delta" and parsed.index in self._uses:
                    self._uses[parsed.index].input.append(delta.partial_json)
            case "message_delta":
                if parsed.usage is not None:
                    self._merge(parsed.usage)
            case "message_stop":
                self._stopped = True

    def _diagnose(self, reply: _DiagnosticsReply | None) -> None:
        if self._diagnosis is None or reply is None or reply.cache_miss_reason is None:
            return
        given = reply.cache_miss_reason
        if given.type not in _MISS_REASONS:
            self._http.deviation(f"an unknown cache_miss_reason {given.type!r}")
            reason: CacheMissReason = "unavailable"
        else:
            reason = cast(CacheMissReason, given.type)
        self._diagnosis = CacheDiagnosis(reason, given.cache_missed_input_tokens)

    def _merge(self, usage: _Usage) -> None:
        # message_delta repeats the counts cumulatively; the latest ones win.
        fields = {f: v for f in usage.__struct_fields__ if (v := getattr(usage, f)) is not None}
        self._usage = msgspec.structs.replace(self._usage, **fields)

    def reply(self) -> EngineReply:
        if not self._stopped:
            raise self._http.error("the stream ended before message_stop", retryable=True)
        if not self._started:
            # llama-server sends message_start only with its first decoded
            # token, so none when that token is an incomplete UTF-8 sequence.
            self._http.deviation("a stream without message_start; its usage is unknown")
        calls = tuple(
            ToolCall(id=use.id, name=use.name, arguments="".join(use.input) or "{}")
            for _, use in sorted(self._uses.items())
        )
        text = "".join(self._parts)
        return EngineReply(text, self._counted(), calls, self._id, self._diagnosis)

    def _counted(self) -> Usage | None:
        u = self._usage
        if u.input_tokens is None:
            return None
        counts = self._http.token_counts(
            input_tokens=u.input_tokens,
            cache_read_input_tokens=u.cache_read_input_tokens,
            cache_creation_input_tokens=u.cache_creation_input_tokens,
            output_tokens=u.output_tokens,
            ephemeral_1h_input_tokens=(
                u.cache_creation or _CacheCreation()
            ).ephemeral_1h_input_tokens,
        )
        if counts is None:
            return None
        read, written = counts["cache_read_input_tokens"], counts["cache_creation_input_tokens"]
        return Usage(
            # Anthropic's input_tokens counts only what came after the last
            # cache hit or write; ours includes the cached part.
            input_tokens=counts["input_tokens"] + read + written,
            cached_input_tokens=read,
            cache_write_tokens=written,
            output_tokens=counts["output_tokens"],
            cache_write_1h_tokens=counts["ephemeral_1h_input_tokens"],
        )
