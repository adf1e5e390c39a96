"""Where the state is and where the daemon listens, when neither side was told a path."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from .._errors import RosterError

__all__ = ("StateLocation", "default_socket_path", "state_location")

# A state directory, or the URL of a PostgreSQL database several hosts share.
StateLocation = Path | str

_DATABASE_SCHEMES = ("postgresql://", "postgres://")


def state_location(value: str) -> StateLocation:
    """``--state`` / ``ROSTER_STATE`` as given: a database URL stays a string."""
    return value if value.startswith(_DATABASE_SCHEMES) else Path(value)


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
