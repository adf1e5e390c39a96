"""HTTP for the provider engines: one client, retries, server-sent events, errors.

This is the one boundary where httpx errors become ``EngineError``. Every
error names the provider, the HTTP status (when there was one) and the
provider's own message, and never the API key: the key is scrubbed from any
text a provider echoes back (some quote the key they rejected).

Retries only happen before the first byte of a reply body: a 429 or 5xx
status, or a failed connection. Once events flow, deltas have reached the
caller, so a failure mid-stream is raised instead of silently replayed.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import ClassVar, Protocol

import anyio
import httpx
import msgspec
from httpx_sse import EventSource, ServerSentEvent

from .._errors import EngineError
from ..org import EngineConfig
from ._admission import retry_after_s
from ._base import DeltaSink, EngineReply, EngineRequest, WaitSink

logger = logging.getLogger("rosterd.engines")

# Statuses a provider uses for "try again later": rate limits, overload
# (Anthropic's 529 included) and transient gateway failures.
_RETRY_STATUS = frozenset({408, 409, 429})
_MESSAGE_CHARS = 500
# A usage field as decoded: an integer, or a float where a server sends one.
Count = int | float
# The most tokens one usage field takes: about 10^12, far past any model's
# context, and exact as a float (Prometheus) and an int64 (OTLP).
MAX_TOKENS = 2**40


class Backoff(msgspec.Struct, frozen=True):
    """Exponential backoff with seeded jitter; ``Retry-After`` wins when sent."""

    base_s: float = 0.5
    cap_s: float = 8.0
    max_retry_after_s: float = 60.0
    seed: int = 0

    def delay(self, attempt: int, rng: random.Random) -> float:
        step = min(self.cap_s, self.base_s * 2.0**attempt)
        # Jitter in [step/2, step] keeps retrying clients apart yet bounded.
        return step / 2 + rng.random() * step / 2


EventSink = Callable[[ServerSentEvent], Awaitable[None]]


class _ErrorDetail(msgspec.Struct):
    message: str = ""
    type: str = ""
    # OpenAI's is a string ("context_length_exceeded"), llama.cpp's the status.
    code: str | int | None = None


class _ErrorEnvelope(msgspec.Struct):
    # OpenAI and Anthropic both put the error under "error" with a "message".
    error: _ErrorDetail | str | None = None


_decode_error = msgspec.json.Decoder(_ErrorEnvelope).decode


class _Retry(msgspec.Struct, frozen=True):
    """A failed attempt that may succeed later."""

    message: str
    status: int | None
    retry_after: float | None


class ProviderHttp:
    """A pooled HTTP client for one provider endpoint and its retry policy."""

    def __init__(
        self,
        *,
        provider: str,
        base_url: str,
        headers: Mapping[str, str],
        timeout_s: float,
        max_retries: int,
        secret: str | None,
        backoff: Backoff,
        on_response: Callable[[int, Mapping[str, str]], None] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.provider = provider
        # Hears the status and headers of every response: rate limits.
        self._on_response = on_response
        self._max_retries = max_retries
        self._secret = secret or None
        self._backoff = backoff
        self._rng = random.Random(backoff.seed)
        self._timeout_s = timeout_s
        self._deviations: set[str] = set()
        # timeout_s bounds connecting and every wait for the next bytes, so a
        # long but live stream is fine while a stalled one fails.
        # *transport* stands in for the network (httpx.MockTransport in tests).
        self._client = httpx.AsyncClient(
            base_url=base_url,
            headers=dict(headers),
            timeout=httpx.Timeout(timeout_s),
            transport=transport,
        )

    def __repr__(self) -> str:
        return f"ProviderHttp(provider={self.provider!r}, base_url={str(self._client.base_url)!r})"

    async def aclose(self) -> None:
        await self._client.aclose()

    def error(
        self,
        message: str,
        *,
        status: int | None = None,
        retryable: bool = False,
        context_exceeded: bool = False,
        retry_after: float | None = None,
    ) -> EngineError:
        """An ``EngineError`` for this provider, with any echoed key removed."""
        return EngineError(
            f"{self.provider}: {self.scrub(message)}",
            provider=self.provider,
            status=status,
            retryable=retryable,
            context_exceeded=context_exceeded,
            retry_after=retry_after,
        )

    def deviation(self, what: str) -> None:
        """Log, once per engine, that the server departs from its API but is still usable."""
        if what not in self._deviations:
            self._deviations.add(what)
            logger.warning(
                "%s server deviation at %s: %s", self.provider, self._client.base_url, what
            )

    def token_counts(self, **reported: Count | None) -> dict[str, int] | None:
        """The provider's usage fields, by its names, as token counts (a
        missing one is 0); ``None`` when one is none: negative, fractional
        or past ``MAX_TOKENS``. Such usage is unknown, as if unreported,
        rather than billed below zero or in the trillions, or refused by the
        metrics and the trace exporter mid-turn."""
        counts: dict[str, int] = {}
        for name, value in reported.items():
            value = value or 0
            if not 0 <= value <= MAX_TOKENS or value != int(value):
                # The field, not its value: a value per call would fill the set.
                self.deviation(f"usage field {name} is no token count; such usage is unknown")
                return None
            counts[name] = int(value)
        return counts

    def scrub(self, text: str) -> str:
        if self._secret is not None:
            text = text.replace(self._secret, "[redacted]")
        return text

    async def stream_events(
        self,
        path: str,
        body: bytes,
        on_event: EventSink,
        on_wait: WaitSink | None = None,
        *,
        patient: bool = True,
    ) -> None:
        """POST *body* and feed each server-sent event of the reply to *on_event*.

        Retries 429/5xx and connection failures up to ``max_retries`` times,
        telling *on_wait* how long each wait is; raises ``EngineError`` when
        they run out, the stream breaks, or the provider asks for time
        (``retry-after``) and the caller is not *patient*.
        """
        attempt = 0
        while True:
            retry = await self._attempt(path, body, on_event)
            if retry is None:
                return
            asks_for_time = retry.retry_after is not None and retry.retry_after > 0
            if attempt >= self._max_retries or (asks_for_time and not patient):
                tries = f" (gave up after {attempt + 1} attempts)" if attempt else ""
                raise self.error(
                    retry.message + tries,
                    status=retry.status,
                    retryable=True,
                    retry_after=retry.retry_after,
                )
            delay = self._backoff.delay(attempt, self._rng)
            if retry.retry_after is not None:
                delay = min(retry.retry_after, self._backoff.max_retry_after_s)
            logger.warning(
                "%s: attempt %d failed (%s); retrying in %.2fs",
                self.provider,
                attempt + 1,
                self.scrub(retry.message),
                delay,
            )
            attempt += 1
            if on_wait is not None:
                await on_wait("rate_limited" if retry.status == 429 else "overloaded", delay)
            await anyio.sleep(delay)

    async def _attempt(self, path: str, body: bytes, on_event: EventSink) -> _Retry | None:
        answered = False
        try:
            async with self._client.stream("POST", path, content=body) as response:
                answered = True
                if self._on_response is not None:
                    self._on_response(response.status_code, response.headers)
                if response.status_code >= 400:
                    await response.aread()
                    status = response.status_code
                    detail = _error_detail(response.content)
                    message = f"HTTP {status}: {_describe(detail, response.content)}"
                    if status in _RETRY_STATUS or status >= 500:
                        return _Retry(message, status, retry_after_s(response.headers))
                    raise self.error(message, status=status, context_exceeded=_too_long(detail))
                content_type = response.headers.get("content-type", "")
                if not content_type.startswith("text/event-stream"):
                    await response.aread()
                    raise self.error(
                        f"expected an event stream, got HTTP {response.status_code} "
                        f"{content_type or 'without a content type'}: {_snippet(response.text)}",
                        status=response.status_code,
                    )
                await _read_events(response, on_event)
                return None
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            return _Retry(f"cannot connect to {self._client.base_url}: {exc}", None, None)
        except httpx.TimeoutException:
            raise self.error(
                f"no data from {self._client.base_url} within {self._timeout_s:g}s",
                retryable=True,
            ) from None
        except httpx.HTTPError as exc:
            if not answered:
                # E.g. a pooled connection the server had closed: nothing was
                # received, so sending again cannot duplicate anything.
                return _Retry(f"connection closed before a response ({exc})", None, None)
            raise self.error(
                f"connection failed mid-response ({type(exc).__name__}: {exc})", retryable=True
            ) from None


async def _read_events(response: httpx.Response, on_event: EventSink) -> None:
    # httpx-sse ends lines only at CR, LF and CRLF, as the SSE format does;
    # httpx's own aiter_lines() also splits at U+2028, U+0085, VT, FF and
    # more, which servers send raw inside JSON strings.
    async for event in EventSource(response).aiter_sse():
        # An event without data is not dispatched (the SSE format's rule).
        if event.data:
            await on_event(event)


def _error_detail(content: bytes) -> _ErrorDetail | str | None:
    try:
        return _decode_error(content).error
    except msgspec.DecodeError:
        return None


def _describe(detail: _ErrorDetail | str | None, content: bytes) -> str:
    match detail:
        case _ErrorDetail(message=message, type=kind) if message:
            return f"{message} ({kind})" if kind else message
        case str() as message if message:
            return _snippet(message)
    return _snippet(content.decode("utf-8", "replace")) or "no message"


def _too_long(detail: _ErrorDetail | str | None) -> bool:
    """Whether the provider refused the prompt as longer than its context window."""
    if not isinstance(detail, _ErrorDetail):
        return False
    message = detail.message.lower()
    return (
        detail.code == "context_length_exceeded"  # OpenAI
        or detail.type == "exceed_context_size_error"  # llama.cpp
        or message.startswith("prompt is too long")  # Anthropic
        or "maximum context length" in message  # vLLM, and OpenAI's own wording
    )


def _snippet(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MESSAGE_CHARS else text[:_MESSAGE_CHARS] + "..."


class StreamParser(Protocol):
    """The state of one streamed reply, fed one event at a time."""

    async def feed(self, event: ServerSentEvent) -> None: ...

    def reply(self) -> EngineReply: ...


class HttpEngine:
    """What the provider engines share: a ``ProviderHttp`` for their endpoint,
    whose events one parser per reply turns into an ``EngineReply``."""

    kind: str
    path: ClassVar[str]
    # Where requests go when the config names no ``base_url``.
    default_url: ClassVar[str]
    # The provider reports cached input in its usage: cache checks measure.
    measures_cache = True

    def __init__(
        self,
        config: EngineConfig,
        *,
        api_key: str | None,
        backoff: Backoff | None = None,
        on_response: Callable[[int, Mapping[str, str]], None] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._config = config
        self.base_url = config.base_url or self.default_url
        self._http = ProviderHttp(
            provider=self.kind,
            base_url=self.base_url,
            headers=self.request_headers(api_key),
            timeout_s=config.timeout_s,
            max_retries=config.max_retries,
            secret=api_key,
            backoff=backoff or Backoff(),
            on_response=on_response,
            transport=transport,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self._config.model!r}, http={self._http!r})"

    def request_headers(self, api_key: str | None) -> dict[str, str]:
        """The headers every request carries: what it accepts, the key, the API version."""
        raise NotImplementedError

    def body(self, request: EngineRequest) -> bytes:
        """The exact bytes ``complete`` posts for *request*."""
        raise NotImplementedError

    def parser(self, on_delta: DeltaSink) -> StreamParser:
        raise NotImplementedError

    async def complete(
        self, request: EngineRequest, on_delta: DeltaSink, on_wait: WaitSink | None = None
    ) -> EngineReply:
        parser = self.parser(on_delta)
        body = self.body(request)
        await self._http.stream_events(
            self.path, body, parser.feed, on_wait, patient=request.patient
        )
        return parser.reply()

    async def aclose(self) -> None:
        await self._http.aclose()
