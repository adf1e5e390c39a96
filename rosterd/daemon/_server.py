"""The Unix-socket JSON-RPC server: framing, peer checks, dispatch, draining.

One request is handled at a time per connection, in order; open more
connections for concurrency. A bad line gets an error reply and the
connection keeps working. A client that stops reading loses its stream
(its connection is dropped), never the turn: the turn completes and is
recorded for every other frontend of the session.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
import struct
from collections.abc import Awaitable, Callable, Iterable

import anyio
import msgspec
from anyio.abc import SocketAttribute, SocketListener, SocketStream, TaskGroup, TaskStatus
from anyio.streams.buffered import BufferedByteReceiveStream

from .._errors import RosterError
from ..protocol import (
    BUSY,
    FORBIDDEN,
    INTERNAL_ERROR,
    INVALID_REQUEST,
    LINE_LIMIT,
    BadRequest,
    ErrorObject,
    decode_request,
    encode_error,
    encode_notification,
    encode_result,
    error_object,
)
from ._methods import Methods

log = logging.getLogger("rosterd.server")

# accept() errors that mean "no descriptor or buffer free right now".
_FD_EXHAUSTED = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_ACCEPT_BACKOFF_MIN_S = 0.05
_ACCEPT_BACKOFF_MAX_S = 1.0
# Slots beyond max_connections and the per-uid cap that only the daemon's own uid
# and root may take, so `roster status` answers while every ordinary slot is held.
OWNER_RESERVED_SLOTS = 8

_CRED = struct.Struct("3i")
# Notifications a client has not been sent yet, in bytes, before the turn
# that makes them waits for the client to take them.
_QUEUED_LIMIT = 256 * 1024


def peer_credentials(stream: SocketStream) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end, from SO_PEERCRED."""
    raw: socket.socket = stream.extra(anyio.abc.SocketAttribute.raw_socket)
    data = raw.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size)
    pid, uid, gid = _CRED.unpack(data)
    return pid, uid, gid


class _Connection:
    """One client's end: what goes to it is written in order, under one lock.

    Notifications are queued, not written at once: those that come together
    (a burst of deltas) go in one write, and the turn goes on without
    waiting for the client. A reply is written after everything queued
    before it. When nothing is being written and the socket takes all that
    is queued at once, as it does for a client that keeps up, it is written
    right away, with no wait, lock or timeout; the rest waits its turn.
    """

    def __init__(
        self,
        stream: SocketStream,
        peer: tuple[int, int, int],
        send_timeout_s: float,
        group: TaskGroup,
    ) -> None:
        self.stream = stream
        self.peer = peer
        # A client that does not take a reply within this long is dropped.
        self.send_timeout_s = send_timeout_s
        self.idle_scope: anyio.CancelScope | None = None
        self.dead = False
        self._group = group
        self._loop = asyncio.get_running_loop()
        self._socket = stream.extra(SocketAttribute.raw_socket)
        self._queued: list[bytes] = []
        self._queued_bytes = 0
        self._flushing = False
        self._writing = anyio.Lock(fast_acquire=True)

    async def send(self, data: bytes) -> None:
        """Write *data*, after whatever is queued."""
        self._queued.append(data)
        await self._flush()

    async def notify(self, data: bytes) -> None:
        """Queue *data*, written with whatever else is queued by the time
        the event loop comes round to it."""
        self._queued.append(data)
        self._queued_bytes += len(data)
        if self._queued_bytes > _QUEUED_LIMIT:
            # A client slower than its stream holds up its own turn, rather
            # than have the daemon hold what it has not read.
            await self._flush()
        elif not self._flushing:
            self._flushing = True
            self._loop.call_soon(self._flush_soon)

    def _flush_soon(self) -> None:
        """The loop came round: what is queued goes out now, or, if the
        client is behind, in a task that waits for it."""
        if self._sent_at_once():
            self._flushing = False
        else:
            self._group.start_soon(self._flush_queued)

    async def _flush_queued(self) -> None:
        try:
            while self._queued:
                await self._flush()
        finally:
            self._flushing = False

    def _sent_at_once(self) -> bool:
        """Write what is queued now, if nothing else is being written and
        the socket takes it all; whether nothing is left to write. What it
        does not take stays queued, first."""
        if self._writing.locked():
            return False
        data = b"".join(self._queued)
        self._queued.clear()
        self._queued_bytes = 0
        if self.dead or not data:
            return True
        try:
            sent = self._socket.send(data)
        except BlockingIOError:
            sent = 0
        except OSError:
            self._drop()
            return True
        if sent == len(data):
            return True
        self._queued.append(data[sent:])
        self._queued_bytes = len(data) - sent
        return False

    async def _flush(self) -> None:
        """Write what is queued: at once if the socket takes it, else under
        the lock, waiting for the client at most ``send_timeout_s``."""
        if self._sent_at_once():
            return
        async with self._writing:
            data = b"".join(self._queued)
            self._queued.clear()
            self._queued_bytes = 0
            if self.dead or not data:
                return
            try:
                with anyio.fail_after(self.send_timeout_s):
                    await self.stream.send(data)
            except (TimeoutError, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                self._drop()

    def _drop(self) -> None:
        log.info("dropping client pid %d: it stopped reading", self.peer[0])
        self.dead = True


class RpcServer:
    """Serves ``Methods`` on a listener until ``drain()``."""

    def __init__(
        self,
        methods: Methods,
        *,
        allow_uids: Iterable[int] | None,
        allow_gids: Iterable[int],
        max_connections: int,
        send_timeout_s: float,
        max_connections_per_uid: int | None = None,
        idle_timeout_s: float = 60.0,
        on_accept: Callable[[str | None], Awaitable[object]] | None = None,
    ) -> None:
        """*on_accept* hears why accepting stopped (out of descriptors), and
        ``None`` once it goes on: the daemon passes it to systemd's status."""
        self._methods = methods
        self._allow_uids = frozenset(allow_uids if allow_uids is not None else (os.getuid(),))
        self._allow_gids = frozenset(allow_gids)
        self._max_connections = max_connections
        self._per_uid = max_connections_per_uid or max(1, max_connections // 4)
        self._send_timeout_s = send_timeout_s
        self._idle_timeout_s = idle_timeout_s
        self._per_uid_count: dict[int, int] = {}
        self._connections: set[_Connection] = set()
        self._draining = False
        self._accept_scope = anyio.CancelScope()
        self._on_accept = on_accept
        self.stopped = anyio.Event()

    def __repr__(self) -> str:
        return f"RpcServer({len(self._connections)} connections)"

    @property
    def connections(self) -> int:
        return len(self._connections)

    async def serve(
        self, listener: SocketListener, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        try:
            async with anyio.create_task_group() as handlers, listener:
                with self._accept_scope:
                    task_status.started()
                    backoff = _ACCEPT_BACKOFF_MIN_S
                    while True:
                        try:
                            stream = await listener.accept()
                        except anyio.BrokenResourceError as exc:
                            # Out of descriptors is a state of the host, not of the
                            # listener: wait for connections to close, keep serving.
                            cause = exc.__cause__
                            if not isinstance(cause, OSError) or cause.errno not in _FD_EXHAUSTED:
                                raise
                            if backoff == _ACCEPT_BACKOFF_MIN_S:
                                problem = f"accept failed ({cause.strerror}); backing off"
                                log.warning("%s", problem)
                                if self._on_accept is not None:
                                    await self._on_accept(problem)
                            await anyio.sleep(backoff)
                            backoff = min(backoff * 2, _ACCEPT_BACKOFF_MAX_S)
                            continue
                        if backoff != _ACCEPT_BACKOFF_MIN_S and self._on_accept is not None:
                            await self._on_accept(None)
                        backoff = _ACCEPT_BACKOFF_MIN_S
                        handlers.start_soon(self._handle, stream)
                # Draining: handlers finish their current request, then return.
        finally:
            self.stopped.set()

    async def drain(self) -> None:
        """Stop accepting; idle connections close, busy ones finish their request."""
        self._draining = True
        self._accept_scope.cancel()
        for connection in list(self._connections):
            if connection.idle_scope is not None:
                connection.idle_scope.cancel()

    async def _handle(self, stream: SocketStream) -> None:
        async with stream, anyio.create_task_group() as group:
            try:
                peer = peer_credentials(stream)
            except OSError as exc:
                log.warning("refusing a client whose credentials cannot be read: %s", exc)
                return
            connection = _Connection(stream, peer, self._send_timeout_s, group)
            if not self._allowed(peer):
                log.warning("refused client pid %d uid %d gid %d", *peer)
                error = ErrorObject(FORBIDDEN, f"uid {peer[1]} is not allowed on this socket")
                await connection.send(encode_error(None, error))
                return
            busy = self._busy(peer[1])
            if busy is not None:
                await connection.send(encode_error(None, ErrorObject(BUSY, busy)))
                return
            self._connections.add(connection)
            uid = peer[1]
            self._per_uid_count[uid] = self._per_uid_count.get(uid, 0) + 1
            try:
                await self._serve_connection(connection)
            except Exception:
                # A bug in one connection must not take the daemon down;
                # cancellation is a BaseException and passes through.
                log.exception("dropping client pid %d after an internal error", peer[0])
            finally:
                self._connections.discard(connection)
                left = self._per_uid_count.pop(uid) - 1
                if left:
                    self._per_uid_count[uid] = left

    def _busy(self, uid: int) -> str | None:
        """Why a new connection from uid is refused, or None to admit it."""
        held = self._per_uid_count.get(uid, 0)
        total = len(self._connections)
        if held < self._per_uid and total < self._max_connections:
            return None
        if uid in (0, os.getuid()) and total < self._max_connections + OWNER_RESERVED_SLOTS:
            return None
        if total < self._max_connections:
            return f"uid {uid} holds {self._per_uid} connections; try again later"
        return "too many connections; try again later"

    def _allowed(self, peer: tuple[int, int, int]) -> bool:
        _, uid, gid = peer
        return uid in self._allow_uids or gid in self._allow_gids

    async def _serve_connection(self, connection: _Connection) -> None:
        receive = BufferedByteReceiveStream(connection.stream)
        while not self._draining and not connection.dead:
            line: bytes | None = None
            # Waiting for a whole line is idling; running the request it carries is not.
            with anyio.CancelScope(deadline=anyio.current_time() + self._idle_timeout_s) as scope:
                connection.idle_scope = scope
                try:
                    line = await receive.receive_until(b"\n", LINE_LIMIT)
                except anyio.DelimiterNotFound:
                    error = ErrorObject(INVALID_REQUEST, f"line exceeds {LINE_LIMIT} bytes")
                    await connection.send(encode_error(None, error))
                    if not await _skip_line(receive):
                        return
                    continue
                except (anyio.IncompleteRead, anyio.EndOfStream, anyio.BrokenResourceError):
                    return
                finally:
                    connection.idle_scope = None
            if line is None:  # draining, or no complete line within idle_timeout_s
                if not self._draining:
                    log.info("closing client pid %d: idle", connection.peer[0])
                return
            if len(line) > LINE_LIMIT:
                # receive_until may overshoot its limit by up to one read.
                error = ErrorObject(INVALID_REQUEST, f"line exceeds {LINE_LIMIT} bytes")
                await connection.send(encode_error(None, error))
                continue
            if line.strip():
                await self._dispatch(connection, line)

    async def _dispatch(self, connection: _Connection, line: bytes) -> None:
        try:
            request = decode_request(line)
        except BadRequest as exc:
            await connection.send(encode_error(exc.request_id, exc.error))
            return

        async def notify(method: str, params: object) -> None:
            await connection.notify(encode_notification(method, params))

        reply_id = None if request.id is msgspec.UNSET else request.id
        try:
            result = await self._methods.call(request.params, notify)
        except RosterError as exc:
            reply = encode_error(reply_id, error_object(exc))
        except Exception:
            # A bug must not take the daemon down or leave the client hanging;
            # cancellation is a BaseException and passes through.
            log.exception("internal error in %s", request.method)
            reply = encode_error(
                reply_id, ErrorObject(INTERNAL_ERROR, "internal error; see daemon log")
            )
        else:
            reply = encode_result(reply_id, result)
        if request.id is not msgspec.UNSET:
            await connection.send(reply)


async def _skip_line(receive: BufferedByteReceiveStream) -> bool:
    """Discard the rest of an over-long line; False if the client went away."""
    while True:
        try:
            chunk = await receive.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return False
        end = chunk.find(b"\n")
        if end >= 0:
            receive.feed_data(chunk[end + 1 :])
            return True
