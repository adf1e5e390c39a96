"""Where the state lives: each store backend, registered by URL scheme.

A ``--state`` value is a directory (or a ``file://`` URL) or a database URL
(``protocol.state_location``); ``backend`` picks the one registered for its
scheme, and every caller goes through it: the daemon opens every store and
writes, a reader (``roster server runs``, ``stats``, the inspector) opens
only the runs and writes, locks and migrates nothing. A new backend is one
entry of ``BACKENDS``, its two openers, and the store contract tests.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.to_thread

from .._errors import ConfigError, RosterError
from ..protocol import StateLocation
from ._interface import RunReader, State
from .files import FileRuns, FileState

# A request waits this long for a database connection: an outage fails
# turns in seconds, and the daemon serves on once it is over.
_DATABASE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Backend:
    """One way to keep the state: opened whole for a daemon, or its runs
    alone for a reader."""

    open_state: Callable[[StateLocation], AbstractAsyncContextManager[State]]
    read_runs: Callable[[StateLocation], AbstractAsyncContextManager[RunReader]]


def backend(location: StateLocation) -> Backend:
    """The backend registered for *location*'s scheme."""
    scheme = "file" if isinstance(location, Path) else location.partition("://")[0]
    found = BACKENDS.get(scheme)
    if found is None:
        known = ", ".join(f"{name}://" for name in BACKENDS)
        raise RosterError(f"no state backend for {scheme}:// (known: {known})")
    return found


def open_state(location: StateLocation) -> AbstractAsyncContextManager[State]:
    """Every store of *location*, for a daemon."""
    return backend(location).open_state(location)


def read_state_runs(location: StateLocation) -> AbstractAsyncContextManager[RunReader]:
    """The runs of *location*, readable until the block ends."""
    return backend(location).read_runs(location)


@asynccontextmanager
async def _open_files(location: StateLocation) -> AsyncIterator[State]:
    assert isinstance(location, Path)
    directory, lock = await anyio.to_thread.run_sync(_lock_directory, location)
    try:
        async with FileState(directory) as files:
            yield files
    finally:
        os.close(lock)


@asynccontextmanager
async def _read_files(location: StateLocation) -> AsyncIterator[RunReader]:
    assert isinstance(location, Path)
    if not location.is_dir():
        raise RosterError(f"{location}: no such state directory")
    yield FileRuns(location)


@asynccontextmanager
async def _open_database(location: StateLocation) -> AsyncIterator[State]:
    assert isinstance(location, str)
    # psycopg loads for a database only.
    from .postgres import PostgresState

    async with PostgresState(location, timeout=_DATABASE_TIMEOUT_S) as database:
        yield database


@asynccontextmanager
async def _read_database(location: StateLocation) -> AsyncIterator[RunReader]:
    assert isinstance(location, str)
    from .postgres import read_runs

    async with read_runs(location) as runs:
        yield runs


def _lock_directory(state: Path) -> tuple[Path, int]:
    """Create and lock the state directory: one daemon per state, ever."""
    state = state.resolve()
    try:
        state.mkdir(parents=True, exist_ok=True, mode=0o700)
    except (FileExistsError, NotADirectoryError):
        # It, or a directory it would be in, is a file.
        raise ConfigError(f"{state}: not a directory for the state", path=str(state)) from None
    fd = os.open(state / "rosterd.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ConfigError(
            f"{state}: another rosterd is using this state directory", path=str(state)
        ) from None
    return state, fd


_DATABASE = Backend(_open_database, _read_database)
BACKENDS: dict[str, Backend] = {
    "file": Backend(_open_files, _read_files),
    "postgresql": _DATABASE,
    "postgres": _DATABASE,
}
