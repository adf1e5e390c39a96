"""A provider simulator: a real HTTP/1.1 server on 127.0.0.1 speaking both APIs.

It serves OpenAI Chat Completions (``/v1/chat/completions``) and Anthropic
Messages (``/v1/messages``) as streamed server-sent events, and applies each
provider's documented prompt-caching rules to report usage honestly:

- Anthropic: a request reads the longest previously written prefix that ends
  at a block boundary within ``lookback_blocks`` before one of its
  ``cache_control`` breakpoints; it writes a cache entry at every breakpoint
  whose prefix has at least ``min_cacheable_tokens``. ``cache_read`` is the
  hit, ``cache_creation`` the newly written part, ``input_tokens`` the rest.
- OpenAI, models before gpt-5.6: per ``prompt_cache_key``, a prompt of at
  least 1024 tokens reuses the longest previously seen prefix, counted in
  steps of 128 tokens, free of charge; an entry lives ``ttl_s`` in memory,
  or a day with ``prompt_cache_retention = "24h"``.
- OpenAI, ``explicit_models`` (gpt-5.6 and later): entries are written at the
  request's ``prompt_cache_breakpoint`` marks (the latest four; three plus
  one implicit breakpoint at the end of the prompt unless
  ``prompt_cache_options.mode`` is ``explicit``), live 30 minutes after
  their last use, and are reported as ``cache_write_tokens``. Explicit mode
  without a mark caches nothing. A request reads the longest written prefix
  that ends where one of its content parts ends.
- Anthropic's cache diagnosis (``diagnostics.previous_message_id`` under the
  beta header): the reply's ``message_start`` says which part of the request
  differs from the named previous one (model, tools, system, messages), or
  ``null``; ``Diagnose`` scripts the reason instead.

Tokens are approximated as 4 characters of the serialised prompt. Requests
are validated strictly (unknown fields are refused, as both APIs do) and
every request is recorded with its exact body. Faults can be scripted: each
request consumes the next scripted action, if any.

``Framing`` chooses how replies go on the wire, as real servers differ: the
SSE line end (LF, CR or CRLF), non-ASCII characters raw inside the JSON (as
llama.cpp sends U+2028 or U+0085) and HTTP chunks as small as one byte, so a
CRLF pair or a UTF-8 sequence is split between chunks. ``context_tokens``
makes longer prompts fail with the provider's real "too long" error.

``Calls`` makes a reply call tools, in either API's streamed shape, with the
arguments split across deltas. Tool definitions count as the first part of
the prompt (both APIs cache them before the system text), and the request's
tool traffic is checked as the APIs check it: every call is answered by a
result right after it, and only defined tools are called.
"""

from __future__ import annotations

import fnmatch
import hashlib
import itertools
import json
import time
from collections import deque
from collections.abc import Callable
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Any, Literal, NamedTuple, TypeVar

import anyio
import anyio.abc
import msgspec
from anyio.streams.buffered import BufferedByteReceiveStream

# The benchmarks import the org builder from here, beside the simulator.
from orgs import filler, write_org

from rosterd.compiler import (
    ChannelMessage,
    Gate,
    MemoryItem,
    RunMeta,
    TurnInput,
    compile_system,
    compile_turn,
)
from rosterd.engines import CACHE_DIAGNOSIS_BETA, Engine, EngineReply, EngineRequest
from rosterd.org import Org, Surface
from rosterd.protocol import ChatMessage, Usage

__all__ = (
    "Conversation",
    "Cut",
    "Delay",
    "Diagnose",
    "Drop",
    "ErrorEvent",
    "Framing",
    "Hangup",
    "Held",
    "Malformed",
    "Omit",
    "Page",
    "Recorded",
    "Reply",
    "Server",
    "Simulator",
    "Stall",
    "Status",
    "filler",
    "prompt_bytes",
    "reported",
    "tool_messages",
    "write_org",
)

_T = TypeVar("_T")
_K = TypeVar("_K")

CHARS_PER_TOKEN = 4
_HEAD_LIMIT = 64 * 1024
_STATUS_TEXT = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
    529: "Overloaded",
}


# Scripted actions -----------------------------------------------------------


class Status(msgspec.Struct, frozen=True):
    """Answer with an error status and the provider's error body."""

    status: int
    message: str = "simulated failure"
    retry_after: float | None = None
    # An OpenAI error code, e.g. "context_length_exceeded" (with status 400).
    code: str | None = None


class Stall(msgspec.Struct, frozen=True):
    """Send nothing for *seconds*, or until the client hangs up or the
    simulator exits, whichever is first."""

    seconds: float = 3600.0


class Held(msgspec.Struct, frozen=True):
    """Send nothing until the test calls ``Simulator.release`` (of *gate*),
    then answer normally: a reply the test lets through once it has done
    what it must meanwhile."""

    gate: str = ""


class Hangup(msgspec.Struct, frozen=True):
    """Close the connection without answering, as a server dropping idle ones does."""


class Delay(msgspec.Struct, frozen=True):
    """Wait *seconds*, then answer normally: a slow but healthy provider."""

    seconds: float


class Page(msgspec.Struct, frozen=True):
    """A 200 whose body is not an event stream: a proxy's sign-in page, or
    a server that ignored ``stream``."""

    body: str = "<html><body>Sign in to continue</body></html>"
    content_type: str = "text/html"


class Malformed(msgspec.Struct, frozen=True):
    """A 200 event stream whose first event's data is not JSON."""


class Drop(msgspec.Struct, frozen=True):
    """Stream *after_deltas* text deltas, then close the connection mid-body."""

    after_deltas: int = 1


class Cut(msgspec.Struct, frozen=True):
    """Stream *after_deltas* text deltas, then end the body cleanly but early."""

    after_deltas: int = 1


class ErrorEvent(msgspec.Struct, frozen=True):
    """Stream *after_deltas* text deltas, then the provider's error event,
    of type *kind* (one of Anthropic's error types; OpenAI's is a server error)."""

    after_deltas: int = 1
    message: str = "Overloaded"
    kind: str = "overloaded_error"


class Reply(msgspec.Struct, frozen=True):
    """Answer normally with this text instead of the generated one."""

    text: str


class Calls(msgspec.Struct, frozen=True):
    """Answer with these tool calls, each ``(name, arguments JSON text)``, after *text*."""

    calls: tuple[tuple[str, str], ...]
    text: str = ""


class CallsOnce(msgspec.Struct, frozen=True):
    """Answer as ``Calls`` does, unless the request shows each of these calls
    made already (the same tool, the same arguments, answered): then reply
    *text*. A model makes again a call it cannot see it made."""

    calls: tuple[tuple[str, str], ...]
    text: str


class Omit(msgspec.Struct, frozen=True):
    """Answer normally but leave out *part* of the stream, as some servers do.

    ``message_start`` and ``message_stop`` are Anthropic events; ``usage`` is
    OpenAI's usage chunk (Ollama sends none).
    """

    part: Literal["message_start", "message_stop", "usage"]
    text: str | None = None


class Bent(msgspec.Struct, frozen=True):
    """Answer normally, with these fields in the reply's usage object over
    the simulator's own (OpenAI's usage chunk, Anthropic's ``message_start``):
    a provider or proxy that reports negative, fractional or absurd counts."""

    usage: dict[str, object]


class Diagnose(msgspec.Struct, frozen=True):
    """Answer normally, with this cache miss reason (``None``: pending) in
    place of the one the simulator would find."""

    reason: str | None
    missed_tokens: int = 0


Action = (
    Status
    | Stall
    | Delay
    | Held
    | Hangup
    | Malformed
    | Page
    | Drop
    | Cut
    | ErrorEvent
    | Reply
    | Omit
    | Calls
    | CallsOnce
    | Diagnose
    | Bent
)

Server = Literal["provider", "llama.cpp"]


class Framing(msgspec.Struct, frozen=True):
    """How a reply is put on the wire; the defaults are the providers' own."""

    newline: Literal["\n", "\r", "\r\n"] = "\n"
    # Non-ASCII characters unescaped in the JSON. C0 controls stay escaped:
    # JSON forbids them raw.
    raw: bool = False
    # Every HTTP chunk at most this many bytes; None: one chunk per event.
    chunk_bytes: int | None = None


class Recorded(msgspec.Struct, frozen=True):
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


# Wire shapes, strict like the real APIs ---------------------------------------


class _OpenAIFunctionCall(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    arguments: str


class _OpenAICall(msgspec.Struct, forbid_unknown_fields=True):
    id: str
    type: Literal["function"]
    function: _OpenAIFunctionCall


class _Breakpoint(msgspec.Struct, forbid_unknown_fields=True):
    mode: Literal["explicit"]


class _OpenAIPart(msgspec.Struct, forbid_unknown_fields=True):
    type: Literal["text"]
    text: str
    prompt_cache_breakpoint: _Breakpoint | None = None


class _OpenAIMessage(msgspec.Struct, forbid_unknown_fields=True):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[_OpenAIPart] | None
    tool_calls: list[_OpenAICall] | None = None
    tool_call_id: str | None = None


class _OpenAIFunction(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    description: str = ""
    parameters: dict[str, object] | None = None


class _OpenAITool(msgspec.Struct, forbid_unknown_fields=True):
    type: Literal["function"]
    function: _OpenAIFunction


class _StreamOptions(msgspec.Struct, forbid_unknown_fields=True):
    include_usage: bool = False


class _CacheOptions(msgspec.Struct, forbid_unknown_fields=True):
    ttl: Literal["30m"] = "30m"
    mode: Literal["implicit", "explicit"] = "implicit"


class _ChatRequest(msgspec.Struct, forbid_unknown_fields=True):
    model: str
    messages: list[_OpenAIMessage]
    stream: bool = False
    stream_options: _StreamOptions | None = None
    prompt_cache_key: str | None = None
    prompt_cache_options: _CacheOptions | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    tools: list[_OpenAITool] | None = None


class _CacheControl(msgspec.Struct, forbid_unknown_fields=True):
    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] | None = None


class _TextBlock(msgspec.Struct, forbid_unknown_fields=True, tag_field="type", tag="text"):
    text: str
    cache_control: _CacheControl | None = None


class _ToolUseBlock(msgspec.Struct, forbid_unknown_fields=True, tag_field="type", tag="tool_use"):
    id: str
    name: str
    input: dict[str, object]
    cache_control: _CacheControl | None = None


class _ToolResultBlock(
    msgspec.Struct, forbid_unknown_fields=True, tag_field="type", tag="tool_result"
):
    tool_use_id: str
    content: str
    cache_control: _CacheControl | None = None


_Block = _TextBlock | _ToolUseBlock | _ToolResultBlock


class _AnthropicMessage(msgspec.Struct, forbid_unknown_fields=True):
    role: Literal["user", "assistant"]
    content: str | list[_Block]


class _AnthropicTool(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    input_schema: dict[str, object]
    description: str = ""
    cache_control: _CacheControl | None = None


class _DiagnosticsParam(msgspec.Struct, forbid_unknown_fields=True):
    previous_message_id: str | None


class _MessagesRequest(msgspec.Struct, forbid_unknown_fields=True):
    model: str
    max_tokens: int
    messages: list[_AnthropicMessage]
    system: str | list[_TextBlock] | None = None
    stream: bool = False
    tools: list[_AnthropicTool] | None = None
    diagnostics: _DiagnosticsParam | None = None


class _Invalid(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind


class _TooLong(Exception):
    def __init__(self, tokens: int, limit: int) -> None:
        super().__init__(f"{tokens} tokens over {limit}")
        self.tokens = tokens
        self.limit = limit


class _Usage(msgspec.Struct, frozen=True):
    fresh: int
    read: int
    written: int
    # Of the written tokens, those written for an hour (Anthropic).
    written_1h: int = 0
    # Asked for: the diagnosis, as the reply's ``diagnostics`` says it.
    diagnosis: dict[str, object] | None = None

    @property
    def total(self) -> int:
        return self.fresh + self.read + self.written


def _tokens(chars: int) -> int:
    # Floor everywhere, so a prefix never counts more tokens than the whole.
    return chars // CHARS_PER_TOKEN


def default_reply(number: int, prompt_chars: int) -> str:
    return (
        f"Reply {number}: I read {prompt_chars} characters and will act on the "
        f"latest message. Noted for the next step."
    )


class Simulator:
    """Both provider APIs on one loopback port; use ``async with``."""

    def __init__(
        self,
        *,
        api_key: str | None = None,
        min_cacheable_tokens: int = 1024,
        lookback_blocks: int = 20,
        openai_min_tokens: int = 1024,
        openai_step_tokens: int = 128,
        ttl_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        reply: Callable[[int, int], str] = default_reply,
        delta_chars: int = 16,
        framing: Framing | None = None,
        context_tokens: int | None = None,
        server: Server = "provider",
        explicit_models: tuple[str, ...] = ("gpt-5.6*", "gpt-5.7*", "gpt-6*"),
    ) -> None:
        self.api_key = api_key
        self.min_cacheable_tokens = min_cacheable_tokens
        self.lookback_blocks = lookback_blocks
        self.openai_min_tokens = openai_min_tokens
        self.openai_step_tokens = openai_step_tokens
        self.ttl_s = ttl_s
        self._clock = clock
        self._reply = reply
        self._delta_chars = delta_chars
        self.framing = framing or Framing()
        # Prompts over this many tokens are refused as too long, in the error
        # shape of *server*: the provider's own, or llama.cpp's on both APIs.
        self.context_tokens = context_tokens
        self.server: Server = server
        self.requests: list[Recorded] = []
        self._arrived = anyio.Event()
        # Per gate of ``Held``: set once the test released it.
        self._released: dict[str, anyio.Event] = {}
        self._script: deque[Action] = deque()
        self.explicit_models = explicit_models
        # Anthropic's and OpenAI's explicit entries are global per model; the
        # older OpenAI models' per cache key. Per prefix digest: when it was
        # last used, and how long it lives (None: until cleared).
        self._anthropic: dict[bytes, tuple[float, float | None]] = {}
        self._openai: dict[tuple[str | None, bytes], tuple[float, float | None]] = {}
        self._explicit: dict[bytes, tuple[float, float | None]] = {}
        # Per Anthropic message id: what its request was made of, to diagnose
        # the next request that names it.
        self._fingerprints: dict[str, _Fingerprint] = {}
        self._stack = AsyncExitStack()
        self.port = 0

    def __repr__(self) -> str:
        return f"Simulator(port={self.port}, requests={len(self.requests)})"

    @property
    def openai_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def script(self, *actions: Action) -> None:
        """Queue actions; each request takes the next one, then normal replies."""
        self._script.extend(actions)

    async def wait_for_requests(self, count: int) -> None:
        """Until *count* requests in all have arrived."""
        while len(self.requests) < count:
            await self._arrived.wait()

    def release(self, gate: str = "") -> None:
        """Let every request ``Held`` at *gate*, and the ones to come, answer."""
        self._gate(gate).set()

    def _gate(self, gate: str) -> anyio.Event:
        return self._released.setdefault(gate, anyio.Event())

    def clear_cache(self) -> None:
        """Forget every cached prefix, as a provider-side eviction would."""
        self._anthropic.clear()
        self._openai.clear()
        self._explicit.clear()

    def bodies(self) -> list[bytes]:
        return [r.body for r in self.requests]

    async def __aenter__(self) -> Simulator:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        await self._stack.enter_async_context(listener)
        self.port = listener.extra(anyio.abc.SocketAttribute.local_port)
        group = await self._stack.enter_async_context(anyio.create_task_group())
        self._stack.callback(group.cancel_scope.cancel)
        group.start_soon(listener.serve, self._connection)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._stack.aclose()

    # HTTP ---------------------------------------------------------------------

    async def _connection(self, stream: anyio.abc.SocketStream) -> None:
        async with stream:
            reader = BufferedByteReceiveStream(stream)
            while True:
                try:
                    head = await reader.receive_until(b"\r\n\r\n", _HEAD_LIMIT)
                    request_line, *header_lines = head.decode("latin-1").split("\r\n")
                    method, path, _ = request_line.split(" ", 2)
                    headers = {}
                    for line in header_lines:
                        name, _, value = line.partition(":")
                        headers[name.strip().lower()] = value.strip()
                    body = await reader.receive_exactly(int(headers.get("content-length", "0")))
                except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError):
                    return
                self.requests.append(Recorded(method, path, headers, body))
                # Every waiter wakes and looks; the next request sets a fresh event.
                self._arrived.set()
                self._arrived = anyio.Event()
                try:
                    if not await self._dispatch(stream, path, headers, body):
                        return
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    # The client went away mid-reply, as a real server sees
                    # a proxy or client that gave up.
                    return

    async def _dispatch(
        self, stream: anyio.abc.SocketStream, path: str, headers: dict[str, str], body: bytes
    ) -> bool:
        """Answer one request; False when the connection must close."""
        api: Literal["openai", "anthropic"]
        if path == "/v1/chat/completions":
            api = "openai"
        elif path == "/v1/messages":
            api = "anthropic"
        else:
            await _send_json(stream, 404, _error_body("openai", "not_found", f"no route {path}"))
            return True
        action = self._script.popleft() if self._script else None
        match action:
            case Status(status=status, message=message, retry_after=retry_after, code=code):
                extra = {} if retry_after is None else {"retry-after": f"{retry_after:g}"}
                kind = "rate_limit_error" if status == 429 else "api_error"
                if code is not None:
                    kind = "invalid_request_error"
                await _send_json(stream, status, _error_body(api, kind, message, code), extra)
                return True
            case Stall(seconds=seconds):
                with anyio.move_on_after(seconds):
                    await _hung_up(stream)
                return False
            case Delay(seconds=seconds):
                await anyio.sleep(seconds)
            case Held(gate=gate):
                await self._gate(gate).wait()
            case Hangup():
                return False
            case Page(body=page, content_type=content_type):
                data = page.encode()
                headers = {"content-type": content_type, "content-length": str(len(data))}
                await stream.send(_head(200, headers) + data)
                return True
        try:
            self._authorize(api, headers)
            if api == "openai":
                text, usage, model = self._openai_turn(body)
            else:
                text, usage, model = self._anthropic_turn(body, headers, number=len(self.requests))
                if isinstance(action, Diagnose) and usage.diagnosis is not None:
                    usage = msgspec.structs.replace(usage, diagnosis=_diagnosis(action))
        except _Invalid as exc:
            await _send_json(stream, exc.status, _error_body(api, exc.kind, exc.message))
            return True
        except _TooLong as exc:
            body = _too_long_body(api, self.server, exc.tokens, exc.limit)
            await _send_json(stream, 400, body)
            return True
        calls: tuple[tuple[str, str], ...] = ()
        if isinstance(action, Reply):
            text = action.text
        if isinstance(action, Calls):
            text, calls = action.text, action.calls
        if isinstance(action, CallsOnce):
            made = made_calls(body)
            if all(_parsed(call) in made for call in action.calls):
                text = action.text
            else:
                calls = action.calls
        if isinstance(action, Omit) and action.text is not None:
            text = action.text
        omit = action.part if isinstance(action, Omit) else None
        framing = self.framing
        bent = action.usage if isinstance(action, Bent) else None
        answer = _Answer(
            model, text, usage, self._delta_chars, framing.raw, calls, len(self.requests), bent
        )
        events = (_openai_events if api == "openai" else _anthropic_events)(answer)
        await _start_stream(stream)
        deltas = 0
        for is_delta, name, frame in events:
            if isinstance(action, Malformed):
                await _send_chunk(stream, b'data: {"type": "message_start", "choices": [\n\n')
                await _end_chunks(stream)
                return True
            if (
                isinstance(action, Drop | Cut | ErrorEvent)
                and is_delta
                and deltas == action.after_deltas
            ):
                if isinstance(action, Drop):
                    return False
                if isinstance(action, ErrorEvent):
                    await _send_chunk(stream, _error_event(api, action.message, action.kind))
                await _end_chunks(stream)
                return True
            if name != omit:
                await _send_framed(stream, frame, framing)
            deltas += is_delta
        await _end_chunks(stream)
        return True

    def _authorize(self, api: str, headers: dict[str, str]) -> None:
        if api == "anthropic" and headers.get("anthropic-version") != "2023-06-01":
            raise _Invalid(400, "anthropic-version header is required")
        if self.api_key is None:
            return
        if api == "openai":
            given = headers.get("authorization", "").removeprefix("Bearer ")
            if given != self.api_key:
                # OpenAI quotes the rejected key back; engines must scrub it.
                raise _Invalid(401, f"Incorrect API key provided: {given}.", "invalid_api_key")
        elif headers.get("x-api-key") != self.api_key:
            given = headers.get("x-api-key", "")
            raise _Invalid(401, f"invalid x-api-key {given}", "authentication_error")

    # Caching rules --------------------------------------------------------------

    def _lifetime(self, control: _CacheControl | None) -> float | None:
        """Seconds an entry written at *control* lives: an hour when asked,
        else the simulator's TTL (``None``: until cleared)."""
        if control is not None and control.ttl == "1h":
            return 3600.0
        return self.ttl_s

    def _live(self, table: dict[_K, tuple[float, float | None]]) -> None:
        """Drop entries unused for longer than their own lifetime; a hit refreshes one."""
        now = self._clock()
        for key in [
            k for k, (used, life) in table.items() if life is not None and now - used > life
        ]:
            del table[key]

    def _fits(self, tokens: int) -> None:
        if self.context_tokens is not None and tokens > self.context_tokens:
            raise _TooLong(tokens, self.context_tokens)

    def _openai_turn(self, body: bytes) -> tuple[str, _Usage, str]:
        request = _decode(body, _ChatRequest)
        if not request.stream:
            raise _Invalid(400, "this simulator only streams")
        key = request.prompt_cache_key
        if key is not None and len(key) > 64:
            raise _Invalid(400, "prompt_cache_key: string too long, at most 64 characters")
        if request.max_tokens is not None and request.max_completion_tokens is not None:
            raise _Invalid(400, "max_tokens and max_completion_tokens are exclusive")
        _check_openai_tools(request, self.server)
        explicit = any(fnmatch.fnmatchcase(request.model, m) for m in self.explicit_models)
        if request.prompt_cache_options is not None and not explicit:
            raise _Invalid(400, f"prompt_cache_options is not supported with {request.model}")
        segments = _openai_segments(request)
        prompt = b"".join(data for data, _ in segments)
        total = _tokens(len(prompt))
        self._fits(total)
        text = self._reply(len(self.requests), len(prompt))
        if explicit:
            return text, self._explicit_cache(request, segments), request.model
        self._live(self._openai)
        life = 86400.0 if request.prompt_cache_retention == "24h" else self.ttl_s
        hasher = hashlib.sha256(request.model.encode() + b"\0")
        seen = 0
        cached = 0
        now = self._clock()
        for point in range(self.openai_min_tokens, total + 1, self.openai_step_tokens):
            hasher.update(prompt[seen * CHARS_PER_TOKEN : point * CHARS_PER_TOKEN])
            seen = point
            entry = (key, hasher.digest())
            if entry in self._openai:
                cached = point
            self._openai[entry] = (now, life)
        return text, _Usage(fresh=total - cached, read=cached, written=0), request.model

    def _explicit_cache(self, request: _ChatRequest, segments: list[tuple[bytes, bool]]) -> _Usage:
        """OpenAI's explicit contract: read the longest written prefix, write
        at the latest breakpoints, each entry living 30 minutes past its use."""
        options = request.prompt_cache_options or _CacheOptions()
        self._live(self._explicit)
        hasher = hashlib.sha256(request.model.encode() + b"\0")
        ends: list[int] = []
        digests: list[bytes] = []
        chars = 0
        for data, _ in segments:
            hasher.update(data)
            chars += len(data)
            ends.append(_tokens(chars))
            digests.append(hasher.digest())
        marks = [i for i, (_, marked) in enumerate(segments) if marked]
        if options.mode == "implicit":
            marks = sorted({*marks[-3:], len(segments) - 1})
        else:
            marks = marks[-4:]
        total = ends[-1] if ends else 0
        if not marks:
            # Explicit mode without a breakpoint: no prompt caching at all.
            return _Usage(fresh=total, read=0, written=0)
        hit = max((i for i, d in enumerate(digests) if d in self._explicit), default=-1)
        read = ends[hit] if hit >= 0 else 0
        now = self._clock()
        written_to = read
        for point in marks:
            if ends[point] >= self.openai_min_tokens:
                self._explicit[digests[point]] = (now, 1800.0)
                written_to = max(written_to, ends[point])
        if hit >= 0:
            self._explicit[digests[hit]] = (now, 1800.0)
        return _Usage(fresh=total - written_to, read=read, written=written_to - read)

    def _anthropic_turn(
        self, body: bytes, headers: dict[str, str], *, number: int
    ) -> tuple[str, _Usage, str]:
        request = _decode(body, _MessagesRequest)
        if not request.stream:
            raise _Invalid(400, "this simulator only streams")
        if request.diagnostics is not None and CACHE_DIAGNOSIS_BETA not in headers.get(
            "anthropic-beta", ""
        ):
            raise _Invalid(400, "diagnostics: Extra inputs are not permitted")
        _check_anthropic_tools(request)
        blocks = _anthropic_blocks(request)
        controls = [control for _, control in blocks if control is not None]
        if len(controls) > 4:
            raise _Invalid(
                400,
                f"A maximum of 4 blocks with cache_control may be provided. Found {len(controls)}.",
            )
        lifetimes = [self._lifetime(control) for control in controls]
        if any(a == 300 and b == 3600 for a, b in itertools.pairwise(lifetimes)):
            raise _Invalid(400, "a ttl='1h' cache_control block must not come after a ttl='5m' one")
        self._fits(_tokens(sum(len(data) for data, _ in blocks)))
        self._live(self._anthropic)
        hasher = hashlib.sha256(request.model.encode() + b"\0")
        ends: list[int] = []  # characters up to the end of each block
        digests: list[bytes] = []
        chars = 0
        for data, _ in blocks:
            hasher.update(data)
            chars += len(data)
            ends.append(chars)
            digests.append(hasher.digest())
        breakpoints = [i for i, (_, control) in enumerate(blocks) if control is not None]
        hit = -1
        for point in breakpoints:
            for j in range(point, max(-1, point - self.lookback_blocks), -1):
                if digests[j] in self._anthropic:
                    hit = max(hit, j)
                    break
        read = _tokens(ends[hit]) if hit >= 0 else 0
        now = self._clock()
        written_to = read
        written_1h = 0
        for point in breakpoints:
            lifetime = self._lifetime(blocks[point][1])
            if _tokens(ends[point]) >= self.min_cacheable_tokens:
                self._anthropic[digests[point]] = (now, lifetime)
                if _tokens(ends[point]) > written_to:
                    if lifetime == 3600:
                        written_1h += _tokens(ends[point]) - written_to
                    written_to = _tokens(ends[point])
        if hit >= 0:
            self._anthropic[digests[hit]] = (now, self._anthropic[digests[hit]][1])
        total = _tokens(chars)
        fingerprint = _fingerprint(request)
        self._fingerprints[f"msg_sim_{number}"] = fingerprint
        diagnosis = None
        if request.diagnostics is not None:
            diagnosis = self._diagnose(request.diagnostics.previous_message_id, fingerprint)
        usage = _Usage(
            fresh=total - written_to,
            read=read,
            written=written_to - read,
            written_1h=written_1h,
            diagnosis=diagnosis,
        )
        text = self._reply(len(self.requests), chars)
        return text, usage, request.model

    def _diagnose(self, previous: str | None, now: _Fingerprint) -> dict[str, object]:
        """The reply's ``diagnostics``: which part of the request differs
        from the one *previous* named, first difference first."""
        if previous is None:
            return {"cache_miss_reason": None}
        before = self._fingerprints.get(previous)
        if before is None:
            return {"cache_miss_reason": {"type": "previous_message_not_found"}}
        for part, reason in enumerate(("model_changed", "tools_changed", "system_changed")):
            if before.parts[part] != now.parts[part]:
                missed = sum(before.sizes[: part + 1]) // CHARS_PER_TOKEN
                return _diagnosis(Diagnose(reason, missed))
        if now.messages[: len(before.messages)] != before.messages:
            return _diagnosis(Diagnose("messages_changed", sum(before.sizes) // CHARS_PER_TOKEN))
        return {"cache_miss_reason": None}


class _Fingerprint(msgspec.Struct, frozen=True):
    """An Anthropic request's parts, hashed in cache order, with their sizes."""

    parts: tuple[bytes, bytes, bytes]  # model, tools, system
    messages: tuple[bytes, ...]
    sizes: tuple[int, int, int, int]


def _fingerprint(request: _MessagesRequest) -> _Fingerprint:
    def encoded(value: object) -> bytes:
        return msgspec.json.encode(value)

    system = (
        request.system
        if isinstance(request.system, str)
        else [b.text for b in request.system or []]
    )
    tools = encoded([(t.name, t.description, t.input_schema) for t in request.tools or []])
    # Cache marks move from turn to turn: they are not part of what was asked.
    messages = [
        encoded(
            [m.role, m.content if isinstance(m.content, str) else [_unmarked(b) for b in m.content]]
        )
        for m in request.messages
    ]
    parts = (request.model.encode(), tools, encoded(system))
    return _Fingerprint(
        tuple(hashlib.sha256(part).digest() for part in parts),  # type: ignore[arg-type]
        tuple(hashlib.sha256(m).digest() for m in messages),
        (*(len(part) for part in parts), sum(map(len, messages))),  # type: ignore[arg-type]
    )


def _unmarked(block: _Block) -> _Block:
    return msgspec.structs.replace(block, cache_control=None)


def _diagnosis(action: Diagnose) -> dict[str, object]:
    if action.reason is None:
        return {"cache_miss_reason": None}
    reason: dict[str, object] = {"type": action.reason}
    if action.reason.endswith("_changed"):
        reason["cache_missed_input_tokens"] = action.missed_tokens
    return {"cache_miss_reason": reason}


def _anthropic_blocks(request: _MessagesRequest) -> list[tuple[bytes, _CacheControl | None]]:
    """The prompt as (serialised block, its cache_control), in cache order:
    tools, system, messages."""
    blocks: list[tuple[bytes, _CacheControl | None]] = []
    for tool in request.tools or []:
        blocks.append((b"<tool>" + msgspec.json.encode(tool), tool.cache_control))
    system = request.system
    if isinstance(system, str):
        system = [_TextBlock(text=system)]
    for block in system or []:
        blocks.append((block.text.encode(), block.cache_control))
    for message in request.messages:
        content = message.content
        if isinstance(content, str):
            content = [_TextBlock(text=content)]
        for i, part in enumerate(content):
            marker = f"\n\n{message.role}: ".encode() if i == 0 else b""
            match part:
                case _TextBlock(text=text):
                    if not text:
                        raise _Invalid(400, "text content blocks must be non-empty")
                    data = text.encode()
                case _ToolUseBlock(id=call_id, name=name, input=arguments):
                    data = f"<use {call_id} {name}>".encode() + msgspec.json.encode(arguments)
                case _ToolResultBlock(tool_use_id=call_id, content=result):
                    data = f"<result {call_id}>".encode() + result.encode()
            blocks.append((marker + data, part.cache_control))
    return blocks


def _check_anthropic_tools(request: _MessagesRequest) -> None:
    """Calls name defined tools; each is answered by the very next message."""
    names = {tool.name for tool in request.tools or []}
    messages = request.messages
    for i, message in enumerate(messages):
        if isinstance(message.content, str):
            continue
        uses = [b for b in message.content if isinstance(b, _ToolUseBlock)]
        for use in uses:
            if use.name not in names:
                raise _Invalid(400, f"tool_use names an undefined tool {use.name!r}")
        if not uses or i + 1 == len(messages):
            continue
        answer = messages[i + 1].content
        answered = {
            b.tool_use_id
            for b in (answer if isinstance(answer, list) else [])
            if isinstance(b, _ToolResultBlock)
        }
        missing = [use.id for use in uses if use.id not in answered]
        if missing:
            raise _Invalid(
                400,
                f"tool_use ids were found without tool_result blocks immediately after: "
                f"{', '.join(missing)}",
            )


def _check_openai_tools(request: _ChatRequest, server: Server) -> None:
    """Calls name defined tools and each is answered right after it; on
    llama.cpp (and vLLM alike) the arguments of every call in the history
    are parsed as JSON to render the prompt, and a call whose arguments are
    not JSON fails the whole request."""
    names = {tool.function.name for tool in request.tools or []}
    messages = request.messages
    for i, message in enumerate(messages):
        if message.role != "tool" and message.content is None and not message.tool_calls:
            raise _Invalid(400, "content is required unless the message makes tool calls")
        if not message.tool_calls:
            continue
        for call in message.tool_calls:
            if call.function.name not in names:
                raise _Invalid(400, f"tool call names an undefined tool {call.function.name!r}")
            if server == "llama.cpp":
                try:
                    json.loads(call.function.arguments)
                except json.JSONDecodeError as exc:
                    refused = f"Failed to parse tool call arguments as JSON: {exc}"
                    raise _Invalid(500, refused, "server_error") from None
        following = messages[i + 1 : i + 1 + len(message.tool_calls)]
        if i + 1 == len(messages):
            continue
        answered = {m.tool_call_id for m in following if m.role == "tool"}
        missing = [c.id for c in message.tool_calls if c.id not in answered]
        if missing:
            raise _Invalid(
                400,
                "An assistant message with 'tool_calls' must be followed by tool messages "
                f"responding to each 'tool_call_id'. Missing: {', '.join(missing)}",
            )


def _openai_prompt(request: _ChatRequest) -> bytes:
    return b"".join(data for data, _ in _openai_segments(request))


def _openai_segments(request: _ChatRequest) -> list[tuple[bytes, bool]]:
    """The prompt as the model reads it, in pieces that end where a content
    part ends, each with whether a breakpoint marks its end. A message's
    text reads the same whether it came as a string or as parts."""
    tools = "".join(
        f"<|tool|>{json.dumps(msgspec.to_builtins(t), sort_keys=True)}" for t in request.tools or []
    )
    segments = [(tools.encode(), False)]
    for m in request.messages:
        parts = m.content if isinstance(m.content, list) else [_OpenAIPart("text", m.content or "")]
        for i, part in enumerate(parts):
            head = f"<|{m.role}|>" if i == 0 else ""
            segments.append(((head + part.text).encode(), part.prompt_cache_breakpoint is not None))
        tail = "".join(
            f"<|call {call.id} {call.function.name}|>{call.function.arguments}"
            for call in m.tool_calls or []
        )
        if m.tool_call_id is not None:
            tail += f"<|for {m.tool_call_id}|>"
        if tail:
            segments.append((tail.encode(), False))
    return segments


def reported(reply: EngineReply) -> Usage:
    """The usage of a reply that must have reported one."""
    assert reply.usage is not None, "the provider reported no usage"
    return reply.usage


def tool_messages(body: bytes) -> list[dict[str, Any]]:
    """The tool result envelopes of a request, in order, in either API's shape."""
    request = json.loads(body)
    found = []
    for message in request["messages"]:
        if message["role"] == "tool":
            found.append(message["content"])
        elif isinstance(message["content"], list):
            found += [b["content"] for b in message["content"] if b["type"] == "tool_result"]
    for content in found:
        assert content.count("\n") == 1 and content.endswith("\n")
    return [json.loads(content) for content in found]


def made_calls(body: bytes) -> list[tuple[str, Any]]:
    """The tool calls a request's history holds, each (name, parsed
    arguments), in either API's shape; each is answered (``_check_*_tools``)."""
    found = []
    for message in json.loads(body)["messages"]:
        for call in message.get("tool_calls") or []:
            found.append(_parsed((call["function"]["name"], call["function"]["arguments"])))
        if isinstance(message.get("content"), list):
            found += [
                (b["name"], b["input"]) for b in message["content"] if b["type"] == "tool_use"
            ]
    return found


def _parsed(call: tuple[str, str]) -> tuple[str, Any]:
    name, arguments = call
    return name, json.loads(arguments)


def prompt_bytes(recorded: Recorded) -> bytes:
    """A recorded request's prompt as the simulator counts and caches it."""
    if recorded.path == "/v1/chat/completions":
        return _openai_prompt(_decode(recorded.body, _ChatRequest))
    return b"".join(data for data, _ in _anthropic_blocks(_decode(recorded.body, _MessagesRequest)))


def _decode(body: bytes, kind: type[_T]) -> _T:
    try:
        return msgspec.json.decode(body, type=kind)
    except msgspec.DecodeError as exc:
        raise _Invalid(400, f"invalid request body: {exc}") from None


def _error_body(api: str, kind: str, message: str, code: str | None = None) -> bytes:
    if api == "anthropic":
        return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()
    return json.dumps({"error": {"message": message, "type": kind, "code": code}}).encode()


def _too_long_body(api: str, server: Server, tokens: int, limit: int) -> bytes:
    """Each server's real answer to a prompt over its context window."""
    if server == "llama.cpp":
        error: dict[str, object] = {
            "code": 400,
            "message": f"request ({tokens} tokens) exceeds the available context size "
            f"({limit} tokens), try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": tokens,
            "n_ctx": limit,
        }
        return json.dumps({"error": error}).encode()
    if api == "anthropic":
        message = f"prompt is too long: {tokens} tokens > {limit} maximum"
        return _error_body(api, "invalid_request_error", message)
    error = {
        "message": f"This model's maximum context length is {limit} tokens. However, your "
        f"messages resulted in {tokens} tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
    return json.dumps({"error": error}).encode()


def _error_event(api: str, message: str, kind: str) -> bytes:
    if api == "anthropic":
        payload = {"type": "error", "error": {"type": kind, "message": message}}
        return b"event: error\ndata: " + json.dumps(payload).encode() + b"\n\n"
    payload_oa = {"error": {"message": message, "type": "server_error"}}
    return b"data: " + json.dumps(payload_oa).encode() + b"\n\n"


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


Frame = tuple[bool, str, bytes]  # (is a text delta, the part it is, its SSE bytes)


def _sse(data: object, raw: bool, event: str | None = None) -> bytes:
    # Frames are built with LF; _send_framed puts the chosen line end on.
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data, ensure_ascii=not raw)}\n\n".encode()


class _Answer(NamedTuple):
    """What a stream answers, in either API's events: the reply's *text* in
    pieces of *size*, its tool *calls* (name, arguments), its *usage*, and
    the request's *number* (ids are made from it)."""

    model: str
    text: str
    usage: _Usage
    size: int
    raw: bool
    calls: tuple[tuple[str, str], ...]
    number: int
    bent: dict[str, object] | None = None


def _openai_events(answer: _Answer) -> list[Frame]:
    model, text, usage, size, raw, calls, number, bent = answer
    # With include_usage every chunk carries "usage": null but the last one.
    base = {"id": "chatcmpl-sim", "object": "chat.completion.chunk", "model": model, "usage": None}
    role = {"role": "assistant", "content": ""}
    frames = [(False, "role", _sse({**base, "choices": [{"index": 0, "delta": role}]}, raw))]
    for piece in _pieces(text, size):
        choice = {"index": 0, "delta": {"content": piece}, "finish_reason": None}
        frames.append((True, "delta", _sse({**base, "choices": [choice]}, raw)))
    for index, (name, arguments) in enumerate(calls):
        # The first delta of a call names it; its arguments follow in pieces.
        head = {
            "index": index,
            "id": f"call_{number}_{index}",
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        pieces = [{"index": index, "function": {"arguments": p}} for p in _pieces(arguments, size)]
        for call in [head, *pieces]:
            choice = {"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}
            frames.append((False, "call", _sse({**base, "choices": [choice]}, raw)))
    finish = "tool_calls" if calls else "stop"
    stop = {"index": 0, "delta": {}, "finish_reason": finish}
    frames.append((False, "stop", _sse({**base, "choices": [stop]}, raw)))
    completion = _tokens(len(text)) + 1
    counts = {
        "prompt_tokens": usage.total,
        "completion_tokens": completion,
        "total_tokens": usage.total + completion,
        "prompt_tokens_details": {
            "cached_tokens": usage.read,
            "cache_write_tokens": usage.written,
        },
        **(bent or {}),
    }
    frames.append((False, "usage", _sse({**base, "choices": [], "usage": counts}, raw)))
    frames.append((False, "done", b"data: [DONE]\n\n"))
    return frames


def _anthropic_events(answer: _Answer) -> list[Frame]:
    model, text, usage, size, raw, calls, number, bent = answer
    start: dict[str, Any] = {
        "type": "message_start",
        "message": {
            "id": f"msg_sim_{number}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "usage": {
                "input_tokens": usage.fresh,
                "cache_creation_input_tokens": usage.written,
                "cache_read_input_tokens": usage.read,
                "cache_creation": {
                    "ephemeral_5m_input_tokens": usage.written - usage.written_1h,
                    "ephemeral_1h_input_tokens": usage.written_1h,
                },
                "output_tokens": 1,
                **(bent or {}),
            },
        },
    }
    if usage.diagnosis is not None:
        start["message"]["diagnostics"] = usage.diagnosis
    frames = [(False, "message_start", _sse(start, raw, "message_start"))]
    index = 0
    if text or not calls:
        block = {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "text", "text": ""},
        }
        frames += [
            (False, "content_block_start", _sse(block, raw, "content_block_start")),
            (False, "ping", _sse({"type": "ping"}, raw, "ping")),
        ]
        for piece in _pieces(text, size):
            delta = {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": piece},
            }
            frames.append((True, "delta", _sse(delta, raw, "content_block_delta")))
        block_stop = {"type": "content_block_stop", "index": 0}
        frames.append((False, "content_block_stop", _sse(block_stop, raw, "content_block_stop")))
        index = 1
    for offset, (name, arguments) in enumerate(calls):
        at = index + offset
        use = {"type": "tool_use", "id": f"toolu_{number}_{offset}", "name": name, "input": {}}
        begin = {"type": "content_block_start", "index": at, "content_block": use}
        frames.append((False, "call", _sse(begin, raw, "content_block_start")))
        for piece in ["", *_pieces(arguments, size)]:
            delta = {
                "type": "content_block_delta",
                "index": at,
                "delta": {"type": "input_json_delta", "partial_json": piece},
            }
            frames.append((False, "call", _sse(delta, raw, "content_block_delta")))
        stop = {"type": "content_block_stop", "index": at}
        frames.append((False, "call", _sse(stop, raw, "content_block_stop")))
    end = {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use" if calls else "end_turn", "stop_sequence": None},
        "usage": {"output_tokens": _tokens(len(text)) + 1},
    }
    frames.append((False, "message_delta", _sse(end, raw, "message_delta")))
    frames.append((False, "message_stop", _sse({"type": "message_stop"}, raw, "message_stop")))
    return frames


async def _hung_up(stream: anyio.abc.SocketStream) -> None:
    """Until the client closes its end; what it sends meanwhile is dropped."""
    try:
        while await stream.receive():
            pass
    except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
        return


async def _send_json(
    stream: anyio.abc.SocketStream,
    status: int,
    body: bytes,
    extra: dict[str, str] | None = None,
) -> None:
    headers = {
        "content-type": "application/json",
        "content-length": str(len(body)),
        **(extra or {}),
    }
    await stream.send(_head(status, headers) + body)


async def _start_stream(stream: anyio.abc.SocketStream) -> None:
    headers = {"content-type": "text/event-stream", "transfer-encoding": "chunked"}
    await stream.send(_head(200, headers))


async def _send_chunk(stream: anyio.abc.SocketStream, data: bytes) -> None:
    await stream.send(f"{len(data):x}\r\n".encode() + data + b"\r\n")


async def _send_framed(stream: anyio.abc.SocketStream, frame: bytes, framing: Framing) -> None:
    # Raw JSON holds no LF (JSON escapes it), so every LF is a line end.
    data = frame.replace(b"\n", framing.newline.encode())
    size = framing.chunk_bytes or len(data)
    for start in range(0, len(data), size):
        await _send_chunk(stream, data[start : start + size])


async def _end_chunks(stream: anyio.abc.SocketStream) -> None:
    await stream.send(b"0\r\n\r\n")


def _head(status: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} {_STATUS_TEXT.get(status, 'Status')}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class Conversation:
    """One session's append-only transcript, driven the way a session does:
    the system part compiled once, each turn's fresh input compiled alone."""

    def __init__(self, org: Org, worker: str, channel: str | None, *, run: str = "r-sim") -> None:
        surface = Surface.SESSION if channel is not None else Surface.DIRECT
        self.run = run
        self.system = compile_system(org, org.scope(surface, worker, channel), self._meta(0))
        self.messages: list[ChatMessage] = []
        self.deltas: list[list[str]] = []

    def _meta(self, turn: int) -> RunMeta:
        return RunMeta(run=self.run, turn=turn, now=1_700_000_000.0 + 60 * turn)

    def request(self, turn: TurnInput) -> EngineRequest:
        """Append the compiled user turn and return the request to send."""
        number = len(self.messages) // 2 + 1
        compiled = compile_turn(self.system, turn, self._meta(number))
        self.messages.append(ChatMessage(role="user", content=compiled.input_text))
        return EngineRequest(system=self.system, messages=tuple(self.messages))

    async def say(
        self,
        engine: Engine,
        text: str,
        *,
        memory: tuple[MemoryItem, ...] = (),
        gates: tuple[Gate, ...] = (),
        history: tuple[ChannelMessage, ...] | None = None,
    ) -> EngineReply:
        turn = TurnInput(text=text, memory=memory, gates=gates, history=history)
        request = self.request(turn)
        pieces: list[str] = []

        async def sink(piece: str) -> None:
            pieces.append(piece)

        self.deltas.append(pieces)
        reply = await engine.complete(request, sink)
        self.messages.append(ChatMessage(role="assistant", content=reply.text))
        return reply
