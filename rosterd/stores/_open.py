"""The runs of a state location, for the commands that only read them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from .._errors import RosterError
from ..protocol import StateLocation
from ._interface import RunReader
from .files import FileRuns

__all__ = ("read_state_runs",)


@asynccontextmanager
async def read_state_runs(state: StateLocation) -> AsyncIterator[RunReader]:
    """The runs in *state* (a directory or a ``postgresql://`` URL), readable
    until the block ends."""
    if isinstance(state, str):
        # psycopg loads only for a database.
        from .postgres import read_runs

        async with read_runs(state) as runs:
            yield runs
        return
    if not state.is_dir():
        raise RosterError(f"{state}: no such state directory")
    yield FileRuns(state)
