"""A fault-injecting HTTP proxy, in front of the provider simulator or a real server.

Each request it takes is forwarded to the upstream server, or answered with
the fault its plan names for it:

- ``429`` with ``retry-after``, ``529`` (Anthropic's ``overloaded_error``),
  ``500``, ``502``, ``503`` (without): an error status with the provider's
  error body;
- ``reset``: the connection closed before any header;
- ``stall``: nothing at all, until the client gives up;
- ``stall-mid-stream``: the upstream's headers and first bytes, then nothing;
- ``truncate``: the upstream's headers and first bytes, then the connection closed.

The plan is a function of the request's number, so a test or a benchmark
decides exactly which requests fail (a seeded random one, or a burst).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Literal

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

__all__ = ("Fault", "FaultProxy", "Plan", "fault_proxy")

Fault = Literal["429", "529", "500", "502", "503", "reset", "stall", "stall-mid-stream", "truncate"]
Plan = Callable[[int], Fault | None]

# Bytes of the upstream's body passed on before a mid-stream fault.
_BODY_BEFORE_FAULT = 200
_HEAD_LIMIT = 65536


class FaultProxy:
    """The proxy's address, and what it did to each request."""

    def __init__(
        self, port: int, upstream: tuple[str, int], plan: Plan, retry_after: float
    ) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.upstream = upstream
        self.plan = plan
        self.retry_after = retry_after
        self.faults: list[Fault | None] = []

    def __repr__(self) -> str:
        return f"FaultProxy({self.url} -> {self.upstream}, {len(self.faults)} requests)"

    async def handle(self, client: anyio.abc.SocketStream) -> None:
        async with client:
            reader = BufferedByteReceiveStream(client)
            while True:
                try:
                    head = await reader.receive_until(b"\r\n\r\n", _HEAD_LIMIT)
                except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError):
                    return
                body = await reader.receive_exactly(_content_length(head))
                fault = self.plan(len(self.faults))
                self.faults.append(fault)
                if not await self._answer(client, head, body, fault):
                    return

    async def _answer(
        self, client: anyio.abc.SocketStream, head: bytes, body: bytes, fault: Fault | None
    ) -> bool:
        """Answer one request; whether the connection may take another."""
        match fault:
            case "reset":
                return False
            case "stall":
                await anyio.sleep_forever()
            case "429" | "529" | "500" | "502" | "503":
                await client.send(self._error(int(fault)))
                return True
        return await self._forward(client, head, body, fault)

    def _error(self, status: int) -> bytes:
        kind = {429: "rate_limit_error", 529: "overloaded_error"}.get(status, "api_error")
        payload = json.dumps(
            {"type": "error", "error": {"type": kind, "message": f"injected {status}"}}
        ).encode()
        headers = [
            f"HTTP/1.1 {status} Injected",
            "content-type: application/json",
            f"content-length: {len(payload)}",
        ]
        # As the providers do: a rate limit says when to come back, an
        # overload or an outage does not.
        if status == 429:
            headers.append(f"retry-after: {self.retry_after:g}")
        return ("\r\n".join(headers) + "\r\n\r\n").encode() + payload

    async def _forward(
        self, client: anyio.abc.SocketStream, head: bytes, body: bytes, fault: Fault | None
    ) -> bool:
        """Relay the request upstream on a connection of its own, and its
        response back until it ends (or the fault cuts it); whether the
        client's connection may take another request."""
        async with await anyio.connect_tcp(*self.upstream) as upstream:
            await upstream.send(head + b"\r\n\r\n" + body)
            reader = BufferedByteReceiveStream(upstream)
            response_head = await reader.receive_until(b"\r\n\r\n", _HEAD_LIMIT)
            if fault is None:
                await client.send(response_head + b"\r\n\r\n")
                await _relay_body(reader, client, response_head)
                return True
            await client.send(response_head + b"\r\n\r\n")
            sent = 0
            while sent < _BODY_BEFORE_FAULT:
                chunk = await reader.receive(_BODY_BEFORE_FAULT - sent)
                await client.send(chunk)
                sent += len(chunk)
            if fault == "stall-mid-stream":
                await anyio.sleep_forever()
            return False


async def _relay_body(
    reader: BufferedByteReceiveStream, client: anyio.abc.SocketStream, head: bytes
) -> None:
    """The body of a response with *head*: its content-length, or its chunks
    up to the last (size 0)."""
    length = _content_length(head)
    if length or b"chunked" not in head.lower():
        await client.send(await reader.receive_exactly(length))
        return
    while True:
        size_line = await reader.receive_until(b"\r\n", _HEAD_LIMIT)
        size = int(size_line.split(b";")[0], 16)
        data = await reader.receive_exactly(size + 2)
        await client.send(size_line + b"\r\n" + data)
        if size == 0:
            return


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return 0


@asynccontextmanager
async def fault_proxy(
    upstream: tuple[str, int], plan: Plan, retry_after: float = 0.05
) -> AsyncIterator[FaultProxy]:
    """The proxy on a loopback port, in front of *upstream* (host, port)."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    proxy = FaultProxy(port, upstream, plan, retry_after)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, proxy.handle)
        yield proxy
        tg.cancel_scope.cancel()
