"""The IRC side of the bridge: one connection that stays up.

Built on the ``irc`` library's asyncio client (``irc.client_aio``): it
parses the protocol, answers the server's pings, dequotes CTCP and decodes
lines leniently (a line that is not UTF-8 arrives with replacement
characters instead of breaking the connection). This module keeps the
connection up: it joins the mapped channels on welcome, takes another nick
while its own is taken (and asks for it back), reconnects with backoff when
the server goes away, pings a server that has been silent for
``keepalive_s`` and leaves one still silent as long again (a half-open
connection raises no error: only silence tells), and sends what the
bridge says through one queue paced by a token bucket: ``send_rate``'s
burst of lines at once, then one per its interval (see ``_budget``), so
replies, however many, never flood the server into dropping the bridge. Its time is
its clock: the pace, the keepalive and the reconnection backoff.
"""

from __future__ import annotations

import asyncio
import logging
import math
import ssl
from collections import deque
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Literal

import anyio
import irc.client
import irc.client_aio
import irc.connection
import irc.strings
import msgspec
from anyio.abc import TaskGroup
from jaraco.stream.buffer import LenientDecodingLineBuffer

from .._bridge_defaults import SEND_RATE, Rate
from .._clock import LOOP_CLOCK, Clock
from ._budget import TokenBucket

log = logging.getLogger("rosterd.bridge")

# Lines waiting to be said while the server is away: the oldest go first.
_OUTBOX = 500


class IrcMessage(msgspec.Struct, frozen=True):
    """A line someone said: in a channel (``target``), or to us (``private``);
    a ``notice`` is one that must never be answered (RFC 2812)."""

    target: str
    nick: str
    mask: str
    text: str
    private: bool = False
    notice: bool = False

    @property
    def host(self) -> str:
        """The host of ``mask`` (``nick!user@host``): the address the server
        saw the speaker connect from, or the cloak it shows instead."""
        return self.mask.rpartition("@")[2]


# How a line is sent: said, or a notice (an automatic reply).
Command = Literal["privmsg", "notice"]


class _TolerantConnection(irc.client_aio.AioConnection):  # type: ignore[misc]
    """A connection that passes over a line it cannot parse (a PRIVMSG
    without text, say) instead of letting it end the connection."""

    def _process_line(self, line: str) -> None:
        try:
            super()._process_line(line)
        except (ValueError, IndexError, KeyError) as exc:
            log.warning("passed over a malformed line from the server (%s): %.200r", exc, line)


class IrcLink:
    """One connection to *server*, kept up until the block ends; what people
    say arrives on ``messages``."""

    def __init__(
        self,
        host: str,
        port: int,
        nick: str,
        channels: Sequence[str],
        *,
        tls: bool = False,
        send_rate: Rate = SEND_RATE,
        backoff_s: float = 1.0,
        keepalive_s: float = 60.0,
        clock: Clock = LOOP_CLOCK,
    ) -> None:
        self.host = host
        self.port = port
        self.wanted_nick = nick
        self.channels = tuple(channels)
        self._tls = tls
        self._pace = TokenBucket(send_rate, clock())
        self._backoff = backoff_s
        self._keepalive = keepalive_s
        self._clock = clock
        # When the server last said anything, or the connection began.
        self._heard_at = clock()
        self._send, self.messages = anyio.create_memory_object_stream[IrcMessage](math.inf)
        self._outbox: deque[tuple[Command, str, str]] = deque(maxlen=_OUTBOX)
        # Lines dropped from the full outbox since it last had room.
        self._dropped = 0
        self._queued = anyio.Event()
        self._lost = anyio.Event()
        self._joined = anyio.Event()
        # irc.client_aio.AioConnection, once connecting.
        self._connection: Any = None
        self._group: TaskGroup | None = None
        self._in: set[str] = set()
        # How many times the link has been in all its channels: each
        # reconnection that rejoins them adds one.
        self.joins = 0
        self._rejoined = anyio.Event()
        # Set once the link has taken its own nick back from another.
        self.renamed = anyio.Event()

    def __repr__(self) -> str:
        return f"IrcLink({self.host}:{self.port}, {self.nick!r}, joined={self._joined.is_set()})"

    @property
    def nick(self) -> str:
        connection = self._connection
        return connection.get_nickname() if connection is not None else self.wanted_nick

    async def __aenter__(self) -> IrcLink:
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        self._group.start_soon(self._stay_connected)
        self._group.start_soon(self._say_queued)
        self._group.start_soon(self._keep_alive)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._group is not None
        self._group.cancel_scope.cancel()
        if self._connection is not None and self._connection.is_connected():
            self._connection.disconnect("bridge stopping")
        self._send.close()
        self.messages.close()
        return await self._group.__aexit__(exc_type, exc, tb)

    async def joined(self, times: int = 1) -> None:
        """Wait until the link has been in all its channels *times* times
        (the first connection, then each reconnection)."""
        while self.joins < times:
            await self._rejoined.wait()

    def say(self, target: str, line: str, command: Command = "privmsg") -> None:
        """Queue *line* (one IRC line, already fitted) for *target*, said or
        as a notice. Past ``_OUTBOX`` lines waiting, the oldest goes."""
        if len(self._outbox) == _OUTBOX:
            if not self._dropped:
                log.warning("%d lines wait to be said: the oldest are dropped", _OUTBOX)
            self._dropped += 1
        elif self._dropped:
            log.warning("the outbox has room again: %d lines were dropped", self._dropped)
            self._dropped = 0
        self._outbox.append((command, target, line))
        self._queued.set()

    def line_budget(self, target: str) -> int:
        """Bytes of text a PRIVMSG to *target* may carry: the server relays it
        with our ``:nick!user@host`` in front, within 512 bytes."""
        prefix = f":{self.nick}!{self.nick[:10]}@{'h' * 63} PRIVMSG {target} :"
        return 512 - 2 - len(prefix.encode())

    async def _stay_connected(self) -> None:
        delay = self._backoff
        while True:
            try:
                await self._connect()
            except (OSError, irc.client.ServerConnectionError) as exc:
                log.warning(
                    "cannot reach %s:%d (%s); retrying in %.0f s", self.host, self.port, exc, delay
                )
                await self._clock.sleep(delay)
                delay = min(delay * 2, 60.0)
                continue
            delay = self._backoff
            await self._lost.wait()
            log.warning("lost %s:%d; reconnecting", self.host, self.port)
            self._joined = anyio.Event()
            await self._clock.sleep(self._backoff)

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        reactor = irc.client_aio.AioReactor(loop=loop)
        reactor.connection_class = _TolerantConnection
        for kind in ("welcome", "nicknameinuse", "erroneusnickname", "join", "disconnect"):
            reactor.add_global_handler(kind, self._on_state)
        for kind in ("quit", "nick"):
            reactor.add_global_handler(kind, self._on_nick_freed)
        for kind in ("pubmsg", "privmsg", "action", "pubnotice", "privnotice"):
            reactor.add_global_handler(kind, self._on_message)
        reactor.add_global_handler("all_raw_messages", self._on_line)
        connection = reactor.server()
        connection.buffer_class = LenientDecodingLineBuffer
        factory = (
            irc.connection.AioFactory(ssl=ssl.create_default_context())
            if self._tls
            else irc.connection.AioFactory()
        )
        self._lost = anyio.Event()
        self._connection = connection
        self._heard_at = self._clock()
        await connection.connect(self.host, self.port, self.wanted_nick, connect_factory=factory)

    def _on_state(self, connection: Any, event: Any) -> None:
        if connection is not self._connection:
            return
        match event.type:
            case "welcome":
                for channel in self.channels:
                    connection.join(channel)
                if not self.channels:
                    self._in_channels()
            case "nicknameinuse" | "erroneusnickname":
                # Taken (a ghost of ours, or someone else): another for now.
                connection.nick(connection.get_nickname() + "_")
            case "join":
                if irc.client.NickMask(event.source).nick == connection.get_nickname():
                    self._in.add(irc.strings.IRCFoldedCase(event.target))
                    if {irc.strings.IRCFoldedCase(c) for c in self.channels} <= self._in:
                        self._in_channels()
            case "disconnect":
                self._in = set()
                self._lost.set()

    def _on_line(self, connection: Any, event: Any) -> None:
        if connection is self._connection:
            self._heard_at = self._clock()

    async def _keep_alive(self) -> None:
        """Ping the server once it has been silent for ``keepalive_s``; leave
        it (and so reconnect) once silent for twice that."""
        while True:
            await self._clock.sleep(self._keepalive / 2)
            connection = self._connection
            if connection is None or not connection.is_connected():
                continue
            silent = self._clock() - self._heard_at
            if silent >= 2 * self._keepalive:
                log.warning("%s:%d silent for %.0f s; leaving it", self.host, self.port, silent)
                connection.disconnect("ping timeout")
            elif silent >= self._keepalive:
                connection.ping("rosterd")

    def _on_nick_freed(self, connection: Any, event: Any) -> None:
        """Take our own nick back once whoever held it leaves or renames."""
        if connection is not self._connection or not event.source:
            return
        held_by = irc.client.NickMask(event.source).nick
        wanted = self.wanted_nick
        ours = connection.get_nickname()
        if event.type == "nick" and ours in (held_by, event.target):
            # The server confirms a change of our own nick (the library notes
            # it first): back to the one we want, or not.
            if irc.strings.lower(event.target) == irc.strings.lower(wanted):
                self.renamed.set()
        elif irc.strings.lower(held_by) == irc.strings.lower(wanted) != irc.strings.lower(ours):
            connection.nick(wanted)

    def _in_channels(self) -> None:
        self._joined.set()
        self.joins += 1
        self._rejoined.set()
        self._rejoined = anyio.Event()

    def _on_message(self, connection: Any, event: Any) -> None:
        if connection is not self._connection or not event.arguments or not event.source:
            return
        source = irc.client.NickMask(event.source)
        private = event.type in ("privmsg", "privnotice")
        text = event.arguments[0]
        if event.type == "action":
            text = f"* {source.nick} {text}"
        target = source.nick if private else event.target
        notice = event.type.endswith("notice")
        # Plain strings: the library's are str subclasses.
        message = IrcMessage(target[:], source.nick[:], source[:], text[:], private, notice)
        self._send.send_nowait(message)

    async def _say_queued(self) -> None:
        """Send the outbox while connected, as fast as the bucket allows."""
        while True:
            if not self._outbox:
                self._queued = anyio.Event()
                await self._queued.wait()
                continue
            await self._joined.wait()
            wait = self._pace.wait(self._clock())
            if wait > 0:
                # Not looked at again after: the bucket has the token then.
                await self._clock.sleep(wait)
            connection = self._connection
            if connection is None or not connection.is_connected():
                await self._clock.sleep(self._backoff)
                continue
            command, target, line = self._outbox.popleft()
            try:
                if command == "notice":
                    connection.notice(target, line)
                else:
                    connection.privmsg(target, line)
            except irc.client.ServerNotConnectedError:
                self._outbox.appendleft((command, target, line))
                continue
            except (irc.client.MessageTooLong, irc.client.InvalidCharacters) as exc:
                log.warning("a line the server would refuse was dropped: %s", exc)
                continue
            self._pace.spend(self._clock())
