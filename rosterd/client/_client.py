"""An async client for the daemon's Unix socket, typed by the protocol's
method table.

``request`` takes any method's params Struct (a ``protocol.Call``) and
returns its declared result type, so a method the protocol declares is
callable with no change here; the named methods (``session_send`` and
friends) are shorthands for the common calls. An error reply raises
``RpcError``. Used by the CLI and the tests; frontends in Python can use it
too.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import msgspec
from anyio.abc import AsyncResource, SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

from .. import protocol
from .._errors import ProtocolError, RosterError, RpcError
from ..compiler import ChannelMessage
from ..protocol import (
    INVALID_PARAMS,
    PARSE_ERROR,
    Call,
    Delta,
    Reply,
    Wait,
    decode_reply,
    encode_request,
)

_T = TypeVar("_T")

# Replies (a run's whole trace, say) may be longer than a request may be.
_LINE_LIMIT = 16 << 20

OnDelta = Callable[[Delta], Awaitable[None]]
OnWait = Callable[[Wait], Awaitable[None]]
OnNotification = Callable[[str, Any], Awaitable[None]]
_OnReply = Callable[[Reply], Awaitable[None]]


class RosterClient(AsyncResource):
    """One connection; calls are made one at a time, as the daemon serves them."""

    def __init__(self, stream: SocketStream, path: Path) -> None:
        self._stream = stream
        self._receive = BufferedByteReceiveStream(stream)
        self._path = path
        self._ids = itertools.count(1)
        self._lock = anyio.Lock()
        # The id of a call given up before its reply was read (cancelled, or
        # a callback raised): the daemon still answers it, first.
        self._unanswered: int | None = None

    def __repr__(self) -> str:
        return f"RosterClient({str(self._path)!r})"

    @classmethod
    async def connect(cls, path: Path) -> RosterClient:
        try:
            stream = await anyio.connect_unix(path)
        except OSError as exc:
            raise RosterError(
                f"cannot connect to rosterd at {path}: {exc.strerror or exc}; "
                "is the daemon running?"
            ) from None
        return cls(stream, path)

    async def daemon_status(self) -> protocol.StatusResult:
        return await self.request(protocol.DaemonStatus())

    async def session_open(self, worker: str, channel: str) -> protocol.SessionOpened:
        return await self.request(protocol.SessionOpen(worker, channel))

    async def session_send(
        self,
        session: str,
        text: str,
        sender: str = "operator",
        on_delta: OnDelta | None = None,
        on_wait: OnWait | None = None,
    ) -> protocol.TurnResult:
        """One turn; the reply streams to *on_delta* before the result
        returns, and *on_wait* hears why the turn waits, when it does."""
        return await self.request(
            protocol.SessionSend(session, text=text, sender=sender), on_delta, on_wait
        )

    async def session_close(self, session: str) -> protocol.Closed:
        return await self.request(protocol.SessionClose(session))

    async def run_direct(
        self,
        worker: str,
        text: str,
        sender: str = "operator",
        on_delta: OnDelta | None = None,
        on_wait: OnWait | None = None,
    ) -> protocol.TurnResult:
        return await self.request(
            protocol.RunDirect(worker, text=text, sender=sender), on_delta, on_wait
        )

    async def task_submit(self, worker: str, channel: str, text: str) -> protocol.TaskState:
        return await self.request(protocol.TaskSubmit(worker, channel, text))

    async def task_get(self, task: str, wait: float | None = None) -> protocol.TaskState:
        """The task; with *wait*, once it is done, failed or paused (or *wait* s ran out)."""
        return await self.request(protocol.TaskGet(task, wait))

    async def task_list(
        self, limit: int | None = None, before: str | None = None
    ) -> list[protocol.TaskState]:
        """Every task; with *limit*, the newest *limit* submitted before *before*."""
        return await self.request(protocol.TaskList(limit, before))

    async def channel_post(self, channel: str, sender: str, text: str) -> ChannelMessage:
        return await self.request(protocol.ChannelPost(channel, sender, text))

    async def memory_add(
        self, worker: str, text: str, channel: str | None = None
    ) -> protocol.MemoryNote:
        return await self.request(protocol.MemoryAdd(worker, text, channel))

    async def memory_list(
        self,
        worker: str,
        every: bool = False,
        limit: int | None = None,
        before: str | None = None,
    ) -> list[protocol.MemoryNote]:
        """The live notes of *worker*; with *every*, the retired ones too;
        with *limit*, the newest *limit* written before note *before*."""
        return await self.request(protocol.MemoryList(worker, every, limit, before))

    async def memory_forget(self, worker: str, note: str, because: str) -> protocol.MemoryNote:
        return await self.request(protocol.MemoryForget(worker, note, because))

    async def gate_file(
        self, worker: str, summary: str, channel: str | None = None, run: str | None = None
    ) -> protocol.GateState:
        return await self.request(protocol.GateFile(worker, summary, channel, run))

    async def gate_resolve(self, gate: str, outcome: str, note: str = "") -> protocol.GateState:
        return await self.request(protocol.GateResolve(gate, outcome, note))

    async def gate_list(
        self, worker: str | None = None, limit: int | None = None, before: str | None = None
    ) -> list[protocol.GateState]:
        """Every gate (of *worker*); with *limit*, the newest *limit* filed before *before*."""
        return await self.request(protocol.GateList(worker, limit, before))

    async def runs_list(
        self, limit: int | None = None, before: str | None = None
    ) -> list[protocol.RunInfo]:
        """Every run; with *limit*, the newest *limit* created before *before*."""
        return await self.request(protocol.RunsList(limit, before))

    async def runs_show(self, run: str) -> protocol.RunShown:
        return await self.request(protocol.RunsShow(run))

    async def runs_context(
        self, run: str, all: bool = False, after: int | None = None, limit: int | None = None
    ) -> protocol.ContextPage:
        """The latest turn's request, or with *all* a page of every turn's."""
        return await self.request(protocol.RunsContext(run, all, after, limit))

    async def call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        on_notification: OnNotification | None = None,
    ) -> Any:
        """Untyped: any method with any params, the result as plain JSON values.

        For protocol tests, and for methods of a newer daemon than this client.
        """

        async def notified(reply: Reply) -> None:
            if on_notification is not None and reply.method is not None:
                await on_notification(reply.method, msgspec.json.decode(reply.params))

        def request(request_id: int) -> bytes:
            envelope = {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": method,
                "params": params or {},
            }
            return msgspec.json.encode(envelope) + b"\n"

        return msgspec.json.decode(await self._exchange(request, notified))

    async def send_raw(self, data: bytes) -> Any:
        """Send raw bytes and return the next reply decoded (for protocol tests)."""
        async with self._lock:
            await self._skip_unanswered()
            await self._send(data)
            return msgspec.json.decode(await self._line())

    async def request(
        self,
        params: Call[_T],
        on_delta: OnDelta | None = None,
        on_wait: OnWait | None = None,
    ) -> _T:
        """Call the method *params* are the params of; its result, decoded
        as the method declares. A turn's deltas go to *on_delta* and its
        waits to *on_wait* as they arrive, before the result. A notification
        the method does not declare is a broken reply: ``ProtocolError``."""
        _check(params)
        method = params.method
        declared = type(params).notifications

        async def notified(reply: Reply) -> None:
            if reply.method not in declared:
                raise ProtocolError(
                    f"bad reply from daemon: {method} sends no {reply.method!r} notification",
                    code=PARSE_ERROR,
                )
            if on_delta is not None and reply.method == "turn.delta":
                await on_delta(_decode(reply.params, Delta, "turn.delta notification"))
            elif on_wait is not None and reply.method == "turn.wait":
                await on_wait(_decode(reply.params, Wait, "turn.wait notification"))

        result = await self._exchange(
            lambda request_id: encode_request(request_id, params), notified
        )
        decoded: _T = _decode(result, type(params).result, f"{method} reply")
        return decoded

    async def _exchange(
        self, request: Callable[[int], bytes], on_notification: _OnReply
    ) -> msgspec.Raw:
        """Send one request and return its undecoded result; notifications
        that arrive before it go to *on_notification*."""
        async with self._lock:
            await self._skip_unanswered()
            request_id = self._unanswered = next(self._ids)
            await self._send(request(request_id))
            while True:
                reply = await self._read()
                if reply.method is not None and reply.id is None:
                    await on_notification(reply)
                    continue
                self._unanswered = None
                if reply.error is not None:
                    error = reply.error
                    raise RpcError(error.code, error.message, error.data)
                return reply.result

    async def _skip_unanswered(self) -> None:
        """Read past what the daemon sends for a call given up midway (it
        serves a connection's calls in order): its notifications and reply
        would otherwise be taken for the next call's."""
        while self._unanswered is not None:
            reply = await self._read()
            if reply.method is None and reply.id == self._unanswered:
                self._unanswered = None

    async def _send(self, data: bytes) -> None:
        try:
            await self._stream.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            raise RosterError("the daemon closed the connection") from None

    async def _read(self) -> Reply:
        try:
            return decode_reply(await self._line())
        except msgspec.DecodeError as exc:
            raise ProtocolError(f"bad reply from daemon: {exc}", code=PARSE_ERROR) from None

    async def _line(self) -> bytes:
        try:
            return await self._receive.receive_until(b"\n", _LINE_LIMIT)
        except (
            anyio.IncompleteRead,
            anyio.EndOfStream,
            anyio.BrokenResourceError,
            anyio.ClosedResourceError,
        ):
            raise RosterError("the daemon closed the connection") from None
        except anyio.DelimiterNotFound:
            # The rest of that line would be read as the next reply: the
            # connection is of no further use, and nothing on it is awaited.
            self._unanswered = None
            await self._stream.aclose()
            raise ProtocolError(
                f"bad reply from daemon: a line longer than {_LINE_LIMIT} bytes",
                code=PARSE_ERROR,
            ) from None

    async def aclose(self) -> None:
        await self._stream.aclose()


def _check(params: Call[Any]) -> None:
    """Refuse, before sending, params the daemon would refuse: among them
    ``inf`` and ``nan``, which JSON lacks and would send as null."""
    try:
        msgspec.convert(msgspec.to_builtins(params), type(params))
    except msgspec.ValidationError as exc:
        raise RpcError(INVALID_PARAMS, f"invalid params: {exc}") from None


def _decode(raw: msgspec.Raw, kind: type[_T], what: str) -> _T:
    """A result of the expected shape; any other is the daemon's fault, not the caller's."""
    try:
        return msgspec.json.decode(raw, type=kind)
    except msgspec.ValidationError as exc:
        raise RosterError(f"unexpected {what} from the daemon: {exc}") from None
