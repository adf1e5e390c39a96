"""Where the daemon listens, when neither side was told a path."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

__all__ = ("default_socket_path",)


def default_socket_path(state: Path, environ: Mapping[str, str]) -> Path:
    """``$RUNTIME_DIRECTORY/rosterd.sock`` under systemd, else ``<state>/rosterd.sock``."""
    runtime = environ.get("RUNTIME_DIRECTORY", "").split(":")[0]
    return Path(runtime) / "rosterd.sock" if runtime else state / "rosterd.sock"
