"""Where the state is and where the daemon listens, when neither side was told a path."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from .._errors import RosterError

# A state directory, or the URL of a database several hosts share (which
# schemes have a backend is the stores' to say: ``stores.BACKENDS``).
StateLocation = Path | str

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def state_location(value: str) -> StateLocation:
    """``--state`` / ``ROSTER_STATE`` as given: a URL stays a string, but for
    ``file://`` and a plain path, which name a directory."""
    if value.startswith("file://"):
        return Path(value.removeprefix("file://"))
    return value if _URL.match(value) else Path(value)


def default_socket_path(state: StateLocation, environ: Mapping[str, str]) -> Path:
    """``$RUNTIME_DIRECTORY/rosterd.sock`` under systemd, else ``<state>/rosterd.sock``.

    A database has no directory of its own to hold the socket: then one
    must be named (``--socket`` / ``ROSTER_SOCKET``) outside systemd.
    """
    runtime = environ.get("RUNTIME_DIRECTORY", "").split(":")[0]
    if runtime:
        return Path(runtime) / "rosterd.sock"
    if isinstance(state, str):
        raise RosterError(
            "with the state in a database, name the socket: --socket PATH or ROSTER_SOCKET"
        )
    return state / "rosterd.sock"
