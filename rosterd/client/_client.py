"""An async JSON-RPC client for the daemon's Unix socket.

Used by the CLI and the tests; frontends in Python can use it too.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import msgspec
from anyio.abc import AsyncResource, SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

from .._errors import ProtocolError, RosterError

__all__ = ("RosterClient", "RpcError")

_LINE_LIMIT = 16 << 20

OnNotification = Callable[[str, Any], Awaitable[None]]


class RpcError(RosterError):
    """An error reply from the daemon, with its JSON-RPC code and data."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data


class _Reply(msgspec.Struct):
    jsonrpc: str = "2.0"
    id: int | str | None = None
    method: str | None = None
    params: Any = None
    result: Any = None
    error: dict[str, Any] | None = None


class RosterClient(AsyncResource):
    """One connection; calls are made one at a time, as the daemon serves them."""

    def __init__(self, stream: SocketStream, path: Path) -> None:
        self._stream = stream
        self._receive = BufferedByteReceiveStream(stream)
        self._path = path
        self._ids = itertools.count(1)
        self._lock = anyio.Lock()
        self._decoder = msgspec.json.Decoder(_Reply)

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

    async def call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        on_notification: OnNotification | None = None,
    ) -> Any:
        """Call *method* and return its result; notifications go to *on_notification*."""
        request_id = next(self._ids)
        line = msgspec.json.encode(
            {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}
        )
        async with self._lock:
            await self._send(line + b"\n")
            while True:
                reply = await self._read()
                if reply.method is not None and reply.id is None:
                    if on_notification is not None:
                        await on_notification(reply.method, reply.params)
                    continue
                if reply.error is not None:
                    error = reply.error
                    raise RpcError(
                        int(error.get("code", 0)), str(error.get("message", "")), error.get("data")
                    )
                return reply.result

    async def send_raw(self, data: bytes) -> Any:
        """Send raw bytes and return the next reply decoded (for protocol tests)."""
        async with self._lock:
            await self._send(data)
            return msgspec.json.decode(await self._line())

    async def _send(self, data: bytes) -> None:
        try:
            await self._stream.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            raise RosterError("the daemon closed the connection") from None

    async def _read(self) -> _Reply:
        try:
            return self._decoder.decode(await self._line())
        except msgspec.DecodeError as exc:
            raise ProtocolError(f"bad reply from daemon: {exc}", code=-32700) from None

    async def _line(self) -> bytes:
        try:
            return await self._receive.receive_until(b"\n", _LINE_LIMIT)
        except (anyio.IncompleteRead, anyio.EndOfStream, anyio.BrokenResourceError):
            raise RosterError("the daemon closed the connection") from None

    async def aclose(self) -> None:
        await self._stream.aclose()
