"""A real IRC server for the bridge's tests: miniircd, from PyPI, as a child
process on a port of its own, with users that speak to it through an IRC
client library (the ``irc`` package, by way of ``rosterd.bridge.IrcLink``)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from rosterd.bridge import IrcLink, IrcMessage, Rate

# Lines go out as fast as they come: for tests that are not about the pace.
UNPACED = Rate(5, 0.0)

__all__ = ("IrcServer", "heard", "user")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class IrcServer:
    """``miniircd`` on 127.0.0.1, started and stopped (and restarted) on demand."""

    def __init__(self, pem: Path | None = None) -> None:
        found = shutil.which("miniircd", path=str(Path(sys.executable).parent))
        if found is None:
            pytest.fail("no miniircd for the IRC tests: pip install miniircd", pytrace=False)
        self._command = [found, "--listen", "127.0.0.1", "--verbose"]
        if os.geteuid() == 0:
            # miniircd refuses to run as root.
            self._command += ["--setuid", "nobody"]
        if pem is not None:
            # TLS with this key and certificate chain.
            self._command += ["--ssl-pem-file", str(pem)]
        self.tls = pem is not None
        self.port = _free_port()
        self.process: subprocess.Popen[str] | None = None

    def __repr__(self) -> str:
        return f"IrcServer(port={self.port})"

    def start(self) -> IrcServer:
        self.process = subprocess.Popen(
            [*self._command, "--ports", str(self.port)], stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        # It says so once its socket listens.
        line = self.process.stdout.readline()
        assert line.startswith("Listening on port"), line
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.communicate(timeout=10)
            self.process = None


def user(server: IrcServer, nick: str, *channels: str) -> IrcLink:
    """Someone in *channels*, saying lines the moment they are given."""
    return IrcLink(
        "127.0.0.1", server.port, nick, list(channels), tls=server.tls, send_rate=UNPACED
    )


async def heard(
    who: IrcLink, match: Callable[[IrcMessage], bool], *, within: float = 20.0
) -> IrcMessage:
    """The next line *who* hears that *match*es (others are passed over)."""
    with anyio.fail_after(within):
        async for message in who.messages:
            if match(message):
                return message
    raise AssertionError("the link closed")


async def lines_from(
    who: IrcLink, nick: str, count: int, *, within: float = 20.0
) -> list[tuple[float, IrcMessage]]:
    """The next *count* lines *nick* says where *who* hears them, with when."""
    got: list[tuple[float, IrcMessage]] = []
    with anyio.fail_after(within):
        async for message in who.messages:
            if message.nick == nick:
                got.append((anyio.current_time(), message))
                if len(got) == count:
                    return got
    raise AssertionError(f"the link closed after {len(got)} of {count} lines")
