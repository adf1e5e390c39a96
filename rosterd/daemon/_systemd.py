"""The systemd service protocol without libsystemd: sd_notify, watchdog, socket activation.

Everything degrades to a no-op outside systemd, so the daemon runs the same
from a terminal. The environment variables are popped as they are consumed:
a child process (an engine helper, a shell) must never notify or take over
sockets on the daemon's behalf.
"""

from __future__ import annotations

import logging
import os
import re
import socket
from collections.abc import Mapping, MutableMapping

import anyio
from anyio.abc import AsyncResource, ConnectedUNIXDatagramSocket

from .._errors import ConfigError

log = logging.getLogger("rosterd.daemon")

SD_LISTEN_FDS_START = 3
# systemd reads notifications into a PIPE_BUF-sized buffer and drops longer ones.
_DATAGRAM_MAX = 4096
# Worst case four bytes per character keeps STATUS= well inside one datagram.
_STATUS_MAX = 512
_FIELD = re.compile(r"[A-Z][A-Z0-9_]*")
# A service manager that takes no more datagrams (its queue full) must not
# hold up the daemon, least of all its stop: what finds no room is dropped.
_SEND_TIMEOUT_S = 1.0


class Notifier(AsyncResource):
    """Sends sd_notify datagrams (``READY=1``, ``STATUS=...``) to ``$NOTIFY_SOCKET``.

    Build it with :meth:`from_env` and use it as an async context manager; the
    socket is connected on first use. Without ``NOTIFY_SOCKET`` every call is
    a no-op returning ``False``. A notify socket that cannot be reached, or
    has no room for a datagram within a second, is logged, never raised: the
    daemon keeps serving (or stopping) and systemd's own start or watchdog
    timeout reports the problem.
    """

    def __init__(self, address: str | None) -> None:
        self._address = address
        self._socket: ConnectedUNIXDatagramSocket | None = None
        self._lock = anyio.Lock()
        self._closed = False

    @classmethod
    def from_env(cls, environ: MutableMapping[str, str] = os.environ) -> Notifier:
        address = environ.pop("NOTIFY_SOCKET", "")
        if address.startswith(("/", "@")) and len(address) > 1:
            return cls(address)
        if address:
            log.warning("NOTIFY_SOCKET=%r is not a unix socket; notifications disabled", address)
        return cls(None)

    @property
    def enabled(self) -> bool:
        return self._address is not None

    def __repr__(self) -> str:
        if self._closed:
            state = "closed"
        elif self._socket is not None:
            state = "connected"
        else:
            state = "idle" if self.enabled else "disabled"
        return f"Notifier(address={self._address!r}, state={state!r})"

    async def aclose(self) -> None:
        self._closed = True
        if self._socket is not None:
            await self._socket.aclose()
            self._socket = None

    async def notify(self, **fields: str) -> bool:
        """Send one datagram of ``KEY=value`` lines, in argument order.

        Returns whether a datagram was sent. Raises ``ValueError`` for a key
        that is not an upper-case name or a value that would start a new line.
        """
        for key, value in fields.items():
            if not _FIELD.fullmatch(key) or "\n" in value:
                raise ValueError(f"not a notification field: {key}={value!r}")
        payload = "".join(f"{key}={value}\n" for key, value in fields.items()).encode()
        if not payload or len(payload) > _DATAGRAM_MAX:
            raise ValueError(f"notification of {len(payload)} bytes, allowed 1-{_DATAGRAM_MAX}")
        async with self._lock:
            if self._closed:
                raise anyio.ClosedResourceError
            if self._address is None:
                return False
            try:
                with anyio.fail_after(_SEND_TIMEOUT_S):
                    if self._socket is None:
                        self._socket = await anyio.create_connected_unix_datagram_socket(
                            _sockaddr(self._address)
                        )
                    await self._socket.send(payload)
            except TimeoutError:
                log.warning(
                    "cannot notify systemd at %s: no room within %.0f s; dropped %s",
                    self._address,
                    _SEND_TIMEOUT_S,
                    payload.split(b"\n", 1)[0].decode(errors="replace"),
                )
                return False
            except (OSError, anyio.BrokenResourceError) as exc:
                log.warning("cannot notify systemd at %s: %s", self._address, exc)
                return False
            return True

    async def ready(self, status: str | None = None) -> bool:
        """Startup is complete: send only once the socket is bound and state recovered."""
        if status is None:
            return await self.notify(READY="1")
        return await self.notify(READY="1", STATUS=_status_line(status))

    async def stopping(self, status: str | None = None) -> bool:
        if status is None:
            return await self.notify(STOPPING="1")
        return await self.notify(STOPPING="1", STATUS=_status_line(status))

    async def watchdog(self) -> bool:
        return await self.notify(WATCHDOG="1")

    async def status(self, text: str) -> bool:
        """Free-form text for ``systemctl status``; flattened to one line and shortened."""
        return await self.notify(STATUS=_status_line(text))


def watchdog_interval(environ: Mapping[str, str] = os.environ) -> float | None:
    """The watchdog timeout in seconds, or ``None`` when this process is not watched.

    The daemon pings at half this interval. The variables are left in place:
    without ``NOTIFY_SOCKET`` a child could not ping anyway, and
    ``WATCHDOG_PID`` already names the one process meant.
    """
    usec = environ.get("WATCHDOG_USEC")
    if usec is None:
        return None
    pid = environ.get("WATCHDOG_PID")
    if pid is not None and not _is_own_pid(pid):
        return None
    try:
        value = int(usec)
    except ValueError:
        log.warning("ignoring WATCHDOG_USEC=%r: not an integer", usec)
        return None
    if value <= 0:
        return None
    return value / 1_000_000


def listen_fds(environ: MutableMapping[str, str] = os.environ) -> list[socket.socket]:
    """The sockets systemd passed (socket activation), or ``[]``.

    Like ``sd_listen_fds(1)``, the ``LISTEN_*`` variables are removed whether or
    not they were meant for this process, so no child sees them. The fds are
    made close-on-exec. A malformed ``LISTEN_FDS`` addressed to us, or an fd
    that is not a socket, is a ``ConfigError``: falling back to binding our own
    socket would silently race the one systemd holds.
    """
    pid = environ.pop("LISTEN_PID", None)
    count = environ.pop("LISTEN_FDS", None)
    environ.pop("LISTEN_FDNAMES", None)
    if pid is None or count is None or not _is_own_pid(pid):
        return []
    try:
        n = int(count)
    except ValueError:
        n = -1
    if n < 0:
        raise ConfigError(
            f"LISTEN_FDS={count!r} is not a count of file descriptors",
            path="environment",
            key="LISTEN_FDS",
        )
    sockets: list[socket.socket] = []
    for fd in range(SD_LISTEN_FDS_START, SD_LISTEN_FDS_START + n):
        try:
            os.set_inheritable(fd, False)
            sockets.append(socket.socket(fileno=fd))
        except OSError as exc:
            for sock in sockets:
                sock.close()
            raise ConfigError(
                f"systemd passed fd {fd}, which is not a usable socket: {exc}",
                path="environment",
                key="LISTEN_FDS",
            ) from exc
    return sockets


def _sockaddr(address: str) -> str:
    # A leading "@" names a socket in the Linux abstract namespace.
    return "\0" + address[1:] if address.startswith("@") else address


def _status_line(text: str) -> str:
    return " ".join(text.split())[:_STATUS_MAX]


def _is_own_pid(value: str) -> bool:
    try:
        return int(value) == os.getpid()
    except ValueError:
        return False
