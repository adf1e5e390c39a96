"""The client side of the tool gateway: rosterd forwards calls, never executes them.

The gateway named by ``[gateway] socket`` is a Unix socket speaking
JSON-RPC 2.0, one object per line, like rosterd's own. Each validated call
is one connection and one request::

    {"jsonrpc":"2.0","id":1,"method":"tool.call","params":{"run":…,"worker":…,
     "connection":…,"method":…,"host":…,"path":…,"query":{…},"body":…}}

answered by ``{"result":{"status":"ok"|"refused"|"error","text":…}}`` or a
JSON-RPC error (taken as an ``error`` result). The gateway checks the call
and injects the credential; rosterd holds none. Every failure to reach or
understand it becomes a result the model reads, never a failed turn.
"""

from __future__ import annotations

import logging
from typing import Literal

import anyio
import msgspec
from anyio.streams.buffered import BufferedByteReceiveStream

from ..compiler import ToolRequest, ToolStatus
from ..org import GatewayConfig

log = logging.getLogger("rosterd.gateway")

NO_GATEWAY = "no gateway: enforcement is external"
_LINE_LIMIT = 1 << 20


class _CallParams(ToolRequest, frozen=True):
    """``tool.call``'s params: the run and worker, then the request."""

    run: str
    worker: str


class _Request(msgspec.Struct, frozen=True):
    jsonrpc: str
    id: int
    method: str
    params: _CallParams


class _Result(msgspec.Struct, frozen=True):
    status: Literal["ok", "refused", "error"]
    text: str = ""


class _ErrorObject(msgspec.Struct, frozen=True):
    code: int = 0
    message: str = ""


class _Reply(msgspec.Struct, frozen=True):
    result: _Result | None = None
    error: _ErrorObject | None = None


_encode = msgspec.json.Encoder().encode
_decode_reply = msgspec.json.Decoder(_Reply).decode


class Gateway:
    """Forwards validated calls to the configured gateway socket."""

    def __init__(self, config: GatewayConfig) -> None:
        self._config = config

    def __repr__(self) -> str:
        return f"Gateway({self._config.socket!r})"

    async def call(self, run: str, worker: str, request: ToolRequest) -> tuple[ToolStatus, str]:
        """The gateway's answer to *request*, as a result status and text."""
        path = self._config.socket
        if path is None:
            return "refused", NO_GATEWAY
        params = _CallParams(run, worker, **msgspec.structs.asdict(request))
        line = _encode(_Request(jsonrpc="2.0", id=1, method="tool.call", params=params)) + b"\n"
        timeout = self._config.timeout_s
        with anyio.move_on_after(timeout):
            try:
                answer = await self._exchange(path, line)
            except (OSError, anyio.BrokenResourceError) as exc:
                log.warning("gateway %s unreachable: %s", path, exc)
                return "error", f"the gateway at {path} is unreachable: {exc}"
            except (anyio.EndOfStream, anyio.IncompleteRead):
                return "error", "the gateway closed the connection without an answer"
            except anyio.DelimiterNotFound:
                return "error", f"the gateway's answer is longer than {_LINE_LIMIT} bytes"
            return _reading(answer)
        log.warning("gateway %s: no answer within %gs", path, timeout)
        return "timeout", f"the gateway did not answer within {timeout:g}s"

    async def _exchange(self, path: str, line: bytes) -> bytes:
        async with await anyio.connect_unix(path) as stream:
            await stream.send(line)
            return await BufferedByteReceiveStream(stream).receive_until(b"\n", _LINE_LIMIT)


def _reading(answer: bytes) -> tuple[ToolStatus, str]:
    try:
        reply = _decode_reply(answer)
    except (msgspec.DecodeError, RecursionError) as exc:
        # Nested deeper than the decoder goes (in a field it skips, say):
        # valid JSON, but no reply the host can read.
        return "error", f"the gateway's answer is not a valid reply: {exc}"
    if reply.error is not None:
        return "error", f"gateway error {reply.error.code}: {reply.error.message}"
    if reply.result is None:
        return "error", "the gateway's answer has neither result nor error"
    return reply.result.status, reply.result.text
