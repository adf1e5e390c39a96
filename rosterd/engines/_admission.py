"""Who may call an engine now: limits, fair queues and a circuit breaker.

One ``Admission`` per engine of a daemon. A call takes a slot before it is
sent and gives it back when it ends:

- at most ``max_inflight`` calls at once;
- at most ``requests_per_minute`` and ``input_tokens_per_minute``, each a
  token bucket that refills continuously;
- none while the provider has said to wait: a ``retry-after`` on a 429 or
  an overload, or rate-limit headers (``anthropic-ratelimit-*``,
  ``x-ratelimit-*``) that report nothing left, until their reset.

Calls that must wait are served round-robin by session and first come
first served within one, so one busy channel cannot starve the others.

The breaker counts calls that failed after their retries: after
``breaker_failures`` in a row the engine is open for ``breaker_cooldown_s``,
and its calls go to a fallback or fail at once; then one probe call is let
through, and its outcome closes or opens the breaker again.
"""

from __future__ import annotations

import email.utils
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from datetime import datetime

import anyio

from ..org import EngineConfig
from ..protocol import BreakerState, EngineStatus, WaitReason
from ._base import WaitSink

# "1s", "6m0s", "20ms", "1h2m3.5s": OpenAI's x-ratelimit-reset-* durations.
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_OVERLOAD = frozenset({503, 529})


class _Bucket:
    """``per_minute`` units, refilling continuously, at most a minute's worth held."""

    def __init__(self, per_minute: int, now: float) -> None:
        self.capacity = float(per_minute)
        self.level = float(per_minute)
        self._rate = per_minute / 60.0
        self._at = now

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self._at) * self._rate)
        self._at = now

    def wait_for(self, units: float) -> float:
        """Seconds until *units* are there (a request larger than the bucket
        waits for a full one)."""
        missing = min(units, self.capacity) - self.level
        return max(0.0, missing / self._rate)


class _Waiter:
    __slots__ = ("event", "granted", "key", "tokens")

    def __init__(self, key: str, tokens: int) -> None:
        self.key = key
        self.tokens = tokens
        self.event = anyio.Event()
        self.granted = False

    def wake(self) -> None:
        """Wake the call to look again at what it waits for."""
        self.event.set()
        self.event = anyio.Event()


class Admission:
    """The limits and the breaker of one engine."""

    def __init__(self, config: EngineConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self._config = config
        self._clock = clock
        now = clock()
        rpm, tpm = config.requests_per_minute, config.input_tokens_per_minute
        self._requests = _Bucket(rpm, now) if rpm is not None else None
        self._tokens = _Bucket(tpm, now) if tpm is not None else None
        self._inflight = 0
        # Until when the provider said to wait, and why.
        self._paused_until = 0.0
        self._paused_for: WaitReason = "rate_limited"
        # Waiting calls, per session, and the sessions in turn order.
        self._queues: dict[str, deque[_Waiter]] = {}
        self._order: deque[str] = deque()
        self._failures = 0
        self._open_until = 0.0
        self._probing = False

    def __repr__(self) -> str:
        return f"Admission({self._config.kind}, {self._inflight} in flight, {self.queued} queued)"

    @property
    def queued(self) -> int:
        return sum(len(waiting) for waiting in self._queues.values())

    # The breaker ---------------------------------------------------------

    def breaker(self) -> tuple[BreakerState, float | None]:
        """The breaker's state, and for an open one the seconds left."""
        now = self._clock()
        if self._open_until > now:
            return "open", self._open_until - now
        if self._failures >= self._config.breaker_failures:
            return "half-open", None
        return "closed", None

    def let_through(self) -> float | None:
        """``None`` if a call may go to this engine now (the probe of a
        half-open breaker is let through once); else the seconds until one may."""
        state, retry_in = self.breaker()
        if state == "open":
            return retry_in
        if state == "half-open":
            if self._probing:
                return self._config.breaker_cooldown_s
            self._probing = True
        return None

    def abandoned(self) -> None:
        """A call let through ended with no outcome (cut short by a stop)."""
        self._probing = False

    def succeeded(self) -> None:
        self._failures = 0
        self._probing = False

    def failed(self) -> None:
        """A call failed after its retries: the breaker counts it."""
        self._failures += 1
        self._probing = False
        if self._failures >= self._config.breaker_failures:
            self._open_until = self._clock() + self._config.breaker_cooldown_s

    def status(self, name: str) -> EngineStatus:
        state, retry_in = self.breaker()
        return EngineStatus(
            name=name,
            kind=self._config.kind,
            breaker=state,
            inflight=self._inflight,
            queued=self.queued,
            failures=self._failures,
            retry_in_s=None if retry_in is None else round(retry_in, 3),
        )

    # Limits --------------------------------------------------------------

    @asynccontextmanager
    async def slot(self, key: str, tokens: int, on_wait: WaitSink | None) -> AsyncIterator[None]:
        """Hold one call's place for *key* (a session or run), sending about
        *tokens* input tokens; *on_wait* hears why, whenever the call waits."""
        waiter = _Waiter(key, tokens)
        self._queues.setdefault(key, deque()).append(waiter)
        if key not in self._order:
            self._order.append(key)
        try:
            self._dispatch()
            told: WaitReason | None = None
            while not waiter.granted:
                reason, retry_in = self._why_waiting()
                if on_wait is not None and reason != told:
                    told = reason
                    await on_wait(reason, retry_in)
                with anyio.move_on_after(retry_in if retry_in is not None else float("inf")):
                    await waiter.event.wait()
                self._dispatch()
        except BaseException:
            if waiter.granted:
                self._release()
            else:
                self._forget(waiter)
            raise
        try:
            yield
        finally:
            self._release()

    def paused(self) -> float | None:
        """Seconds the provider said to wait still to go, if it did."""
        left = self._paused_until - self._clock()
        return left if left > 0 else None

    def pause(self, seconds: float, reason: WaitReason) -> None:
        """The provider said to send nothing for *seconds*."""
        until = self._clock() + seconds
        if until > self._paused_until:
            self._paused_until, self._paused_for = until, reason

    def observe(self, status: int, headers: Mapping[str, str]) -> None:
        """Tighten the limits by what a response says: ``retry-after`` on a
        429 or an overload, and rate-limit headers with nothing left."""
        if status == 429 or status in _OVERLOAD:
            retry_after = retry_after_s(headers)
            if retry_after is not None:
                self.pause(retry_after, "overloaded" if status in _OVERLOAD else "rate_limited")
        reset = _exhausted_until(headers)
        if reset is not None:
            self.pause(reset, "rate_limited")

    def _why_waiting(self) -> tuple[WaitReason, float | None]:
        now = self._clock()
        if self._paused_until > now:
            return self._paused_for, self._paused_until - now
        head = self._head()
        waits = [
            bucket.wait_for(units)
            for bucket, units in ((self._requests, 1), (self._tokens, head.tokens if head else 0))
            if bucket is not None
        ]
        if waits and max(waits) > 0:
            return "rate_limited", max(waits)
        return "queued", None

    def _head(self) -> _Waiter | None:
        return self._queues[self._order[0]][0] if self._order else None

    def _dispatch(self) -> None:
        """Start the calls that may start, in turn order."""
        now = self._clock()
        for bucket in (self._requests, self._tokens):
            if bucket is not None:
                bucket.refill(now)
        limit = self._config.max_inflight
        while (head := self._head()) is not None:
            if (limit is not None and self._inflight >= limit) or self._paused_until > now:
                return
            if self._requests is not None and self._requests.wait_for(1):
                return
            if self._tokens is not None and self._tokens.wait_for(head.tokens):
                return
            if self._requests is not None:
                self._requests.level -= 1
            if self._tokens is not None:
                self._tokens.level -= min(head.tokens, self._tokens.capacity)
            self._inflight += 1
            self._take(head)

    def _take(self, waiter: _Waiter) -> None:
        waiting = self._queues[waiter.key]
        waiting.popleft()
        self._order.popleft()
        if waiting:
            self._order.append(waiter.key)
        else:
            del self._queues[waiter.key]
        waiter.granted = True
        waiter.event.set()

    def _forget(self, waiter: _Waiter) -> None:
        waiting = self._queues.get(waiter.key)
        if waiting is not None and waiter in waiting:
            waiting.remove(waiter)
            if not waiting:
                del self._queues[waiter.key]
                self._order.remove(waiter.key)
        self._dispatch()

    def _release(self) -> None:
        self._inflight -= 1
        self._dispatch()
        # The head may wait for a bucket or a pause: wake it to take the
        # time it must wait again.
        head = self._head()
        if head is not None:
            head.wake()


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``retry-after`` (seconds or a date)."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        try:
            return max(0.0, float(raw_ms) / 1000)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _exhausted_until(headers: Mapping[str, str]) -> float | None:
    """Seconds until a limit the headers report as used up resets, if any."""
    waits = []
    for kind in ("requests", "tokens", "input-tokens"):
        remaining = headers.get(f"anthropic-ratelimit-{kind}-remaining")
        if remaining == "0":
            reset = headers.get(f"anthropic-ratelimit-{kind}-reset")
            waits.append(_until_timestamp(reset))
        remaining = headers.get(f"x-ratelimit-remaining-{kind}")
        if remaining == "0":
            waits.append(_duration_s(headers.get(f"x-ratelimit-reset-{kind}")))
    known = [w for w in waits if w is not None]
    return max(known) if known else None


def _until_timestamp(raw: str | None) -> float | None:
    """Seconds until an RFC 3339 time (Anthropic's reset headers)."""
    if raw is None:
        return None
    try:
        when = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    return max(0.0, when.timestamp() - time.time())


def _duration_s(raw: str | None) -> float | None:
    """Seconds of an OpenAI duration such as ``6m0s`` or ``20ms``."""
    if not raw:
        return None
    parts = _DURATION.findall(raw)
    if not parts or "".join(f"{n}{u}" for n, u in parts) != raw:
        return None
    return sum(float(number) * _UNIT_S[unit] for number, unit in parts)
