"""Serving the inspector: one socket, uvicorn on the daemon's event loop."""

from __future__ import annotations

import logging
import socket
from functools import partial

import uvicorn

from .._errors import RosterError
from ..org import is_loopback, listen_address
from ..protocol import StateLocation
from ..stores import read_state_runs
from ._app import create_app

__all__ = ("serve_inspector",)

log = logging.getLogger("rosterd.inspect")


def bind(listen: str, token: str | None) -> socket.socket:
    """A listening socket for *listen*; off loopback only with a token."""
    try:
        host, port = listen_address(listen)
    except ValueError as exc:
        raise RosterError(str(exc)) from None
    if token is None and not is_loopback(host):
        raise RosterError(
            f"the inspector would listen on {host}, which is not loopback: give it a token "
            "(--token-file) so that only those who hold it can read the runs"
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


async def serve_inspector(
    state: StateLocation, listen: str, token: str | None = None, *, announce: bool = True
) -> None:
    """Serve the inspector over the runs in *state* until cancelled."""
    sock = bind(listen, token)
    host, port = sock.getsockname()[:2]
    app = create_app(partial(read_state_runs, state), token)
    config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
    server = uvicorn.Server(config)
    if announce:
        where = f"[{host}]" if ":" in host else host
        # The one line a caller waits for: the address, with the port bound.
        log.warning("inspector on http://%s:%d/", where, port)
    with sock:
        await server.serve(sockets=[sock])
