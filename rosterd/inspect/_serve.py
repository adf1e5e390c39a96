"""Serving the inspector: one socket, uvicorn on the caller's event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator

import anyio
import uvicorn
from anyio.abc import TaskStatus
from uvicorn.protocols.http.h11_impl import H11Protocol

from .._errors import RosterError
from ..org import is_loopback, listen_address
from ._app import Stores, create_app

log = logging.getLogger("rosterd.inspect")
# Connections open at once: each holds a descriptor of the process, and in
# the daemon those are its turns' too (it keeps 64 beyond its clients').
MAX_CONNECTIONS = 32


def _bind(listen: str, token: str | None) -> socket.socket:
    """A listening socket for *listen*; off loopback only with a token."""
    try:
        host, port = listen_address(listen)
    except ValueError as exc:
        raise RosterError(str(exc)) from None
    if token is None and not is_loopback(host):
        raise RosterError(
            f"the inspector would listen on {host}, which is not loopback: give it a token "
            "(--token-file, or [inspect] token_file) so that only those who hold it read the runs"
        )
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise RosterError(f"the inspector cannot listen on {listen}: {exc.strerror}") from None
    sock.listen(128)
    return sock


class _Bounded(H11Protocol):
    """A connection that counts against ``MAX_CONNECTIONS`` (one past it is
    closed as it comes) and is closed when no request of it has been under
    way for the keep-alive timeout: uvicorn would keep one that sends
    nothing, or a request head a byte at a time, for ever."""

    _waiting: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        super().connection_made(transport)
        if len(self.connections) > MAX_CONNECTIONS:
            transport.close()
            return
        self._wait_for_a_request()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._wait_for_a_request()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._waiting is not None:
            self._waiting.cancel()
        super().connection_lost(exc)

    def _wait_for_a_request(self) -> None:
        if self._waiting is not None:
            self._waiting.cancel()
        self._waiting = self.loop.call_later(self.timeout_keep_alive, self._close_if_idle)

    def _close_if_idle(self) -> None:
        # A request under way restarts the wait when its response is sent.
        if self.cycle is None or self.cycle.response_complete:
            self.transport.close()


class _Embedded(uvicorn.Server):
    """A server that leaves signals to its host: the daemon drains on
    SIGTERM itself, and stops the inspector by cancelling it."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve_inspector(
    stores: Stores,
    listen: str,
    token: str | None = None,
    *,
    embedded: bool = False,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the inspector over the runs *stores* opens, on *listen*, until
    cancelled (*embedded*) or interrupted; started once it listens."""
    sock = _bind(listen, token)
    host, port = sock.getsockname()[:2]
    config = uvicorn.Config(
        create_app(stores, token),
        http=_Bounded,
        log_level="warning",
        lifespan="off",
        access_log=False,
    )
    server = _Embedded(config) if embedded else uvicorn.Server(config)
    where = f"[{host}]" if ":" in host else host
    # The line a caller waits for: the address, with the port bound.
    log.warning("inspector on http://%s:%d/", where, port)
    with sock:
        task_status.started()
        await server.serve(sockets=[sock])
